"""Suggestions from the system's own trained policies (``transferlab review propose``).

A trained policy looks at today's market and ranks the campaign catalog; its top choices become
suggestions, each with the evidence a reviewer needs::

    obs      = market_observation(logs_dir, market_dir)      # OBS_KEYS + the share of the episode left
    policy   = load_policy(path)                             # a PPO policy.pt or an offline learner dir
    ranked   = policy.ranked(obs)                            # catalog indices, best first (+ scores)
    for each of the top n campaigns:
        predicted, uplift = predict_evidence(sim, index, obs, ...)   # the learned simulator's outcome
                                  # intervals, and the uplift vs doing nothing and vs the marketer, paired
        ope       = ope_evidence(run_dir, learner)           # the offline run's SNDR estimate and coverage
        suggestion = {action, reasoning, confidence, risk, evidence}
    service.submit(actor, suggestion) for each

**The market state.** With a market directory, the gateway's replayed present
(``MarketGateway.world().observe()``); without one, the last logged decision's context (the
``ctx_*`` columns of the log's campaign table). The share of the episode left is 1.0: the
suggestion starts a new 30-day stretch. The learned simulator itself always starts from the end of
the logs (it cannot see the world's hidden present), with the logged world's number of customers.

**Which choices.** A PPO policy ranks by its action probabilities; an offline Q-learner by its
Q-values, behaviour cloning by its classifier's probabilities; a continuous learner gives only its
one action (mapped to the catalog). "No campaign" (catalog index 0) is never queued: there is
nothing to execute.

**Confidence** (a number in [0, 1], documented so reviewers can read it)::

    base  = 0.9 if the OPE estimate is trusted, 0.35 if untrusted, 0.6 without OPE
    width = (high - low) / max(|estimate|, 1)   of the OPE interval, else of the predicted profit
    confidence = clip(base * (1 - 0.5 * min(width, 1)) * 0.9 ** rank, 0.05, 0.95)

so a wide interval halves it at most, and each lower-ranked choice loses 10 %.

**Risk.** The proposer claims :func:`~transferlab.human_review.schema.classify_risk` of its own
evidence; the service recomputes it anyway and keeps the higher of the two.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from transferlab.human_review.schema import ActionSpec, Evidence, Interval, classify_risk
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, OBS_KEYS, OUTCOME_KEYS

if TYPE_CHECKING:
    from transferlab.human_review.service import ReviewService, User
    from transferlab.simulator.learned import LearnedSimulator

__all__ = [
    "LoadedPolicy",
    "ProposeError",
    "build_suggestions",
    "confidence_from",
    "load_policy",
    "market_observation",
    "ope_evidence",
    "predict_campaign",
    "predict_evidence",
    "predict_uplift",
    "propose",
]

OPE_ESTIMATOR = "sndr"
PREDICT_ENVS = 16
PREDICT_QUANTILES = (0.1, 0.9)
"""The predicted interval: 10th to 90th percentile over ``PREDICT_ENVS`` simulated markets."""


class ProposeError(ValueError):
    """A policy, log, simulator or market path that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class LoadedPolicy:
    """A trained policy, ready to rank the catalog at one observation.

    Attributes:
        kind: ``"ppo"`` or ``"offline"``.
        name: the policy's name (``ppo`` or the learner's name).
        path: where it was loaded from.
        run_dir: the run directory holding it (the offline run, or the PPO run).
        score_name: what the scores are (``probability``, ``Q-value``), or None when there are none.
        scores: ``obs (OBS_DIM,) -> (len(CATALOG),)`` scores, or None (a continuous learner).
        act: ``obs (OBS_DIM,) -> catalog index`` of the policy's own (greedy) choice.
    """

    kind: str
    name: str
    path: Path
    run_dir: Path
    score_name: str | None
    scores: Callable[[np.ndarray], np.ndarray] | None
    act: Callable[[np.ndarray], int]

    def ranked(self, obs: np.ndarray) -> list[tuple[int, float | None]]:
        """Catalog indices best first (the greedy choice first), with their scores when known."""
        chosen = self.act(obs)
        if self.scores is None:
            return [(chosen, None)]
        scores = np.asarray(self.scores(obs), dtype=np.float64)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) != chosen]
        return [(i, float(scores[i])) for i in [chosen, *order]]


def load_policy(path: Path) -> LoadedPolicy:
    """A PPO ``policy.pt`` (``transferlab sim train``) or an offline learner directory
    (``transferlab offline train``: ``<run>/learners/<name>/``)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".pt":
        return _ppo_policy(path)
    if path.is_dir() and (path / "model.d3").is_file():
        return _offline_policy(path)
    if path.is_dir() and (path / "policy.pt").is_file():
        return _ppo_policy(path / "policy.pt")
    raise ProposeError(
        f"{path} is neither a PPO policy (policy.pt from `transferlab sim train`) nor an offline learner "
        "directory (<run>/learners/<name>/ from `transferlab offline train`)"
    )


def _ppo_policy(path: Path) -> LoadedPolicy:
    import torch

    from transferlab.simulator.train import CampaignPolicy

    try:
        net = CampaignPolicy.load(path)
    except Exception as exc:
        raise ProposeError(f"{path} is not a policy saved by `transferlab sim train`: {exc}") from None

    def probs(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            logits, _ = net(torch.as_tensor(obs[None, :], dtype=torch.float32))
        return torch.softmax(logits.double(), -1).numpy()[0]

    def act(obs: np.ndarray) -> int:
        return int(np.argmax(probs(obs)))

    return LoadedPolicy("ppo", "ppo", path, path.parent, "probability", probs, act)


def _offline_policy(path: Path) -> LoadedPolicy:
    from transferlab.offline.evaluate import LearnerPolicy, quiet_d3rlpy
    from transferlab.offline.learners import DiscreteBCConfig, load_learner

    quiet_d3rlpy()
    try:
        learner = load_learner(path)
    except (OSError, ValueError) as exc:
        raise ProposeError(str(exc)) from None
    actor = LearnerPolicy(learner)
    run_dir = path.parent.parent if path.parent.name == "learners" else path.parent

    def act(obs: np.ndarray) -> int:
        return int(actor.actions(obs[None, :].astype(np.float32))[0])

    scores: Callable[[np.ndarray], np.ndarray] | None = None
    score_name: str | None = None
    if learner.kind == "discrete" and isinstance(learner.config, DiscreteBCConfig):
        score_name = "probability"

        def scores(obs: np.ndarray) -> np.ndarray:
            return learner.action_probabilities(obs[None, :].astype(np.float32))[0]

    elif learner.kind == "discrete":
        score_name = "Q-value"

        def scores(obs: np.ndarray) -> np.ndarray:
            x = np.repeat(obs[None, :].astype(np.float32), len(CATALOG), axis=0)
            return np.asarray(learner.algo.predict_value(x, np.arange(len(CATALOG))), dtype=np.float64)

    return LoadedPolicy("offline", learner.config.name, path, run_dir, score_name, scores, act)


def market_observation(logs_dir: Path, market_dir: Path | None = None) -> np.ndarray:
    """Today's market as the environment's observation: ``OBS_KEYS`` values and 1.0 (time left)."""
    if market_dir is not None:
        from transferlab.human_review.gateway import MarketGateway

        try:
            state = MarketGateway(Path(market_dir)).world().observe()
        except FileNotFoundError:
            raise ProposeError(
                f"no market in {market_dir}: create one with "
                f"`transferlab review market init --dir {market_dir} --logs LOGS_DIR`"
            ) from None
        values = [float(state[k]) for k in OBS_KEYS]
    else:
        import pandas as pd

        file = Path(logs_dir) / "campaigns.parquet"
        if not file.is_file():
            raise ProposeError(f"{file} is missing: make the logs with `transferlab sim generate-logs`")
        campaigns = pd.read_parquet(file, columns=[f"ctx_{k}" for k in OBS_KEYS])
        values = [float(campaigns[f"ctx_{k}"].iloc[-1]) for k in OBS_KEYS]
    return np.array([*values, 1.0], dtype=np.float64)


UPLIFT_KEYS = tuple(k for k in OUTCOME_KEYS if k in DAY_KEYS)
"""The outcomes whose shop-wide daily totals the simulator reports (money, counts), so an uplift over
a baseline can be measured on them; satisfaction and retention are per campaign and have none."""


def _launch(
    sim: LearnedSimulator, actions: np.ndarray, *, n_customers: int, seed: int
) -> tuple[np.ndarray, Any]:
    """``actions`` launched on the first day of ``len(actions)`` markets (each starting from the end of
    the logs), then ``maturity_days`` quiet days: the shop-wide totals (n_envs, len(DAY_KEYS)) and the
    markets (whose campaign book holds the campaigns' own outcomes)."""
    market = sim.market(n_envs=len(actions), n_customers=n_customers, seed=seed)
    market.reset(seed)
    total = market.step(actions.astype(np.int64))
    noop = np.zeros(len(actions), dtype=np.int64)
    for _ in range(int(sim.params.maturity_days)):
        total = total + market.step(noop)
    return total, market


def _summary(values: np.ndarray) -> dict[str, float]:
    """Mean and 10th/90th percentiles (the interval widened to hold the mean)."""
    mean = float(values.mean())
    low, high = (float(np.quantile(values, q)) for q in PREDICT_QUANTILES)
    return {"estimate": mean, "low": min(low, mean), "high": max(high, mean)}


def _campaign_outcomes(market: Any) -> dict[str, dict[str, float]]:
    """Per outcome key of the launched campaigns, :func:`_summary` across markets (keys whose values
    are not all finite, e.g. retention not yet known, are left out)."""
    frame = market.campaign_outcomes().frame()
    out: dict[str, dict[str, float]] = {}
    for key in OUTCOME_KEYS:
        values = frame[key].to_numpy(dtype=np.float64)
        if len(values) and np.isfinite(values).all():
            out[key] = _summary(values)
    return out


def predict_campaign(
    sim: LearnedSimulator, index: int, *, n_customers: int, n_envs: int = PREDICT_ENVS, seed: int = 0
) -> dict[str, dict[str, float]]:
    """The learned simulator's outcome vector for launching catalog ``index`` today, once matured:
    per outcome key the mean and the 10th/90th percentiles across ``n_envs`` markets."""
    _, market = _launch(sim, np.full(n_envs, int(index)), n_customers=n_customers, seed=seed)
    return _campaign_outcomes(market)


def marketer_actions(obs: np.ndarray, epsilon: float, n: int, seed: int) -> np.ndarray:
    """``n`` draws of what the shop's marketer (the logging policy) would do in this state; sales
    are taken as at their usual level (the state's own 7-day GMV as the baseline)."""
    from transferlab.simulator.behaviour import MarketerPolicy

    state = dict(zip(OBS_KEYS, (float(x) for x in obs[: len(OBS_KEYS)]), strict=True))
    probs = MarketerPolicy(epsilon=epsilon).probabilities(state, gmv_baseline=state["gmv_7d"])
    return np.random.default_rng(seed).choice(len(probs), size=n, p=probs).astype(np.int64)


def _uplifts(
    sim: LearnedSimulator, mine: np.ndarray, obs: np.ndarray, *, n_customers: int, epsilon: float, seed: int
) -> dict[str, dict[str, dict[str, float]]]:
    """The campaign's window totals ``mine`` against doing nothing and against the marketer's choice,
    on the same markets and seed, per baseline and ``UPLIFT_KEYS`` key."""
    n_envs = len(mine)
    baselines = {
        "no_campaign": np.zeros(n_envs, dtype=np.int64),
        "current": marketer_actions(obs, epsilon, n_envs, seed),
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, actions in baselines.items():
        diff = mine - _launch(sim, actions, n_customers=n_customers, seed=seed)[0]
        out[name] = {key: _summary(diff[:, DAY_KEYS.index(key)]) for key in UPLIFT_KEYS}
    return out


def predict_uplift(
    sim: LearnedSimulator,
    index: int,
    obs: np.ndarray,
    *,
    n_customers: int,
    epsilon: float = 0.1,
    n_envs: int = PREDICT_ENVS,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, float]]]:
    """The campaign's uplift in shop-wide totals over its window against doing nothing and against the
    marketer's own choice, paired market by market (the same simulated markets and seed for each arm):
    per baseline and ``UPLIFT_KEYS`` key, the mean difference and its 10th/90th percentiles."""
    return predict_evidence(
        sim, index, obs, n_customers=n_customers, epsilon=epsilon, n_envs=n_envs, seed=seed
    )[1]


def predict_evidence(
    sim: LearnedSimulator,
    index: int,
    obs: np.ndarray,
    *,
    n_customers: int,
    epsilon: float = 0.1,
    n_envs: int = PREDICT_ENVS,
    seed: int = 0,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """:func:`predict_campaign` and :func:`predict_uplift` from one run of the campaign's markets."""
    mine, market = _launch(sim, np.full(n_envs, int(index)), n_customers=n_customers, seed=seed)
    uplift = _uplifts(sim, mine, obs, n_customers=n_customers, epsilon=epsilon, seed=seed)
    return _campaign_outcomes(market), uplift


def ope_evidence(run_dir: Path, learner: str, estimator: str = OPE_ESTIMATOR) -> dict[str, Any] | None:
    """The offline run's OPE of ``learner`` (``result.json``): estimate, interval, trusted, ESS.

    None when the run has no result, the learner no OPE row, or the estimate is not finite.
    """
    result = Path(run_dir) / "result.json"
    if not result.is_file():
        return None
    row = json.loads(result.read_text()).get("policies", {}).get(learner, {})
    est = (row.get("ope") or {}).get(estimator)
    cov = row.get("coverage") or {}
    if not est or not all(isinstance(est.get(k), int | float) for k in ("estimate", "low", "high")):
        return None
    if not all(math.isfinite(est[k]) for k in ("estimate", "low", "high")):
        return None
    logged = json.loads(result.read_text()).get("logged_value") or {}
    ope: dict[str, Any] = {
        "estimator": estimator,
        "estimate": float(est["estimate"]),
        "low": float(min(est["low"], est["estimate"])),
        "high": float(max(est["high"], est["estimate"])),
        "trusted": bool(cov.get("trusted", False)),
    }
    if isinstance(cov.get("ess"), int | float) and math.isfinite(cov["ess"]):
        ope["ess"] = float(cov["ess"])
    if isinstance(cov.get("ess_share"), int | float) and math.isfinite(cov["ess_share"]):
        ope["ess_share"] = float(cov["ess_share"])
    if isinstance(logged.get("estimate"), int | float) and math.isfinite(logged["estimate"]):
        ope["behaviour"] = float(logged["estimate"])
    return ope


def confidence_from(ope: dict[str, Any] | None, predicted: dict[str, dict[str, float]], rank: int) -> float:
    """The documented confidence rule (see the module docstring).

    >>> confidence_from({"estimate": 10.0, "low": 8.0, "high": 12.0, "trusted": True}, {}, 0)
    0.72
    >>> confidence_from(None, {}, 1)
    0.27
    """
    base = 0.6 if ope is None else (0.9 if ope["trusted"] else 0.35)
    iv = ope if ope is not None else predicted.get("profit")
    width = 1.0 if iv is None else (iv["high"] - iv["low"]) / max(abs(iv["estimate"]), 1.0)
    value = base * (1.0 - 0.5 * min(width, 1.0)) * 0.9**rank
    return round(min(max(value, 0.05), 0.95), 3)


def _fmt(iv: dict[str, float] | None, digits: int = 2) -> str:
    if iv is None:
        return "n/a"
    return f"{iv['estimate']:.{digits}f} [{iv['low']:.{digits}f}, {iv['high']:.{digits}f}]"


def _reasoning(
    policy: LoadedPolicy,
    rank: int,
    score: float | None,
    spec: ActionSpec,
    predicted: dict[str, dict[str, float]],
    ope: dict[str, Any] | None,
    confidence: float,
) -> str:
    """Plain text from the evidence (shown as text, never HTML)."""
    campaign = (
        f"{spec.discount:.0%} off {spec.category}, pushed at {spec.push_hour}:00 to {spec.segment} "
        f"customers with a budget of {spec.budget:.0f}"
    )
    which = "its own choice" if rank == 0 else f"its choice number {rank + 1}"
    scored = f" ({policy.score_name} {score:.3g})" if score is not None and policy.score_name else ""
    lines = [f"The {policy.kind} policy '{policy.name}' proposes {campaign}: {which} today{scored}."]
    if predicted:
        lines.append(
            f"The learned simulator predicts profit {_fmt(predicted.get('profit'))} and GMV "
            f"{_fmt(predicted.get('gmv'))} for this campaign once matured (mean [10th, 90th percentile] "
            f"over {PREDICT_ENVS} simulated markets)."
        )
    else:
        lines.append("No simulator prediction (no --simulator given).")
    if ope is not None:
        ess = f", ESS {ope['ess']:.0f}" if "ess" in ope else ""
        trust = "trusted" if ope["trusted"] else "NOT trusted: the logs barely cover this policy"
        lines.append(
            f"Off-policy evaluation ({ope['estimator']}) of the policy's 30-day return: "
            f"{_fmt(ope)}{ess}; {trust}."
        )
    else:
        lines.append("No off-policy estimate for this policy.")
    lines.append(f"Confidence {confidence:.2f} by the documented rule (OPE coverage and interval width).")
    return " ".join(lines)


def _uplift_sentence(uplift: dict[str, dict[str, dict[str, float]]]) -> str:
    """One sentence with the predicted profit uplift against each baseline ('' without a simulator)."""
    if not uplift:
        return ""
    none, now = uplift["no_campaign"]["profit"], uplift["current"]["profit"]
    return (
        f" Over its window it changes the shop's profit by {_fmt(none)} against doing nothing and by "
        f"{_fmt(now)} against what the shop's marketer would do today (same simulated markets)."
    )


def build_suggestions(
    policy: LoadedPolicy,
    obs: np.ndarray,
    *,
    n: int = 3,
    simulator: LearnedSimulator | None = None,
    n_customers: int = 1000,
    ope: dict[str, Any] | None = None,
    epsilon: float = 0.1,
) -> list[dict[str, Any]]:
    """Up to ``n`` suggestions (JSON-able dicts for ``ReviewService.submit``), best first."""
    if n < 1:
        raise ProposeError(f"n={n} must be at least 1")
    choices = [(i, s) for i, s in policy.ranked(obs) if i != 0][:n]
    out = []
    for rank, (index, score) in enumerate(choices):
        campaign = CATALOG[index]
        spec = ActionSpec(
            discount=float(campaign.discount),
            push_hour=int(campaign.push_hour),
            segment=str(campaign.segment),
            budget=float(campaign.budget),
            category=str(campaign.category),
        )
        predicted, uplift = (
            predict_evidence(simulator, index, obs, n_customers=n_customers, epsilon=epsilon, seed=rank)
            if simulator is not None
            else ({}, {})
        )
        confidence = confidence_from(ope, predicted, rank)
        evidence = Evidence(
            predicted={k: Interval(**v) for k, v in predicted.items()},
            uplift={b: {k: Interval(**v) for k, v in row.items()} for b, row in uplift.items()},
            ope=ope,
            policy=f"{policy.kind}:{policy.name}",
            run_dir=str(policy.run_dir)[:500],
        )
        out.append(
            {
                "action": spec.model_dump(),
                "reasoning": _reasoning(policy, rank, score, spec, predicted, ope, confidence)
                + _uplift_sentence(uplift),
                "confidence": confidence,
                "risk": classify_risk(spec, evidence, confidence),
                "evidence": evidence.model_dump(),
            }
        )
    return out


def propose(
    service: ReviewService,
    actor: User,
    policy_path: Path,
    logs_dir: Path,
    *,
    simulator_dir: Path | None = None,
    n: int = 3,
    market_dir: Path | None = None,
) -> list[int]:
    """Queue up to ``n`` suggestions of the policy at ``policy_path`` as ``actor``; their ids."""
    logs_dir = Path(logs_dir)
    if not (logs_dir / "manifest.json").is_file():
        raise ProposeError(f"{logs_dir} is not a log directory from `transferlab sim generate-logs`")
    manifest = json.loads((logs_dir / "manifest.json").read_text())
    policy = load_policy(policy_path)
    obs = market_observation(logs_dir, market_dir)
    sim = None
    if simulator_dir is not None:
        from transferlab.simulator.learned import LearnedSimulator, SimulatorError

        try:
            sim = LearnedSimulator.load(simulator_dir)
        except (OSError, SimulatorError, ValueError) as exc:
            raise ProposeError(f"--simulator {simulator_dir}: {exc}") from None
    n_customers = int(manifest.get("world", {}).get("n_customers", 1000))
    ope = ope_evidence(policy.run_dir, policy.name) if policy.kind == "offline" else None
    epsilon = float(manifest.get("epsilon", 0.1))  # the marketer's exploration in these logs
    suggestions = build_suggestions(
        policy, obs, n=n, simulator=sim, n_customers=n_customers, ope=ope, epsilon=epsilon
    )
    return [service.submit(actor, s) for s in suggestions]

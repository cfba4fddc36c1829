"""Judge offline-learned campaign policies three ways: the world (truth), the learned simulator, OPE.

Every value is in one unit: the **30-day return** — the sum of the environment's daily rewards
(``RewardConfig``: profit minus $10 per complaint, x0.01) over an episode's ``horizon`` decision days.

- **World** (the truth): the policy runs ``episodes`` episodes in ``transferlab/CampaignWorld-v0``
  continuing after the logged history (``WorldMarket.from_manifest``). The return including the
  ``settle_days`` after the episode (delayed returns and complaints, demand pulled forward) is kept too.
- **Simulator**: the same episodes in a simulator learned from the logs, when one is given.
- **Off-policy evaluation** from the logs alone:
  - the bandit estimators of :mod:`transferlab.offline.ope` (DM, IPS, SNIPS, DR, SNDR, Switch-DR) on
    the logged decision days, each day a context, its action and its reward; the per-day value times
    the horizon. They ignore that today's campaign changes tomorrow's state and sales (the 7-30 day
    delay), which is part of their error here;
  - FQE from d3rlpy (``d3rlpy.ope.DiscreteFQE`` / ``FQE``), which does account for later days: it
    learns the policy's Q function on the logged episodes (gamma 1, terminal at the horizon) and
    averages ``Q(s0, pi(s0))`` over the episodes' first states.
  - the reward model of DM/DR is a gradient-boosted regression of the day reward on the state and the
    campaign's attributes, fitted on the logs.
- **Coverage** (:func:`transferlab.offline.ope.coverage`) of every policy on the logs: effective
  sample size, largest importance weight, probability mass on actions the logs (almost) never took.
  An estimate without support is marked untrustworthy, and :func:`select_policy` refuses it.

:func:`select_policy` picks the candidate with the highest *lower* confidence bound of its OPE
estimate among those the logs support (else keeps the behaviour policy) and reports the regret of that
choice in the world: the best candidate's world value minus the chosen one's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from transferlab.offline.datasets import OfflineDataset, continuous_to_catalog
from transferlab.offline.ope import (
    MIN_ESS_SHARE,
    BanditData,
    Coverage,
    Estimator,
    bootstrap_estimate,
    bootstrap_gain,
    coverage,
)
from transferlab.platform.config import BaseConfig
from transferlab.platform.stats import Interval, bootstrap_ci
from transferlab.simulator.envs.campaign import (
    BatchMarket,
    EpisodeConfig,
    RewardConfig,
    WorldMarket,
    run_policy,
    scalarize,
)
from transferlab.simulator.vocabulary import CATALOG, CATALOG_BUDGETS, CATALOG_HOURS, TARGETS

if TYPE_CHECKING:
    from d3rlpy.dataset import MDPDataset

    from transferlab.offline.learners import Learner
    from transferlab.simulator.logs import Logs

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]
Progress = Callable[[str, float], None]

#: The bandit estimators, in table order.
BANDIT_ESTIMATORS: tuple[Estimator, ...] = ("dm", "ips", "snips", "dr", "sndr", "switch_dr")
#: Every OPE estimate of a policy, in table order.
OPE_ESTIMATORS: tuple[str, ...] = (*BANDIT_ESTIMATORS, "fqe")
#: Seeds of the world and simulator evaluation episodes start here (disjoint from anything else).
EVAL_SEED = 7_000


class OfflineEvalConfig(BaseConfig):
    """How learned policies are evaluated (saved with every evaluation)."""

    episodes: int = Field(
        48, ge=2, le=4096, description="Episodes per policy in the world and the simulator."
    )
    seed: int = Field(0, ge=0, description="Seeds the evaluation markets, bootstraps and FQE.")
    n_boot: int = Field(1000, ge=100, description="Bootstrap resamples of every OPE interval.")
    level: float = Field(0.95, gt=0, lt=1, description="Confidence level of the intervals.")
    switch_tau: float = Field(10.0, gt=0, description="Switch-DR keeps the correction where w <= tau.")
    fqe_steps: int = Field(3000, ge=0, description="Gradient steps of FQE per policy (0: skip FQE).")
    fqe_gamma: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="Discount of FQE's estimate (and of the world value it is compared with). With "
        "gamma=1 over 30 days d3rlpy's FQE diverged or had not converged in 5000 steps on these logs.",
    )
    min_ess_share: float = Field(
        MIN_ESS_SHARE,
        gt=0,
        le=1,
        description="Coverage fails below this effective sample size (share of the logged days). The "
        "default is the one threshold of every OPE protocol here (ope.MIN_ESS_SHARE, also OBD's), fixed "
        "before the evaluation it gates.",
    )
    select_by: str = Field(
        "sndr",
        description="The OPE estimator whose lower bound of the gain over the behaviour policy picks the "
        "policy (one of BANDIT_ESTIMATORS).",
    )
    episode: EpisodeConfig = Field(
        default_factory=lambda: EpisodeConfig(warmup_days=0),
        description="Episode shape in the world and the simulator (horizon = the dataset's).",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Outcome weights and scale.")


# ----------------------------------------------------------------------------------- policies


def quiet_d3rlpy() -> None:
    """Keep d3rlpy's structlog info, debug and warning lines out of the terminal (errors still show)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


class LearnerPolicy:
    """A learner as an environment policy: observations in, catalog indices out (greedy)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.actions(obs)

    def actions(self, obs: np.ndarray) -> IntArray:
        """Catalog index chosen at each observation."""
        pred = self.learner.predict(np.asarray(obs, dtype=np.float32))
        if self.learner.kind == "continuous":
            return continuous_to_catalog(pred)
        return np.asarray(pred, dtype=np.int64).reshape(-1)

    def action_dist(self, obs: np.ndarray) -> FloatArray:
        """``(n, len(CATALOG))`` probabilities of each catalog action at each observation: one-hot on
        the greedy action, the policy that runs in the world (a stochastic imitator's softmax would be
        another policy than the one valued there)."""
        return one_hot(self.actions(obs), len(CATALOG))


def one_hot(actions: IntArray, n_actions: int) -> FloatArray:
    """Deterministic policy as an action distribution."""
    out = np.zeros((actions.size, n_actions))
    out[np.arange(actions.size), actions] = 1.0
    return out


# ----------------------------------------------------------------------------------- reward model


def action_features() -> FloatArray:
    """``(len(CATALOG), k)`` features of each catalog action: campaign flag, discount, hour, target,
    budget (one-hot where categorical)."""
    rows = []
    for a in CATALOG:
        launched = 0.0 if a.is_noop else 1.0
        row = [launched, a.discount * launched]
        row += [launched * float(a.push_hour == h) for h in CATALOG_HOURS]
        row += [launched * float(a.segment == s) for s in TARGETS]
        row += [launched * float(a.budget == b) for b in CATALOG_BUDGETS]
        rows.append(row)
    return np.asarray(rows, dtype=np.float64)


@dataclass
class RewardModel:
    """``q(x, a)``: expected day reward of campaign ``a`` in state ``x`` (gradient-boosted trees)."""

    model: Any

    @classmethod
    def fit(cls, dataset: OfflineDataset, seed: int = 0) -> RewardModel:
        """Fit on the logged (state, action, reward) rows."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        feats = action_features()
        x = np.concatenate([dataset.observations, feats[dataset.actions]], axis=1)
        model = HistGradientBoostingRegressor(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, early_stopping=False, random_state=seed
        )
        model.fit(x, dataset.rewards)
        return cls(model)

    def q_table(self, observations: np.ndarray) -> FloatArray:
        """``(n, len(CATALOG))`` predicted reward of every action at every observation."""
        feats = action_features()
        n, k = len(observations), len(CATALOG)
        obs = np.repeat(np.asarray(observations, dtype=np.float64), k, axis=0)
        x = np.concatenate([obs, np.tile(feats, (n, 1))], axis=1)
        return np.asarray(self.model.predict(x), dtype=np.float64).reshape(n, k)


# ----------------------------------------------------------------------------------- OPE


@dataclass(frozen=True)
class OpeResult:
    """One policy's OPE estimates (30-day return, with intervals) and its coverage on the logs."""

    estimates: dict[str, Interval]
    coverage: Coverage
    gains: dict[str, Interval] = field(default_factory=dict)
    """Each bandit estimator's value minus the behaviour policy's, paired on the logged days."""

    @property
    def trusted(self) -> bool:
        """Whether the logs support the policy (else every estimate here is untrustworthy)."""
        return self.coverage.trustworthy


def _bandit_intervals(
    dataset: OfflineDataset,
    action_dist: FloatArray,
    q_table: FloatArray,
    config: OfflineEvalConfig,
    bootstrap: Callable[..., Interval],
) -> dict[str, Interval]:
    """``bootstrap`` (an estimate or a gain) of each bandit estimator, per day times the horizon.

    A target policy that never takes a logged action leaves SNIPS and SNDR undefined: they are NaN
    (and the policy's coverage fails, so nothing relies on them).
    """
    data = BanditData(dataset.actions, dataset.rewards, dataset.propensity, action_dist, q_table)
    h = float(dataset.config.horizon)
    out: dict[str, Interval] = {}
    overlap = bool(np.any(action_dist[np.arange(len(dataset)), dataset.actions] > 0))
    for name in BANDIT_ESTIMATORS:
        if not overlap and name in ("snips", "sndr"):
            # self-normalised estimators are undefined when every importance weight is 0
            out[name] = Interval(float("nan"), float("nan"), float("nan"), config.level, len(dataset))
            continue
        iv = bootstrap(
            name, data, n_boot=config.n_boot, level=config.level, seed=config.seed, tau=config.switch_tau
        )
        out[name] = Interval(iv.estimate * h, iv.low * h, iv.high * h, iv.level, iv.n)
    return out


def bandit_ope(
    dataset: OfflineDataset, action_dist: FloatArray, q_table: FloatArray, config: OfflineEvalConfig
) -> dict[str, Interval]:
    """Each bandit estimator's bootstrap interval of the policy's value (30-day return)."""
    return _bandit_intervals(dataset, action_dist, q_table, config, bootstrap_estimate)


def bandit_gains(
    dataset: OfflineDataset, action_dist: FloatArray, q_table: FloatArray, config: OfflineEvalConfig
) -> dict[str, Interval]:
    """Each bandit estimator's gain over the behaviour policy (the logged rewards), paired on the same
    logged days, times the horizon."""
    return _bandit_intervals(dataset, action_dist, q_table, config, bootstrap_gain)


def fqe_value(
    learner: Learner, dataset: OfflineDataset, mdp: MDPDataset, config: OfflineEvalConfig
) -> Interval:
    """FQE's estimate of the learner's discounted (``config.fqe_gamma``) 30-day return: mean
    ``Q(s0, pi(s0))`` over the logged first states, with a bootstrap interval over those states (it
    does not include FQE's own fitting error)."""
    import d3rlpy
    from d3rlpy.logging import NoopAdapterFactory
    from d3rlpy.models import VectorEncoderFactory
    from d3rlpy.ope import FQE, DiscreteFQE, FQEConfig
    from d3rlpy.optimizers import AdamFactory
    from d3rlpy.preprocessing import StandardObservationScaler

    d3rlpy.seed(config.seed)
    fqe_cfg = FQEConfig(
        gamma=config.fqe_gamma,
        learning_rate=3e-4,
        optim_factory=AdamFactory(clip_grad_norm=1.0),
        batch_size=64,
        target_update_interval=50,
        observation_scaler=StandardObservationScaler(),
        encoder_factory=VectorEncoderFactory(hidden_units=[64, 64]),
    )
    fqe_cls = DiscreteFQE if learner.kind == "discrete" else FQE
    fqe = fqe_cls(algo=learner.algo, config=fqe_cfg, device="cpu:0")
    quiet_d3rlpy()
    fqe.fit(
        mdp,
        n_steps=config.fqe_steps,
        n_steps_per_epoch=min(config.fqe_steps, 1000),
        logger_adapter=NoopAdapterFactory(),
        show_progress=False,
        save_interval=10**9,
    )
    s0 = dataset.observations[dataset.initial]
    a0 = learner.predict(s0)
    values = np.asarray(fqe.predict_value(s0, a0), dtype=np.float64).reshape(-1)
    return bootstrap_ci(values, n_boot=config.n_boot, level=config.level, seed=config.seed)


def on_policy_value(dataset: OfflineDataset, config: OfflineEvalConfig) -> Interval:
    """The behaviour policy's value from the logs themselves: mean episode return."""
    return bootstrap_ci(dataset.episode_returns(), n_boot=config.n_boot, level=config.level, seed=config.seed)


# ----------------------------------------------------------------------------------- world and sim


@dataclass(frozen=True)
class Rollouts:
    """Per-episode 30-day returns, their discounted version, and returns with the settlement days."""

    returns: FloatArray
    discounted: FloatArray
    settled: FloatArray


def rollout_values(
    market: BatchMarket, policies: Mapping[str, Policy], config: OfflineEvalConfig
) -> dict[str, Rollouts]:
    """Run every policy on the same evaluation seeds of ``market``."""
    out: dict[str, Rollouts] = {}
    for name, policy in policies.items():
        r = run_policy(market, policy, config.episode, config.reward, seed=EVAL_SEED + config.seed)
        daily = r["daily"]  # (horizon, n, keys)
        per_day = np.stack([scalarize(d, config.reward) for d in daily])
        discount = config.fqe_gamma ** np.arange(per_day.shape[0])
        out[name] = Rollouts(
            per_day.sum(axis=0), discount @ per_day, np.asarray(r["return"], dtype=np.float64)
        )
    return out


class LoggedStartsMarket(WorldMarket):
    """The ground-truth world at the first day of every logged episode, as a :class:`BatchMarket`.

    The logged history is replayed (same world seed, same marketer: the logs exactly) and the world is
    snapshotted at each episode's first day; every reset forks each snapshot ``repeats`` times. So a
    policy's value here is the counterfactual "had it run those logged months instead of the
    marketer" — the quantity off-policy evaluation on those logs estimates — and the marketer's value
    here matches its value in the logs up to noise.
    """

    def __init__(
        self, manifests: list[dict[str, Any]], starts: list[tuple[int, int]], repeats: int, seed: int = 0
    ) -> None:
        from transferlab.simulator.logs import drive_with_marketer
        from transferlab.simulator.world import MarketWorld
        from transferlab.simulator.world_config import WorldConfig

        self.snapshots: list[MarketWorld] = []
        for source, manifest in enumerate(manifests):
            days = sorted(d for s_, d in starts if s_ == source)
            if not days:
                continue
            try:
                config = WorldConfig.build(**manifest["world"])
                epsilon = float(manifest["epsilon"])
            except KeyError as exc:
                raise ValueError(f"log manifest is missing {exc.args[0]!r}: regenerate the logs") from exc
            wanted = set(days)
            world = MarketWorld(config)
            found: dict[int, MarketWorld] = {}

            def snap(
                day: int,
                w: MarketWorld,
                wanted: set[int] = wanted,
                found: dict[int, MarketWorld] = found,
                base: int = config.seed * 7919,
            ) -> None:
                if day in wanted:
                    found[day] = w.fork(seed=base + day)

            drive_with_marketer(world, max(days) + 1, epsilon, on_day=snap)
            self.snapshots += [found[d] for d in days]
        if not self.snapshots:
            raise ValueError("no logged episode starts to evaluate from: the dataset is empty")
        self.repeats = repeats
        super().__init__(config, n_envs=len(self.snapshots) * repeats, seed=seed)

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = 0 if seed is None else seed
        self.worlds = [
            snap.fork(seed=base * 100_003 + r * 1_009 + i)
            for r in range(self.repeats)
            for i, snap in enumerate(self.snapshots)
        ]
        return self.observe()


def logged_starts_market(
    logs: Logs | list[Logs], dataset: OfflineDataset, config: OfflineEvalConfig
) -> LoggedStartsMarket:
    """The world at the dataset's episode starts, with about ``config.episodes`` episodes in all."""
    items = logs if isinstance(logs, list) else [logs]
    starts = dataset.episode_starts()
    repeats = max(1, -(-config.episodes // len(starts)))
    return LoggedStartsMarket([lg.manifest for lg in items], starts, repeats, seed=EVAL_SEED + config.seed)


# ----------------------------------------------------------------------------------- the table


@dataclass
class PolicyRow:
    """One policy's line of the evaluation: world, simulator and OPE side by side."""

    name: str
    world: Interval
    world_discounted: Interval
    """The world value with FQE's discount (what FQE's estimate is compared with)."""
    world_settled: Interval
    sim: Interval | None
    ope: OpeResult | None
    world_returns: FloatArray = field(repr=False)

    def ope_error(self, estimator: str) -> float:
        """``|OPE - world| / |world|`` of one estimator (NaN without OPE)."""
        if self.ope is None or estimator not in self.ope.estimates:
            return float("nan")
        truth = (self.world_discounted if estimator == "fqe" else self.world).estimate
        return abs(self.ope.estimates[estimator].estimate - truth) / max(abs(truth), 1e-12)


@dataclass
class Selection:
    """What :func:`select_policy` picked, what it refused and why, and the regret in the world.

    ``lower_bounds`` are the lower bounds of each supported candidate's OPE gain over the behaviour
    policy; ``chosen`` is the behaviour policy ("keep what you do now") when none is above zero.
    """

    chosen: str
    by: str
    lower_bounds: dict[str, float]
    refused: dict[str, str]
    best_in_world: str
    regret: float
    rule: str = "the highest lower bound of the OPE gain over the behaviour policy, if above zero"


def select_policy(rows: list[PolicyRow], by: str, fallback: str) -> Selection:
    """Among the candidates the logs support, the one with the highest lower bound of its OPE gain over
    the behaviour policy ``fallback`` (paired on the logged days) when that bound is above zero; else
    ``fallback`` itself: a policy is only chosen over what the shop does now when the logs show it
    is better.

    Candidates are the rows with OPE (learned policies and doing nothing); regret = the best world
    value among candidates and ``fallback`` minus the chosen one's world value.
    """
    if by not in BANDIT_ESTIMATORS:
        raise ValueError(
            f"select_by={by!r} is not a bandit OPE estimator (the gain over the behaviour policy is paired "
            f"on the logged days); use one of {', '.join(BANDIT_ESTIMATORS)}"
        )
    lower: dict[str, float] = {}
    refused: dict[str, str] = {}
    for r in rows:
        if r.ope is None or by not in r.ope.gains:
            continue
        if not r.ope.trusted:
            refused[r.name] = r.ope.coverage.reason or "no support in the logs"
            continue
        lower[r.name] = r.ope.gains[by].low
    best_low = max(lower, key=lambda k: lower[k]) if lower else None
    chosen = best_low if best_low is not None and lower[best_low] > 0 else fallback
    pool = [r for r in rows if r.ope is not None or r.name == fallback]
    by_name = {r.name: r for r in rows}
    best = max(pool, key=lambda r: r.world.estimate)
    regret = best.world.estimate - by_name[chosen].world.estimate
    return Selection(chosen, by, lower, refused, best.name, float(regret))


@dataclass
class OfflineEvaluation:
    """Every policy's row, the behaviour policy's value in its own logs, and the selection."""

    rows: list[PolicyRow]
    behaviour: str
    logged_value: Interval
    selection: Selection
    config: OfflineEvalConfig
    n_rows: int
    n_episodes: int

    def row(self, name: str) -> PolicyRow:
        """The row of policy ``name``."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no policy {name!r}; have {[r.name for r in self.rows]}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary."""

        def iv(x: Interval | None) -> dict[str, float] | None:
            return None if x is None else {"estimate": x.estimate, "low": x.low, "high": x.high}

        rows: dict[str, Any] = {}
        for r in self.rows:
            entry: dict[str, Any] = {
                "world": iv(r.world),
                "world_discounted": iv(r.world_discounted),
                "world_settled": iv(r.world_settled),
                "sim": iv(r.sim),
            }
            if r.ope is not None:
                c = r.ope.coverage
                entry["ope"] = {k: iv(v) for k, v in r.ope.estimates.items()}
                entry["ope_relative_error"] = {k: r.ope_error(k) for k in r.ope.estimates}
                entry["ope_gain"] = {k: iv(v) for k, v in r.ope.gains.items()}
                entry["coverage"] = {
                    "ess": c.ess,
                    "ess_share": c.ess_share,
                    "max_weight": c.max_weight,
                    "unsupported_mass": c.unsupported_mass,
                    "trusted": c.trustworthy,
                    "reason": c.reason,
                }
            rows[r.name] = entry
        s = self.selection
        return {
            "unit": f"{self.config.episode.horizon}-day return (reward units)",
            "n_rows": self.n_rows,
            "n_episodes": self.n_episodes,
            "behaviour": self.behaviour,
            "logged_value": iv(self.logged_value),
            "policies": rows,
            "selection": {
                "by": s.by,
                "chosen": s.chosen,
                "lower_bounds": s.lower_bounds,
                "refused": s.refused,
                "best_in_world": s.best_in_world,
                "regret": s.regret,
                "rule": s.rule,
            },
        }

    def format_table(self, estimators: tuple[str, ...] = ("ips", "sndr")) -> str:
        """A plain-text table for the terminal: world, sim, some OPE estimates, coverage; then FQE."""
        head = f"{'policy':<14} {'world':>20} {'sim':>20}"
        head += "".join(f" {e:>22}" for e in estimators) + f" {'ESS':>7} {'trusted':>8}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            line = f"{r.name:<14} {r.world.format('.2f'):>20} "
            line += f"{(r.sim.format('.2f') if r.sim else '-'):>20}"
            for e in estimators:
                est = r.ope.estimates.get(e) if r.ope else None
                line += f" {(est.format('.2f') if est else '-'):>22}"
            if r.ope is not None:
                mark = "yes" if r.ope.trusted else "NO"
                line += f" {r.ope.coverage.ess:>7.1f} {mark:>8}"
            lines.append(line)
        g = self.config.fqe_gamma
        for r in self.rows:
            if r.ope is not None and "fqe" in r.ope.estimates:
                lines.append(
                    f"FQE {r.name}: {r.ope.estimates['fqe'].format('.2f')} vs world "
                    f"{r.world_discounted.format('.2f')} (both discounted, gamma {g})"
                )
        for r in self.rows:
            if r.ope is not None and not r.ope.trusted:
                lines.append(f"UNTRUSTWORTHY {r.name}: {r.ope.coverage.reason}")
        s = self.selection
        lines.append(
            f"selected by the {s.by} lower bound: {s.chosen} ({s.rule}); best in the world: "
            f"{s.best_in_world}; regret {s.regret:.2f}"
        )
        lines.append(
            f"(values: {self.config.episode.horizon}-day return; world/sim over {self.config.episodes} "
            f"episodes; OPE from {self.n_rows} logged days; {self.config.level:.0%} bootstrap intervals; "
            f"the behaviour policy's return in its own logs: {self.logged_value.format('.2f')})"
        )
        return "\n".join(lines)


def evaluate_learners(
    logs: Logs | list[Logs],
    dataset: OfflineDataset,
    learners: Mapping[str, Learner],
    config: OfflineEvalConfig | None = None,
    *,
    sim: Any | None = None,
    baselines: Mapping[str, Policy] | None = None,
    progress: Progress | None = None,
) -> OfflineEvaluation:
    """Evaluate ``learners`` (and baseline policies: the marketer and no campaign by default) in the
    world, in ``sim`` (a ``LearnedSimulator``) when given, and by OPE on ``dataset``."""
    from transferlab.simulator.behaviour import MarketerPolicy
    from transferlab.simulator.policies import Marketer, NoCampaign

    config = config or OfflineEvalConfig()
    if config.select_by not in BANDIT_ESTIMATORS:
        raise ValueError(
            f"select_by={config.select_by!r} is not a bandit OPE estimator; use one of "
            f"{', '.join(BANDIT_ESTIMATORS)}"
        )
    if config.episode.horizon != dataset.config.horizon:
        config = config.model_copy(
            update={"episode": config.episode.model_copy(update={"horizon": dataset.config.horizon})}
        )

    def say(msg: str, frac: float) -> None:
        if progress is not None:
            progress(msg, frac)

    first = logs[0] if isinstance(logs, list) else logs
    epsilon = float(first.manifest.get("epsilon", 0.1))
    behaviour = "marketer"
    policies: dict[str, Policy] = {name: LearnerPolicy(lr) for name, lr in learners.items()}
    base: dict[str, Policy] = (
        dict(baselines)
        if baselines is not None
        else {
            behaviour: Marketer(MarketerPolicy(epsilon=epsilon)),
            "no_campaign": NoCampaign(),
        }
    )
    policies.update(base)
    if behaviour not in base:
        behaviour = next(iter(base), next(iter(policies)))
    n_steps = 2 + len(learners)
    say("evaluating in the world", 0.0)
    world = rollout_values(logged_starts_market(logs, dataset, config), policies, config)
    sim_values: dict[str, Rollouts] = {}
    if sim is not None:
        say("evaluating in the learned simulator", 1 / n_steps)
        n_customers = int(first.manifest["world"]["n_customers"])
        market = sim.market(n_envs=config.episodes, n_customers=n_customers, seed=EVAL_SEED + config.seed)
        sim_values = rollout_values(market, policies, config)
    q_table = RewardModel.fit(dataset, seed=config.seed).q_table(dataset.observations)
    mdp_cache: dict[str, MDPDataset] = {}
    ope: dict[str, OpeResult] = {}
    for i, (name, learner) in enumerate(learners.items()):
        say(f"off-policy evaluation: {name}", (2 + i) / n_steps)
        dist = LearnerPolicy(learner).action_dist(dataset.observations)
        estimates = bandit_ope(dataset, dist, q_table, config)
        if config.fqe_steps > 0:
            if learner.kind not in mdp_cache:
                mdp_cache[learner.kind] = dataset.to_mdp(learner.kind)  # type: ignore[arg-type]
            estimates["fqe"] = fqe_value(learner, dataset, mdp_cache[learner.kind], config)
        cov = coverage(dataset.actions, dataset.propensity, dist, min_ess_share=config.min_ess_share)
        ope[name] = OpeResult(estimates, cov, bandit_gains(dataset, dist, q_table, config))
    for name, policy in base.items():
        if isinstance(policy, NoCampaign):  # a candidate too: "stop the campaigns" is an answer
            dist = one_hot(np.zeros(len(dataset), dtype=np.int64), len(CATALOG))
            cov = coverage(dataset.actions, dataset.propensity, dist, min_ess_share=config.min_ess_share)
            ope[name] = OpeResult(
                bandit_ope(dataset, dist, q_table, config), cov, bandit_gains(dataset, dist, q_table, config)
            )
    say("evaluated", 1.0)
    rows = []
    for k, name in enumerate(policies):
        i = config.seed * 1_000 + k  # the bootstrap seed of this row
        w = world[name]
        rows.append(
            PolicyRow(
                name=name,
                world=bootstrap_ci(w.returns, n_boot=config.n_boot, level=config.level, seed=i),
                world_discounted=bootstrap_ci(w.discounted, n_boot=config.n_boot, level=config.level, seed=i),
                world_settled=bootstrap_ci(w.settled, n_boot=config.n_boot, level=config.level, seed=i),
                sim=(
                    bootstrap_ci(sim_values[name].returns, n_boot=config.n_boot, level=config.level, seed=i)
                    if name in sim_values
                    else None
                ),
                ope=ope.get(name),
                world_returns=w.returns,
            )
        )
    selection = select_policy(
        rows, config.select_by, fallback=behaviour if behaviour in base else rows[-1].name
    )
    return OfflineEvaluation(
        rows=rows,
        behaviour=behaviour,
        logged_value=on_policy_value(dataset, config),
        selection=selection,
        config=config,
        n_rows=len(dataset),
        n_episodes=dataset.n_episodes,
    )


__all__ = [
    "BANDIT_ESTIMATORS",
    "OPE_ESTIMATORS",
    "LearnerPolicy",
    "OfflineEvalConfig",
    "OfflineEvaluation",
    "OpeResult",
    "PolicyRow",
    "RewardModel",
    "Selection",
    "action_features",
    "bandit_ope",
    "evaluate_learners",
    "fqe_value",
    "one_hot",
    "rollout_values",
    "select_policy",
]

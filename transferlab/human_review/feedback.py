"""Learning from results that came back: the last step of human-machine collaboration.

The assistant suggests, a person approves, the suggestion is executed, and days later its real
outcome comes back (``feedback_received``) for the assistant to learn from (the founding design
note's ``agent.learn_from_real_feedback``). Here the outcomes feed learning:

- :func:`predict_campaign` is the learned simulator's prediction for one campaign (the evidence a
  suggestion carries, with an interval over simulated markets);
- :func:`feedback_table` lines up, per executed suggestion, what was predicted and what happened;
- :func:`learn_from_feedback` recalibrates the simulator with them
  (:func:`transferlab.simulator.calibration.calibrate`), so the next predictions start from the truth
  that came back; the same table is the proposer's new training data;
- :func:`ratings_as_rewards` turns reviewers' 0-10 ratings of analysis reports into rewards in [0, 1]
  for the ops tool environment (whose reward is a human expert's rating of the report);
- :func:`close_the_loop` runs the whole loop for ``rounds`` rounds through the real service, market
  and worker, and measures the simulator's prediction error on each round's executed campaigns
  before it learned from them: the loop closes when that error falls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from transferlab.simulator.vocabulary import CATALOG, OUTCOME_KEYS, CampaignAction, catalog_index

if TYPE_CHECKING:
    from transferlab.human_review.service import ReviewService, SuggestionView, User
    from transferlab.simulator.learned import LearnedSimulator

#: The outcome keys a prediction carries (the retention shares are not predicted per campaign).
PREDICTED_KEYS: tuple[str, ...] = tuple(k for k in OUTCOME_KEYS if not k.startswith("retention_"))
#: Days of quiet market before the predicted campaign launches.
QUIET_DAYS = 7


def predict_campaign(
    sim: LearnedSimulator,
    action_index: int,
    *,
    n_customers: int,
    n_envs: int = 32,
    seed: int = 0,
    level: float = 0.9,
) -> dict[str, dict[str, float]]:
    """The simulator's outcome of campaign ``CATALOG[action_index]`` launched once after a quiet week
    and followed until it matured: per key of :data:`PREDICTED_KEYS`, the mean over ``n_envs``
    simulated markets and a ``level`` interval of the markets' spread."""
    if not 1 <= action_index < len(CATALOG):
        raise ValueError(f"action_index={action_index} is not a campaign: use 1..{len(CATALOG) - 1}")
    market = sim.market(n_envs=n_envs, n_customers=n_customers, seed=seed)
    market.reset(seed)
    noop = np.zeros(n_envs, dtype=np.int64)
    for _ in range(QUIET_DAYS):
        market.step(noop)
    market.step(np.full(n_envs, action_index, dtype=np.int64))
    for _ in range(int(sim.params.maturity_days) + 1):
        market.step(noop)
    frame = market.campaign_outcomes().frame()
    tail = (1.0 - level) / 2.0
    out: dict[str, dict[str, float]] = {}
    for key in PREDICTED_KEYS:
        values = frame[key].to_numpy(dtype=np.float64)
        lo, hi = np.quantile(values, [tail, 1.0 - tail])
        mean = float(values.mean())
        out[key] = {"estimate": mean, "low": float(min(lo, mean)), "high": float(max(hi, mean))}
    return out


def action_index_of(action: dict[str, Any]) -> int:
    """Catalog index of a suggestion's action dict (-1 when it is not on the catalog)."""
    fields = {k: action[k] for k in ("discount", "push_hour", "segment", "budget", "category") if k in action}
    return catalog_index(CampaignAction(**fields))


def feedback_table(views: Sequence[SuggestionView]) -> pd.DataFrame:
    """One row per suggestion whose outcome came back: ``suggestion_id``, ``action_index``, the real
    ``orders``/``gmv``/``profit`` and the predicted ``predicted_orders``/... (NaN without evidence)."""
    rows = []
    for v in views:
        if v.outcome is None:
            continue
        row: dict[str, Any] = {"suggestion_id": v.id, "action_index": action_index_of(v.action)}
        predicted = (v.evidence or {}).get("predicted", {})
        for key in ("orders", "gmv", "profit"):
            row[key] = float(v.outcome.get(key, np.nan))
            row[f"predicted_{key}"] = float(predicted.get(key, {}).get("estimate", np.nan))
        rows.append(row)
    columns = ["suggestion_id", "action_index"] + [
        c for k in ("orders", "gmv", "profit") for c in (k, f"predicted_{k}")
    ]
    return pd.DataFrame(rows, columns=columns)


def prediction_error(table: pd.DataFrame, key: str = "orders", column: str | None = None) -> float:
    """Mean absolute log ratio ``|log((predicted + 1) / (real + 1))|`` over rows with a prediction
    (the scale :func:`~transferlab.simulator.calibration.calibrate` corrects on; 0.69 is a factor 2)."""
    pred = table[column or f"predicted_{key}"]
    have = pred.notna() & table[key].notna()
    if not have.any():
        return float("nan")
    ratio = np.log((pred[have].clip(lower=0.0) + 1.0) / (table.loc[have, key].clip(lower=0.0) + 1.0))
    return float(np.abs(ratio).mean())


def learn_from_feedback(
    sim: LearnedSimulator, table: pd.DataFrame, *, shrinkage: float = 5.0
) -> LearnedSimulator:
    """A new simulator calibrated on the campaigns that came back (catalog actions with a prediction)."""
    from transferlab.simulator.calibration import calibrate

    usable = table[(table["action_index"] >= 1) & table["predicted_orders"].notna() & table["orders"].notna()]
    if usable.empty:
        return sim
    observed = usable[["action_index", "orders"]].reset_index(drop=True)
    predicted = usable[["action_index", "predicted_orders"]].rename(columns={"predicted_orders": "orders"})
    return calibrate(sim, observed, predicted.reset_index(drop=True), shrinkage=shrinkage)


def ratings_as_rewards(
    service: ReviewService, actor: User, subject: str | None = None
) -> list[tuple[str, float]]:
    """Reviewers' 0-10 ratings of analysis reports as ``(subject, reward in [0, 1])``, oldest first."""
    return [(r.subject, float(r.score) / 10.0) for r in service.ratings(actor, subject)]


# --------------------------------------------------------------------------------------------------
# The loop, closed: propose -> approve -> execute -> results come back -> learn -> propose again
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopRound:
    """One round of :func:`close_the_loop`."""

    round: int
    executed: int
    error_learning: float
    """Prediction error (:func:`prediction_error`) on this round's campaigns of the simulator that
    learned from every earlier round, predicted before they ran."""
    error_static: float
    """The same for the simulator as first fitted, which never learns (the baseline)."""


def close_the_loop(
    sim: LearnedSimulator,
    directory: Path,
    *,
    actions: Sequence[int],
    rounds: int = 4,
    n_customers: int = 300,
    seed: int = 0,
    shrinkage: float = 2.0,
    progress: Callable[[str], None] | None = None,
) -> list[LoopRound]:
    """Run ``rounds`` rounds of the review loop with the real store, service, market and worker.

    Each round a proposer submits every campaign of ``actions`` with the current simulator's
    prediction as evidence, an approver approves them one a day, the worker executes each in the
    ground-truth market (a world of ``n_customers``), the market's clock runs until they matured, the
    worker brings the results back, and the simulator learns from them. Returns each round's
    prediction error on its own campaigns, measured before learning from them, next to the error of
    the simulator as first fitted (the world drifts and tires of campaigns, so that baseline is what
    learning must beat).
    """
    from transferlab.human_review.gateway import MarketGateway
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore
    from transferlab.human_review.worker import run_worker
    from transferlab.simulator.world_config import WorldConfig

    static = sim
    directory.mkdir(parents=True, exist_ok=True)
    service = ReviewService(ReviewStore(f"sqlite:///{directory / 'review.db'}"))
    admin = service.add_user(None, "admin", "admin-pw", "admin")
    proposer = service.add_user(admin, "assistant", "assistant-pw", "reviewer")
    approver = service.add_user(admin, "approver", "approver-pw", "approver")
    world = WorldConfig(n_customers=n_customers, seed=seed)
    gateway = MarketGateway.create(directory / "market", world, history_days=30)
    maturity = int(world.maturity_days)
    out: list[LoopRound] = []
    for r in range(rounds):
        ids = []
        for i, a in enumerate(actions):
            evidence = {
                "predicted": predict_campaign(sim, int(a), n_customers=n_customers, seed=seed + 97 * r + i)
            }
            spec = CATALOG[int(a)].to_dict()
            ids.append(
                service.submit(
                    proposer,
                    {
                        "action": spec,
                        "reasoning": f"round {r}: the simulator predicts "
                        f"{evidence['predicted']['orders']['estimate']:.1f} orders",
                        "confidence": 0.7,
                        "risk": "low",
                        "evidence": evidence,
                        "expires_in_hours": 24 * 30,
                    },
                )
            )
        for sid in ids:  # one campaign a day, so campaigns do not compete for the same customers
            service.decide(approver, sid, "approve")
            run_worker(service, gateway, f"loop-{r}", actor=admin, once=True)
            gateway.advance(1)
        gateway.advance(maturity + 2)
        run_worker(service, gateway, f"loop-{r}", actor=admin, once=True)
        views = [service.get(admin, sid) for sid in ids]
        table = feedback_table(views)
        table["static_orders"] = [
            predict_campaign(static, int(a), n_customers=n_customers, seed=seed + 97 * r + i)["orders"][
                "estimate"
            ]
            for i, a in enumerate(table["action_index"])
        ]
        row = LoopRound(
            r, len(table), prediction_error(table), prediction_error(table, column="static_orders")
        )
        out.append(row)
        if progress is not None:
            progress(
                f"round {r}: {row.executed} results back; error before learning from them "
                f"{row.error_learning:.3f} (never-learning simulator {row.error_static:.3f})"
            )
        sim = learn_from_feedback(sim, table, shrinkage=shrinkage)
    return out


__all__ = [
    "PREDICTED_KEYS",
    "LoopRound",
    "action_index_of",
    "close_the_loop",
    "feedback_table",
    "learn_from_feedback",
    "predict_campaign",
    "prediction_error",
    "ratings_as_rewards",
]

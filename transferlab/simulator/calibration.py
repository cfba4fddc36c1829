"""Calibrate a learned simulator with outcomes that came back from the world.

This is the last step of simulator-assisted training: train in the simulator, deploy, and adjust the
simulator to the real performance (the founding design note's ``simulator.calibrate``).

The learned simulator's weakest part is what the logs show least: the response to campaigns the
marketer rarely ran. When campaigns are actually run (in the world here; through the review flow
later) their matured results come back. :func:`calibrate` compares, per catalog action, the orders
the campaigns really brought with what the simulator predicted for them, and shifts that action's
offer log-odds by the shrunken log-ratio::

    delta_a = n_a / (n_a + shrinkage) * log((observed_a + 1) / (predicted_a + 1))

where ``observed_a`` / ``predicted_a`` are summed over the ``n_a`` campaigns of action ``a``. Actions
with no new outcomes borrow the pooled shift of the observed actions with the same discount, shrunk
again. The result is a new simulator (the old one is untouched); its report records every shift.

Orders alone cannot fix the money: :func:`calibrate_economics` then matches the shop's GMV and profit
per episode of the same deployment (the outcome vector, not only its order count). Every order's list
value is lognormal around ``spend_mu``, so a shift ``s = log(world GMV / simulated GMV)`` of
``spend_mu`` scales every payment, cost and return loss by ``e^s``; and the cost of goods enters
profit linearly, so with common random numbers (the same markets with ``cost_ratio`` scaled by 1 and
by 0, and with doubled prices) simulated profit is exactly ``e^s (X - k C) - Q - push`` for a cost
factor ``k``, solved for the world's profit (:func:`economics_factors`; ``k`` clipped to [0.5, 2]).

>>> import pandas as pd
>>> obs = pd.DataFrame({"action_index": [5, 5], "orders": [30.0, 34.0]})
>>> pred = pd.DataFrame({"action_index": [5, 5], "orders": [15.0, 17.0]})
>>> round(float(offer_shifts(obs, pred, shrinkage=2.0)[5]), 4)  # 2/4 * log(65/33)
0.3389
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from transferlab.simulator.envs.campaign import EpisodeConfig, WorldMarket, run_policy
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.policies import Policy
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS


class CalibrationError(ValueError):
    """The outcomes given to :func:`calibrate` cannot be used; the message says why and what to fix."""


def _per_action(df: pd.DataFrame, what: str) -> pd.DataFrame:
    missing = [c for c in ("action_index", "orders") if c not in df.columns]
    if missing:
        raise CalibrationError(f"{what} outcomes are missing column(s) {missing}: need action_index, orders")
    bad = df[(df["action_index"] < 1) | (df["action_index"] >= len(CATALOG))]
    if len(bad):
        raise CalibrationError(
            f"{what} outcomes have action_index values {sorted(set(bad['action_index']))[:5]} outside "
            f"1..{len(CATALOG) - 1} (campaigns only; 0 is no campaign)"
        )
    if df["orders"].isna().any() or (df["orders"] < 0).any():
        raise CalibrationError(f"{what} outcomes have missing or negative orders: drop unmatured rows first")
    return df.groupby("action_index")["orders"].agg(["sum", "count", "mean"])


OFFER_SHRINKAGE = 5.0
"""The default pseudo-count of campaigns the simulator's own response to an action is worth."""


def offer_shifts(
    observed: pd.DataFrame, predicted: pd.DataFrame, shrinkage: float = OFFER_SHRINKAGE, level: float = 0.0
) -> np.ndarray:
    """Log-odds shift per catalog action (len(CATALOG),), from observed vs predicted campaign orders.

    ``level`` is a shift already applied to every purchase (:func:`level_shift`); each action's
    shift is what remains of its log-ratio after it.
    """
    if observed.empty:
        raise CalibrationError("no outcomes to calibrate with: give at least one matured campaign")
    obs, pred = _per_action(observed, "observed"), _per_action(predicted, "predicted")
    shifts = np.zeros(len(CATALOG))
    known = np.zeros(len(CATALOG), dtype=bool)
    for key, row in obs.iterrows():
        a = int(str(key))
        if a not in pred.index:
            raise CalibrationError(f"no prediction for action {a} ({CATALOG[a]}): predict it first")
        n = float(row["count"])
        predicted_sum = float(pred["mean"][a]) * n
        ratio = np.log((float(row["sum"]) + 1.0) / (predicted_sum + 1.0))
        shifts[a] = n / (n + shrinkage) * (ratio - level)
        known[a] = True
    discounts = np.array([a.discount for a in CATALOG])
    for d in np.unique(discounts[known]):
        same = (discounts == d) & known
        pooled = float(shifts[same].mean()) * same.sum() / (same.sum() + shrinkage)
        shifts[(discounts == d) & ~known & (np.arange(len(CATALOG)) > 0)] = pooled
    return shifts


def level_shift(observed_orders: float, predicted_orders: float) -> float:
    """Log-odds shift of every purchase so the simulator's total orders match the world's.

    >>> round(level_shift(900.0, 1000.0), 4)  # the simulator sold 11% too much
    -0.1054
    """
    if observed_orders <= 0 or predicted_orders <= 0:
        raise CalibrationError(
            f"shop totals must be positive to calibrate the level (observed {observed_orders}, "
            f"predicted {predicted_orders})"
        )
    return float(np.log(observed_orders / predicted_orders))


ECONOMICS_KEYS = ("gmv", "profit", "push_cost")
"""The shop-wide outcomes :func:`calibrate_economics` matches per episode."""


def economics_factors(
    world: Mapping[str, float],
    goods: Mapping[str, float],
    free: Mapping[str, float],
    free_double: Mapping[str, float],
) -> tuple[float, float]:
    """(spend shift, cost factor) that make the simulator's GMV and profit per episode the world's.

    The simulator's per-episode ``gmv``, ``profit`` and ``push_cost`` on the same markets three ways:
    ``goods`` as fitted, ``free`` with the goods' cost set to zero, ``free_double`` with it zero and
    every list price doubled. Profit is ``e^s (X - k C) - Q - push``: ``X`` what the orders bring
    before the goods, ``C`` what the goods cost, ``Q`` the losses already pending from before the
    episode (returns of earlier orders, untouched by prices), so ``X = free_double - free``,
    ``C = free - goods`` and ``Q = X - push - free``; then ``k`` solves it for the world's profit.

    >>> world = {"gmv": 1100.0, "profit": 300.0}
    >>> goods = {"gmv": 1000.0, "profit": 230.0, "push_cost": 20.0}  # 1000 - 700 - 50 pending - 20
    >>> free = {"gmv": 1000.0, "profit": 930.0, "push_cost": 20.0}
    >>> double = {"gmv": 2000.0, "profit": 1930.0, "push_cost": 20.0}
    >>> s, k = economics_factors(world, goods, free, double)
    >>> round(s, 4), round(k, 4)  # GMV x1.1; 1.1 (1000 - 700 k) - 50 - 20 = 300  ->  k = 0.9481
    (0.0953, 0.9481)
    """
    for name, totals in (("world", world), ("simulator", goods)):
        if totals["gmv"] <= 0:
            raise CalibrationError(
                f"the {name}'s GMV per episode is {totals['gmv']}: nothing to calibrate on"
            )
    shift = float(np.log(world["gmv"] / goods["gmv"]))
    push = float(goods["push_cost"])
    before_goods = float(free_double["profit"]) - float(free["profit"])
    cost = float(free["profit"]) - float(goods["profit"])
    pending = before_goods - push - float(free["profit"])
    if cost <= 0:
        return shift, 1.0
    factor = (before_goods - (float(world["profit"]) + pending + push) / np.exp(shift)) / cost
    return shift, float(np.clip(factor, 0.5, 2.0))


def calibrate_economics(
    sim: LearnedSimulator,
    world: Mapping[str, float],
    panel: Mapping[str, Policy],
    *,
    n_customers: int,
    episodes: int,
    seed: int = 0,
    episode: EpisodeConfig | None = None,
) -> LearnedSimulator:
    """A new simulator whose spend level and cost of goods make its GMV and profit per episode match
    ``world`` (per-episode means of a deployment of ``panel``), re-simulating that deployment (see the
    module docstring); the report's last calibration round records both factors."""

    def per_episode(s: LearnedSimulator) -> dict[str, float]:
        totals, n = np.zeros(len(DAY_KEYS)), 0
        for i, policy in enumerate(panel.values()):
            market = s.market(n_envs=episodes, n_customers=n_customers, seed=seed + i)
            totals += run_policy(market, policy, episode, seed=seed + i)["outcome"].sum(axis=0)
            n += episodes
        return {k: float(totals[DAY_KEYS.index(k)]) / n for k in ECONOMICS_KEYS}

    def variant(spend: float, cost: float) -> LearnedSimulator:
        mu, ratio = sim.params.spend_mu + spend, sim.params.cost_ratio * cost
        return LearnedSimulator(sim.config, replace(sim.params, spend_mu=mu, cost_ratio=ratio), sim.report)

    doubled = variant(float(np.log(2.0)), 0.0)
    shift, factor = economics_factors(
        world, per_episode(sim), per_episode(variant(0.0, 0.0)), per_episode(doubled)
    )
    params = replace(
        sim.params,
        spend_mu=sim.params.spend_mu + np.asarray(shift, dtype=sim.params.spend_mu.dtype),
        cost_ratio=sim.params.cost_ratio * np.asarray(factor, dtype=sim.params.cost_ratio.dtype),
    )
    report: dict[str, Any] = dict(sim.report)
    rounds = list(report.get("calibration", [])) or [{}]
    rounds[-1] = {**rounds[-1], "spend_shift": round(shift, 4), "cost_factor": round(factor, 4)}
    report["calibration"] = rounds
    return LearnedSimulator(sim.config, params, report)


def predict_single_campaigns(
    sim: LearnedSimulator, actions: np.ndarray, *, n_envs: int = 32, n_customers: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """The simulator's orders for each action launched once into a fresh market (after a quiet week)."""
    rows = []
    for i, a in enumerate(np.unique(actions)):
        market = sim.market(n_envs=n_envs, n_customers=n_customers, seed=seed + i)
        market.reset(seed + i)
        noop = np.zeros(n_envs, dtype=np.int64)
        for _ in range(7):
            market.step(noop)
        market.step(np.full(n_envs, int(a)))
        for _ in range(int(sim.params.promo_days) + 1):
            market.step(noop)
        frame = market.campaign_outcomes().frame()
        rows.append(frame[["action_index", "orders"]])
    return pd.concat(rows, ignore_index=True)


def calibrate(
    sim: LearnedSimulator,
    observed: pd.DataFrame,
    predicted: pd.DataFrame | None = None,
    *,
    totals: tuple[float, float] | None = None,
    shrinkage: float = OFFER_SHRINKAGE,
    seed: int = 0,
) -> LearnedSimulator:
    """A new simulator whose purchase level and offer response match what came back from the world.

    Args:
        observed: one row per campaign that came back: ``action_index`` and matured ``orders``.
        predicted: the simulator's predictions for those campaigns (same columns); actions without
            one (or all, when None) are predicted by :func:`predict_single_campaigns`.
        totals: (observed, predicted) shop-wide orders over the same deployment, when the shop's
            totals came back too: every purchase's log-odds moves by :func:`level_shift` first.
        shrinkage: pseudo-count of campaigns the simulator's own estimate is worth.
    """
    if shrinkage < 0:
        raise CalibrationError(f"shrinkage={shrinkage} must be >= 0")
    if predicted is None:
        predicted = pd.DataFrame(columns=["action_index", "orders"])
    missing = np.setdiff1d(observed["action_index"].to_numpy(), predicted["action_index"].to_numpy())
    if len(missing):
        extra = predict_single_campaigns(sim, missing, seed=seed)
        predicted = pd.concat([predicted, extra], ignore_index=True) if len(predicted) else extra
    level = level_shift(*totals) if totals is not None else 0.0
    shifts = offer_shifts(observed, predicted, shrinkage, level)
    offer = sim.params.offer + shifts[None, :, None].astype(sim.params.offer.dtype)
    base = sim.params.base + np.asarray(level, dtype=sim.params.base.dtype)
    report: dict[str, Any] = dict(sim.report)
    rounds = [*report.get("calibration", []), _shift_summary(observed, shifts, level)]
    report["calibration"] = rounds
    return LearnedSimulator(sim.config, replace(sim.params, offer=offer, base=base), report)


def _shift_summary(observed: pd.DataFrame, shifts: np.ndarray, level: float) -> dict[str, Any]:
    used = sorted({int(a) for a in observed["action_index"]})
    return {
        "level_shift": round(level, 4),
        "campaigns": len(observed),
        "actions": len(used),
        "shifts": {str(CATALOG[a]): round(float(shifts[a]), 4) for a in used},
        "mean_abs_shift_all_actions": float(np.abs(shifts[1:]).mean()),
    }


# ---------------------------------------------------------------------------------- deployment data


def world_campaigns(market: WorldMarket, promo_days: int) -> pd.DataFrame:
    """Campaigns run in a world market (after its history) whose offer window has closed."""
    rows = []
    for world in market.worlds:
        for record in world.campaigns:
            if record.day >= market.history_days and record.day + promo_days < world.day:
                rows.append(
                    {"action_index": CATALOG.index(record.action), "orders": record.outcome["orders"]}
                )
    return pd.DataFrame(rows, columns=["action_index", "orders"])


def deployment_outcomes(
    sim: LearnedSimulator,
    world: Mapping[str, Any],
    panel: Mapping[str, Policy],
    *,
    episodes: int,
    seed: int,
    episode: EpisodeConfig | None = None,
) -> Deployment:
    """Run each policy in the world of the logs' ``manifest`` (the "real" deployment, continuing
    after the logged history) and in the simulator under the same policy; returns (observed,
    predicted) campaign orders per campaign, the shop's total orders in both, and each policy's
    return and outcomes per episode in the world."""
    observed, predicted = [], []
    totals = np.zeros(2)
    money = np.zeros(len(DAY_KEYS))
    promo_days = int(sim.params.promo_days)
    per_policy: dict[str, dict[str, float]] = {}
    for i, (name, policy) in enumerate(panel.items()):
        market = WorldMarket.from_manifest(dict(world), n_envs=episodes, seed=seed + 101 * i)
        world_run = run_policy(market, policy, episode, seed=seed + i)
        observed.append(world_campaigns(market, promo_days))
        n_customers = int(world["world"]["n_customers"])
        sim_market = sim.market(n_envs=episodes, n_customers=n_customers, seed=seed + i)
        sim_run = run_policy(sim_market, policy, episode, seed=seed + i)
        frame = sim_market.campaign_outcomes().frame()
        closed = frame["day"] + promo_days < sim_market.day
        predicted.append(frame.loc[closed, ["action_index", "orders"]])
        orders = DAY_KEYS.index("orders")
        totals += [world_run["outcome"][:, orders].sum(), sim_run["outcome"][:, orders].sum()]
        money += world_run["outcome"].sum(axis=0)
        per_policy[name] = _per_episode(world_run)
    n = episodes * len(panel)
    return Deployment(
        pd.concat(observed, ignore_index=True),
        pd.concat(predicted, ignore_index=True),
        (float(totals[0]), float(totals[1])),
        {k: float(money[DAY_KEYS.index(k)]) / n for k in ECONOMICS_KEYS},
        per_policy,
    )


def _per_episode(run: Mapping[str, np.ndarray]) -> dict[str, float]:
    """A deployed policy's mean return (with its standard error) and outcomes per episode."""
    ret = np.asarray(run["return"], dtype=np.float64)
    out = {
        "return": float(ret.mean()),
        "return_se": float(ret.std(ddof=1) / np.sqrt(len(ret))) if len(ret) > 1 else 0.0,
    }
    means = np.asarray(run["outcome"]).mean(axis=0)
    return {**out, **{k: float(means[DAY_KEYS.index(k)]) for k in ("orders", "gmv", "profit", "complaints")}}


@dataclass(frozen=True)
class Deployment:
    """What came back from running policies in the world, beside the simulator's predictions."""

    observed: pd.DataFrame  # per campaign: action_index, orders (offer window closed)
    predicted: pd.DataFrame  # the same in the simulator, under the same policies
    totals: tuple[float, float]  # shop-wide orders: (world, simulator)
    world_per_episode: dict[str, float]  # the world's GMV, profit and push cost per episode
    per_policy: dict[str, dict[str, float]]  # per policy: return, return_se, orders, gmv, profit, complaints

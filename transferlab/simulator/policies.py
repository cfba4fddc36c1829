"""Batched campaign policies: ``policy(obs (n, OBS_DIM), rng) -> catalog indices (n,)``.

The panel (:func:`policy_panel`) is the fixed set of at least ten policies the fidelity report
ranks in the learned simulator and in the world: a simulator is useful for decisions only if it
orders policies the way the world does.

>>> import numpy as np
>>> from transferlab.simulator.envs.campaign import OBS_DIM
>>> pol = Schedule(every=7, action=CampaignAction(0.1, 20, "bargain", 20.0))
>>> obs = np.zeros((2, OBS_DIM), dtype=np.float32); obs[:, -1] = 1.0   # first day of the episode
>>> pol(obs, np.random.default_rng(0)).tolist()
[83, 83]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from transferlab.simulator.behaviour import MarketerPolicy
from transferlab.simulator.vocabulary import CATALOG, OBS_KEYS, CampaignAction, catalog_index

Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]
DEFAULT_HORIZON = 30


def episode_day(obs: np.ndarray, horizon: int = DEFAULT_HORIZON) -> np.ndarray:
    """Decision day (0-based) of each observation, from its 'share of the episode left' feature."""
    return np.rint((1.0 - obs[:, -1]) * horizon).astype(np.int64)


@dataclass(frozen=True)
class NoCampaign:
    """Never run a campaign."""

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(len(obs), dtype=np.int64)


@dataclass(frozen=True)
class UniformRandom:
    """Any catalog entry, uniformly."""

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(CATALOG), len(obs))


@dataclass(frozen=True)
class Schedule:
    """Run ``action`` every ``every`` days (from the first decision day), nothing otherwise."""

    every: int
    action: CampaignAction
    horizon: int = DEFAULT_HORIZON

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        index = catalog_index(self.action)
        if index < 0:
            raise ValueError(f"{self.action} is not in the catalog; pick one of CATALOG")
        on = episode_day(obs, self.horizon) % self.every == 0
        return np.where(on, index, 0).astype(np.int64)


@dataclass
class Marketer:
    """The behaviour policy that made the logs, driven by observations (its GMV baseline is the
    running mean of the 7-day GMV it has seen in this episode)."""

    policy: MarketerPolicy = field(default_factory=MarketerPolicy)
    _seen: list[np.ndarray] = field(default_factory=list, repr=False)

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        gmv = obs[:, OBS_KEYS.index("gmv_7d")].astype(np.float64)
        if episode_day(obs).max() == 0:
            self._seen = []
        self._seen.append(gmv)
        baseline = np.mean(self._seen, axis=0) if len(self._seen) >= 7 else np.zeros(len(obs))
        actions = np.empty(len(obs), dtype=np.int64)
        for i, row in enumerate(obs):
            state = {k: float(v) for k, v in zip(OBS_KEYS, row, strict=False)}
            probs = self.policy.probabilities(state, float(baseline[i]))
            actions[i] = rng.choice(len(probs), p=probs)
        return actions


def policy_panel() -> dict[str, Policy]:
    """At least ten distinct policies, from doing nothing to pushing deep discounts to everyone daily."""

    def sched(every: int, d: float, seg: str, budget: float = 20.0, hour: int = 20) -> Schedule:
        return Schedule(every, CampaignAction(d, hour, seg, budget))

    return {
        "no_campaign": NoCampaign(),
        "marketer": Marketer(),
        "random": UniformRandom(),
        "weekly_bargain_10": sched(7, 0.1, "bargain"),
        "weekly_loyal_10": sched(7, 0.1, "loyal"),
        "weekly_all_5": sched(7, 0.05, "all"),
        "every3_bargain_5": sched(3, 0.05, "bargain"),
        "every3_premium_20_morning": sched(3, 0.2, "premium", hour=9),
        "daily_loyal_10": sched(1, 0.1, "loyal"),
        "weekly_all_30": sched(7, 0.3, "all", 60.0),
        "every3_all_20": sched(3, 0.2, "all", 60.0),
        "daily_all_30": sched(1, 0.3, "all", 60.0),
    }


def evaluation_panel() -> dict[str, Policy]:
    """The held-out panel fidelity is scored on: 21 policies, none of them in :func:`policy_panel`
    (whose deployment calibrates the simulator). Near-ties (the same offer at three hours of the day,
    every 2 vs every 3 days), rarely logged actions (pushes without a discount, 30% to one segment),
    and a more exploring marketer."""

    def sched(every: int, d: float, seg: str, budget: float = 20.0, hour: int = 20) -> Schedule:
        return Schedule(every, CampaignAction(d, hour, seg, budget))

    return {
        "weekly_all_10": sched(7, 0.1, "all"),
        "weekly_all_10_morning": sched(7, 0.1, "all", hour=9),
        "weekly_all_10_noon": sched(7, 0.1, "all", hour=13),
        "every2_all_5": sched(2, 0.05, "all"),
        "every2_bargain_5": sched(2, 0.05, "bargain"),
        "every2_loyal_5": sched(2, 0.05, "loyal"),
        "every3_loyal_10": sched(3, 0.1, "loyal"),
        "every4_all_10": sched(4, 0.1, "all"),
        "every5_premium_10": sched(5, 0.1, "premium"),
        "weekly_premium_20": sched(7, 0.2, "premium"),
        "weekly_bargain_20_big": sched(7, 0.2, "bargain", 60.0),
        "weekly_loyal_30": sched(7, 0.3, "loyal"),
        "daily_bargain_5": sched(1, 0.05, "bargain"),
        "daily_premium_5_noon": sched(1, 0.05, "premium", hour=13),
        "every3_all_10_big": sched(3, 0.1, "all", 60.0),
        "every5_all_30": sched(5, 0.3, "all", 60.0),
        "every10_all_20": sched(10, 0.2, "all"),
        "biweekly_casual_20": sched(14, 0.2, "casual"),
        "every3_bargain_30_morning": sched(3, 0.3, "bargain", hour=9),
        "every2_all_push": sched(2, 0.0, "all"),
        "marketer_explore_30": Marketer(MarketerPolicy(epsilon=0.3)),
    }

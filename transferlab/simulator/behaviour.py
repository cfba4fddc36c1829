"""The behaviour policy that made the historical logs: a human marketer with some exploration.

Each day the marketer decides whether to run a campaign and, if so, picks one from the catalog
(:data:`transferlab.simulator.vocabulary.CATALOG`). Habits: campaigns more often before weekends and when
the last week's sales were weak, fewer when many pushes went out recently; moderate discounts, evening
pushes, "all" and "loyal" targets, the small budget. With probability ``epsilon`` the choice is uniform
over the catalog, so every action has positive probability. The exact probability of the logged
action (its propensity) is recorded with it.

>>> policy = MarketerPolicy(epsilon=0.1)
>>> probs = policy.probabilities({"weekday": 4.0, "gmv_7d": 900.0, "pushes_7d": 0.0}, gmv_baseline=1000.0)
>>> round(float(probs.sum()), 6), probs.shape
(1.0, (151,))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from transferlab.simulator.vocabulary import CATALOG, SEGMENTS, CampaignAction

_DISCOUNT_HABIT = {0.0: -0.5, 0.05: 0.3, 0.1: 1.0, 0.2: 0.6, 0.3: -0.8}
_HOUR_HABIT = {9: -0.6, 13: 0.2, 20: 0.8}
_SEGMENT_HABIT = {"all": 0.8, "bargain": 0.0, "casual": -0.2, "loyal": 0.6, "premium": -0.7}
_BUDGET_HABIT = {20.0: 0.4, 60.0: -0.2}


@dataclass(frozen=True)
class MarketerPolicy:
    """A stochastic, context-dependent marketer.

    Attributes:
        epsilon: share of campaign choices made uniformly at random over the catalog.
        base_launch: log-odds of launching a campaign on an ordinary day.
        temperature: softmax temperature over the habit scores (higher: more varied choices).
    """

    epsilon: float = 0.1
    base_launch: float = -0.6
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon={self.epsilon} is outside [0, 1]")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} must be > 0")

    def launch_probability(self, state: Mapping[str, float], gmv_baseline: float) -> float:
        """Chance of running any campaign today."""
        logit = self.base_launch
        if int(state["weekday"]) in (3, 4):  # Thursday, Friday: before the weekend
            logit += 0.7
        if gmv_baseline > 0 and state["gmv_7d"] < 0.9 * gmv_baseline:
            logit += 0.8  # sales look weak: do something
        reach_per_day = max(float(state.get("pushes_7d", 0.0)) / 7.0, 0.0)
        logit -= min(reach_per_day / 2000.0, 1.5)  # many pushes lately: hold back
        return float(1.0 / (1.0 + np.exp(-logit)))

    def campaign_scores(self, state: Mapping[str, float], gmv_baseline: float) -> np.ndarray:
        """Habit score of each non-empty catalog entry (CATALOG[1:])."""
        weak = gmv_baseline > 0 and state["gmv_7d"] < 0.9 * gmv_baseline
        scores = []
        for a in CATALOG[1:]:
            s = _DISCOUNT_HABIT[a.discount] + _HOUR_HABIT[a.push_hour]
            s += _SEGMENT_HABIT[a.segment] + _BUDGET_HABIT[a.budget]
            if weak:
                s += 3.0 * a.discount  # weak sales: deeper discounts
            scores.append(s)
        return np.asarray(scores) / self.temperature

    def probabilities(self, state: Mapping[str, float], gmv_baseline: float) -> np.ndarray:
        """Probability of every catalog action (index 0 = no campaign); sums to 1."""
        p_launch = self.launch_probability(state, gmv_baseline)
        scores = self.campaign_scores(state, gmv_baseline)
        soft = np.exp(scores - scores.max())
        soft /= soft.sum()
        pick = (1.0 - self.epsilon) * soft + self.epsilon / len(soft)
        return np.concatenate([[1.0 - p_launch], p_launch * pick])

    def act(
        self, state: Mapping[str, float], gmv_baseline: float, rng: np.random.Generator
    ) -> tuple[int, CampaignAction, float]:
        """Sample today's action: (catalog index, action, propensity)."""
        probs = self.probabilities(state, gmv_baseline)
        i = int(rng.choice(len(probs), p=probs))
        return i, CATALOG[i], float(probs[i])


assert set(_SEGMENT_HABIT) == {"all", *SEGMENTS}

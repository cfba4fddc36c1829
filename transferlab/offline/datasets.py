"""Offline datasets from campaign logs: d3rlpy ``MDPDataset``s that keep propensities and maturity.

A campaign log (``campaigns.parquet`` from ``transferlab sim generate-logs``, or any table with the
columns below) has one row per decision day. :func:`build_dataset` cuts it into episodes of
``horizon`` days, the shape of the campaign environments, so a policy learned offline can be run in
``transferlab/CampaignWorld-v0`` as it is:

- **observation**: the row's market state (``ctx_<key>`` for every key of :data:`OBS_KEYS`) and the
  share of the episode left, exactly the environment's observation;
- **action**: the catalog index (``action_index``, discrete, 151 actions) or, for continuous
  learners, the discount level scaled to [-1, 1] (see :func:`discount_to_continuous`);
- **reward**: ``reward_source="day"`` (default, the environment's reward) scalarizes the day's
  shop totals (``day_<key>``) with a :class:`RewardConfig`; ``reward_source="campaign"`` scalarizes
  the day's campaign outcome (``o_<key>``), which is only known once the campaign matured;
- the last day of every episode is terminal (the observation carries the time left).

Kept beside the ``MDPDataset`` (d3rlpy has no place for them): each row's logging ``propensity``, whether
its campaign's delayed outcome had ``matured`` by the end of the logs, the catalog index, the episode id.
An immature outcome is never read as zero: with ``reward_source="campaign"`` the rows whose campaign had
not matured are dropped (``immature="drop"``, the default; the episode ends before them) or refused
(``immature="error"``). A day without a campaign has a known campaign outcome of zero.

Validation names the bad rows: missing columns, NaN rewards or observations, propensities outside
(0, 1], actions off the catalog.

>>> import pandas as pd
>>> a = discount_to_continuous(pd.Series([0.0, 0.1, 0.3]), pd.Series([False, True, True]))
>>> [round(float(x), 3) for x in a]
[-1.0, -0.333, 1.0]
>>> [CATALOG[i].discount for i in continuous_to_catalog(np.array([[-1.0], [-0.3], [0.9]]))]
[0.0, 0.1, 0.3]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from pydantic import Field

from transferlab.platform.config import BaseConfig
from transferlab.simulator.envs.campaign import OBS_DIM, RewardConfig, scalarize
from transferlab.simulator.vocabulary import (
    CATALOG,
    CATALOG_DISCOUNTS,
    DAY_KEYS,
    OBS_KEYS,
    OUTCOME_KEYS,
    CampaignAction,
    catalog_index,
)

if TYPE_CHECKING:
    from d3rlpy.dataset import MDPDataset

    from transferlab.simulator.logs import Logs

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The largest catalog discount; continuous actions span [0, MAX_CONTINUOUS_DISCOUNT].
MAX_CONTINUOUS_DISCOUNT = max(CATALOG_DISCOUNTS)
#: A continuous discount below this means no campaign.
NO_CAMPAIGN_BELOW = 0.025
#: The campaign a continuous action launches, apart from its discount: the marketer's habit.
CONTINUOUS_TEMPLATE = CampaignAction(discount=0.1, push_hour=20, segment="all", budget=20.0)


class DatasetError(ValueError):
    """A campaign table cannot become an offline dataset; the message names the rows and the fix."""


class DatasetConfig(BaseConfig):
    """How campaign logs become an offline RL dataset."""

    horizon: int = Field(30, ge=1, le=365, description="Days per episode (the environments use 30).")
    action: Literal["discrete", "continuous"] = Field(
        "discrete",
        description="'discrete': the catalog index (151 actions); 'continuous': the discount level in "
        "[-1, 1] (other campaign fields as the marketer's habit).",
    )
    reward_source: Literal["day", "campaign"] = Field(
        "day",
        description="'day': the day's shop totals (the environment's reward, always known); "
        "'campaign': the day's campaign outcome, known only once it matured.",
    )
    immature: Literal["drop", "error"] = Field(
        "drop",
        description="With reward_source='campaign': drop rows whose campaign had not matured, or refuse.",
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="Weights and scale turning outcomes into a reward."
    )
    keep_partial: bool = Field(
        False, description="Keep a last episode shorter than the horizon (else it is dropped)."
    )


@dataclass(frozen=True)
class OfflineDataset:
    """The episodes as arrays, one row per decision, plus what d3rlpy has no place for."""

    observations: npt.NDArray[np.float32]
    actions: IntArray
    continuous_actions: npt.NDArray[np.float32]
    rewards: FloatArray
    terminals: npt.NDArray[np.bool_]
    episode: IntArray
    """Episode id of each row (0, 1, ...; distinct across the logs)."""
    propensity: FloatArray
    matured: npt.NDArray[np.bool_]
    days: IntArray
    """The logged day of each row."""
    source: IntArray
    """Which of the campaign tables given to :func:`build_dataset` each row came from."""
    config: DatasetConfig

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def n_episodes(self) -> int:
        """Number of episodes."""
        return int(np.unique(self.episode).size)

    @property
    def initial(self) -> npt.NDArray[np.bool_]:
        """Mask of each episode's first row."""
        first = np.ones(len(self), dtype=bool)
        first[1:] = self.episode[1:] != self.episode[:-1]
        return first

    def episode_starts(self) -> list[tuple[int, int]]:
        """``(source, day)`` of every episode's first decision: which log and which logged day."""
        first = self.initial
        return list(zip(self.source[first].tolist(), self.days[first].tolist(), strict=True))

    def episode_returns(self) -> FloatArray:
        """Undiscounted return of every episode (the behaviour policy's realised value)."""
        _, idx = np.unique(self.episode, return_inverse=True)
        return np.bincount(idx, weights=self.rewards).astype(np.float64)

    def to_mdp(self, action: Literal["discrete", "continuous"] | None = None) -> MDPDataset:
        """The d3rlpy ``MDPDataset`` (``action`` defaults to the config's)."""
        from d3rlpy.constants import ActionSpace
        from d3rlpy.dataset import MDPDataset

        kind = action or self.config.action
        timeouts = np.zeros(len(self), dtype=np.float32)
        if kind == "discrete":
            return MDPDataset(
                self.observations,
                self.actions.reshape(-1, 1),
                self.rewards.astype(np.float32).reshape(-1, 1),
                self.terminals.astype(np.float32),
                timeouts,
                action_space=ActionSpace.DISCRETE,
                action_size=len(CATALOG),
            )
        return MDPDataset(
            self.observations,
            self.continuous_actions,
            self.rewards.astype(np.float32).reshape(-1, 1),
            self.terminals.astype(np.float32),
            timeouts,
            action_space=ActionSpace.CONTINUOUS,
        )


# ------------------------------------------------------------------------------------ action maps


def discount_to_continuous(discount: pd.Series, launched: pd.Series) -> npt.NDArray[np.float32]:
    """Continuous action in [-1, 1] of logged campaigns: the discount scaled; no campaign is -1."""
    d = np.where(launched.to_numpy(dtype=bool), discount.to_numpy(dtype=np.float64), 0.0)
    return np.asarray(2.0 * d / MAX_CONTINUOUS_DISCOUNT - 1.0, dtype=np.float32)


def continuous_to_catalog(actions: npt.ArrayLike) -> IntArray:
    """Catalog index of continuous actions ``(n, 1)`` in [-1, 1]: the nearest catalog discount in
    :data:`CONTINUOUS_TEMPLATE`'s campaign, or no campaign below :data:`NO_CAMPAIGN_BELOW`."""
    a = np.clip(np.asarray(actions, dtype=np.float64).reshape(-1), -1.0, 1.0)
    discount = (a + 1.0) / 2.0 * MAX_CONTINUOUS_DISCOUNT
    levels = np.array([d for d in CATALOG_DISCOUNTS if d > 0])
    nearest = levels[np.abs(discount[:, None] - levels[None, :]).argmin(axis=1)]
    index = {d: catalog_index(CampaignAction(d, *_template_rest())) for d in levels.tolist()}
    out = np.array([index[float(d)] for d in nearest], dtype=np.int64)
    return np.where(discount < NO_CAMPAIGN_BELOW, 0, out).astype(np.int64)


def _template_rest() -> tuple[int, str, float]:
    t = CONTINUOUS_TEMPLATE
    return t.push_hour, t.segment, t.budget


# ------------------------------------------------------------------------------------ validation


def _rows(mask: npt.ArrayLike, index: pd.Index) -> str:
    bad = list(index[np.asarray(mask, dtype=bool)])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    return f"{bad[:5]}{more}"


def required_columns(config: DatasetConfig) -> list[str]:
    """The columns a campaign table needs for ``config``."""
    cols = ["day", *(f"ctx_{k}" for k in OBS_KEYS), "action_index", "propensity"]
    if config.action == "continuous":
        cols += ["discount", "launched"]
    if config.reward_source == "day":
        cols += [f"day_{k}" for k in config.reward.weights]
        cols += [f"day_{c.key}" for c in config.reward.constraints]
    else:
        cols += ["launched", "matured", *(f"o_{k}" for k in config.reward.weights)]
    return list(dict.fromkeys(cols))


def validate_campaigns(frame: pd.DataFrame, config: DatasetConfig) -> None:
    """Raise :class:`DatasetError` naming missing columns or the first bad rows and the fix."""
    if config.reward_source == "campaign":
        unknown = sorted(set(config.reward.weights) - set(OUTCOME_KEYS))
        if unknown or config.reward.constraints:
            raise DatasetError(
                f"reward_source='campaign' scalarizes campaign outcomes ({', '.join(OUTCOME_KEYS)}); "
                f"weights {unknown} or constraints cannot apply: use reward_source='day'"
            )
    missing = [c for c in required_columns(config) if c not in frame.columns]
    if missing:
        raise DatasetError(
            f"campaign table is missing column(s) {missing}; a table from `transferlab sim "
            "generate-logs` has them all (see transferlab.offline.datasets for the meaning of each)"
        )
    if frame.empty:
        raise DatasetError("campaign table is empty: it needs at least one episode of decision days")
    idx = frame.index
    p = frame["propensity"].to_numpy(dtype=np.float64)
    bad_p = ~((p > 0) & (p <= 1))
    if bad_p.any():
        raise DatasetError(
            f"rows {_rows(bad_p, idx)} have propensities outside (0, 1]: a propensity is the "
            "logging policy's probability of the logged action; fix or drop those rows"
        )
    a = frame["action_index"].to_numpy()
    bad_a = ~np.isfinite(a.astype(np.float64)) | (a < 0) | (a >= len(CATALOG)) | (a != np.round(a))
    if bad_a.any():
        raise DatasetError(
            f"rows {_rows(bad_a, idx)} have action_index outside the catalog [0, {len(CATALOG)}): "
            "use transferlab.simulator.vocabulary.catalog_index"
        )
    obs = frame[[f"ctx_{k}" for k in OBS_KEYS]].to_numpy(dtype=np.float64)
    bad_o = ~np.isfinite(obs).all(axis=1)
    if bad_o.any():
        raise DatasetError(f"rows {_rows(bad_o, idx)} have NaN or infinite ctx_* observations")
    if config.reward_source == "day":
        rew = frame[[c for c in required_columns(config) if c.startswith("day_")]]
        bad_r = ~np.isfinite(rew.to_numpy(dtype=np.float64)).all(axis=1)
        if bad_r.any():
            raise DatasetError(
                f"rows {_rows(bad_r, idx)} have NaN rewards (day_* totals): a day's totals are "
                "known at its close; drop those rows or refill them from the daily log"
            )


# ------------------------------------------------------------------------------------ building


def _campaign_rewards(frame: pd.DataFrame, config: DatasetConfig) -> tuple[FloatArray, FloatArray]:
    """(reward, known) of the campaign outcome: 0 and known for days without a campaign."""
    launched = frame["launched"].to_numpy(dtype=bool)
    matured = frame["matured"].to_numpy(dtype=bool) | ~launched
    cols = [f"o_{k}" for k in config.reward.weights]
    values = np.nan_to_num(frame[cols].to_numpy(dtype=np.float64)) * launched[:, None]
    w = np.array(list(config.reward.weights.values()))
    reward = values @ w * config.reward.scale
    launched_nan = launched & ~np.isfinite(frame[cols].to_numpy(dtype=np.float64)).all(axis=1)
    known = matured & ~launched_nan
    return reward, known.astype(np.float64)


def _day_rewards(frame: pd.DataFrame, config: DatasetConfig) -> FloatArray:
    outcomes = np.zeros((len(frame), len(DAY_KEYS)))
    for j, k in enumerate(DAY_KEYS):
        if f"day_{k}" in frame.columns:
            outcomes[:, j] = frame[f"day_{k}"].to_numpy(dtype=np.float64)
    return scalarize(outcomes, config.reward)


def _episode_ids(day: npt.NDArray[np.int64], keep: npt.NDArray[np.bool_], horizon: int) -> IntArray:
    """Episode id per kept row: runs of consecutive days, cut every ``horizon`` days; -1 for dropped."""
    ids = np.full(day.shape, -1, dtype=np.int64)
    current, length, prev = -1, 0, None
    for i in range(day.size):
        if not keep[i]:
            prev = None
            continue
        if prev is None or day[i] != prev + 1 or length >= horizon:
            current, length = current + 1, 0
        ids[i] = current
        length += 1
        prev = int(day[i])
    return ids


def build_dataset(
    campaigns: pd.DataFrame | Sequence[pd.DataFrame], config: DatasetConfig | None = None
) -> OfflineDataset:
    """The offline dataset of one or more campaign tables (each its own shop's history)."""
    config = config or DatasetConfig()
    frames = [campaigns] if isinstance(campaigns, pd.DataFrame) else list(campaigns)
    if not frames:
        raise DatasetError("no campaign tables given: pass at least one log's campaigns table")
    parts = [_build_one(f, config) for f in frames]
    for i, part in enumerate(parts):
        part["source"] = np.full(part["actions"].shape, i, dtype=np.int64)
    offset = 0
    for part in parts:
        part["episode"] = part["episode"] + offset
        offset = int(part["episode"].max()) + 1 if len(part["episode"]) else offset
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if arrays["actions"].size == 0:
        raise DatasetError(
            f"no complete episode of {config.horizon} days in the logs: generate longer logs, "
            "lower the horizon, or pass keep_partial=True"
        )
    return OfflineDataset(config=config, **arrays)


def _build_one(frame: pd.DataFrame, config: DatasetConfig) -> dict[str, np.ndarray]:
    validate_campaigns(frame, config)
    frame = frame.sort_values("day", kind="stable")
    n = len(frame)
    launched = (
        frame["launched"].to_numpy(dtype=bool)
        if "launched" in frame
        else frame["action_index"].to_numpy() > 0
    )
    matured = (
        frame["matured"].to_numpy(dtype=bool) | ~launched if "matured" in frame else np.ones(n, dtype=bool)
    )
    keep = np.ones(n, dtype=bool)
    if config.reward_source == "campaign":
        rewards, known = _campaign_rewards(frame, config)
        unknown = known == 0
        if unknown.any() and config.immature == "error":
            raise DatasetError(
                f"rows {_rows(unknown, frame.index)} have campaigns whose outcome had not matured "
                "(NaN o_* columns): they are not zero; pass immature='drop' or use longer logs"
            )
        keep &= ~unknown
    else:
        rewards = _day_rewards(frame, config)
    episode = _episode_ids(frame["day"].to_numpy(dtype=np.int64), keep, config.horizon)
    if not config.keep_partial:
        ids, counts = np.unique(episode[episode >= 0], return_counts=True)
        short = ids[counts < config.horizon]
        episode[np.isin(episode, short)] = -1
    rows = episode >= 0
    _, episode_dense = np.unique(episode[rows], return_inverse=True)
    episode_dense = episode_dense.astype(np.int64)
    obs = frame[[f"ctx_{k}" for k in OBS_KEYS]].to_numpy(dtype=np.float64)[rows]
    position = _positions(episode_dense)
    left = 1.0 - position / config.horizon
    observations = np.concatenate([obs, left[:, None]], axis=1).astype(np.float32)
    assert observations.shape[1] == OBS_DIM
    terminals = np.zeros(len(episode_dense), dtype=bool)
    if len(episode_dense):
        terminals[:-1] = episode_dense[1:] != episode_dense[:-1]
        terminals[-1] = True
    discount = frame["discount"] if "discount" in frame else pd.Series(np.zeros(n))
    return {
        "observations": observations,
        "actions": frame["action_index"].to_numpy(dtype=np.int64)[rows],
        "continuous_actions": discount_to_continuous(discount, pd.Series(launched))[rows].reshape(-1, 1),
        "rewards": np.asarray(rewards, dtype=np.float64)[rows],
        "terminals": terminals,
        "episode": episode_dense,
        "propensity": frame["propensity"].to_numpy(dtype=np.float64)[rows],
        "matured": matured[rows],
        "days": frame["day"].to_numpy(dtype=np.int64)[rows],
    }


def _positions(episode: IntArray) -> FloatArray:
    """0-based position of each row within its episode."""
    if episode.size == 0:
        return np.zeros(0)
    starts = np.r_[0, np.flatnonzero(episode[1:] != episode[:-1]) + 1]
    lengths = np.diff(np.r_[starts, episode.size])
    return (np.arange(episode.size) - np.repeat(starts, lengths)).astype(np.float64)


def from_logs(logs: Logs | Sequence[Logs], config: DatasetConfig | None = None) -> OfflineDataset:
    """The offline dataset of one or more log directories read by ``read_logs``."""
    items = [logs] if not isinstance(logs, Sequence) else list(logs)
    return build_dataset([lg.campaigns for lg in items], config)


__all__ = [
    "CONTINUOUS_TEMPLATE",
    "MAX_CONTINUOUS_DISCOUNT",
    "NO_CAMPAIGN_BELOW",
    "DatasetConfig",
    "DatasetError",
    "OfflineDataset",
    "build_dataset",
    "continuous_to_catalog",
    "discount_to_continuous",
    "from_logs",
    "required_columns",
    "validate_campaigns",
]

"""Campaign environments: one marketing decision a day for 30 days, in a market that answers late.

``transferlab/CampaignWorld-v0`` runs the ground-truth world (for evaluation: the truth);
``transferlab/Campaign-v0`` runs a simulator learned from logs (for training). Both sit on a *batched
market* — anything with ``reset(seed) -> obs``, ``step(actions) -> outcomes`` and ``observe()`` over
``n_envs`` markets — so :class:`CampaignVectorEnv` steps many markets in one call.

>>> from transferlab.simulator.envs.campaign import RewardConfig, scalarize
>>> import numpy as np
>>> outcome = np.zeros((1, len(DAY_KEYS))); outcome[0, DAY_KEYS.index("profit")] = 250.0
>>> scalarize(outcome, RewardConfig.build(weights={"profit": 1.0}, scale=0.01)).tolist()
[2.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, field_validator

from transferlab.platform.config import BaseConfig
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, NOOP, OBS_KEYS
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import CustomerPrior, WorldConfig

OBS_DIM = len(OBS_KEYS) + 1  # + share of the episode left


class BatchMarket(Protocol):
    """``n_envs`` independent markets stepped together (the world adapter or a learned simulator)."""

    n_envs: int

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start fresh markets; returns observations ``(n_envs, len(OBS_KEYS))``."""
        ...

    def step(self, actions: np.ndarray) -> np.ndarray:
        """Launch ``CATALOG[actions[i]]`` in market i, simulate a day; returns ``(n_envs, len(DAY_KEYS))``."""
        ...

    def observe(self) -> np.ndarray:
        """The observed market state ``(n_envs, len(OBS_KEYS))``."""
        ...


class Constraint(BaseModel):
    """A limit on one daily outcome: each unit beyond it costs ``penalty`` (before ``scale``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = Field(description="A DAY_KEYS outcome, e.g. 'complaints'.")
    kind: Literal["max", "min"] = Field("max", description="'max': stay at or below; 'min': at or above.")
    limit: float = Field(description="The bound.")
    penalty: float = Field(ge=0, description="Reward lost per unit of violation.")

    @field_validator("key")
    @classmethod
    def _known_key(cls, v: str) -> str:
        if v not in DAY_KEYS:
            raise ValueError(f"unknown outcome {v!r}; use one of {', '.join(DAY_KEYS)}")
        return v


class RewardConfig(BaseConfig):
    """How a day's outcome vector becomes a scalar reward: weights, constraints, scale."""

    weights: dict[str, float] = Field(
        default_factory=lambda: {"profit": 1.0, "complaints": -10.0},
        description="Weight of each DAY_KEYS outcome (money in dollars, counts per event).",
    )
    constraints: list[Constraint] = Field(
        default_factory=list, description="Limits on daily outcomes, each with a penalty per unit beyond."
    )
    scale: float = Field(0.01, gt=0, description="Multiplier on the weighted sum (keeps rewards near 1).")

    @field_validator("weights")
    @classmethod
    def _known_weights(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(DAY_KEYS))
        if unknown:
            raise ValueError(f"unknown outcome(s) {unknown}; weights take {', '.join(DAY_KEYS)}")
        return v


def scalarize(outcomes: np.ndarray, reward: RewardConfig) -> np.ndarray:
    """Scalar rewards ``(n,)`` of daily outcome vectors ``(n, len(DAY_KEYS))``: weights minus penalties."""
    w = np.array([reward.weights.get(k, 0.0) for k in DAY_KEYS])
    total = outcomes @ w
    for c in reward.constraints:
        x = outcomes[:, DAY_KEYS.index(c.key)]
        excess = x - c.limit if c.kind == "max" else c.limit - x
        total = total - c.penalty * np.maximum(excess, 0.0)
    return np.asarray(total * reward.scale, dtype=np.float64)


class EpisodeConfig(BaseConfig):
    """The episode shape shared by every campaign environment."""

    horizon: int = Field(30, ge=1, le=365, description="Decision days per episode (a month).")
    warmup_days: int = Field(
        14, ge=0, le=365, description="Days simulated without campaigns before the first decision."
    )
    settle_days: int = Field(
        21,
        ge=0,
        le=120,
        description="Days simulated after the last decision, without campaigns, whose rewards are "
        "credited on the last step: delayed conversions, returns and complaints, and purchases a "
        "promotion pulled forward, all count.",
    )


class WorldMarket:
    """The ground-truth world as a :class:`BatchMarket`: ``n_envs`` independent ``MarketWorld``s.

    With ``history_days`` the world (seed ``config.seed``) first lives that many days under the
    marketer who made the logs, and every reset forks that same present into ``n_envs`` futures
    (``MarketWorld.fork``), so episodes start where the logs end — what a simulator fitted on those
    logs continues from — rather than in a brand-new shop. :meth:`from_manifest` rebuilds exactly the
    logged history from a log directory's manifest (same world seed, same marketer).
    """

    def __init__(
        self,
        config: WorldConfig,
        n_envs: int = 1,
        prior: CustomerPrior | None = None,
        history_days: int = 0,
        history_epsilon: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.config, self.n_envs, self.prior = config, n_envs, prior
        self.history_days, self.history_epsilon = history_days, history_epsilon
        self.worlds: list[MarketWorld] = []
        self._present: MarketWorld | None = None
        self.reset(seed)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], n_envs: int = 1, seed: int = 0) -> WorldMarket:
        """The world of a log directory (``Logs.manifest``), continuing after its logged history;
        ``seed`` only picks the futures."""
        try:
            config = WorldConfig.build(**manifest["world"])
            days, epsilon = int(manifest["days"]), float(manifest["epsilon"])
        except KeyError as exc:
            raise ValueError(f"log manifest is missing {exc.args[0]!r}: regenerate the logs") from exc
        return cls(config, n_envs, history_days=days, history_epsilon=epsilon, seed=seed)

    def present(self) -> MarketWorld:
        """The world after its history (built once, then only forked)."""
        from transferlab.simulator.logs import drive_with_marketer

        if self._present is None:
            self._present = MarketWorld(self.config, self.prior)
            drive_with_marketer(self._present, self.history_days, self.history_epsilon)
        return self._present

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = self.config.seed if seed is None else seed
        if self.history_days:
            present = self.present()
            self.worlds = [present.fork(seed=base * 1000 + i + 1) for i in range(self.n_envs)]
        else:
            self.worlds = [
                MarketWorld(self.config.model_copy(update={"seed": base * 1000 + i}), self.prior)
                for i in range(self.n_envs)
            ]
        return self.observe()

    def step(self, actions: np.ndarray) -> np.ndarray:
        return np.stack([w.step(CATALOG[int(a)]).vector() for w, a in zip(self.worlds, actions, strict=True)])

    def observe(self) -> np.ndarray:
        return np.array([[w.observe()[k] for k in OBS_KEYS] for w in self.worlds], dtype=np.float64)


class _Episode:
    """The shared episode clock and reward bookkeeping over a batched market."""

    def __init__(self, market: BatchMarket, episode: EpisodeConfig, reward: RewardConfig) -> None:
        self.market, self.episode, self.reward = market, episode, reward
        self.t = 0

    def reset(self, seed: int | None) -> np.ndarray:
        self.market.reset(seed)
        noop = np.zeros(self.market.n_envs, dtype=np.int64)
        for _ in range(self.episode.warmup_days):
            self.market.step(noop)
        self.t = 0
        return self.obs()

    def obs(self) -> np.ndarray:
        left = np.full((self.market.n_envs, 1), 1.0 - self.t / self.episode.horizon)
        return np.concatenate([self.market.observe(), left], axis=1).astype(np.float32)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, dict[str, Any]]:
        outcomes = self.market.step(actions)
        rewards = scalarize(outcomes, self.reward)
        self.t += 1
        done = self.t >= self.episode.horizon
        info: dict[str, Any] = {"outcome": outcomes, "day": self.t}
        if done and self.episode.settle_days:
            noop = np.zeros(self.market.n_envs, dtype=np.int64)
            settled = np.zeros_like(outcomes)
            for _ in range(self.episode.settle_days):
                settled += self.market.step(noop)
            settled_reward = scalarize(settled, self.reward)
            rewards = rewards + settled_reward
            info.update(settled_outcome=settled, settled_reward=settled_reward)
        return self.obs(), rewards, done, info


class CampaignEnv(gym.Env[np.ndarray, np.int64]):
    """Run one marketing campaign decision a day; the market answers with noise and delay.

    ## Description
    Each step is a day. The agent picks a campaign from the 151-entry catalog (no campaign, or a
    discount pushed at an hour to a segment within a budget); the market simulates the day. Purchases
    triggered by a push keep arriving for a week, returns come 7-21 days after delivery, complaints
    follow late deliveries, and a promotion pulls purchases forward from later days.

    ## Action Space
    ``Discrete(151)``: an index into :data:`transferlab.simulator.vocabulary.CATALOG` (0 = no campaign).

    ## Observation Space
    ``Box(-inf, inf, (18,), float32)``: the market state a marketer sees (:data:`OBS_KEYS`: weekday,
    7-day orders/GMV/profit/complaints/returns/pushes, active and subscribed shares, stock cover and
    competitor price index per category) and the share of the episode left.

    ## Rewards
    A scalar from the day's shop-wide outcome vector (:data:`DAY_KEYS`) by :class:`RewardConfig`
    weights and constraints (default: profit minus $10 per complaint, times 0.01). The vector itself
    is in ``info["outcome"]``, never collapsed unless you choose weights. On the last step, the
    rewards of ``settle_days`` campaign-free days are added: delayed effects are credited when they
    mature, and pulled-forward purchases are paid back.

    ## Starting State
    A fresh market (seeded), then ``warmup_days`` days without campaigns.

    ## Episode End
    Truncated after ``horizon`` decision days (30); never terminated early.

    ## Arguments
    ``market``: a :class:`BatchMarket` with ``n_envs == 1``; ``episode``: :class:`EpisodeConfig`;
    ``reward``: :class:`RewardConfig`.

    ## Version History
    * v0: initial version.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        market: BatchMarket,
        episode: EpisodeConfig | None = None,
        reward: RewardConfig | None = None,
    ) -> None:
        if market.n_envs != 1:
            raise ValueError(
                f"CampaignEnv needs a market with n_envs=1, got {market.n_envs}; use CampaignVectorEnv"
            )
        self._ep = _Episode(market, episode or EpisodeConfig(), reward or RewardConfig())
        self.action_space = spaces.Discrete(len(CATALOG))
        self.observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        market_seed = int(self.np_random.integers(0, 2**31 - 1))
        return self._ep.reset(market_seed)[0], {}

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(np.int64(action)):
            raise ValueError(f"action {action!r} is not in Discrete({len(CATALOG)}): give a CATALOG index")
        obs, rewards, done, info = self._ep.step(np.array([int(action)]))
        info = {k: (v[0] if isinstance(v, np.ndarray) else v) for k, v in info.items()}
        info["outcome"] = dict(zip(DAY_KEYS, info["outcome"].tolist(), strict=True))
        return obs[0], float(rewards[0]), False, done, info


class CampaignVectorEnv(gym.vector.VectorEnv):
    """``n_envs`` campaign episodes stepped in one batched call (all on the same day clock).

    Every sub-environment ends on the same step (the horizon); call ``reset()`` to start the next
    batch of episodes. Rewards, outcomes (``info["outcome"]``, shape ``(n, len(DAY_KEYS))``) and
    observations are arrays over the sub-environments.
    """

    def __init__(
        self,
        market: BatchMarket,
        episode: EpisodeConfig | None = None,
        reward: RewardConfig | None = None,
    ) -> None:
        self._ep = _Episode(market, episode or EpisodeConfig(), reward or RewardConfig())
        self.num_envs = market.n_envs
        self.single_action_space = spaces.Discrete(len(CATALOG))
        self.single_observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        self.action_space = spaces.MultiDiscrete(np.full(self.num_envs, len(CATALOG)))
        self.observation_space = spaces.Box(-np.inf, np.inf, (self.num_envs, OBS_DIM), np.float32)
        self._seed: int | None = None

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if isinstance(seed, Sequence):
            seed = int(seed[0])
        if seed is not None:
            self._seed = seed
        elif self._seed is not None:
            self._seed += 1
        return self._ep.reset(self._seed), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if actions.min() < 0 or actions.max() >= len(CATALOG):
            raise ValueError(f"actions must be CATALOG indices in [0, {len(CATALOG)}), got {actions}")
        obs, rewards, done, info = self._ep.step(actions)
        n = self.num_envs
        return obs, rewards, np.zeros(n, dtype=bool), np.full(n, done), info


def run_policy(
    market: BatchMarket,
    policy: Any,
    episode: EpisodeConfig | None = None,
    reward: RewardConfig | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Run one batch of episodes with ``policy(obs (n, OBS_DIM), rng) -> actions (n,)``.

    Returns per-episode ``return`` (n,), the summed outcome vectors ``outcome`` (n, len(DAY_KEYS))
    including the settlement days, and the decision days' outcomes ``daily`` (horizon, n, len(DAY_KEYS)).
    """
    env = CampaignVectorEnv(market, episode, reward)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    total = np.zeros(env.num_envs)
    outcome = np.zeros((env.num_envs, len(DAY_KEYS)))
    daily = []
    done = False
    while not done:
        obs, r, _, trunc, info = env.step(policy(obs, rng))
        total += r
        daily.append(info["outcome"])
        outcome += info["outcome"] + info.get("settled_outcome", 0.0)
        done = bool(trunc.all())
    return {"return": total, "outcome": outcome, "daily": np.stack(daily)}


__all__ = [
    "NOOP",
    "OBS_DIM",
    "BatchMarket",
    "CampaignEnv",
    "CampaignVectorEnv",
    "Constraint",
    "EpisodeConfig",
    "RewardConfig",
    "WorldMarket",
    "run_policy",
    "scalarize",
]

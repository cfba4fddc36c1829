"""How far a learned simulator is from the world, measured the way decisions need it.

Three views, each in :class:`Fidelity`:

* **ranking** — the policy panel (:func:`transferlab.simulator.policies.policy_panel`, 12 policies)
  is evaluated in both markets; Kendall's tau between the two orderings says whether the simulator
  picks the policies the world would pick;
* **outcome error** — per policy, the relative error of the simulator's mean outcome vector (orders,
  GMV, profit, returns, complaints per episode, delayed effects included) against the world's;
  policies whose actions the logs (almost) never took are the held-out actions;
* **distribution distance** — Wasserstein distances between the daily outcome distributions under the
  behaviour policy in the simulator and in the world (scaled by the world's standard deviation).

``fidelity(sim_factory, world_factory, ...)`` takes two *market factories* ``(n_envs, seed) ->
BatchMarket`` so it works for any pair (learned simulator vs world, world vs world as a control).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from transferlab.platform.stats import Interval, bootstrap_ci
from transferlab.simulator.envs.campaign import (
    BatchMarket,
    EpisodeConfig,
    RewardConfig,
    WorldMarket,
    run_policy,
)
from transferlab.simulator.policies import Policy, Schedule, policy_panel
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS

MarketFactory = Callable[[int, int], BatchMarket]
ERROR_KEYS = ("orders", "gmv", "profit", "returns", "complaints")
DISTANCE_KEYS = ("orders", "gmv", "profit", "returns")
RARE_SHARE = 0.005  # an action taken on fewer than 0.5% of logged days counts as held out


@dataclass
class PanelResult:
    """Each policy's value (mean episode return with a bootstrap interval) and outcome means."""

    values: dict[str, Interval]
    outcomes: dict[str, np.ndarray]  # mean summed outcome vector per episode (DAY_KEYS order)
    daily: dict[str, np.ndarray]  # (days * episodes, len(DAY_KEYS)) decision-day outcomes
    returns: dict[str, np.ndarray] = field(default_factory=dict)  # per-episode return, same seeds


@dataclass
class Fidelity:
    """The simulator-vs-world comparison (see the module docstring)."""

    kendall_tau: float
    kendall_p: float
    table: pd.DataFrame  # one row per policy
    distances: dict[str, float]
    sim: PanelResult = field(repr=False)
    world: PanelResult = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """JSON-able headline figures."""
        held = self.table[self.table["held_out"]]
        return {
            "kendall_tau": self.kendall_tau,
            "kendall_p": self.kendall_p,
            "policies": len(self.table),
            "median_abs_rel_error": {k: float(self.table[f"err_{k}"].abs().median()) for k in ERROR_KEYS},
            "held_out_median_abs_rel_error": {
                k: float(held[f"err_{k}"].abs().median()) if len(held) else None for k in ERROR_KEYS
            },
            "distances": self.distances,
        }


def evaluate_panel(
    factory: MarketFactory,
    panel: Mapping[str, Policy],
    *,
    episodes: int,
    seed: int,
    episode: EpisodeConfig | None = None,
    reward: RewardConfig | None = None,
) -> PanelResult:
    """Run every policy for ``episodes`` episodes (one batched market each) in the factory's markets.

    Every policy gets the same market seeds (common random numbers: the same starting markets and,
    until the actions differ, the same draws), which sharpens the comparison between policies.
    """
    values, outcomes, daily, returns = {}, {}, {}, {}
    for name, policy in panel.items():
        res = run_policy(factory(episodes, seed), policy, episode, reward, seed=seed)
        values[name] = bootstrap_ci(res["return"], seed=seed)
        outcomes[name] = res["outcome"].mean(axis=0)
        daily[name] = res["daily"].reshape(-1, len(DAY_KEYS))
        returns[name] = np.asarray(res["return"], dtype=np.float64)
    return PanelResult(values, outcomes, daily, returns)


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b between two value vectors (1: the same order)."""
    return float(stats.kendalltau(a, b)[0])


def _quantiles(values: np.ndarray, level: float) -> list[float]:
    return [float(x) for x in np.nanquantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])]


def _returns(panel: PanelResult, names: list[str]) -> np.ndarray:
    """``(policies, episodes)`` per-episode returns in ``names`` order."""
    return np.stack([panel.returns[n] for n in names])


def ranking_agreement(
    sim: PanelResult, world: PanelResult, *, n_boot: int = 500, level: float = 0.95, seed: int = 0
) -> tuple[float, list[float]]:
    """Kendall tau between the simulator's and the world's policy values, with a percentile bootstrap
    interval that resamples each market's episodes (the same indices for every policy: they ran on the
    same futures)."""
    names = list(world.returns)
    w, s = _returns(world, names), _returns(sim, names)
    rng = np.random.default_rng(seed)
    taus = np.empty(n_boot)
    for i in range(n_boot):
        wi = w[:, rng.integers(0, w.shape[1], w.shape[1])]
        si = s[:, rng.integers(0, s.shape[1], s.shape[1])]
        taus[i] = kendall(si.mean(axis=1), wi.mean(axis=1))
    return kendall(s.mean(axis=1), w.mean(axis=1)), _quantiles(taus, level)


def noise_ceiling(
    world: PanelResult, *, n_boot: int = 500, level: float = 0.95, seed: int = 0
) -> tuple[float, list[float]]:
    """The world's own ranking agreement: Kendall tau between the policy values of two halves of its
    episodes, with a bootstrap interval (each half resampled). A simulator cannot be judged finer than
    the world agrees with itself at that many episodes."""
    w = _returns(world, list(world.returns))
    if w.shape[1] < 4:
        raise ValueError(f"the noise ceiling needs at least 4 world episodes per policy, got {w.shape[1]}")
    half = w.shape[1] // 2
    rng = np.random.default_rng(seed)
    ceilings = np.empty(n_boot)
    for i in range(n_boot):
        a, b = rng.integers(0, half, half), half + rng.integers(0, half, half)
        ceilings[i] = kendall(w[:, a].mean(axis=1), w[:, b].mean(axis=1))
    tau = kendall(w[:, :half].mean(axis=1), w[:, half : 2 * half].mean(axis=1))
    return tau, _quantiles(ceilings, level)


def world_factory(manifest: Mapping[str, Any]) -> MarketFactory:
    """Markets of the world that made a log directory, continuing after its history (built once)."""
    cache: dict[int, WorldMarket] = {}

    def make(n_envs: int, seed: int) -> BatchMarket:
        if n_envs not in cache:
            cache[n_envs] = WorldMarket.from_manifest(dict(manifest), n_envs=n_envs, seed=seed)
        return cache[n_envs]

    return make


def logged_share(policy: Policy, action_counts: np.ndarray) -> float | None:
    """Share of logged days that took the action a schedule policy runs (None for other policies)."""
    if not isinstance(policy, Schedule):
        return None
    index = CATALOG.index(policy.action)
    return float(action_counts[index] / max(action_counts.sum(), 1))


def compare(
    sim: PanelResult,
    world: PanelResult,
    panel: Mapping[str, Policy],
    action_counts: np.ndarray | None = None,
    behaviour: str = "marketer",
) -> Fidelity:
    """Rank agreement, outcome errors and distribution distances between two panel evaluations."""
    names = list(panel)
    sim_v = np.array([sim.values[n].estimate for n in names])
    world_v = np.array([world.values[n].estimate for n in names])
    tau, p = stats.kendalltau(sim_v, world_v)
    rows = []
    for n in names:
        share = logged_share(panel[n], action_counts) if action_counts is not None else None
        row: dict[str, Any] = {
            "policy": n,
            "sim_value": sim.values[n].estimate,
            "world_value": world.values[n].estimate,
            "world_ci_low": world.values[n].low,
            "world_ci_high": world.values[n].high,
            "logged_share": share,
            "held_out": share is not None and share < RARE_SHARE,
        }
        for k in ERROR_KEYS:
            j = DAY_KEYS.index(k)
            truth = world.outcomes[n][j]
            row[f"err_{k}"] = (sim.outcomes[n][j] - truth) / abs(truth) if truth else np.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    table["sim_rank"] = table["sim_value"].rank(ascending=False).astype(int)
    table["world_rank"] = table["world_value"].rank(ascending=False).astype(int)
    distances = {}
    for k in DISTANCE_KEYS if behaviour in sim.daily and behaviour in world.daily else ():
        j = DAY_KEYS.index(k)
        a, b = sim.daily[behaviour][:, j], world.daily[behaviour][:, j]
        distances[k] = float(stats.wasserstein_distance(a, b) / max(float(np.std(b)), 1e-9))
    return Fidelity(float(tau), float(p), table, distances, sim, world)


def fidelity(
    sim_factory: MarketFactory,
    world_factory: MarketFactory,
    *,
    episodes: int = 16,
    seed: int = 0,
    action_counts: np.ndarray | None = None,
    panel: Mapping[str, Policy] | None = None,
    episode: EpisodeConfig | None = None,
    reward: RewardConfig | None = None,
    world_result: PanelResult | None = None,
) -> Fidelity:
    """Evaluate the panel in both markets and compare (reuse ``world_result`` to skip the world runs)."""
    panel = panel or policy_panel()
    sim = evaluate_panel(sim_factory, panel, episodes=episodes, seed=seed, episode=episode, reward=reward)
    world = world_result or evaluate_panel(
        world_factory, panel, episodes=episodes, seed=seed + 1, episode=episode, reward=reward
    )
    return compare(sim, world, panel, action_counts)

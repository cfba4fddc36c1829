"""Measured numbers for comparing task families: :class:`Measure`, the table's vocabulary, the arithmetic.

A :class:`Measure` is a value, its unit and a sentence saying how it was measured. Each domain
measures its own families (``coding_rl.measures``, ``simulator.measures``, ``simulator.ops.measures``)
into a :data:`Section` keyed by :data:`PROPERTIES`, :data:`QUESTIONS` and :data:`LAYERS`;
``transferlab compare`` assembles the sections into one table. The arithmetic lives in small pure
functions here (:func:`spread`, :func:`pearson`, :func:`nonflat_share`, :func:`per_cost`), with the
timing helpers every throughput measure uses (:func:`timed_pool`, :func:`cpu_now`).

>>> spread([1.0, 1.0, 1.0])["std"]
0.0
>>> round(pearson([1, 2, 3], [2, 4, 7]), 4)
0.9934
>>> nonflat_share([[0, 0], [0, 1], [1, 1]])
0.3333333333333333
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np

PROPERTIES: dict[str, str] = {
    "determinism": "环境确定性 determinism",
    "reward_delay": "奖励延迟 reward delay",
    "parallel": "并行探索 parallel exploration",
    "cost": "试错成本 cost per trial",
    "objectivity": "奖励客观性 reward objectivity",
    "tool_use": "工具使用 tool use trainable (multi-turn agent RL)",
    "single_step_rl": "单步 RL single-step RL, no tools",
}
QUESTIONS: dict[str, str] = {
    "trustworthy": "Is the reward trustworthy?",
    "explore": "Can the policy explore different outcomes?",
    "repeatable": "Can the environment be repeated?",
    "worth_cost": "Is the gain worth the cost?",
}
LAYERS: dict[str, str] = {
    "information": "information & interface",
    "basic": "basic behaviour",
    "sequential": "sequential decisions",
}


@dataclass(frozen=True)
class Measure:
    """One measured number: value (None when not measured), unit, how it was measured, extras."""

    value: float | None
    unit: str
    how: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        """Whether there is a number (not None, not NaN)."""
        return not (self.value is None or (isinstance(self.value, float) and math.isnan(self.value)))

    def cell(self, fmt: str = ".3g") -> str:
        """Short text for a table cell: ``"0 s"``, ``"not measured"``."""
        if not self.measured:
            return "not measured"
        return f"{format(self.value, fmt)} {self.unit}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "how": self.how, **self.extra}


def not_measured(why: str) -> Measure:
    return Measure(None, "", why)


Section = dict[str, dict[str, Measure]]
"""One family measured: ``"table"`` (property -> Measure), ``"questions"`` and ``"diagnosis"``."""
Progress = Callable[[str], None]
"""Where a long measurement says what it is doing (``say("coding: ...")``)."""


@dataclass
class Measured:
    """What a domain's ``measure_*`` returns: a section per family, and the raw numbers behind them."""

    sections: dict[str, Section]
    throughput: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    panel: dict[str, dict[str, float]] = field(default_factory=dict)


# -------------------------------------------------------------------------------- pure arithmetic


def spread(values: Sequence[float]) -> dict[str, float]:
    """Population std, interquartile range, mean and n of replayed outcomes."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("spread needs at least one value")
    q1, q3 = np.percentile(x, [25, 75])
    return {"std": float(x.std()), "iqr": float(q3 - q1), "mean": float(x.mean()), "n": int(x.size)}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of paired values (NaN when either side is constant)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"pearson needs two equal-length sequences of >= 2 values, got {a.shape}, {b.shape}")
    da, db = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db / denom) if denom > 0 else float("nan")


def nonflat_share(groups: Sequence[Sequence[float]]) -> float:
    """Share of GRPO-style groups whose rewards are not all equal (a flat group has zero advantage)."""
    if not groups:
        raise ValueError("nonflat_share needs at least one group")
    return sum(1 for g in groups if len(g) > 1 and float(np.ptp(np.asarray(g, float))) > 0) / len(groups)


def per_cost(gain: float, cost: float) -> float:
    """Gain per unit of cost (NaN when the cost is not positive)."""
    return gain / cost if cost > 0 else float("nan")


def agreement_share(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Share of paired verdicts that are equal."""
    if len(a) != len(b) or not a:
        raise ValueError(f"agreement needs two equal, non-empty sequences, got {len(a)} and {len(b)}")
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def rank_agreement(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Spearman rank correlation of two scorings of the same keys."""
    from scipy.stats import spearmanr

    keys = sorted(a)
    return float(spearmanr([a[k] for k in keys], [b[k] for k in keys]).statistic)


# ---------------------------------------------------------------------------- timing and CPU time


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds of a live process and its reaped children, from /proc (0 where unreadable)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    except OSError:
        return 0.0
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_now(pids: Sequence[int] = ()) -> float:
    """This process's CPU time + its reaped children's + the given (server) processes'."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime + sum(_proc_cpu_s(p) for p in pids)


FORK_STATE: dict[str, Any] = {}
"""What pool jobs read; set before the pool forks, so children inherit it without pickling."""


def _noop(_: int) -> int:
    return 0


def timed_pool(job: Callable[[int], tuple[int, float]], n_jobs: int, workers: int) -> dict[str, float]:
    """Run ``job(i)`` for i < n_jobs on ``workers`` forked processes (started before the clock runs).

    Each job returns (episodes, its CPU seconds). Returns episodes, wall seconds, episodes per second
    and CPU seconds per episode.
    """
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        list(pool.map(_noop, range(workers)))
        t0 = time.perf_counter()
        results = list(pool.map(job, range(n_jobs)))
        wall = time.perf_counter() - t0
    episodes = sum(r[0] for r in results)
    cpu = sum(r[1] for r in results)
    return {
        "episodes": episodes,
        "wall_s": wall,
        "eps_per_s": episodes / wall,
        "cpu_s_per_episode": cpu / episodes,
    }


@contextmanager
def fork_state(**state: Any) -> Iterator[None]:
    FORK_STATE.update(state)
    try:
        yield
    finally:
        for k in state:
            FORK_STATE.pop(k, None)


def throughput_measure(per_workers: Mapping[int, Mapping[str, float]], what: str) -> Measure:
    """Episodes per second on 1 and 2 workers as one measure (value: the 2-worker rate)."""
    top = max(per_workers)
    rates = {f"eps_per_s_{w}w": float(r["eps_per_s"]) for w, r in per_workers.items()}
    speedup = per_workers[top]["eps_per_s"] / per_workers[min(per_workers)]["eps_per_s"]
    how = f"{what}; episodes per wall second on " + " and ".join(
        f"{w} worker(s): {r['eps_per_s']:.3g}" for w, r in sorted(per_workers.items())
    )
    return Measure(float(per_workers[top]["eps_per_s"]), "ep/s", how, {**rates, "speedup": speedup})

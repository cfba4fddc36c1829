"""``result.json``: what an experiment found, machine-readable, next to the report written from it.

The schema (docs/science.md point 8)::

    {"experiment": "coding-learn", "command": "transferlab coding experiment learn --preset cpu",
     "seeds": [0, 1, 2], "settings": {...the run's config...},
     "arms": {"sft": {"held_out_success": {"estimate": 0.42, "ci": [0.31, 0.52]}, "n_episodes": 360,
                      ...any other figures...}},
     "comparisons": [{"name": "grpo - sft", "estimate": 0.05, "ci": [-0.04, 0.13], "cluster": "seed",
                      "n_clusters": 3, "mde": 0.12}]}

A comparison's ``estimate`` is ``b - a`` (the name says which), its interval a clustered bootstrap
(:func:`~transferlab.platform.stats.clustered_bootstrap_diff_ci`) with the seed, the task or the
(seed, task) pair as the cluster, and ``mde`` the minimum detectable effect at that interval's width
(:func:`~transferlab.platform.stats.mde`), so a null says what it can rule out.

>>> c = comparison("grpo - sft", [0.2, 0.4, 0.3, 0.5], [0, 0, 1, 1], [0.3, 0.5, 0.4, 0.6], [0, 0, 1, 1],
...                cluster="seed", paired=True)
>>> (round(c.estimate, 3), c.cluster, c.n_clusters)
(0.1, 'seed', 2)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from transferlab.platform.io import atomic_write_json
from transferlab.platform.stats import Interval, clustered_bootstrap_ci, clustered_bootstrap_diff_ci, mde
from transferlab.platform.stats import verdict as _verdict
from transferlab.platform.stats import verdict_sentence as _verdict_sentence

__all__ = [
    "RESULT_FILE",
    "Arm",
    "Cluster",
    "Comparison",
    "Estimate",
    "Result",
    "ResultError",
    "comparison",
    "estimate",
    "read_result",
    "write_result",
]

RESULT_FILE = "result.json"

Cluster = Literal["seed", "seed+task", "task", "seed+episode"]
"""The unit a bootstrap resamples: seeds (items = per-task values), (seed, task) pairs, tasks, or
(seed, episode) pairs (an episode = one world future, the same for both sides)."""


class ResultError(ValueError):
    """A result.json that is missing, not JSON, or does not fit the schema (the message says which)."""


def _check_ci(ci: tuple[float, float]) -> tuple[float, float]:
    low, high = ci
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        raise ValueError(f"ci must be a finite [low, high] with low <= high, got [{low}, {high}]")
    return ci


class Estimate(BaseModel):
    """A point estimate with its 95% interval ``[low, high]``."""

    model_config = ConfigDict(extra="forbid")

    estimate: float = Field(allow_inf_nan=False)
    ci: tuple[float, float]

    check_ci = field_validator("ci")(_check_ci)

    @classmethod
    def of(cls, interval: Interval) -> Estimate:
        return cls(estimate=interval.estimate, ci=(interval.low, interval.high))


class Arm(BaseModel):
    """One arm's held-out success and the episodes behind it; any other figures may be added."""

    model_config = ConfigDict(extra="allow")

    held_out_success: Estimate
    n_episodes: int = Field(ge=1)


class Comparison(BaseModel):
    """``b - a`` with its clustered interval, the number of clusters and the minimum detectable effect."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    estimate: float = Field(allow_inf_nan=False)
    ci: tuple[float, float]
    cluster: Cluster
    n_clusters: int = Field(ge=1)
    mde: float = Field(ge=0, allow_inf_nan=False)

    check_ci = field_validator("ci")(_check_ci)

    @property
    def verdict(self) -> Literal["improved", "worse", "no detectable change"]:
        """``improved`` / ``worse`` only when the interval excludes zero (see :func:`stats.verdict`)."""
        return _verdict(self.estimate, self.ci, self.mde)

    def sentence(self, *, unit: str = "points", scale: float = 100) -> str:
        """E.g. ``"grpo - sft: pipeline ran, no detectable change: +1.2 points [−6.0, 8.4] (MDE 10.3
        points)"`` plus the clustering, ``"; 95% interval over 3 seed clusters"``."""
        line = _verdict_sentence(self.estimate, self.ci, self.mde, unit=unit, scale=scale, name=self.name)
        plural = "s" if self.n_clusters != 1 else ""
        return f"{line}; 95% interval over {self.n_clusters} {self.cluster} cluster{plural}"


class Result(BaseModel):
    """Everything a report states, in one object; the Markdown/HTML is written from it. An experiment
    may keep its own sections next to these keys (``compare`` keeps its domain table)."""

    model_config = ConfigDict(extra="allow")

    experiment: str = Field(min_length=1)
    command: str = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    settings: dict[str, Any]
    arms: dict[str, Arm] = Field(min_length=1)
    comparisons: list[Comparison]

    def comparison(self, name: str) -> Comparison:
        """The comparison called ``name`` (a KeyError listing the names if there is none)."""
        for c in self.comparisons:
            if c.name == name:
                return c
        raise KeyError(f"no comparison {name!r}; this result has {[c.name for c in self.comparisons]}")


# ------------------------------------------------------------------------------------------ building


def _encode(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[list[int], list[int], int, int]:
    """Cluster labels as ints shared by both sides (tuples such as (seed, task) become one label)."""
    codes: dict[Hashable, int] = {}
    ea = [codes.setdefault(label, len(codes)) for label in a]
    eb = [codes.setdefault(label, len(codes)) for label in b]
    return ea, eb, len(set(ea)), len(set(eb))


def estimate(values: Sequence[float], clusters: Sequence[Hashable], *, seed: int = 0) -> Estimate:
    """The mean of ``values`` with a 95% bootstrap interval clustered by ``clusters`` (e.g. the seed)."""
    codes, _, _, _ = _encode(clusters, [])
    return Estimate.of(clustered_bootstrap_ci(values, codes, seed=seed))


def comparison(
    name: str,
    a_values: Sequence[float],
    a_clusters: Sequence[Hashable],
    b_values: Sequence[float],
    b_clusters: Sequence[Hashable],
    *,
    cluster: Cluster,
    paired: bool,
    seed: int = 0,
) -> Comparison:
    """``mean(b) - mean(a)`` with a two-stage bootstrap interval clustered by the given labels.

    For ``cluster="seed"`` the labels are seeds and the items in a cluster that seed's per-task
    values; for ``"seed+task"`` each label is a ``(seed, task)`` pair; for ``"task"`` the task.
    ``paired=True`` (both sides ran on the same seeds / tasks) draws the same clusters for both sides
    each replicate. ``n_clusters`` is the number of clusters per side (the smaller side's when they
    differ); with fewer than about 5 the percentile interval is too narrow, and so is the MDE.
    """
    ea, eb, ka, kb = _encode(a_clusters, b_clusters)
    interval = clustered_bootstrap_diff_ci(a_values, ea, b_values, eb, paired=paired, seed=seed)
    return Comparison(
        name=name,
        estimate=interval.estimate,
        ci=(interval.low, interval.high),
        cluster=cluster,
        n_clusters=min(ka, kb),
        mde=mde(interval.low, interval.high, level=interval.level),
    )


def paired_comparison(
    name: str,
    a_values: Sequence[float],
    b_values: Sequence[float],
    clusters: Sequence[Hashable],
    *,
    cluster: Cluster,
    seed: int = 0,
) -> Comparison:
    """``mean(b - a)`` where ``a[i]`` and ``b[i]`` are the same item under two policies (the same task,
    or the same world future: common random numbers), with a two-stage bootstrap interval of the
    per-item differences clustered by ``clusters``. The noise both sides share cancels item by item,
    which :func:`comparison` (``paired=True`` pairs clusters, not items) cannot do."""
    if len(a_values) != len(b_values) or len(a_values) != len(clusters):
        raise ValueError(
            f"paired values need one a, one b and one cluster label per item, got {len(a_values)}, "
            f"{len(b_values)} and {len(clusters)}"
        )
    diffs = [float(b) - float(a) for a, b in zip(a_values, b_values, strict=True)]
    codes, _, k, _ = _encode(clusters, [])
    interval = clustered_bootstrap_ci(diffs, codes, seed=seed)
    return Comparison(
        name=name,
        estimate=interval.estimate,
        ci=(interval.low, interval.high),
        cluster=cluster,
        n_clusters=k,
        mde=mde(interval.low, interval.high, level=interval.level),
    )


# ----------------------------------------------------------------------------------------------- files


def write_result(directory: str | os.PathLike[str], result: Result) -> Path:
    """Atomically write ``directory/result.json`` (created if needed); returns its path."""
    return atomic_write_json(Path(directory) / RESULT_FILE, result.model_dump(mode="json"))


def read_result(path: str | os.PathLike[str]) -> Result:
    """The result in ``path`` (a result.json, or a directory holding one).

    Raises :class:`ResultError` naming the file and what is wrong with it.
    """
    file = Path(path)
    if file.is_dir():
        file = file / RESULT_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultError(
            f"{file} does not exist: pass a result.json or a report directory that holds one"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(
            f"{file} is not valid JSON ({exc}); regenerate it with the command that made the run"
        ) from None
    try:
        return Result.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ResultError(
            f"{file} does not fit the result.json schema ({problems}); regenerate it with the command that "
            "made the run"
        ) from None

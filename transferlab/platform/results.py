"""``result.json``: what an experiment found, machine-readable, next to the report written from it.

The schema (docs/science.md point 8)::

    {"experiment": "coding-learn", "command": "transferlab coding experiment learn --preset cpu",
     "seeds": [0, 1, 2], "settings": {...the run's config...},
     "arms": {"sft": {"held_out_success": {"estimate": 0.42, "ci": [0.31, 0.52]}, "n_episodes": 360,
                      ...any other figures...}},
     "comparisons": [{"name": "grpo - sft", "estimate": 0.05, "ci": [-0.04, 0.13], "cluster": "seed",
                      "n_clusters": 3, "mde": 0.12}]}

A comparison's ``estimate`` is ``b - a`` (the name says which). Clustered by ``seed`` (the unit of a
claim about a training method) its interval is a t-interval on the per-seed paired differences with
k - 1 degrees of freedom (:func:`~transferlab.platform.stats.t_interval`) and ``mde`` the minimum
detectable effect from t quantiles (:func:`~transferlab.platform.stats.t_mde`); clustered by the task,
the (seed, task) or (seed, episode) pair it is a two-stage bootstrap
(:func:`~transferlab.platform.stats.clustered_bootstrap_diff_ci`) that holds the trained policies
fixed: conditional on them, never a verdict on the method (``docs/guide/methods.md``).

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
from transferlab.platform.stats import (
    Interval,
    cluster_means,
    clustered_bootstrap_ci,
    clustered_bootstrap_diff_ci,
    mde,
    seed_differences,
    t_interval,
    t_mde,
)
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
    "conditional_estimate",
    "estimate",
    "read_result",
    "write_result",
]

RESULT_FILE = "result.json"

Cluster = Literal["seed", "seed+task", "task", "seed+episode", "episode"]
"""The unit of an interval: training seeds (a t-interval on per-seed differences; the unit of a claim
about a training method), world futures (``episode``: a t-interval over paired futures, for policies
no training seed varies), or, conditional on the trained policies, tasks, (seed, task) or (seed,
episode) pairs (a bootstrap)."""
CONDITIONAL: tuple[str, ...] = ("seed+task", "task", "seed+episode")
"""Clusters whose interval holds the trained policies fixed: described, never given a verdict."""


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

    @property
    def conditional(self) -> bool:
        """True for an interval that holds the trained policies fixed (any cluster but the seed): it
        says how precisely these policies were scored, not whether the method works."""
        return self.cluster in CONDITIONAL

    def sentence(self, *, unit: str = "points", scale: float = 100) -> str:
        """E.g. ``"grpo - sft: pipeline ran, no detectable change: +1.2 points [−6.0, 8.4] (MDE 10.3
        points); 95% t-interval over 3 seeds"``; a conditional interval carries no verdict:
        ``"grpo - sft, conditional on these trained policies: +1.2 points [−2.0, 4.4]; 95% bootstrap
        interval over 360 seed+task clusters"``."""
        plural = "s" if self.n_clusters != 1 else ""
        if self.conditional:
            low, high = (_signed_points(v, scale) for v in self.ci)
            figure = f"{_signed_points(self.estimate, scale, plus=True)} {unit} [{low}, {high}]"
            return (
                f"{self.name}, conditional on these trained policies: {figure}; 95% bootstrap interval "
                f"over {self.n_clusters} {self.cluster} cluster{plural}"
            )
        line = _verdict_sentence(self.estimate, self.ci, self.mde, unit=unit, scale=scale, name=self.name)
        unit_name = "world future" if self.cluster == "episode" else "seed"
        return f"{line}; 95% t-interval over {self.n_clusters} {unit_name}{plural}"


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
    """The mean over clusters (e.g. seeds) of each cluster's mean, with a 95% t-interval over the
    clusters (zero width with one cluster). ``seed`` is kept for callers; the interval is exact."""
    del seed
    codes, _, _, _ = _encode(clusters, [])
    return Estimate.of(t_interval(list(cluster_means(values, codes).values())))


def conditional_estimate(values: Sequence[float], clusters: Sequence[Hashable], *, seed: int = 0) -> Estimate:
    """The mean of ``values`` with a two-stage bootstrap interval over ``clusters`` (e.g. (seed, task)
    pairs): conditional on the trained policies, for describing them, never for a verdict."""
    codes, _, _, _ = _encode(clusters, [])
    return Estimate.of(clustered_bootstrap_ci(values, codes, seed=seed))


def _signed_points(value: float, scale: float, plus: bool = False) -> str:
    text = f"{abs(value * scale):.1f}"
    sign = "\u2212" if value < 0 and float(text) != 0.0 else "+" if plus else ""
    return f"{sign}{text}"


def _seed_comparison(
    name: str, diffs: Sequence[float], cluster: Cluster = "seed", level: float = 0.95
) -> Comparison:
    """A comparison from per-unit paired differences (seeds, or world futures for fixed policies):
    t-interval, t-quantile MDE."""
    interval = t_interval(diffs, level)
    k = len(diffs)
    width = interval.high > interval.low
    return Comparison(
        name=name,
        estimate=interval.estimate,
        ci=(interval.low, interval.high),
        cluster=cluster,
        n_clusters=k,
        mde=t_mde(interval.low, interval.high, k, level=level) if width and k >= 2 else 0.0,
    )


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
    """``b - a`` by the labels' kind.

    ``cluster="seed"`` (labels are seeds, items a seed's per-task values): each seed's paired
    difference ``mean(b_s) - mean(a_s)`` on its own tasks, then a t-interval over the seeds
    (``paired`` must be True: both arms trained from the same seeds). Any other cluster (``"task"``,
    ``"seed+task"``, ``"seed+episode"``): a two-stage bootstrap that draws the same clusters for both
    sides when ``paired``; it is conditional on the trained policies (:attr:`Comparison.conditional`).
    """
    if cluster == "seed":
        if not paired:
            raise ValueError(
                "a seed-clustered comparison pairs each seed's arms (both trained from that seed): "
                "pass paired=True, or cluster by task for unrelated runs"
            )
        return _seed_comparison(name, seed_differences(a_values, a_clusters, b_values, b_clusters))
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
    level: float = 0.95,
) -> Comparison:
    """``mean(b - a)`` where ``a[i]`` and ``b[i]`` are the same item under two policies (the same task,
    or the same world future: common random numbers). The noise both sides share cancels item by item,
    which :func:`comparison` (``paired=True`` pairs clusters, not items) cannot do.

    ``cluster="seed"``: a t-interval over the seeds' mean differences; ``"episode"`` (policies no
    seed varies, each label one independent future): a t-interval over the futures; otherwise a
    two-stage bootstrap of the per-item differences, conditional on the trained policies. ``level``
    applies to the t-intervals (e.g. ``1 - 0.05 / k`` for a Bonferroni correction over k choices).
    """
    if len(a_values) != len(b_values) or len(a_values) != len(clusters):
        raise ValueError(
            f"paired values need one a, one b and one cluster label per item, got {len(a_values)}, "
            f"{len(b_values)} and {len(clusters)}"
        )
    diffs = [float(b) - float(a) for a, b in zip(a_values, b_values, strict=True)]
    codes, _, k, _ = _encode(clusters, [])
    if cluster == "seed":  # per-seed means of the item differences, a t-interval over the seeds
        return _seed_comparison(name, list(cluster_means(diffs, codes).values()), level=level)
    if cluster == "episode":  # fixed policies on independent futures: the futures are the units
        return _seed_comparison(name, list(cluster_means(diffs, codes).values()), "episode", level)
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

"""An experiment's held-out values per arm and seed, and what result.json says about them.

Every experiment scores each arm on held-out tasks once per seed; :func:`held_out` pools one arm's
per-task values with their seed labels, :func:`compare` pairs two arms on the same seeds (the seed
t-interval first; other clusters are conditional on the trained policies), :func:`comparison_rows` makes
the report's table and :func:`write_results` writes ``result.json`` with its provenance.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferlab.platform.harness import Experiment
from transferlab.platform.results import (
    Cluster,
    Comparison,
    Estimate,
    Result,
    comparison,
    estimate,
    write_result,
)
from transferlab.platform.stats import Interval


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (NaN for no values)."""
    return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class HeldOut:
    """One arm's held-out values pooled over seeds, one per (seed, task), with both cluster labels."""

    values: list[float]
    seeds: list[int]
    pairs: list[tuple[int, int]]
    """(seed, index of the task in the held-out list) per value."""


def held_out(results: Mapping[str, Mapping[str, Any]], arm: str, seeds: Sequence[int], key: str) -> HeldOut:
    """``results[f"{arm}-seed{s}"][key]`` (per-task values) for every seed, with their labels."""
    values: list[float] = []
    labels: list[int] = []
    pairs: list[tuple[int, int]] = []
    for s in seeds:
        per_task = [float(v) for v in results[f"{arm}-seed{s}"][key]]
        values += per_task
        labels += [s] * len(per_task)
        pairs += [(s, i) for i in range(len(per_task))]
    return HeldOut(values, labels, pairs)


def seed_estimate(data: HeldOut) -> Estimate:
    """The mean of the seed means with a 95% t-interval over the seeds."""
    return estimate(data.values, data.seeds)


def compare(name: str, a: HeldOut, b: HeldOut, clusters: Sequence[Cluster] = ("seed",)) -> list[Comparison]:
    """``b - a`` paired on the same seeds and tasks, once per cluster kind (``"seed"`` first)."""
    out = []
    for kind in clusters:
        la: list[Hashable]
        lb: list[Hashable]
        if kind == "seed":
            la, lb = list(a.seeds), list(b.seeds)
        elif kind == "seed+task":
            la, lb = list(a.pairs), list(b.pairs)
        else:
            la, lb = [t for _, t in a.pairs], [t for _, t in b.pairs]
        out.append(comparison(name, a.values, la, b.values, lb, cluster=kind, paired=True))
    return out


_VERDICT_WORDS = {
    "improved": "improved",
    "worse": "worse",
    "no detectable change": "pipeline ran, no detectable change",
}


def comparison_rows(result: Result) -> list[dict[str, Any]]:
    """One report table row per comparison of ``result`` (points, its interval, MDE and verdict)."""
    return [
        {
            "comparison": c.name,
            "clusters": f"{c.n_clusters} x {c.cluster}",
            "difference (points)": f"{c.estimate * 100:+.1f} [{c.ci[0] * 100:+.1f}, {c.ci[1] * 100:+.1f}]",
            # a zero-width interval (every cluster equal) says nothing about the detectable size
            "MDE (points)": "-"
            if c.conditional
            else f"{c.mde * 100:.1f}"
            if c.ci[1] > c.ci[0]
            else "unknown",
            # an interval over (seed, task) pairs holds the trained policies fixed: no verdict on the method
            "verdict": "conditional on these policies" if c.conditional else _VERDICT_WORDS[c.verdict],
        }
        for c in result.comparisons
    ]


def held_out_interval(result: Result, arm: str) -> Interval:
    """``result``'s held-out success of ``arm`` as an Interval (for tables and bar plots)."""
    h = result.arms[arm].held_out_success
    return Interval(h.estimate, h.ci[0], h.ci[1], 0.95, result.arms[arm].n_episodes)


def write_results(exp: Experiment, result: Result, report_dir: Path | None) -> None:
    """``result.json`` in the run directory, and next to the report when there is a report directory,
    with its provenance (commit, dirty flag, command, machine, packages, threads, wall time)."""
    from transferlab.platform.provenance import provenance

    result = result.model_copy(update={"provenance": provenance(result.command, exp.elapsed_s())})
    write_result(exp.run.dir, result)
    if report_dir is not None:
        write_result(report_dir, result)

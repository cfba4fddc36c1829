"""Small statistics for comparing runs: bootstrap confidence intervals and threshold crossings.

Every function is pure and takes a ``seed``, so the same input gives the same interval::

    >>> ci = bootstrap_ci([0.0, 1.0, 1.0, 1.0], n_boot=1000, seed=0)
    >>> ci.estimate, ci.n
    (0.75, 4)
    >>> first_crossing([0, 10, 20], [0.0, 0.5, 1.0], threshold=0.75)
    15.0

Intervals are percentile bootstrap intervals: resample with replacement ``n_boot`` times, compute the
statistic on each resample, and take the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles. They
are fine for means of a few dozen or more observations; with very few observations (or few clusters)
they are too narrow, because a resample can only recombine the values that were seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "Interval",
    "Stat",
    "bootstrap_ci",
    "bootstrap_diff_ci",
    "cluster_means",
    "clustered_bootstrap_ci",
    "clustered_bootstrap_diff_ci",
    "first_crossing",
    "mde",
    "pass_at_k",
    "seed_differences",
    "t_interval",
    "t_mde",
    "verdict",
    "verdict_sentence",
]

Stat = Literal["mean", "median"]
"""Statistic an interval is computed for."""

ArrayLike = Sequence[float] | npt.NDArray[np.floating] | npt.NDArray[np.integer] | npt.NDArray[np.bool_]

_STATS: dict[str, Callable[..., npt.NDArray[np.float64]]] = {"mean": np.mean, "median": np.median}
_CHUNK_ELEMENTS = 1 << 22  # resample matrices are built in chunks of at most this many entries


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval ``[low, high]`` at confidence ``level``.

    ``n`` is the number of observations behind the estimate: the sample size for
    :func:`bootstrap_ci`, the number of pairs for a paired difference, and ``len(a) + len(b)`` for an
    unpaired one (the clustered versions count items, not clusters).
    """

    estimate: float
    low: float
    high: float
    level: float
    n: int

    @property
    def width(self) -> float:
        """``high - low``."""
        return self.high - self.low

    def format(self, spec: str = ".3f") -> str:
        """E.g. ``"0.512 [0.463, 0.561]"`` (the level is left out)."""
        return f"{self.estimate:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"

    def __str__(self) -> str:
        return f"{self.format()} ({self.level:.0%} CI, n={self.n})"


# ----------------------------------------------------------------------------------------- checks


def _as_values(values: ArrayLike, what: str = "values") -> npt.NDArray[np.float64]:
    """``values`` as a 1-D float array; empty or non-finite input is a ValueError saying so."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{what} is empty: a confidence interval needs at least one observation")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise ValueError(f"{what} has {bad} NaN or infinite entries; drop them before bootstrapping")
    return arr


def _check_args(stat: str, n_boot: int, level: float) -> Callable[..., npt.NDArray[np.float64]]:
    if stat not in _STATS:
        raise ValueError(f"stat must be one of {sorted(_STATS)}, got {stat!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int (e.g. 2000), got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return _STATS[stat]


def _nearly_constant(x: npt.NDArray[np.float64]) -> bool:
    """All entries equal up to rounding (relative 1e-12), e.g. ``(a + 1.0) - a``."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.max(np.abs(x)))))


def _percentiles(replicates: npt.NDArray[np.float64], level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _interval(
    estimate: float, replicates: npt.NDArray[np.float64], level: float, n: int, degenerate: bool
) -> Interval:
    """Build the Interval; a degenerate sample (one value / all equal) gives ``low = high = estimate``."""
    if degenerate:
        return Interval(estimate, estimate, estimate, level, n)
    low, high = _percentiles(replicates, level)
    return Interval(estimate, low, high, level, n)


# ------------------------------------------------------------------------------------- resampling


def _resample_stat(
    func: Callable[..., npt.NDArray[np.float64]],
    columns: Sequence[npt.NDArray[np.float64]],
    n_boot: int,
    rng: np.random.Generator,
) -> list[npt.NDArray[np.float64]]:
    """Per column, ``func`` over ``n_boot`` resamples that share row indices (columns of equal length)."""
    n = len(columns[0])
    chunk = max(1, _CHUNK_ELEMENTS // n)
    out: list[list[npt.NDArray[np.float64]]] = [[] for _ in columns]
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        for acc, col in zip(out, columns, strict=True):
            acc.append(np.asarray(func(col[idx], axis=1), dtype=np.float64))
    return [np.concatenate(acc) for acc in out]


def bootstrap_ci(
    values: ArrayLike,
    *,
    stat: Stat = "mean",
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval for ``stat`` (``"mean"`` or ``"median"``) of ``values``.

    One observation (or all equal) gives ``low = high = estimate``; empty input is a ValueError.

    >>> bootstrap_ci([2.0, 2.0, 2.0])
    Interval(estimate=2.0, low=2.0, high=2.0, level=0.95, n=3)
    """
    func = _check_args(stat, n_boot, level)
    x = _as_values(values)
    estimate = float(func(x))
    if bool(np.all(x == x[0])):  # every replicate is x[0]; np.mean could be off by a rounding error
        return _interval(float(x[0]), np.empty(0), level, x.size, degenerate=True)
    (replicates,) = _resample_stat(func, [x], n_boot, np.random.default_rng(seed))
    return _interval(estimate, replicates, level, x.size, degenerate=False)


def bootstrap_diff_ci(
    a: ArrayLike,
    b: ArrayLike,
    *,
    paired: bool = False,
    stat: Stat = "mean",
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval for ``stat(b) - stat(a)`` (so positive means ``b`` is higher).

    ``paired=True`` (same tasks or seeds in the same order, e.g. before/after on one task list)
    resamples index pairs, so ``a`` and ``b`` must have equal lengths. Unpaired resamples each
    independently. ``n`` is the number of pairs when paired, else ``len(a) + len(b)``.

    >>> bootstrap_diff_ci([1, 2, 6], [2, 3, 7], paired=True)  # b = a + 1 exactly
    Interval(estimate=1.0, low=1.0, high=1.0, level=0.95, n=3)
    """
    func = _check_args(stat, n_boot, level)
    xa, xb = _as_values(a, "a"), _as_values(b, "b")
    estimate = float(func(xb) - func(xa))
    rng = np.random.default_rng(seed)
    if paired:
        if xa.size != xb.size:
            raise ValueError(
                f"paired=True needs a and b of equal length (one entry per pair), got {xa.size} and "
                f"{xb.size}; use paired=False for independent samples"
            )
        if _nearly_constant(xb - xa):  # a constant shift: every replicate equals the estimate
            return _interval(estimate, np.empty(0), level, xa.size, degenerate=True)
        rep_a, rep_b = _resample_stat(func, [xa, xb], n_boot, rng)
        return _interval(estimate, rep_b - rep_a, level, xa.size, degenerate=False)
    degenerate = bool(np.all(xa == xa[0]) and np.all(xb == xb[0]))
    if degenerate:
        return _interval(estimate, np.empty(0), level, xa.size + xb.size, degenerate=True)
    (rep_a,) = _resample_stat(func, [xa], n_boot, rng)
    (rep_b,) = _resample_stat(func, [xb], n_boot, rng)
    return _interval(estimate, rep_b - rep_a, level, xa.size + xb.size, degenerate=False)


# -------------------------------------------------------------------------------------- clustered


@dataclass(frozen=True)
class _Clustered:
    """Values grouped by cluster: ``values[starts[k] : starts[k] + sizes[k]]`` is cluster ``labels[k]``."""

    labels: list[object]
    values: npt.NDArray[np.float64]
    starts: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]


def _group(values: ArrayLike, clusters: Sequence[object] | npt.NDArray[np.generic], what: str) -> _Clustered:
    x = _as_values(values, what)
    labels = list(np.asarray(clusters, dtype=object))
    if len(labels) != x.size:
        raise ValueError(
            f"{what} and its clusters must have equal length (one cluster label per value), "
            f"got {x.size} values and {len(labels)} labels"
        )
    order: dict[object, list[int]] = {}
    for i, label in enumerate(labels):
        order.setdefault(label, []).append(i)
    keys = sorted(order, key=repr)  # deterministic order, whatever the label type
    idx = np.concatenate([np.asarray(order[k], dtype=np.int64) for k in keys])
    sizes = np.asarray([len(order[k]) for k in keys], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return _Clustered(keys, x[idx], starts, sizes)


def _draw_items(
    g: _Clustered, picks: npt.NDArray[np.int64], within: bool, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """The items of the picked clusters, each cluster's items resampled when ``within``."""
    sizes = g.sizes[picks]
    starts = np.repeat(g.starts[picks], sizes)
    if within:
        offsets = np.floor(rng.random(int(sizes.sum())) * np.repeat(sizes, sizes)).astype(np.int64)
    else:
        offsets = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return g.values[starts + offsets]


def clustered_bootstrap_ci(
    values: ArrayLike,
    clusters: Sequence[object] | npt.NDArray[np.generic],
    *,
    stat: Stat = "mean",
    resample_within: bool = True,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Two-stage bootstrap interval for ``stat`` of ``values`` that come in clusters (e.g. seeds).

    Each replicate draws as many clusters as there are, with replacement, then (when
    ``resample_within``) resamples the items inside each drawn cluster, and applies ``stat`` to all
    drawn items pooled. Use it when e.g. success indicators come from several seeds × tasks: items
    of one seed are correlated, and treating them as independent gives too narrow an interval. With
    ``resample_within=False`` only clusters are resampled (slightly narrower; fine with many
    clusters). Few clusters (< 5 or so) make any bootstrap interval too narrow; report it then.
    """
    func = _check_args(stat, n_boot, level)
    g = _group(values, clusters, "values")
    estimate = float(func(g.values))
    if bool(np.all(g.values == g.values[0])):
        return _interval(estimate, np.empty(0), level, g.values.size, degenerate=True)
    rng = np.random.default_rng(seed)
    k = len(g.labels)
    replicates = np.empty(n_boot)
    for i in range(n_boot):
        picks = rng.integers(0, k, size=k)
        replicates[i] = func(_draw_items(g, picks, resample_within, rng))
    return _interval(estimate, replicates, level, g.values.size, degenerate=False)


def clustered_bootstrap_diff_ci(
    a: ArrayLike,
    a_clusters: Sequence[object] | npt.NDArray[np.generic],
    b: ArrayLike,
    b_clusters: Sequence[object] | npt.NDArray[np.generic],
    *,
    paired: bool = False,
    stat: Stat = "mean",
    resample_within: bool = True,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Two-stage bootstrap interval for ``stat(b) - stat(a)``, each side clustered (see above).

    Unpaired: ``a`` and ``b`` are resampled independently. ``paired=True``: both sides have the same
    cluster labels (e.g. both methods ran with seeds 0..4) and each replicate draws one set of
    clusters used for both sides, so a seed that is easy for both cancels out; items inside a cluster
    are still resampled independently per side. ``n`` is ``len(a) + len(b)``.
    """
    func = _check_args(stat, n_boot, level)
    ga, gb = _group(a, a_clusters, "a"), _group(b, b_clusters, "b")
    if paired and ga.labels != gb.labels:
        raise ValueError(
            "paired=True needs the same cluster labels in a and b, got "
            f"{ga.labels[:10]} and {gb.labels[:10]}; use paired=False for unrelated clusters"
        )
    estimate = float(func(gb.values) - func(ga.values))
    n = ga.values.size + gb.values.size
    if bool(np.all(ga.values == ga.values[0]) and np.all(gb.values == gb.values[0])):
        return _interval(estimate, np.empty(0), level, n, degenerate=True)
    rng = np.random.default_rng(seed)
    ka, kb = len(ga.labels), len(gb.labels)
    replicates = np.empty(n_boot)
    for i in range(n_boot):
        picks_a = rng.integers(0, ka, size=ka)
        picks_b = picks_a if paired else rng.integers(0, kb, size=kb)
        draw_a = _draw_items(ga, picks_a, resample_within, rng)
        draw_b = _draw_items(gb, picks_b, resample_within, rng)
        replicates[i] = func(draw_b) - func(draw_a)
    return _interval(estimate, replicates, level, n, degenerate=False)


# -------------------------------------------------------------------------------- seeds as the unit


def _t_quantile(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def t_interval(values: ArrayLike, level: float = 0.95) -> Interval:
    """Student-t interval for the mean of ``values`` (one per unit, e.g. per training seed), with
    ``n - 1`` degrees of freedom: ``mean ± t_{(1+level)/2, n-1} · sd / sqrt(n)``.

    The project's rule for a claim about a training method (``docs/guide/methods.md``): the unit is
    the training seed, each value a seed's paired difference (or a seed's mean). One value, or all
    equal, gives a zero-width interval (the spread cannot be estimated).

    >>> ci = t_interval([0.10, 0.02, 0.06])  # mean 0.06, sd 0.04: 0.06 ± 4.3027 x 0.04 / sqrt(3)
    >>> round(ci.low, 4), round(ci.high, 4), ci.n
    (-0.0394, 0.1594, 3)
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    x = _as_values(values)
    estimate = float(np.mean(x))
    if x.size < 2 or _nearly_constant(x):
        return Interval(estimate, estimate, estimate, level, int(x.size))
    half = _t_quantile((1.0 + level) / 2.0, x.size - 1) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    return Interval(estimate, estimate - half, estimate + half, level, int(x.size))


def t_mde(ci_low: float, ci_high: float, n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The minimum detectable effect of a :func:`t_interval` over ``n`` units: the half-width is
    ``t_{1-α/2, n-1}`` standard errors, and a true effect of ``(t_{1-α/2, n-1} + t_{power, n-1}) × SE``
    excludes zero with probability ``power`` (approximately). At 3 seeds that is (4.30 + 1.06) SE, not
    the normal approximation's 2.80 SE.

    >>> round(t_mde(-0.1, 0.1, n=3), 4)  # SE = 0.1 / 4.3027; (4.3027 + 1.0607) x SE
    0.1247
    """
    if n < 2:
        raise ValueError(f"a t-interval's MDE needs at least 2 units, got n={n}")
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_high < ci_low:
        raise ValueError(f"the interval must be finite with low <= high, got [{ci_low!r}, {ci_high!r}]")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be strictly between 0 and 1 (e.g. 0.8), got {power!r}")
    t_level = _t_quantile(1.0 - (1.0 - level) / 2.0, n - 1)
    se = (ci_high - ci_low) / (2.0 * t_level)
    return (t_level + _t_quantile(power, n - 1)) * se


def cluster_means(
    values: ArrayLike, clusters: Sequence[object] | npt.NDArray[np.generic]
) -> dict[object, float]:
    """The mean of each cluster's values (e.g. each seed's mean over its tasks), by label."""
    g = _group(values, clusters, "values")
    return {
        label: float(np.mean(g.values[start : start + size]))
        for label, start, size in zip(g.labels, g.starts, g.sizes, strict=True)
    }


def seed_differences(
    a: ArrayLike,
    a_clusters: Sequence[object] | npt.NDArray[np.generic],
    b: ArrayLike,
    b_clusters: Sequence[object] | npt.NDArray[np.generic],
) -> list[float]:
    """Per seed, ``mean(b) - mean(a)`` over that seed's items (the same tasks and episodes for both
    arms, so the pairing the design built in is kept), in the order of the labels."""
    ma, mb = cluster_means(a, a_clusters), cluster_means(b, b_clusters)
    if set(ma) != set(mb):
        raise ValueError(
            f"paired seeds need the same labels on both sides, got {sorted(map(repr, ma))[:10]} and "
            f"{sorted(map(repr, mb))[:10]}"
        )
    return [mb[k] - ma[k] for k in sorted(ma, key=repr)]


# ------------------------------------------------------------------------------------------ curves


def first_crossing(
    x: ArrayLike,
    y: ArrayLike,
    threshold: float,
    *,
    direction: Literal["up", "down"] = "up",
) -> float | None:
    """The first ``x`` at which the curve ``y(x)`` reaches ``threshold``, linearly interpolated.

    "Reaches" is ``y >= threshold`` for ``direction="up"`` (e.g. episodes needed to reach a success
    rate of 0.8) and ``y <= threshold`` for ``"down"`` (e.g. steps until the loss is below 0.1).
    ``x`` must be non-decreasing; points where ``y`` is NaN are skipped. Returns ``x[0]`` if the curve
    starts at or past the threshold and None if it never gets there.

    >>> first_crossing([0, 100, 200], [0.2, 0.6, 1.0], 0.7)
    125.0
    >>> first_crossing([0, 1], [1.0, 0.5], 0.2, direction="down") is None
    True
    """
    if direction not in ("up", "down"):
        raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"x and y must be 1-D of equal length, got shapes {xs.shape} and {ys.shape}")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    if np.any(np.diff(xs) < 0) or not np.all(np.isfinite(xs)):
        raise ValueError("x must be finite and non-decreasing (sort the curve by x first)")
    keep = ~np.isnan(ys)
    xs, ys = xs[keep], ys[keep]
    sign = 1.0 if direction == "up" else -1.0
    reached = np.flatnonzero(sign * ys >= sign * threshold)
    if reached.size == 0:
        return None
    i = int(reached[0])
    if i == 0:
        return float(xs[0])
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return float(x0 + (threshold - y0) * (x1 - x0) / (y1 - y0))


# ---------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` samples drawn without replacement from ``n`` is a success.

    The unbiased estimator of pass@k from ``n`` samples of which ``c`` succeeded (Chen et al. 2021,
    "Evaluating Large Language Models Trained on Code"): ``1 - C(n - c, k) / C(n, k)``. Averaged over
    tasks it says how often a policy that may try ``k`` times solves a task; pass@k well above pass@1
    is the room a sharpening method (RL on the policy's own samples) has to grow its pass@1.

    >>> pass_at_k(8, 1, 1), pass_at_k(8, 1, 8), round(pass_at_k(4, 2, 2), 4)
    (0.125, 1.0, 0.8333)
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"n, c and k must be integers, got {n!r}, {c!r}, {k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 samples and 0 <= c <= n successes, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of samples n={n}, got k={k}; draw more samples")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# --------------------------------------------------------------------------------- what a null means

Verdict = Literal["improved", "worse", "no detectable change"]
"""What a difference with an interval says: only an interval that excludes zero is a change."""


def mde(ci_low: float, ci_high: float, level: float = 0.95, power: float = 0.8) -> float:
    """The minimum detectable effect of a difference whose ``level`` interval is ``[ci_low, ci_high]``.

    The interval's half-width is ``z_{1-α/2}`` standard errors (normal approximation), so
    ``SE = (ci_high - ci_low) / (2 z_{1-α/2})``, and a true effect of ``(z_{1-α/2} + z_power) × SE``
    would give an interval that excludes zero with probability ``power``. At 95% / 80% that is about
    1.43 × the half-width. A zero-width interval gives 0 (nothing more can be said at that size).

    >>> round(mde(-0.1, 0.1), 5)
    0.14294
    """
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_high < ci_low:
        raise ValueError(
            f"the interval must be finite with low <= high, got [{ci_low!r}, {ci_high!r}]; "
            "pass the difference's (low, high) bounds"
        )
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be strictly between 0 and 1 (e.g. 0.8), got {power!r}")
    normal = NormalDist()
    z_level = normal.inv_cdf(1.0 - (1.0 - level) / 2.0)
    se = (ci_high - ci_low) / (2.0 * z_level)
    return (z_level + normal.inv_cdf(power)) * se


def _check_verdict_args(estimate: float, ci: Sequence[float], mde: float) -> tuple[float, float]:
    if len(ci) != 2:
        raise ValueError(f"ci must be a (low, high) pair, got {list(ci)!r}")
    low, high = float(ci[0]), float(ci[1])
    if not all(math.isfinite(v) for v in (estimate, low, high, mde)) or high < low or mde < 0:
        raise ValueError(
            f"a verdict needs a finite estimate, an interval with low <= high and an MDE >= 0, got "
            f"estimate {estimate!r}, ci [{low!r}, {high!r}], mde {mde!r}"
        )
    return low, high


def verdict(
    estimate: float, ci: Sequence[float], mde: float, *, unit: str = "points", scale: float = 100
) -> Verdict:
    """``"improved"`` only when the whole interval is above zero, ``"worse"`` when it is below.

    An interval that touches or includes zero is ``"no detectable change"``, whatever the estimate.
    ``unit`` and ``scale`` are not used for the decision; they are accepted so that this and
    :func:`verdict_sentence` take the same arguments.

    >>> verdict(0.05, (-0.01, 0.11), 0.09)
    'no detectable change'
    """
    del unit, scale
    low, high = _check_verdict_args(estimate, ci, mde)
    if low > 0:
        return "improved"
    if high < 0:
        return "worse"
    return "no detectable change"


def _signed(value: float, spec: str, plus: bool) -> str:
    """``value`` with a true minus sign (and a ``+`` for positives when ``plus``)."""
    text = f"{abs(value):{spec}}"
    if float(text) == 0.0:
        return f"+{text}" if plus else text
    if value < 0:
        return f"\u2212{text}"
    return f"+{text}" if plus else text


def verdict_sentence(
    estimate: float,
    ci: Sequence[float],
    mde: float,
    *,
    unit: str = "points",
    scale: float = 100,
    name: str | None = None,
) -> str:
    """The verdict as a report line, values multiplied by ``scale`` (100: shares as points).

    A null with a zero-width interval (e.g. every episode failed in both arms) says that its MDE is
    unknown rather than 0.

    >>> verdict_sentence(0.123, (0.041, 0.205), 0.117)
    'improved: +12.3 points [4.1, 20.5]'
    >>> verdict_sentence(0.012, (-0.06, 0.084), 0.103, name="grpo - sft")
    'grpo - sft: pipeline ran, no detectable change: +1.2 points [\u22126.0, 8.4] (MDE 10.3 points)'
    """
    kind = verdict(estimate, ci, mde, unit=unit, scale=scale)
    low, high = (float(v) for v in ci)
    interval = f"[{_signed(low * scale, '.1f', False)}, {_signed(high * scale, '.1f', False)}]"
    figure = f"{_signed(estimate * scale, '.1f', True)} {unit} {interval}"
    if kind == "no detectable change" and low == high:
        line = (
            f"pipeline ran, no detectable change: {figure} (MDE unknown: every resample gave the same "
            "value, so the spread cannot be estimated)"
        )
    elif kind == "no detectable change":
        line = f"pipeline ran, no detectable change: {figure} (MDE {mde * scale:.1f} {unit})"
    else:
        line = f"{kind}: {figure}"
    return f"{name}: {line}" if name else line

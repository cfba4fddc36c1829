"""Off-policy evaluation (OPE) estimators for logged contextual-bandit feedback.

Every estimator is a small pure numpy function of a :class:`BanditData` (validated once, on
construction). Notation, per logged row ``i``: ``a_i`` the logged action, ``r_i`` its reward,
``p_i`` the logging propensity of ``a_i``, ``pi(a|x_i)`` the target policy (``action_dist``),
``q(x_i, a)`` a reward model (``q_hat``), and the importance weight ``w_i = pi(a_i|x_i) / p_i``.

- DM:    ``mean_i sum_a pi(a|x_i) q(x_i, a)``
- IPS:   ``mean_i w_i r_i``
- SNIPS: ``sum_i w_i r_i / sum_i w_i``
- DR:    ``mean_i [sum_a pi(a|x_i) q(x_i, a) + w_i (r_i - q(x_i, a_i))]``
- SNDR:  ``DM + sum_i w_i (r_i - q(x_i, a_i)) / sum_i w_i``
- Switch-DR(tau): DR where the correction is kept only for rows with ``w_i <= tau``
  (``tau = inf`` is DR, ``tau = 0`` is DM).

The mean-type estimators also have ``*_rows`` functions returning the per-row contributions, so a
bootstrap can resample rows; :func:`bootstrap_estimate` does that (and recomputes the ratio estimators
SNIPS/SNDR on each resample). :func:`coverage` says whether the logs support the target policy at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from transferlab.platform.stats import Interval, bootstrap_ci

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Estimator = Literal["dm", "ips", "snips", "dr", "sndr", "switch_dr"]

ROW_SUM_ATOL = 1e-6
"""Tolerance for each ``action_dist`` row summing to 1."""

MIN_ESS_SHARE = 0.10
"""Coverage fails when the effective sample size of the importance weights is below this share of n.

The one coverage threshold of every protocol here (the campaign logs, the Open Bandit Dataset): an
estimate that rests on fewer than a tenth of the logged rows is not trusted. It was fixed before the
3-seed offline run was made, as the stricter of the two thresholds in use then (campaigns had 5%, OBD
10%); a campaign day's reward and a click are both noisy enough that a handful of matching rows cannot
carry an estimate (at OBD's ~0.5% click rate a tenth of 10,000 rows is ~5 expected clicks)."""

MAX_UNSUPPORTED_MASS = 0.05
"""Coverage fails when the target policy puts more than this (mean) probability on rare actions."""

RARE_ACTION_SHARE = 0.001
"""An action is *rare* (effectively unsupported) when it is below this share of the logged rows."""

_CHUNK_ELEMENTS = 1 << 22  # bootstrap index matrices are built in chunks of at most this many entries


# ------------------------------------------------------------------------------------- validation


def _check_shapes(actions: IntArray, pscore: FloatArray, action_dist: FloatArray) -> None:
    n = actions.shape[0]
    if actions.ndim != 1 or n == 0:
        raise ValueError(f"actions must be a non-empty 1-D array of ints, got shape {actions.shape}")
    if pscore.shape != (n,):
        raise ValueError(f"pscore must have shape ({n},) like actions, got {pscore.shape}; one per row")
    if action_dist.ndim != 2 or action_dist.shape[0] != n:
        raise ValueError(
            f"action_dist must have shape ({n}, n_actions), got {action_dist.shape}; one row per logged row"
        )


def _validate_policy_arrays(
    actions: npt.ArrayLike, pscore: npt.ArrayLike, action_dist: npt.ArrayLike
) -> tuple[IntArray, FloatArray, FloatArray]:
    """Convert and check ``actions``, ``pscore`` and ``action_dist``; a ValueError says what to fix."""
    act_raw = np.asarray(actions)
    if act_raw.size and not np.issubdtype(act_raw.dtype, np.integer):
        raise ValueError(f"actions must be integer action indices, got dtype {act_raw.dtype}")
    act = act_raw.astype(np.int64)
    ps = np.asarray(pscore, dtype=np.float64)
    dist = np.asarray(action_dist, dtype=np.float64)
    _check_shapes(act, ps, dist)
    n_actions = dist.shape[1]
    if np.any(act < 0) or np.any(act >= n_actions):
        raise ValueError(
            f"actions must lie in [0, {n_actions}) (the columns of action_dist), got range "
            f"[{act.min()}, {act.max()}]; re-index actions or widen action_dist"
        )
    if not np.all((ps > 0.0) & (ps <= 1.0)):
        bad = int(np.sum(~((ps > 0.0) & (ps <= 1.0))))
        raise ValueError(
            f"pscore must lie in (0, 1], {bad} entries do not (or are NaN); log the logging policy's "
            "probability of the taken action, and drop rows where it was 0"
        )
    if not np.all(np.isfinite(dist)) or np.any(dist < 0.0):
        raise ValueError("action_dist must be finite and non-negative: it holds the target probabilities")
    sums = dist.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=ROW_SUM_ATOL):
        worst = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(
            f"action_dist rows must sum to 1, row {worst} sums to {sums[worst]:.6g}; normalise each row"
        )
    return act, ps, dist


@dataclass(frozen=True)
class BanditData:
    """Logged bandit feedback plus the target policy (and optionally a reward model), validated.

    Attributes:
        actions: ``(n,)`` logged action indices in ``[0, n_actions)``.
        rewards: ``(n,)`` observed rewards (finite).
        pscore: ``(n,)`` logging policy's probability of the logged action, in ``(0, 1]``.
        action_dist: ``(n, n_actions)`` target policy probabilities per row (rows sum to 1).
        q_hat: ``(n, n_actions)`` reward-model predictions, needed by DM, DR, SNDR and Switch-DR.
    """

    actions: IntArray
    rewards: FloatArray
    pscore: FloatArray
    action_dist: FloatArray
    q_hat: FloatArray | None = None

    def __post_init__(self) -> None:
        act, ps, dist = _validate_policy_arrays(self.actions, self.pscore, self.action_dist)
        rew = np.asarray(self.rewards, dtype=np.float64)
        if rew.shape != act.shape:
            raise ValueError(f"rewards must have shape {act.shape} like actions, got {rew.shape}")
        if not np.all(np.isfinite(rew)):
            bad = int(np.sum(~np.isfinite(rew)))
            raise ValueError(f"rewards has {bad} NaN or infinite entries; drop or impute those rows first")
        q = None
        if self.q_hat is not None:
            q = np.asarray(self.q_hat, dtype=np.float64)
            if q.shape != dist.shape:
                raise ValueError(
                    f"q_hat must have shape {dist.shape} like action_dist, got {q.shape}; "
                    "predict every action for every row"
                )
            if not np.all(np.isfinite(q)):
                raise ValueError("q_hat has NaN or infinite entries; fix the reward model's predictions")
        object.__setattr__(self, "actions", act)
        object.__setattr__(self, "rewards", rew)
        object.__setattr__(self, "pscore", ps)
        object.__setattr__(self, "action_dist", dist)
        object.__setattr__(self, "q_hat", q)

    @property
    def n(self) -> int:
        """Number of logged rows."""
        return int(self.actions.shape[0])

    def take(self, idx: npt.NDArray[np.intp]) -> BanditData:
        """The rows ``idx`` (e.g. a bootstrap resample)."""
        q = None if self.q_hat is None else self.q_hat[idx]
        return BanditData(self.actions[idx], self.rewards[idx], self.pscore[idx], self.action_dist[idx], q)


def _q(data: BanditData) -> FloatArray:
    if data.q_hat is None:
        raise ValueError("this estimator needs a reward model: pass q_hat (n, n_actions) to BanditData")
    return data.q_hat


# ------------------------------------------------------------------------------------- components


def importance_weights(data: BanditData) -> FloatArray:
    """``w_i = pi(a_i|x_i) / pscore_i``."""
    target = data.action_dist[np.arange(data.n), data.actions]
    return np.asarray(target / data.pscore, dtype=np.float64)


def _dm_part(data: BanditData) -> FloatArray:
    return np.asarray(np.sum(data.action_dist * _q(data), axis=1), dtype=np.float64)


def _residual(data: BanditData) -> FloatArray:
    """``r_i - q(x_i, a_i)``."""
    return np.asarray(data.rewards - _q(data)[np.arange(data.n), data.actions], dtype=np.float64)


def _ratio(numerator: FloatArray, weights: FloatArray) -> float:
    total = float(np.sum(weights))
    if total <= 0.0:
        raise ValueError(
            "the target policy gives probability 0 to every logged action, so self-normalised estimators "
            "are undefined; check coverage() and use DM or more overlapping logs"
        )
    return float(np.sum(numerator)) / total


# ----------------------------------------------------------------------------- per-row estimators


def dm_rows(data: BanditData) -> FloatArray:
    """Direct method per row: ``sum_a pi(a|x_i) q(x_i, a)``."""
    return _dm_part(data)


def ips_rows(data: BanditData) -> FloatArray:
    """Inverse propensity scoring per row: ``w_i r_i``."""
    return importance_weights(data) * data.rewards


def dr_rows(data: BanditData) -> FloatArray:
    """Doubly robust per row: ``DM_i + w_i (r_i - q(x_i, a_i))``."""
    return _dm_part(data) + importance_weights(data) * _residual(data)


def switch_dr_rows(data: BanditData, tau: float) -> FloatArray:
    """Switch-DR per row: DR's correction kept only where ``w_i <= tau`` (else DM)."""
    if not tau >= 0.0:
        raise ValueError(f"tau must be >= 0 (0 gives DM, inf gives DR), got {tau!r}")
    w = importance_weights(data)
    return _dm_part(data) + np.where(w <= tau, w * _residual(data), 0.0)


# -------------------------------------------------------------------------------- point estimates


def dm(data: BanditData) -> float:
    """Direct method estimate (mean of :func:`dm_rows`)."""
    return float(np.mean(dm_rows(data)))


def ips(data: BanditData) -> float:
    """Inverse propensity scoring estimate (mean of :func:`ips_rows`)."""
    return float(np.mean(ips_rows(data)))


def snips(data: BanditData) -> float:
    """Self-normalised IPS: ``sum w r / sum w``."""
    w = importance_weights(data)
    return _ratio(w * data.rewards, w)


def dr(data: BanditData) -> float:
    """Doubly robust estimate (mean of :func:`dr_rows`)."""
    return float(np.mean(dr_rows(data)))


def sndr(data: BanditData) -> float:
    """Self-normalised DR: ``DM + sum w (r - q(x, a)) / sum w``."""
    w = importance_weights(data)
    return dm(data) + _ratio(w * _residual(data), w)


def switch_dr(data: BanditData, tau: float) -> float:
    """Switch-DR estimate (mean of :func:`switch_dr_rows`); ``tau=inf`` is DR and ``tau=0`` is DM."""
    return float(np.mean(switch_dr_rows(data, tau)))


# -------------------------------------------------------------------------------------- bootstrap


def _ratio_parts(estimator: Estimator, data: BanditData) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(base, numerator, weights)`` with estimate ``mean(base) + sum(numerator) / sum(weights)``."""
    w = importance_weights(data)
    if estimator == "snips":
        return np.zeros(data.n), w * data.rewards, w
    return _dm_part(data), w * _residual(data), w


def _ratio_bootstrap(
    parts: tuple[FloatArray, FloatArray, FloatArray], n_boot: int, rng: np.random.Generator
) -> FloatArray:
    base, num, w = parts
    n = base.shape[0]
    chunk = max(1, _CHUNK_ELEMENTS // n)
    out: list[FloatArray] = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        total = w[idx].sum(axis=1)
        corr = np.divide(num[idx].sum(axis=1), total, out=np.zeros_like(total), where=total > 0)
        out.append(base[idx].mean(axis=1) + corr)
    return np.concatenate(out)


def _bootstrap(
    estimator: Estimator,
    data: BanditData,
    baseline: FloatArray | float,
    *,
    n_boot: int,
    level: float,
    seed: int,
    tau: float,
) -> Interval:
    """The estimate minus ``mean(baseline)`` (a per-row value, or 0), resampling rows jointly."""
    rows: dict[str, Callable[[BanditData], FloatArray]] = {
        "dm": dm_rows,
        "ips": ips_rows,
        "dr": dr_rows,
        "switch_dr": lambda d: switch_dr_rows(d, tau),
    }
    if estimator in rows:
        return bootstrap_ci(rows[estimator](data) - baseline, n_boot=n_boot, level=level, seed=seed)
    if estimator not in ("snips", "sndr"):
        raise ValueError(f"estimator must be one of {[*sorted(rows), 'sndr', 'snips']}, got {estimator!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int (e.g. 2000), got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    estimate = (snips(data) if estimator == "snips" else sndr(data)) - float(np.mean(baseline))
    base, num, w = _ratio_parts(estimator, data)
    reps = _ratio_bootstrap((base - baseline, num, w), n_boot, np.random.default_rng(seed))
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(reps, [alpha, 1.0 - alpha])
    return Interval(estimate, float(low), float(high), level, data.n)


def bootstrap_estimate(
    estimator: Estimator,
    data: BanditData,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    tau: float = float("inf"),
) -> Interval:
    """Percentile bootstrap interval for an OPE estimate, resampling logged rows.

    Mean-type estimators (DM, IPS, DR, Switch-DR with ``tau``) reuse
    :func:`transferlab.platform.stats.bootstrap_ci` on their per-row contributions; the ratio
    estimators (SNIPS, SNDR) are recomputed on each resample.
    """
    return _bootstrap(estimator, data, 0.0, n_boot=n_boot, level=level, seed=seed, tau=tau)


def bootstrap_gain(
    estimator: Estimator,
    data: BanditData,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    tau: float = float("inf"),
) -> Interval:
    """The target policy's value minus the logging policy's, paired on the same logged rows.

    The logging policy's value is the mean logged reward; each bootstrap resample of rows recomputes
    both, so the noise they share (a good day lifts both) cancels and the interval is the one of the
    gain, not of either value. ``estimate = E_target - mean(rewards)``.
    """
    return _bootstrap(estimator, data, data.rewards, n_boot=n_boot, level=level, seed=seed, tau=tau)


# --------------------------------------------------------------------------------------- coverage


@dataclass(frozen=True)
class Coverage:
    """How well the logs support the target policy.

    Attributes:
        ess: effective sample size of the importance weights, ``(sum w)^2 / sum w^2``.
        ess_share: ``ess / n``.
        max_weight: the largest importance weight.
        unsupported_mass: mean target probability on rare (never or almost never logged) actions.
        rare_actions: the indices of those actions.
        trustworthy: False when ESS is below ``min_ess_share * n`` (default :data:`MIN_ESS_SHARE`) or
            the unsupported mass is above ``MAX_UNSUPPORTED_MASS``.
        reason: why it is not trustworthy (``None`` when it is).
    """

    ess: float
    ess_share: float
    max_weight: float
    unsupported_mass: float
    rare_actions: tuple[int, ...]
    trustworthy: bool
    reason: str | None


def _some(items: list[int], k: int = 8) -> str:
    """``[a, b, ...]`` with at most ``k`` items shown."""
    more = f" and {len(items) - k} more" if len(items) > k else ""
    return f"{items[:k]}{more}"


def effective_sample_size(weights: FloatArray) -> float:
    """``(sum w)^2 / sum w^2`` (0 when every weight is 0)."""
    sq = float(np.sum(weights**2))
    return float(np.sum(weights)) ** 2 / sq if sq > 0.0 else 0.0


def coverage(
    actions: npt.ArrayLike,
    pscore: npt.ArrayLike,
    action_dist: npt.ArrayLike,
    logged_counts: npt.ArrayLike | None = None,
    rare: float = RARE_ACTION_SHARE,
    *,
    min_ess_share: float = MIN_ESS_SHARE,
) -> Coverage:
    """Coverage diagnostics for evaluating ``action_dist`` on logs with ``actions`` and ``pscore``.

    ``logged_counts`` (``(n_actions,)``) defaults to the counts of ``actions``; pass counts from the
    full log when ``actions`` is a subset. An action is rare when its share of the counts is below
    ``rare`` (an action never taken always is). ``min_ess_share`` replaces :data:`MIN_ESS_SHARE` for
    callers that know their rewards are rare enough to need a larger effective sample.
    """
    act, ps, dist = _validate_policy_arrays(actions, pscore, action_dist)
    n, n_actions = dist.shape
    if logged_counts is None:
        counts = np.bincount(act, minlength=n_actions).astype(np.float64)
    else:
        counts = np.asarray(logged_counts, dtype=np.float64)
        if counts.shape != (n_actions,) or np.any(counts < 0):
            raise ValueError(
                f"logged_counts must be {n_actions} non-negative counts, got shape {counts.shape}"
            )
    share = counts / max(float(counts.sum()), 1.0)
    rare_mask = (counts == 0) | (share < rare)
    w = dist[np.arange(n), act] / ps
    ess = effective_sample_size(w)
    unsupported = float(np.mean(dist[:, rare_mask].sum(axis=1)))
    reasons = []
    if ess < min_ess_share * n:
        reasons.append(
            f"effective sample size {ess:.1f} is below {min_ess_share:.0%} of n={n}: "
            "the target policy is far from the logging policy"
        )
    if unsupported > MAX_UNSUPPORTED_MASS:
        reasons.append(
            f"the target policy puts {unsupported:.1%} of its mass on actions the logs (almost) never took "
            f"{_some(np.flatnonzero(rare_mask).tolist())} (limit {MAX_UNSUPPORTED_MASS:.0%})"
        )
    return Coverage(
        ess=ess,
        ess_share=ess / n,
        max_weight=float(np.max(w)),
        unsupported_mass=unsupported,
        rare_actions=tuple(int(a) for a in np.flatnonzero(rare_mask)),
        trustworthy=not reasons,
        reason="; ".join(reasons) if reasons else None,
    )

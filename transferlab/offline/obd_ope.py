"""Off-policy evaluation on the real Open Bandit Dataset: Bernoulli TS evaluated from the random log.

The standard OBP protocol (Saito et al., NeurIPS 2021 Datasets and Benchmarks, arXiv 2008.07146):
estimate the click rate of the Bernoulli Thompson sampling (BTS) policy from the log of the uniform
random policy, and compare with BTS's own observed click rate in the ``bts/`` log (relative error
``|estimate - actual| / actual``).

The target policy. The BTS policy's own per-context action probabilities are not in the sample logs, so
:func:`evaluate_bts_on_random` uses the standard approximation: BTS's *empirical action distribution per
position*, i.e. the counts of ``item_id`` at each position in the ``bts`` log, normalised. Every
random-log row is scored with the distribution of its own position. (BTS does not use user features,
so a context-free distribution per position loses less than it would for a contextual policy; it
still ignores BTS's drift over the week.)

The reward model for DM/DR/SNDR/Switch-DR is a per-(item, position) click rate fitted on the random log,
smoothed towards the position's click rate (a Beta prior of strength :data:`PRIOR_STRENGTH`).

The reverse direction (:func:`evaluate_random_on_bts`) swaps the roles: the *uniform random* policy
(``1/n_items`` for every item at every position) is estimated from the BTS log, with BTS's logged
propensities as the behaviour policy and the reward model fitted on the BTS log; the truth is the random
log's own click rate. BTS concentrates on a few items, so the importance weights are large (up to
``pscore``'s inverse over ``n_items``) and the effective sample is small: this direction exists to
show that :func:`~transferlab.offline.ope.coverage` flags such an estimate as untrustworthy.

Coverage on OBD is judged with the same rule as the campaign logs,
:data:`~transferlab.offline.ope.MIN_ESS_SHARE` (10% of n): clicks are rare (about 0.5%), so even 10% of
10,000 rows carries only about five expected clicks.

:func:`ope_obd` runs both directions and returns the JSON-ready summary behind
``transferlab offline ope-obd``; ``python -m transferlab.offline.obd_ope [random.csv bts.csv]`` prints the
forward table of ``docs/results/obd_ope.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from transferlab.offline.ope import (
    MIN_ESS_SHARE,
    BanditData,
    Coverage,
    Estimator,
    bootstrap_estimate,
    coverage,
)
from transferlab.platform.stats import Interval, bootstrap_ci
from transferlab.simulator.realdata.obd import ObdLog, load_obd

__all__ = [
    "ESTIMATORS",
    "PRIOR_STRENGTH",
    "SWITCH_TAU",
    "ObdOpeResult",
    "bts_action_dist",
    "click_model",
    "evaluate_bts_on_random",
    "evaluate_random_on_bts",
    "format_table",
    "ope_obd",
]

FloatArray = npt.NDArray[np.float64]

#: The estimators reported, in table order.
ESTIMATORS: tuple[Estimator, ...] = ("dm", "ips", "snips", "dr", "sndr", "switch_dr")
#: Pseudo-impressions of the Beta prior that shrinks each (item, position) click rate to its position's.
PRIOR_STRENGTH = 100.0
#: Switch-DR keeps DR's correction where the importance weight is at most this.
SWITCH_TAU = 10.0


class ObdOpeResult(TypedDict):
    """The outcome of :func:`evaluate_bts_on_random` (a plain dict with these keys).

    Keys:
        estimates: each estimator's bootstrap interval for BTS's click rate, keyed by estimator name.
        actual: BTS's observed click rate in the bts log, with its bootstrap interval.
        relative_error: ``|estimate - actual| / actual`` per estimator.
        coverage: importance-weight diagnostics of the target policy on the random log.
    """

    estimates: dict[str, Interval]
    actual: Interval
    relative_error: dict[str, float]
    coverage: Coverage


def bts_action_dist(bts_log: ObdLog, n_items: int, n_positions: int) -> FloatArray:
    """``(n_positions, n_items)``: BTS's empirical item distribution at each (0-based) position.

    A position BTS never used gets the uniform distribution.
    """
    fb = bts_log.to_bandit_feedback()
    counts = np.zeros((n_positions, n_items), dtype=np.float64)
    np.add.at(counts, (fb.position, fb.action), 1.0)
    totals = counts.sum(axis=1, keepdims=True)
    uniform = np.full_like(counts, 1.0 / n_items)
    return np.divide(counts, totals, out=uniform, where=totals > 0)


def click_model(
    actions: npt.ArrayLike, positions: npt.ArrayLike, clicks: npt.ArrayLike, n_items: int, n_positions: int
) -> FloatArray:
    """``(n_positions, n_items)`` smoothed click rates: ``(clicks + k p_pos) / (shows + k)``."""
    act = np.asarray(actions, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.int64)
    clk = np.asarray(clicks, dtype=np.float64)
    shows = np.zeros((n_positions, n_items))
    hits = np.zeros((n_positions, n_items))
    np.add.at(shows, (pos, act), 1.0)
    np.add.at(hits, (pos, act), clk)
    pos_shows = shows.sum(axis=1, keepdims=True)
    overall = float(clk.mean()) if clk.size else 0.0
    pos_rate = np.divide(
        hits.sum(axis=1, keepdims=True), pos_shows, out=np.full_like(pos_shows, overall), where=pos_shows > 0
    )
    return np.asarray((hits + PRIOR_STRENGTH * pos_rate) / (shows + PRIOR_STRENGTH), dtype=np.float64)


def evaluate_bts_on_random(
    random_log: ObdLog, bts_log: ObdLog, seed: int = 0, *, n_boot: int = 2000, level: float = 0.95
) -> ObdOpeResult:
    """Estimate BTS's click rate from ``random_log`` and compare it with ``bts_log``'s observed one.

    See the module docstring for the target policy (BTS's empirical per-position item distribution,
    the standard approximation when BTS's own per-context probabilities are unavailable) and the
    reward model. Every interval is a seeded percentile bootstrap with ``n_boot`` resamples.
    """
    n_items, n_positions = _shape(random_log, bts_log)
    target = bts_action_dist(bts_log, n_items, n_positions)
    return _evaluate(random_log, target, bts_log, seed=seed, n_boot=n_boot, level=level)


def evaluate_random_on_bts(
    random_log: ObdLog, bts_log: ObdLog, seed: int = 0, *, n_boot: int = 2000, level: float = 0.95
) -> ObdOpeResult:
    """The reverse direction: estimate the uniform random policy's click rate from ``bts_log``.

    Behaviour policy: BTS with its logged propensities; target: ``1/n_items`` for every item at every
    position; reward model fitted on ``bts_log``; truth: ``random_log``'s observed click rate. Expect
    ``coverage.trustworthy`` to be False (see the module docstring).
    """
    n_items, n_positions = _shape(random_log, bts_log)
    target = np.full((n_positions, n_items), 1.0 / n_items)
    return _evaluate(bts_log, target, random_log, seed=seed, n_boot=n_boot, level=level)


def _shape(random_log: ObdLog, bts_log: ObdLog) -> tuple[int, int]:
    """``(n_items, n_positions)`` shared by both logs; a ValueError when they are different campaigns."""
    if random_log.n_items != bts_log.n_items:
        raise ValueError(
            f"the logs have different item counts ({random_log.n_items} vs {bts_log.n_items}); "
            "pass the random and bts logs of the same campaign"
        )
    return random_log.n_items, max(random_log.n_positions, bts_log.n_positions)


def _evaluate(
    behaviour_log: ObdLog, target: FloatArray, truth_log: ObdLog, *, seed: int, n_boot: int, level: float
) -> ObdOpeResult:
    """Estimate the click rate of ``target`` (``(n_positions, n_items)``) on ``behaviour_log``.

    The reward model is fitted on ``behaviour_log``; the truth is ``truth_log``'s observed click rate.
    """
    n_positions, n_items = target.shape
    fb = behaviour_log.to_bandit_feedback()
    dist = target[fb.position]
    q_table = click_model(fb.action, fb.position, fb.reward, n_items, n_positions)
    data = BanditData(fb.action, fb.reward.astype(np.float64), fb.pscore, dist, q_table[fb.position])
    estimates: dict[str, Interval] = {
        name: bootstrap_estimate(name, data, n_boot=n_boot, level=level, seed=seed, tau=SWITCH_TAU)
        for name in ESTIMATORS
    }
    actual = bootstrap_ci(truth_log.click.astype(np.float64), n_boot=n_boot, level=level, seed=seed)
    if actual.estimate <= 0.0:
        raise ValueError(
            f"the log giving the true click rate ({truth_log.source or 'in memory'}) has no clicks, so the "
            "relative error is undefined; pass a log with at least one click"
        )
    rel: dict[str, float] = {
        name: abs(iv.estimate - actual.estimate) / actual.estimate for name, iv in estimates.items()
    }
    cov = coverage(fb.action, fb.pscore, dist, min_ess_share=MIN_ESS_SHARE)
    return {"estimates": estimates, "actual": actual, "relative_error": rel, "coverage": cov}


def _direction_summary(result: ObdOpeResult, behaviour: str, target: str) -> dict[str, Any]:
    """One direction of :func:`ope_obd`'s JSON."""
    cov = result["coverage"]
    actual = result["actual"]
    return {
        "truth": actual.estimate,
        "truth_ci": [actual.low, actual.high],
        "estimates": {
            name: {
                "value": iv.estimate,
                "ci": [iv.low, iv.high],
                "relative_error": result["relative_error"][name],
            }
            for name, iv in result["estimates"].items()
        },
        "coverage": {
            "ess": cov.ess,
            "max_weight": cov.max_weight,
            "unsupported_mass": cov.unsupported_mass,
            "trusted": cov.trustworthy,
            "ess_share": cov.ess_share,
            "reason": cov.reason,
        },
        "n": next(iter(result["estimates"].values())).n,
        "behaviour": behaviour,
        "target": target,
    }


def ope_obd(
    random_log: ObdLog, bts_log: ObdLog, seed: int = 0, *, n_boot: int = 2000, level: float = 0.95
) -> dict[str, dict[str, Any]]:
    """Both directions as a JSON-ready dict: ``{"forward": D, "reverse": D}``.

    ``forward`` estimates BTS from the random log (:func:`evaluate_bts_on_random`), ``reverse`` the
    uniform random policy from the BTS log (:func:`evaluate_random_on_bts`). Each ``D`` is::

        {"truth": float, "truth_ci": [lo, hi], "n": int, "behaviour": str, "target": str,
         "estimates": {name: {"value": float, "ci": [lo, hi], "relative_error": float}},
         "coverage": {"ess": float, "max_weight": float, "unsupported_mass": float, "trusted": bool,
                      "ess_share": float, "reason": str | None}}

    for ``name`` in :data:`ESTIMATORS`.
    """
    forward = evaluate_bts_on_random(random_log, bts_log, seed=seed, n_boot=n_boot, level=level)
    reverse = evaluate_random_on_bts(random_log, bts_log, seed=seed, n_boot=n_boot, level=level)
    return {
        "forward": _direction_summary(
            forward, "uniform random (random log)", "BTS (empirical item distribution per position)"
        ),
        "reverse": _direction_summary(reverse, "BTS (bts log, logged pscore)", "uniform random"),
    }


def format_table(result: ObdOpeResult, spec: str = ".5f") -> str:
    """A markdown table: estimator, estimate [95% CI], relative error; then the actual CTR."""
    pct = f"{result['actual'].level:.0%}"
    lines = [f"| estimator | estimate [{pct} CI] | relative error |", "|---|---|---|"]
    for name, iv in result["estimates"].items():
        lines.append(f"| {name} | {iv.format(spec)} | {result['relative_error'][name]:.3f} |")
    lines.append(f"| **actual BTS CTR** | {result['actual'].format(spec)} | - |")
    cov = result["coverage"]
    lines.append("")
    lines.append(
        f"Coverage: ESS {cov.ess:.0f} ({cov.ess_share:.1%} of n), max weight {cov.max_weight:.2f}, "
        f"trustworthy={cov.trustworthy}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m transferlab.offline.obd_ope [random.csv bts.csv [seed]]``: print the table."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "obd"
    random_path = Path(args[0]) if args else root / "random" / "men" / "men.csv"
    bts_path = Path(args[1]) if len(args) > 1 else root / "bts" / "men" / "men.csv"
    seed = int(args[2]) if len(args) > 2 else 0
    result = evaluate_bts_on_random(load_obd(random_path), load_obd(bts_path), seed=seed)
    print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

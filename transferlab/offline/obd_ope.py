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

Run ``python -m transferlab.offline.obd_ope [random.csv bts.csv]`` for the table in
``docs/results/obd_ope.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from transferlab.offline.ope import BanditData, Coverage, Estimator, bootstrap_estimate, coverage
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
    "format_table",
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
    if random_log.n_items != bts_log.n_items:
        raise ValueError(
            f"the logs have different item counts ({random_log.n_items} vs {bts_log.n_items}); "
            "pass the random and bts logs of the same campaign"
        )
    n_items = random_log.n_items
    n_positions = max(random_log.n_positions, bts_log.n_positions)
    fb = random_log.to_bandit_feedback()
    target = bts_action_dist(bts_log, n_items, n_positions)[fb.position]
    q_table = click_model(fb.action, fb.position, fb.reward, n_items, n_positions)
    data = BanditData(fb.action, fb.reward.astype(np.float64), fb.pscore, target, q_table[fb.position])
    estimates: dict[str, Interval] = {
        name: bootstrap_estimate(name, data, n_boot=n_boot, level=level, seed=seed, tau=SWITCH_TAU)
        for name in ESTIMATORS
    }
    actual = bootstrap_ci(bts_log.click.astype(np.float64), n_boot=n_boot, level=level, seed=seed)
    rel: dict[str, float] = {
        name: abs(iv.estimate - actual.estimate) / actual.estimate for name, iv in estimates.items()
    }
    cov = coverage(fb.action, fb.pscore, target)
    return {"estimates": estimates, "actual": actual, "relative_error": rel, "coverage": cov}


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

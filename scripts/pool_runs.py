"""Pool the seeds of several ``ops experiment learn`` runs of the same settings into one comparison.

    python scripts/pool_runs.py RUN RUN [...]

Each RUN is a finished run directory (``config.json`` and ``arms/{sft,rl}-seed<S>/result.json``). The
runs must have the same settings apart from ``seeds`` and no seed in common; the script prints ``rl -
sft`` paired per (seed, scenario) and clustered by seed (and by seed and scenario), with the MDE, over
every run's seeds together, computed by the experiment's own ``compare``. For adding seeds to a
committed result without re-running it (seeds are independent clusters), not for mixing settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from transferlab.coding_rl.experiments.common import compare, held_out

ARMS = ("sft", "rl")


def settings(run: Path) -> dict[str, Any]:
    """The run's saved config without its seeds."""
    config = dict(json.loads((run / "config.json").read_text()))
    config.pop("seeds", None)
    return config


def arm_results(runs: list[Path]) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """Every run's seeds and per-arm results (``{arm}-seed{s}``); exits naming what does not fit."""
    first = settings(runs[0])
    seeds: list[int] = []
    results: dict[str, dict[str, Any]] = {}
    for run in runs:
        if not (run / "config.json").is_file():
            sys.exit(f"{run} is not a run directory (no config.json)")
        if settings(run) != first:
            sys.exit(f"{run} has other settings than {runs[0]}: pool only runs of one config")
        for seed in json.loads((run / "config.json").read_text())["seeds"]:
            if seed in seeds:
                sys.exit(f"seed {seed} is in more than one run: each seed may be pooled once")
            for arm in ARMS:
                path = run / "arms" / f"{arm}-seed{seed}" / "result.json"
                if not path.is_file():
                    sys.exit(f"{path} is missing: finish the run (--resume) before pooling it")
                results[f"{arm}-seed{seed}"] = json.loads(path.read_text())
            seeds.append(seed)
    return seeds, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished run directories of one config")
    args = parser.parse_args()
    seeds, results = arm_results(args.runs)
    sft, rl = (held_out(results, arm, seeds, "held_out") for arm in ARMS)
    per_seed = {
        s: {
            arm: sum(results[f"{arm}-seed{s}"]["held_out"]) / len(results[f"{arm}-seed{s}"]["held_out"])
            for arm in ARMS
        }
        for s in seeds
    }
    for s, row in per_seed.items():
        print(
            f"seed {s}: sft {row['sft']:.3f}  rl {row['rl']:.3f}  "
            f"rl - sft {100 * (row['rl'] - row['sft']):+.1f}"
        )
    for c in compare("rl - sft", sft, rl, ("seed", "seed+task")):
        print(
            f"rl - sft over {c.n_clusters} {c.cluster} clusters: {100 * c.estimate:+.1f} points "
            f"[{100 * c.ci[0]:+.1f}, {100 * c.ci[1]:+.1f}], MDE {100 * c.mde:.1f}"
        )


if __name__ == "__main__":
    main()

"""Pool the seeds of several ``ops experiment learn`` runs of the same settings into one comparison.

    python scripts/pool_runs.py RUN RUN [...] [--out DIR]

Each RUN is a finished run directory (``config.json`` and ``arms/{sft,rl}-seed<S>/result.json``). The
runs must have the same settings apart from ``seeds`` and no seed in common; the script prints ``rl -
sft`` paired per (seed, scenario) and clustered by seed (and by seed and scenario), with the MDE, over
every run's seeds together, computed by the experiment's own ``compare``, and with ``--out`` writes them
as ``DIR/result.json`` (the schema of every experiment's result, each arm's per-seed success added). For
adding seeds to a committed result without re-running it (seeds are independent clusters), not for
mixing settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from transferlab.platform.held_out import compare, held_out, seed_estimate
from transferlab.platform.results import Arm, Result, write_result

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


def pooled(runs: list[Path], command: str) -> Result:
    """``rl - sft`` over every run's seeds, as a result."""
    seeds, results = arm_results(runs)
    settings_ = settings(runs[0])
    data = {arm: held_out(results, arm, seeds, "held_out") for arm in ARMS}
    per_episode = int(settings_.get("eval_episodes", 1))
    arms = {
        arm: Arm.model_validate(
            {
                "held_out_success": seed_estimate(d).model_dump(),
                "n_episodes": len(d.values) * per_episode,
                "per_seed": [
                    sum(results[f"{arm}-seed{s}"]["held_out"]) / len(results[f"{arm}-seed{s}"]["held_out"])
                    for s in seeds
                ],
            }
        )
        for arm, d in data.items()
    }
    return Result(
        experiment="ops-learn",
        command=command,
        seeds=seeds,
        settings={**settings_, "pooled_runs": [str(r) for r in runs]},
        arms=arms,
        comparisons=compare("rl - sft", data["sft"], data["rl"], ("seed", "seed+task")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished run directories of one config")
    parser.add_argument("--out", type=Path, help="write the pooled comparison as DIR/result.json")
    args = parser.parse_args()
    command = " ".join(["python scripts/pool_runs.py", *map(str, args.runs)])
    if args.out is not None:
        command += f" --out {args.out}"
    result = pooled(args.runs, command)
    sft, rl = (result.arms[arm].model_dump()["per_seed"] for arm in ARMS)
    for s, a, b in zip(result.seeds, sft, rl, strict=True):
        print(f"seed {s}: sft {a:.3f}  rl {b:.3f}  rl - sft {100 * (b - a):+.1f}")
    for c in result.comparisons:
        print(
            f"rl - sft over {c.n_clusters} {c.cluster} clusters: {100 * c.estimate:+.1f} points "
            f"[{100 * c.ci[0]:+.1f}, {100 * c.ci[1]:+.1f}], MDE {100 * c.mde:.1f}"
        )
    if args.out is not None:
        print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()

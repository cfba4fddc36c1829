"""CodeRepair-v0 throughput: env steps/s and episodes/s with the batched runner on 1 core vs all.

Runs the expert agent (every episode runs tests twice and submits once, so the sandbox is exercised
the way training would) over the seed repositories, or a corpus split with --corpus, and prints the
table plus the speed-up of all workers over one and the share of step time spent in the sandbox.

Usage: python benchmarks/coding_env_throughput.py [--episodes 150] [--corpus DIR --split held-out]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from transferlab.coding_rl.rollout import open_sandbox, run_batched
from transferlab.coding_rl.tasks.repo_task import RepoTask, load_corpus
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all cores, from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def measure(tasks: list[RepoTask], agent: str, episodes: int, workers: int) -> dict[str, float]:
    sandbox = open_sandbox("forkserver", workers)
    try:
        run_batched(tasks, agent, min(episodes, 2 * workers), workers, sandbox)  # warm the sandboxes
        busy0, total0 = cpu_times()
        _, s = run_batched(tasks, agent, episodes, workers, sandbox)
        busy1, total1 = cpu_times()
    finally:
        sandbox.close()
    return {
        "workers": workers,
        "episodes_per_s": s.episodes_per_s,
        "steps_per_s": s.steps_per_s,
        "sandbox_share": s.sandbox_share,
        "success_rate": s.success_rate,
        "cpu_busy": (busy1 - busy0) / max(1, total1 - total0),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--episodes", type=int, default=150)
    p.add_argument("--agent", default="expert")
    p.add_argument("--corpus", type=Path, help="a task corpus; default: the seed repositories")
    p.add_argument("--split", default="held-out")
    args = p.parse_args()
    tasks = load_corpus(args.corpus, split=args.split) if args.corpus else seed_repo_tasks()
    cores = os.cpu_count() or 1
    rows = [measure(tasks, args.agent, args.episodes, w) for w in sorted({1, cores})]
    print(f"agent {args.agent}, {len(tasks)} tasks, {args.episodes} episodes per row, {cores} cores\n")
    print(
        "| workers | episodes/s | env steps/s | sandbox share of step time | CPU busy (all cores) | success |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['workers']} | {r['episodes_per_s']:.1f} | {r['steps_per_s']:.1f} | "
            f"{r['sandbox_share']:.0%} | {r['cpu_busy']:.0%} | {r['success_rate']:.0%} |"
        )
    if len(rows) > 1:
        print(
            f"\nspeed-up {rows[-1]['workers']} workers vs 1: "
            f"{rows[-1]['episodes_per_s'] / rows[0]['episodes_per_s']:.2f}x episodes/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

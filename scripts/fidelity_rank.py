"""Rank a fitted simulator against the world's evaluation panel in seconds, for trying fits quickly.

    python scripts/fidelity_rank.py world WORLD [--policy RUN] [--episodes 256] [--seed 0]
    python scripts/fidelity_rank.py rank WORLD SIM [--policy RUN] [--episodes 256] [--seed 0] [-v]

``world`` runs the held-out evaluation panel in the world that made ``WORLD/logs`` exactly as
``transferlab sim fidelity`` does (2 x EPISODES episodes per policy from seed SEED + 2; a ``sim train``
policy added with --policy) and saves it as ``WORLD/world_panel_<episodes>_<seed>.npz`` (about 20
minutes at 256). ``rank`` runs the same panel in the simulator ``SIM`` (EPISODES episodes from seed
SEED, as ``sim fidelity``) and prints the "before calibration" Kendall tau and median relative
errors that ``sim fidelity`` would print, in about 20 seconds. A probe for choosing what to fit, not a
result: the figure of record is ``sim fidelity``'s, with its intervals and the calibrated column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from transferlab.simulator.fidelity import evaluate_panel, world_factory
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import read_logs
from transferlab.simulator.market import DAY_KEYS
from transferlab.simulator.policies import Policy, evaluation_panel

ERRORS = ("orders", "gmv", "profit")


def panel(policies: list[Path]) -> dict[str, Policy]:
    """The evaluation panel of ``sim fidelity``, with each trained policy as ``trained:NAME``."""
    from transferlab.simulator.cli import _trained_policy

    out = evaluation_panel()
    for path in policies:
        out[f"trained:{path.name}"] = _trained_policy(path)
    return out


def cache_path(world: Path, episodes: int, seed: int) -> Path:
    return world / f"world_panel_{episodes}_{seed}.npz"


def run_world(world: Path, policies: list[Path], episodes: int, seed: int) -> None:
    """Evaluate the panel in the world and save each policy's returns and mean outcomes."""
    logs = read_logs(world / "logs")
    markets = world_factory(logs.manifest)
    arrays: dict[str, np.ndarray] = {}
    for name, policy in panel(policies).items():
        result = evaluate_panel(markets, {name: policy}, episodes=2 * episodes, seed=seed + 2)
        arrays[f"returns/{name}"] = result.returns[name]
        arrays[f"outcomes/{name}"] = result.outcomes[name]
        print(f"{name:28s} {float(result.returns[name].mean()):8.3f}", flush=True)
    out = cache_path(world, episodes, seed)
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, allow_pickle=False, **arrays)
    tmp.replace(out)
    print(f"saved {out}")


def rank(world: Path, sim_dir: Path, policies: list[Path], episodes: int, seed: int, verbose: bool) -> None:
    """Print the simulator's Kendall tau and median relative errors against the cached world panel."""
    cache = cache_path(world, episodes, seed)
    if not cache.is_file():
        sys.exit(
            f"{cache} does not exist: run `python scripts/fidelity_rank.py world {world} "
            f"--episodes {episodes} --seed {seed}` (with the same --policy) first"
        )
    saved = np.load(cache)
    sim = LearnedSimulator.load(sim_dir)
    n_customers = int(read_logs(world / "logs").manifest["world"]["n_customers"])
    names = list(panel(policies))
    missing = [n for n in names if f"returns/{n}" not in saved.files]
    if missing:
        sys.exit(f"the cached world panel lacks {missing}: re-run `world` with the same --policy")
    result = evaluate_panel(
        lambda n, k: sim.market(n_envs=n, n_customers=n_customers, seed=k),
        panel(policies),
        episodes=episodes,
        seed=seed,
    )
    world_value = np.array([saved[f"returns/{n}"].mean() for n in names])
    sim_value = np.array([result.returns[n].mean() for n in names])
    print(f"Kendall tau (before calibration) {stats.kendalltau(sim_value, world_value)[0]:.3f}")
    errors = {
        k: np.array(
            [
                result.outcomes[n][DAY_KEYS.index(k)] / saved[f"outcomes/{n}"][DAY_KEYS.index(k)] - 1
                for n in names
            ]
        )
        for k in ERRORS
    }
    print(
        "median |relative error|: " + ", ".join(f"{k} {np.median(np.abs(e)):.3f}" for k, e in errors.items())
    )
    if verbose:
        for i, n in enumerate(names):
            errs = " ".join(f"{k} {errors[k][i]:+.3f}" for k in ERRORS)
            print(f"  {n:28s} world {world_value[i]:7.2f}  sim {sim_value[i]:7.2f}  {errs}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("world", "rank"))
    parser.add_argument("world", type=Path, help="directory holding logs/ (and the cached world panel)")
    parser.add_argument("sim", type=Path, nargs="?", help="a `sim fit` directory (rank only)")
    parser.add_argument(
        "--policy", type=Path, action="append", default=[], help="a `sim train` run directory"
    )
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per policy")
    args = parser.parse_args()
    if args.what == "world":
        run_world(args.world, args.policy, args.episodes, args.seed)
    elif args.sim is None:
        parser.error("rank needs the simulator directory: fidelity_rank.py rank WORLD SIM")
    else:
        rank(args.world, args.sim, args.policy, args.episodes, args.seed, args.verbose)


if __name__ == "__main__":
    main()

"""Rank a fitted simulator against the world's evaluation panel in seconds, for trying fits quickly.

    python scripts/fidelity_rank.py world WORLD [--policy RUN] [--episodes 256] [--seed 0]
    python scripts/fidelity_rank.py rank WORLD SIM [--policy RUN] [--episodes 256] [--seed 0] [-v]
    python scripts/fidelity_rank.py rank WORLD SIM --calibrate 4 [--deploy-episodes 64] [--save DIR]
    python scripts/fidelity_rank.py rank WORLD SIM SIM ...   # each, then the mean of their returns

``world`` runs the held-out evaluation panel in the world that made ``WORLD/logs`` exactly as
``transferlab sim fidelity`` does (2 x EPISODES episodes per policy from seed SEED + 2; a ``sim train``
policy added with --policy) and saves it as ``WORLD/world_panel_<episodes>_<seed>.npz`` (about 20
minutes at 256). ``rank`` runs the same panel in the simulator ``SIM`` (EPISODES episodes from seed
SEED, as ``sim fidelity``) and prints the "before calibration" Kendall tau and median relative
errors that ``sim fidelity`` would print, in about 20 seconds. ``--calibrate FITS`` also calibrates
the simulator as ``sim fidelity --calibration-fits FITS`` does (the calibration panel deployed in the
world for ``--deploy-episodes``, cached as ``WORLD/deployment_<episodes>_<seed>.json``; a few minutes a
fit) and prints the "after calibration" figures the same way (``--save DIR`` keeps that simulator).
A probe for choosing what to fit, not a
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
from transferlab.simulator.policies import Policy, evaluation_panel
from transferlab.simulator.vocabulary import DAY_KEYS

ERRORS = ("orders", "gmv", "profit")


def deployment(world: Path, sim: LearnedSimulator, episodes: int, seed: int) -> dict[str, dict[str, float]]:
    """Each calibration-panel policy's per-episode outcomes in the world, as ``sim fidelity`` deploys them
    (cached: the world's figures do not depend on the simulator)."""
    import json

    from transferlab.platform.io import atomic_write_json
    from transferlab.simulator.calibration import deployment_outcomes
    from transferlab.simulator.policies import policy_panel

    path = world / f"deployment_{episodes}_{seed}.json"
    if path.is_file():
        return dict(json.loads(path.read_text()))
    logs = read_logs(world / "logs")
    per_policy = deployment_outcomes(
        sim, logs.manifest, policy_panel(), episodes=episodes, seed=seed + 1000
    ).per_policy
    atomic_write_json(path, per_policy)
    return per_policy


def calibrated(
    world: Path,
    sim: LearnedSimulator,
    fits: int,
    deploy_episodes: int,
    seed: int,
    calibration_episodes: int = 48,
) -> LearnedSimulator:
    """``sim`` calibrated on the deployment as ``sim fidelity --calibration-fits FITS
    --calibration-episodes N`` calibrates it."""
    from transferlab.simulator.policies import policy_panel
    from transferlab.simulator.policy_calibration import calibrate_policies

    n_customers = int(read_logs(world / "logs").manifest["world"]["n_customers"])
    return calibrate_policies(
        sim,
        deployment(world, sim, deploy_episodes, seed),
        policy_panel(),
        n_customers=n_customers,
        seed=seed + 2000,
        fits=fits,
        episodes=calibration_episodes,
        progress=lambda msg: print(msg, flush=True),
    )


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


def load_sim(sim_dir: Path, world: Path, episodes: int, seed: int) -> LearnedSimulator:
    """The simulator at ``sim_dir``, once the world panel it is ranked against is known to exist."""
    from transferlab.simulator.learned.simulator import SimulatorError

    world_cache(world, episodes, seed)
    try:
        return LearnedSimulator.load(sim_dir)
    except SimulatorError as exc:
        sys.exit(str(exc))


def world_cache(world: Path, episodes: int, seed: int) -> Path:
    """The cached world panel, or exit saying how to make it."""
    cache = cache_path(world, episodes, seed)
    if not cache.is_file():
        sys.exit(
            f"{cache} does not exist: run `python scripts/fidelity_rank.py world {world} "
            f"--episodes {episodes} --seed {seed}` (with the same --policy) first"
        )
    return cache


def report(
    world: Path,
    sim: LearnedSimulator,
    policies: list[Path],
    episodes: int,
    seed: int,
    verbose: bool,
    label: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Print ``sim``'s Kendall tau and median relative errors against the cached world panel; return
    the world's and the simulator's mean return per policy."""
    saved = np.load(world_cache(world, episodes, seed))
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
    print(f"Kendall tau ({label}) {stats.kendalltau(sim_value, world_value)[0]:.3f}")
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
    return world_value, sim_value


def rank_average(
    world: Path, sims: list[Path], policies: list[Path], episodes: int, seed: int, verbose: bool
) -> None:
    """Rank each simulator, then the mean of their returns per policy (a bagged simulator)."""
    values = []
    for path in sims:
        print(path)
        world_value, sim_value = report(
            world,
            load_sim(path, world, episodes, seed),
            policies,
            episodes,
            seed,
            verbose,
            "before calibration",
        )
        values.append(sim_value)
    tau = stats.kendalltau(np.mean(values, axis=0), world_value)[0]
    print(f"Kendall tau (mean of {len(sims)} simulators' returns, before calibration) {tau:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("world", "rank"))
    parser.add_argument("world", type=Path, help="directory holding logs/ (and the cached world panel)")
    parser.add_argument(
        "sim",
        type=Path,
        nargs="*",
        help="`sim fit` directories (rank only); with several, also the tau of their mean returns",
    )
    parser.add_argument(
        "--policy", type=Path, action="append", default=[], help="a `sim train` run directory"
    )
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per policy")
    parser.add_argument(
        "--calibrate", type=int, default=0, metavar="FITS", help="also rank after calibration"
    )
    parser.add_argument("--deploy-episodes", type=int, default=64, help="calibration deployment episodes")
    parser.add_argument(
        "--calibration-episodes",
        type=int,
        default=48,
        help="simulated episodes per policy per fit evaluation",
    )
    parser.add_argument("--save", type=Path, help="with --calibrate: write the calibrated simulator here")
    args = parser.parse_args()
    if args.what == "world":
        run_world(args.world, args.policy, args.episodes, args.seed)
    elif not args.sim:
        parser.error("rank needs the simulator directory: fidelity_rank.py rank WORLD SIM")
    elif len(args.sim) > 1:
        if args.calibrate or args.save:
            parser.error("--calibrate and --save take one simulator")
        rank_average(args.world, args.sim, args.policy, args.episodes, args.seed, args.verbose)
    else:
        if (
            args.save is not None
            and args.save.exists()
            and (not args.save.is_dir() or any(args.save.iterdir()))
        ):
            sys.exit(f"--save {args.save} already exists and is not empty: choose a new directory")
        sim = load_sim(args.sim[0], args.world, args.episodes, args.seed)
        report(args.world, sim, args.policy, args.episodes, args.seed, args.verbose, "before calibration")
        if args.calibrate:
            after = calibrated(
                args.world, sim, args.calibrate, args.deploy_episodes, args.seed, args.calibration_episodes
            )
            print("shifts", after.report["calibration"][-1]["shifts"])
            label = "after calibration"
            report(args.world, after, args.policy, args.episodes, args.seed, args.verbose, label)
            if args.save:
                after.save(args.save)


if __name__ == "__main__":
    main()

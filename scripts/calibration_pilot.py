"""Pilot (not a result): how much a policy-level calibration's held-out tau depends on the fit's seed and
on the deployment's breadth, without re-running the world's evaluation panel.

It reads the world's per-policy values of the evaluation panel from a finished ``sim fidelity``
report (``report.md``: its ranking table), deploys the calibration panel (optionally with eight
probing policies, none in the evaluation panel) in the world, calibrates with
:func:`~transferlab.simulator.policy_calibration.calibrate_policies` and prints the held-out Kendall tau
of the calibrated simulator (256 episodes per policy)::

    python scripts/calibration_pilot.py WORLD --report WORLD/fidpol/report.md --fit-seed 2000 [--probes]
    python scripts/calibration_pilot.py WORLD --report REPORT --fit-seed 2000,3000,4000,5000   # averaged

Several comma-separated fit seeds fit once each on the same deployment (the one a user has) and score
every fit and the simulator moved by the mean of their shifts (averaging the fit's own noise away).

``WORLD`` holds ``logs/``, ``sim/`` and optionally ``runs/ppo`` (added to the evaluation panel as
``trained:ppo`` when the report has it).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from transferlab.simulator.cli import _trained_policy
from transferlab.simulator.fidelity import evaluate_panel, world_factory
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import read_logs
from transferlab.simulator.policies import Policy, Schedule, evaluation_panel, policy_panel
from transferlab.simulator.policy_calibration import (
    RESPONSE_SHIFTS,
    calibrate_policies,
    shifted_params,
    simulated_policies,
)
from transferlab.simulator.vocabulary import DAY_KEYS, CampaignAction


def probes() -> dict[str, Policy]:
    """Eight deployments that vary segment, discount depth and push frequency where the panel is thin."""

    def sched(every: int, d: float, seg: str, budget: float = 20.0, hour: int = 20) -> Schedule:
        return Schedule(every, CampaignAction(d, hour, seg, budget))

    return {
        "every2_premium_10": sched(2, 0.1, "premium"),
        "weekly_premium_5_noon": sched(7, 0.05, "premium", hour=13),
        "every3_all_push": sched(3, 0.0, "all"),
        "daily_all_5": sched(1, 0.05, "all"),
        "every2_all_10_big": sched(2, 0.1, "all", 60.0),
        "weekly_casual_10": sched(7, 0.1, "casual"),
        "every4_loyal_20_noon": sched(4, 0.2, "loyal", hour=13),
        "every5_bargain_20_big": sched(5, 0.2, "bargain", 60.0),
    }


def world_values(report: Path, names: list[str]) -> dict[str, float]:
    """The world's value per policy from a fidelity report's ranking table (the first table naming it)."""
    out: dict[str, float] = {}
    for line in report.read_text().splitlines():
        m = re.match(r"\| (\S+) \| ([\d.]+) \| [\d.]+ \| [\d.]+ \| ", line)
        if m and m.group(1) in names and m.group(1) not in out:
            out[m.group(1)] = float(m.group(2))
    missing = sorted(set(names) - set(out))
    if missing:
        raise SystemExit(f"{report} has no world value for {missing}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("world", type=Path)
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--fit-seed", default="2000", help="one seed, or several comma-separated to average")
    ap.add_argument("--deploy-episodes", type=int, default=64)
    ap.add_argument("--probes", action="store_true")
    ap.add_argument("--fit-episodes", type=int, default=48, help="simulated episodes per policy per fit step")
    args = ap.parse_args()
    logs = read_logs(args.world / "logs")
    sim = LearnedSimulator.load(args.world / "sim")
    n_customers = int(logs.manifest["world"]["n_customers"])
    panel = {**policy_panel(), **(probes() if args.probes else {})}
    ev = evaluation_panel()
    if "trained:ppo" in args.report.read_text() and (args.world / "runs/ppo").exists():
        ev["trained:ppo"] = _trained_policy(args.world / "runs/ppo")
    truth = world_values(args.report, list(ev))
    seeds = [int(x) for x in str(args.fit_seed).split(",")]
    world = deployment(logs.manifest, panel, args.deploy_episodes, 1000)
    thetas = []
    for fit_seed in seeds:
        fixed = calibrate_policies(
            sim,
            world,
            panel,
            n_customers=n_customers,
            episodes=args.fit_episodes,
            seed=fit_seed,
            progress=print,
        )
        shifts = fixed.report["calibration"][-1]["shifts"]
        print("shifts", fit_seed, shifts)
        thetas.append(np.array([shifts[k] for k in RESPONSE_SHIFTS]))
        score(f"fit seed {fit_seed}", fixed, ev, truth, n_customers)
    if len(seeds) > 1:
        mean_theta = np.mean(thetas, axis=0)
        print(
            "mean shifts", {k: round(float(v), 4) for k, v in zip(RESPONSE_SHIFTS, mean_theta, strict=True)}
        )
        averaged = LearnedSimulator(sim.config, shifted_params(sim.params, mean_theta), sim.report)
        score(f"mean of {len(seeds)} fits", averaged, ev, truth, n_customers)


def deployment(
    manifest: dict[str, Any], panel: dict[str, Policy], episodes: int, seed: int
) -> dict[str, dict[str, float]]:
    """Each panel policy's per-episode return (and its standard error), orders, complaints in the world."""
    deployed = evaluate_panel(world_factory(manifest), panel, episodes=episodes, seed=seed)
    world = {}
    for name in panel:
        ret = deployed.returns[name]
        out = deployed.outcomes[name]
        world[name] = {
            "return": float(ret.mean()),
            "return_se": float(ret.std(ddof=1) / np.sqrt(len(ret))),
            "orders": float(out[DAY_KEYS.index("orders")]),
            "complaints": float(out[DAY_KEYS.index("complaints")]),
        }
    return world


def score(label: str, sim: LearnedSimulator, ev: dict[str, Policy], truth: dict[str, float], n: int) -> None:
    """Print the held-out Kendall tau and median relative error of ``sim`` against the world's values."""
    got = simulated_policies(sim, ev, n_customers=n, episodes=256, seed=0)
    s = np.array([got[name]["return"] for name in ev])
    w = np.array([truth[name] for name in ev])
    tau, err = stats.kendalltau(s, w)[0], np.median(np.abs(s / w - 1))
    print(f"{label}: held-out tau {tau:.3f}, median |relative error| {err:.3f}", flush=True)


if __name__ == "__main__":
    main()

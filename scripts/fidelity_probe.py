"""Where the learned simulator's ranking goes wrong before calibration: each policy's outcomes and its
lift over no campaign, in the world and in the simulator, on the same seeds.

    python scripts/fidelity_probe.py WORLD [--episodes 32] [--seed 5]

WORLD holds ``logs/`` (``sim generate-logs``) and ``sim/`` (``sim fit``). Prints, per policy, orders
and return per episode in both markets and the lift of each over ``none``. A diagnosis, not a result:
one seed, no interval (each return's standard error over episodes is printed to judge by).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from transferlab.simulator.fidelity import PanelResult, evaluate_panel, world_factory
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import read_logs
from transferlab.simulator.policies import NoCampaign, Policy, evaluation_panel
from transferlab.simulator.vocabulary import DAY_KEYS

PROBED = (
    "every2_all_5",
    "every4_all_10",
    "every2_bargain_5",
    "every2_loyal_5",
    "every5_premium_10",
    "every2_all_push",
)
"""Evaluation-panel policies that span the misrankings: offers to everyone, to one segment, push only."""


def probe_panel() -> dict[str, Policy]:
    """No campaign first (the reference of every lift), then :data:`PROBED`."""
    panel = evaluation_panel()
    return {"none": NoCampaign(), **{name: panel[name] for name in PROBED}}


def lift_rows(world: PanelResult, sim: PanelResult, names: list[str]) -> list[dict[str, float | str]]:
    """Per policy: orders and return in both markets, and each one's lift over the first policy."""
    orders = DAY_KEYS.index("orders")
    ref = names[0]
    rows: list[dict[str, float | str]] = []
    for name in names:
        row: dict[str, float | str] = {"policy": name}
        for label, res in (("world", world), ("sim", sim)):
            row[f"{label}_orders"] = float(res.outcomes[name][orders])
            row[f"{label}_return"] = float(np.mean(res.returns[name]))
            row[f"{label}_return_se"] = float(
                np.std(res.returns[name], ddof=1) / np.sqrt(len(res.returns[name]))
            )
            row[f"{label}_lift_orders"] = row[f"{label}_orders"] - float(res.outcomes[ref][orders])
            row[f"{label}_lift_return"] = row[f"{label}_return"] - float(np.mean(res.returns[ref]))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("world", type=Path, help="A folder with logs/ and sim/.")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    logs = read_logs(args.world / "logs")
    sim = LearnedSimulator.load(args.world / "sim")
    n = int(logs.manifest["world"]["n_customers"])
    panel = probe_panel()
    world = evaluate_panel(world_factory(logs.manifest), panel, episodes=args.episodes, seed=args.seed)
    simulated = evaluate_panel(
        lambda k, s: sim.market(n_envs=k, n_customers=n, seed=s),
        panel,
        episodes=args.episodes,
        seed=args.seed,
    )
    head = "policy | world orders (lift) | sim orders (lift) | world return (lift) | sim return (lift)"
    print(head)
    for r in lift_rows(world, simulated, list(panel)):
        print(
            f"{r['policy']} | {r['world_orders']:.1f} ({r['world_lift_orders']:+.1f}) | "
            f"{r['sim_orders']:.1f} ({r['sim_lift_orders']:+.1f}) | {r['world_return']:.2f} "
            f"± {r['world_return_se']:.2f} ({r['world_lift_return']:+.2f}) | {r['sim_return']:.2f} "
            f"± {r['sim_return_se']:.2f} ({r['sim_lift_return']:+.2f})"
        )


if __name__ == "__main__":
    main()

"""The fidelity report: a learned simulator against the world, before and after calibration.

``transferlab sim fidelity --simulator SIM --logs LOGS --out DIR`` runs :func:`run_fidelity`:

1. the policy panel (12 policies) in the world that made the logs, continuing after the logged
   history, and in the simulator: rank agreement (Kendall tau), outcome errors per policy (held-out
   actions flagged), distribution distances;
2. a *deployment*: the panel's policies run in the world again (other futures), and their campaigns'
   results come back, as from a deployment to the real market, and :func:`calibrate` updates the
   simulator with them;
3. the same comparison with the calibrated simulator.

It writes ``report.md`` / ``report.html`` with the plots, ``fidelity.json``, and the calibrated
simulator under ``calibrated_sim/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transferlab.platform.io import atomic_write_json
from transferlab.platform.reports import Report
from transferlab.simulator.calibration import calibrate, deployment_outcomes
from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.fidelity import ERROR_KEYS, Fidelity, evaluate_panel, fidelity, world_factory
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import Logs
from transferlab.simulator.market import CATALOG
from transferlab.simulator.policies import policy_panel


def _scatter(before: Fidelity, after: Fidelity) -> Figure:
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for fid, label, marker in ((before, "before calibration", "o"), (after, "after calibration", "^")):
        ax.scatter(fid.table["world_value"], fid.table["sim_value"], label=label, marker=marker, alpha=0.8)
    lo = float(min(before.table[["world_value", "sim_value"]].min().min(), after.table["sim_value"].min()))
    hi = float(max(before.table[["world_value", "sim_value"]].max().max(), after.table["sim_value"].max()))
    ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1, label="simulator = world")
    ax.set_xlabel("value in the world (mean episode return)")
    ax.set_ylabel("value in the learned simulator")
    ax.legend()
    fig.tight_layout()
    return fig


def _headline(fid: Fidelity) -> dict[str, Any]:
    s = fid.summary()
    return {
        "kendall_tau": round(s["kendall_tau"], 3),
        "kendall_p": round(s["kendall_p"], 4),
        **{f"median |err| {k}": round(v, 3) for k, v in s["median_abs_rel_error"].items()},
        **{
            f"held-out median |err| {k}": v if v is None else round(v, 3)
            for k, v in s["held_out_median_abs_rel_error"].items()
        },
        **{f"W1/sd {k}": round(v, 3) for k, v in s["distances"].items()},
    }


def run_fidelity(
    sim: LearnedSimulator,
    logs: Logs,
    out: str | Path,
    *,
    episodes: int = 16,
    deploy_episodes: int = 8,
    seed: int = 0,
    episode: EpisodeConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Compare, calibrate, compare again; write the report into ``out``; returns the summary."""
    say = progress or (lambda _msg: None)
    out = Path(out)
    panel = policy_panel()
    n_customers = int(logs.manifest["world"]["n_customers"])
    counts = np.bincount(logs.campaigns["action_index"].to_numpy(), minlength=len(CATALOG))
    world_markets = world_factory(logs.manifest)
    say(f"the panel ({len(panel)} policies x {episodes} episodes) in the world")
    world = evaluate_panel(world_markets, panel, episodes=episodes, seed=seed + 1, episode=episode)

    def in_sim(s: LearnedSimulator) -> Fidelity:
        factory = lambda n, k: s.market(n_envs=n, n_customers=n_customers, seed=k)  # noqa: E731
        return fidelity(
            factory,
            world_markets,
            episodes=episodes,
            seed=seed,
            action_counts=counts,
            panel=panel,
            episode=episode,
            world_result=world,
        )

    say("the panel in the learned simulator")
    before = in_sim(sim)
    say(f"deployment: the panel in the world again ({deploy_episodes} episodes each), results come back")
    deployed = deployment_outcomes(
        sim, logs.manifest, panel, episodes=deploy_episodes, seed=seed + 1000, episode=episode
    )
    calibrated = calibrate(sim, deployed.observed, deployed.predicted, totals=deployed.totals, seed=seed)
    say("the panel in the calibrated simulator")
    after = in_sim(calibrated)
    summary = {
        "episodes": episodes,
        "deploy_episodes": deploy_episodes,
        "calibration_campaigns": len(deployed.observed),
        "calibration_level_shift": calibrated.report["calibration"][-1]["level_shift"],
        "before": before.summary(),
        "after": after.summary(),
    }
    _write_report(out, before, after, summary, calibrated)
    calibrated.save(out / "calibrated_sim")
    atomic_write_json(out / "fidelity.json", summary)
    return summary


def _write_report(
    out: Path, before: Fidelity, after: Fidelity, summary: dict[str, Any], calibrated: LearnedSimulator
) -> None:
    report = Report("Learned simulator vs the world: fidelity before and after calibration")
    report.paragraph(
        f"{summary['before']['policies']} policies, {summary['episodes']} episodes each (30 decision "
        "days, delayed effects settled), in the world continuing after the logged history and in the "
        "simulator fitted on those logs. Calibration used the matured results of "
        f"{summary['calibration_campaigns']} campaigns from a deployment of the same policies in the world "
        "(other futures than the evaluation's)."
    )
    report.heading("Headline")
    rows = [{"": "before", **_headline(before)}, {"": "after", **_headline(after)}]
    report.table(rows)
    report.heading("Do the two markets rank the policies alike?")
    report.figure(_scatter(before, after), "sim_vs_world", "Each point is one policy.")
    table = before.table[
        ["policy", "world_value", "world_ci_low", "world_ci_high", "logged_share", "held_out"]
    ].copy()
    table["sim_before"] = before.table["sim_value"]
    table["sim_after"] = after.table["sim_value"]
    table["rank_world"] = before.table["world_rank"]
    table["rank_before"] = before.table["sim_rank"]
    table["rank_after"] = after.table["sim_rank"]
    report.table(table, floatfmt=".3f")
    report.heading("Outcome errors per policy (simulator minus world, relative)")
    errs = before.table[["policy", *(f"err_{k}" for k in ERROR_KEYS)]].copy()
    for k in ERROR_KEYS:
        errs[f"after_{k}"] = after.table[f"err_{k}"]
    report.table(errs, floatfmt=".3f")
    last = calibrated.report["calibration"][-1]
    top = sorted(last["shifts"].items(), key=lambda kv: -abs(kv[1]))[:10]
    report.heading("Calibration")
    report.paragraph(
        f"Shop totals: every purchase's log-odds moved by {last['level_shift']:+.3f} (the world's "
        "total orders over the simulator's, from the deployment). Campaigns: "
        f"{last['campaigns']} campaigns over {last['actions']} catalog actions; mean |shift| of the "
        f"offer log-odds over all actions {last['mean_abs_shift_all_actions']:.3f}. Largest shifts:"
    )
    report.table([{"action": a, "shift": v} for a, v in top])
    report.write(out)

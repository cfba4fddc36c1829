"""The fidelity report: a learned simulator against the world, before and after calibration.

``transferlab sim fidelity --simulator SIM --logs LOGS --out DIR`` runs :func:`run_fidelity`:

1. two disjoint panels: the *calibration* panel (:func:`policy_panel`, 12 policies) and the
   *evaluation* panel (:func:`evaluation_panel`, 21 others), each in the world that made the logs,
   continuing after the logged history, and in the simulator: rank agreement (Kendall tau, with a
   bootstrap interval), outcome errors per policy (held-out actions flagged), distribution distances.
   The evaluation panel runs twice as many world episodes, on other futures, so that two halves of
   them give the world's own split-half tau: the noise ceiling;
2. a *deployment*: the calibration panel's policies run in the world again (other futures), and their
   policies' results come back, as from a deployment to the real market, and calibrate the simulator
   (:func:`~transferlab.simulator.policy_calibration.calibrate_policies` fits its structural shifts to
   each policy's return, orders and complaints; ``method="campaigns"`` shifts each action's offer by
   its campaigns' orders instead);
3. the same comparisons with the calibrated simulator. The evaluation panel's figures are the
   out-of-sample ones; the calibration panel's "after" figures are in-sample and labelled so.

It writes ``report.md`` / ``report.html`` with the plots, ``result.json`` (also as ``fidelity.json``)
with the command that made it, and the calibrated simulator under ``calibrated_sim/``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transferlab.platform.io import atomic_write_json
from transferlab.platform.provenance import provenance
from transferlab.platform.reports import Report
from transferlab.simulator.calibration import (
    OFFER_SHRINKAGE,
    calibrate,
    calibrate_economics,
    deployment_outcomes,
)
from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.fidelity import (
    ERROR_KEYS,
    Fidelity,
    evaluate_panel,
    fidelity,
    noise_ceiling,
    ranking_agreement,
    world_factory,
)
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import Logs
from transferlab.simulator.policies import Policy, evaluation_panel, policy_panel
from transferlab.simulator.policy_calibration import calibrate_policies
from transferlab.simulator.vocabulary import CATALOG

CALIBRATION_METHODS = ("policies", "campaigns")
"""How ``sim fidelity`` calibrates: on each deployed policy's outcomes, or on each campaign's orders."""


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


def _headline(s: Mapping[str, Any]) -> dict[str, Any]:
    """The headline columns of one :meth:`Fidelity.summary`."""
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


def check_disjoint(calibration: Mapping[str, Policy], evaluation: Mapping[str, Policy]) -> None:
    """Refuse panels that share a policy (by name or by definition): the score would be in-sample."""
    shared = sorted(set(calibration) & set(evaluation))
    shared += sorted(
        f"{e} = {c}" for e, pe in evaluation.items() for c, pc in calibration.items() if pe == pc and e != c
    )
    if shared:
        raise ValueError(
            f"the calibration and evaluation panels share {', '.join(shared)}: fidelity must be scored "
            "on policies the calibration never saw; drop them from one panel"
        )


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
    calibration: Mapping[str, Policy] | None = None,
    evaluation: Mapping[str, Policy] | None = None,
    command: str = "transferlab sim fidelity",
    offer_shrinkage: float | None = None,
    method: str = "policies",
    fits: int = 1,
    calibration_episodes: int = 48,
) -> dict[str, Any]:
    """Compare, calibrate on one panel, compare again on both; write the report into ``out``; returns
    the summary (the evaluation panel's figures are the out-of-sample ones).

    ``offer_shrinkage`` (None = ``calibration.OFFER_SHRINKAGE``) is the pseudo-count of campaigns the
    simulator's own offer response is worth against each action's deployed campaigns
    (:func:`calibration.offer_shifts`); ``inf`` leaves the per-action response as fitted and
    calibrates only the shop-wide level and economics.

    ``method``: ``policies`` (default) fits the simulator's structural shifts to each deployed policy's
    return, orders and complaints (:func:`~transferlab.simulator.policy_calibration.calibrate_policies`);
    ``campaigns`` shifts each action's offer by its campaigns' orders, then matches the shop's GMV and
    profit (:func:`calibrate`, :func:`calibrate_economics`; ``offer_shrinkage`` applies to it).
    ``fits`` (``policies`` only): independent fits whose shifts are averaged; ``calibration_episodes``
    (``policies`` only): simulated episodes per policy at each evaluation of a fit (fewer are faster and
    noisier; the tests use fewer)."""
    started = time.perf_counter()
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"calibration method {method!r} is not one of {CALIBRATION_METHODS}")
    if fits != 1 and method != "policies":
        raise ValueError(f"fits={fits} applies to the 'policies' calibration only, not {method!r}")
    say = progress or (lambda _msg: None)
    out = Path(out)
    shrinkage = OFFER_SHRINKAGE if offer_shrinkage is None else offer_shrinkage
    cal_panel = dict(calibration or policy_panel())
    eval_panel = dict(evaluation or evaluation_panel())
    check_disjoint(cal_panel, eval_panel)
    n_customers = int(logs.manifest["world"]["n_customers"])
    counts = np.bincount(logs.campaigns["action_index"].to_numpy(), minlength=len(CATALOG))
    world_markets = world_factory(logs.manifest)
    say(f"the evaluation panel ({len(eval_panel)} policies x {2 * episodes} episodes) in the world")
    world_eval = evaluate_panel(
        world_markets, eval_panel, episodes=2 * episodes, seed=seed + 2, episode=episode
    )
    say(f"the calibration panel ({len(cal_panel)} policies x {episodes} episodes) in the world")
    world_cal = evaluate_panel(world_markets, cal_panel, episodes=episodes, seed=seed + 1, episode=episode)

    def in_sim(s: LearnedSimulator, panel: dict[str, Policy], world: Any) -> Fidelity:
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

    say("both panels in the learned simulator")
    before, before_cal = in_sim(sim, eval_panel, world_eval), in_sim(sim, cal_panel, world_cal)
    say(f"deployment: the calibration panel in the world again ({deploy_episodes} episodes each)")
    deployed = deployment_outcomes(
        sim, logs.manifest, cal_panel, episodes=deploy_episodes, seed=seed + 1000, episode=episode
    )
    if method == "policies":
        say("calibrating on each deployed policy's return, orders and complaints")
        calibrated = calibrate_policies(
            sim,
            deployed.per_policy,
            cal_panel,
            n_customers=n_customers,
            seed=seed + 2000,
            episode=episode,
            fits=fits,
            episodes=calibration_episodes,
            progress=say,
        )
    else:
        calibrated = calibrate(
            sim,
            deployed.observed,
            deployed.predicted,
            totals=deployed.totals,
            shrinkage=shrinkage,
            seed=seed,
        )
        say("calibrating the economics: GMV and profit per episode of the same deployment")
        calibrated = calibrate_economics(
            calibrated,
            deployed.world_per_episode,
            cal_panel,
            n_customers=n_customers,
            episodes=deploy_episodes,
            seed=seed + 2000,
            episode=episode,
        )
    say("both panels in the calibrated simulator")
    after, after_cal = in_sim(calibrated, eval_panel, world_eval), in_sim(calibrated, cal_panel, world_cal)
    tau_before, ci_before = ranking_agreement(before.sim, world_eval, seed=seed)
    tau_after, ci_after = ranking_agreement(after.sim, world_eval, seed=seed)
    ceiling, ceiling_ci = noise_ceiling(world_eval, seed=seed)
    summary = {
        "experiment": "simulator-fidelity",
        "command": command,
        "tau_before": tau_before,
        "tau_after": tau_after,
        "tau_ceiling": ceiling,
        "tau_ceiling_ci": ceiling_ci,
        "tau_ci": {"before": ci_before, "after": ci_after},
        "profit_error_before": before.summary()["median_abs_rel_error"]["profit"],
        "profit_error_after": after.summary()["median_abs_rel_error"]["profit"],
        "panels": {"calibration": list(cal_panel), "evaluation": list(eval_panel)},
        "episodes": episodes,
        "world_episodes_evaluation": 2 * episodes,
        "deploy_episodes": deploy_episodes,
        "calibration_campaigns": len(deployed.observed),
        "offer_shrinkage": shrinkage if math.isfinite(shrinkage) else "inf",
        "calibration_method": method,
        "calibration_fits": fits,
        "calibration_episodes": calibration_episodes,
        **_calibration_figures(calibrated.report["calibration"][-1]),
        "before": before.summary(),
        "after": after.summary(),
        "in_sample": {"before": before_cal.summary(), "after": after_cal.summary()},
    }
    _write_report(out, before, after, summary, calibrated)
    calibrated.save(out / "calibrated_sim")
    atomic_write_json(out / "fidelity.json", summary)
    summary["provenance"] = provenance(str(summary["command"]), time.perf_counter() - started)
    atomic_write_json(out / "result.json", summary)
    return summary


def _calibration_figures(last: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's calibration figures from the calibrated simulator's last calibration round."""
    if last.get("method") == "policies":
        shifts = last["shifts"]
        return {
            "calibration_level_shift": shifts["level"],
            "calibration_spend_shift": shifts["spend"],
            "calibration_cost_factor": round(math.exp(shifts["cost"]), 4),
            "calibration_shifts": shifts,
        }
    return {
        "calibration_level_shift": last["level_shift"],
        "calibration_spend_shift": last["spend_shift"],
        "calibration_cost_factor": last["cost_factor"],
    }


def _write_report(
    out: Path, before: Fidelity, after: Fidelity, summary: dict[str, Any], calibrated: LearnedSimulator
) -> None:
    report = Report("Learned simulator vs the world: fidelity before and after calibration")
    report.paragraph(
        f"Scored out of sample: {summary['before']['policies']} evaluation policies, "
        f"{summary['world_episodes_evaluation']} world episodes and {summary['episodes']} simulator "
        "episodes each (30 decision days, delayed effects settled), in the world continuing after the "
        "logged history and in the simulator fitted on those logs. Calibration "
        f"({summary['calibration_method']}) used a deployment of the "
        f"{len(summary['panels']['calibration'])} calibration-panel policies ({summary['deploy_episodes']} "
        f"world episodes each, {summary['calibration_campaigns']} campaigns matured), none of which is in "
        "the evaluation panel (and on other futures)."
    )
    ci_b, ci_a = summary["tau_ci"]["before"], summary["tau_ci"]["after"]
    lo, hi = summary["tau_ceiling_ci"]
    report.paragraph(
        f"Kendall tau, simulator vs world, on the evaluation panel: before calibration "
        f"{summary['tau_before']:.3f} [{ci_b[0]:.3f}, {ci_b[1]:.3f}], after {summary['tau_after']:.3f} "
        f"[{ci_a[0]:.3f}, {ci_a[1]:.3f}]. The world against itself (two halves of its episodes): "
        f"{summary['tau_ceiling']:.3f} [{lo:.3f}, {hi:.3f}], the noise ceiling. Median relative error of "
        f"profit per episode: {summary['profit_error_before']:.1%} before, "
        f"{summary['profit_error_after']:.1%} after. 95% bootstrap intervals over episodes."
    )
    report.heading("Headline")
    ins = summary["in_sample"]
    rows = [
        {"": "evaluation panel, before", **_headline(summary["before"])},
        {"": "evaluation panel, after", **_headline(summary["after"])},
        {"": "calibration panel, before (in-sample)", **_headline(ins["before"])},
        {"": "calibration panel, after (in-sample)", **_headline(ins["after"])},
    ]
    report.table(rows)
    report.code(summary["command"])
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
    report.heading("Calibration")
    if last.get("method") == "policies":
        report.paragraph(
            f"Fitted to the deployment of the {last['policies']} calibration-panel policies: each one's "
            "return, orders and complaints per episode (damped Gauss-Newton with a ridge; "
            + ("the first fit's " if "fits" in last else "")
            + f"cost by iteration {', '.join(f'{c:.0f}' for c in last['costs'])}). The structural shifts"
            + (
                f", the mean of {len(last['fits'])} fits on other simulation seeds (each below):"
                if "fits" in last
                else ":"
            )
        )
        shift_rows: list[dict[str, Any]] = [{"shift": k, "value": v} for k, v in last["shifts"].items()]
        for f in last.get("fits", []):
            for row in shift_rows:
                row[f"fit seed {f['seed']}"] = f["shifts"][row["shift"]]
        report.table(shift_rows)
    else:
        top = sorted(last["shifts"].items(), key=lambda kv: -abs(kv[1]))[:10]
        report.paragraph(
            f"Shop totals: every purchase's log-odds moved by {last['level_shift']:+.3f} (the world's "
            "total orders over the simulator's, from the deployment). Campaigns: "
            f"{last['campaigns']} campaigns over {last['actions']} catalog actions; mean |shift| of the "
            f"offer log-odds over all actions {last['mean_abs_shift_all_actions']:.3f}. Largest shifts:"
        )
        report.table([{"action": a, "shift": v} for a, v in top])
    report.write(out)

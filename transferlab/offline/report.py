"""Reports of offline evaluations: world, simulator and OPE side by side, with coverage and plots."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from transferlab.offline.evaluate import BANDIT_ESTIMATORS, OPE_ESTIMATORS, OfflineEvaluation
from transferlab.platform.reports import Report, ReportPaths
from transferlab.platform.stats import Interval


def values_table(ev: OfflineEvaluation) -> list[dict[str, Any]]:
    """One row per policy: world (truth), world with settlement, simulator, the behaviour's log value."""
    rows = []
    for r in ev.rows:
        rows.append(
            {
                "policy": r.name,
                "world (truth)": r.world,
                "world, +settle days": r.world_settled,
                "simulator": r.sim,
                "FQE world value (discounted)": r.world_discounted,
            }
        )
    return rows


def ope_table(ev: OfflineEvaluation) -> list[dict[str, Any]]:
    """One row per learned policy: each OPE estimate with its interval and relative error."""
    rows = []
    for r in ev.rows:
        if r.ope is None:
            continue
        row: dict[str, Any] = {"policy": r.name, "world": r.world.estimate}
        for name in OPE_ESTIMATORS:
            row[name] = r.ope.estimates.get(name)
            row[f"{name} err"] = r.ope_error(name)
        rows.append(row)
    return rows


def coverage_table(ev: OfflineEvaluation) -> list[dict[str, Any]]:
    """Coverage diagnostics per learned policy and the verdict."""
    rows = []
    for r in ev.rows:
        if r.ope is None:
            continue
        c = r.ope.coverage
        rows.append(
            {
                "policy": r.name,
                "ESS": c.ess,
                "ESS share": c.ess_share,
                "max weight": c.max_weight,
                "unsupported mass": c.unsupported_mass,
                "trusted": "yes" if c.trustworthy else "NO",
                "why not": c.reason or "",
            }
        )
    return rows


def selection_table(ev: OfflineEvaluation) -> list[dict[str, Any]]:
    """One row per OPE candidate: its OPE gain over the behaviour policy, its world gain, the verdict."""
    s = ev.selection
    behaviour = ev.row(ev.behaviour).world.estimate
    rows = []
    for r in ev.rows:
        if r.ope is None or s.by not in r.ope.gains:
            continue
        rows.append(
            {
                "candidate": r.name,
                f"{s.by} gain over {ev.behaviour}": r.ope.gains[s.by],
                "world gain (truth)": r.world.estimate - behaviour,
                "supported": "yes" if r.ope.trusted else "NO",
                "chosen": "yes" if r.name == s.chosen else "",
            }
        )
    return rows


def add_evaluation(report: Report, ev: OfflineEvaluation, *, name: str = "values") -> Report:
    """Append the evaluation's tables, selection and figure to ``report``."""
    cfg = ev.config
    report.paragraph(
        f"Values are {cfg.episode.horizon}-day returns in reward units (profit minus $10 per complaint, "
        f"x0.01). World: {cfg.episodes}+ episodes started from the logged months' first days "
        "(the counterfactual OPE estimates). FQE estimates the discounted return "
        f"(gamma {cfg.fqe_gamma}) and is compared with the world's discounted value. Bandit estimators "
        f"use {ev.n_rows} logged days ({ev.n_episodes} episodes); {cfg.level:.0%} bootstrap intervals. "
        f"The behaviour policy's own return in the logs: {ev.logged_value.format('.2f')}."
    )
    report.table(values_table(ev), floatfmt=".2f", caption="Value of each policy")
    report.table(
        ope_table(ev), floatfmt=".2f", caption="Off-policy estimates and relative error vs the world"
    )
    report.table(coverage_table(ev), floatfmt=".3f", caption="Coverage of each learned policy on the logs")
    untrusted = [r for r in coverage_table(ev) if r["trusted"] == "NO"]
    if untrusted:
        report.bullets(f"UNTRUSTWORTHY {r['policy']}: {r['why not']}" for r in untrusted)
    s = ev.selection
    refused = ", ".join(f"{k} ({v.split(':')[0]})" for k, v in s.refused.items()) or "none"
    report.table(selection_table(ev), floatfmt=".2f", caption=f"Candidates: {s.by} gain over the behaviour")
    report.paragraph(
        f"Policy selection: {s.rule} ({s.by}, {cfg.level:.0%} intervals paired on the logged days). "
        f"Chosen: {s.chosen}"
        + (
            " (keep what the shop does now: no candidate's gain is above zero)"
            if s.chosen == ev.behaviour
            else ""
        )
        + f". Refused for lack of support: {refused}. Best in the world: {s.best_in_world}; regret of "
        f"the choice: {s.regret:.2f}."
    )
    report.figure(_values_figure(ev), name, "World value vs OPE estimates (95% intervals).")
    return report


def _values_figure(ev: OfflineEvaluation) -> Any:
    from matplotlib.figure import Figure

    learned = [r for r in ev.rows if r.ope is not None]
    series: list[tuple[str, list[Interval | None]]] = [("world", [r.world for r in learned])]
    for est in ("dm", "snips", "sndr"):
        series.append((est, [r.ope.estimates.get(est) if r.ope else None for r in learned]))
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    for j, (label, ivs) in enumerate(series):
        x = np.arange(len(learned)) + (j - (len(series) - 1) / 2) * width
        mid = np.array([iv.estimate if iv else np.nan for iv in ivs])
        lo = np.array([iv.estimate - iv.low if iv else 0.0 for iv in ivs])
        hi = np.array([iv.high - iv.estimate if iv else 0.0 for iv in ivs])
        ax.bar(x, mid, width, yerr=np.vstack([lo, hi]), capsize=3, label=label, alpha=0.85)
    behaviour = ev.row(ev.behaviour).world.estimate if ev.behaviour in [r.name for r in ev.rows] else None
    if behaviour is not None:
        ax.axhline(behaviour, color="0.3", linestyle="--", linewidth=1, label="behaviour in world")
    ax.set_xticks(np.arange(len(learned)), [r.name for r in learned])
    ax.set_ylabel(f"{ev.config.episode.horizon}-day return")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize="small")
    return fig


def write_report(
    ev: OfflineEvaluation,
    directory: str | os.PathLike[str],
    *,
    histories: Mapping[str, Mapping[str, list[float]]] | None = None,
    title: str = "Offline RL on campaign logs: world, simulator and OPE",
) -> ReportPaths:
    """``report.md`` / ``report.html`` with figures in ``directory``."""
    from transferlab.platform.reports import Curve, plot_curves

    report = Report(title)
    add_evaluation(report, ev)
    if histories:
        curves: dict[str, Curve] = {}
        for name, h in histories.items():
            if "offline/loss" in h and "offline/step" in h:
                curves[name] = Curve(np.asarray(h["offline/step"]), np.asarray(h["offline/loss"]))
        if curves:
            fig = plot_curves(curves, xlabel="gradient step", ylabel="d3rlpy loss (offline/loss)")
            report.figure(fig, "training", "Training loss of each learner.")
    report.paragraph(f"Bandit estimators: {', '.join(BANDIT_ESTIMATORS)}; FQE from d3rlpy.")
    return report.write(directory)


__all__ = [
    "add_evaluation",
    "coverage_table",
    "ope_table",
    "selection_table",
    "values_table",
    "write_report",
]

"""The offline RL comparison behind ``docs/results/offline_rl/``: every learner on the generated logs,
and how coverage (the marketer's exploration when the logs were made) limits what offline RL and OPE
can do.

1. **Comparison**: logs from ``shops`` worlds (``days`` each) under the marketer (``epsilon``); every
   learner trained on them; each judged in the world, in a simulator learned from the logs, and by
   OPE with coverage; policy selection by the OPE lower bound and its regret in the world.
2. **Exploration sweep**: the same with the marketer's exploration narrowed and widened
   (``sweep_epsilons``), discrete learners only: world value of each learned policy (and its gain over
   the marketer), OPE error, effective sample size and the share of the catalog the logs ever tried.

``transferlab offline report --out DIR`` runs it (``--preset quick`` in about a minute for a smoke
test, ``--preset full`` for the committed report).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from transferlab.offline.datasets import DatasetConfig, OfflineDataset, from_logs
from transferlab.offline.evaluate import OfflineEvalConfig, OfflineEvaluation, evaluate_learners, quiet_d3rlpy
from transferlab.offline.learners import DISCRETE, LEARNERS
from transferlab.offline.train import OfflineTrainConfig, train_learners
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json
from transferlab.platform.reports import Curve
from transferlab.simulator.market import CATALOG

Progress = Callable[[str, float], None]


class ComparisonConfig(BaseConfig):
    """The offline RL comparison and the exploration sweep."""

    days: int = Field(730, ge=60, description="Days of logs per shop.")
    shops: int = Field(2, ge=1, le=16, description="Worlds (seeds 0, 1, ...) whose logs are pooled.")
    n_customers: int = Field(2000, ge=50, description="Customers per world.")
    epsilon: float = Field(0.1, ge=0, le=1, description="The marketer's exploration in the main logs.")
    sweep_epsilons: list[float] = Field(
        default_factory=lambda: [0.02, 0.1, 0.5, 1.0],
        description="Exploration levels of the sweep (narrow to wide).",
    )
    learners: list[str] = Field(default_factory=lambda: list(LEARNERS), description="Learners compared.")
    sweep_learners: list[str] = Field(
        default_factory=lambda: list(DISCRETE), description="Learners in the sweep (discrete)."
    )
    steps: int = Field(3000, ge=1, description="Gradient steps per learner.")
    simulator: bool = Field(True, description="Fit a simulator on the first shop's logs and evaluate in it.")
    seed: int = Field(0, ge=0, description="Seed of learners and evaluation.")
    evaluation: OfflineEvalConfig = Field(
        default_factory=OfflineEvalConfig, description="Evaluation settings."
    )


PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "days": 120,
        "shops": 1,
        "n_customers": 300,
        "sweep_epsilons": [0.1, 1.0],
        "learners": ["discrete_cql", "discrete_bc", "iql"],
        "sweep_learners": ["discrete_cql"],
        "steps": 100,
        "simulator": False,
        "evaluation": {"episodes": 4, "n_boot": 200, "fqe_steps": 100},
    },
    "full": {},
}


def preset(name: Literal["quick", "full"]) -> ComparisonConfig:
    """The named preset's config."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)}")
    return ComparisonConfig.from_dict(PRESETS[name])


def make_logs(config: ComparisonConfig, epsilon: float) -> list[Any]:
    """Logs of every shop at exploration ``epsilon``."""
    from transferlab.simulator.logs import LogSpec, generate_logs
    from transferlab.simulator.world_config import WorldConfig

    return [
        generate_logs(
            LogSpec(
                days=config.days,
                epsilon=epsilon,
                world=WorldConfig(n_customers=config.n_customers, seed=shop),
            )
        )
        for shop in range(config.shops)
    ]


def catalog_share(dataset: OfflineDataset) -> float:
    """Share of the catalog's actions the logs ever took."""
    return float(np.unique(dataset.actions).size / len(CATALOG))


def _run_one(
    config: ComparisonConfig,
    epsilon: float,
    learners: list[str],
    simulator: bool,
    progress: Progress | None,
) -> tuple[OfflineDataset, OfflineEvaluation]:
    logs = make_logs(config, epsilon)
    train_cfg = OfflineTrainConfig(
        learners=learners, steps=config.steps, seed=config.seed, dataset=DatasetConfig()
    )
    dataset = from_logs(logs, train_cfg.dataset)
    sub = _sub(progress, 0.0, 0.5)
    learned, _ = train_learners(dataset, train_cfg, progress=sub)
    sim = None
    if simulator:
        from transferlab.simulator.learned import LearnedSimulator

        sim = LearnedSimulator.fit(logs[0])
    ev_cfg = config.evaluation.model_copy(update={"seed": config.seed})
    return dataset, evaluate_learners(
        logs, dataset, learned, ev_cfg, sim=sim, progress=_sub(progress, 0.5, 1.0)
    )


def sweep_rows(epsilon: float, dataset: OfflineDataset, ev: OfflineEvaluation) -> list[dict[str, Any]]:
    """One row per learned policy of one sweep point."""
    marketer = ev.row(ev.behaviour).world
    rows = []
    for r in ev.rows:
        if r.ope is None:
            continue
        c = r.ope.coverage
        rows.append(
            {
                "epsilon": epsilon,
                "catalog tried": catalog_share(dataset),
                "policy": r.name,
                "world": r.world.estimate,
                "world - marketer": r.world.estimate - marketer.estimate,
                "ips err": r.ope_error("ips"),
                "sndr err": r.ope_error("sndr"),
                "fqe err": r.ope_error("fqe"),
                "ESS share": c.ess_share,
                "unsupported": c.unsupported_mass,
                "trusted": c.trustworthy,
                "selected": ev.selection.chosen == r.name,
                "regret": ev.selection.regret,
            }
        )
    return rows


def run_comparison(
    config: ComparisonConfig,
    out: str | os.PathLike[str],
    progress: Progress | None = None,
    *,
    obd: tuple[Path, Path] | None = None,
) -> dict[str, Any]:
    """Run the comparison and the sweep; write ``result.json`` and ``report.md/html`` to ``out``.

    ``obd`` (the random and the Bernoulli-TS Open Bandit logs of one campaign) adds the real-data
    OPE protocol, both directions, to the report.
    """
    import torch

    quiet_d3rlpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_parts = 1 + len(config.sweep_epsilons)
    try:
        dataset, main = _run_one(
            config, config.epsilon, config.learners, config.simulator, _sub(progress, 0, 1 / n_parts)
        )
        sweep: list[dict[str, Any]] = []
        for i, eps in enumerate(config.sweep_epsilons):
            say = _sub(progress, (1 + i) / n_parts, (2 + i) / n_parts)
            if say is not None:
                say(f"exploration sweep: epsilon {eps}", 0.0)
            ds, ev = _run_one(config, eps, config.sweep_learners, False, say)
            sweep.extend(sweep_rows(eps, ds, ev))
    finally:
        torch.set_num_threads(threads)
    result: dict[str, Any] = {
        "config": config.to_dict(),
        "main": main.to_dict(),
        "main_catalog_tried": catalog_share(dataset),
        "sweep": sweep,
    }
    if obd is not None:
        from transferlab.offline.obd_ope import ope_obd
        from transferlab.simulator.realdata.obd import load_obd

        if progress is not None:
            progress("Open Bandit Dataset: both directions", 1.0)
        result["obd"] = ope_obd(load_obd(obd[0]), load_obd(obd[1]), seed=config.seed)
        result["obd_files"] = [str(obd[0]), str(obd[1])]
    atomic_write_json(out / "result.json", result)
    write_comparison_report(config, dataset, main, sweep, out, obd=result.get("obd"))
    return result


def write_comparison_report(
    config: ComparisonConfig,
    dataset: OfflineDataset,
    main: OfflineEvaluation,
    sweep: list[dict[str, Any]],
    out: Path,
    *,
    obd: dict[str, Any] | None = None,
) -> None:
    """The Markdown/HTML report of :func:`run_comparison`."""
    from transferlab.offline.report import add_evaluation
    from transferlab.platform.reports import Report, plot_curves

    report = Report("Offline RL and off-policy evaluation on campaign logs")
    report.paragraph(
        f"Logs: {config.shops} shop(s) x {config.days} days, {config.n_customers} customers each, made by "
        f"the marketer with exploration epsilon {config.epsilon}: {len(dataset)} decision days in "
        f"{dataset.n_episodes} 30-day episodes; the logs tried {catalog_share(dataset):.0%} of the "
        f"{len(CATALOG)} catalog actions. Each learner: {config.steps} gradient steps (d3rlpy), seed "
        f"{config.seed}."
    )
    report.heading("All learners: world, simulator, OPE and coverage")
    add_evaluation(report, main)
    report.heading("The stated limit: exploration in the logs")
    report.paragraph(
        "Offline RL only learns what the logs tried. The marketer's exploration epsilon (share of "
        "uniformly random campaign choices) is narrowed and widened; for each level the logs are "
        "regenerated, the discrete learners retrained and judged again. 'world - marketer' is the "
        "learned policy's gain over the behaviour policy in the world; the error columns are "
        "|OPE - world| / |world|."
    )
    report.table(sweep, floatfmt=".3f", caption="Exploration sweep")
    eps = sorted({r["epsilon"] for r in sweep})
    if len(eps) > 1:
        xlabel = "log10 epsilon (exploration in the logs)"
        report.figure(
            plot_curves(
                _sweep_curves(sweep, "world - marketer"), xlabel=xlabel, ylabel="world value - marketer's"
            ),
            "sweep_gain",
            "Gain of each learned policy over the marketer in the world, by exploration in the logs.",
        )
        report.figure(
            plot_curves(_sweep_curves(sweep, "sndr err"), xlabel=xlabel, ylabel="SNDR relative error"),
            "sweep_ope_error",
            "OPE (SNDR) relative error against the world, by exploration in the logs.",
        )
    if obd is not None:
        add_obd(report, obd)
    report.write(out)


def _sweep_curves(sweep: list[dict[str, Any]], column: str) -> dict[str, Curve]:
    """One curve per learned policy: ``column`` against log10 epsilon."""
    curves = {}
    for name in sorted({r["policy"] for r in sweep}):
        points = sorted((r["epsilon"], r[column]) for r in sweep if r["policy"] == name)
        curves[name] = Curve(np.log10([e for e, _ in points]), np.array([v for _, v in points]))
    return curves


def add_obd(report: Any, obd: dict[str, Any]) -> None:
    """The Open Bandit Dataset section: both directions, every estimator, coverage."""
    report.heading("Real data: the Open Bandit Dataset")
    report.paragraph(
        "Forward: Bernoulli TS's click rate estimated from the uniform-random log and compared with TS's "
        "own log; reverse: the uniform policy estimated from the TS log (poor coverage, flagged)."
    )
    for direction in ("forward", "reverse"):
        d = obd[direction]
        rows = [
            {
                "estimator": name,
                "estimate": e["value"],
                "95% CI": f"[{e['ci'][0]:.5f}, {e['ci'][1]:.5f}]",
                "relative error": e["relative_error"],
            }
            for name, e in d["estimates"].items()
        ]
        rows.append({"estimator": "truth", "estimate": d["truth"], "95% CI": "", "relative error": None})
        report.table(
            rows, floatfmt=".5f", caption=f"{direction}: {d.get('target', '')} from {d.get('behaviour', '')}"
        )
        c = d["coverage"]
        verdict = "trusted" if c["trusted"] else f"UNTRUSTWORTHY: {c.get('reason')}"
        report.paragraph(
            f"Coverage ({direction}): ESS {c['ess']:.0f}, max weight {c['max_weight']:.2f}, unsupported mass "
            f"{c['unsupported_mass']:.3f}; {verdict}."
        )


def _sub(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    if progress is None:
        return None
    p = progress
    return lambda msg, frac: p(msg, lo + (hi - lo) * frac)


__all__ = [
    "PRESETS",
    "ComparisonConfig",
    "catalog_share",
    "make_logs",
    "preset",
    "run_comparison",
    "sweep_rows",
    "write_comparison_report",
]

"""The offline RL comparison behind ``docs/results/offline_rl/``: every learner on the generated logs,
and how coverage (the marketer's exploration when the logs were made) limits what offline RL and OPE
can do.

1. **Comparison**: logs from ``shops`` worlds (``days`` each) under the marketer (``epsilon``); every
   learner trained on them; each judged in the world, in a simulator learned from the logs, and by
   OPE with coverage; policy selection by the OPE lower bound and its regret in the world.
2. **Exploration sweep**: the same with the marketer's exploration narrowed and widened
   (``sweep_epsilons``), discrete learners only: world value of each learned policy (and its gain over
   the marketer), OPE error, effective sample size and the share of the catalog the logs ever tried.

``transferlab offline report --out DIR`` runs it (``--preset smoke`` in about a minute for a smoke
check, ``--preset cpu`` for the committed report).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from transferlab.offline.datasets import DatasetConfig, OfflineDataset, from_logs
from transferlab.offline.evaluate import (
    FloatArray,
    OfflineEvalConfig,
    OfflineEvaluation,
    evaluate_learners,
    quiet_d3rlpy,
)
from transferlab.offline.learners import DISCRETE, LEARNERS
from transferlab.offline.train import OfflineTrainConfig, train_learners
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json
from transferlab.platform.provenance import provenance
from transferlab.platform.reports import Curve
from transferlab.platform.results import Comparison, paired_comparison
from transferlab.simulator.vocabulary import CATALOG

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
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1, 2, 3, 4],
        min_length=1,
        description="Training seeds of the main comparison, five fixed before the run (every learner "
        "trained once per seed and judged on that seed's own world futures); the sweep uses the first.",
    )
    evaluation: OfflineEvalConfig = Field(
        default_factory=OfflineEvalConfig, description="Evaluation settings."
    )

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"seeds must be distinct non-negative integers, got {seeds}")
        return seeds


PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {
        "days": 120,
        "shops": 1,
        "n_customers": 300,
        "sweep_epsilons": [0.1, 1.0],
        "learners": ["discrete_cql", "discrete_bc", "iql"],
        "sweep_learners": ["discrete_cql"],
        "steps": 100,
        "simulator": False,
        "seeds": [0, 1],
        "evaluation": {"episodes": 4, "n_boot": 200, "fqe_steps": 100},
    },
    "cpu": {},
}


PRESET_ALIASES = {"quick": "smoke", "full": "cpu"}
"""The presets' earlier names (still accepted: committed results name them in their commands)."""


def preset(name: str) -> ComparisonConfig:
    """The named preset's config (``smoke`` or ``cpu``; ``quick`` and ``full`` are their old names)."""
    from transferlab.platform.cli_kit import canonical_preset

    return ComparisonConfig.from_dict(PRESETS[canonical_preset(name, PRESETS, PRESET_ALIASES)])


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
    logs: list[Any],
    dataset: OfflineDataset,
    learners: list[str],
    simulator: Any | None,
    seed: int,
    progress: Progress | None,
) -> OfflineEvaluation:
    """Train ``learners`` with ``seed`` on ``dataset`` and evaluate them on the seed's own world futures
    (``config.evaluation.seed + seed``): every policy of a seed meets the same futures (common random
    numbers), and no two seeds share one, so the seeds are independent replications."""
    train_cfg = OfflineTrainConfig(learners=learners, steps=config.steps, seed=seed, dataset=DatasetConfig())
    learned, _ = train_learners(dataset, train_cfg, progress=_sub(progress, 0.0, 0.5))
    evaluation = config.evaluation.model_copy(update={"seed": config.evaluation.seed + seed})
    return evaluate_learners(
        logs, dataset, learned, evaluation, sim=simulator, progress=_sub(progress, 0.5, 1.0)
    )


def _logs_and_dataset(config: ComparisonConfig, epsilon: float) -> tuple[list[Any], OfflineDataset]:
    logs = make_logs(config, epsilon)
    return logs, from_logs(logs, DatasetConfig())


def paired_comparisons(evaluations: dict[int, OfflineEvaluation]) -> list[Comparison]:
    """Every policy, and the selection, minus the behaviour policy and minus doing nothing, paired on
    each seed's world futures (common random numbers).

    The unit is the training seed (a t-interval over the seeds' mean differences); the (seed,
    episode) bootstrap beside it is conditional on the trained policies. A pair of policies that no
    seed changes (the same returns in every seed: the futures were shared) enters once, its futures as
    the units. Picking the best of the k learners is corrected for: each learner's seed interval is
    also given at ``1 - 0.05 / k`` (Bonferroni), named ``"... (Bonferroni over k learners)"``.
    """
    first = next(iter(evaluations.values()))
    names = [r.name for r in first.rows] + ["selected"]
    row_names = {r.name for r in first.rows}
    bases = [b for b in (first.behaviour, "no_campaign") if b in row_names]
    learners = [n for n in row_names if first.row(n).ope is not None]

    def returns(ev: OfflineEvaluation, name: str) -> FloatArray:
        return ev.row(ev.selection.chosen if name == "selected" else name).world_returns

    def fixed(name: str) -> bool:
        runs = [returns(ev, name) for ev in evaluations.values()]
        return len(runs) > 1 and all(np.array_equal(runs[0], r) for r in runs[1:])

    out: list[Comparison] = []
    for name in names:
        for base in bases:
            if name == base:
                continue
            label = f"{name} - {base}"
            if fixed(name) and fixed(base):  # counted once: the futures are the units
                ra, rb = returns(first, base), returns(first, name)
                out.append(
                    paired_comparison(
                        label, ra.tolist(), rb.tolist(), list(range(len(ra))), cluster="episode"
                    )
                )
                continue
            a: list[float] = []
            b: list[float] = []
            seeds: list[int] = []
            episodes: list[tuple[int, int]] = []
            for seed, ev in evaluations.items():
                ra, rb = returns(ev, base), returns(ev, name)
                a += ra.tolist()
                b += rb.tolist()
                seeds += [seed] * len(ra)
                episodes += [(seed, i) for i in range(len(ra))]
            out.append(paired_comparison(label, a, b, seeds, cluster="seed"))
            if name in learners and len(learners) > 1:
                level = 1 - 0.05 / len(learners)
                corrected = f"{label} (Bonferroni over {len(learners)} learners)"
                out.append(paired_comparison(corrected, a, b, seeds, cluster="seed", level=level))
            out.append(paired_comparison(label, a, b, episodes, cluster="seed+episode"))
    return out


def sweep_rows(
    epsilon: float, dataset: OfflineDataset, ev: OfflineEvaluation, learners: list[str]
) -> list[dict[str, Any]]:
    """One row per learned policy of one sweep point."""
    marketer = ev.row(ev.behaviour).world
    rows = []
    for r in ev.rows:
        if r.ope is None or r.name not in learners:
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
    command: str = "transferlab offline report",
) -> dict[str, Any]:
    """Run the comparison (every learner once per training seed) and the sweep; write ``result.json``
    and ``report.md/html`` to ``out``; ``command`` is recorded in both.

    ``obd`` (the random and the Bernoulli-TS Open Bandit logs of one campaign) adds the real-data
    OPE protocol, both directions, to the report.
    """
    started = time.perf_counter()
    import torch

    quiet_d3rlpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_parts = len(config.seeds) + len(config.sweep_epsilons)
    try:
        logs, dataset = _logs_and_dataset(config, config.epsilon)
        sim = None
        if config.simulator:
            from transferlab.simulator.learned import LearnedSimulator

            sim = LearnedSimulator.fit(logs[0])
        evaluations: dict[int, OfflineEvaluation] = {}
        for i, seed in enumerate(config.seeds):
            say = _sub(progress, i / n_parts, (i + 1) / n_parts)
            if say is not None:
                say(f"training seed {seed}", 0.0)
            evaluations[seed] = _run_one(config, logs, dataset, config.learners, sim, seed, say)
        sweep: list[dict[str, Any]] = []
        for i, eps in enumerate(config.sweep_epsilons):
            k = len(config.seeds) + i
            say = _sub(progress, k / n_parts, (k + 1) / n_parts)
            if say is not None:
                say(f"exploration sweep: epsilon {eps}", 0.0)
            sweep_logs, ds = _logs_and_dataset(config, eps)
            ev = _run_one(config, sweep_logs, ds, config.sweep_learners, None, config.seeds[0], say)
            sweep.extend(sweep_rows(eps, ds, ev, config.sweep_learners))
    finally:
        torch.set_num_threads(threads)
    main = evaluations[config.seeds[0]]
    paired = paired_comparisons(evaluations)
    result: dict[str, Any] = {
        "experiment": "offline-rl",
        "command": command,
        "seeds": list(config.seeds),
        "config": config.to_dict(),
        "main": main.to_dict(),
        "main_by_seed": {str(seed): ev.to_dict() for seed, ev in evaluations.items()},
        "main_catalog_tried": catalog_share(dataset),
        "comparisons": [c.model_dump(mode="json") for c in paired],
        "selected_by_seed": {str(seed): ev.selection.chosen for seed, ev in evaluations.items()},
        "sweep": sweep,
    }
    if obd is not None:
        from transferlab.offline.obd_ope import ope_obd
        from transferlab.simulator.realdata.obd import load_obd

        if progress is not None:
            progress("Open Bandit Dataset: both directions", 1.0)
        result["obd"] = ope_obd(load_obd(obd[0]), load_obd(obd[1]), seed=config.seeds[0])
        result["obd_files"] = [str(obd[0]), str(obd[1])]
    result["provenance"] = provenance(str(result["command"]), time.perf_counter() - started)
    atomic_write_json(out / "result.json", result)
    write_comparison_report(config, dataset, main, sweep, out, obd=result.get("obd"), paired=result)
    return result


def write_comparison_report(
    config: ComparisonConfig,
    dataset: OfflineDataset,
    main: OfflineEvaluation,
    sweep: list[dict[str, Any]],
    out: Path,
    *,
    obd: dict[str, Any] | None = None,
    paired: dict[str, Any] | None = None,
) -> None:
    """The Markdown/HTML report of :func:`run_comparison` (``paired``: its result, for the paired
    comparisons over training seeds and the command)."""
    from transferlab.offline.report import add_evaluation
    from transferlab.platform.reports import Report, plot_curves

    report = Report("Offline RL and off-policy evaluation on campaign logs")
    report.paragraph(
        f"Logs: {config.shops} shop(s) x {config.days} days, {config.n_customers} customers each, made by "
        f"the marketer with exploration epsilon {config.epsilon}: {len(dataset)} decision days in "
        f"{dataset.n_episodes} 30-day episodes; the logs tried {catalog_share(dataset):.0%} of the "
        f"{len(CATALOG)} catalog actions. Each learner: {config.steps} gradient steps (d3rlpy), "
        f"training seeds {', '.join(map(str, config.seeds))}; the tables below the paired "
        f"comparison are seed {config.seeds[0]}'s."
    )
    if paired is not None:
        add_paired(report, paired)
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
    if paired is not None:
        report.code(str(paired.get("command", "")))
    report.write(out)


def paired_rows(comparisons: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per policy: its world gain over the behaviour policy and over doing nothing (seed
    clusters), each with its interval, MDE and verdict."""
    by_policy: dict[str, dict[str, str]] = {}
    for raw in comparisons:
        c = Comparison.model_validate(raw)
        if c.cluster not in ("seed", "episode"):
            continue
        policy, base = c.name.split(" - ", 1)
        column = f"minus {base}"
        if " (Bonferroni" in base:  # the multiplicity-corrected interval of a learner, its own column
            base, _ = base.split(" (Bonferroni", 1)
            column = f"minus {base}, corrected for picking among the learners"
        mde = f"MDE {c.mde:.2f}" if c.ci[1] > c.ci[0] else "no spread between seeds"
        unit = "futures, counted once" if c.cluster == "episode" else "seeds"
        cell = f"{c.estimate:+.2f} [{c.ci[0]:+.2f}, {c.ci[1]:+.2f}] ({mde}; {unit}): {c.verdict}"
        by_policy.setdefault(policy, {"policy": policy})[column] = cell
    return list(by_policy.values())


def add_paired(report: Any, result: dict[str, Any]) -> None:
    """The section on every policy against the behaviour policy and doing nothing, over seeds."""
    seeds = result["seeds"]
    report.heading("Against what the shop does now, and against doing nothing")
    report.paragraph(
        f"World 30-day return differences, each policy and the behaviour policy (or no campaign) run on "
        f"the same world futures (common random numbers), averaged over the episodes of "
        f"{len(seeds)} training seeds ({', '.join(map(str, seeds))}), each seed on its own futures; 95% "
        "t-intervals over the seeds (a pair of policies no seed changes is compared once, over its "
        "futures); MDE = the smallest true difference that interval would detect with 80% power; a "
        "learner's interval is also given at the Bonferroni level for having picked among the learners. A "
        "gain is stated only when its interval excludes zero. 'selected' is what the "
        "selection rule chose in each seed: "
        + ", ".join(f"seed {k}: {v}" for k, v in result["selected_by_seed"].items())
        + "."
    )
    report.table(paired_rows(result["comparisons"]), caption="Paired differences in the world")
    for raw in result["comparisons"]:
        c = Comparison.model_validate(raw)
        if c.name.startswith("selected - ") and c.cluster == "seed":
            report.paragraph(c.sentence(unit="return", scale=1))


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

"""``transferlab demo``: the main job, a run in the run store built from a list of sections.

Each section is a :class:`DemoSection`: a title and a function that takes the :class:`DemoContext`
(config, console, run) and returns a summary dict; the summaries are saved as the ``summary.json``
artifact. A section logs its metrics under its own namespace through ``ctx.run.logger`` and writes
its artifacts through ``ctx.run``; it imports its domain modules inside the function, so importing
this module stays cheap. To add a section, append it to :data:`SECTIONS`.

Sections so far:

1. ``coding: seed tasks in the sandbox``: grades every seed solution (a quick sort that drops the
   elements equal to the pivot, a binary search with both boundaries written ``low = mid`` /
   ``high = mid``), then the worked example of the project's founding design note: the buggy quick
   sort's reward (8.0) and its advantage against an expected reward of 7.5 (+0.5).
2. ``coding: scripted agents in CodeRepair-v0``: builds a small task corpus (seed repositories plus
   HumanEval functions with injected bugs), runs the expert, naive and random agents on its held-out
   split, and replays the calculator story (fix division by zero): an early-training attempt that
   writes without reading scores negative, the expert workflow +35.5.
3. ``coding: a tiny policy trained with SFT then GRPO``: a from-scratch policy and tokenizer, SFT on
   toy code tasks, a few GRPO steps with rewards from the sandbox, held-out success before and after.
4. ``ecommerce: logs, a simulator learned from them, a policy trained in it``.
5. ``ecommerce: offline RL from the logs``: d3rlpy learners valued by OPE (with coverage) and in the
   world.
6. ``review``: suggestions from the trained policies and ops reports to rate, queued in a review
   database, with the command that opens the review app on it.
7. ``compare``: the scripted agents in OpsAnalysis-v0, then ``transferlab compare --preset quick``;
   it prints the measured table and where the report is. The demo ends with both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console

from transferlab.platform.config import BaseConfig
from transferlab.platform.runstore import Run, RunStore

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from transferlab.coding_rl.sandbox.backends import SandboxBackend
    from transferlab.coding_rl.sandbox.config import BackendName, SandboxConfig
    from transferlab.human_review.auth import Role

__all__ = [
    "EXPERIMENT",
    "SECTIONS",
    "DemoConfig",
    "DemoContext",
    "DemoResult",
    "DemoSection",
    "coding_agents",
    "coding_seed_tasks",
    "coding_training",
    "ecommerce_simulator",
    "run_demo",
]

EXPERIMENT = "demo"
DESIGN_NOTE_EXPECTED_REWARD = 7.5
"""The expected reward (baseline) of the founding design note's worked example, the buggy quick sort."""
DESIGN_NOTE_SOLUTION = "quick_sort_buggy.py"


class DemoConfig(BaseConfig):
    """What ``transferlab demo`` was run with (saved as the run's config.json)."""

    backend: Literal["forkserver", "subprocess", "docker"] = Field(
        default="forkserver",
        description="Sandbox backend for the coding sections; if unavailable, the demo falls back to "
        "subprocess and records that in the section summary.",
    )
    runs_root: Path = Field(default=Path("runs"), description="Root directory of the run store.")
    compare_preset: Literal["smoke", "quick"] = Field(
        default="quick", description="`transferlab compare` preset of the last section (smoke: seconds)."
    )
    corpus_functions: int = Field(
        default=40, ge=4, description="HumanEval functions of the scripted agents' small task corpus."
    )
    log_days: int = Field(default=365, ge=60, description="Days of the shop's logs (ecommerce sections).")
    customers: int = Field(default=2000, ge=100, description="Customers of the demo's ground-truth world.")
    sim_train_episodes: int = Field(
        default=192 * 128,
        ge=128,
        description="Episode budget of the PPO run in the learned simulator (192 iterations of 128 markets, "
        "about two minutes here); an episode budget, not a time budget, so the demo is reproducible.",
    )
    offline_steps: int = Field(default=2000, ge=100, description="d3rlpy steps of each offline learner.")


@dataclass
class DemoContext:
    """What every section gets: the config, the console to print on and the run to record into."""

    config: DemoConfig
    console: Console
    run: Run


SectionFn = Callable[[DemoContext], dict[str, Any]]


@dataclass(frozen=True)
class DemoSection:
    """One part of the demo: a title and a function returning a (JSON-serialisable) summary dict."""

    title: str
    run: SectionFn


@dataclass
class DemoResult:
    """Where the run went and what each section reported."""

    run_dir: Path
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """False if a section reported ``ok: False`` (e.g. the sandbox itself failed)."""
        return all(summary.get("ok", True) is not False for summary in self.summaries.values())


# --------------------------------------------------------------------------- coding: seed tasks


def open_sandbox(backend: BackendName, console: Console) -> tuple[SandboxBackend, SandboxConfig, str | None]:
    """The backend named ``backend``, else subprocess; returns (backend, config, why it fell back)."""
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig

    sandbox, config, reason = open_backend(SandboxConfig(backend=backend, workers=1))
    if reason is not None:
        console.print(f"[yellow]{reason}[/]", markup=True, highlight=False)
        console.print("[yellow]falling back to --backend subprocess (weaker isolation)[/]")
    return sandbox, config, reason


def _num(value: float) -> str:
    """8.0, 4.75, 12.0: a reward as Python writes it, rounded to 6 decimals."""
    return repr(round(float(value), 6))


def _components(components: dict[str, float]) -> str:
    return " + ".join(f"{name} {_num(value)}" for name, value in components.items())


def coding_seed_tasks(ctx: DemoContext) -> dict[str, Any]:
    """Grade every seed solution in the sandbox, then the buggy quick sort's reward and advantage."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
    from rich.table import Table

    from transferlab.coding_rl.rewards import advantage
    from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
    from transferlab.coding_rl.tasks.seed_tasks import seed_solutions

    console, logger = ctx.console, ctx.run.logger
    solutions = seed_solutions()
    sandbox, config, fallback = open_sandbox(ctx.config.backend, console)
    results: list[GradeResult] = []
    try:
        verifier = Verifier(sandbox, config)
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
        ) as progress:
            bar = progress.add_task("grading", total=len(solutions))
            for step, solution in enumerate(solutions):
                progress.update(bar, description=f"grading: {solution.label}")
                result = verifier.grade(solution.task, solution.source)
                results.append(result)
                logger.log(
                    step,
                    {
                        "sandbox/reward": result.reward,
                        "sandbox/pass_rate": result.pass_rate,
                        "sandbox/passed": result.passed,
                        "sandbox/total": result.total,
                        "sandbox/executed": float(result.executed),
                        "sandbox/runtime_s": result.runtime_s,
                    },
                )
                progress.advance(bar)
    finally:
        sandbox.close()

    table = Table(title=f"seed solutions ({config.backend} backend)", title_justify="left")
    justified: tuple[tuple[str, JustifyMethod], ...] = (
        ("solution", "left"),
        ("status", "left"),
        ("passed", "right"),
        ("reward", "right"),
        ("components", "left"),
    )
    for column, justify in justified:
        table.add_column(column, justify=justify)
    for solution, result in zip(solutions, results, strict=True):
        colour = (
            "green" if result.status == "passed" else "red" if result.status == "infra_error" else "yellow"
        )
        table.add_row(
            solution.label,
            f"[{colour}]{result.status}[/]",
            f"{result.passed}/{result.total}",
            f"{_num(result.reward)}",
            _components(result.reward_components),
        )
    console.print(table)

    grades = [
        {
            "label": s.label,
            "task_file": s.task_file.name,
            "solution_file": s.solution_file.name,
            "grade": r.to_public_json(),
        }
        for s, r in zip(solutions, results, strict=True)
    ]
    ctx.run.write_artifact_json("grades.json", grades)

    summary: dict[str, Any] = {
        "backend": config.backend,
        "fallback": fallback,
        "solutions": len(results),
        "passed": sum(r.status == "passed" for r in results),
        "mean_reward": round(sum(r.reward for r in results) / len(results), 6),
        "infra_errors": sum(r.status == "infra_error" for r in results),
    }
    worked = next((i for i, s in enumerate(solutions) if s.solution_file.name == DESIGN_NOTE_SOLUTION), None)
    if worked is not None:
        buggy = results[worked]
        adv = advantage(buggy.reward, baseline=DESIGN_NOTE_EXPECTED_REWARD)
        logger.log(worked, {"sandbox/design_note_advantage": adv})
        console.print(
            f"worked example: the buggy quick sort ({buggy.passed}/{buggy.total} tests) earns "
            f"reward {_num(buggy.reward)} ({_components(buggy.reward_components)}); against an expected "
            f"reward of {_num(DESIGN_NOTE_EXPECTED_REWARD)} its advantage is {adv:+g}",
            highlight=False,
        )
        summary.update(
            design_note_reward=buggy.reward,
            design_note_expected_reward=DESIGN_NOTE_EXPECTED_REWARD,
            design_note_advantage=adv,
        )
    summary["ok"] = summary["infra_errors"] == 0
    return summary


# --------------------------------------------------------------------------- coding: agent RL env

DEMO_EPISODES = 12


def coding_agents(ctx: DemoContext) -> dict[str, Any]:
    """Build a small task corpus, then run the scripted agents on its held-out split in CodeRepair-v0."""
    from rich.table import Table

    from transferlab.coding_rl.rollout import open_sandbox as open_rollout_sandbox
    from transferlab.coding_rl.rollout import run_batched
    from transferlab.coding_rl.tasks.corpus import build_corpus
    from transferlab.coding_rl.tasks.repo_task import load_corpus
    from transferlab.platform.trajectory import TrajectoryWriter

    console, run = ctx.console, ctx.run
    corpus_dir = run.artifact_path("coding_tasks")
    console.print(
        f"building a small task corpus ({ctx.config.corpus_functions} HumanEval functions + the seed repos)"
    )
    report = build_corpus(
        corpus_dir, limit=ctx.config.corpus_functions, held_out_fraction=0.4, backend=ctx.config.backend
    )
    console.print(report.summary(), highlight=False)
    held_out = load_corpus(corpus_dir, split="held-out")
    seeds = [t for t in load_corpus(corpus_dir, split="train") if t.task_id.startswith("seed-")]
    sandbox = open_rollout_sandbox(ctx.config.backend, 2)
    table = Table(title=f"scripted agents on {len(held_out)} held-out tasks", title_justify="left")
    for column in ("agent", "success", "mean return", "steps/episode", "episodes/s", "sandbox share"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    summary: dict[str, Any] = {"tasks": report.totals().model_dump(), "held_out": len(held_out)}
    try:
        with TrajectoryWriter(run.dir / "trajectories.parquet") as writer:
            for step, agent in enumerate(("expert", "naive", "random")):
                trajs, s = run_batched(held_out, agent, DEMO_EPISODES, 2, sandbox, seed=step * 1000)
                writer.extend(trajs)
                run.logger.log(
                    step, {f"rollout/{agent}/{k.split('/')[-1]}": v for k, v in s.as_metrics().items()}
                )
                table.add_row(
                    agent,
                    f"{s.success_rate:.0%}",
                    f"{s.mean_return:+.2f}",
                    f"{s.mean_steps:.1f}",
                    f"{s.episodes_per_s:.1f}",
                    f"{s.sandbox_share:.0%}",
                )
                summary[agent] = {"success_rate": s.success_rate, "mean_return": s.mean_return}
            seed_runs = {}
            for agent in ("naive", "expert"):
                calc = [t for t in seeds if t.task_id == "seed-calculator"]
                (traj,), _ = run_batched(calc, agent, 1, 1, sandbox)
                seed_runs[agent] = traj.total_reward
    finally:
        sandbox.close()
    console.print(table)
    console.print(
        f"design note 000's calculator: the early attempt (read test, search, write without reading) returns "
        f"{seed_runs['naive']:+.1f}; the expert workflow returns {seed_runs['expert']:+.1f} "
        f"(completion bonus included)",
        highlight=False,
    )
    summary["seed_calculator_returns"] = seed_runs
    summary["ok"] = summary["expert"]["success_rate"] >= 0.95
    return summary


# --------------------------------------------------------------------------- coding: training a policy


def coding_training(ctx: DemoContext) -> dict[str, Any]:
    """A tiny policy from scratch: SFT on imperfect demonstrations, then GRPO against the sandbox;
    held-out success before and after (the `learn` experiment's demo preset, one seed)."""
    from transferlab.coding_rl.experiments.learn import run_learn
    from transferlab.coding_rl.experiments.presets import LEARN_PRESETS

    config = LEARN_PRESETS["demo"].model_copy(update={"backend": ctx.config.backend})
    summary = run_learn(config, ctx.config.runs_root, console=ctx.console)
    stages = summary["stages"]
    ctx.console.print(
        f"held-out success (sampled, {summary['held_out_tasks']} toy tasks): untrained "
        f"{stages['untrained']['sampled']['estimate']:.0%} -> SFT {stages['sft']['sampled']['estimate']:.0%} "
        f"-> SFT + GRPO {stages['grpo']['sampled']['estimate']:.0%}",
        highlight=False,
    )
    ctx.console.print(summary["vs_sft"]["grpo"]["verdict"], highlight=False)
    return {
        "held_out_success_untrained": stages["untrained"]["sampled"]["estimate"],
        "held_out_success_sft": stages["sft"]["sampled"]["estimate"],
        "held_out_success_sft_grpo": stages["grpo"]["sampled"]["estimate"],
        "verdict": summary["vs_sft"]["grpo"]["verdict"],
        "run_dir": summary["run_dir"],
    }


# --------------------------------------------------------------------------- ecommerce: the simulator


def ecommerce_simulator(ctx: DemoContext) -> dict[str, Any]:
    """Logs from the ground-truth world under the marketer, a simulator fitted on them, a PPO policy
    trained in it for a couple of minutes, and its value in the simulator and in the world next to
    the marketer's and doing nothing."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
    from transferlab.simulator.train import SimTrainConfig, train_in_simulator
    from transferlab.simulator.world_config import WorldConfig

    out = ctx.run.dir / "artifacts" / "ecommerce"
    spec = LogSpec(days=ctx.config.log_days, world=WorldConfig(n_customers=ctx.config.customers, seed=0))
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=ctx.console, transient=True) as bar:
        task = bar.add_task("world: simulating a year under the marketer", total=spec.days)
        logs = generate_logs(spec, progress=lambda done, total: bar.update(task, completed=done))
    write_logs(logs, out / "logs")
    camp = logs.campaigns
    ctx.console.print(
        f"logs: {spec.days} days x {ctx.config.customers:,} customers, "
        f"{int(camp['launched'].sum())} campaigns "
        f"({int(camp['matured'].sum())} matured), {logs.manifest['rows']['events']:,} customer events",
        highlight=False,
    )
    sim = LearnedSimulator.fit(logs)
    sim.save(out / "simulator")
    purchase = sim.report["purchase"]
    ctx.console.print(
        f"learned simulator: purchase model held-out AUC {purchase['heldout_auc']:.3f}, log loss "
        f"{purchase['heldout_log_loss']:.4f} vs {purchase['baseline_log_loss']:.4f} for a constant rate",
        highlight=False,
    )
    episodes = ctx.config.sim_train_episodes
    config = SimTrainConfig.build(max_minutes=None, max_episodes=episodes, eval_episodes=32)
    with Progress(*columns, console=ctx.console, transient=True) as bar:
        task = bar.add_task("PPO in the learned simulator", total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, description=message, completed=fraction)

        result = train_in_simulator(sim, logs, config, run_dir=out / "train", progress=progress)
    ctx.console.print(result.format_table(), highlight=False, soft_wrap=True)
    values = {r.policy: r for r in result.values}
    ctx.run.logger.log(
        0,
        {f"demo/sim/{p}/value": v.sim.estimate for p, v in values.items()}
        | {f"demo/world/{p}/value": v.world.estimate for p, v in values.items()},
    )
    return {
        "log_days": spec.days,
        "customers": ctx.config.customers,
        "campaigns_logged": int(camp["launched"].sum()),
        "heldout_auc": purchase["heldout_auc"],
        "value_in_sim": {p: v.sim.estimate for p, v in values.items()},
        "value_in_world": {p: v.world.estimate for p, v in values.items()},
        "trained_minus_marketer_in_world": result.world_gain.format(".2f"),
        "train_episodes": result.episodes,
        "dir": str(out),
    }


# --------------------------------------------------------------------------- ecommerce: offline RL

DEMO_OFFLINE_LEARNERS = ("discrete_cql", "discrete_bc")


def ecommerce_offline(ctx: DemoContext) -> dict[str, Any]:
    """Offline RL on the logs of the previous section (d3rlpy): two discrete learners, each valued by
    off-policy evaluation with intervals and coverage, in the learned simulator, and in the world
    next to the marketer who made the logs."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from transferlab.offline.datasets import DatasetConfig
    from transferlab.offline.evaluate import OfflineEvalConfig
    from transferlab.offline.train import OfflineTrainConfig, train_offline
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import LogSpec, generate_logs, read_logs, write_logs
    from transferlab.simulator.world_config import WorldConfig

    base = ctx.run.dir / "artifacts" / "ecommerce"
    if (base / "logs").is_dir():
        logs = read_logs(base / "logs")
    else:  # run on its own: make the year of logs here
        logs = generate_logs(
            LogSpec(days=ctx.config.log_days, world=WorldConfig(n_customers=ctx.config.customers, seed=0))
        )
        write_logs(logs, base / "logs")
    config = OfflineTrainConfig(
        learners=list(DEMO_OFFLINE_LEARNERS),
        steps=ctx.config.offline_steps,
        dataset=DatasetConfig(),
        evaluation=OfflineEvalConfig(episodes=24, fqe_steps=2000),
    )
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=ctx.console, transient=True) as bar:
        task = bar.add_task("offline RL on the logs", total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, description=message, completed=fraction)

        sim = LearnedSimulator.load(base / "simulator") if (base / "simulator").is_dir() else None
        result = train_offline(logs, config, run_dir=base / "offline", progress=progress, simulator=sim)
    ev = result.evaluation
    assert ev is not None
    ctx.console.print(
        f"dataset: {len(result.dataset)} logged days in {result.dataset.n_episodes} episodes of 30; "
        f"learners: {', '.join(DEMO_OFFLINE_LEARNERS)} ({ctx.config.offline_steps} d3rlpy steps each)",
        highlight=False,
    )
    ctx.console.print(ev.format_table(), highlight=False, soft_wrap=True)
    learned = {r.name: r for r in ev.rows if r.ope is not None}
    ctx.run.logger.log(
        0,
        {f"demo/offline/{n}/world": r.world.estimate for n, r in learned.items()}
        | {
            f"demo/offline/{n}/ope_sndr": r.ope.estimates["sndr"].estimate
            for n, r in learned.items()
            if r.ope
        }
        | {"demo/offline/marketer/world": ev.row("marketer").world.estimate},
    )
    ctx.console.print(f"report: {base / 'offline' / 'report.md'}", highlight=False)
    return {
        "rows": len(result.dataset),
        "world": {r.name: r.world.estimate for r in ev.rows},
        "ope_sndr": {n: r.ope.estimates["sndr"].format(".2f") for n, r in learned.items() if r.ope},
        "trusted": {n: r.ope.trusted for n, r in learned.items() if r.ope},
        "selected": ev.selection.chosen,
        "regret": ev.selection.regret,
        "dir": str(base / "offline"),
    }


# --------------------------------------------------------------------------- ecommerce: human review

DEMO_REVIEW_USERS: dict[str, tuple[Role, str]] = {
    "admin": ("admin", "demo-admin"),
    "reviewer": ("reviewer", "demo-reviewer"),
}
"""Demo accounts of the review database: name -> (role, password). Demo passwords, printed on purpose."""
DEMO_REVIEW_SUGGESTIONS = 3
DEMO_RATING_TASKS = 2
"""Held-out ops tasks whose expert and random reports the demo queues for rating (4 reports)."""


def ecommerce_review(ctx: DemoContext) -> dict[str, Any]:
    """Suggestions from the trained PPO policy and the offline DiscreteCQL learner, at the present of a
    market that continues the logged world, queued for people in a SQLite review database."""
    from rich.table import Table

    from transferlab.human_review.gateway import MarketGateway
    from transferlab.human_review.propose import propose
    from transferlab.human_review.reports import queue_ops_reports
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    base = ctx.run.dir / "artifacts" / "ecommerce"
    out = (ctx.run.dir / "artifacts" / "review").resolve()
    policies = {
        "ppo": base / "train" / "policy.pt",
        "discrete_cql": base / "offline" / "learners" / "discrete_cql",
    }
    found = {name: path for name, path in policies.items() if path.exists()}
    if not (base / "logs").is_dir() or not found:
        ctx.console.print(
            "no trained policies from the ecommerce sections: nothing to queue", highlight=False
        )
        return {"skipped": "run the ecommerce sections first", "pending": 0}
    out.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{out / 'review.db'}"
    service = ReviewService(ReviewStore(url))
    admin_role, admin_pw = DEMO_REVIEW_USERS["admin"]
    admin = service.add_user(None, "admin", admin_pw, admin_role)
    reviewer_role, reviewer_pw = DEMO_REVIEW_USERS["reviewer"]
    proposer = service.add_user(admin, "reviewer", reviewer_pw, reviewer_role)
    market = MarketGateway.from_logs(out / "market", base / "logs")
    simulator = base / "simulator" if (base / "simulator").is_dir() else None
    queued: dict[str, list[int]] = {}
    for name, path in found.items():
        queued[name] = propose(
            service,
            proposer,
            path,
            base / "logs",
            simulator_dir=simulator,
            n=DEMO_REVIEW_SUGGESTIONS,
            market_dir=out / "market",
        )
    reports = queue_ops_reports(service, proposer, n_tasks=DEMO_RATING_TASKS)
    views = service.list(admin)
    pending = service.pending_count(admin)
    table = Table(title=f"review queue: {pending} pending (market day {market.day()})", title_justify="left")
    for column in ("id", "policy", "campaign", "risk", "confidence", "predicted profit"):
        table.add_column(column, justify="right" if column in ("id", "confidence") else "left")
    for v in views:
        a, profit = v.action, v.evidence.get("predicted", {}).get("profit")
        table.add_row(
            str(v.id),
            str(v.evidence.get("policy")),
            f"{a['discount']:.0%} off {a['category']}, {a['push_hour']}:00, {a['segment']}, {a['budget']:g}",
            v.risk,
            f"{v.confidence:.2f}",
            "-"
            if profit is None
            else f"{profit['estimate']:.1f} [{profit['low']:.1f}, {profit['high']:.1f}]",
        )
    ctx.console.print(table)
    risks = {r: sum(v.risk == r for v in views) for r in ("low", "medium", "high")}
    serve = f"transferlab review serve --db {url}"  # people sign in in the app itself
    worker = f"TRANSFERLAB_PASSWORD={admin_pw} transferlab review worker --once --db {url} --user admin"
    agreement = (
        f"TRANSFERLAB_PASSWORD={reviewer_pw} transferlab review reports agreement --db {url} --user reviewer"
    )
    ctx.console.print(
        f"accounts: admin / {admin_pw} (admin), reviewer / {reviewer_pw} (reviewer, proposed these)\n"
        f"open the review app on them:\n  {serve}\n"
        f"then execute what you approved:\n  {worker}\n"
        f"{len(reports)} ops analysis reports wait on the 'Rate reports' page (0-10); how the rubric "
        f"agrees with your ratings:\n  {agreement}",
        highlight=False,
        soft_wrap=True,
    )
    ctx.run.logger.log(
        0, {"demo/review/pending": float(pending)} | {f"demo/review/{r}": float(n) for r, n in risks.items()}
    )
    return {
        "db": url,
        "market": str(out / "market"),
        "market_day": market.day(),
        "pending": pending,
        "queued": queued,
        "reports": reports,
        "risk": risks,
        "users": {name: role for name, (role, _) in DEMO_REVIEW_USERS.items()},
        "serve": serve,
    }


def comparison(ctx: DemoContext) -> dict[str, Any]:
    """The coding-vs-ecommerce domain table measured (``transferlab compare``, the config's preset),
    after the scripted agents on a few validation OpsAnalysis-v0 tasks."""
    from transferlab.comparison.compare import PRESETS, run_compare, table_text
    from transferlab.simulator.ops import ExpertAgent, NaiveAgent, RandomAgent, task_ids
    from transferlab.simulator.ops.compare_column import ops_episode

    agents = {"expert": ExpertAgent(), "naive": NaiveAgent(), "random": RandomAgent(seed=0)}
    ops: dict[str, float] = {}
    for name, agent in agents.items():
        episodes = [ops_episode(t, agent) for t in task_ids("validation", 3)]
        ops[name] = sum(float(e["info"].get("report_score", 0.0)) for e in episodes) / len(episodes)
    ctx.console.print(
        "OpsAnalysis-v0, mean rubric score (0-10) of the report on 3 validation tasks: "
        + ", ".join(f"{k} {v:.1f}" for k, v in ops.items()),
        highlight=False,
    )
    out = ctx.run.dir / "artifacts" / "compare"
    result = run_compare(
        PRESETS[ctx.config.compare_preset],
        out,
        progress=lambda msg: ctx.console.print(f"  ... {msg}", highlight=False),
    )
    ctx.console.print(table_text(result), highlight=False, soft_wrap=True)
    ctx.run.logger.log(0, {f"demo/compare/ops_{k}_score": v for k, v in ops.items()})
    report = out / "report.md"
    ctx.console.print(f"report: {report} and {out / 'report.html'}", highlight=False)
    return {"ops_scores": ops, "report": str(report), "seconds": result.wall_s}


SECTIONS: list[DemoSection] = [
    DemoSection("coding: seed tasks in the sandbox", coding_seed_tasks),
    DemoSection("coding: scripted agents in CodeRepair-v0", coding_agents),
    DemoSection("coding: a tiny policy trained with SFT then GRPO", coding_training),
    DemoSection(
        "ecommerce: logs, a simulator learned from them, a policy trained in it", ecommerce_simulator
    ),
    DemoSection("ecommerce: offline RL from the logs, judged by OPE and in the world", ecommerce_offline),
    DemoSection("review: suggestions from the trained policies, queued for people", ecommerce_review),
    DemoSection("compare: coding vs ecommerce, measured (transferlab compare)", comparison),
]


# --------------------------------------------------------------------------- the job


def _next_steps(result: DemoResult, console: Console) -> None:
    """The two things to look at after the demo: the comparison's report and the review app."""
    lines = [
        f"{label}: {value}"
        for summary in result.summaries.values()
        for key, label in (("report", "comparison report"), ("serve", "review app"))
        if isinstance(value := summary.get(key), str)
    ]
    if lines:
        console.rule("[bold]next")
        console.print("\n".join(lines), highlight=False, soft_wrap=True)


def run_demo(
    backend: str = "forkserver",
    runs_root: str | Path = "runs",
    *,
    console: Console | None = None,
    sections: Sequence[DemoSection] | None = None,
    config: DemoConfig | None = None,
) -> DemoResult:
    """Run every section into a new run of experiment "demo" under ``runs_root``; ``config`` (its backend
    and runs root win over the arguments) sets the sections' sizes.

    The run ends ``finished``, or ``failed`` (with the error in meta.json) if a section raised, in
    which case the exception propagates.
    """
    console = console or Console()
    config = config or DemoConfig(backend=backend, runs_root=Path(runs_root))
    run = RunStore(config.runs_root).create_run(EXPERIMENT, config)
    result = DemoResult(run_dir=run.dir)
    with run:
        for number, section in enumerate(sections if sections is not None else SECTIONS, start=1):
            console.rule(f"[bold]{number}. {section.title}")
            result.summaries[section.title] = section.run(
                DemoContext(config=config, console=console, run=run)
            )
        run.write_artifact_json("summary.json", result.summaries)
    _next_steps(result, console)
    status = "finished" if result.ok else "finished, with sandbox failures"
    console.print(f"run directory: {run.dir} ({status})", highlight=False)
    return result

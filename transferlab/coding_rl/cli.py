"""`transferlab coding ...`: the repository-task corpus, rollouts of scripted agents, the experiments.

Commands::

    transferlab coding tasks build [--out data/coding_tasks] [--seed 0] [--per-operator 2]
                                   [--held-out-fraction 0.2] [--workers 2] [--limit N]
    transferlab coding tasks validate PATH [--json] [--workers 2] [--reruns 3]
    transferlab coding tasks audit [--n-functions N] [--seed S] [--validation-fraction F]
                                   [--test-fraction F] [--json]
    transferlab coding rollout [--agent expert|naive|random] [--tasks held-out] [--episodes 20] ...
    transferlab coding experiment learn|dense-sparse|ablations ...   (see coding_rl/experiments/cli.py)

Exit codes: 0 done (``validate``: every task valid; ``audit``: every must-be-0 figure is 0); 1 a task
failed validation, or a split shares a template or a bug edit with training or lets a wrong patch
pass; 2 bad input (a path that is not a task or a corpus, a malformed task, settings out of range); 3
no sandbox backend can run here.

Only typer and the standard library are imported at module level, so ``transferlab --help`` stays
fast; the tasks, the sandbox and rich are imported inside the commands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from transferlab.coding_rl.experiments.cli import app as experiment_app
from transferlab.coding_rl.train_cli import register as register_train_commands
from transferlab.platform.cli_kit import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNAVAILABLE, echo_progress, fail

if TYPE_CHECKING:
    from transferlab.coding_rl.tasks.corpus import BuildReport
    from transferlab.coding_rl.tasks.repo_task import RepoTask

app = typer.Typer(
    name="coding",
    help="Coding tasks and the agent RL environment.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
tasks_app = typer.Typer(
    name="tasks",
    help="Build and validate the repository-task corpus (seed repos + HumanEval with injected bugs).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(tasks_app, name="tasks")
app.add_typer(experiment_app, name="experiment")
register_train_commands(app)  # train sft|grpo|ppo, eval, model init

WorkersOption = Annotated[
    int, typer.Option("--workers", "-w", min=1, max=64, help="Sandboxes that run jobs in parallel.")
]


@tasks_app.command("build")
def build(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Corpus root: one directory per task + corpus.json.")
    ] = Path("data/coding_tasks"),
    seed: Annotated[int, typer.Option("--seed", help="Seeds mutant sampling and the split.")] = 0,
    per_operator: Annotated[
        int, typer.Option("--per-operator", min=0, help="Mutants sampled per function and operator.")
    ] = 2,
    held_out_fraction: Annotated[
        float,
        typer.Option(
            "--held-out-fraction",
            min=0.0,
            max=1.0,
            help="Share of source functions (with all their mutants) held out.",
        ),
    ] = 0.2,
    workers: WorkersOption = 2,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=0, help="Only the first N HumanEval problems (quick builds).", show_default=False
        ),
    ] = None,
) -> None:
    """Inject bugs into HumanEval's canonical solutions, validate every candidate, write the corpus."""
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable
    from transferlab.coding_rl.tasks.corpus import build_corpus

    try:
        report = build_corpus(
            out,
            seed=seed,
            per_operator=per_operator,
            held_out_fraction=held_out_fraction,
            workers=workers,
            progress=True,
            limit=limit,
        )
    except SandboxUnavailable as err:
        fail(str(err), EXIT_UNAVAILABLE)
    except (OSError, ValueError) as err:
        fail(str(err), EXIT_BAD_INPUT)
    _print_build(report)


def _print_build(report: BuildReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title="mutation operators: candidates and validation survivors", title_justify="left")
    table.add_column("operator", no_wrap=True)
    for column in ("candidates", "produced", "survived", "survival", "dropped"):
        table.add_column(column, justify="right")
    totals = report.totals()
    for row in [*report.operators.values(), totals]:
        table.add_row(
            row.operator,
            str(row.candidates),
            str(row.produced),
            str(row.survived),
            f"{100 * row.survival:.0f}%",
            str(sum(row.dropped.values())),
        )
    console.print(table)
    typer.echo("why candidates were dropped (all operators):")
    for reason, n in sorted(totals.dropped.items(), key=lambda kv: (-kv[1], kv[0])):
        typer.echo(f"  {n:5d}  {reason}")
    typer.echo("")
    typer.echo(report.markdown_table())
    typer.echo("")
    typer.echo(
        f"splits: train {report.splits.get('train', 0)} tasks ({report.groups.get('train', 0)} functions), "
        f"held-out {report.splits.get('held-out', 0)} tasks ({report.groups.get('held-out', 0)} functions)"
    )
    typer.echo(
        f"HumanEval: {report.functions.get('humaneval_problems', 0)} problems, "
        f"{report.functions.get('with_tests', 0)} with converted tests, "
        f"{report.functions.get('with_5_tests', 0)} with at least 5, "
        f"{report.functions.get('with_validated_task', 0)} with a validated task"
    )
    typer.echo(report.summary() + f" (backend {report.backend})")


def _load_tasks(path: Path) -> list[RepoTask]:
    """One task directory, or every task under a corpus root; exits with code 2 on bad input."""
    from transferlab.coding_rl.tasks.code_task import TaskError
    from transferlab.coding_rl.tasks.repo_task import load_repo_task

    if not path.exists():
        fail(
            f"{path} does not exist; give a task directory (with task.json) or a corpus root", EXIT_BAD_INPUT
        )
    if not path.is_dir():
        fail(
            f"{path} is a file, not a task; give a task directory (with task.json) or a corpus root",
            EXIT_BAD_INPUT,
        )
    try:
        if (path / "task.json").is_file():
            return [load_repo_task(path)]
        found = sorted(p.parent for p in path.rglob("task.json"))
        if not found:
            fail(
                f"{path} is not a repository task (no task.json) and holds no task directories; "
                "see the task format in transferlab/coding_rl/tasks/repo_task.py",
                EXIT_BAD_INPUT,
            )
        return [load_repo_task(p) for p in found]
    except TaskError as err:
        fail(str(err), EXIT_BAD_INPUT)
    except (OSError, UnicodeDecodeError) as err:
        fail(f"cannot read the task under {path}: {err}", EXIT_BAD_INPUT)


@tasks_app.command("validate")
def validate(
    path: Annotated[
        Path, typer.Argument(help="A task directory (with task.json) or a corpus root.", show_default=False)
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object with every check per task.")
    ] = False,
    workers: WorkersOption = 2,
    reruns: Annotated[
        int, typer.Option("--reruns", min=1, max=10, help="Runs compared for determinism.")
    ] = 3,
) -> None:
    """Check each task: reference passes, buggy fails dev and hidden, >= 5 tests, deterministic, fast."""
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable
    from transferlab.coding_rl.tasks.corpus import open_verifier
    from transferlab.coding_rl.tasks.validate import validate_tasks

    tasks = _load_tasks(path)
    bar = None
    if not as_json and sys.stderr.isatty() and len(tasks) > 1:
        from tqdm import tqdm

        bar = tqdm(total=3 * reruns * len(tasks), desc="validating", unit="job", file=sys.stderr)

    def on_progress(done: int, planned: int) -> None:
        assert bar is not None
        bar.total, bar.n = planned, done
        bar.refresh()

    try:
        with open_verifier(workers) as verifier:
            backend = verifier.backend.name
            results = validate_tasks(
                tasks, verifier, reruns, progress=on_progress if bar is not None else None
            )
    except SandboxUnavailable as err:
        fail(str(err), EXIT_UNAVAILABLE)
    finally:
        if bar is not None:
            bar.close()
    n_ok = sum(r.ok for r in results)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "path": str(path),
                    "ok": n_ok == len(results),
                    "backend": backend,
                    "counts": {"tasks": len(results), "valid": n_ok, "invalid": len(results) - n_ok},
                    "tasks": [r.to_json() for r in results],
                },
                indent=2,
            )
        )
    else:
        for result in results:
            if result.ok:
                typer.echo(f"ok    {result.task_id}")
                continue
            typer.echo(f"FAIL  {result.task_id}")
            for name in result.failed_checks():
                typer.echo(f"      {name}: {result.checks[name].detail}")
        typer.echo(f"{n_ok}/{len(results)} tasks valid (backend {backend})")
    if n_ok != len(results):
        raise typer.Exit(EXIT_FAILED)


TOY_HELD_OUT_FRACTION = 0.25
"""The transfer source's held-out share of toy repositories (validation and test get half each)."""


@tasks_app.command("audit")
def audit(
    n_functions: Annotated[
        int | None,
        typer.Option(
            "--n-functions",
            help="Procedural functions; default: the agent-learn cpu preset's.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            min=0,
            help="Generation seed; default: the agent-learn cpu preset's.",
            show_default=False,
        ),
    ] = None,
    validation_fraction: Annotated[
        float | None,
        typer.Option(
            "--validation-fraction",
            help="Procedural validation share; default: the preset's.",
            show_default=False,
        ),
    ] = None,
    test_fraction: Annotated[
        float | None,
        typer.Option(
            "--test-fraction", help="Procedural test share; default: the preset's.", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Novelty and mutation adequacy of the procedural tasks and the transfer source's toy repositories:
    per split, templates and abstract bug edits shared with train, wrong patches that pass every test."""
    from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS
    from transferlab.coding_rl.tasks import audit as audits
    from transferlab.coding_rl.tasks.toy import OPERATIONS

    preset = AGENT_LEARN_PRESETS["cpu"]
    seed = preset.task_seed if seed is None else seed
    try:
        families = [
            audits.audit_procedural(
                n_functions=preset.n_functions if n_functions is None else n_functions,
                seed=seed,
                validation_fraction=preset.validation_fraction
                if validation_fraction is None
                else validation_fraction,
                test_fraction=preset.test_fraction if test_fraction is None else test_fraction,
            ),
            audits.audit_toy(
                seed, tuple(sorted(OPERATIONS)), TOY_HELD_OUT_FRACTION / 2, TOY_HELD_OUT_FRACTION / 2
            ),
        ]
    except ValueError as err:
        fail(str(err), EXIT_BAD_INPUT)
    failures = [line for family in families for line in family.failures()]
    if as_json:
        data = {"ok": not failures, "failures": failures, "families": [f.to_json() for f in families]}
        typer.echo(json.dumps(data, indent=2))
    else:
        for family in families:
            shown = ", ".join(f"{k} {v}" for k, v in family.settings.items())
            typer.echo(f"{family.family} ({shown}):\n")
            typer.echo(audits.markdown(family) + "\n")
        typer.echo(
            "ok: every must-be-0 figure is 0" if not failures else "FAILED:\n  " + "\n  ".join(failures)
        )
    if failures:
        raise typer.Exit(EXIT_FAILED)


# ------------------------------------------------------------------------------------------- rollout


@app.command("rollout")
def rollout(
    agent: str = typer.Option("expert", "--agent", help="expert | naive | random"),
    tasks: str = typer.Option("held-out", "--tasks", help="train | held-out | seed | all"),
    episodes: int = typer.Option(20, "--episodes", "-n", help="Episodes to run (tasks cycle)."),
    workers: int = typer.Option(2, "--workers", "-w", help="Environments stepped in parallel."),
    rewards: str = typer.Option("dense", "--rewards", help="dense | sparse"),
    max_steps: int = typer.Option(10, "--max-steps", help="Step limit per episode."),
    seed: int = typer.Option(0, "--seed", help="Seeds task order and the random agent."),
    corpus: Path = typer.Option(
        Path("data/coding_tasks"), "--corpus", help="Task corpus (built if missing)."
    ),
    backend: str = typer.Option("forkserver", "--backend", "-b", help="forkserver | subprocess | docker"),
    runs_root: Path = typer.Option(Path("runs"), "--runs-root", help="Where run directories go."),
) -> None:
    """Run a scripted agent on CodeRepair-v0; write trajectories.parquet and metrics to a run directory."""
    from transferlab.platform.config import ConfigError

    try:
        summary, run_dir = run_rollout(
            agent=agent,
            tasks=tasks,
            episodes=episodes,
            workers=workers,
            rewards=rewards,
            max_steps=max_steps,
            seed=seed,
            corpus_dir=str(corpus),
            backend=backend,
            runs_root=runs_root,
        )
    except (ConfigError, FileNotFoundError) as err:
        fail(str(err), EXIT_BAD_INPUT)
    typer.echo(
        f"success rate {summary.success_rate:.1%} ({summary.successes}/{summary.episodes}), "
        f"mean return {summary.mean_return:+.2f}, {summary.mean_steps:.1f} steps/episode"
    )
    typer.echo(
        f"{summary.episodes_per_s:.1f} episodes/s, {summary.steps_per_s:.1f} env steps/s, "
        f"{summary.sandbox_share:.0%} of step time in the sandbox ({workers} workers)"
    )
    typer.echo(f"run directory: {run_dir}")


def run_rollout(runs_root: Path = Path("runs"), **settings: Any) -> tuple[Any, Path]:
    """Build the config, run the episodes with a progress bar, and record everything in a run dir."""
    from rich.progress import Progress

    from transferlab.coding_rl.rollout import RolloutConfig, load_tasks, open_sandbox, run_batched
    from transferlab.platform.runstore import RunStore
    from transferlab.platform.trajectory import TrajectoryWriter

    config = RolloutConfig.build(**settings)
    if config.tasks != "seed" and not (Path(config.corpus_dir) / "corpus.json").is_file():
        echo_progress(
            f"no task corpus at {config.corpus_dir}: building it first with the defaults (a few minutes, "
            "once; `transferlab coding tasks build --out DIR` makes one ahead of time)"
        )
    task_list = load_tasks(config.tasks, Path(config.corpus_dir))
    if not task_list:
        raise FileNotFoundError(f"the corpus at {config.corpus_dir} has no {config.tasks!r} tasks")
    sandbox = open_sandbox(config.backend, config.workers)
    with RunStore(runs_root).create_run("coding-rollout", config, seed=config.seed) as run:
        writer = TrajectoryWriter(run.dir / "trajectories.parquet")
        done = [0]
        with Progress(transient=True) as progress:
            bar = progress.add_task(f"{config.agent} on {config.tasks}", total=config.episodes)

            def record(traj: Any) -> None:
                writer.add(traj)
                run.logger.log(
                    done[0],
                    {
                        "rollout/return": traj.total_reward,
                        "rollout/steps": len(traj),
                        "rollout/success": float(traj.steps[-1].info.get("success") is True),
                    },
                )
                done[0] += 1
                progress.advance(bar)

            try:
                _, summary = run_batched(
                    task_list,
                    config.agent,
                    config.episodes,
                    config.workers,
                    sandbox,
                    rewards=config.rewards,
                    max_steps=config.max_steps,
                    seed=config.seed,
                    on_episode=record,
                )
            finally:
                sandbox.close()
                writer.close()
        run.logger.log(config.episodes, summary.as_metrics())
        run.write_artifact_json(
            "summary.json",
            {
                **summary.as_metrics(),
                "episodes": summary.episodes,
                "successes": summary.successes,
                "wall_s": summary.wall_s,
            },
        )
    return summary, run.dir

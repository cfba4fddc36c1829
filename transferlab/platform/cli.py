"""The ``transferlab`` command line.

Commands::

    transferlab --version
    transferlab demo [--backend B] [--runs-root DIR]     # the main job (see transferlab.platform.demo)
    transferlab runs list [--experiment X] [--runs-root DIR]
    transferlab sandbox grade TASK.json SOLUTION.py [--backend B] [--json] [--workers N]
    transferlab sandbox build-image [--image NAME] [--mirror URL]
    transferlab sandbox humaneval [--limit N] [--backend B] [--workers N]
    transferlab coding tasks build [--out DIR] [--seed N] [--per-operator N] [--held-out-fraction F]
    transferlab coding tasks validate PATH [--json] [--workers N]

Module import stays light (typer and the stdlib; the sandbox sub-app's module is light too):
pydantic, pandas, rich and the domain code are imported inside the command functions, so
``transferlab --help`` is fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import transferlab
from transferlab.coding_rl.cli import app as coding_app
from transferlab.coding_rl.sandbox.cli import Backend
from transferlab.coding_rl.sandbox.cli import app as sandbox_app

app = typer.Typer(
    name="transferlab",
    help="Which parts of agent RL carry over from coding agents to an ecommerce operations assistant, "
    "measured with running code.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: typer's rich help costs ~0.35 s of imports per call
)
runs_app = typer.Typer(
    name="runs", help="Inspect the run store.", no_args_is_help=True, rich_markup_mode=None
)

app.add_typer(sandbox_app, name="sandbox")
app.add_typer(runs_app, name="runs")
app.add_typer(coding_app, name="coding")

RunsRootOption = Annotated[
    Path, typer.Option("--runs-root", help="Root directory of the run store (<root>/<experiment>/<run-id>/).")
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"transferlab {transferlab.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Which parts of agent RL carry over from coding agents to an ecommerce operations assistant."""


@app.command()
def demo(
    backend: Annotated[
        Backend,
        typer.Option(
            "--backend",
            "-b",
            case_sensitive=False,
            help="Sandbox backend; if it is unavailable here the demo falls back to subprocess.",
        ),
    ] = Backend.forkserver,
    runs_root: RunsRootOption = Path("runs"),
    only: Annotated[
        list[int] | None,
        typer.Option("--only", help="Run only these sections (by number; repeat the option for several)."),
    ] = None,
) -> None:
    """The main job: every demo section, recorded as a run in the run store (experiment "demo")."""
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable
    from transferlab.platform.config import ConfigError
    from transferlab.platform.demo import SECTIONS, run_demo

    if only and not all(1 <= n <= len(SECTIONS) for n in only):
        typer.echo(f"error: --only takes section numbers 1..{len(SECTIONS)}, got {only}", err=True)
        raise typer.Exit(2)
    sections = [s for n, s in enumerate(SECTIONS, start=1) if not only or n in only]
    try:
        result = run_demo(backend=backend.value, runs_root=runs_root, sections=sections)
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    except SandboxUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(3) from None
    if not result.ok:
        raise typer.Exit(1)


@runs_app.command("list")
def runs_list(
    experiment: Annotated[
        str | None,
        typer.Option("--experiment", "-e", help="Only this experiment's runs.", show_default=False),
    ] = None,
    runs_root: RunsRootOption = Path("runs"),
) -> None:
    """List runs, newest first: experiment, run id, status, created."""
    from rich.console import Console
    from rich.table import Table

    from transferlab.platform.runstore import RunStore

    try:
        infos = RunStore(runs_root).list_runs(experiment)
    except (ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if not infos:
        where = f"experiment {experiment!r} under {runs_root}" if experiment else str(runs_root)
        typer.echo(f"no runs in {where}")
        return
    table = Table(title=f"runs in {runs_root}", title_justify="left")
    for column in ("experiment", "run id", "status", "created (UTC)"):
        table.add_column(column, no_wrap=column != "experiment")
    colours = {"finished": "green", "failed": "red", "running": "yellow"}
    for info in infos:
        status = f"[{colours.get(info.status, 'white')}]{info.status}[/]"
        table.add_row(info.experiment, info.run_id, status, info.created_at[:19].replace("T", " "))
    Console(highlight=False).print(table)


def main() -> None:
    """Entry point of the ``transferlab`` script."""
    app()


if __name__ == "__main__":
    main()

"""The ``transferlab`` command line.

Commands::

    transferlab --version
    transferlab demo [--backend B] [--runs-root DIR]     # the main job (see transferlab.demo)
    transferlab compare [--preset smoke|quick|cpu] [--out DIR] [--json]  # the coding-vs-ecommerce table
    transferlab runs list [--experiment X] [--runs-root DIR]
    transferlab runs compare RUN [RUN ...] [--metric KEY ...] [--runs-root DIR] [--plot PATH]
    transferlab sandbox grade TASK.json SOLUTION.py [--backend B] [--json] [--workers N]
    transferlab sandbox build-image [--image NAME] [--mirror URL]
    transferlab sandbox humaneval [--limit N] [--backend B] [--workers N]
    transferlab coding tasks build [--out DIR] [--seed N] [--per-operator N] [--held-out-fraction F]
    transferlab coding tasks validate PATH [--json] [--workers N]
    transferlab ops experiment learn|transfer [--preset P] [--report-dir DIR] ...   # see comparison.cli

Module import stays light (typer and the stdlib; the sandbox sub-app's module is light too):
pydantic, pandas, rich and the domain code are imported inside the command functions, so
``transferlab --help`` is fast.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

import transferlab
from transferlab.coding_rl.cli import app as coding_app
from transferlab.coding_rl.sandbox.cli import Backend
from transferlab.coding_rl.sandbox.cli import app as sandbox_app
from transferlab.comparison.cli import app as ops_app
from transferlab.human_review.cli import app as review_app
from transferlab.offline.cli import app as offline_app
from transferlab.platform.cli_kit import EXIT_FAILED, EXIT_UNAVAILABLE, echo_progress, fail, run_app
from transferlab.simulator.cli import app as sim_app

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table
    from rich.text import Text

    from transferlab.platform.runstore import RunInfo

app = typer.Typer(
    name="transferlab",
    help="Which parts of agent RL carry over from coding agents to an ecommerce operations assistant, "
    "measured with running code.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # run_app prints one error line; --debug the plain traceback
    rich_markup_mode=None,  # plain help: typer's rich help costs ~0.35 s of imports per call
)
runs_app = typer.Typer(
    name="runs", help="Inspect the run store.", no_args_is_help=True, rich_markup_mode=None
)

results_app = typer.Typer(
    name="results", help="Check the committed results.", no_args_is_help=True, rich_markup_mode=None
)

app.add_typer(sandbox_app, name="sandbox")
app.add_typer(runs_app, name="runs")
app.add_typer(results_app, name="results")
app.add_typer(coding_app, name="coding")
app.add_typer(sim_app, name="sim")
app.add_typer(offline_app, name="offline")
app.add_typer(review_app, name="review")
app.add_typer(ops_app, name="ops")

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
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Show the traceback of an error instead of one 'error:' line (may go anywhere on the line).",
        ),
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
    from transferlab.demo import SECTIONS, run_demo
    from transferlab.platform.config import ConfigError

    if only and not all(1 <= n <= len(SECTIONS) for n in only):
        fail(f"--only takes section numbers 1..{len(SECTIONS)}, got {only}")
    sections = [s for n, s in enumerate(SECTIONS, start=1) if not only or n in only]
    try:
        result = run_demo(backend=backend.value, runs_root=runs_root, sections=sections)
    except ConfigError as err:
        fail(str(err))
    except SandboxUnavailable as err:
        fail(str(err), EXIT_UNAVAILABLE)
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def compare(
    preset: Annotated[
        str,
        typer.Option(
            "--preset",
            help="smoke (seconds, a check), quick (a few minutes, the demo's) or cpu (the committed report).",
        ),
    ] = "quick",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run directory for the report (default: <runs-root>/compare/<run-id>)."),
    ] = None,
    runs_root: RunsRootOption = Path("runs"),
    ops_result: Annotated[
        Path | None,
        typer.Option(
            "--ops-result",
            help="The transfer experiment's summary.json with the ops SFT + GRPO runs "
            "(default: docs/results/transfer/summary.json).",
        ),
    ] = None,
    ops_learn_result: Annotated[
        Path | None,
        typer.Option(
            "--ops-learn-result",
            help="The ops-learn experiment's result.json "
            "(default: docs/results/ops_learn/seven_seeds/result.json, seven seeds pooled).",
        ),
    ] = None,
    human_agreement: Annotated[
        Path | None,
        typer.Option(
            "--human-agreement",
            help="JSON from `transferlab review reports agreement --out FILE` (rubric vs reviewers).",
        ),
    ] = None,
    results_dir: Annotated[
        Path | None,
        typer.Option(
            "--results-dir",
            help="The committed results to read cells from (default: docs/results here, else the "
            "repository's beside the package).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print result.json instead of the tables.")] = False,
) -> None:
    """The coding-vs-ecommerce table of domain properties, measured; then the readiness checks.

    The table: determinism, reward delay, parallel exploration, cost per trial and reward objectivity
    for each task family. The readiness checks: four questions to answer before RL (is the reward
    trustworthy, can the policy explore different outcomes, can the environment be repeated, is the
    gain worth the cost) and a three-layer diagnosis of where an agent fails (information and
    interface, basic behaviour, sequential decisions).
    """
    from transferlab.comparison.compare import PRESET_ALIASES, PRESETS, check_inputs, run_compare, table_text
    from transferlab.platform.cli_kit import canonical_preset
    from transferlab.platform.runstore import new_run_id, recorded_run

    try:
        preset = canonical_preset(preset, PRESETS, PRESET_ALIASES)
    except ValueError as err:
        fail(str(err))
    for option, path in (
        ("--ops-result", ops_result),
        ("--ops-learn-result", ops_learn_result),
        ("--human-agreement", human_agreement),
    ):
        if path is not None and not path.is_file():
            fail(f"{option} {path} does not exist; give an existing JSON file")
    config = PRESETS[preset].model_copy(
        update={
            "ops_result": str(ops_result) if ops_result else None,
            "ops_learn_result": str(ops_learn_result) if ops_learn_result else None,
            "human_agreement": str(human_agreement) if human_agreement else None,
            **({"results_dir": str(results_dir)} if results_dir else {}),
        }
    )
    if results_dir is not None and not results_dir.is_dir():
        fail(f"--results-dir {results_dir} is not a folder; give the one holding coding_learn/, ops_learn/")
    try:
        check_inputs(config)
    except ValueError as err:
        fail(str(err))
    run_dir = out or runs_root / "compare" / new_run_id()
    options = [f"--preset {preset}"] + [
        f"{flag} {value}"
        for flag, value in (
            ("--out", out),
            ("--ops-result", ops_result),
            ("--ops-learn-result", ops_learn_result),
            ("--human-agreement", human_agreement),
            ("--results-dir", results_dir),
        )
        if value is not None
    ]
    with recorded_run(run_dir, "compare", config):
        result = run_compare(
            config, run_dir, progress=echo_progress, command="transferlab compare " + " ".join(options)
        )
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=1, default=str))
        return
    typer.echo(table_text(result))
    typer.echo(f"\nreport: {run_dir / 'report.md'} and {run_dir / 'report.html'} ({result.wall_s:.0f} s)")


@results_app.command("check")
def results_check(
    root: Annotated[
        Path, typer.Argument(help="The folder of committed results (every result.json below it).")
    ] = Path("docs/results"),
    strict: Annotated[
        bool, typer.Option("--strict", help="A result without provenance fails too (not only listed).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Validate every result.json: schema, splits scored and tuned on, provenance. Exit 1 on a failure."""
    from transferlab.platform.result_check import check_results, failures

    if not root.is_dir():
        fail(f"{root} is not a folder; pass the folder of committed results (e.g. docs/results)")
    findings = check_results(root)
    failed = failures(findings, strict)
    n_files = len(list(root.rglob("result.json")))
    if as_json:
        typer.echo(json.dumps([f.__dict__ for f in findings], indent=1))
    else:
        for f in findings:
            typer.echo(f"{f.level}: {f.path}: {f.message}")
        legacy = sum(f.level == "legacy" for f in findings)
        typer.echo(f"{n_files} results checked: {len(failed)} failing, {legacy} without provenance (legacy)")
    if failed:
        raise typer.Exit(EXIT_FAILED)


@results_app.command("findings")
def results_findings(
    results_dir: Annotated[
        Path, typer.Option("--results-dir", help="The folder of committed results.")
    ] = Path("docs/results"),
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            help="Put the table between the findings markers of this file (README.md).",
            show_default=False,
        ),
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(
            "--check", help="Exit 1 when this file's table differs from the results.", show_default=False
        ),
    ] = None,
) -> None:
    """README's findings table from the committed results: each claim's t-interval over its seeds."""
    from transferlab.comparison.findings import findings_block, replace_block
    from transferlab.platform.io import atomic_write_text

    try:
        block = findings_block(results_dir)
    except ValueError as exc:
        fail(str(exc))
    for path in (p for p in (write, check) if p is not None):
        if not path.is_file():
            fail(f"{path} is not a file; pass the README that holds the findings markers")
    if write is not None:
        text = write.read_text(encoding="utf-8")
        try:
            atomic_write_text(write, replace_block(text, block))
        except ValueError as exc:
            fail(str(exc))
        typer.echo(f"wrote the findings table into {write}")
    elif check is not None:
        text = check.read_text(encoding="utf-8")
        if block not in text:
            typer.echo(f"{check}: the findings table differs from the results; run `transferlab results "
                       f"findings --write {check}`", err=True)  # fmt: skip
            raise typer.Exit(EXIT_FAILED)
        typer.echo(f"{check}: the findings table matches the results")
    else:
        typer.echo(block)


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
        fail(str(err))
    if not infos:
        where = f"experiment {experiment!r} under {runs_root}" if experiment else str(runs_root)
        typer.echo(f"no runs in {where}")
        return
    table = Table(title=f"runs in {runs_root}", title_justify="left")
    for column in ("experiment", "run id", "status", "created (UTC)"):
        table.add_column(column, no_wrap=column != "experiment")
    colours = {"finished": "green", "failed": "red", "running": "yellow", "interrupted": "magenta"}
    for info in infos:
        status = f"[{colours.get(info.status, 'white')}]{info.status}[/]"
        table.add_row(info.experiment, info.run_id, status, info.created_at[:19].replace("T", " "))
    Console(highlight=False).print(table)


# ------------------------------------------------------------------------------------ runs compare

MAX_DEFAULT_METRICS = 20
"""``runs compare`` shows at most this many metric keys unless ``--metric`` picks them."""


class _CompareError(Exception):
    """A ``runs compare`` problem to report as ``error: ...`` with exit code 2."""


def _resolve_run(ref: str, root: Path) -> Path:
    """A RUN argument -> its run directory: a path, ``<experiment>/<run-id>`` under root, or a unique id."""
    from glob import escape

    from transferlab.platform.runstore import META_FILE

    if (Path(ref) / META_FILE).is_file():
        return Path(ref)
    parts = [p for p in ref.split("/") if p]
    if len(parts) == 2 and ".." not in parts and (root / parts[0] / parts[1] / META_FILE).is_file():
        return root / parts[0] / parts[1]
    if len(parts) == 1 and parts[0] not in (".", ".."):
        found = sorted(p.parent for p in root.glob(f"*/{escape(parts[0])}/{META_FILE}"))
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(f"{p.parent.name}/{p.name}" for p in found)
            raise _CompareError(
                f"run id {ref!r} is ambiguous under {root}: it is in {len(found)} experiments ({names}); "
                "pass <experiment>/<run-id> instead"
            )
    where = f"{ref} is not a run directory (it has no {META_FILE})"
    if len(parts) == 1:
        where += f", and no experiment under {root} has a run with that id"
    elif len(parts) == 2:
        where += f", and neither is {root / parts[0] / parts[1]}"
    if not root.is_dir():
        where += f" ({root} does not exist; pass --runs-root)"
    raise _CompareError(f"no run {ref!r}: {where}; `transferlab runs list --runs-root {root}` lists the runs")


def _keys(n: int) -> str:
    return f"{n} key" if n == 1 else f"{n} keys"


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _metric_cell(metrics: pd.DataFrame, key: str) -> Text:
    from rich.text import Text

    from transferlab.platform.run_compare import summarize

    summary = summarize(metrics, key)
    if summary is None:
        return Text("—", style="dim")
    cell = Text(f"{_num(summary.last)} @ {summary.step}")
    if summary.points > 1:
        cell.append(f"\nmin {_num(summary.min)} · max {_num(summary.max)}", style="dim")
    return cell


def _pick_metrics(frames: Sequence[pd.DataFrame], wanted: Sequence[str] | None) -> tuple[list[str], str]:
    """The metric keys to show, and a note on how they were picked."""
    from transferlab.platform.metrics import validate_key

    if wanted:
        try:
            return list(dict.fromkeys(validate_key(k) for k in wanted)), "metrics: picked with --metric"
        except ValueError as err:
            raise _CompareError(str(err)) from None
    common = sorted(set.intersection(*(set(df["key"]) for df in frames)))
    if not common:
        return [], "metrics: no key is logged by every run; pick keys with --metric"
    note = f"metrics: the {_keys(len(common))} every run logged"
    if len(common) > MAX_DEFAULT_METRICS:
        shown = f"the first {MAX_DEFAULT_METRICS} of {len(common)}"
        note = f"metrics: {shown} keys every run logged (pick others with --metric)"
    return common[:MAX_DEFAULT_METRICS], note


def _compare_table(
    infos: Sequence[RunInfo],
    labels: Sequence[str],
    configs: Sequence[Mapping[str, Any]],
    differ: Sequence[str],
) -> Table:
    from rich.table import Table
    from rich.text import Text

    from transferlab.platform.run_compare import config_value

    table = Table()
    table.add_column("", style="bold", no_wrap=True)
    for label in labels:
        table.add_column(label, no_wrap=True)
    colours = {"finished": "green", "failed": "red", "running": "yellow", "interrupted": "magenta"}
    table.add_row("experiment", *(Text(i.experiment) for i in infos))
    table.add_row("status", *(Text(i.status, style=colours.get(i.status, "")) for i in infos))
    table.add_row("created (UTC)", *(Text(i.created_at[:19].replace("T", " ")) for i in infos))
    if differ:
        table.add_section()
    for key in differ:
        cells = [Text(config_value(c[key])) if key in c else Text("—", style="dim") for c in configs]
        table.add_row(Text(f"config.{key}"), *cells)
    return table


def _plot_compare(
    path: Path, labels: Sequence[str], frames: Sequence[pd.DataFrame], keys: Sequence[str]
) -> None:
    """One panel per metric key, one line per run (same colour in every panel); written atomically."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from transferlab.platform.io import atomic_write_bytes
    from transferlab.platform.reports import Curve, draw_curves, figure_png
    from transferlab.platform.run_compare import metric_series

    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(4.8 * ncols, 3.2 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, key in zip(axes, keys, strict=False):
        series = {}
        for i, (label, df) in enumerate(zip(labels, frames, strict=True)):
            values = metric_series(df, key)
            if not values.empty:
                series[label] = Curve(values.index.to_numpy(), values.to_numpy(), color=f"C{i % 10}")
        draw_curves(ax, series, xlabel="step", ylabel="", title=key, legend=False)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=f"C{i % 10}", label=label) for i, label in enumerate(labels)]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(4, len(labels)), frameon=False)
    atomic_write_bytes(path, figure_png(fig))


@runs_app.command("compare")
def runs_compare(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Runs to compare: a run directory, <experiment>/<run-id> under --runs-root, "
            "or a run id that is unique under --runs-root.",
            metavar="RUN",
            show_default=False,
        ),
    ],
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help=f"Metric key to show (repeat for several); default: the keys every run logged, "
            f"at most {MAX_DEFAULT_METRICS}.",
            metavar="KEY",
            show_default=False,
        ),
    ] = None,
    runs_root: RunsRootOption = Path("runs"),
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also write a PNG of the metrics' curves: one panel per metric, one line per run.",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Runs side by side: status, the config values that differ, and each metric's last value @ step."""
    from rich.console import Console

    from transferlab.platform.metrics import read_metrics
    from transferlab.platform.run_compare import differing_keys, read_config
    from transferlab.platform.runstore import METRICS_FILE, RunInfo

    try:
        dirs = [_resolve_run(ref, runs_root) for ref in runs]
        seen = [d.resolve() for d in dirs]
        for ref, d in zip(runs, seen, strict=True):
            if seen.count(d) > 1:
                raise _CompareError(f"run {ref!r} ({d}) is given more than once; pass each run once")
        infos = [RunInfo.from_dir(d) for d in dirs]
        configs = [read_config(d) for d in dirs]
        frames = [read_metrics(d / METRICS_FILE, missing_ok=True) for d in dirs]
        keys, metric_note = _pick_metrics(frames, metric)
        if plot is not None and not keys:
            raise _CompareError(
                "nothing to plot: no metric key is logged by every run; pick keys with --metric"
            )
    except (_CompareError, OSError, ValueError) as err:
        fail(str(err))
    ids = [i.run_id for i in infos]
    labels = [i.run_id if ids.count(i.run_id) == 1 else f"{i.experiment}/{i.run_id}" for i in infos]
    differ, n_equal = differing_keys(configs)
    table = _compare_table(infos, labels, configs, differ)
    if keys:
        table.add_section()
    for key in keys:
        table.add_row(key, *(_metric_cell(df, key) for df in frames))
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    console.print(table)
    console.print(f"config: {_keys(len(differ))} differ; {n_equal} equal in every run (hidden)", style="dim")
    console.print(f"{metric_note}; cells: last value @ step, then min · max over steps", style="dim")
    if plot is not None:
        try:
            _plot_compare(plot, labels, frames, keys)
        except OSError as err:
            fail(f"cannot write the plot to {plot}: {err}")
        console.print(f"wrote {plot}")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``transferlab`` script: the app under the one error contract (``--debug``
    anywhere shows a traceback instead of one ``error:`` line)."""
    run_app(app, argv, prog_name="transferlab")


if __name__ == "__main__":
    main()

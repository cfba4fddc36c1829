"""`transferlab sim ...`: the ecommerce market — ground-truth world, logs, learned simulator, real data.

Commands::

    transferlab sim generate-logs --out DIR [--days 365] [--customers 2000] [--seed 0] [--epsilon 0.1]
    transferlab sim cdnow-forecast FILE [--calibration-end 1997-09-30] [--holdout-end 1998-06-30] [--json]
    transferlab sim obd-ctr --train RANDOM_CSV --eval BTS_CSV [--item-context CSV] [--json]

Exit codes: 0 done; 2 bad input (a file that is missing or malformed, a bad option).

Only typer and the standard library are imported at module level, so ``transferlab --help`` stays
fast; numpy, pandas, scikit-learn and the simulator are imported inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

EXIT_OK = 0
EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="sim",
    help="The ecommerce market: ground-truth world, historical logs, learned simulator, real data.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


# ---------------------------------------------------------------------------------------------- logs


@app.command("generate-logs")
def generate_logs_command(
    out: Annotated[Path, typer.Option("--out", help="New directory for the Parquet logs.")],
    days: Annotated[int, typer.Option("--days", help="Days of history (at least 7).")] = 365,
    customers: Annotated[int, typer.Option("--customers", help="Customers in the world.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the world and the marketer.")] = 0,
    epsilon: Annotated[
        float, typer.Option("--epsilon", help="Share of the marketer's choices made uniformly at random.")
    ] = 0.1,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Run the ground-truth world under the marketer's behaviour policy and write the logs as Parquet."""
    import json

    from transferlab.platform.config import ConfigError
    from transferlab.simulator.logs import LogError, LogSpec, generate_logs, write_logs
    from transferlab.simulator.world_config import WorldConfig

    try:
        spec = LogSpec(days=days, epsilon=epsilon, world=WorldConfig.build(n_customers=customers, seed=seed))
        if out.exists() and any(out.iterdir()):
            raise LogError(f"{out} already exists and is not empty: choose a new --out or remove it")
    except (ConfigError, LogError, ValueError) as exc:
        fail(str(exc))
    with _progress(f"simulating {days} days", total=days, quiet=as_json) as advance:
        logs = generate_logs(spec, progress=lambda done, total: advance())
    write_logs(logs, out)
    summary = {
        "out": str(out),
        **logs.manifest["rows"],
        "campaigns_launched": int(logs.campaigns["launched"].sum()),
        "campaigns_matured": int(logs.campaigns["matured"].sum()),
    }
    if as_json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value}")


@contextmanager
def _progress(description: str, total: int, quiet: bool) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr (nothing when ``quiet``); yields ``advance()``."""
    if quiet:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


# ------------------------------------------------------------------------------------------- obd-ctr


@app.command("obd-ctr")
def obd_ctr_command(
    train: Annotated[Path, typer.Option("--train", help="OBD log to fit on, e.g. obd/random/men/men.csv.")],
    eval_log: Annotated[Path, typer.Option("--eval", help="Another policy's OBD log to predict.")],
    item_context: Annotated[
        Path | None, typer.Option("--item-context", help="The campaign's item_context.csv (item features).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the CV split and the bootstraps.")] = 0,
    ipw: Annotated[
        bool, typer.Option("--ipw", help="Weight training impressions by 1/propensity (non-uniform logs).")
    ] = False,
    user_features: Annotated[
        bool, typer.Option("--user-features", help="Also use the hashed user features.")
    ] = False,
    refit_boot: Annotated[
        int, typer.Option("--refit-boot", help="Refits on bootstrap resamples of --train for a CI (0: off).")
    ] = 0,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a calibration plot (PNG) of predicted vs observed.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit the click model on one policy's OBD log and predict another policy's click rate."""
    import json

    from transferlab.simulator.realdata.click_model import ClickModelConfig, obd_ctr

    if refit_boot < 0:
        fail(f"--refit-boot must be 0 (off) or a positive number of refits, got {refit_boot}")
    try:
        config = ClickModelConfig(user_features=user_features, ipw=ipw, seed=seed)
        summary = obd_ctr(train, eval_log, item_context, config, refit_boot=refit_boot, plot=plot)
    except ValueError as exc:
        fail(str(exc))
    train_info = summary["train"]
    if isinstance(train_info, dict) and not train_info["uniform_propensity"] and not ipw:
        print("note: --train's propensities are not uniform; --ipw reweights them", file=sys.stderr)
    if as_json:
        print(json.dumps(summary))
    else:
        _print_obd_table(summary)


def _print_obd_table(summary: dict[str, object]) -> None:
    """The headline figures of ``obd-ctr`` as a rich table."""
    from rich.console import Console
    from rich.table import Table

    def ci(key: str, digits: int = 4) -> str:
        value = summary.get(key)
        return f"[{value[0]:.{digits}f}, {value[1]:.{digits}f}]" if isinstance(value, list) else ""

    auc = summary["auc"]
    table = Table(title="click model: fitted on --train, evaluated on --eval", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_row("predicted CTR", f"{summary['predicted_ctr']:.4f}", ci("predicted_ctr_ci"))
    if "predicted_ctr_refit_ci" in summary:
        table.add_row("predicted CTR (refits of --train)", "", ci("predicted_ctr_refit_ci"))
    table.add_row("actual CTR", f"{summary['actual_ctr']:.4f}", ci("actual_ctr_ci"))
    table.add_row("relative error", f"{summary['relative_error']:.3f}", "")
    table.add_row("AUC", "n/a" if auc is None else f"{auc:.3f}", "")
    table.add_row("log loss", f"{summary['log_loss']:.5f}", "")
    table.add_row("baseline log loss (constant rate)", f"{summary['baseline_log_loss']:.5f}", "")
    diff = f"{summary['log_loss_diff']:+.5f}"
    table.add_row("log loss, ours minus baseline", diff, ci("log_loss_diff_ci", 5))
    Console().print(table)

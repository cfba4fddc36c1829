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

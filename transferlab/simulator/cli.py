"""`transferlab sim ...`: the ecommerce market — ground-truth world, logs, learned simulator, real data.

Commands::

    transferlab sim cdnow-forecast FILE [--calibration-end 1997-09-30] [--holdout-end 1998-06-30] [--json]
    transferlab sim obd-ctr --train RANDOM_CSV --eval BTS_CSV [--item-context CSV] [--json]

Exit codes: 0 done; 2 bad input (a file that is missing or malformed, a bad option).

Only typer and the standard library are imported at module level, so ``transferlab --help`` stays
fast; numpy, pandas, scikit-learn and the simulator are imported inside the commands.
"""

from __future__ import annotations

import sys
from typing import NoReturn

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

"""The small kit every ``transferlab`` command group uses: exit codes, ``fail``, progress bars.

Exit codes, the same in every command group::

    0 EXIT_OK           done
    1 EXIT_FAILED       the command ran, and what it checked failed (a task is invalid, a demo section failed)
    2 EXIT_BAD_INPUT    bad input: a missing or malformed file, a bad option, a refused request
    3 EXIT_UNAVAILABLE  something this machine or account lacks (no sandbox backend, permission denied)

Only typer and the standard library are imported at module level (rich inside the progress
helpers), so a CLI module that imports this stays fast to import.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def progress_bar(description: str, total: int, quiet: bool = False) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr counting to ``total`` (nothing when ``quiet``); yields ``advance()``."""
    if quiet:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


@contextmanager
def fraction_progress(quiet: bool = False) -> Iterator[Callable[[str, float], None]]:
    """A rich progress bar on stderr driven by ``progress(message, fraction)`` (nothing when ``quiet``).

    When stderr is not a terminal (a log file, CI), a bar would show nothing until the end, so each new
    message is printed as one line with the fraction done and the elapsed time instead."""
    if quiet:
        yield lambda message, fraction: None
        return
    if not sys.stderr.isatty():
        t0 = time.monotonic()
        last = [""]

        def line(message: str, fraction: float) -> None:
            if message != last[0]:
                last[0] = message
                typer.echo(f"... {message} ({fraction:.0%}, {time.monotonic() - t0:.0f} s)", err=True)

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda message, fraction: bar.update(task, description=message, completed=fraction)


def echo_progress(message: str) -> None:
    """A one-line progress note on stderr (``... message``), for long steps without a fraction."""
    typer.echo(f"... {message}", err=True)

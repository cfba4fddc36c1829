"""The small kit every ``transferlab`` command group uses: exit codes, ``fail``, progress bars.

Exit codes, the same in every command group::

    0 EXIT_OK           done
    1 EXIT_FAILED       the command ran, and what it checked failed (a task is invalid, a demo section failed)
    2 EXIT_BAD_INPUT    bad input: a missing or malformed file, a bad option, a refused request
    3 EXIT_UNAVAILABLE  something this machine or account lacks (no sandbox backend, permission denied)

Every ``transferlab`` command runs through :func:`run_app`, the one top-level handler: an exception
that escapes a command becomes one ``error:`` line (exit 2 for bad input -- a ``ValueError`` or an
``OSError`` -- and exit 1 for anything else), and the traceback is shown only with ``--debug`` (or
``TRANSFERLAB_DEBUG=1``).

Only typer and the standard library are imported at module level (rich inside the progress
helpers), so a CLI module that imports this stays fast to import.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130

DEBUG_FLAG = "--debug"
"""Anywhere on the command line (before a ``--``): show the traceback of an error instead of one line."""


_debug = [False]
"""Set by :func:`run_app` when ``--debug`` is on: :func:`fail` then prints the traceback it handles."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``; no traceback unless ``--debug`` is on
    and ``fail`` is called while an exception is being handled (then that exception's traceback first)."""
    if _debug[0] and sys.exc_info()[1] is not None:
        import traceback

        traceback.print_exc()
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def parse_assignments(words: Sequence[str]) -> dict[str, Any]:
    """``a=1 sft.steps=2 x=dense`` -> ``{"a": 1, "sft": {"steps": 2}, "x": "dense"}``.

    Values are read as JSON when they parse (numbers, booleans, lists), else kept as strings; a dotted
    key nests one level. A word without ``=`` raises ValueError naming it.
    """
    out: dict[str, Any] = {}
    for word in words:
        if "=" not in word:
            raise ValueError(f"{word!r} is not field=value (e.g. lr=1e-4 or sft.steps=150)")
        key, raw = word.split("=", 1)
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        head, _, tail = key.partition(".")
        if tail:
            out.setdefault(head, {})[tail] = value
        else:
            out[head] = value
    return out


def canonical_preset(name: str, presets: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """``name`` as one of ``presets`` (an older name in ``aliases`` maps to its new one); a
    ``ValueError`` listing the choices otherwise.

    >>> canonical_preset("full", ["smoke", "cpu"], {"full": "cpu"})
    'cpu'
    """
    choices = list(presets)
    name = (aliases or {}).get(name, name)
    if name not in choices:
        raise ValueError(f"--preset {name!r} is not a preset: use one of {', '.join(choices)}")
    return name


def _split_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` (before any ``--``) and whether it was there (or TRANSFERLAB_DEBUG=1)."""
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    debug = DEBUG_FLAG in args[:end]
    if debug:
        args = [a for a in args[:end] if a != DEBUG_FLAG] + args[end:]
    return args, debug or os.environ.get("TRANSFERLAB_DEBUG", "") == "1"


def describe_error(err: BaseException) -> tuple[str, int]:
    """The one ``error:`` line for an exception that escaped a command, and the exit code.

    A ``ValueError`` or ``OSError`` is bad input the command anticipated (a bad value, a missing,
    unreadable or corrupt file): its message already names the problem and the fix, exit 2. Anything
    else is a bug: its type and message, a pointer to ``--debug``, exit 1."""
    if isinstance(err, OSError):
        where = f" {err.filename}" if err.filename else ""
        return f"{err.strerror or err}{':' if where else ''}{where}", EXIT_BAD_INPUT
    if isinstance(err, ValueError):
        return str(err) or type(err).__name__, EXIT_BAD_INPUT
    return (
        f"unexpected {type(err).__name__}: {err} (a bug: rerun with {DEBUG_FLAG} for the traceback "
        "and report it)",
        EXIT_FAILED,
    )


def run_app(
    app: Callable[..., object], argv: Sequence[str] | None = None, prog_name: str | None = None
) -> NoReturn:
    """Run a typer ``app`` under the one error contract (see the module docstring); never returns."""
    args, debug = _split_debug(sys.argv[1:] if argv is None else argv)
    _debug[0] = debug
    try:
        app(args=args, prog_name=prog_name, standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as err:
        if debug:
            raise
        message, code = describe_error(err)
        typer.echo(f"error: {message}", err=True)
        sys.exit(code)
    finally:
        _debug[0] = False
    sys.exit(EXIT_OK)


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


def eta_text(elapsed: float, fraction: float) -> str:
    """``", about N s left"`` from the pace so far (nothing before 5% or after the end).

    >>> eta_text(30.0, 0.25), eta_text(3.0, 0.01), eta_text(10.0, 1.0)
    (', about 90 s left', '', '')
    """
    if not 0.05 <= fraction < 1.0:
        return ""
    left = elapsed * (1.0 - fraction) / fraction
    return f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left"


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
                elapsed = time.monotonic() - t0
                typer.echo(
                    f"... {message} ({fraction:.0%}, {elapsed:.0f} s{eta_text(elapsed, fraction)})", err=True
                )

        yield line
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda message, fraction: bar.update(task, description=message, completed=fraction)


def echo_progress(message: str) -> None:
    """A one-line progress note on stderr (``... message``), for long steps without a fraction."""
    typer.echo(f"... {message}", err=True)

"""The CLI kit every command group uses: one ``fail``, one set of exit codes, the progress helpers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from transferlab.platform.cli_kit import (
    EXIT_BAD_INPUT,
    EXIT_UNAVAILABLE,
    echo_progress,
    fail,
    fraction_progress,
    progress_bar,
)

PACKAGE = Path(__file__).resolve().parents[2] / "transferlab"
runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)

    @app.command()
    def go(code: int = EXIT_BAD_INPUT, steps: int = 3, quiet: bool = False) -> None:
        with progress_bar("steps", total=steps, quiet=quiet) as advance:
            for _ in range(steps):
                advance()
        with fraction_progress(quiet=quiet) as progress:
            progress("half", 0.5)
        echo_progress("almost")
        fail(f"no good (code {code}); pass a better --code", code)

    return app


@pytest.mark.parametrize("code", [EXIT_BAD_INPUT, EXIT_UNAVAILABLE])
def test_fail_prints_one_error_line_on_stderr_and_exits_with_the_code(code: int) -> None:
    result = runner.invoke(_app(), ["--code", str(code)])
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"error: no good (code {code}); pass a better --code"
    assert "... almost" in result.stderr
    assert "Traceback" not in result.output


def test_quiet_progress_prints_nothing_but_the_note() -> None:
    result = runner.invoke(_app(), ["--quiet"])
    assert result.stderr.splitlines()[0] == "... almost"


def test_no_command_group_defines_its_own_fail() -> None:
    """`fail` lives in the kit; a CLI module that defines another one drifts."""
    own = []
    for path in sorted(PACKAGE.rglob("cli.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own += [
            f"{path.relative_to(PACKAGE)}:{node.name}"
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in ("fail", "_fail")
        ]
    assert own == []


def test_fraction_progress_writes_lines_when_stderr_is_not_a_terminal() -> None:
    result = runner.invoke(_app(), ["--code", str(EXIT_BAD_INPUT)])
    # CliRunner's stderr is not a terminal: the new message is one line with the fraction done
    assert "... half (50%, 0 s)" in result.stderr.splitlines()
    quiet = runner.invoke(_app(), ["--code", str(EXIT_BAD_INPUT), "--quiet"])
    assert "half" not in quiet.stderr

"""The CLI kit every command group uses: one ``fail``, one set of exit codes, the progress helpers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from transferlab.platform.cli_kit import (
    DEBUG_FLAG,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_UNAVAILABLE,
    _split_debug,
    echo_progress,
    eta_text,
    fail,
    fraction_progress,
    parse_assignments,
    progress_bar,
    run_app,
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
    assert "... half (50%, 0 s, about 0 s left)" in result.stderr.splitlines()
    quiet = runner.invoke(_app(), ["--code", str(EXIT_BAD_INPUT), "--quiet"])
    assert "half" not in quiet.stderr


def _raising_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)

    @app.command()
    def go(kind: str = "value", path: str = "missing.json") -> None:
        if kind == "value":
            raise ValueError("--x 7 is too big; pass at most 5")
        if kind == "file":
            open(path, encoding="utf-8").close()
        if kind == "bug":
            raise KeyError("oops")

    return app


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_app(_raising_app(), argv, prog_name="t")
    return int(exit_info.value.code or 0), capsys.readouterr().err


def test_run_app_turns_bad_input_into_one_error_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["--kind", "value"], capsys)
    assert (code, err) == (EXIT_BAD_INPUT, "error: --x 7 is too big; pass at most 5\n")


def test_run_app_names_the_file_of_an_os_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    code, err = _run(["--kind", "file", "--path", str(missing)], capsys)
    assert code == EXIT_BAD_INPUT
    assert err == f"error: No such file or directory: {missing}\n"


def test_run_app_reports_a_bug_in_one_line_with_the_debug_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["--kind", "bug"], capsys)
    assert code == EXIT_FAILED
    assert err.count("\n") == 1 and err.startswith("error: unexpected KeyError: 'oops'")
    assert DEBUG_FLAG in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["first", "last"])
def test_debug_anywhere_lets_the_traceback_through(where: str) -> None:
    argv = ["--kind", "value"]
    argv = [DEBUG_FLAG, *argv] if where == "first" else [*argv, DEBUG_FLAG]
    with pytest.raises(ValueError, match="too big"):
        run_app(_raising_app(), argv, prog_name="t")


def test_debug_after_a_double_dash_is_an_argument_not_the_flag() -> None:
    assert _split_debug(["a", "--", DEBUG_FLAG]) == (["a", "--", DEBUG_FLAG], False)
    assert _split_debug(["a", DEBUG_FLAG, "--", "b"]) == (["a", "--", "b"], True)


def test_run_app_exits_0_when_the_command_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--kind", "fine"], capsys) == (0, "")


def test_eta_is_the_pace_so_far_and_silent_at_the_edges() -> None:
    assert eta_text(30.0, 0.25) == ", about 90 s left"  # 30 s for a quarter: 90 s for the rest
    assert eta_text(60.0, 0.2) == ", about 4 min left"  # 240 s
    assert eta_text(1.0, 0.01) == "" and eta_text(10.0, 1.0) == ""


def test_assignments_read_json_values_and_nest_dotted_keys() -> None:
    got = parse_assignments(["lr=1e-4", "sft.steps=150", "sft.schedule=constant", "flag=true", "xs=[1,2]"])
    assert got == {"lr": 1e-4, "sft": {"steps": 150, "schedule": "constant"}, "flag": True, "xs": [1, 2]}
    assert parse_assignments(["rewards=dense", "note=a=b"]) == {"rewards": "dense", "note": "a=b"}
    with pytest.raises(ValueError, match=r"'sft\.steps' is not field=value"):
        parse_assignments(["lr=1", "sft.steps"])

"""The root `transferlab` CLI: help on every command, --version, `runs list`, a light import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import transferlab
from transferlab.cli import app
from transferlab.demo import DemoConfig
from transferlab.platform.runstore import RunStore

runner = CliRunner()


def _command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path below `command` (groups included), e.g. ("sandbox", "grade")."""
    paths: list[tuple[str, ...]] = [prefix]
    sub = getattr(command, "commands", None)
    if isinstance(sub, dict):
        for name, child in sub.items():
            paths.extend(_command_paths(child, (*prefix, name)))
    return paths


COMMAND_PATHS = _command_paths(typer.main.get_command(app))


def test_root_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for name in ("demo", "sandbox", "runs"):
        assert name in result.stdout


def test_every_command_is_registered() -> None:
    assert {
        ("demo",),
        ("runs",),
        ("runs", "list"),
        ("sandbox",),
        ("sandbox", "grade"),
        ("sandbox", "build-image"),
        ("sandbox", "humaneval"),
    } <= set(COMMAND_PATHS)


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "root")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout
    assert "Traceback" not in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"transferlab {transferlab.__version__}"


def test_runs_list_shows_every_run(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    with store.create_run("demo", DemoConfig()) as finished:
        pass
    failed = store.create_run("other-exp", DemoConfig())
    failed.finish("failed", error="boom")
    store.create_run("demo", DemoConfig(), run_id="live")  # this process owns it: running
    store.create_run("demo", DemoConfig(), run_id="dead").release()  # its owner is gone
    result = runner.invoke(app, ["runs", "list", "--runs-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for text in (finished.run_id, failed.run_id, "demo", "other-exp", "finished", "failed"):
        assert text in result.stdout
    lines = result.stdout.splitlines()
    [live] = [line for line in lines if " live " in line]
    [dead] = [line for line in lines if " dead " in line]
    assert "running" in live and "interrupted" in dead


def test_runs_list_filters_by_experiment(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    kept = store.create_run("demo", DemoConfig())
    other = store.create_run("other-exp", DemoConfig())
    result = runner.invoke(app, ["runs", "list", "--runs-root", str(tmp_path), "--experiment", "demo"])
    assert result.exit_code == 0, result.output
    assert kept.run_id in result.stdout
    assert other.run_id not in result.stdout


def test_runs_list_on_an_empty_store(tmp_path: Path) -> None:
    result = runner.invoke(app, ["runs", "list", "--runs-root", str(tmp_path / "nothing-here")])
    assert result.exit_code == 0, result.output
    assert "no runs" in result.stdout


def test_runs_list_rejects_a_bad_experiment_name(tmp_path: Path) -> None:
    result = runner.invoke(app, ["runs", "list", "--runs-root", str(tmp_path), "--experiment", "../etc"])
    assert result.exit_code == 2
    assert "invalid experiment name" in result.stderr
    assert "Traceback" not in result.output


def test_importing_the_cli_stays_light() -> None:
    """`transferlab --help` must stay fast: no pydantic, pandas, rich, numpy or torch at import time."""
    heavy = ("pydantic", "pandas", "numpy", "torch", "rich", "pyarrow")
    code = f"import sys, transferlab.cli\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_installed_script_help() -> None:
    script = shutil.which("transferlab", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the transferlab script is not installed (pip install -e .)")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "sandbox" in proc.stdout

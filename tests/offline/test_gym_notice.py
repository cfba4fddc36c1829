"""The legacy gym notice d3rlpy's import prints never reaches our users."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOTICE = "Gym has been unmaintained"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)


def test_gym_itself_prints_the_notice() -> None:
    """The control: without our package the notice is there (so the tests below can fail)."""
    assert NOTICE in _run("-c", "import d3rlpy").stderr


def test_importing_our_learners_does_not_print_it() -> None:
    proc = _run("-c", "import sys, transferlab.offline.learners\nprint('gym' in sys.modules)")
    assert proc.stdout.strip() == "True"  # d3rlpy did import gym
    assert NOTICE not in proc.stderr


def test_a_cli_command_that_imports_d3rlpy_shows_only_its_error(tmp_path: Path) -> None:
    proc = _run("-m", "transferlab.cli", "offline", "train", "--logs", str(tmp_path / "none"), "--json")
    assert proc.returncode == 2
    assert NOTICE not in proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr

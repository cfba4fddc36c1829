"""The one run contract: every kind of job writes a run (meta.json, config.json) under --runs-root
that `transferlab runs list` shows as finished. Each job runs for real, at its smallest size."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import main
from transferlab.platform.runstore import RunStore

pytestmark = pytest.mark.slow


def _ok(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code in (0, None), argv


def test_every_job_kind_appears_in_runs_list(tmp_path: Path) -> None:
    root = str(tmp_path / "runs")
    logs, sim = str(tmp_path / "logs"), str(tmp_path / "sim")
    _ok(["sim", "generate-logs", "--out", logs, "--customers", "150", "--days", "60"])
    _ok(["sim", "fit", logs, "--out", sim])
    jobs = {
        "sim-train": ["sim", "train", "--simulator", sim, "--logs", logs, "--episodes", "16"],
        "offline-train": [
            "offline",
            "train",
            "--logs",
            logs,
            "--steps",
            "10",
            "--episodes",
            "2",
            "--fqe-steps",
            "0",
        ],
        "ops-train": ["ops", "train", "--preset", "smoke"],
        "coding-rollout": ["coding", "rollout", "--tasks", "seed", "-n", "2", "-w", "1", "-b", "subprocess"],
        "compare": ["compare", "--preset", "smoke"],
    }
    for argv in jobs.values():
        _ok([*argv, "--runs-root", root])
    runs = RunStore(root).list_runs()
    assert {r.experiment for r in runs} == set(jobs)
    assert {r.status for r in runs} == {"finished"}
    for run in runs:
        assert (Path(root) / run.experiment / run.run_id / "config.json").is_file(), run
    listed = CliRunner().invoke(__import__("transferlab.cli").cli.app, ["runs", "list", "--runs-root", root])
    assert listed.exit_code == 0
    for kind in jobs:
        assert kind in listed.stdout

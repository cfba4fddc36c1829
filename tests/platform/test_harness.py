"""The experiment harness: one owner per run (or per arm when shared), arm metrics that restart cleanly."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from rich.console import Console
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.platform.config import BaseConfig, ConfigError
from transferlab.platform.harness import Experiment
from transferlab.platform.metrics import read_metrics
from transferlab.platform.runstore import RunInUseError, RunStore

HOLD = (
    "import sys, time\n"
    "from transferlab.platform.runstore import RunLock\n"
    "RunLock(sys.argv[1]).acquire(shared=sys.argv[2] == 'shared')\n"
    "print('holding', flush=True)\n"
    "time.sleep(600)\n"
)


class TinyExperimentConfig(BaseConfig):
    seed: int = Field(default=0, description="Seed.")


@contextmanager
def held_by_another_process(directory: Path, shared: bool = False) -> Iterator[int]:
    """Another live process holds ``directory``'s lock for the block; yields its pid."""
    mode = "shared" if shared else "exclusive"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def quiet() -> Console:
    return Console(quiet=True)


def test_arm_logger_restarts_an_arm_unless_its_trainer_resumes(tmp_path: Path) -> None:
    exp, _ = Experiment.open("tiny", TinyExperimentConfig(), tmp_path, None, quiet())
    with exp.arm_logger("sft-seed0") as logger:
        logger.log(0, {"sft/loss": 2.0})
        logger.log(1, {"sft/loss": 1.0})
    path = exp.arm_dir("sft-seed0") / "metrics.parquet"
    with exp.arm_logger("sft-seed0", resume=True) as logger:
        assert logger.num_rows == 2  # kept for a trainer that drops what its checkpoint lacks
    with exp.arm_logger("sft-seed0") as logger:  # the arm starts over: the killed attempt's rows go
        logger.log(0, {"sft/loss": 2.0})
    assert read_metrics(path)["step"].tolist() == [0]


def test_resuming_an_experiment_another_process_runs_is_refused(tmp_path: Path) -> None:
    exp, _ = Experiment.open("coding-learn", TinyExperimentConfig(), tmp_path, None, quiet())
    exp.run.release()
    with held_by_another_process(exp.run.dir) as pid:
        with pytest.raises(RunInUseError, match=f"in use by pid {pid}"):
            Experiment.open("coding-learn", TinyExperimentConfig(), tmp_path, exp.run.dir, quiet())
        res = CliRunner().invoke(app, ["coding", "experiment", "learn", "--resume", str(exp.run.dir)])
    assert res.exit_code == 2 and res.output.count("error:") == 1
    assert f"is in use by pid {pid}" in res.output
    with pytest.raises(ConfigError, match="is a run of 'coding-learn', not of 'tiny'"):
        Experiment.open("tiny", TinyExperimentConfig(), tmp_path, exp.run.dir, quiet())
    again, _ = Experiment.open("coding-learn", TinyExperimentConfig(), tmp_path, exp.run.dir, quiet())
    assert again.run.owned and len(again.run.meta["resumed_at"]) == 1
    bad = CliRunner().invoke(app, ["coding", "experiment", "learn", "--resume", str(tmp_path)])
    assert bad.exit_code == 2 and "is not a run directory" in bad.output


def test_shared_processes_split_the_arms_one_each(tmp_path: Path) -> None:
    first, _ = Experiment.open("tiny", TinyExperimentConfig(), tmp_path, None, quiet(), shared=True)
    first.run.release()
    with held_by_another_process(first.run.dir, shared=True):  # another process on other seeds
        exp, _ = Experiment.open(
            "tiny", TinyExperimentConfig(), tmp_path, first.run.dir, quiet(), shared=True
        )
        assert exp.run.owned
        arm_owner = held_by_another_process(exp.arm_dir("a"))  # ... computing arm "a" right now
        with arm_owner as pid, pytest.raises(RunInUseError, match=f"arm .* is in use by pid {pid}"):
            exp.arm("a", lambda: {"x": 1})
        calls: list[str] = []

        def compute() -> dict[str, Any]:
            calls.append("b")
            return {"x": 2}

        assert exp.arm("b", compute) == {"x": 2} and exp.arm("b", compute) == {"x": 2}
        assert calls == ["b"]
        exp.run.release()
        with pytest.raises(RunInUseError, match="in use by pid"):  # shared holders refuse a sole owner
            RunStore(tmp_path).open_path(exp.run.dir).acquire()


def test_an_arm_prints_one_line_when_no_live_bar_is_drawn(tmp_path: Path) -> None:
    """In a log file (no terminal) the progress bar is not drawn, so each finished arm says so once."""
    text = io.StringIO()
    exp, _ = Experiment.open(
        "tiny", TinyExperimentConfig(), tmp_path, None, Console(file=text, force_terminal=False, width=200)
    )
    with exp.run:
        assert exp.arm("a", lambda: {"x": 1}) == {"x": 1}
        assert exp.arm("a", lambda: {"x": 2}) == {"x": 1}  # saved: not computed, not printed again
    lines = text.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arm a done (")

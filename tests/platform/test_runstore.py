"""RunStore: directory layout, metadata, lifecycle status, listing, comparison, ownership, exact resume."""

from __future__ import annotations

import json
import math
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from pydantic import Field

import transferlab
from transferlab.platform.config import BaseConfig, load_config
from transferlab.platform.io import atomic_write_json
from transferlab.platform.metrics import read_metrics
from transferlab.platform.runstore import (
    STALE_AFTER_S,
    Run,
    RunInUseError,
    RunLock,
    RunStore,
    is_owned,
    new_run_id,
    recorded_run,
)


class DemoConfig(BaseConfig):
    seed: int = Field(default=0, ge=0, description="Random seed.")
    steps: int = Field(default=10, ge=1, description="Training steps.")


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "runs")


def test_create_run_layout_and_meta(store: RunStore) -> None:
    cfg = DemoConfig(seed=5, steps=3)
    run = store.create_run("demo", cfg)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run.run_id)
    assert run.dir == store.root / "demo" / run.run_id
    assert run.config_path == run.dir / "config.json" and run.config_path.is_file()
    assert run.metrics_path == run.dir / "metrics.parquet"
    assert not (run.dir / "artifacts").exists()  # created lazily

    assert load_config(run.config_path) == cfg
    assert run.load_config(DemoConfig) == cfg

    meta = json.loads((run.dir / "meta.json").read_text())
    assert meta["experiment"] == "demo"
    assert meta["run_id"] == run.run_id
    assert meta["status"] == "running"
    assert meta["seed"] == 5  # taken from config.seed
    assert meta["created_at"].endswith("+00:00")
    assert meta["transferlab_version"] == transferlab.__version__
    assert re.fullmatch(r"3\.\d+\.\d+.*", meta["python_version"])
    assert meta["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", meta["git_commit"])
    assert isinstance(meta["hostname"], str) and meta["hostname"]


def test_explicit_seed_and_run_id(store: RunStore) -> None:
    run = store.create_run("demo", DemoConfig(seed=1), run_id="my-run_1.0", seed=99)
    assert run.run_id == "my-run_1.0"
    assert run.meta["seed"] == 99


@pytest.mark.parametrize("name", ["has space", "a/b", "..", ".", "", "ümlaut"])
def test_invalid_names_rejected(store: RunStore, name: str) -> None:
    with pytest.raises(ValueError, match="invalid experiment name"):
        store.create_run(name, DemoConfig())
    with pytest.raises(ValueError, match="invalid run id"):
        store.create_run("demo", DemoConfig(), run_id=name)
    assert not (store.root / "demo").exists() or not any((store.root / "demo").iterdir())


def test_refuses_to_overwrite_existing_run(store: RunStore) -> None:
    run = store.create_run("demo", DemoConfig(seed=1), run_id="r1")
    with pytest.raises(FileExistsError, match=r"already exists.*open_run\('demo', 'r1'\)"):
        store.create_run("demo", DemoConfig(seed=2), run_id="r1")
    assert run.load_config(DemoConfig).seed == 1


def test_new_run_ids_are_unique() -> None:
    assert len({new_run_id() for _ in range(50)}) == 50


def test_artifacts(store: RunStore) -> None:
    run = store.create_run("demo", DemoConfig())
    path = run.write_artifact_json("eval/summary.json", {"b": 2, "a": 1})
    assert path == run.dir / "artifacts" / "eval" / "summary.json"
    assert json.loads(path.read_text()) == {"a": 1, "b": 2}
    assert run.artifact_path("model.pt") == run.artifacts_dir / "model.pt"
    for bad in ("../escape.json", "/abs.json", ""):
        with pytest.raises(ValueError, match="invalid artifact name"):
            run.artifact_path(bad)


def test_context_manager_marks_finished(store: RunStore) -> None:
    with store.create_run("demo", DemoConfig()) as run:
        run.logger.log(1, {"train/loss": 1.0})
    meta = run.meta
    assert meta["status"] == "finished"
    assert meta["finished_at"] >= meta["created_at"]
    assert read_metrics(run.metrics_path)["value"].tolist() == [1.0]  # flushed on finish


def test_context_manager_marks_failed_on_exception(store: RunStore) -> None:
    with pytest.raises(RuntimeError, match="diverged"), store.create_run("demo", DemoConfig()) as run:
        run.logger.log(3, {"train/loss": 9.0})
        raise RuntimeError("diverged")
    meta = run.meta
    assert meta["status"] == "failed"
    assert meta["error"] == "RuntimeError: diverged"
    assert meta["finished_at"] is not None
    assert read_metrics(run.metrics_path)["step"].tolist() == [3]  # metrics survive the failure


def test_explicit_finish_failed_is_kept_by_context_manager(store: RunStore) -> None:
    with store.create_run("demo", DemoConfig()) as run:
        run.finish("failed", error="eval crashed")
    assert run.status == "failed"
    with pytest.raises(ValueError, match="status must be"):
        run.finish("done")  # type: ignore[arg-type]


def test_list_runs_newest_first_and_by_experiment(store: RunStore) -> None:
    assert store.list_runs() == []
    store.create_run("alpha", DemoConfig(seed=1), run_id="a1")
    store.create_run("beta", DemoConfig(seed=2), run_id="b1")
    c = store.create_run("alpha", DemoConfig(seed=3), run_id="a2")
    c.finish()
    (store.root / "alpha" / "stray-dir").mkdir()  # no meta.json: ignored

    infos = store.list_runs()
    assert [i.run_id for i in infos] == ["a2", "b1", "a1"]
    assert [i.status for i in infos] == ["finished", "running", "running"]
    assert infos[0].seed == 3 and infos[0].dir == c.dir and infos[0].finished_at is not None
    assert [i.run_id for i in store.list_runs("alpha")] == ["a2", "a1"]
    assert store.list_runs("missing") == []


def test_compare_last_values(store: RunStore) -> None:
    with store.create_run("cmp", DemoConfig(), run_id="r1") as r1:
        r1.logger.log(1, {"eval/return": 1.0, "train/loss": 5.0})
        r1.logger.log(2, {"eval/return": 3.0})
    with store.create_run("cmp", DemoConfig(), run_id="r2") as r2:
        r2.logger.log(7, {"eval/return": 10.0})
    r3 = store.create_run("cmp", DemoConfig(), run_id="r3")  # never logged

    df = store.compare([r1.dir, str(r2.dir), r3], ["eval/return", "train/loss"])
    assert list(df.columns) == ["experiment", "run_id", "status", "eval/return", "train/loss"]
    assert df["run_id"].tolist() == ["r1", "r2", "r3"]
    assert df["status"].tolist() == ["finished", "finished", "running"]
    assert df["eval/return"].tolist()[:2] == [3.0, 10.0]
    assert df["train/loss"].iloc[0] == 5.0
    assert math.isnan(df["train/loss"].iloc[1])
    assert math.isnan(df["eval/return"].iloc[2])
    with pytest.raises(ValueError, match="invalid metric key"):
        store.compare([r1.dir], ["loss"])


def test_open_run_for_resume_appends_metrics(store: RunStore) -> None:
    with store.create_run("res", DemoConfig(), run_id="r") as run:
        run.logger.log(1, {"train/loss": 1.0})
        run.logger.log(2, {"train/loss": 0.9})

    reopened = store.open_run("res", "r")
    assert reopened.experiment == "res" and reopened.run_id == "r"
    with reopened:
        assert reopened.status == "running"
        reopened.logger.log(3, {"train/loss": 0.7})
    meta = reopened.meta
    assert meta["status"] == "finished" and len(meta["resumed_at"]) == 1
    assert read_metrics(reopened.metrics_path)["step"].tolist() == [1, 2, 3]

    by_path = store.open_path(run.dir)
    assert isinstance(by_path, Run) and by_path.run_id == "r"
    by_path.logger.log(4, {"train/loss": 0.6})
    assert by_path.metrics()["step"].tolist() == [1, 2, 3, 4]


def test_open_missing_run_lists_known(store: RunStore) -> None:
    store.create_run("res", DemoConfig(), run_id="exists")
    with pytest.raises(FileNotFoundError, match=r"no run 'nope'.*recent runs: exists"):
        store.open_run("res", "nope")
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        store.open_path(store.root / "res")


# ------------------------------------------------------------------ ownership and exact resume

HOLD = (
    "import sys, time\n"
    "from transferlab.platform.runstore import Run\n"
    "Run(sys.argv[1]).acquire()\n"
    "print('holding', flush=True)\n"
    "time.sleep(600)\n"
)
"""A second process that owns the run at ``argv[1]`` until it is killed."""


def hold_run(run_dir: Path) -> subprocess.Popen[str]:
    """Start a process that owns ``run_dir``; returns once it does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, cwd=run_dir
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def sigkill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_run_owned_by_a_live_process_is_refused_and_interrupted_once_it_dies(store: RunStore) -> None:
    store.create_run("own", DemoConfig(), run_id="r").release()
    assert store.list_runs()[0].status == "interrupted"  # running, but nobody owns it
    proc = hold_run(store.root / "own" / "r")
    try:
        owner = json.loads((store.root / "own" / "r" / "owner.json").read_text())
        assert owner["pid"] == proc.pid and owner["host"] == socket.gethostname()
        assert store.list_runs()[0].status == "running"
        run = store.open_run("own", "r")
        assert run.status == "running" and not run.owned
        with pytest.raises(RunInUseError, match=rf"in use by pid {proc.pid} on host .*stop it and run"):
            run.acquire()
        with pytest.raises(RunInUseError, match=f"pid {proc.pid}"):
            run.logger.log(0, {"train/loss": 1.0})
        with pytest.raises(RunInUseError):
            run.write_artifact_json("x.json", {})
    finally:
        sigkill(proc)
    assert store.list_runs()[0].status == "interrupted"
    run = store.open_run("own", "r")
    assert run.status == "interrupted"
    with run:
        assert run.owned and run.status == "running"
    meta = run.meta
    assert meta["status"] == "finished" and len(meta["resumed_at"]) == 2  # the holder's and ours
    assert not (run.dir / "owner.json").exists()


def test_the_owner_refreshes_its_heartbeat(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import transferlab.platform.runstore as runstore

    run = store.create_run("own", DemoConfig(), run_id="beat")
    first = json.loads((run.dir / "owner.json").read_text())["heartbeat"]
    monkeypatch.setattr(runstore, "HEARTBEAT_S", 0.05)
    deadline = time.monotonic() + 60  # the beat sleeping when we patched ends within HEARTBEAT_S
    while json.loads((run.dir / "owner.json").read_text())["heartbeat"] == first:
        assert time.monotonic() < deadline, "no heartbeat"
        time.sleep(0.05)
    run.finish()
    assert not (run.dir / "owner.json").exists()


def test_an_owner_on_another_host_counts_while_its_heartbeat_is_fresh(store: RunStore) -> None:
    run = store.create_run("own", DemoConfig(), run_id="far")
    run.release()
    owner = {"pid": 1, "host": "not-" + socket.gethostname(), "started": "", "heartbeat": time.time()}
    atomic_write_json(run.dir / "owner.json", owner)
    assert run.status == "running"
    atomic_write_json(run.dir / "owner.json", {**owner, "heartbeat": time.time() - STALE_AFTER_S - 1})
    assert run.status == "interrupted"


def test_shared_holders_admit_each_other_but_not_an_exclusive_owner(tmp_path: Path) -> None:
    shared = (
        "import sys, time\n"
        "from transferlab.platform.runstore import RunLock\n"
        "RunLock(sys.argv[1]).acquire(shared=True)\n"
        "print('holding', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", shared, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        with pytest.raises(RunInUseError, match=f"pid {proc.pid}"):
            RunLock(tmp_path).acquire()
        lock = RunLock(tmp_path)
        lock.acquire(shared=True)
        assert lock.held and is_owned(tmp_path)
        lock.release()
        assert is_owned(tmp_path)  # the other holder still owns it
    finally:
        sigkill(proc)
    assert not is_owned(tmp_path)


LOOP = """
import json, math, os, signal, sys
from pathlib import Path
from pydantic import Field
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json
from transferlab.platform.metrics import drop_logged_after
from transferlab.platform.runstore import RunStore

class LoopConfig(BaseConfig):
    steps: int = Field(default=20, description="Steps of the loop.")

store, kill_step, kill_phase = RunStore(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
EVERY = 4

def maybe_kill(step, phase):
    if step == kill_step and phase == kill_phase:
        os.kill(os.getpid(), signal.SIGKILL)

if (store.root / "loop" / "r").is_dir():  # resume: from the checkpoint, without the rows after it
    run = store.open_run("loop", "r").acquire()
    ckpt = run.artifacts_dir / "checkpoint.json"
    saved = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": -1, "state": 0.0}
    start, state = saved["step"] + 1, saved["state"]
    drop_logged_after(run.logger, start - 1)
else:
    run, start, state = store.create_run("loop", LoopConfig(), run_id="r"), 0, 0.0
with run:
    for step in range(start, LoopConfig().steps):
        state = 0.9 * state + math.sin(step)
        run.logger.log(step, {"train/state": state, "train/twice": 2 * state})
        maybe_kill(step, "log")
        if (step + 1) % EVERY == 0:  # checkpoint: metrics flushed first, then the state
            run.logger.flush()
            maybe_kill(step, "flush")
            atomic_write_json(run.artifacts_dir / "checkpoint.json", {"step": step, "state": state})
            maybe_kill(step, "checkpoint")
"""
"""A small loop through the real RunStore API that checkpoints every 4 steps and kills itself (SIGKILL)
at ``argv[2]`` right after logging, flushing or checkpointing (``argv[3]``)."""


def kill_points(seed: int) -> list[tuple[int, str]]:
    """One kill in each window (after a log, between flush and checkpoint, after a checkpoint), at
    seeded increasing steps; flush/checkpoint kills fall on checkpoint steps."""
    rng = random.Random(seed)
    points, low = [], 0
    for phase in rng.sample(["log", "flush", "checkpoint"], 3):
        choices = [s for s in range(low, 16) if phase == "log" or (s + 1) % 4 == 0]
        step = rng.choice(choices[: max(1, len(choices) // 2)])
        points.append((step, phase))
        low = step + 1
    return points


def test_a_run_killed_at_any_point_and_resumed_logs_every_row_once(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)

    def loop(root: Path, step: int = -1, phase: str = "none") -> int:
        return subprocess.run(
            [sys.executable, str(script), str(root), str(step), phase], check=False
        ).returncode

    assert loop(tmp_path / "whole") == 0
    points = kill_points(seed=3)
    for step, phase in points:
        assert loop(tmp_path / "killed", step, phase) == -signal.SIGKILL, (step, phase)
        assert RunStore(tmp_path / "killed").list_runs()[0].status == "interrupted"
    assert loop(tmp_path / "killed") == 0

    whole = read_metrics(tmp_path / "whole" / "loop" / "r" / "metrics.parquet")
    killed = read_metrics(tmp_path / "killed" / "loop" / "r" / "metrics.parquet")
    assert not killed.duplicated(["step", "key"]).any(), points
    assert len(killed) == len(whole) == 40
    cols = ["step", "key", "value"]
    expected = whole[cols].sort_values(["step", "key"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(killed[cols].sort_values(["step", "key"]).reset_index(drop=True), expected)
    meta = Run(tmp_path / "killed" / "loop" / "r").meta
    assert meta["status"] == "finished" and len(meta["resumed_at"]) == len(points)


def test_recorded_run_marks_finished_failed_and_resumed(tmp_path: Path) -> None:
    with recorded_run(tmp_path / "offline-train" / "r1", "offline-train", DemoConfig(seed=4)) as run:
        assert run.meta["status"] == "running" and run.meta["seed"] == 4
    assert Run(tmp_path / "offline-train" / "r1").meta["status"] == "finished"
    with (
        pytest.raises(KeyError, match="boom"),
        recorded_run(tmp_path / "offline-train" / "r1", "offline-train", DemoConfig()),
    ):
        raise KeyError("boom")
    meta = Run(tmp_path / "offline-train" / "r1").meta
    assert meta["status"] == "failed" and meta["error"] == "KeyError: 'boom'"
    assert len(meta["resumed_at"]) == 1  # the second block was a rerun of the same directory
    assert [r.status for r in RunStore(tmp_path).list_runs()] == ["failed"]

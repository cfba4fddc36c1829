"""Worker pools: ordering, parallelism, timeouts, failures and clean shutdown on every backend.

The Ray tests share one local cluster for the module (starting one takes 10-20 s on a small machine).
"""

from __future__ import annotations

import functools
import multiprocessing
import re
import time
from collections.abc import Iterator

import pytest

from transferlab.agent_rl.workers import (
    Backend,
    DiagnosticWorker,
    WorkerError,
    WorkerPool,
    make_pool,
)

FACTORY = functools.partial(DiagnosticWorker, state="s0")
ALL: list[Backend] = ["inline", "local", "ray"]
REMOTE: list[Backend] = ["local", "ray"]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def still_alive(pids: list[int], within_s: float = 15.0) -> list[int]:
    """The pids still running after waiting up to ``within_s`` for all of them to go."""
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()


def open_pool(request: pytest.FixtureRequest, backend: Backend, size: int, threads: int = 1) -> WorkerPool:
    """A pool of DiagnosticWorkers that the test's teardown closes."""
    if backend == "ray":
        request.getfixturevalue("ray_cluster")
    pool = make_pool(backend, FACTORY, size=size, threads_per_worker=threads)
    request.addfinalizer(pool.close)
    return pool


@pytest.mark.parametrize("backend", ALL)
def test_map_returns_results_in_input_order_and_runs_in_parallel(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    pool = open_pool(request, backend, size=2, threads=2)
    chunks = [f"chunk-{i}" for i in range(9)]
    results = pool.map("echo", chunks, timeout_s=30.0)
    assert [r.value for r in results] == chunks
    assert all(r.ok and r.error is None for r in results)
    assert {r.worker for r in results} <= set(range(pool.size))
    if backend != "inline":
        assert pool.broadcast("env", "OMP_NUM_THREADS") == ["2", "2"]
        assert pool.map("echo", [], timeout_s=1.0) == []
        sleeps = pool.map("sleep", [0.5, 0.5], timeout_s=30.0)  # returns the pid: one per worker
        assert sorted(r.value for r in sleeps) == sorted(pool.broadcast("pid"))
        assert len({r.value for r in sleeps}) == 2


@pytest.mark.parametrize("backend", REMOTE)
def test_timeout_fails_that_chunk_only_and_the_replacement_gets_the_sticky_state(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    pool = open_pool(request, backend, size=2)
    pool.broadcast("set_state", "weights-0", sticky=True)
    pool.broadcast("set_state", "weights-1", sticky=True)  # the latest args are replayed
    before = pool.broadcast("pid")

    results = pool.map("do", [("sleep", 60.0), ("echo", "a"), ("echo", "b")], timeout_s=1.5)

    assert not results[0].ok and results[0].error == "timeout after 1.5 s"
    assert 1.5 <= results[0].wall_s < 30.0
    assert [(r.ok, r.value) for r in results[1:]] == [(True, "a"), (True, "b")]
    assert pool.broadcast("get_state") == ["weights-1", "weights-1"]
    after = pool.broadcast("pid")
    slow, other = results[0].worker, 1 - results[0].worker
    assert after[slow] != before[slow] and after[other] == before[other]
    assert still_alive([before[slow]]) == []
    assert [r.value for r in pool.map("echo", [1, 2, 3], timeout_s=30.0)] == [1, 2, 3]


@pytest.mark.parametrize("backend", ALL)
def test_exception_gives_the_traceback_or_a_worker_error_and_keeps_the_worker(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    pool = open_pool(request, backend, size=2)
    before = pool.broadcast("pid")
    results = pool.map("do", [("fail", "boom"), ("echo", 1)], timeout_s=30.0)
    assert not results[0].ok and results[0].value is None
    assert results[0].error is not None
    assert "Traceback" in results[0].error and "ValueError: boom" in results[0].error
    assert results[1].ok and results[1].value == 1
    with pytest.raises(
        WorkerError, match=re.compile(r"fail\(\) failed on .*worker 0: .*ValueError: bad", re.S)
    ):
        pool.broadcast("fail", "bad")
    assert pool.broadcast("pid") == before


@pytest.mark.parametrize("backend", REMOTE)
def test_dead_worker_is_replaced(request: pytest.FixtureRequest, backend: Backend) -> None:
    pool = open_pool(request, backend, size=2)
    pool.broadcast("set_state", "weights", sticky=True)
    before = pool.broadcast("pid")
    results = pool.map("do", [("die", 3), ("echo", 1), ("echo", 2)], timeout_s=30.0)
    assert not results[0].ok and results[0].error is not None
    assert results[0].error.startswith("worker died")
    if backend == "local":
        assert results[0].error == "worker died (exit code 3)"
    assert [r.value for r in results[1:]] == [1, 2]
    after = pool.broadcast("pid")
    assert after[results[0].worker] != before[results[0].worker]
    assert pool.broadcast("get_state") == ["weights", "weights"]


def test_broadcast_timeout_replaces_the_workers(request: pytest.FixtureRequest) -> None:
    pool = open_pool(request, "local", size=2)
    before = pool.broadcast("pid")
    with pytest.raises(
        WorkerError, match=re.compile(r"worker 0: timeout after 0.5 s\nworker 1: timeout", re.S)
    ):
        pool.broadcast("sleep", 60.0, timeout_s=0.5)
    after = pool.broadcast("pid")
    assert set(after).isdisjoint(before)
    assert still_alive(before) == []


def test_killing_a_worker_kills_its_subprocesses(request: pytest.FixtureRequest) -> None:
    pool = open_pool(request, "local", size=1)
    [child] = pool.broadcast("spawn", 60.0)
    assert alive(child)
    [result] = pool.map("sleep", [60.0], timeout_s=0.5)
    assert result.error == "timeout after 0.5 s"
    assert still_alive([child]) == []


def test_a_replacement_that_cannot_replay_is_dropped(request: pytest.FixtureRequest) -> None:
    pool = open_pool(request, "local", size=2)
    with pytest.raises(WorkerError):
        pool.broadcast("fail", "cannot load these weights", sticky=True)
    pool.map("do", [("die", 1)], timeout_s=30.0)
    assert pool.broadcast("echo", 1) == [1]  # the replacement failed the replay; one worker goes on
    assert pool.size == 1
    pool.map("do", [("die", 1)], timeout_s=30.0)
    with pytest.raises(
        WorkerError, match=re.compile("every worker is lost.*cannot load these weights", re.S)
    ):
        pool.broadcast("echo", 1)


@pytest.mark.parametrize("backend", REMOTE)
def test_close_leaves_no_worker_processes(request: pytest.FixtureRequest, backend: Backend) -> None:
    pool = open_pool(request, backend, size=2)
    pids = pool.broadcast("pid")
    pool.map("do", [("sleep", 60.0), ("echo", 1)], timeout_s=0.3)  # a replacement is starting at close
    pids += pool.broadcast("pid")
    with pool:
        pass
    pool.close()  # idempotent
    assert still_alive(pids) == []
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    with pytest.raises(WorkerError, match="closed"):
        pool.map("echo", [1], timeout_s=1.0)


@pytest.mark.parametrize("backend", ALL)
def test_factory_error_is_raised_by_make_pool(request: pytest.FixtureRequest, backend: Backend) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_cluster")
    factory = functools.partial(DiagnosticWorker, fail_on_start="no model here")
    children = set(multiprocessing.active_children())
    with pytest.raises(
        WorkerError, match=re.compile(r"worker \d failed to start.*RuntimeError: no model here", re.S)
    ):
        make_pool(backend, factory, size=2)
    assert set(multiprocessing.active_children()) <= children


def test_inline_runs_one_worker_here_without_timeouts(request: pytest.FixtureRequest) -> None:
    pool = open_pool(request, "inline", size=4)
    assert pool.size == 1
    [result] = pool.map("sleep", [0.2], timeout_s=0.01)
    assert result.ok and result.wall_s >= 0.2
    assert pool.broadcast("pid") == [multiprocessing.current_process().pid]


def test_make_pool_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        make_pool("gpu", FACTORY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        make_pool("local", FACTORY, size=0)
    with pytest.raises(TypeError, match="picklable"):
        make_pool("local", lambda: DiagnosticWorker())

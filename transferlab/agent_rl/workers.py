"""Parallel rollout worker pools: any worker object, hosted in local processes or Ray actors.

A pool hosts ``size`` copies of a worker object built by a picklable ``factory`` *inside* each worker,
and calls its methods by name:

- :meth:`WorkerPool.broadcast` calls one method on every worker and waits (e.g. ``set_weights``); with
  ``sticky=True`` the call is remembered and replayed on any replacement worker, so a worker started
  after a crash gets the current policy weights;
- :meth:`WorkerPool.map` calls one method per chunk, dispatched to whichever worker is idle, and returns
  one :class:`ChunkResult` per chunk in input order. Each chunk has a wall-time bound from its dispatch:
  a straggler costs its own chunk (``ok=False``, "timeout after ...") and its worker, which is killed
  and replaced in the background, never the training step.

Backends (:func:`make_pool`):

- ``"inline"``: one worker in this process, for debugging and tests. Timeouts are *not* enforced, a
  worker that exits takes this process with it, and the caller's thread settings are left alone.
- ``"local"``: ``multiprocessing`` with the *spawn* context (fork and torch do not mix), one pipe per
  worker. Each worker leads its own process group, so a kill also takes the subprocesses it started
  (sandboxes), and it exits by itself if this process dies. As with any spawn, a script that opens a
  pool at import time needs the ``if __name__ == "__main__":`` guard (else the workers fail to start).
- ``"ray"``: one Ray actor per worker (``num_cpus=threads_per_worker``, and ``num_gpus`` when > 0). The
  pool joins the Ray cluster at ``ray_address``, else at ``$RAY_ADDRESS``, else starts a local Ray
  (unless this process is connected to Ray already). Whatever this module connected or started, it
  disconnects when its last pool closes: a local Ray stops, a cluster keeps running. Each actor builds
  its own worker, and so its own sandbox, on whichever node Ray places it. No code is shipped: every
  node needs this project installed (docs/guide/ray_cluster.md).

Before building the worker, the host sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS``
to ``threads_per_worker``, which torch honours when the factory imports it; it also calls
``torch.set_num_threads`` before and after the factory whenever torch is loaded by then. torch is never
imported just for that: it costs seconds per worker start. On a clean close the host calls the worker's
``close()`` if it has one.

>>> with make_pool("inline", DiagnosticWorker) as pool:
...     pool.broadcast("set_state", 7, sticky=True)
...     [r.value for r in pool.map("echo", ["a", "b"], timeout_s=5.0)]
[None]
['a', 'b']
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from types import TracebackType
from typing import Any, Literal, NoReturn, Protocol, Self

from transferlab.platform.extras import require_extra

logger = logging.getLogger(__name__)

Backend = Literal["inline", "local", "ray"]
BACKENDS: tuple[Backend, ...] = ("inline", "local", "ray")

_THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_REPLAY = "__replay__"  # method name the hosts read as "replay these sticky calls in order"
_CLOSE_GRACE_S = 5.0  # how long close() waits for idle workers to exit by themselves before killing them


class WorkerError(RuntimeError):
    """A worker failed where the caller cannot carry on: at startup, in a broadcast, or all workers lost."""


@dataclass
class ChunkResult:
    """The outcome of one call on one worker."""

    ok: bool
    value: Any = None  # the method's return value when ok
    error: str | None = None  # "timeout after 5.0 s", "worker died (exit code -9)", or the traceback text
    wall_s: float = 0.0
    worker: int = -1  # which worker (0..size-1; a replacement keeps its predecessor's number)


class WorkerPool(Protocol):
    """What every backend offers; see the module docstring for the semantics.

    A pool is driven from one thread. ``size`` is the number of live workers: it only drops when a
    replacement cannot be started (its factory or a sticky replay fails), which is logged as an error.
    """

    backend: str
    size: int

    def broadcast(
        self, method: str, *args: Any, sticky: bool = False, timeout_s: float | None = None
    ) -> list[Any]:
        """``method(*args)`` on every worker; the return values in worker order.

        Waits for warm-ups of replacement workers first. ``sticky=True`` remembers the call (the latest
        args per method, in the order of their latest call) and replays it on every replacement worker.
        A worker that overruns ``timeout_s`` (no bound when None) or dies is replaced.

        Raises:
            WorkerError: one or more workers failed; the message names each with its error.
        """
        ...

    def map(self, method: str, chunks: Sequence[Any], timeout_s: float) -> list[ChunkResult]:
        """``method(chunk)`` for each chunk on whichever worker is idle; the results in input order.

        A chunk still running ``timeout_s`` after its dispatch gives ``ok=False`` ("timeout after ...")
        and its worker is killed and replaced; an exception gives ``ok=False`` with the traceback text
        (the worker stays); a worker that dies gives ``ok=False`` ("worker died ...") and is replaced.
        Replacements start in the background: ``map`` returns as soon as every chunk has a result.
        """
        ...

    def close(self) -> None:
        """Stop every worker (idle ones call their object's ``close()``, busy ones are killed); idempotent."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


# ------------------------------------------------------------------------------------- diagnostic worker


class DiagnosticWorker:
    """A tiny worker for the pools' tests and benchmarks: it holds one value and misbehaves on request.

    It lives in the package so that spawned processes and Ray actors can import it.

    Args:
        state: the initial value of :meth:`get_state`.
        fail_on_start: if given, the constructor raises ``RuntimeError(fail_on_start)``.

    >>> w = DiagnosticWorker(state=1)
    >>> w.echo("hi"), w.get_state(), w.do(("set_state", 2)), w.get_state()
    ('hi', 1, None, 2)
    """

    def __init__(self, state: Any = None, fail_on_start: str | None = None) -> None:
        if fail_on_start is not None:
            raise RuntimeError(fail_on_start)
        self.state = state

    def set_state(self, x: Any) -> None:
        self.state = x

    def get_state(self) -> Any:
        return self.state

    def echo(self, x: Any) -> Any:
        return x

    def sleep(self, seconds: float) -> int:
        """Sleep, then return this process's pid (two parallel sleeps show two pids)."""
        time.sleep(seconds)
        return os.getpid()

    def fail(self, msg: str) -> NoReturn:
        raise ValueError(msg)

    def die(self, code: int = 1) -> NoReturn:
        """End this process at once with exit code ``code`` (never call it on an inline pool)."""
        os._exit(code)

    def pid(self) -> int:
        return os.getpid()

    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def spawn(self, seconds: float) -> int:
        """Start a subprocess that sleeps ``seconds`` (like a sandbox would) and return its pid."""
        cmd = [sys.executable, "-c", f"import time; time.sleep({float(seconds)!r})"]
        return subprocess.Popen(cmd).pid

    def do(self, call: tuple[Any, ...]) -> Any:
        """Run the method named by ``call[0]`` on ``call[1:]``: one ``map`` can mix behaviours."""
        return getattr(self, call[0])(*call[1:])


# ------------------------------------------------------------------------------------- worker-side host


def _limit_threads(threads: int) -> None:
    for name in _THREAD_ENV_VARS:
        os.environ[name] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


class _Host:
    """Builds the worker where it runs and calls it by name, turning exceptions into traceback text."""

    def __init__(self, factory: Callable[[], Any], threads: int | None) -> None:
        if threads is not None:
            _limit_threads(threads)
        self.worker = factory()
        if threads is not None:
            _limit_threads(threads)  # the factory may have loaded torch

    def call(self, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        if method == _REPLAY:
            return self._replay(args[0])
        try:
            return True, getattr(self.worker, method)(*args)
        except Exception:
            return False, traceback.format_exc()

    def _replay(self, calls: list[tuple[str, tuple[Any, ...]]]) -> tuple[bool, Any]:
        for method, args in calls:
            ok, value = self.call(method, args)
            if not ok:
                return False, f"replaying sticky {method}(): {value}"
        return True, None

    def shutdown(self) -> None:
        close = getattr(self.worker, "close", None)
        if callable(close):
            close()


def _exit_with_parent() -> None:
    """Kill this worker (and its process group) as soon as the process that started it is gone."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait_for([parent.sentinel])
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _local_main(conn: Connection, factory_blob: bytes, threads: int) -> None:
    """A local worker: build the worker, answer ``(rid, method, args)`` with ``(rid, ok, value)``."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # lead a process group: a kill takes the worker's subprocesses too
    _exit_with_parent()
    try:
        host = _Host(pickle.loads(factory_blob), threads)
    except Exception:
        conn.send((0, False, traceback.format_exc()))
        return
    conn.send((0, True, None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            host.shutdown()
            return
        rid, method, args = message
        ok, value = host.call(method, args)
        try:
            conn.send((rid, ok, value))
        except Exception:
            conn.send((rid, False, f"could not send the result back:\n{traceback.format_exc()}"))


class _RayHost(_Host):
    """The Ray actor class: startup errors are kept and reported by :meth:`ready`, not raised."""

    def __init__(self, factory_blob: bytes, threads: int) -> None:
        self.startup_error: str | None = None
        try:
            super().__init__(pickle.loads(factory_blob), threads)
        except Exception:
            self.startup_error = traceback.format_exc()

    def ready(self) -> tuple[bool, Any]:
        return self.startup_error is None, self.startup_error

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


# ------------------------------------------------------------------------------------- pools


class _PoolBase:
    backend: str
    size: int
    _closed: bool = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise WorkerError(f"the {self.backend} worker pool is closed")


class InlinePool(_PoolBase):
    """One worker in this process; no timeouts, no replacement (see the module docstring)."""

    backend = "inline"

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.size = 1
        try:
            self._host = _Host(factory, threads=None)
        except Exception as e:
            raise WorkerError(f"worker 0 failed to start:\n{traceback.format_exc()}") from e

    def _call(self, method: str, args: tuple[Any, ...]) -> ChunkResult:
        start = time.monotonic()
        ok, value = self._host.call(method, args)
        return ChunkResult(ok, value if ok else None, None if ok else value, time.monotonic() - start, 0)

    def broadcast(
        self, method: str, *args: Any, sticky: bool = False, timeout_s: float | None = None
    ) -> list[Any]:
        self._check_open()
        result = self._call(method, args)
        if not result.ok:
            raise WorkerError(f"{method}() failed on worker 0: {result.error}")
        return [result.value]

    def map(self, method: str, chunks: Sequence[Any], timeout_s: float) -> list[ChunkResult]:
        self._check_open()
        return [self._call(method, (chunk,)) for chunk in chunks]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._host.shutdown()


@dataclass
class _Job:
    kind: Literal["start", "replay", "call"]
    started: float
    limit_s: float | None
    index: int = -1  # the chunk's position, for map

    @property
    def deadline(self) -> float:
        return math.inf if self.limit_s is None else self.started + self.limit_s


@dataclass
class _Slot:
    index: int
    handle: Any = None  # the backend's process or actor
    job: _Job | None = None
    pending: Any = None  # the backend's receipt for the job: a request id or an ObjectRef
    retired: bool = False


@dataclass
class _Outcome:
    ok: bool
    value: Any  # the return value, or the error text
    lost: bool = False  # the worker is gone (died, or killed on timeout)

    def result(self, wall_s: float, worker: int) -> ChunkResult:
        if self.ok:
            return ChunkResult(True, self.value, None, wall_s, worker)
        return ChunkResult(False, None, str(self.value), wall_s, worker)


class _RemotePool(_PoolBase):
    """Scheduling shared by the process and Ray pools; the backends supply the five hooks at the end."""

    def __init__(self, factory: Callable[[], Any], size: int, threads: int, startup_timeout_s: float) -> None:
        try:
            self._blob = pickle.dumps(factory)
        except Exception as e:
            raise TypeError(
                "factory must be picklable: a top-level function or class, or functools.partial of one"
            ) from e
        self.size = size
        self._threads = threads
        self._startup_timeout_s = startup_timeout_s
        self._sticky: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self._slots = [_Slot(i) for i in range(size)]
        self._lost: list[str] = []
        self._started = False
        self._reaper = weakref.finalize(self, type(self)._reap, self._slots)
        try:
            self._open()
            for slot in self._slots:
                self._start(slot)
            self._settle()
            if self._lost:
                raise WorkerError("workers failed to start:\n" + "\n".join(self._lost) + self._startup_help())
            self._started = True
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------------------------------- public API

    def broadcast(
        self, method: str, *args: Any, sticky: bool = False, timeout_s: float | None = None
    ) -> list[Any]:
        self._check_open()
        if sticky:  # recorded first: a worker replaced during this call gets it too
            self._sticky[method] = args
            self._sticky.move_to_end(method)
        self._settle()
        live = self._live()
        for slot in live:
            self._dispatch(slot, "call", method, args, timeout_s)
        results: dict[int, ChunkResult] = {}
        while any(slot.job is not None and slot.job.kind == "call" for slot in live):
            for slot, _, result in self._step():
                results[slot.index] = result
        failed = [f"worker {i}: {r.error}" for i, r in sorted(results.items()) if not r.ok]
        if failed:
            summary = f"{method}() failed on {len(failed)} of {len(live)} workers:\n"
            raise WorkerError(summary + "\n".join(failed))
        return [results[slot.index].value for slot in live]

    def map(self, method: str, chunks: Sequence[Any], timeout_s: float) -> list[ChunkResult]:
        self._check_open()
        results: list[ChunkResult | None] = [None] * len(chunks)
        todo = deque(range(len(chunks)))
        while todo or any(slot.job is not None and slot.job.kind == "call" for slot in self._slots):
            for slot in self._live():
                if todo and slot.job is None:
                    i = todo.popleft()
                    self._dispatch(slot, "call", method, (chunks[i],), timeout_s, index=i)
            for _, job, result in self._step():
                results[job.index] = result
        return [r for r in results if r is not None]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._stop([slot for slot in self._slots if not slot.retired])
        finally:
            self._reaper()

    # -------------------------------------------------------------------------------- scheduling

    def _live(self) -> list[_Slot]:
        return [slot for slot in self._slots if not slot.retired]

    def _start(self, slot: _Slot) -> None:
        slot.job = _Job("start", time.monotonic(), self._startup_timeout_s)
        self._spawn(slot)

    def _dispatch(
        self,
        slot: _Slot,
        kind: Literal["replay", "call"],
        method: str,
        args: tuple[Any, ...],
        limit_s: float | None,
        index: int = -1,
    ) -> None:
        self._send(slot, method, args)
        slot.job = _Job(kind, time.monotonic(), limit_s, index)

    def _settle(self) -> None:
        """Wait until every worker is idle: warm-ups finished, stray calls answered."""
        while any(slot.job is not None for slot in self._slots):
            self._step()

    def _step(self) -> list[tuple[_Slot, _Job, ChunkResult]]:
        """Wait for the next answer or deadline; handle warm-ups and losses; return the finished calls."""
        busy = [slot for slot in self._slots if slot.job is not None]
        if not busy:
            return []
        deadline = min(slot.job.deadline for slot in busy if slot.job is not None)
        finished = self._wait(busy, None if deadline == math.inf else max(0.0, deadline - time.monotonic()))
        now = time.monotonic()
        answered = {slot.index for slot, _ in finished}
        for slot in busy:
            if slot.index not in answered and slot.job is not None and slot.job.deadline <= now:
                error = f"timeout after {float(slot.job.limit_s or 0.0)} s"
                finished.append((slot, _Outcome(False, error, lost=True)))
        calls = []
        for slot, outcome in finished:
            job, slot.job = slot.job, None
            assert job is not None
            result = outcome.result(now - job.started, slot.index)
            if job.kind == "call":
                calls.append((slot, job, result))
                if outcome.lost:
                    self._replace(slot, str(result.error))
            else:
                self._warm_up(slot, job, result)
        return calls

    def _warm_up(self, slot: _Slot, job: _Job, result: ChunkResult) -> None:
        """A (re)started worker answered: replay the sticky calls on it, or give up on it."""
        if not result.ok:
            self._retire(slot, f"worker {slot.index} failed to {job.kind}: {result.error}")
        elif job.kind == "start" and self._sticky:
            calls = list(self._sticky.items())
            self._dispatch(slot, "replay", _REPLAY, (calls,), self._startup_timeout_s)

    def _replace(self, slot: _Slot, reason: str) -> None:
        logger.warning("%s worker %d replaced: %s", self.backend, slot.index, reason.splitlines()[-1])
        self._kill(slot)
        try:
            self._start(slot)
        except Exception:
            self._retire(slot, f"worker {slot.index} could not be restarted:\n{traceback.format_exc()}")

    def _retire(self, slot: _Slot, reason: str) -> None:
        """Drop a worker that cannot be (re)started; the pool goes on with the others while it has any."""
        self._kill(slot)
        slot.retired, slot.job = True, None
        self._lost.append(reason)
        self.size = len(self._live())
        if not self._started:
            return  # __init__ reports every startup failure at once
        if not self.size:
            raise WorkerError("every worker is lost; the last error:\n" + reason)
        logger.error("%s pool goes on with %d workers: %s", self.backend, self.size, reason)

    # -------------------------------------------------------------------------------- backend hooks

    def _open(self) -> None:
        """Set up what the workers need (Ray, a multiprocessing context) before the first spawn."""

    def _startup_help(self) -> str:
        """What to add to a startup failure's message (how to fix the usual causes)."""
        return ""

    def _spawn(self, slot: _Slot) -> None:
        """Start the worker for ``slot``; its startup answer arrives through :meth:`_wait`."""
        raise NotImplementedError

    def _send(self, slot: _Slot, method: str, args: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _wait(self, slots: list[_Slot], timeout_s: float | None) -> list[tuple[_Slot, _Outcome]]:
        """Block until some of ``slots`` answered (at most ``timeout_s``); return those answers."""
        raise NotImplementedError

    def _kill(self, slot: _Slot) -> None:
        raise NotImplementedError

    def _stop(self, slots: list[_Slot]) -> None:
        """Shut these workers down: politely when idle, by force after a grace period."""
        raise NotImplementedError

    @staticmethod
    def _reap(slots: list[_Slot]) -> None:
        """Kill whatever is left of these workers (runs on close, garbage collection or exit)."""
        raise NotImplementedError


@dataclass
class _Process:
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection


class LocalPool(_RemotePool):
    """Workers in spawned processes, one pipe each; a timed-out or dead worker is killed and respawned."""

    backend = "local"

    def _open(self) -> None:
        self._ctx = mp.get_context("spawn")

    def _spawn(self, slot: _Slot) -> None:
        conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(
            target=_local_main, args=(child_conn, self._blob, self._threads), name=f"worker-{slot.index}"
        )
        process.start()
        child_conn.close()  # so that the worker's death reads as EOF here
        slot.handle, slot.pending = _Process(process, conn), 0  # the startup answer has request id 0

    def _send(self, slot: _Slot, method: str, args: tuple[Any, ...]) -> None:
        slot.pending += 1
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a dead worker: _wait reports it
            slot.handle.conn.send((slot.pending, method, args))

    def _wait(self, slots: list[_Slot], timeout_s: float | None) -> list[tuple[_Slot, _Outcome]]:
        by_object: dict[Any, _Slot] = {}
        for slot in slots:
            by_object[slot.handle.conn] = by_object[slot.handle.process.sentinel] = slot
        answers: dict[int, tuple[_Slot, _Outcome]] = {}
        for ready in wait_for(list(by_object), timeout_s):
            slot = by_object[ready]
            if slot.index not in answers and (outcome := self._receive(slot)) is not None:
                answers[slot.index] = (slot, outcome)
        return list(answers.values())

    @staticmethod
    def _receive(slot: _Slot) -> _Outcome | None:
        """The answer to the slot's current request, None if there is none yet, or its death."""
        handle: _Process = slot.handle
        try:
            while handle.conn.poll():
                rid, ok, value = handle.conn.recv()
                if rid == slot.pending:
                    return _Outcome(ok, value)
                # else: the answer to a call that was abandoned (an interrupted map); drop it
        except (EOFError, OSError):
            pass
        else:
            if handle.process.is_alive():
                return None
        handle.process.join(_CLOSE_GRACE_S)
        return _Outcome(False, f"worker died (exit code {handle.process.exitcode})", lost=True)

    def _kill(self, slot: _Slot) -> None:
        LocalPool._reap([slot])

    def _stop(self, slots: list[_Slot]) -> None:
        idle = [slot for slot in slots if slot.job is None and slot.handle is not None]
        for slot in idle:
            with contextlib.suppress(OSError):
                slot.handle.conn.send(None)  # the worker calls close() on its object and exits
        deadline = time.monotonic() + _CLOSE_GRACE_S
        for slot in idle:
            slot.handle.process.join(max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _reap(slots: list[_Slot]) -> None:
        for slot in slots:
            handle: _Process | None = slot.handle
            if handle is None:
                continue
            pid = handle.process.pid
            with contextlib.suppress(OSError):  # no group: all gone, or the worker had not made it yet
                os.killpg(pid, signal.SIGKILL)  # the worker leads its group: this takes its subprocesses
            handle.process.kill()
            handle.process.join(_CLOSE_GRACE_S)
            handle.conn.close()
            if handle.process.exitcode is not None:
                handle.process.close()
            slot.handle = None


_ray_init_here = False  # whether a pool of this process called ray.init (and so calls ray.shutdown)
_ray_pools = 0  # open Ray pools of this process
_CONNECT_CHECK_S = 5.0  # how long the reachability check of a cluster's address waits


def resolve_ray_address(ray_address: str | None = None) -> str | None:
    """The Ray cluster to join: ``ray_address``, else ``$RAY_ADDRESS``, else None (start a local Ray).

    Both sources take ``HOST:PORT`` (the head's address, as ``ray start --head`` prints it) or ``auto``
    (the cluster started on this machine); an empty value, or ``local``, means a local Ray.

    >>> resolve_ray_address("10.0.0.5:6379")
    '10.0.0.5:6379'
    >>> resolve_ray_address("local") is None
    True
    """
    address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS")
    address = (address or "").strip()
    return None if address in ("", "local") else address


def _split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (an optional ``ray://`` before it, an IPv6 host in brackets) as (host, port)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"the Ray address {address!r} is not HOST:PORT: give the head's address as `ray start --head` "
            "prints it (e.g. 10.0.0.5:6379), or 'auto' for the cluster started on this machine"
        )
    return host, int(port)


def _no_cluster(address: str, why: str) -> ConnectionError:
    port = address.rpartition(":")[2] if address != "auto" else "6379"
    return ConnectionError(
        f"no Ray cluster to join at {address} ({why}): start the head there with `ray start --head "
        f"--port={port}` and join the other nodes with `ray start --address=HEAD:{port}`, or fix "
        "--ray-address/RAY_ADDRESS (unset both to start a local Ray instead); if the cluster uses token "
        "authentication, set RAY_AUTH_MODE=token here with the cluster's token"
    )


def _connect(ray: Any, address: str) -> None:
    """``ray.init`` on the cluster at ``address``; a clear ConnectionError where there is none."""
    if address != "auto":
        host, port = _split_address(address)
        try:
            socket.create_connection((host, port), timeout=_CONNECT_CHECK_S).close()
        except OSError as e:
            raise _no_cluster(address, f"cannot reach {host}:{port}: {e.strerror or e}") from None
    try:
        # No runtime_env: each node imports the installed project, and a job submitted with
        # `ray job submit --runtime-env-json ...` keeps the job's own environment.
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ray.exceptions.RayError) as e:
        raise _no_cluster(address, f"ray.init failed: {_first_line(e)}") from None


def _same_cluster(ray: Any, address: str) -> bool:
    """Whether this process's Ray connection is to the cluster at ``address`` (``auto`` always is)."""
    if address == "auto":
        return True
    host, port = _split_address(address)
    connected_host, connected_port = _split_address(ray.get_runtime_context().gcs_address)
    if port != connected_port:
        return False
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(host)
        return ip == socket.gethostbyname(connected_host) or ip.startswith("127.")
    return host == connected_host


class RayPool(_RemotePool):
    """One Ray actor per worker; a timed-out actor is ``ray.kill``-ed and recreated, a dead one recreated.

    Args beyond :class:`_RemotePool`'s: ``ray_address`` (see :func:`resolve_ray_address`) and
    ``num_gpus``, the GPUs (or a fraction of one) each actor reserves.
    """

    backend = "ray"

    _counted = False  # whether this pool is one of _ray_pools

    def __init__(
        self,
        factory: Callable[[], Any],
        size: int,
        threads: int,
        startup_timeout_s: float,
        *,
        ray_address: str | None = None,
        num_gpus: float = 0.0,
    ) -> None:
        self._address = resolve_ray_address(ray_address)
        self._num_gpus = num_gpus
        super().__init__(factory, size, threads, startup_timeout_s)

    def _open(self) -> None:
        global _ray_init_here, _ray_pools
        import ray

        if ray.is_initialized():
            if self._address is not None and not _same_cluster(ray, self._address):
                connected = ray.get_runtime_context().gcs_address
                raise ValueError(
                    f"this process is connected to the Ray cluster at {connected}, not {self._address}: "
                    "call ray.shutdown() first, or leave --ray-address/RAY_ADDRESS unset"
                )
        elif self._address is None:
            ray.init(
                num_cpus=max(os.cpu_count() or 1, self.size * self._threads),
                include_dashboard=False,
                log_to_driver=False,
                ignore_reinit_error=True,
                configure_logging=False,
            )
            _ray_init_here = True
        else:
            _connect(ray, self._address)
            _ray_init_here = True
        _ray_pools += 1
        self._counted = True
        self._ray = ray
        self._check_gpus()
        self._actor_class = ray.remote(num_cpus=self._threads, num_gpus=self._num_gpus)(_RayHost)

    def _check_gpus(self) -> None:
        """Too few GPUs: an error on a local Ray (none will come), a warning on a cluster (nodes may join)."""
        needed = self._num_gpus * self.size
        have = float(self._ray.cluster_resources().get("GPU", 0.0))
        if needed <= have:
            return
        problem = f"{self.size} Ray workers with num_gpus={self._num_gpus:g} need {needed:g} GPUs"
        problem += f"; Ray has {have:g}"
        if self._address is None:
            raise ValueError(f"{problem}: use fewer rollout workers, or a fraction of a GPU per worker")
        logger.warning("%s: the others wait for GPUs, at most startup_timeout_s", problem)

    def _startup_help(self) -> str:
        return (
            f"\n(each Ray worker asks for {self._threads} CPUs and {self._num_gpus:g} GPUs and waits, up to "
            "startup_timeout_s, for a node with them free; on a cluster, every node needs this project "
            "and its dependencies installed: see docs/guide/ray_cluster.md)"
        )

    def node_ids(self) -> list[str]:
        """The Ray node of each live worker, in worker order (hex ids, as ``ray.nodes()`` has them)."""
        self._check_open()
        self._settle()
        live = self._live()
        return list(self._ray.get([slot.handle.node_id.remote() for slot in live]))

    def _spawn(self, slot: _Slot) -> None:
        slot.handle = self._actor_class.remote(self._blob, self._threads)
        slot.pending = slot.handle.ready.remote()

    def _send(self, slot: _Slot, method: str, args: tuple[Any, ...]) -> None:
        slot.pending = slot.handle.call.remote(method, args)

    def _wait(self, slots: list[_Slot], timeout_s: float | None) -> list[tuple[_Slot, _Outcome]]:
        by_ref = {slot.pending: slot for slot in slots}
        ready, _ = self._ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
        answers = []
        for ref in ready:
            try:
                ok, value = self._ray.get(ref)
                outcome = _Outcome(ok, value)
            except self._ray.exceptions.RayActorError as e:
                outcome = _Outcome(False, f"worker died (ray actor died: {_first_line(e)})", lost=True)
            except self._ray.exceptions.RayError as e:
                outcome = _Outcome(False, f"ray error: {e}")
            answers.append((by_ref[ref], outcome))
        return answers

    def _kill(self, slot: _Slot) -> None:
        RayPool._reap([slot])

    def _stop(self, slots: list[_Slot]) -> None:
        global _ray_init_here, _ray_pools
        if not self._counted:
            return  # Ray did not start
        try:
            idle = [slot.handle.shutdown.remote() for slot in slots if slot.job is None and slot.handle]
            if idle:
                self._ray.wait(idle, num_returns=len(idle), timeout=_CLOSE_GRACE_S)
            self._reap(slots)
        finally:
            _ray_pools -= 1
            if _ray_pools == 0 and _ray_init_here:
                self._ray.shutdown()  # stops a local Ray; only disconnects from a cluster
                _ray_init_here = False

    @staticmethod
    def _reap(slots: list[_Slot]) -> None:
        import ray

        for slot in slots:
            if slot.handle is not None and ray.is_initialized():
                try:
                    ray.kill(slot.handle, no_restart=True)
                except Exception:
                    logger.debug("ray.kill failed", exc_info=True)
            slot.handle = None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def make_pool(
    backend: Backend,
    factory: Callable[[], Any],
    size: int = 2,
    threads_per_worker: int = 1,
    *,
    startup_timeout_s: float = 300.0,
    ray_address: str | None = None,
    num_gpus: float = 0.0,
) -> WorkerPool:
    """Start ``size`` workers, each built by ``factory()`` where it runs, and wait until all are up.

    Args:
        backend: ``"inline"`` (one worker in this process, no timeouts), ``"local"`` (spawned
            processes) or ``"ray"`` (Ray actors).
        factory: builds one worker object; picklable (a top-level function or class, or
            ``functools.partial`` of one) for ``"local"`` and ``"ray"``.
        size: how many workers (``"inline"`` always has one).
        threads_per_worker: the torch/OpenMP threads of each worker, and the CPUs a Ray actor asks for.
        startup_timeout_s: how long a worker may take to build, and a replacement to replay the sticky calls.
        ray_address: ``"ray"`` only: the cluster to join, ``HOST:PORT`` or ``auto``; None reads
            ``$RAY_ADDRESS``, and without it a local Ray starts (:func:`resolve_ray_address`).
        num_gpus: ``"ray"`` only: the GPUs each actor reserves (a fraction shares one); Ray sets the
            actor's ``CUDA_VISIBLE_DEVICES`` to them. With 0 the actor reserves none, and Ray (2.60)
            leaves ``CUDA_VISIBLE_DEVICES`` alone. The other backends ignore both.

    Raises:
        WorkerError: a worker failed to start (the message holds its traceback) or timed out doing so.
        ValueError: a bad argument, or ``ray_address`` not ``HOST:PORT``.
        ConnectionError: no Ray cluster answers at ``ray_address``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if size < 1 or threads_per_worker < 1:
        raise ValueError(f"size and threads_per_worker must be >= 1; got {size} and {threads_per_worker}")
    if not num_gpus >= 0:
        raise ValueError(f"num_gpus must be >= 0 (a fraction shares one GPU); got {num_gpus}")
    if backend == "inline":
        return InlinePool(factory)
    if backend == "local":
        return LocalPool(factory, size, threads_per_worker, startup_timeout_s)
    require_extra("ray", "ray", "the ray rollout backend")
    return RayPool(
        factory, size, threads_per_worker, startup_timeout_s, ray_address=ray_address, num_gpus=num_gpus
    )

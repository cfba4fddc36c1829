"""Sandbox backends: where untrusted code runs.

Every backend takes an :class:`ExecutionRequest` (source, entry point, encoded call inputs, limits) and
returns the sandbox server's raw report: frames the child wrote, captured output, why it ended. None of
them ever sees an expected value. Grading happens in :mod:`transferlab.coding_rl.sandbox.verifier`.

- ``forkserver``: warm fork servers, each in fresh mount + network namespaces with a read-only chroot;
  one PID namespace, unprivileged uid and rlimits per job. Needs root (Linux namespaces).
- ``subprocess``: a fresh interpreter per job with the same rlimits, uid drop and seccomp filter; as
  root, fresh mount and IPC namespaces per job (empty /tmp, /var/tmp, /dev/shm, /run/lock). The
  portable fallback: it does not hide the host's files or network (see the threat table in
  docs/guide/sandbox.md).
- ``docker``: :mod:`transferlab.coding_rl.sandbox.docker_backend`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from transferlab.coding_rl.sandbox import sandbox_server as wire
from transferlab.coding_rl.sandbox.config import SandboxConfig

SERVER_PATH = Path(wire.__file__).resolve()
SERVER_FLAGS = ["-I", "-S", "-B"]  # isolated mode, no site (.pth files never run), no bytecode writes


class SandboxUnavailable(RuntimeError):
    """The backend cannot run on this machine; the message says why and what to use instead."""


class InfraError(RuntimeError):
    """The sandbox itself failed (not the candidate); the job is retried and never counts as a pass."""


@dataclass(frozen=True)
class ExecutionRequest:
    """One job: the candidate's source, what to call, the encoded argument lists, the limits."""

    source: str
    entry_point: str
    inputs: list[Any]
    limits: dict[str, float | int]
    calls: list[str | None] | None = None  # per input: another function to call (None: the entry point)

    def to_job(self) -> dict[str, Any]:
        job = {
            "source": self.source,
            "entry_point": self.entry_point,
            "inputs": self.inputs,
            "limits": self.limits,
        }
        if self.calls is not None and any(c is not None for c in self.calls):
            job["calls"] = self.calls
        return job


@dataclass
class ExecutionReport:
    """What the sandbox saw; see `sandbox_server.supervise` for the fields."""

    reason: str | None = None  # None, "timeout" or "output_limit"
    frames: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""
    output_bytes: int = 0
    exit_code: int | None = None
    signal: int | None = None
    wall_s: float = 0.0
    infra_error: str | None = None

    @classmethod
    def from_raw(cls, raw: Any) -> ExecutionReport:
        if not isinstance(raw, dict):
            return cls(infra_error="malformed reply from the sandbox server")
        if "infra_error" in raw and "frames" not in raw:
            return cls(infra_error=str(raw["infra_error"]))
        frames = [f for f in raw.get("frames", []) if isinstance(f, dict)]
        return cls(
            reason=raw.get("reason"),
            frames=frames,
            output=str(raw.get("output", "")),
            output_bytes=int(raw.get("output_bytes", 0)),
            exit_code=raw.get("exit_code"),
            signal=raw.get("signal"),
            wall_s=float(raw.get("wall_s", 0.0)),
            infra_error=raw.get("infra_error"),
        )


class SandboxBackend(Protocol):
    """Runs jobs; thread-safe, at most `workers` at a time."""

    name: str
    workers: int

    def execute(self, request: ExecutionRequest) -> ExecutionReport: ...

    def close(self) -> None: ...


def read_frame_until(fd: int, deadline: float) -> Any:
    """Read one frame from fd, raising InfraError if it does not arrive by `deadline` (monotonic)."""
    buf = bytearray()
    need = 4
    while len(buf) < need:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise InfraError("the sandbox server did not answer in time")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, min(need - len(buf), 1 << 20))
        if not chunk:
            raise InfraError("the sandbox server closed the connection")
        buf.extend(chunk)
        if need == 4 and len(buf) == 4:
            size = int.from_bytes(buf, "big")
            if size > wire.MAX_FRAME:
                raise InfraError("oversized frame from the sandbox server")
            need = 4 + size
    body = bytes(buf[4:])
    if wire.count_elements(body) > 2 * wire.MAX_RESULT_ELEMENTS:  # the server bounds what it relays
        raise InfraError("a reply from the sandbox server holds more values than any job can produce")
    return json.loads(body.decode("utf-8"))


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


class _ForkServer:
    """One warm server process (stdio frames), jailed in its own namespaces."""

    def __init__(self, uid: int, config: SandboxConfig) -> None:
        self.grace_s = config.client_grace_s
        self.jail_dir = tempfile.mkdtemp(prefix="transferlab-jail-")
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the server; closed in close())
        cmd = [
            sys.executable,
            *SERVER_FLAGS,
            str(SERVER_PATH),
            "--stdio",
            "--jail",
            self.jail_dir,
            "--pidns",
            "--uid",
            str(uid),
            "--jail-size-mb",
            str(config.jail_size_mb),
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env={}, close_fds=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.in_fd, self.out_fd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        try:
            read_frame_until(self.out_fd, time.monotonic() + 20)
        except InfraError:
            self.close()
            raise SandboxUnavailable(
                "the fork server did not start: "
                + self._log_tail()
                + "\nfix: run as root on Linux (it needs mount/network/PID namespaces), "
                "or use --backend subprocess"
            ) from None

    def _log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-800:].strip() or "(no output)"

    def run(self, job: dict[str, Any]) -> Any:
        wire.write_all(self.in_fd, wire.pack_frame(job))
        return read_frame_until(self.out_fd, time.monotonic() + float(job["limits"]["wall_s"]) + self.grace_s)

    def ping(self) -> None:
        """Round trip to the server: when it answers, every earlier job is fully cleaned up."""
        wire.write_all(self.in_fd, wire.pack_frame({"op": "ping"}))
        read_frame_until(self.out_fd, time.monotonic() + self.grace_s)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=3)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.log.close()
        shutil.rmtree(self.jail_dir, ignore_errors=True)


UID_LOCK_DIR = Path(tempfile.gettempdir()) / "transferlab-uid-locks"


class _UidPool:
    """Hands out unprivileged uids that no other job on this machine is using.

    Jobs are killed per uid (`kill(-1)` as that uid), so two jobs must never share one, even across
    processes: each uid in use is held with an exclusive `flock` on a file in UID_LOCK_DIR.
    """

    def __init__(self, first: int, count: int, span: int = 100) -> None:
        self._first, self._span = first, max(span, count)
        self._slots = threading.Semaphore(count)
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}

    def take(self) -> int:
        self._slots.acquire()
        UID_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        with self._lock:
            for uid in range(self._first, self._first + self._span):
                if uid in self._held:
                    continue
                fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._held[uid] = fd
                return uid
        self._slots.release()
        raise SandboxUnavailable(
            f"all sandbox uids {self._first}..{self._first + self._span - 1} are in use by other "
            "transferlab processes; wait for them or set SandboxConfig.uid_base to another range"
        )

    def give(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        self._slots.release()


class ForkServerBackend:
    """Warm fork servers, `workers` of them, each serving one job at a time."""

    name = "forkserver"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        if sys.platform != "linux" or not _is_root():
            raise SandboxUnavailable(
                "the forkserver backend needs root on Linux: it enters fresh mount, network and PID "
                "namespaces and drops each job to an unprivileged uid. Run as root, or use --backend "
                "subprocess (weaker isolation) or --backend docker."
            )
        self.workers = self.config.workers
        self._uids = _UidPool(self.config.uid_base, self.workers)
        self._idle: queue.LifoQueue[_ForkServer] = queue.LifoQueue()
        self._slots = threading.Semaphore(self.workers)
        self._lock = threading.Lock()
        self._servers: dict[int, _ForkServer] = {}
        self._closed = False

    def _acquire(self) -> _ForkServer:
        try:
            server = self._idle.get_nowait()
            if server.alive():
                return server
            self._discard(server)
        except queue.Empty:
            pass
        uid = self._uids.take()
        try:
            server = _ForkServer(uid, self.config)
        except BaseException:
            self._uids.give(uid)
            raise
        with self._lock:
            self._servers[id(server)] = server
        server.uid = uid  # type: ignore[attr-defined]
        return server

    def _discard(self, server: _ForkServer) -> None:
        server.close()
        with self._lock:
            owned = self._servers.pop(id(server), None) is not None
        if owned:  # (close() already gave back the uids of the servers it took)
            self._uids.give(server.uid)  # type: ignore[attr-defined]

    def execute(self, request: ExecutionRequest) -> ExecutionReport:
        if self._closed:
            raise RuntimeError("backend is closed")
        with self._slots:
            server = self._acquire()
            try:
                raw = server.run(request.to_job())
            except (InfraError, OSError, ValueError) as exc:
                self._discard(server)
                return ExecutionReport(infra_error=f"fork server failed: {exc}")
            if isinstance(raw, dict) and "infra_error" in raw:
                self._discard(server)  # it exits after an infra error: the retry gets a fresh one
            else:
                self._idle.put(server)
        return ExecutionReport.from_raw(raw)

    def sync(self) -> None:
        """Wait until every idle server has cleaned up after its last job (it replies first, then cleans)."""
        held = []
        with self._slots:
            while True:
                try:
                    held.append(self._idle.get_nowait())
                except queue.Empty:
                    break
            for server in held:
                with contextlib.suppress(InfraError, OSError):
                    server.ping()
                self._idle.put(server)

    def server_pids(self) -> list[int]:
        """Process ids of the warm servers (for tests that kill one)."""
        with self._lock:
            return [s.proc.pid for s in self._servers.values() if s.alive()]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.close()
            self._uids.give(server.uid)  # type: ignore[attr-defined]

    def __enter__(self) -> ForkServerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def world_readable_tree(path: Path) -> bool:
    """Whether an unprivileged user can reach and read `path` (every parent traversable, itself readable)."""
    path = path.resolve()
    for parent in [*reversed(path.parents), path]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH or (parent == path and not mode & stat.S_IROTH):
            return False
    return True


def interpreter_for_unprivileged() -> str:
    """An interpreter whose standard library the sandbox uid can read.

    Candidates import standard-library modules after dropping to an unprivileged uid. An interpreter
    installed under a private home (pyenv in /root, mode 0700) cannot serve them; the system's
    python3 can. Without a chroot (the subprocess backend) we therefore pick that one.
    """
    stdlib = Path(os.__file__).parent
    if not _is_root() or world_readable_tree(stdlib):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            out = subprocess.run(
                [candidate, "-I", "-S", "-c", "import os; print(os.path.dirname(os.__file__))"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if out.returncode == 0 and world_readable_tree(Path(out.stdout.strip())):
                return candidate
    raise SandboxUnavailable(
        f"the subprocess backend drops candidates to an unprivileged uid, which cannot read this "
        f"interpreter's standard library ({stdlib}) and no system python3 is readable either; install "
        "python3 from the system packages, or use --backend forkserver"
    )


class SubprocessBackend:
    """A fresh interpreter per job: same rlimits and uid drop as the fork server, no namespaces."""

    name = "subprocess"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.workers = self.config.workers
        self._uids = _UidPool(self.config.uid_base + 100, self.workers)
        self.drops_privileges = _is_root()
        self.python = interpreter_for_unprivileged()

    def execute(self, request: ExecutionRequest) -> ExecutionReport:
        uid = self._uids.take()
        work_root = tempfile.mkdtemp(prefix="transferlab-sub-")
        os.chmod(work_root, 0o711)
        cmd = [
            self.python,
            *SERVER_FLAGS,
            str(SERVER_PATH),
            "--once",
            "--uid",
            str(uid),
            "--work-root",
            work_root,
        ]
        try:
            with tempfile.TemporaryFile() as log:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env={}, close_fds=True
                )
                assert proc.stdin is not None and proc.stdout is not None
                try:
                    wire.write_all(proc.stdin.fileno(), wire.pack_frame(request.to_job()))
                    proc.stdin.close()
                    deadline = (
                        time.monotonic() + float(request.limits["wall_s"]) + self.config.client_grace_s + 5
                    )
                    raw = read_frame_until(proc.stdout.fileno(), deadline)
                except (InfraError, OSError, ValueError) as exc:
                    proc.kill()
                    log.seek(0)
                    tail = log.read().decode("utf-8", "replace")[-300:]
                    return ExecutionReport(infra_error=f"subprocess sandbox failed: {exc} {tail}".strip())
                finally:
                    proc.stdout.close()
                    proc.wait()
        finally:
            try:
                wire.remove_tree(work_root)  # any depth: shutil.rmtree recurses and can raise
            finally:
                self._uids.give(uid)
        return ExecutionReport.from_raw(raw)

    def close(self) -> None:
        pass

    def __enter__(self) -> SubprocessBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_backend(config: SandboxConfig) -> SandboxBackend:
    """Build the backend named by `config.backend`."""
    if config.backend == "forkserver":
        return ForkServerBackend(config)
    if config.backend == "subprocess":
        return SubprocessBackend(config)
    from transferlab.coding_rl.sandbox.docker_backend import DockerBackend

    return DockerBackend(config)


def open_backend(config: SandboxConfig) -> tuple[SandboxBackend, SandboxConfig, str | None]:
    """The configured backend, or subprocess where it cannot run here.

    Returns (backend, the config it runs with, why it fell back — None if it did not). A requested
    subprocess backend that cannot run raises SandboxUnavailable.
    """
    try:
        return make_backend(config), config, None
    except (SandboxUnavailable, ImportError) as err:
        if config.backend == "subprocess":
            raise
        reason = f"the {config.backend} backend is unavailable here: {err}"
    fallback = config.model_copy(update={"backend": "subprocess"})
    return make_backend(fallback), fallback, reason

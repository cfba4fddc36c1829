"""Docker backend: a warm pool of locked-down containers, each running the fork server.

Each container runs ``sandbox_server.py --listen`` (bind-mounted read-only) as its only process, with no
network, a read-only root, a small tmpfs for job directories, memory/CPU/pids limits, every capability
dropped but the few the server needs to create job directories and drop to an unprivileged uid, and
``no-new-privileges``. Jobs travel over a unix socket in a per-container directory. Containers carry
labels naming their owner process; they are removed when the pool closes, when a job's client-side
deadline passes, when their owner is found dead (`reap_orphans`), and by themselves (``--idle-exit`` +
auto-remove) if everything else failed.

The image is built from Debian packages with ``transferlab sandbox build-image`` (debootstrap, then
``docker import``), since no registry is reachable.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from typing import Any

from transferlab.coding_rl.sandbox import sandbox_server as wire
from transferlab.coding_rl.sandbox.backends import (
    SERVER_PATH,
    ExecutionReport,
    ExecutionRequest,
    InfraError,
    SandboxUnavailable,
    read_frame_until,
)
from transferlab.coding_rl.sandbox.config import SandboxConfig

LABEL = "transferlab.sandbox"
OWNER_LABEL = "transferlab.owner"
SERVER_DIR_IN_CONTAINER = "/sandbox"
SOCKET_DIR_IN_CONTAINER = "/sock"
# The server (container root) needs these to make per-job directories, drop to the job uid and kill
# it; the candidate, running as that uid, has none of them.
SERVER_CAPS = ["SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER"]


def _owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable(
            f"the docker backend needs the 'docker' extra ({exc}): pip install 'transferlab[docker]'"
        ) from None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        raise SandboxUnavailable(
            f"no Docker engine answers ({type(exc).__name__}: {str(exc)[:200]}). Start dockerd "
            "(as root: apt-get install -y docker.io && dockerd &), or use --backend forkserver."
        ) from None
    return client


class _Container:
    """One warm container and its socket connection."""

    def __init__(self, client: Any, uid: int, config: SandboxConfig) -> None:
        self.grace_s = config.client_grace_s
        self.sock_dir = tempfile.mkdtemp(prefix="transferlab-docker-")
        self.sock: socket.socket | None = None
        self.container = client.containers.run(
            config.docker_image,
            command=[
                "python3",
                "-I",
                "-S",
                "-B",
                f"{SERVER_DIR_IN_CONTAINER}/{SERVER_PATH.name}",
                "--listen",
                f"{SOCKET_DIR_IN_CONTAINER}/s.sock",
                "--uid",
                str(uid),
                "--work-root",
                "/work",
                "--idle-exit",
                str(config.docker_idle_exit_s),
            ],
            detach=True,
            auto_remove=True,
            network_mode="none",
            read_only=True,
            user="0",
            tmpfs={"/work": "size=64m,mode=755,nosuid,nodev"},
            volumes={
                str(SERVER_PATH.parent): {"bind": SERVER_DIR_IN_CONTAINER, "mode": "ro"},
                self.sock_dir: {"bind": SOCKET_DIR_IN_CONTAINER, "mode": "rw"},
            },
            mem_limit=f"{config.memory_mb + 128}m",
            memswap_limit=f"{config.memory_mb + 128}m",
            pids_limit=config.max_processes + 16,
            nano_cpus=1_000_000_000,
            cap_drop=["ALL"],
            cap_add=SERVER_CAPS,
            security_opt=["no-new-privileges"],
            environment={},
            labels={LABEL: "1", OWNER_LABEL: _owner_tag()},
        )
        try:
            self._connect(time.monotonic() + 20)
        except InfraError:
            self.close()
            raise

    def _connect(self, deadline: float) -> None:
        path = os.path.join(self.sock_dir, "s.sock")
        while time.monotonic() < deadline:
            if os.path.exists(path):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(path)
                    self.sock = sock
                    return
                except OSError:
                    sock.close()
            time.sleep(0.02)
        raise InfraError("the sandbox container did not open its socket in time")

    def run(self, job: dict[str, Any]) -> Any:
        assert self.sock is not None
        fd = self.sock.fileno()
        wire.write_all(fd, wire.pack_frame(job))
        return read_frame_until(fd, time.monotonic() + float(job["limits"]["wall_s"]) + self.grace_s)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        with contextlib.suppress(Exception):  # already gone (auto_remove) or the engine is down
            self.container.remove(force=True)
        shutil.rmtree(self.sock_dir, ignore_errors=True)


class DockerBackend:
    """`workers` warm containers; a job that overruns its client-side deadline costs its container."""

    name = "docker"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig(backend="docker")
        self.workers = self.config.workers
        self.client = _docker_client()
        try:
            self.client.images.get(self.config.docker_image)
        except Exception:
            raise SandboxUnavailable(
                f"the Docker image {self.config.docker_image!r} is missing; build it with "
                "`transferlab sandbox build-image` (debootstrap + docker import, about a minute)"
            ) from None
        self.reap_orphans()
        self._idle: queue.LifoQueue[_Container] = queue.LifoQueue()
        self._slots = threading.Semaphore(self.workers)
        self._lock = threading.Lock()
        self._live: dict[int, _Container] = {}
        self._uid_next = self.config.uid_base + 200
        self._closed = False

    def reap_orphans(self) -> int:
        """Remove sandbox containers whose owner process (on this host) is gone. Returns how many."""
        host = socket.gethostname()
        removed = 0
        for container in self.client.containers.list(all=True, filters={"label": LABEL}):
            owner = container.labels.get(OWNER_LABEL, "")
            owner_host, _, pid = owner.rpartition(":")
            if owner_host == host and pid.isdigit() and _pid_alive(int(pid)):
                continue
            try:
                container.remove(force=True)
                removed += 1
            except Exception:
                pass
        return removed

    def _acquire(self) -> _Container:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            uid = self._uid_next
            self._uid_next += 1
        box = _Container(self.client, uid, self.config)
        with self._lock:
            self._live[id(box)] = box
        return box

    def _discard(self, box: _Container) -> None:
        box.close()
        with self._lock:
            self._live.pop(id(box), None)

    def execute(self, request: ExecutionRequest) -> ExecutionReport:
        if self._closed:
            raise RuntimeError("backend is closed")
        with self._slots:
            try:
                box = self._acquire()
            except (InfraError, OSError) as exc:
                return ExecutionReport(infra_error=f"could not start a sandbox container: {exc}")
            except Exception as exc:  # docker.errors.*
                return ExecutionReport(infra_error=f"could not start a sandbox container: {exc}")
            try:
                raw = box.run(request.to_job())
            except (InfraError, OSError, ValueError) as exc:
                self._discard(box)  # the container is removed even though the client gave up on it
                return ExecutionReport(infra_error=f"sandbox container failed: {exc}")
            if isinstance(raw, dict) and "infra_error" in raw:
                self._discard(box)  # its server exits after an infra error
            else:
                self._idle.put(box)
        return ExecutionReport.from_raw(raw)

    def container_ids(self) -> list[str]:
        """Ids of this pool's containers (for tests)."""
        with self._lock:
            return [box.container.id for box in self._live.values()]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            boxes = list(self._live.values())
            self._live.clear()
        for box in boxes:
            box.close()

    def __enter__(self) -> DockerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

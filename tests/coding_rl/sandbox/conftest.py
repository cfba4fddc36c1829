"""Sandbox fixtures: one warm backend of each kind per session, and a harness for attack tests.

Every test that takes ``backend``, ``verifier`` or ``harness`` runs once per backend: ``forkserver``,
``subprocess`` and ``docker`` (marked ``docker``). A backend that cannot start here is skipped with the
reason, unless ``TRANSFERLAB_REQUIRE_<NAME>=1`` (as in CI), which turns the skip into a failure.

The session uses its own range of sandbox uids (``UID_BASE``), so "no process of the sandbox uid is
left" can be checked in /proc without seeing the jobs of other test runs on the same machine, and its
own temporary directory (``tempfile.tempdir`` during harness tests), so "no file is left" can be
checked without seeing theirs.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from transferlab.coding_rl.sandbox.backends import ForkServerBackend, SandboxUnavailable, SubprocessBackend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.sandbox_server import PREFORK_DEPTH
from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict

BACKEND_NAMES = ("forkserver", "subprocess", "docker")
# Backends lay out their uids from uid_base: forkserver +0..99, subprocess +100..199, docker +200..
UID_BASE = 100_000 + (os.getpid() % 1000) * 300

# A secret in this process's environment before any backend starts: no candidate may ever see it.
SECRET_ENV = "TRANSFERLAB_TEST_SECRET"
SECRET = "s3cr3t-" + secrets.token_hex(12)
os.environ[SECRET_ENV] = SECRET

HONEST_ADD = "def add(a, b):\n    return a + b\n"
ADD_TASK: dict[str, Any] = {
    "task_id": "attack/add",
    "task_description": "Return a + b.",
    "function_signature": "def add(a: int, b: int) -> int:",
    "test_cases": [{"args": [1, 2], "expected": 3}, {"args": [-5, 5], "expected": 0}],
    "hidden_test_cases": [
        {"args": [10, 20], "expected": 30},
        {"args": [123456789, 987654321], "expected": 1111111110},
        {"args": [-7, -8], "expected": -15},
    ],
    "time_limit_s": 1.0,
    "efficiency_budget_s": 1.0,
}

# (attack, backend) -> verdict, printed as a table at the end of the run.
VERDICTS: dict[tuple[str, str], str] = {}
_LIVE: dict[str, Any] = {}


def add_task(**overrides: Any) -> CodeTask:
    """The task attacks cheat on: add(a, b), two developer tests and three hidden ones."""
    return task_from_dict({**ADD_TASK, **overrides})


def _unavailable(name: str, exc: BaseException) -> NoReturn:
    env = f"TRANSFERLAB_REQUIRE_{name.upper()}"
    if os.environ.get(env) == "1":
        pytest.fail(f"{env}=1 but the {name} backend is unavailable: {exc}")
    pytest.skip(f"{name} backend unavailable here: {exc}")


def _started(name: str, backend: Any, config: SandboxConfig) -> Any:
    """Run one honest job so that a backend that cannot start is skipped here, not failed later."""
    try:
        result = Verifier(backend, config).grade(add_task(), HONEST_ADD)
    except SandboxUnavailable as exc:
        backend.close()
        _unavailable(name, exc)
    if result.status == "infra_error":
        backend.close()
        _unavailable(name, RuntimeError(result.message))
    if result.status != "passed":
        backend.close()
        pytest.fail(f"the {name} backend cannot grade an honest job: {result.status}: {result.message}")
    _LIVE[name] = backend
    return backend


@pytest.fixture(scope="session")
def sandbox_config() -> SandboxConfig:
    return SandboxConfig(workers=1, uid_base=UID_BASE)


@pytest.fixture(scope="session")
def sandbox_forkserver(sandbox_config: SandboxConfig, scratch_root: Path) -> Iterator[Any]:
    try:
        backend = ForkServerBackend(sandbox_config)
    except SandboxUnavailable as exc:
        _unavailable("forkserver", exc)
    yield _started("forkserver", backend, sandbox_config)
    _LIVE.pop("forkserver", None)
    backend.close()


@pytest.fixture(scope="session")
def sandbox_subprocess(sandbox_config: SandboxConfig, scratch_root: Path) -> Iterator[Any]:
    backend = SubprocessBackend(sandbox_config)
    yield _started("subprocess", backend, sandbox_config)
    _LIVE.pop("subprocess", None)
    backend.close()


@pytest.fixture(scope="session")
def sandbox_docker(sandbox_config: SandboxConfig, scratch_root: Path) -> Iterator[Any]:
    config = SandboxConfig(**{**sandbox_config.model_dump(), "backend": "docker"})
    try:
        from transferlab.coding_rl.sandbox.docker_backend import DockerBackend

        backend = DockerBackend(config)
    except (ImportError, SandboxUnavailable) as exc:
        _unavailable("docker", exc)
    yield _started("docker", backend, config)
    _LIVE.pop("docker", None)
    backend.close()


@pytest.fixture(params=["forkserver", "subprocess", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> Any:
    """Each of the session's backends in turn (docker tests carry the `docker` mark)."""
    return request.getfixturevalue(f"sandbox_{request.param}")


@pytest.fixture
def verifier(backend: Any, sandbox_config: SandboxConfig) -> Verifier:
    return Verifier(backend, sandbox_config)


@pytest.fixture(scope="session")
def scratch_root() -> Iterator[Path]:
    """Set up before (so torn down after) the backends, whose jails may live in it."""
    root = Path(tempfile.mkdtemp(prefix="transferlab-attacks-"))
    root.chmod(0o711)  # like a job root under /tmp: sandbox uids may pass through, not list or write
    yield root
    # what a job left here failed its test already; do not leave it on the machine as well
    from transferlab.coding_rl.sandbox.sandbox_server import remove_tree

    remove_tree(str(root))


# --------------------------------------------------------------------------------------------------
# What a job may have left behind.
# --------------------------------------------------------------------------------------------------


def _status_fields(pid: str) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as fh:
        return dict(line.split(":\t", 1) for line in fh.read().splitlines() if ":\t" in line)


def sandbox_processes() -> list[str]:
    """Live processes of this session's sandbox uids, except each fork server's warm children (whose
    parent is the server's zygote: its child running as root)."""
    lo, hi = UID_BASE, UID_BASE + 300
    servers: set[int] = set()
    fork = _LIVE.get("forkserver")
    if fork is not None:
        fork.sync()  # servers reply first and reap the finished job after: wait for that
        servers = set(fork.server_pids())
    table: dict[str, tuple[int, str, int, str]] = {}  # pid -> uid, state, ppid, name
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = _status_fields(pid)
            uid, ppid = int(st["Uid"].split()[0]), int(st["PPid"])
            table[pid] = (uid, st["State"].strip(), ppid, st.get("Name", "?"))
        except (OSError, KeyError, ValueError):
            continue
    warm_parents = {int(pid) for pid, (uid, _, ppid, _) in table.items() if ppid in servers and uid == 0}
    found: list[str] = []
    warm_seen: dict[int, int] = {}
    for pid, (uid, state, ppid, name) in table.items():
        if not lo <= uid < hi or state[:1] in ("Z", "X"):
            continue
        if ppid in warm_parents and warm_seen.get(ppid, 0) < PREFORK_DEPTH:
            warm_seen[ppid] = warm_seen.get(ppid, 0) + 1  # a child forked ahead for a next job
            continue
        found.append(f"pid {pid} uid {uid} ppid {ppid} {state} {name.strip()}")
    return found


def _forkserver_leftovers(backend: Any) -> list[str]:
    """Job directories in each fork server's jail other than the (empty) ones of its warm children."""
    backend.sync()  # servers reply first and clean up after: wait for that
    out = []
    for server in list(getattr(backend, "_servers", {}).values()):
        if not server.alive():
            continue
        work = Path(f"/proc/{server.proc.pid}/root{server.jail_dir}/work")  # the server's mount view
        try:
            entries = sorted(work.iterdir())
        except OSError:
            continue
        if len(entries) > PREFORK_DEPTH:
            out.append(f"jail {work}: {[e.name for e in entries]}")
        for entry in entries:
            inner = list(entry.iterdir()) if entry.is_dir() else [entry]
            if inner:
                out.append(f"jail {entry}: {[p.name for p in inner][:10]}")
    return out


def _docker_leftovers(backend: Any) -> list[str]:
    out = []
    for box in list(getattr(backend, "_live", {}).values()):
        try:
            pid = backend.client.api.inspect_container(box.container.id)["State"]["Pid"]
            entries = os.listdir(f"/proc/{pid}/root/work")
        except Exception:  # the container is gone: nothing of it is left
            continue
        if entries:
            out.append(f"container {box.container.id[:12]} /work: {entries[:10]}")
    return out


def leftover_files(scratch: Path) -> list[str]:
    """Files a job left: in the session's temp dir, in fork server jails, in container /work."""
    allowed = set()
    fork, dock = _LIVE.get("forkserver"), _LIVE.get("docker")
    if fork is not None:
        allowed |= {Path(s.jail_dir).name for s in list(getattr(fork, "_servers", {}).values())}
    if dock is not None:
        allowed |= {Path(b.sock_dir).name for b in list(getattr(dock, "_live", {}).values())}
    out = [f"temp {scratch / name}" for name in sorted(os.listdir(scratch)) if name not in allowed]
    if fork is not None:
        out += _forkserver_leftovers(fork)
    if dock is not None:
        out += _docker_leftovers(dock)
    return out


# --------------------------------------------------------------------------------------------------
# The harness.
# --------------------------------------------------------------------------------------------------


@dataclass
class Graded:
    result: GradeResult
    wall_s: float

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


@dataclass
class Harness:
    """One backend, a verifier on it, and the checks every attack ends with."""

    name: str
    backend: Any
    config: SandboxConfig
    verifier: Verifier
    scratch: Path

    @staticmethod
    def add_task(**overrides: Any) -> CodeTask:
        return add_task(**overrides)

    def grade(self, task: CodeTask, source: str) -> Graded:
        started = time.monotonic()
        result = self.verifier.grade(task, source)
        return Graded(result, time.monotonic() - started)

    def record(self, attack: str, verdict: str) -> None:
        VERDICTS[(attack, self.name)] = verdict

    def not_contained(self, attack: str, what: str, verdict: str = "not run") -> NoReturn:
        """Skip, loudly: this backend cannot contain the attack (so the test does not run its dangerous
        part; `verdict` says what it did run)."""
        self.record(attack, f"NOT CONTAINED ({verdict})")
        pytest.skip(f"NOT CONTAINED by {self.name}: {what}; use forkserver or docker for untrusted code")

    def assert_clean(self, grace_s: float = 3.0) -> None:
        """No process of the sandbox uids and no file of a job is left (polled for `grace_s`)."""
        deadline = time.monotonic() + grace_s
        while True:
            procs, files = sandbox_processes(), leftover_files(self.scratch)
            if not procs and not files:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"left behind on {self.name}: processes {procs}, files {files}")
            time.sleep(0.05)

    def assert_honest_job_passes(self) -> None:
        result = self.verifier.grade(add_task(), HONEST_ADD)
        assert (result.status, result.pass_rate) == ("passed", 1.0), (result.status, result.message)

    def attack(
        self,
        attack: str,
        task: CodeTask,
        source: str,
        statuses: str | tuple[str, ...],
        *,
        pass_rate: float = 0.0,
        extra_s: float = 3.0,
    ) -> Graded:
        """Grade a candidate, then check: the verdict is one of `statuses` with `pass_rate`, it came
        within the task's time limit + `extra_s`, without an infra error, nothing is left behind and
        the next honest job passes."""
        statuses = (statuses,) if isinstance(statuses, str) else statuses
        graded = self.grade(task, source)
        r = graded.result
        self.record(attack, f"{r.status} ({r.passed}/{r.total})")
        detail = f"{r.status}: {r.message} | tests {[t.message for t in r.tests]} | output {r.output[:300]!r}"
        assert r.status in statuses, detail
        assert r.pass_rate == pass_rate, detail
        assert r.infra_retries == 0, detail
        assert graded.wall_s < task.time_limit_s + extra_s, f"took {graded.wall_s:.2f}s: {detail}"
        self.assert_clean()
        self.assert_honest_job_passes()
        return graded


def _harness(backend: Any, config: SandboxConfig, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    if not getattr(backend, "drops_privileges", True):
        # candidates would run as this user: kill(-1) alone would end the test run and its shell
        pytest.skip(f"NOT CONTAINED by {backend.name} when not run as root (no uid drop): attacks not run")
    # the backends' temporary directories (subprocess job roots, jails, socket dirs) go to scratch
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return Harness(backend.name, backend, config, Verifier(backend, config), scratch)


@pytest.fixture
def harness(
    backend: Any, sandbox_config: SandboxConfig, scratch_root: Path, monkeypatch: pytest.MonkeyPatch
) -> Harness:
    """Each backend in turn, with the checks every attack ends with."""
    return _harness(backend, sandbox_config, scratch_root, monkeypatch)


@pytest.fixture
def forkserver_harness(
    sandbox_forkserver: Any,
    sandbox_config: SandboxConfig,
    scratch_root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Harness:
    """The fork server backend alone, for tests of its own failure modes."""
    return _harness(sandbox_forkserver, sandbox_config, scratch_root, monkeypatch)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not VERDICTS:
        return
    attacks = list(dict.fromkeys(attack for attack, _ in VERDICTS))
    names = [n for n in BACKEND_NAMES if any(b == n for _, b in VERDICTS)]
    first = max(len(a) for a in attacks) + 2
    width = max(len(v) for v in VERDICTS.values()) + 2
    terminalreporter.section("sandbox attack verdicts: status (passed/total) per backend")
    terminalreporter.write_line("attack".ljust(first) + "".join(n.ljust(width) for n in names))
    for attack in attacks:
        cells = "".join(VERDICTS.get((attack, n), "-").ljust(width) for n in names)
        terminalreporter.write_line((attack.ljust(first) + cells).rstrip())

"""Backends: every limit really applies, batches come back in order, and a dead server is an infra
error that is retried, never a verdict on the candidate."""

from __future__ import annotations

import math
import os
import signal
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from transferlab.coding_rl.sandbox.backends import ForkServerBackend, SubprocessBackend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.sandbox_server import PREFORK_DEPTH
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict

HONEST_ADD = "def add(a, b):\n    return a + b\n"


def probe_task(expected: Any, time_limit_s: float = 2.0, entry: str = "probe") -> CodeTask:
    return task_from_dict(
        {
            "task_id": f"limits/{entry}",
            "task_description": "report what the sandbox allows",
            "function_signature": f"def {entry}(x):",
            "test_cases": [{"input": 0, "expected": expected}],
            "time_limit_s": time_limit_s,
        }
    )


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def run(verifier: Verifier, expected: Any, source: str, time_limit_s: float = 2.0) -> Any:
    return verifier.grade(probe_task(expected, time_limit_s), source)


def test_rlimits_are_the_configured_ones(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    # CPU time cannot outrun the wall-time limit in one thread, so its rlimit is checked as set
    limits = sandbox_config.job_limits(2.0)
    cpu = math.ceil(float(limits["cpu_s"]))
    mib = 1024 * 1024
    expected = {
        "AS": [sandbox_config.memory_mb * mib] * 2,
        "CPU": [cpu, cpu + 1],
        "NPROC": [sandbox_config.max_processes] * 2,
        "FSIZE": [sandbox_config.max_file_bytes] * 2,
        "NOFILE": [sandbox_config.max_open_files] * 2,
        "CORE": [0, 0],
        "STACK": [64 * mib] * 2,
    }
    source = src("""
        import resource

        def probe(x):
            return {n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n)))
                    for n in ("AS", "CPU", "NPROC", "FSIZE", "NOFILE", "CORE", "STACK")}
    """)
    result = run(verifier, expected, source)
    assert result.status == "passed", result.tests[0].message


def test_identity_environment_and_descriptors(verifier: Verifier) -> None:
    source = src("""
        import os

        def probe(x):
            open_fds = []
            for fd in range(64):
                try:
                    os.fstat(fd)
                    open_fds.append(fd)
                except OSError:
                    pass
            return [os.getuid() != 0, os.getgid() != 0, os.getgroups(), sorted(os.environ), open_fds]
    """)
    result = run(verifier, [True, True, [], ["HOME", "LANG", "PATH", "TMPDIR"], [0, 1, 2, 3]], source)
    assert result.status == "passed", result.tests[0].message


def test_memory_limit(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    half = sandbox_config.memory_mb // 4
    under = f"def probe(x):\n    return len(bytearray({half} * 1024 * 1024)) > 0\n"
    assert run(verifier, True, under).status == "passed"
    over = f"def probe(x):\n    return len(bytearray({sandbox_config.memory_mb} * 1024 * 1024)) > 0\n"
    result = run(verifier, True, over)
    assert (result.status, result.pass_rate) == ("memory_limit", 0.0)


def test_wall_time_limit(verifier: Verifier) -> None:
    start = time.monotonic()
    result = run(verifier, 0, "import time\n\ndef probe(x):\n    time.sleep(10)\n", time_limit_s=0.5)
    elapsed = time.monotonic() - start
    assert result.status == "timeout"
    assert 0.5 <= result.runtime_s < 0.8 and elapsed < 3.0
    fast = run(verifier, 0, "import time\n\ndef probe(x):\n    time.sleep(0.2)\n    return 0\n", 0.5)
    assert fast.status == "passed"


def test_process_limit(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    source = src(f"""
        import os, time

        def probe(x):
            children = 0
            while children < 10 * {sandbox_config.max_processes}:
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
            return 0 < children < {sandbox_config.max_processes}
    """)
    result = run(verifier, True, source)
    assert result.status == "passed", result.tests[0].message


def test_file_size_limit(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    source = src(f"""
        import errno, os

        def probe(x):
            fd = os.open("big", os.O_WRONLY | os.O_CREAT, 0o600)
            error = None
            try:
                for _ in range({sandbox_config.max_file_bytes} // (1 << 20) + 4):
                    os.write(fd, b"x" * (1 << 20))
            except OSError as exc:
                error = errno.errorcode[exc.errno]
            finally:
                os.close(fd)
            return [error, os.path.getsize("big")]
    """)
    result = run(verifier, ["EFBIG", sandbox_config.max_file_bytes], source)
    assert result.status == "passed", result.tests[0].message


def test_open_files_limit(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    source = src("""
        import os

        def probe(x):
            fds = []
            try:
                while True:
                    fds.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as exc:
                return [exc.strerror, max(fds) + 1]
    """)
    result = run(verifier, ["Too many open files", sandbox_config.max_open_files], source)
    assert result.status == "passed", result.tests[0].message


def test_output_limit(verifier: Verifier, sandbox_config: SandboxConfig) -> None:
    limit = sandbox_config.max_output_bytes
    write = (
        "import sys\n\ndef probe(x):\n    sys.stdout.write('x' * {n})\n    sys.stdout.flush()\n    return 0\n"
    )
    under = run(verifier, 0, write.format(n=limit - 1024))
    assert under.status == "passed" and len(under.output) == 2000  # kept, then cut for the report
    over = run(verifier, 0, write.format(n=limit + 1))
    assert over.status == "output_limit"  # results that arrived still count, like before a timeout


# --------------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------------


def _batch_backend(name: str, config: SandboxConfig) -> Any:
    if name == "forkserver":
        return ForkServerBackend(config)
    if name == "subprocess":
        return SubprocessBackend(config)
    from transferlab.coding_rl.sandbox.docker_backend import DockerBackend

    return DockerBackend(SandboxConfig(**{**config.model_dump(), "backend": "docker"}))


@pytest.mark.parametrize(
    "name", ["forkserver", "subprocess", pytest.param("docker", marks=pytest.mark.docker)]
)
def test_grade_many_returns_results_in_input_order(
    name: str, sandbox_config: SandboxConfig, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(f"sandbox_{name}")  # skipped (or failed, if required) like the others
    config = SandboxConfig(**{**sandbox_config.model_dump(), "workers": 2})
    backend = _batch_backend(name, config)
    in_flight, most = [0], [0]
    lock, real = threading.Lock(), backend.execute

    def counting(request: Any) -> Any:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            return real(request)
        finally:
            with lock:
                in_flight[0] -= 1

    backend.execute = counting
    try:
        items = []
        for i in range(20):
            kind = i % 4
            delay = 0.15 if i % 3 == 0 else 0.0  # uneven run times: completion order differs from input order
            task = task_from_dict(
                {
                    "task_id": f"batch/{i}",
                    "task_description": "add",
                    "function_signature": "def add(a, b):",
                    "test_cases": [{"args": [i, 1], "expected": i + 1}],
                }
            )
            body = {0: "return a + b", 1: "return a - b", 2: "raise ValueError(a)", 3: "return a + b"}[kind]
            items.append((task, f"import time\n\ndef add(a, b):\n    time.sleep({delay})\n    {body}\n"))
        results = Verifier(backend, config).grade_many(items)
    finally:
        backend.close()
    assert [r.task_id for r in results] == [f"batch/{i}" for i in range(20)]
    assert [r.status for r in results] == [("passed", "failed", "failed", "passed")[i % 4] for i in range(20)]
    assert all(r.backend == name for r in results)
    assert most[0] == 2  # two jobs ran at once, never more


# --------------------------------------------------------------------------------------------------
# Infrastructure failures
# --------------------------------------------------------------------------------------------------


def test_a_fork_server_killed_mid_job_is_an_infra_error_that_is_retried(forkserver_harness: Any) -> None:
    # (docker: test_docker_backend covers a container that stops answering)
    harness = forkserver_harness
    task = harness.add_task(time_limit_s=3.0)
    source = src("""
        import time

        SLEPT = []

        def add(a, b):
            if not SLEPT:
                SLEPT.append(time.sleep(0.6))
            return a + b
    """)
    (server_pid,) = harness.backend.server_pids()
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(result=harness.grade(task, source)))
    worker.start()
    time.sleep(0.25)  # the job is sleeping inside the sandbox now
    os.kill(server_pid, signal.SIGKILL)
    worker.join(timeout=30)
    result = box["result"].result
    assert (result.status, result.pass_rate) == ("passed", 1.0), result.message
    assert result.infra_retries >= 1
    assert harness.backend.server_pids() != [server_pid]
    harness.record("fork server killed mid-job", f"{result.status} after {result.infra_retries} retry")
    harness.assert_clean()  # the killed server's job died with it (PR_SET_PDEATHSIG)
    harness.assert_honest_job_passes()


def _root_children_of(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(pid) and fields.get("Uid", "").split()[:1] == ["0"]:
            found.append(int(name))
    return found


def test_a_dead_zygote_is_an_infra_error_that_is_retried_on_a_fresh_server(forkserver_harness: Any) -> None:
    harness = forkserver_harness
    harness.assert_honest_job_passes()
    (server_pid,) = harness.backend.server_pids()
    (zygote_pid,) = _root_children_of(server_pid)  # job children run as the sandbox uid
    os.kill(zygote_pid, signal.SIGKILL)
    # the server cannot get its next child: it replies infra_error and exits; the retry runs on a
    # fresh server, and every job passes
    retries = 0
    for _ in range(PREFORK_DEPTH + 1):
        result = harness.grade(harness.add_task(), HONEST_ADD).result
        assert (result.status, result.pass_rate) == ("passed", 1.0), result.message
        retries += result.infra_retries
    harness.record("the zygote killed", f"passed after {retries} retry")
    assert retries >= 1
    assert harness.backend.server_pids() != [server_pid]
    harness.assert_clean()


def test_a_fork_server_killed_between_jobs_is_replaced(forkserver_harness: Any) -> None:
    harness = forkserver_harness
    for pid in harness.backend.server_pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    harness.assert_honest_job_passes()
    harness.assert_clean()


def test_honest_code_can_import_the_standard_library(verifier: Verifier) -> None:
    """The unprivileged uid must be able to import stdlib modules the server did not preload."""
    from transferlab.coding_rl.tasks.code_task import task_from_dict

    task = task_from_dict(
        {
            "task_description": "sort",
            "function_signature": "def f(x):",
            "test_cases": [{"input": [3, 1, 2], "expected": [1, 2, 3]}],
        }
    )
    source = (
        "import heapq, bisect, fractions, decimal, statistics\n"
        "def f(x):\n    heapq.heapify(x)\n    return [heapq.heappop(x) for _ in range(len(x))]\n"
    )
    result = verifier.grade(task, source)
    assert result.status == "passed", result.message


def test_open_backend_falls_back_to_subprocess_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transferlab.coding_rl.sandbox.backends import open_backend

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    backend, config, reason = open_backend(SandboxConfig(backend="docker", workers=1, memory_mb=256))
    try:
        assert isinstance(backend, SubprocessBackend)
        assert config.backend == "subprocess" and config.memory_mb == 256  # the rest of the config is kept
        assert reason is not None and "docker backend is unavailable" in reason
    finally:
        backend.close()


def test_a_reply_with_too_many_values_is_refused_unparsed(monkeypatch: pytest.MonkeyPatch) -> None:
    # the client bounds what it parses too: a forged or broken reply cannot make it allocate gigabytes
    from transferlab.coding_rl.sandbox import sandbox_server as wire
    from transferlab.coding_rl.sandbox.backends import InfraError, read_frame_until

    monkeypatch.setattr(wire, "MAX_RESULT_ELEMENTS", 10)
    read_fd, write_fd = os.pipe()
    try:
        wire.write_all(write_fd, wire.pack_frame({"frames": [[]] * 3}))
        assert read_frame_until(read_fd, time.monotonic() + 5) == {"frames": [[]] * 3}
        wire.write_all(write_fd, wire.pack_frame({"frames": [[]] * 30}))
        with pytest.raises(InfraError, match="more values"):
            read_frame_until(read_fd, time.monotonic() + 5)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def _locked_by_someone(uid: int) -> bool:
    """Whether the uid's lock file is held (a second open file description cannot take it)."""
    import fcntl

    from transferlab.coding_rl.sandbox.backends import UID_LOCK_DIR

    fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_closing_the_fork_server_backend_gives_its_uids_back(
    sandbox_forkserver: Any, sandbox_config: SandboxConfig
) -> None:
    config = SandboxConfig(**{**sandbox_config.model_dump(), "workers": 2, "uid_base": 64_500})
    for _ in range(2):  # a second backend on the same range starts only if the first gave its uids back
        backend = ForkServerBackend(config)
        verifier = Verifier(backend)
        grades = verifier.grade_many([(probe_task(0), src("def probe(x):\n    return 0\n"))] * 4)
        assert [g.status for g in grades] == ["passed"] * 4
        used = [s.uid for s in backend._servers.values()]
        assert used and all(_locked_by_someone(uid) for uid in used)
        backend.close()
        assert not any(_locked_by_someone(uid) for uid in used), "closed backend still holds its uids"

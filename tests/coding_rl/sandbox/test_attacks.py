"""The adversarial suite: one test per attack, each run against every backend.

Each attack is a candidate solution of a small task. The test checks that the verdict is the correct
one (a cheat gets pass rate 0; resource abuse gets exactly the status it earned), that it came within
the task's time limit plus a little, that nothing is left behind (no process of the sandbox uids, no
file of the job, nothing planted where the host or a later job would find it) and that the next
honest job on the same backend still passes.

Where a backend cannot contain an attack, the test does not run the dangerous part: it is skipped
with "NOT CONTAINED by <backend>" (see docs/guide/sandbox.md's backend table: use forkserver or docker for
untrusted code). A run prints the whole verdict table at the end (conftest.pytest_terminal_summary).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict

REPO = Path(__file__).resolve().parents[3]
HONEST = "def add(a, b):\n    return a + b\n"


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def task(**data: Any) -> CodeTask:
    base: dict[str, Any] = {"task_description": "attack target", "time_limit_s": 1.0}
    return task_from_dict({**base, **data})


SHOUT = task(
    task_id="attack/shout",
    function_signature="def shout(s: str) -> str:",
    test_cases=[{"input": "hi", "expected": "HI!"}],
    hidden_test_cases=[{"input": "zebra", "expected": "ZEBRA!"}],
)
SORT = task(
    task_id="attack/sort",
    function_signature="def sort_list(xs: List[int]) -> List[int]:",
    test_cases=[{"input": [3, 1, 2], "expected": [1, 2, 3]}],
    hidden_test_cases=[{"input": [5, 4], "expected": [4, 5]}],
)
HALF = task(
    task_id="attack/half",
    function_signature="def half(x: int) -> float:",
    test_cases=[{"input": 3, "expected": 1.5}],
    hidden_test_cases=[{"input": 1, "expected": 0.5}],
)

# Some stdlib modules (socket, ctypes) may be unimportable for the sandbox uid when the host's
# interpreter lives where that uid cannot read (pyenv under /root, as on the subprocess backend here).
# A real attacker uses any interpreter it can run, so probes fall back to /usr/bin/python3.
PROBE_RUNNER = src('''
    import os

    def run_probe(code):
        """`code` sets `result`: run it here, or under the system python3 if an import fails here."""
        ns = {"__name__": "probe"}
        try:
            exec(code, ns)
            return str(ns.get("result"))
        except ImportError as exc:
            here = "no import here (%s); " % exc
        with open("probe.py", "w") as fh:
            fh.write(code + "\\nprint(result)\\n")
        status = os.system("/usr/bin/python3 -I probe.py > probe.out 2>&1")
        with open("probe.out") as fh:
            return here + "system python3 (status %d): %s" % (status, fh.read().strip()[-300:])
''')


def probe_candidate(probe: str, entry: str = "add", args: str = "a, b") -> str:
    """A candidate whose every call runs `probe` (which sets `result`) and returns what it found."""
    return PROBE_RUNNER + f"\nPROBE = {src(probe)!r}\n\ndef {entry}({args}):\n    return run_probe(PROBE)\n"


def dev_messages(graded: Any) -> str:
    return " | ".join(t.message for t in graded.tests)


def require_probe_ran(graded: Any, marker: str) -> None:
    """Skip when no interpreter could even attempt the probe here (no module and no system python3)."""
    messages = dev_messages(graded)
    if marker not in messages and "system python3" in messages:
        pytest.skip(f"the probe could not run on this machine: {messages[:300]}")


# --------------------------------------------------------------------------------------------------
# Time: loops, sleeps, blocking reads, ignored signals.
# --------------------------------------------------------------------------------------------------


def test_infinite_loop(harness: Any) -> None:
    source = "def add(a, b):\n    while True:\n        pass\n"
    harness.attack("infinite loop", harness.add_task(time_limit_s=0.5), source, "timeout")


def test_long_sleep(harness: Any) -> None:
    source = "import time\n\ndef add(a, b):\n    time.sleep(3600)\n"
    harness.attack("long sleep", harness.add_task(time_limit_s=0.5), source, "timeout")


def test_blocking_input(harness: Any) -> None:
    # stdin is /dev/null: input() ends at once with EOFError, every test fails, nothing blocks
    graded = harness.attack(
        "blocking input()", harness.add_task(), "def add(a, b):\n    return int(input())\n", "failed"
    )
    assert "EOFError" in dev_messages(graded)


def test_sigterm_ignored(harness: Any) -> None:
    source = src("""
        import signal, time

        def add(a, b):
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
                signal.signal(sig, signal.SIG_IGN)
            while True:
                time.sleep(0.01)
    """)
    harness.attack("SIGTERM ignored", harness.add_task(time_limit_s=0.5), source, "timeout")


# --------------------------------------------------------------------------------------------------
# Processes: fork bomb, a daemon that outlives the job, killing the parent.
# --------------------------------------------------------------------------------------------------


def test_fork_bomb_is_bounded(harness: Any) -> None:
    source = src("""
        import os

        def add(a, b):
            while True:  # every child runs this loop too; RLIMIT_NPROC (and pids_limit) bound them
                try:
                    os.fork()
                except OSError:
                    pass
    """)
    harness.attack("fork bomb", harness.add_task(time_limit_s=1.0), source, "timeout")


def test_setsid_double_fork_daemon_dies_with_the_job(harness: Any) -> None:
    # a correct answer plus a detached grandchild in its own session: the verdict is a plain pass
    # (resource abuse, not a cheat) and the daemon must not outlive the job
    source = src("""
        import os, time

        def add(a, b):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    for fd in range(4):
                        os.close(fd)
                    while True:
                        time.sleep(0.05)
                os._exit(0)
            os.wait()
            return a + b
    """)
    harness.attack("setsid double-fork daemon", harness.add_task(), source, "passed", pass_rate=1.0)


KILLS = {
    "kill(getppid())": "os.kill(os.getppid(), signal.SIGKILL)",
    "kill(-1)": "os.kill(-1, signal.SIGKILL)",
    "killpg(0)": "os.killpg(0, signal.SIGKILL)",
    "kill every pid in /proc": "[os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit()]",
}


@pytest.mark.parametrize(
    "label", list(KILLS), ids=["kill-ppid", "kill-all", "killpg-own-group", "kill-every-pid"]
)
def test_killing_the_parent(harness: Any, label: str) -> None:
    # forkserver: the job is PID 1 of its namespace (getppid() is 0); subprocess and docker: the
    # server runs as root, out of the sandbox uid's reach. Either way the job dies or fails, the
    # server survives (no infra error, no retry) and the next job passes.
    source = src(f"""
        import os, signal

        def add(a, b):
            try:
                {KILLS[label]}
            except OSError:
                pass
            return -1
    """)
    harness.attack(f"kill the parent: {label}", harness.add_task(), source, ("error", "failed"))


# --------------------------------------------------------------------------------------------------
# Memory, stack and crashes.
# --------------------------------------------------------------------------------------------------


def test_memory_bomb(harness: Any) -> None:
    source = src("""
        HOG = []  # kept: later calls hit the limit at once

        def add(a, b):
            while True:
                HOG.append(bytearray(16 * 1024 * 1024))
    """)
    harness.attack("memory bomb", harness.add_task(time_limit_s=3.0), source, "memory_limit")


def test_deep_recursion_crash(harness: Any) -> None:
    # recursion through C (map) overflows the C stack: SIGSEGV, not an exception
    source = src("""
        import sys
        sys.setrecursionlimit(10**6)

        def add(a, b):
            return list(map(add, [a], [b]))
    """)
    graded = harness.attack("deep recursion", harness.add_task(time_limit_s=2.0), source, "error")
    assert "signal 11" in graded.message


def test_ctypes_crash(harness: Any) -> None:
    source = src("""
        def add(a, b):
            try:
                import ctypes
            except ImportError:  # no ctypes for this uid here: the same crash by other means
                import faulthandler
                faulthandler._sigsegv()
            return ctypes.string_at(0)
    """)
    graded = harness.attack("ctypes.string_at(0)", harness.add_task(), source, "error")
    assert "signal 11" in graded.message


# --------------------------------------------------------------------------------------------------
# Output.
# --------------------------------------------------------------------------------------------------


def test_output_flood(harness: Any) -> None:
    source = "def add(a, b):\n    while True:\n        print('x' * 10000)\n"
    graded = harness.attack("output flood", harness.add_task(), source, "output_limit")
    assert len(graded.output) <= 2000


def test_invalid_utf8_output_is_graded_normally(harness: Any) -> None:
    source = src("""
        import sys

        def add(a, b):
            sys.stdout.buffer.write(b"\\xff\\xfe\\x00 tail\\n")
            sys.stdout.flush()
            return a + b
    """)
    graded = harness.attack("invalid UTF-8 on stdout", harness.add_task(), source, "passed", pass_rate=1.0)
    assert "\ufffd\ufffd\\x00 tail" in graded.output  # control characters are written as escapes


# --------------------------------------------------------------------------------------------------
# Exits before, or instead of, results.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source", "status"),
    [
        ("sys.exit(0)", "import sys\n\ndef add(a, b):\n    sys.exit(0)\n", "failed"),
        ("raise SystemExit", "def add(a, b):\n    raise SystemExit\n", "failed"),
        ("os._exit(0)", "import os\n\ndef add(a, b):\n    os._exit(0)\n", "error"),
        ("posix._exit(0)", "import posix\n\ndef add(a, b):\n    posix._exit(0)\n", "error"),
        ("sys.exit(0) at import", "import sys\nsys.exit(0)\n\ndef add(a, b):\n    return a + b\n", "error"),
        ("os._exit(0) at import", "import os\nos._exit(0)\n\ndef add(a, b):\n    return a + b\n", "error"),
    ],
    ids=[
        "sys.exit",
        "raise-SystemExit",
        "os._exit",
        "posix._exit",
        "sys.exit-at-import",
        "os._exit-at-import",
    ],
)
def test_exit_instead_of_results(harness: Any, name: str, source: str, status: str) -> None:
    # the exit code means nothing: a test without a result frame fails, SystemExit is an exception
    graded = harness.attack(name, harness.add_task(), source, status)
    assert graded.passed == 0


# --------------------------------------------------------------------------------------------------
# Values that claim to be equal.
# --------------------------------------------------------------------------------------------------

ALWAYS_EQUAL = src("""
    class Anything:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        def __hash__(self):
            return 0

    def {entry}(*args):
        return Anything()
""")


@pytest.mark.parametrize(
    ("name", "target", "source", "why"),
    [
        ("always-equal object", "add", ALWAYS_EQUAL.format(entry="add"), "unsupported type Anything"),
        (
            "int subclass",
            "add",
            "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n\n"
            "def add(a, b):\n    return I(a + b + 1)\n",
            "unsupported type I",
        ),
        ("bool for int", "add", "def add(a, b):\n    return False if a + b == 0 else True\n", "got False"),
        (
            "str subclass",
            "shout",
            "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n\n"
            "def shout(s):\n    return S('nope')\n",
            "unsupported type S",
        ),
        (
            "list subclass",
            "sort",
            "class L(list):\n    def __eq__(self, o):\n        return True\n\n"
            "def sort_list(xs):\n    return L()\n",
            "unsupported type L",
        ),
        ("tuple for list", "sort", "def sort_list(xs):\n    return tuple(sorted(xs)) + (0,)\n", "got ("),
    ],
    ids=["always-equal", "int-subclass", "bool-for-int", "str-subclass", "list-subclass", "tuple-for-list"],
)
def test_values_that_claim_equality(harness: Any, name: str, target: str, source: str, why: str) -> None:
    graded = harness.attack(
        name, {"add": harness.add_task(), "shout": SHOUT, "sort": SORT}[target], source, "failed"
    )
    assert why in dev_messages(graded), dev_messages(graded)


def test_int_too_large_for_a_float(harness: Any) -> None:
    # comparing 10**400 with an expected float must fail the test, not crash the grader
    graded = harness.attack("int beyond float range", HALF, "def half(x):\n    return 10 ** 400\n", "failed")
    assert "expected 1.5" in dev_messages(graded)


# --------------------------------------------------------------------------------------------------
# Forged verdicts.
# --------------------------------------------------------------------------------------------------


def test_forged_verdict_on_stdout(harness: Any) -> None:
    # nothing written to stdout/stderr is ever parsed
    source = src("""
        import json, struct, sys

        def add(a, b):
            print(json.dumps({"status": "passed", "passed": 5, "total": 5, "pass_rate": 1.0, "reward": 12}))
            print("5 passed in 0.01s\\nPASSED")
            body = json.dumps({"e": "result", "i": 0, "ok": True, "value": 3}).encode()
            sys.stdout.buffer.write(struct.pack(">I", len(body)) + body)
            sys.stdout.flush()
            return -1
    """)
    harness.attack("forged verdict on stdout", harness.add_task(), source, "failed")


FORGE_ON_FDS = src("""
    import json, os, struct

    def frame(obj):
        body = json.dumps(obj).encode()
        return struct.pack(">I", len(body)) + body

    # what a cheat can claim: the developer tests' answers (shown in the prompt) and guesses for the rest
    CLAIMS = [3, 0, 0, 0, 0]

    def add(a, b):
        blob = b"".join(frame({"e": "result", "i": i, "ok": True, "value": v}) for i, v in enumerate(CLAIMS))
        blob += frame({"e": "done"}) + frame({"status": "passed", "pass_rate": 1.0})
        writable = []
        for fd in range(21):
            try:
                os.write(fd, b"")  # EBADF on closed or read-only fds, before anything is sent
                writable.append(fd)
            except OSError:
                pass
        # printed first: a forged "done" frame may end the job before anything after it runs
        print("writable fds:", writable, flush=True)
        for fd in writable:
            os.write(fd, blob)
        os._exit(0)
""")
LOOKUP_TABLE = "def add(a, b):\n    return {(1, 2): 3, (-5, 5): 0}.get((a, b), 0)\n"


def test_forged_result_frames_on_inherited_fds(harness: Any) -> None:
    # Result frames on fd 3 can only claim values the candidate could have returned: the developer
    # tests' expected values are in the prompt anyway, so forging them is the same as returning them
    # (a lookup table), while hidden tests need values the sandbox never receives. So: the forger
    # scores exactly what the equivalent lookup table scores, and fails every hidden test.
    graded = harness.attack(
        "forged frames on fds 0..20", harness.add_task(), FORGE_ON_FDS, "failed", pass_rate=0.4
    )
    assert [t.status for t in graded.tests if t.hidden] == ["failed"] * 3
    assert "writable fds: [0, 1, 2, 3]" in graded.output  # nothing else is inherited
    table = harness.grade(harness.add_task(), LOOKUP_TABLE)
    assert [t.status for t in table.tests] == [t.status for t in graded.tests]
    assert (table.status, table.passed) == (graded.status, graded.passed)


# Frames crafted against the sandbox's own parsers (regressions: each once crashed or wedged it).
DEEP_FRAME = src("""
    import os, struct

    def add(a, b):
        body = (b'{{"e":"result","i":0,"ok":true,"value":' + b"[" * {depth} + b"]" * {depth} + b"}}")
        os.write(3, struct.pack(">I", len(body)) + body)
        return a + b
""")


@pytest.mark.parametrize("depth", [900, 50_000], ids=["depth-900", "depth-50000"])
def test_forged_frame_nested_too_deep_is_garbage(harness: Any, depth: int) -> None:
    # 50000 levels once raised RecursionError in the server (leaving the job running); 900 levels
    # parsed there but not in the client. Now both are garbage and the real result wins.
    harness.attack(
        f"frame nested {depth} deep",
        harness.add_task(),
        DEEP_FRAME.format(depth=depth),
        "passed",
        pass_rate=1.0,
    )


def test_flood_of_tiny_frames(harness: Any) -> None:
    # millions of 4-byte frames once grew the (unlimited, root) server by ~25 MB/s of wall time
    source = src("""
        import os

        def add(a, b):
            while True:
                os.write(3, b"\\x00\\x00\\x00\\x02{}" * 10000)
    """)
    harness.attack("flood of tiny frames on fd 3", harness.add_task(time_limit_s=2.0), source, "output_limit")


def test_frames_that_grow_when_relayed(harness: Any) -> None:
    # raw UTF-8 frames grow ~3x when the server re-encodes them as ASCII JSON for the client; 48 MB
    # of them once made the reply too large to read: an infra error, retried twice
    source = src("""
        import os, struct

        def add(a, b):
            text = ("\\u00e9" * (8 * 1024 * 1024)).encode()
            body = b'{"e":"result","i":0,"ok":true,"value":"' + text + b'"}'
            for _ in range(3):
                os.write(3, struct.pack(">I", len(body)) + body)
            return a + b
    """)
    harness.attack(
        "frames that grow when relayed", harness.add_task(time_limit_s=3.0), source, "output_limit"
    )


# --------------------------------------------------------------------------------------------------
# Secrets and hidden tests.
# --------------------------------------------------------------------------------------------------


def test_secrets_in_environment_and_proc(harness: Any) -> None:
    from_env = os.environ["TRANSFERLAB_TEST_SECRET"]  # set by conftest before any backend started
    source = src("""
        import os

        NAME = "TRANSFERLAB_TEST_SECRET"

        def add(a, b):
            hits, seen = [], {"os.environ": repr(dict(os.environ))}
            for path in ("/proc/1/environ", "/proc/self/environ", "/proc/%d/environ" % os.getppid()):
                try:
                    with open(path, "rb") as fh:
                        seen[path] = fh.read().decode("utf-8", "replace")
                except OSError as exc:
                    seen[path] = exc.strerror
            try:
                pids = [p for p in os.listdir("/proc") if p.isdigit()]
            except OSError:
                pids = []
            for pid in pids:
                for what in ("environ", "cmdline"):
                    try:
                        with open("/proc/%s/%s" % (pid, what), "rb") as fh:
                            seen["/proc/%s/%s" % (pid, what)] = fh.read().decode("utf-8", "replace")
                    except OSError:
                        pass
            for where, text in seen.items():
                if NAME in text or "s3cr3t-" in text:
                    hits.append(where)
                    print(where, text[:500])
            print("searched", len(seen), "places")
            return hits
    """)
    graded = harness.attack("secrets in env and /proc", harness.add_task(), source, "failed")
    assert "got []" in dev_messages(graded), dev_messages(graded)
    assert from_env not in graded.output and from_env not in dev_messages(graded)


READ_TASK_FILE = src("""
    import json

    def add(a, b):
        try:
            with open({path!r}) as fh:
                data = json.load(fh)
        except OSError as exc:
            return "unreadable: " + exc.strerror
        table = {{tuple(c["args"]): c["expected"] for c in data["test_cases"] + data["hidden_test_cases"]}}
        return table.get((a, b), -1)
""")


@pytest.fixture
def task_file(harness: Any) -> Iterator[Path]:
    """The task, hidden tests included, in a world-readable file, as a careless operator leaves it."""
    directory = Path(f"/tmp/transferlab-hidden-{secrets.token_hex(6)}")
    directory.mkdir()
    directory.chmod(0o755)
    path = directory / "task.json"
    path.write_text(json.dumps(harness.add_task().to_json_dict()), encoding="utf-8")
    path.chmod(0o644)
    yield path
    path.unlink()
    directory.rmdir()


def test_reading_hidden_tests_from_a_world_readable_file(harness: Any, task_file: Path) -> None:
    if harness.name == "subprocess":
        harness.not_contained(
            "read hidden tests (file 0644)",
            "no chroot: the sandbox uid reads any world-readable file on the host",
        )
    graded = harness.attack(
        "read hidden tests (file 0644)",
        harness.add_task(),
        READ_TASK_FILE.format(path=str(task_file)),
        "failed",
    )
    assert "unreadable" in dev_messages(graded)


def test_reading_hidden_tests_from_a_private_file(harness: Any, task_file: Path) -> None:
    task_file.chmod(0o600)  # root-only: contained by every backend, the uid drop suffices
    graded = harness.attack(
        "read hidden tests (file 0600)",
        harness.add_task(),
        READ_TASK_FILE.format(path=str(task_file)),
        "failed",
    )
    assert "unreadable" in dev_messages(graded)


def test_reading_hidden_tests_from_memory(harness: Any) -> None:
    # expected values never enter the sandbox: not in the runner's frames, not anywhere in the heap
    source = src("""
        import gc, sys

        def add(a, b):
            gc.unfreeze()  # the fork server froze its own objects out of gc.get_objects()
            found = []
            frame = sys._getframe()
            while frame is not None:
                for v in frame.f_locals.values():
                    if type(v) is dict and ("expected" in v or "hidden_test_cases" in v):
                        found.append("frame " + frame.f_code.co_name)
                frame = frame.f_back
            for obj in gc.get_objects():
                if type(obj) is dict and ("expected" in obj or "hidden_test_cases" in obj):
                    found.append("dict " + repr(obj)[:80])
                items = obj.values() if type(obj) is dict else obj if type(obj) in (list, tuple) else ()
                for v in items:
                    if type(v) is int and str(v) == "1111111" + "110":  # a hidden expected value
                        found.append("value in " + type(obj).__name__)
            print(found[:10])
            return found
    """)
    graded = harness.attack("read hidden tests from memory", harness.add_task(), source, "failed")
    assert "got []" in dev_messages(graded), dev_messages(graded)


# --------------------------------------------------------------------------------------------------
# Network and the Docker socket.
# --------------------------------------------------------------------------------------------------

CONNECT = src("""
    import socket

    def add(a, b):
        s = socket.socket({family}, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect({address!r})
            s.sendall(b"PWNED")
            return "CONNECTED"
        except OSError as exc:
            return "blocked: %s" % exc
        finally:
            s.close()
""")


def test_network_to_an_internet_address(harness: Any) -> None:
    if harness.name == "subprocess":  # never send traffic off this machine from a test
        harness.not_contained("network: internet address", "no network namespace: the host's network")
    # 192.0.2.1 is TEST-NET-1: with no route, connect() fails before a packet is sent
    source = CONNECT.format(family="socket.AF_INET", address=("192.0.2.1", 80))
    graded = harness.attack("network: internet address", harness.add_task(), source, "failed")
    assert "Network is unreachable" in dev_messages(graded), dev_messages(graded)


@pytest.fixture
def host_listener() -> Iterator[socket.socket]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    yield listener
    listener.close()


def test_network_to_a_listener_on_the_host_loopback(harness: Any, host_listener: socket.socket) -> None:
    if harness.name == "subprocess":
        harness.not_contained("network: host loopback listener", "no network namespace: the host's loopback")
    source = CONNECT.format(family="socket.AF_INET", address=host_listener.getsockname())
    graded = harness.attack("network: host loopback listener", harness.add_task(), source, "failed")
    assert "CONNECTED" not in dev_messages(graded)
    with pytest.raises(BlockingIOError):
        host_listener.accept()  # nobody ever connected


@pytest.fixture
def host_abstract_socket() -> Iterator[str]:
    name = f"\0transferlab-attack-{secrets.token_hex(6)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(8)
    listener.setblocking(False)
    yield name
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        pass
    else:
        conn.close()
        pytest.fail("a job connected to the host's abstract unix socket")
    finally:
        listener.close()


def test_abstract_unix_socket_on_the_host(harness: Any, host_abstract_socket: str) -> None:
    # abstract unix sockets belong to the network namespace, not to the filesystem
    if harness.name == "subprocess":
        harness.not_contained("network: host abstract unix socket", "no network namespace")
    source = CONNECT.format(family="socket.AF_UNIX", address=host_abstract_socket)
    graded = harness.attack("network: host abstract unix socket", harness.add_task(), source, "failed")
    assert "CONNECTED" not in dev_messages(graded)


def test_docker_socket(harness: Any) -> None:
    # forkserver: not in the jail; docker: not mounted; subprocess: root:docker 0660 and the job has
    # no groups. Probed from the system python3 where this interpreter cannot import socket.
    if not Path("/var/run/docker.sock").exists():
        harness.record("docker socket", "no socket on this host")
        pytest.skip("no /var/run/docker.sock on this machine")
    source = probe_candidate("""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect("/var/run/docker.sock")
            s.sendall(b"GET /containers/json HTTP/1.0\\r\\n\\r\\n")
            result = "CONNECTED " + s.recv(200).decode("latin-1")
        except OSError as exc:
            result = "blocked: %s" % exc
    """)
    graded = harness.attack("docker socket", harness.add_task(), source, "failed")
    messages = dev_messages(graded)
    assert "CONNECTED" not in messages and "HTTP/1." not in graded.output, messages
    require_probe_ran(graded, "blocked")
    assert "blocked" in messages, messages


# --------------------------------------------------------------------------------------------------
# Files: outside the working directory, for later jobs, disk fill, deep trees, IPC.
# --------------------------------------------------------------------------------------------------


def _fresh(path: Path) -> Path | None:
    return None if path.exists() or not path.parent.is_dir() else path


@pytest.fixture
def plant_targets() -> Iterator[list[Path]]:
    """Absolute paths a job must not create: where the host or a later job would pick them up."""
    tag = secrets.token_hex(6)
    purelib = Path(sysconfig.get_paths()["purelib"])  # this venv's site-packages
    base_lib = Path(
        sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
    )
    candidates = [
        Path(f"/pwned-{tag}"),
        purelib / f"transferlab-pwned-{tag}.pth",
        purelib / "sitecustomize.py",
        purelib / "usercustomize.py",
        base_lib / f"transferlab-pwned-{tag}.pth",
        Path(f"/usr/lib/python3.{sys.version_info.minor}/transferlab-pwned-{tag}.pth"),
        Path(f"/usr/lib/python3/dist-packages/transferlab-pwned-{tag}.pth"),
        REPO / "conftest.py",
        REPO / "tests" / "conftest.py",
        REPO / "sitecustomize.py",
        REPO / f"pwned-{tag}",
    ]
    targets = [p for p in map(_fresh, candidates) if p is not None]
    yield targets
    planted = [p for p in targets if p.exists()]
    for path in planted:
        path.unlink()
    assert not planted, f"a job created {planted}"


PLANT = src("""
    import os

    def add(a, b):
        results = {{}}
        paths = {targets!r} + [os.path.join("..", n) for n in ("conftest.py", "sitecustomize.py", "x.pth")]
        try:
            paths += [os.path.join("..", d, "conftest.py") for d in os.listdir("..")]  # other jobs' dirs
        except OSError:
            pass
        for path in paths:
            try:
                with open(path, "w") as fh:
                    fh.write("import os  # planted by a sandboxed job\\n")
                results[path] = "WROTE"
            except OSError as exc:
                results[path] = exc.strerror
        for name in ("conftest.py", "sitecustomize.py", "usercustomize.py", "evil.pth"):
            with open(name, "w") as fh:  # its own working directory: allowed, must not outlive the job
                fh.write("PLANTED = True\\n")
        print(results)
        mine = os.path.basename(os.getcwd())
        return sorted(p for p, r in results.items() if r == "WROTE" and mine not in p)
""")

LATER_JOB = src("""
    import os, sys

    def add(a, b):
        seen = os.listdir(".")
        for name in ("conftest.py", "sitecustomize.py", "usercustomize.py"):
            if os.path.exists(os.path.join("..", name)):
                seen.append("../" + name)
        seen += [m for m in ("sitecustomize", "usercustomize", "conftest") if m in sys.modules]
        return seen
""")


def test_writing_files_outside_the_working_directory(harness: Any, plant_targets: list[Path]) -> None:
    graded = harness.attack(
        "plant .pth / conftest.py / sitecustomize.py",
        harness.add_task(),
        PLANT.format(targets=[str(p) for p in plant_targets]),
        "failed",
    )
    assert "got []" in dev_messages(graded), dev_messages(graded)
    later = harness.grade(harness.add_task(), LATER_JOB)  # the next job finds nothing of it
    assert "got []" in dev_messages(later), dev_messages(later)
    harness.assert_clean()


WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")


def test_writing_to_world_writable_directories(harness: Any) -> None:
    # forkserver: the jail has none of them. docker: only the container's own /dev/shm is writable.
    # subprocess (as root): a fresh tmpfs on each, per job. Wherever a job could write, the file must
    # be gone once the job ends (docker: the server removes what the job's uid left there), so no
    # later job and nothing on the host finds it.
    attack = "write /tmp, /var/tmp, /dev/shm"
    tag = secrets.token_hex(6)
    targets = [f"{d}/pwned-{tag}" for d in WORLD_WRITABLE]
    source = src(f"""
        def add(a, b):
            wrote = []
            for path in {targets!r}:
                try:
                    with open(path, "w") as fh:
                        fh.write("left for a later job")
                    wrote.append(path)
                except OSError:
                    pass
            print("wrote", wrote)
            return -1
    """)
    graded = harness.grade(harness.add_task(), source)
    left = (_docker_paths(harness, targets) if harness.name == "docker" else []) + [
        p for p in targets if os.path.exists(p)
    ]
    for path in left:
        os.unlink(path)
    assert not left, f"a job left {left}"
    assert (graded.status, graded.pass_rate) == ("failed", 0.0), graded.message
    harness.assert_clean()
    harness.assert_honest_job_passes()
    wrote = graded.output.splitlines()[0].partition("wrote ")[2]  # what the first call managed
    if harness.name == "subprocess":
        # as root, each job has its own empty tmpfs on each of them (a mount namespace per job):
        # it writes there, and nothing reaches the host or a later job
        assert wrote == repr(targets), graded.output
        harness.record(attack, f"{graded.status} (0/{graded.total}), own tmpfs per job")
        return
    assert wrote == ("[]" if harness.name == "forkserver" else f"['/dev/shm/pwned-{tag}']"), graded.output
    harness.record(
        attack, f"{graded.status} (0/{graded.total})" + (", own /dev/shm, removed" if wrote != "[]" else "")
    )


def _docker_paths(harness: Any, paths: list[str]) -> list[str]:
    """`paths` as they exist inside the backend's live containers, seen from the host."""
    found = []
    for box in list(harness.backend._live.values()):
        pid = harness.backend.client.api.inspect_container(box.container.id)["State"]["Pid"]
        found += [f"/proc/{pid}/root{p}" for p in paths if os.path.exists(f"/proc/{pid}/root{p}")]
    return found


DISK_FILL = src("""
    import errno, os

    FULL = []

    def add(a, b):
        n, chunk = 0, b"x" * (1 << 20)
        while not FULL:  # 1 MiB writes into ever new files until the disk (not the file limit) says no
            try:
                fd = os.open("fill-%d" % n, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                break
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.EFBIG:
                    break
            finally:
                os.close(fd)
            n += 1
        FULL.append(n)
        return a + b
""")


def test_disk_fill(harness: Any) -> None:
    # forkserver and docker: a size-limited tmpfs fills up fast, the job then answers and passes.
    # subprocess: the job writes to the host's disk until the wall-time limit stops it (disk use is
    # bounded by time, not by a quota); either way every byte is gone after the job.
    expected = ("timeout", 0.0) if harness.name == "subprocess" else ("passed", 1.0)
    harness.attack(
        "disk fill",
        harness.add_task(time_limit_s=1.5),
        DISK_FILL,
        expected[0],
        pass_rate=expected[1],
        extra_s=5.0,
    )


def test_deep_directory_tree(harness: Any) -> None:
    # thousands of nested directories once made the cleanup (shutil.rmtree) raise RecursionError:
    # an infra error in the fork server, a crashed grade and a lost uid with the subprocess backend
    source = src("""
        import os, time

        DONE = []

        def add(a, b):
            if not DONE:
                start = time.monotonic()
                for _ in range(3000):
                    os.mkdir("d")
                    os.chdir("d")
                    if time.monotonic() - start > 0.8:
                        break
                DONE.append(1)
            return a + b
    """)
    harness.attack(
        "deep directory tree",
        harness.add_task(time_limit_s=2.0),
        source,
        "passed",
        pass_rate=1.0,
        extra_s=20.0,
    )


def test_ipc_objects_do_not_reach_later_jobs(harness: Any) -> None:
    # SysV shared memory outlives its creator: it must live in the job's own IPC namespace (forkserver;
    # subprocess when run as root), or be removed when the job ends (docker, whose server may not
    # create namespaces; the kill helper removes the uid's IPC objects and files in /tmp, /dev/shm...)
    key = 0x7E570000 + secrets.randbelow(0xFFFF)
    make = probe_candidate(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        shmid = libc.shmget({key}, 4096, 0o1000 | 0o600)
        result = "made" if shmid >= 0 else "refused %d" % ctypes.get_errno()
    """)
    find = probe_candidate(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        shmid = libc.shmget({key}, 0, 0)
        if shmid >= 0:
            libc.shmctl(shmid, 0, None)  # IPC_RMID: do not leave it behind either
        result = "FOUND" if shmid >= 0 else "absent"
    """)
    made = harness.grade(harness.add_task(), make)
    require_probe_ran(made, "made")
    assert "made" in dev_messages(made), dev_messages(made)
    later = harness.grade(harness.add_task(), find)
    with open("/proc/sysvipc/shm", encoding="utf-8") as fh:
        on_host = [line for line in fh if line.split()[:1] == [str(key)]]
    assert not on_host, f"a job's shared memory segment is left on the host: {on_host}"
    seen = "absent" if "absent" in dev_messages(later) else "FOUND by the next job"
    harness.record("SysV IPC for later jobs", f"{later.status} ({seen})")
    assert "absent" in dev_messages(later), dev_messages(later)
    harness.assert_clean()
    harness.assert_honest_job_passes()


# --------------------------------------------------------------------------------------------------
# The source itself.
# --------------------------------------------------------------------------------------------------


def test_nul_bytes_in_the_source(harness: Any) -> None:
    graded = harness.attack(
        "NUL bytes in the source", harness.add_task(), "def add(a, b):\n    return a + b\x00\n", "error"
    )
    assert "null bytes" in graded.message and not graded.executed


def test_ten_megabyte_source_is_refused_unrun(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = harness.backend.execute
    monkeypatch.setattr(harness.backend, "execute", lambda request: calls.append(request) or real(request))
    source = "#" * (10 * 1024 * 1024) + "\n" + HONEST
    graded = harness.grade(harness.add_task(), source)
    harness.record("10 MB source", f"{graded.status} (refused unrun)")
    assert (graded.status, graded.executed, graded.pass_rate, graded.runtime_s) == ("error", False, 0.0, 0.0)
    assert "max_source_bytes" in graded.message and "10,485,7" in graded.message
    assert calls == []  # never sent to the sandbox

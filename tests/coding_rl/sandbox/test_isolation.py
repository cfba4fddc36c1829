"""No job learns anything from another job: attacks on what jobs leave behind, per backend.

Each test grades a job that leaves something (in memory, in a directory, in a kernel object) and then
jobs that look for it, on the same backend, in one batch, or on a fresh backend (another server, as a
separate `transferlab sandbox grade` process would start). Also: the seccomp filter, the bounded
result channel and candidate-made text. Verdicts go to the table printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import struct
import textwrap
from pathlib import Path
from typing import Any

import pytest

from transferlab.coding_rl.sandbox import sandbox_server as wire
from transferlab.coding_rl.sandbox.backends import make_backend
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def dev_messages(graded: Any) -> str:
    return " | ".join(t.message for t in graded.tests)


def token_task(tokens: list[str]) -> CodeTask:
    """token(i) returns a random token: nothing computes it; only the honest source holds the table."""
    cases = [{"input": i, "expected": t} for i, t in enumerate(tokens)]
    return task_from_dict(
        {
            "task_id": "isolation/token",
            "task_description": "Return the i-th token.",
            "function_signature": "def token(i: int) -> str:",
            "test_cases": cases[:2],
            "hidden_test_cases": cases[2:],
            "time_limit_s": 8.0,
            "efficiency_budget_s": 8.0,
        }
    )


# A copycat: scans its own process's memory (what it inherited from the process it was forked from)
# for the result frames of an earlier job, `"i":K,"ok":true,"value":"TOK-..."`, and for tokens in an
# earlier job's source. Reads go through write(2) into a pipe, so an unreadable page is EFAULT, not a
# crash. A marker it makes itself must be found, or the scan proves nothing.
COPYCAT = src("""
    import ctypes, os, re

    SEEN = {}

    def _scan():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.sbrk.restype = ctypes.c_void_p
        page, vec = 4096, ctypes.create_string_buffer(64)
        rd, wr = os.pipe()
        mine = ("SELF" + "-%x" % id(SEEN)).encode() * 3  # made at run time: never in any source
        anchors = [libc.sbrk(0), id(SEEN), id(mine), id(os), id(re)]
        pages = set()
        for anchor in anchors:
            base = anchor - anchor % page
            for k in range(-12288, 12288):  # +-48 MiB around each anchor
                pages.add(base + k * page)
        found, hits, scanned = set(), {}, 0
        for addr in sorted(pages):
            if addr <= 0 or libc.mincore(addr, page, vec) != 0:
                continue
            if libc.write(wr, addr, page) != page:
                continue
            data = os.read(rd, page)
            scanned += 1
            if mine in data:
                found.add("self")
            for m in re.finditer(rb'"i":(\\d+),"ok":true,"value":"(TOK-[0-9a-f]{20})"', data):
                hits[int(m.group(1))] = m.group(2).decode()
            for m in re.finditer(rb"TOK-[0-9a-f]{20}", data):
                found.add(m.group().decode())
        SEEN.update(found=sorted(found), hits=hits, scanned=scanned)

    def token(i):
        if not SEEN:
            _scan()
        if i in SEEN["hits"]:
            return SEEN["hits"][i]
        others = [t for t in SEEN["found"] if t != "self"]
        return "self=%s found=%s" % ("self" in SEEN["found"], others[:1])
""")


def test_copycat_finds_nothing_of_earlier_jobs_in_memory(harness: Any) -> None:
    # An honest job's source holds every token and its results return them; the copycats that follow
    # (on the children forked next, and the one after) must find none of them anywhere in memory.
    tokens = ["TOK-" + secrets.token_hex(10) for _ in range(5)]
    task = token_task(tokens)
    honest = f"TABLE = {tokens!r}\n\ndef token(i):\n    return TABLE[i]\n"
    first = harness.grade(task, honest)
    assert (first.status, first.pass_rate) == ("passed", 1.0), first.message
    leaks, last = [], None
    for _ in range(3):
        last = harness.grade(task, COPYCAT)
        messages = dev_messages(last)
        leaks += re.findall(r"found=\['(TOK-\w+)", messages)
        if last.pass_rate > 0:
            leaks.append(f"copycat passed {last.passed}/{last.total}")
        assert leaks or "self=True" in messages, f"the scan did not find its own marker: {messages[:300]}"
    assert last is not None
    harness.record("copycat reads earlier jobs from memory", f"{last.status} ({last.passed}/{last.total})")
    assert not leaks, f"copycats found {leaks}"
    harness.assert_clean()


def test_copycat_in_one_batch_finds_nothing(harness: Any) -> None:
    # grade_many: a GRPO group, siblings graded back to back on the same warm servers
    tokens = ["TOK-" + secrets.token_hex(10) for _ in range(5)]
    task = token_task(tokens)
    honest = f"TABLE = {tokens!r}\n\ndef token(i):\n    return TABLE[i]\n"
    results = harness.verifier.grade_many([(task, honest), (task, COPYCAT), (task, honest), (task, COPYCAT)])
    assert [r.status for r in results[::2]] == ["passed", "passed"]
    copies = results[1::2]
    harness.record(
        "copycat in one grade_many batch", ", ".join(f"{r.status} ({r.passed}/{r.total})" for r in copies)
    )
    for r in copies:
        messages = " | ".join(t.message for t in r.tests)
        assert r.pass_rate == 0.0 and "found=['TOK-" not in messages, (r.passed, messages[:500])
        assert "self=True" in messages, messages[:300]


# --------------------------------------------------------------------------------------------------
# Directories and kernel objects that outlive a job.
# --------------------------------------------------------------------------------------------------

SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

LEAVE = src("""
    import ctypes, os

    def add(a, b):
        left = []
        for d in {dirs!r}:
            try:
                with open(d + "/left-{tag}", "w") as fh:
                    fh.write("{tag}")
                os.chmod(d + "/left-{tag}", 0o644)
                left.append(d)
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        mq = libc.mq_open(b"/left-{tag}", os.O_CREAT | os.O_RDWR, 0o644, None)
        if mq >= 0:
            left.append("mqueue")
        with open("left-{tag}", "w") as fh:  # its own job directory
            fh.write("{tag}")
        os.chmod("left-{tag}", 0o644)
        print("CWD=" + os.getcwd())
        return "left " + " ".join(left)
""")

LOOK = src("""
    import ctypes, os

    def add(a, b):
        found = []
        for d in {dirs!r} + [{neighbour!r}, os.path.dirname(os.getcwd())]:
            try:
                names = os.listdir(d)
            except OSError:
                names = []
            found += [d + "/" + n for n in names if "{tag}" in n]
            try:
                with open(d + "/left-{tag}") as fh:
                    found.append("read " + d + ": " + fh.read())
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mq_open(b"/left-{tag}", os.O_RDONLY, 0, None) >= 0:
            found.append("mqueue")
        print("FOUND", found)
        return "found %s" % found[:1]
""")


def _leave_then_look(harness: Any, look_verifier: Verifier | None = None) -> tuple[Any, Any]:
    tag = secrets.token_hex(6)
    left = harness.grade(harness.add_task(), LEAVE.format(dirs=list(SHARED), tag=tag))
    assert "left " in dev_messages(left), dev_messages(left)
    cwd = left.output.partition("CWD=")[2].splitlines()[0]
    look = LOOK.format(dirs=list(SHARED), tag=tag, neighbour=cwd)
    verifier = look_verifier or harness.verifier
    later = verifier.grade(harness.add_task(), look)
    return left, later


def test_later_job_finds_nothing_in_shared_directories(harness: Any) -> None:
    left, later = _leave_then_look(harness)
    messages = dev_messages(later)
    where = dev_messages(left).partition("left ")[2].split(" | ")[0].rstrip("'")
    assert "found []" in messages, (messages, later.output)
    harness.record("files and mqueues for later jobs", f"{later.status} (found nothing; left: {where})")
    assert later.pass_rate == 0.0
    harness.assert_clean()


def test_job_on_a_fresh_backend_finds_nothing(harness: Any) -> None:
    # another `transferlab sandbox grade` process starts its own servers, reusing the same uids
    fresh = make_backend(harness.config.model_copy(update={"backend": harness.name}))
    try:
        _, later = _leave_then_look(harness, Verifier(fresh, harness.config))
    finally:
        fresh.close()
    assert "found []" in dev_messages(later), (dev_messages(later), later.output)
    harness.record("files and mqueues for another process", f"{later.status} (found nothing)")
    harness.assert_clean()


def test_concurrent_neighbour_directory(harness: Any) -> None:
    # two jobs at once (two workers): the slow one keeps its directory; the other may not read it
    if harness.backend.workers < 2:
        backend = make_backend(harness.config.model_copy(update={"backend": harness.name, "workers": 2}))
    else:
        backend = harness.backend
    tag = secrets.token_hex(6)
    slow = src(f"""
        import os, time

        def add(a, b):
            with open("secret-{tag}", "w") as fh:
                fh.write("{tag}")
            os.chmod("secret-{tag}", 0o644)
            time.sleep(0.4)
            return "cwd " + os.getcwd()
    """)
    nosy = src(f"""
        import os, time

        def add(a, b):
            time.sleep(0.1)
            found = []
            parent = os.path.dirname(os.getcwd())
            try:
                names = os.listdir(parent)
            except OSError as exc:
                names = []
            for n in names:
                try:
                    found += [n + "/" + m for m in os.listdir(os.path.join(parent, n))]
                except OSError:
                    pass
            return "found %s" % [f for f in found if "{tag}" in f]
    """)
    try:
        verifier = Verifier(backend, harness.config)
        results = verifier.grade_many([(harness.add_task(), slow), (harness.add_task(), nosy)])
    finally:
        if backend is not harness.backend:
            backend.close()
    messages = " | ".join(t.message for t in results[1].tests)
    harness.record("a concurrent neighbour's directory", f"{results[1].status} (found nothing)")
    assert "found []" in messages, messages


# --------------------------------------------------------------------------------------------------
# Seccomp.
# --------------------------------------------------------------------------------------------------

SYSCALLS = src("""
    import ctypes, os

    def add(a, b):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        nr = {numbers!r}
        buf = ctypes.create_string_buffer(256)
        calls = {{
            "add_key": (nr["add_key"], b"user", b"k", b"v", 1, -4),
            "request_key": (nr["request_key"], b"user", b"k", None, 0),
            "keyctl": (nr["keyctl"], 0, -4, 1),
            "io_uring_setup": (nr["io_uring_setup"], 4, buf),
            "ptrace": (nr["ptrace"], 0, 0, 0, 0),
            "process_vm_readv": (nr["process_vm_readv"], os.getpid(), None, 0, None, 0, 0),
            "bpf": (nr["bpf"], 0, buf, 16),
            "userfaultfd": (nr["userfaultfd"], 0),
            "perf_event_open": (nr["perf_event_open"], buf, 0, -1, -1, 0),
            "unshare(user)": (nr["unshare"], 0x10000000),
            "unshare(net)": (nr["unshare"], 0x40000000),
            "setns": (nr["setns"], 0, 0),
            "mount": (nr["mount"], b"none", b"/", b"tmpfs", 0, None),
            "umount2": (nr["umount2"], b"/", 0),
            "kexec_load": (nr["kexec_load"], 0, 0, None, 0),
            "init_module": (nr["init_module"], None, 0, b""),
            "finit_module": (nr["finit_module"], -1, b"", 0),
            "clone(newuser)": (nr["clone"], 0x10000000 | 17, None, None, None, None),
            "clone3": (nr["clone3"], buf, 88),
        }}
        bad = {{}}
        for name, (num, *args) in calls.items():
            ctypes.set_errno(0)
            rc = libc.syscall(num, *args)
            if rc == 0 and name.startswith("clone"):
                os._exit(0)  # the child of a clone that was let through
            want = 38 if name == "clone3" else 1  # ENOSYS, EPERM
            if rc != -1 or ctypes.get_errno() != want:
                bad[name] = "rc=%d errno=%d" % (rc, ctypes.get_errno())
        print("NOT REFUSED", bad)
        return "not refused: %s" % sorted(bad)
""")


def _syscall_numbers() -> dict[str, int]:
    column = 1 if os.uname().machine == "aarch64" else 0
    numbers = {name: pair[column] for name, pair in wire.DENIED_SYSCALLS.items()}
    numbers.update(clone=56 if column == 0 else 220, clone3=435)
    return numbers


def test_seccomp_refuses_dangerous_syscalls(harness: Any) -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("no seccomp filter for this architecture")
    graded = harness.attack(
        "seccomp: keyrings, io_uring, ptrace, bpf, namespaces, mounts, modules",
        harness.add_task(),
        SYSCALLS.format(numbers=_syscall_numbers()),
        "failed",
    )
    assert "not refused: []" in dev_messages(graded), (dev_messages(graded), graded.output)


def test_seccomp_program_shape() -> None:
    # every denied number of both architectures appears, jumps stay inside the program
    for machine, column in (("x86_64", 0), ("aarch64", 1)):
        program = wire.seccomp_program(machine)
        assert program is not None and len(program) % 8 == 0
        instructions = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        constants = {k for code, _, _, k in instructions if code == 0x15}
        assert {pair[column] for pair in wire.DENIED_SYSCALLS.values()} <= constants
        for i, (code, jt, jf, _) in enumerate(instructions):
            if code & 0x07 == 0x05:  # a jump
                assert i + 1 + max(jt, jf) < len(instructions)
    assert wire.seccomp_program("riscv64") is None


# --------------------------------------------------------------------------------------------------
# The result channel.
# --------------------------------------------------------------------------------------------------

FORGE = src("""
    import os, struct

    def add(a, b):
        body = {body}
        os.write(3, struct.pack(">I", {size}) + body)
        return a + b
""")


@pytest.mark.parametrize(
    ("name", "body", "size"),
    [
        ("header claims 1 GiB", 'b"{}"', 1 << 30),
        ("one frame past the cap", 'b"[" + b"0," * (2 * 1024 * 1024 + 10) + b"0]"', None),
        ("two million values", 'b"[" + b"[]," * 1_100_000 + b"[]]"', None),
    ],
    ids=["huge-header", "oversized-frame", "element-flood"],
)
def test_forged_frames_that_break_the_framing(harness: Any, name: str, body: str, size: int | None) -> None:
    # A verdict (output_limit), at once and without an infra retry, however the framing is broken.
    size_expr = "len(body)" if size is None else str(size)
    source = FORGE.format(body=body, size=size_expr)
    graded = harness.attack(f"forged frame: {name}", harness.add_task(), source, "output_limit")
    assert graded.infra_retries == 0


def test_fork_server_memory_is_limited(forkserver_harness: Any) -> None:
    pids = forkserver_harness.backend.server_pids()
    assert pids
    for pid in pids:
        limits = Path(f"/proc/{pid}/limits").read_text()
        line = next(li for li in limits.splitlines() if li.startswith("Max address space"))
        soft = line.split()[3]
        assert soft == str(wire.SERVER_MEMORY_MB * 1024 * 1024), line


# --------------------------------------------------------------------------------------------------
# Candidate-made text.
# --------------------------------------------------------------------------------------------------

NASTY_TEXT = src("""
    import sys

    def add(a, b):
        sys.stdout.buffer.write(b"\\xed\\xb2\\x80\\x1b[2J\\x00" * 500)
        sys.stdout.flush()
        raise ValueError("bad \\udcff surrogate \\x07\\x1b]0;title\\x07 and \\ud800")
""")


def test_nasty_text_ends_in_a_plain_verdict(harness: Any) -> None:
    graded = harness.attack(
        "lone surrogates and control characters", harness.add_task(), NASTY_TEXT, "failed"
    )
    text = graded.message + dev_messages(graded) + graded.output
    text.encode("utf-8")  # no lone surrogate left
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", text), repr(text[:200])
    assert "ValueError" in dev_messages(graded)
    json.loads(json.dumps(graded.result.to_public_json(), ensure_ascii=False))

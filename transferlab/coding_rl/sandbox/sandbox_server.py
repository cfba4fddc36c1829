"""The part of the sandbox that runs next to untrusted code: wire codec, runner, supervisor, fork server.

This file uses the standard library only and runs under any CPython >= 3.9, because it is also copied
into the Docker image (Debian's python3) and started there. It is imported by the client side
(`transferlab.coding_rl.sandbox`) for the codec and the supervisor, and run as a script to be a fork
server::

    python -I -S -B sandbox_server.py --stdio --jail --uid 61000     # host fork server (root)
    python -I -S -B sandbox_server.py --listen /sock/s.sock --uid 61000   # inside a container
    python -I -S -B sandbox_server.py --once --uid 61000             # one job, fresh interpreter

Trust boundary: the candidate runs in a forked child that has dropped to an unprivileged uid, and it
only ever receives the call *inputs*; expected values never enter this process. The child reports
what the candidate returned as plain, tagged JSON frames on fd 3; the grader compares them with the
expected values in its own process. A frame the candidate forges on fd 3 can only claim values it
could equally have returned, and nothing it writes to stdout/stderr is ever parsed.

No job learns anything from another: children are forked by a zygote that never held a job or a
reply (not by the server, whose freed heap holds earlier jobs' sources and results); each child gets
a fresh IPC namespace and, without a chroot jail, a fresh mount namespace with empty tmpfs on the
world-writable directories; a seccomp filter refuses keyrings, io_uring, ptrace, bpf, namespaces,
mounts and module loading; what a job leaves where namespaces are refused (a container) is removed
by `kill_uid`. Result frames are bounded in bytes and in values, counted before parsing.
"""

from __future__ import annotations

import fcntl
import gc
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import time
from typing import Any

MAX_FRAME = 16 * 1024 * 1024  # a job or a reply between client and server
MAX_RESULT_FRAME = 4 * 1024 * 1024  # one frame from a candidate's process
MAX_RESULT_BYTES = 8 * 1024 * 1024  # every result frame of one job together
MAX_RESULT_ELEMENTS = 2_000_000  # JSON values in those frames, counted before they are parsed
SERVER_MEMORY_MB = 1024  # address-space limit of the server and its zygote (jobs get their own)
PREFORK_DEPTH = 2  # warm children a fork server keeps ready (two keep back-to-back jobs off the fork)
RESULT_FD = 3
_LEN = struct.Struct(">I")

# --------------------------------------------------------------------------------------------------
# Wire codec: plain data with exact types, tuples/dicts/non-finite floats tagged.
# --------------------------------------------------------------------------------------------------

_TUPLE, _DICT, _FLOAT = "__tuple__", "__dict__", "__float__"


_SET, _FROZENSET = "__set__", "__frozenset__"


class UnsupportedValue(TypeError):
    """A value that is not plain data (None, bool, int, float, str, list, tuple, dict, set, frozenset)."""


_KEY_TYPES = (str, int, float, bool, type(None), tuple, frozenset)


def encode_value(value: object, budget: list | None = None, depth: int = 0) -> object:
    """Encode plain data to JSON-able form; any other type (subclasses included) raises UnsupportedValue.

    Plain data: None, bool, int, float, str, list, tuple, and dict, set and frozenset whose keys or
    elements are plain and hashable.
    """
    if budget is None:
        budget = [1_000_000]
    budget[0] -= 1
    if budget[0] < 0:
        raise UnsupportedValue("value too large (more than 1,000,000 elements)")
    if depth > 200:
        raise UnsupportedValue("value nested deeper than 200 levels")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        if value.bit_length() > 10_000:  # type: ignore[attr-defined]
            raise UnsupportedValue("integer too large")
        return value
    if t is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return value
        return {_FLOAT: repr(value)}
    if t is list:
        return [encode_value(v, budget, depth + 1) for v in value]  # type: ignore[attr-defined]
    if t is tuple:
        return {_TUPLE: [encode_value(v, budget, depth + 1) for v in value]}  # type: ignore[attr-defined]
    if t is dict:
        items = []
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) not in _KEY_TYPES:
                raise UnsupportedValue("unsupported dict key type " + type(k).__name__)
            items.append([encode_value(k, budget, depth + 1), encode_value(v, budget, depth + 1)])
        return {_DICT: items}
    if t is set or t is frozenset:
        for v in value:  # type: ignore[attr-defined]
            if type(v) not in _KEY_TYPES:
                raise UnsupportedValue("unsupported set element type " + type(v).__name__)
        tag = _SET if t is set else _FROZENSET
        return {tag: [encode_value(v, budget, depth + 1) for v in value]}  # type: ignore[attr-defined]
    raise UnsupportedValue("unsupported type " + t.__name__)


def decode_value(data: object) -> Any:
    """Inverse of encode_value; raises ValueError on anything encode_value cannot produce."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode_value(v) for v in data]
    if type(data) is dict and len(data) == 1:
        ((tag, inner),) = data.items()
        if tag == _TUPLE and type(inner) is list:
            return tuple(decode_value(v) for v in inner)
        if tag == _DICT and type(inner) is list:
            out = {}
            for pair in inner:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("malformed dict item")
                key = decode_value(pair[0])
                if type(key) not in _KEY_TYPES:
                    raise ValueError("malformed dict key")
                try:
                    out[key] = decode_value(pair[1])
                except TypeError:  # a tuple key holding a list
                    raise ValueError("unhashable dict key") from None
            return out
        if tag == _FLOAT and inner in ("nan", "inf", "-inf"):
            return float(inner)
        if tag in (_SET, _FROZENSET) and type(inner) is list:
            elements = [decode_value(v) for v in inner]
            if any(type(v) not in _KEY_TYPES for v in elements):
                raise ValueError("malformed set element")
            try:
                return set(elements) if tag == _SET else frozenset(elements)
            except TypeError:  # a tuple holding a list
                raise ValueError("unhashable set element") from None
    raise ValueError("malformed encoded value")


# --------------------------------------------------------------------------------------------------
# Framing: 4-byte big-endian length, then UTF-8 JSON.
# --------------------------------------------------------------------------------------------------


def pack_frame(obj: object) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    return _LEN.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> object | None:
    """Read one frame; None on a clean end of stream."""
    head = read_exact(fd, 4)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise ValueError("frame too large")
    body = read_exact(fd, size)
    if body is None:
        raise EOFError("stream ended inside a frame")
    return json.loads(body.decode("utf-8"))


# encode_value nests at most ~200 containers, at most 3 JSON levels each (a dict item is [k, v] inside
# {"__dict__": [...]}); deeper frames are forged, and the client must be able to parse what we relay.
MAX_JSON_DEPTH = 700


def _nested_deeper_than(obj: object, limit: int) -> bool:
    """Whether a parsed JSON document nests lists/objects more than `limit` deep (iterative)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node if type(node) is list else node.values() if type(node) is dict else ()
        stack.extend((child, depth + 1) for child in children if type(child) in (list, dict))
    return False


def _loads_frame(body: bytes) -> object:
    """Parse one frame body; ValueError for bad JSON or nesting deeper than MAX_JSON_DEPTH."""
    try:
        obj = json.loads(body.decode("utf-8"))
    except RecursionError:
        raise ValueError("frame nested too deeply") from None
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH and _nested_deeper_than(obj, MAX_JSON_DEPTH):
        raise ValueError("frame nested too deeply")
    return obj


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def count_elements(body: bytes) -> int:
    """An upper bound of the values in a JSON document, found without parsing it (C-speed byte counts).

    Every value but the first follows a ',' or opens with '[' / '{'; commas inside strings are only
    discounted (by removing the strings) when the quick count is large.
    """
    n = body.count(b",") + body.count(b"[") + body.count(b"{") + 1
    if n > 10_000 and b'"' in body:
        body = _JSON_STRING.sub(b'""', body)
        n = body.count(b",") + body.count(b"[") + body.count(b"{") + 1
    return n


BROKEN = {"e": "broken"}  # a frame header past MAX_RESULT_FRAME or the job's element budget


def split_frames(buf: bytearray, budget: list | None = None) -> list:
    """Pop every complete frame from buf; malformed (or too deeply nested) frames become {'e': 'garbage'}.

    A frame longer than MAX_RESULT_FRAME, or holding more JSON values than are left in `budget`
    (a one-item list, decremented), is not parsed: it becomes {'e': 'broken'} and the stream ends there.
    """
    frames = []
    while len(buf) >= 4:
        (size,) = _LEN.unpack(bytes(buf[:4]))
        if size > MAX_RESULT_FRAME:
            frames.append(dict(BROKEN))
            del buf[:]
            break
        if len(buf) < 4 + size:
            break
        body = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        if budget is not None:
            budget[0] -= count_elements(body)
            if budget[0] < 0:
                frames.append(dict(BROKEN))
                del buf[:]
                break
        try:
            frame = _loads_frame(body)
        except ValueError:
            frame = {"e": "garbage"}
        frames.append(frame if type(frame) is dict else {"e": "garbage"})
    return frames


# --------------------------------------------------------------------------------------------------
# Runner: executes inside the sandboxed child, before and around the candidate's code.
# --------------------------------------------------------------------------------------------------

_TYPING_NAMES = (
    "Any",
    "Callable",
    "Dict",
    "Iterable",
    "Iterator",
    "List",
    "Optional",
    "Sequence",
    "Set",
    "Tuple",
    "Union",
)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:  # a hostile __str__
        text = "<unprintable>"
    name = type(exc).__name__ if isinstance(type(exc).__name__, str) else "Exception"
    return (name + ": " + text)[:300]


def _exc_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if type(name) is str else "Exception"


def run_job(job: dict, out_fd: int = RESULT_FD) -> None:
    """Load the candidate, call it on each input, report encoded results as frames. Never returns."""
    import builtins
    import typing

    emit = os.write
    pack = pack_frame
    exit_now = os._exit
    try:
        emit(out_fd, pack({"e": "start"}))
        ns = {"__name__": "__candidate__", "__builtins__": builtins}
        for name in _TYPING_NAMES:
            ns[name] = getattr(typing, name)
        try:
            code = compile(job["source"], "solution.py", "exec")
            exec(code, ns)
            fn = ns.get(job["entry_point"])
            if not callable(fn):
                raise NameError("entry point '" + job["entry_point"] + "' is not defined as a function")
        except MemoryError:
            emit(out_fd, pack({"e": "load_error", "kind": "memory", "msg": "MemoryError while loading"}))
            raise SystemExit
        except BaseException as exc:
            emit(out_fd, pack({"e": "load_error", "kind": "exception", "msg": _describe(exc)}))
            raise SystemExit from None
        emit(out_fd, pack({"e": "loaded"}))
        calls = job.get("calls") or [None] * len(job["inputs"])
        for i, enc_args in enumerate(job["inputs"]):
            try:
                target = fn if calls[i] is None else ns.get(calls[i])
                if not callable(target):
                    raise NameError("function '" + str(calls[i]) + "' is not defined")
                args = decode_value(enc_args)
                t0 = time.perf_counter()
                result = target(*args)
                dt = time.perf_counter() - t0
                frame = {"e": "result", "i": i, "ok": True, "value": encode_value(result), "t": dt}
            except MemoryError:
                frame = {"e": "result", "i": i, "ok": False, "kind": "memory", "msg": "MemoryError"}
            except UnsupportedValue as exc:
                frame = {"e": "result", "i": i, "ok": False, "kind": "type", "msg": str(exc)}
            except BaseException as exc:
                frame = {
                    "e": "result",
                    "i": i,
                    "ok": False,
                    "kind": "exception",
                    "msg": _describe(exc),
                    "exc": _exc_name(exc),
                }
            emit(out_fd, pack(frame))
        for stream in (sys.stdout, sys.stderr):  # output first: the supervisor may stop reading at "done"
            try:
                stream.flush()
            except BaseException:
                pass
        emit(out_fd, pack({"e": "done"}))
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    exit_now(0)


# --------------------------------------------------------------------------------------------------
# Child setup: descriptors, filesystem view, limits, identity.
# --------------------------------------------------------------------------------------------------

_libc = None


def _get_libc():  # type: ignore[no-untyped-def]
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))


def apply_limits(limits: dict) -> None:
    """Resource limits for the candidate; only ever lowers them, so it works unprivileged."""
    mem = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(math.ceil(float(limits["cpu_s"])))
    for res, value in (
        (resource.RLIMIT_AS, mem),
        (resource.RLIMIT_DATA, mem),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NPROC, int(limits["max_processes"])),
        (resource.RLIMIT_FSIZE, int(limits["max_file_bytes"])),
        (resource.RLIMIT_NOFILE, int(limits["max_open_files"])),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_STACK, 64 * 1024 * 1024),
    ):
        hard = value + 1 if res == resource.RLIMIT_CPU else value
        resource.setrlimit(res, (value, hard))


def drop_privileges(uid: int) -> None:
    if os.getuid() != 0:
        return
    try:
        libc = _get_libc()  # load ctypes now: the stdlib may not be readable by `uid`
    except (OSError, ImportError):
        libc = None
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if libc is not None:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binaries


JOB_FD = 4
LIFELINE_FD = 5  # a pidfd of the zygote, until the child has checked that it is alive (child_main)


ZYGOTE_WARM_UPS = 8  # rounds of _warm_up in the zygote: enough for the interpreter to specialise it


def _warm_up() -> None:
    """Run what a job runs (compiler, job parsing, codec, framing) on made-up data.

    In the zygote, a few rounds specialise that bytecode and fill the caches once, so children write
    fewer shared pages; in each child, once more, so its copy-on-write faults happen before the job.
    """
    ns: dict = {}
    exec(compile("def _f(x, y=1):\n    return [x + y for _ in range(3)]\n", "warm.py", "exec"), ns)
    job = json.loads(pack_frame({"inputs": [[1, [2]]], "limits": {"wall_s": 1.0}})[4:].decode("utf-8"))
    encode_value(decode_value(encode_value((ns["_f"](1), {"k": 1.5}, None, "s", job["inputs"]))))
    pack_frame({"e": "result", "i": 0, "ok": True, "value": [1, 2], "t": 0.0})
    time.perf_counter()


# --------------------------------------------------------------------------------------------------
# Seccomp: a classic BPF filter refusing the syscalls a grader never needs and attackers like.
# --------------------------------------------------------------------------------------------------

CLONE_NEW_FLAGS = 0x7E020080  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET,TIME}
# name -> (x86_64 number, aarch64 number); io_uring and the new mount API share numbers on both.
DENIED_SYSCALLS = {
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "perf_event_open": (298, 241),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "acct": (163, 89),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "lookup_dcookie": (212, 18),
    "quotactl": (179, 60),
}
_ARCHES = {"x86_64": (0, 0xC000003E, 56), "aarch64": (1, 0xC00000B7, 220)}  # column, AUDIT_ARCH, clone
_CLONE3 = 435
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_seccomp_prog = None  # (ctypes sock_fprog, the buffer it points to), built once in the zygote


def seccomp_program(machine: str) -> bytes | None:
    """The filter for `machine` (os.uname().machine) as packed sock_filter structs; None if unknown.

    Denied syscalls and clone() with a CLONE_NEW* flag return EPERM; clone3 returns ENOSYS (its flags
    live in memory a filter cannot read; libc then falls back to clone); another ABI than the native
    one (i386 or x32 on x86_64) is refused whole.
    """
    if machine not in _ARCHES:
        return None
    column, audit_arch, clone_nr = _ARCHES[machine]
    denied = sorted({numbers[column] for numbers in DENIED_SYSCALLS.values()})
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    # instructions (code, jump-if-true label, jump-if-false label, k) and label names; None: next one
    code: list = [
        (ld, None, None, 4),  # A = seccomp_data.arch
        (jeq, None, "deny", audit_arch),
        (ld, None, None, 0),  # A = seccomp_data.nr
    ]
    if machine == "x86_64":
        code.append((jge, "deny", None, 0x40000000))  # the x32 ABI
    code += [(jeq, "deny", None, nr) for nr in denied]
    code += [(jeq, "clone", None, clone_nr), (jeq, "enosys", None, _CLONE3), (ret, None, None, _RET_ALLOW)]
    code += [
        "clone",
        (ld, None, None, 16),
        (jset, "deny", None, CLONE_NEW_FLAGS),
        (ret, None, None, _RET_ALLOW),
    ]
    code += [
        "deny",
        (ret, None, None, _RET_ERRNO | _EPERM),
        "enosys",
        (ret, None, None, _RET_ERRNO | _ENOSYS),
    ]
    labels, position = {}, 0
    for item in code:
        if type(item) is str:
            labels[item] = position
        else:
            position += 1
    out, position = [], 0
    for item in code:
        if type(item) is str:
            continue
        op, on_true, on_false, k = item
        jt = labels[on_true] - position - 1 if on_true else 0
        jf = labels[on_false] - position - 1 if on_false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp program: jump out of range")
        out.append(struct.pack("=HBBI", op, jt, jf, k))
        position += 1
    return b"".join(out)


def _seccomp_filter() -> Any:
    """This machine's filter as a ctypes sock_fprog (built once); None on an unknown architecture."""
    global _seccomp_prog
    if _seccomp_prog is None:
        import ctypes

        program = seccomp_program(os.uname().machine)
        if program is None:
            return None

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        buf = ctypes.create_string_buffer(program, len(program))
        _seccomp_prog = (SockFprog(len(program) // 8, ctypes.addressof(buf)), buf)
    return _seccomp_prog[0]


def install_seccomp() -> bool:
    """Install the filter on this process (and its future children) for good; False on unknown arches."""
    import ctypes

    prog = _seccomp_filter()
    if prog is None:
        return False
    libc = _get_libc()
    _check(libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(22, 2, ctypes.byref(prog), 0, 0), "prctl(PR_SET_SECCOMP)")
    return True


SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def private_shared_dirs(workdir: str) -> None:
    """In a fresh mount namespace: empty tmpfs on the world-writable directories, a fresh mqueue.

    Needs root (CAP_SYS_ADMIN). The job's own directory, if it lived under one of them, is bound back
    at the same path, so the job sees only its own files wherever it looks.
    """
    libc = _get_libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(mount)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    before = os.stat(workdir)
    keep = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    try:
        for path in SHARED_TMP_DIRS:
            if os.path.isdir(path) and not os.path.islink(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
        if os.path.isdir("/dev/mqueue"):
            _mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        try:
            now = os.stat(workdir)
            same = (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino)
        except OSError:
            same = False
        if not same:
            os.makedirs(workdir, exist_ok=True)
            _mount("/proc/self/fd/%d" % keep, workdir, None, MS_BIND)
    finally:
        os.close(keep)


def _isolate(setup: dict) -> None:
    """Namespaces for one job (as root): IPC always; mounts too where there is no chroot jail.

    Where the kernel refuses (a container without CAP_SYS_ADMIN), the server removes what the job's
    uid left in the shared directories and IPC instead, once the job is over (kill_uid).
    """
    if os.getuid() != 0:
        return
    libc = _get_libc()
    if libc.unshare(CLONE_NEWIPC) != 0:
        return
    if not setup.get("chroot"):
        try:
            private_shared_dirs(setup["workdir"])
        except OSError:
            pass


def _take_fds(setup: dict) -> None:
    """Put the child's descriptors at 0-5 (stdin, out, out, result, job, lifeline), close every other.

    They are first copied above 5, so no target number clobbers a source that is still to be moved.
    """
    sources = [setup[key] for key in ("stdin_fd", "out_fd", "out_fd", "result_fd", "job_fd", "lifeline_fd")]
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in sources]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(LIFELINE_FD + 1, 65536)


def child_main(setup: dict) -> None:
    """In the forked child: take the descriptors, warm up, isolate, drop privileges, install seccomp,
    then wait for the job and run it. Never returns.

    Everything but the job's own limits happens before the job exists, off the critical path.
    """
    try:
        os.setsid()
        _take_fds(setup)
        _warm_up()
        _isolate(setup)
        if setup.get("chroot"):
            os.chroot(setup["chroot"])
        os.chdir(setup["workdir"])
        drop_privileges(setup["uid"])
        os.environ["HOME"] = os.environ["TMPDIR"] = setup["workdir"]  # the rest is the zygote's
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        # PR_SET_PDEATHSIG after setresuid (which clears it): die with the zygote, our parent, which
        # dies with the server. Then the zygote's pidfd says whether it was still alive once the signal
        # was armed; if not, exit: no job runs in an orphan.
        _check(_get_libc().prctl(1, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        lifeline = select.poll()
        lifeline.register(LIFELINE_FD, select.POLLIN)
        if lifeline.poll(0):
            os._exit(0)
        os.close(LIFELINE_FD)
        install_seccomp()  # the candidate's code only ever runs under it
        job = read_frame(JOB_FD)  # only now, unprivileged, jailed and filtered, does the child learn its job
        os.close(JOB_FD)
        if type(job) is not dict:
            os._exit(0)
        apply_limits(job["limits"])  # lowering limits needs no privilege
    except BaseException:
        os._exit(125)
    run_job(job, RESULT_FD)


# --------------------------------------------------------------------------------------------------
# Supervisor: watches one child, enforces wall time and output caps, collects frames.
# --------------------------------------------------------------------------------------------------


def _live_processes_of(uid: int) -> bool:
    """True when /proc shows a process (not a zombie) of `uid` other than the caller."""
    me = str(os.getpid())
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == me:
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid:
                continue
            with open("/proc/" + name + "/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            return True
    return False


# World-writable places a job could leave files in for later jobs (the fork server's jail has none).
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def _remove_leftovers_of(uid: int) -> None:
    """Run as `uid` once its processes are dead: remove its files in SHARED_DIRS and its SysV IPC objects.

    Without a fresh IPC namespace per job (a container's server may not create one), shared memory,
    message queues and semaphores outlive the job and are seen by later jobs of the same uid.
    """
    for directory in SHARED_DIRS:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass
    libc = _libc  # loaded by the server as root: the stdlib may not be readable by `uid`
    if libc is None:
        return
    removers = {
        "shm": lambda i: libc.shmctl(i, 0, None),
        "msg": lambda i: libc.msgctl(i, 0, None),
        "sem": lambda i: libc.semctl(i, 0, 0),
    }  # IPC_RMID == 0
    for kind, remove in removers.items():
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                header, *rows = [line.split() for line in fh]
        except (OSError, ValueError):
            continue
        for row in rows:
            if len(row) == len(header) and row[header.index("uid")] == str(uid):
                remove(int(row[1]))


def kill_uid(uid: int) -> bool:
    """Kill every process of `uid` (setsid daemons included) from a helper running as that uid.

    kill(-1) reaches every process the helper may signal, i.e. exactly those of `uid`; it is repeated
    until /proc shows none alive. Returns False if some survived (reported as an infra error). Then
    the helper removes what the uid left for later jobs (`_remove_leftovers_of`).
    """
    if os.getuid() != 0 or uid == 0:
        return True
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(200):
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    try:
                        os.kill(-1, sig)
                    except ProcessLookupError:
                        pass  # nothing else in this PID namespace
                if not _live_processes_of(uid):
                    code = 0
                    break
                time.sleep(0.001)
            if code == 0:
                _remove_leftovers_of(uid)
        except BaseException:
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def supervise(
    pidfd: int,
    result_r: int,
    out_r: int,
    limits: dict,
    started: float,
    max_frames: int | None = None,
    stop_on_done: bool = False,
) -> dict:
    """Collect frames and output from the child behind `pidfd` until it exits or breaks a limit.

    More than `max_frames` frames (a flood of tiny forged frames on fd 3) ends the job as output_limit.
    With `stop_on_done`, a job that reported "done" is returned at once with `report["done_early"]`
    True: every result is in, the verdict no longer depends on the child. The caller kills the child
    (`kill_pidfd`) however this ends and waits for it; this function neither kills nor waits.
    """
    deadline = started + float(limits["wall_s"])
    max_out = int(limits["max_output_bytes"])
    return _collect(pidfd, result_r, out_r, deadline, max_out, max_frames, started, stop_on_done)


def kill_pidfd(pidfd: int) -> None:
    """SIGKILL the process behind `pidfd` (the init of its PID namespace, if it has one: the kernel then
    kills the rest); a process already reaped is left alone."""
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def set_exit_fields(report: dict, status: int | None) -> None:
    """exit_code / signal from a wait status (None for both when the child was stopped after "done")."""
    exited = status is not None and os.WIFEXITED(status)
    signalled = status is not None and os.WIFSIGNALED(status)
    report["exit_code"] = os.WEXITSTATUS(status) if exited else None  # type: ignore[arg-type]
    report["signal"] = os.WTERMSIG(status) if signalled else None  # type: ignore[arg-type]


def _collect(
    pidfd: int,
    result_r: int,
    out_r: int,
    deadline: float,
    max_out: int,
    max_frames: int | None,
    started: float,
    stop_on_done: bool = False,
) -> dict:
    poller = select.poll()
    for fd in (result_r, out_r, pidfd):
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    buf, frames, output, budget = bytearray(), [], bytearray(), [MAX_RESULT_ELEMENTS]
    out_total, res_total, reason, exited, done_early = 0, 0, None, False, False
    open_fds = {result_r, out_r}
    while reason is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = "timeout"
            break
        if exited and not open_fds:
            break
        events = poller.poll(max(1, int(remaining * 1000)) if not exited else 0)
        if exited and not events:
            break  # the child is gone; descendants may hold the pipes, do not wait for them
        for fd, _ in events:
            if fd == pidfd:
                if not exited:
                    exited = True
                    poller.unregister(pidfd)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            if fd == result_r:
                res_total += len(chunk)
                buf.extend(chunk)
                new = split_frames(buf, budget)
                frames.extend(new)
                if (
                    res_total > MAX_RESULT_BYTES
                    or (max_frames is not None and len(frames) > max_frames)
                    or any(f.get("e") == "broken" for f in new)
                ):
                    reason = "output_limit"  # the job broke the framing: a verdict, never a retry
                elif stop_on_done and not exited and any(f.get("e") == "done" for f in new):
                    done_early = True  # every result is in; drain what output is already there
                    poller.unregister(pidfd)
                    exited = True
            else:
                out_total += len(chunk)
                if len(output) < max_out:
                    output.extend(chunk[: max_out - len(output)])
                if out_total > max_out:
                    reason = "output_limit"
    return {
        "reason": reason,
        "frames": frames,
        "output": output.decode("utf-8", "replace"),
        "output_bytes": out_total,
        "wall_s": time.monotonic() - started,
        "done_early": done_early and reason is None,
    }


# --------------------------------------------------------------------------------------------------
# The fork server.
# --------------------------------------------------------------------------------------------------

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC = 0x00020000, 0x40000000, 0x20000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _get_libc()
    enc = lambda s: s.encode() if s is not None else None
    _check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), "mount " + target)


def _bind(src: str, jail: str, writable_dev: bool = False) -> None:
    target = jail + src
    if os.path.islink(src):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(src), target)
        return
    if not os.path.exists(src):
        return
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(src, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (0 if writable_dev else MS_NODEV)
    _mount(None, target, None, flags)


def build_jail(jail: str, size_mb: int) -> None:
    """Private mount + network namespaces, and a read-only root with the interpreter, at `jail`."""
    libc = _get_libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare(mount, net)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", jail, "tmpfs", MS_NOSUID, "size=%dm,mode=755" % size_mb)
    for path in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/localtime"):
        _bind(path, jail)
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr"):
        _bind(prefix, jail)
    for dev in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
        _bind(dev, jail, writable_dev=True)
    os.makedirs(jail + "/work")
    os.chmod(jail + "/work", 0o711)  # jobs may enter their own directory but not list the others


def _reap_children() -> None:
    """Collect every exited child, adopted orphans of the job included (no child is running now)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def remove_tree(path: str) -> None:
    """Remove a job directory however deep the candidate nested it.

    shutil.rmtree recurses in Python, so a chain of a few thousand directories (a job makes one in
    microseconds) raises RecursionError. Then the tree is flattened instead: each directory's entries
    are renamed into the top directory (unguessable names) and the emptied directory removed, which
    takes one rename per entry and two open descriptors, whatever the depth.
    """
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if not os.path.lexists(path):
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    token, moved = os.urandom(8).hex(), 0
    try:
        top = os.open(path, flags)
    except OSError:
        return
    try:
        while True:
            names = os.listdir(top)
            if not names:
                break
            for name in names:
                if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
                    os.unlink(name, dir_fd=top)
                    continue
                sub = os.open(name, flags, dir_fd=top)
                try:
                    for child in os.listdir(sub):
                        moved += 1
                        os.rename(child, ".rm-%s-%d" % (token, moved), src_dir_fd=sub, dst_dir_fd=top)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top)
    except OSError:
        pass
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


def pack_reply(reply: dict) -> bytes:
    """Frame a job's reply; one too large for the client is an output_limit without frames, not an error.

    Forged frames can grow when re-encoded (raw UTF-8 text becomes ASCII escapes).
    """
    data = pack_frame(reply)
    if len(data) - 4 > MAX_FRAME:
        data = pack_frame(dict(reply, frames=[], output="", reason="output_limit"))
    return data


def _fork_child(setup: dict, fds: list, fixed: dict, own_pidns: int | None) -> tuple[int, int]:
    """Fork one job child (in a fresh PID namespace when `own_pidns` is given); returns its pid and a
    pidfd for it. `fixed`: the zygote's descriptors every child gets (stdin_fd, lifeline_fd). The child
    never returns from here."""
    libc = _get_libc()
    if own_pidns is not None:
        # back to our own namespace for children first: a second unshare would fail, and forking into
        # the previous child's namespace (its init gone) too
        _check(libc.setns(own_pidns, CLONE_NEWPID), "setns(pid)")
        _check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
    pid = os.fork()
    if pid == 0:
        out_fd, result_fd, job_fd = fds
        setup.update(fixed, out_fd=out_fd, result_fd=result_fd, job_fd=job_fd)
        child_main(setup)
    return pid, os.pidfd_open(pid)


def _zygote_main(sock: Any, server_pid: int) -> None:
    """Fork a job child per request (its setup and its three pipe ends); tell the server each child's
    pid and a pidfd for it (`c TAG PID`, TAG from the setup), and each child's wait status once it
    exits (`x PID STATUS`). The zygote is the children's parent: it alone reaps them."""
    import socket

    libc = _get_libc()
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
    if os.getppid() != server_pid:
        return  # the server died before the signal was armed
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    fixed = {"stdin_fd": os.open("/dev/null", os.O_RDWR), "lifeline_fd": os.pidfd_open(os.getpid())}
    own_pidns: int | None = None
    _seccomp_filter()  # built once here; each child only installs it
    os.environ.clear()  # what children inherit; each adds its HOME and TMPDIR
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    for _ in range(ZYGOTE_WARM_UPS):
        _warm_up()
    gc.collect()
    gc.freeze()  # what the warm-up left, shared with every child like the server's objects
    poller = select.poll()
    poller.register(keep, select.POLLIN)
    running: dict[int, int] = {}  # pidfd -> pid
    while True:
        for fd, _ in poller.poll():
            if fd == keep:
                try:
                    msg, fds, _, _ = socket.recv_fds(sock, 4096, 3)
                except OSError:
                    return
                if not msg:
                    return
                setup = json.loads(msg)
                try:
                    if setup["pidns"] and own_pidns is None:
                        own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
                    pidns = own_pidns if setup["pidns"] else None
                    pid, pidfd = _fork_child(setup, fds, fixed, pidns)
                except OSError:
                    sock.send(b"c %d -1" % setup["tag"])
                    continue
                finally:
                    for received in fds:
                        os.close(received)
                socket.send_fds(sock, [b"c %d %d" % (setup["tag"], pid)], [pidfd])
                running[pidfd] = pid
                poller.register(pidfd, select.POLLIN)
            elif fd in running:
                pid = running.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                sock.send(b"x %d %d" % (pid, status))


class Zygote:
    """The process job children are forked from (and reaped by), started before the server reads any job.

    A child forked from the server itself would inherit its heap: the bytes of earlier jobs' sources,
    inputs and replies (the return values of a sibling's correct solution) stay in freed memory, where
    a copycat can read them. The zygote never receives a job, only a child's setup and pipe ends.
    """

    def __init__(self) -> None:
        import socket

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            parent.close()
            try:
                _zygote_main(child, server_pid)
            finally:
                os._exit(0)
        child.close()
        self.pid, self.sock = pid, parent
        self.created: dict[int, tuple[int, int]] = {}  # tag -> (pid, pidfd), not collected yet
        self.statuses: dict[int, int] = {}  # wait statuses received, not asked for yet
        self.unwanted: set[int] = set()  # children whose wait status nobody will ask for (forget)

    def request(self, setup: dict, fds: list) -> None:
        """Ask for a child with `setup` (tag, uid, chroot, workdir, pidns) and fds (out, result, job).

        Returns at once: the zygote forks while the server goes on; `collect(tag)` gives the child.
        """
        import socket

        socket.send_fds(self.sock, [json.dumps(setup).encode()], fds)

    def _receive(self) -> None:
        import socket

        msg, fds, _, _ = socket.recv_fds(self.sock, 64, 1)
        kind, *fields = msg.split() or [b""]
        numbers = [int(f) for f in fields if f.lstrip(b"-").isdigit()]
        if kind == b"c" and len(numbers) == 2 and numbers[1] > 0 and len(fds) == 1:
            self.created[numbers[0]] = (numbers[1], fds[0])
            return
        for fd in fds:
            os.close(fd)
        if kind == b"x" and len(numbers) == 2:
            if numbers[0] in self.unwanted:
                self.unwanted.discard(numbers[0])
            else:
                self.statuses[numbers[0]] = numbers[1]
            return
        raise OSError("the zygote could not fork a job child" if kind == b"c" else "the zygote exited")

    def collect(self, tag: int) -> tuple[int, int]:
        """The pid and a pidfd of the child requested with `tag`, once it is forked."""
        while tag not in self.created:
            self._receive()
        return self.created.pop(tag)

    def wait(self, pid: int) -> int:
        """Block until the zygote has reaped child `pid`; its wait status."""
        while pid not in self.statuses:
            self._receive()
        return self.statuses.pop(pid)

    def forget(self, pid: int) -> None:
        """Child `pid` has exited and its wait status is not needed: drop it whenever it comes."""
        if self.statuses.pop(pid, None) is None:
            self.unwanted.add(pid)

    def drain(self) -> None:
        """Block until the zygote has reaped every child `forget` was called for."""
        while self.unwanted:
            self._receive()


class Server:
    """Runs one sandboxed child per job, one job at a time; the next child is forked and warmed ahead."""

    def __init__(self, uid: int, jail: str | None, work_root: str, pidns: bool) -> None:
        self.uid = uid
        # Forking ahead needs a PID namespace per job: without one, killing the uid after a job would
        # also kill the warm child, which already runs as that uid.
        self.prefork = pidns
        self.pidns = pidns
        self.jail = jail
        self.work_root = work_root
        self.counter = 0
        self.pending: list[dict] = []  # finished children still to wait for and clean (see tidy())
        self.clean = True
        self.ready: list[dict] = []  # children forked ahead, warmed up, waiting for a job
        self.depth = PREFORK_DEPTH if self.prefork else 1
        # Without a PID namespace, what a job leaves running is re-parented to the server (a subreaper),
        # not to PID 1, which may never reap it (a container's PID 1 is this server): unreaped zombies
        # still count against the uid's RLIMIT_NPROC, so after one fork bomb later jobs could not fork.
        _check(_get_libc().prctl(36, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        self.zygote: Zygote | None = None

    def start(self) -> None:
        """Start the zygote: call once, before reading any job (and after gc.freeze, so children share
        the pages of every object that exists now)."""
        self.zygote = Zygote()

    def prepare(self) -> None:
        """Fork children for the next jobs now (up to `depth`), so their start-up is off the critical path.

        Each waits in its own PID namespace, invisible to the running job even though it has the
        same uid, and its job directory has an unguessable name in a directory jobs cannot list.
        """
        if len(self.ready) >= self.depth:
            return
        self.counter += 1
        # unguessable: the running job (same uid) must not find the next job's directory
        name = "job-%d-%d-%s" % (os.getpid(), self.counter, os.urandom(8).hex())
        host_dir = os.path.join(self.work_root, name)
        os.mkdir(host_dir, 0o700)
        os.chown(host_dir, self.uid, self.uid)
        result_r, result_w = os.pipe()
        out_r, out_w = os.pipe()
        job_r, job_w = os.pipe()
        setup = {
            "tag": self.counter,
            "uid": self.uid,
            "chroot": self.jail,
            "workdir": "/work/" + name if self.jail else host_dir,
            "pidns": self.pidns,
        }
        try:
            self._zygote().request(setup, [out_w, result_w, job_r])
        finally:
            for fd in (result_w, out_w, job_r):
                os.close(fd)
        child = {"pid": None, "pidfd": None, "result_r": result_r, "out_r": out_r, "job_w": job_w}
        self.ready.append({**child, "tag": self.counter, "dir": host_dir})  # pid: settle / execute

    def _zygote(self) -> Zygote:
        if self.zygote is None:
            raise RuntimeError("Server.start() was not called")
        return self.zygote

    def settle(self) -> None:
        """Collect every child asked for (then the zygote has forked each one)."""
        for child in self.ready:
            if child["pid"] is None:
                child["pid"], child["pidfd"] = self._zygote().collect(child["tag"])

    def execute(self, job: dict) -> dict:
        self.tidy()
        self.prepare()
        child = self.ready.pop(0)
        try:
            if child["pid"] is None:
                child["pid"], child["pidfd"] = self._zygote().collect(child["tag"])
        except BaseException:
            self._close(child)
            raise
        started = time.monotonic()
        try:
            write_all(child["job_w"], pack_frame(job))
        except OSError:
            pass  # the child died before the job; supervise reports it as missing results
        os.close(child["job_w"])
        child["job_w"] = None
        if self.prefork:
            self.prepare()  # the next child warms up on another core while this one runs
        report: dict = {}
        try:
            report = supervise(
                child["pidfd"],
                child["result_r"],
                child["out_r"],
                job["limits"],
                started,
                max_frames=2 * len(job.get("inputs") or ()) + 64,
                stop_on_done=self.pidns,
            )
        finally:
            kill_pidfd(child["pidfd"])  # now: it dies while the reply goes out
            if report.pop("done_early", False):
                # The verdict is complete: reply first, wait and clean up before the next job (tidy()).
                set_exit_fields(report, None)
                self.pending.append(child)
            else:
                set_exit_fields(report, self._finish(child))
        if not self.clean:
            report["infra_error"] = "processes of the sandbox uid survived the kill"
        return report

    def _finish(self, child: dict) -> int:
        """Wait until the (killed) child is reaped, then clean up after it; its wait status."""
        try:
            return self._zygote().wait(child["pid"])
        finally:
            self._close(child)
            # with a PID namespace the kernel has already killed every descendant of the child
            self.clean = True if self.pidns else kill_uid(self.uid)
            if not self.pidns:
                _reap_children()
            remove_tree(child["dir"])

    @staticmethod
    def _close(child: dict) -> None:
        for key in ("pidfd", "result_r", "out_r", "job_w"):
            if child[key] is not None:
                os.close(child[key])
                child[key] = None

    def tidy(self) -> None:
        """Wait for, and clean up after, finished jobs (runs after the reply, before the next job).

        A finished job's child is the init of its PID namespace: once its pidfd is readable, every
        process of the job has exited and closed its files (abstract sockets included). The zygote
        reaps it a moment later; its wait status is not needed (the reply went out).
        """
        while self.pending:
            child = self.pending.pop()
            exited = select.poll()
            exited.register(child["pidfd"], select.POLLIN)
            exited.poll()
            self._zygote().forget(child["pid"])
            self._close(child)
            remove_tree(child["dir"])

    def sync(self) -> None:
        """Clean up after every finished job and wait until the zygote has reaped them all."""
        self.tidy()
        self._zygote().drain()


def limit_server_memory() -> None:
    """A soft address-space limit on the server (and its zygote): no frame makes it allocate gigabytes.

    Only the soft limit: each job then sets its own (SandboxConfig.memory_mb), which may be higher.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = SERVER_MEMORY_MB * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _serve_stream(server: Server, in_fd: int, out_fd: int) -> bool:
    """Serve jobs until the stream ends (False) or the server failed a job (True: exit, do not reuse)."""
    while True:
        job = read_frame(in_fd)
        if job is None:
            return False
        if type(job) is dict and job.get("op") == "ping":
            server.sync()  # a pong means every earlier job is fully cleaned up and reaped
            server.settle()  # and every warm child is the server's own
            write_all(out_fd, pack_frame({"pong": True, "pid": os.getpid()}))
            continue
        try:
            reply = server.execute(job)  # type: ignore[arg-type]
        except Exception as exc:
            reply = {"infra_error": "server failed: " + repr(exc)[:300]}
        write_all(out_fd, pack_reply(reply))
        if "infra_error" in reply:
            return True  # a server that failed once is not trusted again: the client starts another
        server.tidy()
        if server.prefork:
            server.prepare()


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description="transferlab sandbox fork server")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="jobs as frames on stdin, replies on stdout")
    mode.add_argument("--listen", metavar="SOCKET", help="serve a unix socket (inside a container)")
    mode.add_argument("--once", action="store_true", help="run one job from stdin (fresh interpreter)")
    p.add_argument("--uid", type=int, default=61000, help="unprivileged uid for candidates")
    p.add_argument("--jail", metavar="DIR", help="enter fresh mount+net namespaces, chroot children at DIR")
    p.add_argument("--jail-size-mb", type=int, default=256)
    p.add_argument("--work-root", default="/work", help="where per-job directories are made (no --jail)")
    p.add_argument("--pidns", action="store_true", help="a fresh PID namespace per job")
    p.add_argument("--idle-exit", type=float, default=0.0, help="exit after this many idle seconds")
    args = p.parse_args(argv)

    # EPIPE instead of a silent death: writing to a child that died before its job is an error handled
    # there (missing results); writing to a client that went away ends the server all the same
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    limit_server_memory()
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if args.jail:
        build_jail(args.jail, args.jail_size_mb)
        work_root = args.jail + "/work"
    else:
        work_root = args.work_root
        os.makedirs(work_root, exist_ok=True)
    import typing  # noqa: F401  (pre-imported so candidates find it without touching the disk)

    server = Server(args.uid, args.jail, work_root, args.pidns)
    gc.collect()
    gc.freeze()  # keep the collector off the server's objects so forked children share their pages
    server.start()  # before the first job is read: the zygote never holds one
    if args.once:
        job = read_frame(in_fd)
        try:
            reply = server.execute(job) if type(job) is dict else {"infra_error": "no job"}
        except Exception as exc:
            reply = {"infra_error": "server failed: " + repr(exc)[:300]}
        write_all(out_fd, pack_reply(reply))
        return 0
    if args.stdio:
        if server.prefork:
            server.prepare()
        write_all(out_fd, pack_frame({"ready": True, "pid": os.getpid()}))
        _serve_stream(server, in_fd, out_fd)
        server.tidy()
        return 0
    return _serve_socket(server, args.listen, args.idle_exit)


def _serve_socket(server: Server, path: str, idle_exit: float) -> int:
    import socket

    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(4)
    sock.settimeout(idle_exit or None)
    while True:
        try:
            conn, _ = sock.accept()
        except socket.timeout:
            return 0
        with conn:
            conn.settimeout(None)
            fd = conn.fileno()
            try:
                if _serve_stream(server, fd, fd):
                    return 1
            except (OSError, ValueError, EOFError):
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Sandbox throughput: grade the same 5-test task N times per backend and against two baselines.

Prints p50/p95 latency per grade (one at a time), grades per second with every core busy, and the
ratios the foundation issue sets as targets, all measured in this one run:

    forkserver p50 < 10 ms; forkserver >= 100x faster than `python -m pytest` per grade and >= 10x
    faster than a fresh interpreter per grade; docker warm pool >= 3x faster than `docker run`.

Usage: python benchmarks/sandbox_throughput.py [--n 200] [--n-slow 30] [--skip-docker] [--json OUT]
       [--uid-base 61000]   (another uid range when other processes hold the default one's uids)

What a change to the sandbox server costs, measured on a busy machine as fairly as it allows: old and
current server files graded alternately (rounds of n/4 grades each), same task, same process:

    git show HEAD~5:transferlab/coding_rl/sandbox/sandbox_server.py > /tmp/old_server.py
    python benchmarks/sandbox_throughput.py --against-server /tmp/old_server.py [--backend subprocess]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from transferlab.coding_rl.sandbox import backends
from transferlab.coding_rl.sandbox.backends import SandboxUnavailable, make_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.seed_tasks import SEED_DIR, seed_solutions


def _task_and_source() -> tuple[CodeTask, str]:
    fixed = next(s for s in seed_solutions() if s.solution_file.name == "quick_sort_fixed.py")
    return fixed.task, fixed.source


def _standalone_script(task: CodeTask, source: str) -> str:
    """Solution + tests in one file: what a naive grader runs in a fresh interpreter."""
    cases = [(case.call_args(), case.expected) for case, _ in task.all_tests]
    return source + textwrap.dedent(f"""

        _cases = {cases!r}
        _passed = sum({task.entry_point}(*args) == expected for args, expected in _cases)
        print(_passed, len(_cases))
        """)


def _pytest_file(task: CodeTask, source: str) -> str:
    lines = [
        source,
        "",
        "import pytest",
        f"_CASES = {[(c.call_args(), c.expected) for c, _ in task.all_tests]!r}",
        "",
        "@pytest.mark.parametrize('args,expected', _CASES)",
        "def test_case(args, expected):",
        f"    assert {task.entry_point}(*args) == expected",
        "",
    ]
    return "\n".join(lines)


def _latencies(fn: Callable[[], object], n: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _throughput(fn: Callable[[], object], n: int, workers: int) -> float:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda _: fn(), range(min(workers * 2, n))))  # warm every worker
        t0 = time.perf_counter()
        list(pool.map(lambda _: fn(), range(n)))
        return n / (time.perf_counter() - t0)


def _row(name: str, lat: list[float], gps: float) -> dict[str, float | str]:
    q = statistics.quantiles(lat, n=20, method="inclusive")
    return {
        "method": name,
        "p50_ms": statistics.median(lat) * 1e3,
        "p95_ms": q[18] * 1e3,
        "grades_per_s_all_cores": gps,
        "n": len(lat),
    }


def bench_backend(name: str, n: int, cores: int, uid_base: int) -> dict[str, float | str] | None:
    task, source = _task_and_source()
    try:
        seq = make_backend(SandboxConfig(backend=name, workers=1, uid_base=uid_base))
    except SandboxUnavailable as exc:
        print(f"  {name}: unavailable ({exc})", file=sys.stderr)
        return None
    with_all = make_backend(SandboxConfig(backend=name, workers=cores, uid_base=uid_base))
    try:
        v1, vn = Verifier(seq), Verifier(with_all)
        check = v1.grade(task, source)
        assert check.status == "passed", check
        lat = _latencies(lambda: v1.grade(task, source), n)
        gps = _throughput(lambda: vn.grade(task, source), n, cores)
    finally:
        seq.close()
        with_all.close()
    label = {"forkserver": "forkserver", "subprocess": "subprocess", "docker": "docker warm pool"}[name]
    return _row(label, lat, gps)


def bench_command(
    label: str,
    make_cmd: Callable[[Path], list[str]],
    content: str,
    suffix: str,
    n: int,
    cores: int,
    check: Callable[[subprocess.CompletedProcess[str]], bool],
) -> dict[str, float | str]:
    with tempfile.TemporaryDirectory(prefix="transferlab-bench-") as tmp:
        path = Path(tmp) / f"test_solution{suffix}"
        path.write_text(content, encoding="utf-8")

        def once() -> None:
            proc = subprocess.run(make_cmd(path), capture_output=True, text=True, cwd=tmp, timeout=120)
            if not check(proc):
                raise RuntimeError(f"{label} baseline failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")

        lat = _latencies(once, n, warmup=1)
        gps = _throughput(once, n, cores)
    return _row(label, lat, gps)


def bench_docker_run(n: int, cores: int, image: str) -> dict[str, float | str] | None:
    task, source = _task_and_source()
    script = _standalone_script(task, source)
    try:
        import docker

        client = docker.from_env()
        client.images.get(image)
    except Exception as exc:
        print(f"  docker run: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None

    def once() -> None:
        out = client.containers.run(
            image,
            ["python3", "-c", script],
            remove=True,
            network_mode="none",
            mem_limit="640m",
            pids_limit=64,
        )
        if not out.decode().startswith("5 5"):
            raise RuntimeError(f"docker run baseline failed: {out!r}")

    lat = _latencies(once, n, warmup=1)
    gps = _throughput(once, n, cores)
    return _row("docker run per grade", lat, gps)


def run(n: int, n_slow: int, skip_docker: bool, uid_base: int) -> dict[str, object]:
    cores = os.cpu_count() or 1
    task, source = _task_and_source()
    rows: list[dict[str, float | str]] = []
    names = ["forkserver", "subprocess"] + ([] if skip_docker else ["docker"])
    for name in names:
        print(f"benchmarking {name} ...", file=sys.stderr)
        row = bench_backend(name, n if name != "subprocess" else n_slow, cores, uid_base)
        if row:
            rows.append(row)
    print("benchmarking baselines ...", file=sys.stderr)
    rows.append(
        bench_command(
            "fresh interpreter per grade",
            lambda p: [sys.executable, str(p)],
            _standalone_script(task, source),
            ".py",
            n_slow,
            cores,
            lambda proc: proc.stdout.startswith("5 5"),
        )
    )
    rows.append(
        bench_command(
            "python -m pytest per grade",
            lambda p: [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(p)],
            _pytest_file(task, source),
            ".py",
            n_slow,
            cores,
            lambda proc: proc.returncode == 0,
        )
    )
    if not skip_docker:
        print("benchmarking docker run ...", file=sys.stderr)
        row = bench_docker_run(max(5, n_slow // 3), cores, SandboxConfig().docker_image)
        if row:
            rows.append(row)
    by = {str(r["method"]): r for r in rows}

    def ratio(slow: str, fast: str) -> float | None:
        if slow in by and fast in by:
            return float(by[slow]["p50_ms"]) / float(by[fast]["p50_ms"])
        return None

    ratios = {
        "pytest / forkserver": ratio("python -m pytest per grade", "forkserver"),
        "fresh interpreter / forkserver": ratio("fresh interpreter per grade", "forkserver"),
        "docker run / docker warm pool": ratio("docker run per grade", "docker warm pool"),
    }
    return {
        "cores": cores,
        "task": f"{task.task_id} ({len(task.all_tests)} tests)",
        "seed_dir": str(SEED_DIR),
        "rows": rows,
        "ratios": ratios,
    }


def bench_against_server(old_server: Path, backend: str, n: int, uid_base: int, rounds: int = 4) -> str:
    """p50/p95 per grade of `old_server` and of the current server, graded in alternating rounds."""
    task, source = _task_and_source()
    current = backends.SERVER_PATH
    lat: dict[str, list[float]] = {"old": [], "current": []}
    try:
        for _ in range(rounds):
            for label, path in (("old", old_server.resolve()), ("current", current)):
                backends.SERVER_PATH = path  # read when a server process starts
                sandbox = make_backend(SandboxConfig(backend=backend, workers=1, uid_base=uid_base))
                try:
                    verifier = Verifier(sandbox)
                    check = verifier.grade(task, source)
                    assert check.status == "passed", check
                    lat[label] += _latencies(partial(verifier.grade, task, source), max(1, n // rounds))
                finally:
                    sandbox.close()
    finally:
        backends.SERVER_PATH = current
    lines = [f"{backend}: {old_server} vs the current server, {rounds} alternating rounds", ""]
    lines += ["| server | p50 ms | p95 ms | n |", "|---|---:|---:|---:|"]
    for label, xs in lat.items():
        row = _row(label, xs, 0.0)
        lines.append(f"| {label} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {len(xs)} |")
    return "\n".join(lines)


def render(result: dict[str, object]) -> str:
    lines = [
        f"task: {result['task']}, cores: {result['cores']}",
        "",
        "| method | p50 ms | p95 ms | grades/s (all cores) |",
        "|---|---:|---:|---:|",
    ]
    for r in result["rows"]:  # type: ignore[attr-defined]
        lines.append(
            f"| {r['method']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['grades_per_s_all_cores']:.1f} |"
        )
    targets = {
        "pytest / forkserver": 100,
        "fresh interpreter / forkserver": 10,
        "docker run / docker warm pool": 3,
    }
    lines += ["", "| ratio (p50) | measured | target |", "|---|---:|---:|"]
    for key, value in result["ratios"].items():  # type: ignore[attr-defined]
        shown = "n/a" if value is None else f"{value:.1f}x"
        lines.append(f"| {key} | {shown} | >= {targets[key]}x |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=200, help="grades per fast backend")
    p.add_argument("--n-slow", type=int, default=30, help="grades per slow method (baselines, subprocess)")
    p.add_argument("--skip-docker", action="store_true", help="leave out the docker rows")
    p.add_argument("--json", type=Path, help="also write the result as JSON here")
    p.add_argument(
        "--against-server",
        type=Path,
        metavar="OLD_SERVER.py",
        help="instead: compare this sandbox_server.py with the current one, alternately",
    )
    p.add_argument("--backend", default="forkserver", help="backend for --against-server")
    p.add_argument(
        "--uid-base",
        type=int,
        default=SandboxConfig().uid_base,
        help="first sandbox uid (default: SandboxConfig's)",
    )
    args = p.parse_args()
    if not 1000 <= args.uid_base <= 2**31 - 1000:
        print(f"error: --uid-base {args.uid_base} is out of range; pass a uid from 1000 up", file=sys.stderr)
        return 2
    if args.against_server:
        if not args.against_server.is_file():
            print(f"error: {args.against_server} is not a file; pass a saved server file", file=sys.stderr)
            return 2
        print(bench_against_server(args.against_server, args.backend, args.n, args.uid_base))
        return 0
    result = run(args.n, args.n_slow, args.skip_docker, args.uid_base)
    print(render(result))
    if args.json:
        from transferlab.platform.io import atomic_write_json

        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The agent's working copy and its tools: read, search, write, edit, run tests, submit.

A :class:`Workspace` is a per-episode directory holding the task's repository. Tool calls are JSON
objects: ``{"action": "read_file", "path": "src/calc.py"}``. A malformed or unknown call,
a path outside the repository, or a write to a test file is a *tool error* with a helpful message,
never a crash. Code only ever runs in the sandbox, through the verifier.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.platform.tools import ToolCall, ToolError, parse_tool_call

TOOLS: dict[str, tuple[str, ...]] = {
    "read_file": ("path",),
    "search_code": ("pattern",),
    "write_file": ("path", "content"),
    "edit_file": ("path", "old", "new"),
    "run_tests": (),
    "submit": (),
}
OPTIONAL_ARGS: dict[str, tuple[str, ...]] = {"run_tests": ("target",), "edit_file": ("line",)}
MAX_FILE_CHARS = 200_000
MAX_SEARCH_HITS = 40


_SPEC = {name: (required, OPTIONAL_ARGS.get(name, ())) for name, required in TOOLS.items()}


def parse_action(text: str) -> ToolCall:
    """Parse one JSON tool call; raise ToolError naming what is wrong."""
    return parse_tool_call(text, _SPEC, '{"action": "read_file", "path": "src/x.py"}')


@dataclass
class TestRun:
    """What `run_tests` or `submit` saw."""

    __test__ = False
    indices: list[int]
    passed: int
    all_dev: bool
    grade: GradeResult
    sandbox_s: float

    @property
    def selected(self) -> int:
        return len(self.indices)

    @property
    def ok(self) -> bool:
        return self.selected > 0 and self.passed == self.selected


def numbered(text: str) -> str:
    """``text`` with each line prefixed by its 1-based number (``"3| return x"``), as read_file shows it."""
    return "\n".join(f"{n}| {line}" for n, line in enumerate(text.split("\n"), start=1))


def _edit_line(text: str, rel: str, line: str, old: str, new: str) -> str:
    """``text`` with the one ``old`` in line ``line`` (1-based) replaced by ``new``; ToolError otherwise."""
    lines = text.split("\n")
    try:
        n = int(line)
    except ValueError:
        raise ToolError(
            f"edit_file: line {line!r} is not a number; give the number read_file shows"
        ) from None
    if not 1 <= n <= len(lines):
        raise ToolError(f"edit_file: {rel} has lines 1-{len(lines)}, not {n}")
    count = lines[n - 1].count(old) if old else 0
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise ToolError(
            f"edit_file: the old text {where} in line {n} of {rel}; quote exactly one occurrence of a "
            f"piece of it:\n{n}| {lines[n - 1]}"
        )
    lines[n - 1] = lines[n - 1].replace(old, new, 1)
    return "\n".join(lines)


@dataclass
class Workspace:
    """A task's repository in a private directory, with the tools that act on it."""

    task: RepoTask
    verifier: Verifier
    root: Path = field(init=False)
    refused_test_writes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="transferlab-episode-"))
        for rel, text in self.task.files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def files(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())

    def _resolve(self, rel: str) -> Path:
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            raise ToolError(f"path {rel!r} must be relative to the repository, without '..'")
        return self.root / pure

    def read_file(self, rel: str) -> str:
        path = self._resolve(rel)
        if not path.is_file():
            raise ToolError(f"no file {rel!r}; files: {', '.join(self.files())}")
        return path.read_text(encoding="utf-8", errors="replace")

    def search_code(self, pattern: str) -> list[str]:
        try:
            regex = re.compile(pattern)
        except re.error:
            regex = re.compile(re.escape(pattern))
        hits = []
        for rel in self.files():
            for n, line in enumerate(self.read_file(rel).splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{rel}:{n}: {line}")
        return hits

    def _check_writable(self, rel: str) -> Path:
        path = self._resolve(rel)
        if PurePosixPath(rel).parts[0] == "tests":
            self.refused_test_writes += 1
            raise ToolError(f"{rel} is a test file: tests are read-only; change the source instead")
        return path

    def write_file(self, rel: str, content: str) -> bool:
        """Write a file; returns whether its content changed."""
        path = self._check_writable(rel)
        if len(content) > MAX_FILE_CHARS:
            raise ToolError(f"content is {len(content):,} characters; the limit is {MAX_FILE_CHARS:,}")
        before = path.read_text(encoding="utf-8") if path.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return before != content

    def edit_file(self, rel: str, old: str, new: str, line: str | None = None) -> bool:
        """Replace the one occurrence of `old` with `new`; returns whether the file changed.

        With ``line`` (1-based, as :func:`numbered` shows it) ``old`` must occur once in that line,
        so a short piece such as ``"<="`` is enough to say where the change goes.
        """
        path = self._check_writable(rel)
        text = self.read_file(rel)
        if line is not None:
            return self.write_file(rel, _edit_line(text, rel, line, old, new))
        count = text.count(old) if old else 0
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolError(f"edit_file: the old text {where} in {rel}; quote exactly one occurrence")
        return self.write_file(rel, text.replace(old, new, 1)) if path else False

    def _source(self) -> str:
        try:
            return self.read_file(self.task.meta.source_path)
        except ToolError:
            return ""

    def run_tests(self, target: str | None) -> TestRun:
        """Run the developer tests (all, a test file, or `file::test_<i>`) on the current source."""
        indices = self._select(target)
        dev = [self.task.dev_tests[i].to_json_dict() for i in indices]
        code_task = self._code_task(dev, [])
        t0 = time.perf_counter()
        grade = self.verifier.grade(code_task, self._source())
        return TestRun(
            indices, grade.passed, len(indices) == len(self.task.dev_tests), grade, time.perf_counter() - t0
        )

    def submit(self) -> TestRun:
        """The independent verdict: developer and hidden tests on the final source, in a fresh sandbox."""
        t0 = time.perf_counter()
        grade = self.verifier.grade(self.task.code_task("all"), self._source())
        return TestRun(list(range(grade.total)), grade.passed, True, grade, time.perf_counter() - t0)

    def _code_task(self, dev: list[dict[str, Any]], hidden: list[dict[str, Any]]) -> CodeTask:
        meta = self.task.meta
        return task_from_dict(
            {
                "task_id": meta.task_id,
                "task_description": meta.issue,
                "function_signature": f"def {meta.entry_point}(...):",
                "entry_point": meta.entry_point,
                "test_cases": dev,
                "hidden_test_cases": hidden,
                "time_limit_s": meta.time_limit_s,
                "float_tolerance": meta.float_tolerance,
                "efficiency_budget_s": meta.efficiency_budget_s,
            },
            source=meta.task_id,
        )

    def _select(self, target: str | None) -> list[int]:
        n = len(self.task.dev_tests)
        if target in (None, "", "all", "tests", "tests/"):
            return list(range(n))
        assert target is not None
        file_part, _, test_part = target.partition("::")
        if file_part not in self.task.test_paths():
            raise ToolError(f"no test file {file_part!r}; test files: {', '.join(self.task.test_paths())}")
        if not test_part:
            return list(range(n))
        match = re.fullmatch(r"test_(\d+)", test_part)
        if match is None or int(match.group(1)) >= n:
            raise ToolError(f"no test {test_part!r} in {file_part}; tests are test_0 .. test_{n - 1}")
        return [int(match.group(1))]


def describe_run(run: TestRun, task: RepoTask, submitted: bool = False) -> str:
    """The observation text for a test run: counts, then each failure (developer tests only)."""
    if submitted:
        verdict = "PASSED" if run.grade.status == "passed" else "FAILED"
        return (
            f"submitted: the verifier ran {run.grade.total} tests (developer + hidden): "
            f"{run.grade.passed} passed -> {verdict}"
        )
    lines = [
        f"ran {run.selected} test(s): {run.passed} passed, {run.selected - run.passed} failed"
        f" [{run.grade.status}]"
    ]
    test_file = task.test_paths()[0] if task.test_paths() else "tests"
    for outcome in run.grade.tests:
        if outcome.status == "failed":
            lines.append(f"  {test_file}::test_{run.indices[outcome.index]} FAILED: {outcome.message}")
    if run.grade.status not in ("passed", "failed") and run.grade.message:
        lines.append(f"  {run.grade.message}")
    return "\n".join(lines)

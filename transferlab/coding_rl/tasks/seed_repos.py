"""The seed tasks as repositories (always in the ``train`` split).

The seed tasks are the worked examples of the project's founding design note (the calculator and
the quick sort) and of its readiness checklist (the binary search).

- ``seed-calculator`` (the design note's agent task, a GitHub issue saying "division does not
  handle a zero divisor"): ``src/calculator.py`` with ``add``, ``subtract``, ``multiply`` and
  ``divide``; the fix makes ``divide(a, 0)`` raise ``ValueError``. Its tests call every function
  (``TestCase.call``), so a patch that overwrites the file with only ``divide`` fails them, and the
  zero divisor is checked with ``raises: "ValueError"``.
- ``seed-binary_search`` (the checklist's running example): both branches written ``low = mid`` and
  ``high = mid``; the tests are those of ``seed/binary_search.json``. ``bug`` names the first bug
  line, ``provenance["bugs"]`` both.
- ``seed-quick_sort`` (the design note's code RL example): drops the elements equal to the pivot;
  developer tests from ``seed/quick_sort.json`` plus hidden tests with repeated values. The
  reference is the one-line fix of the buggy file (``right`` takes ``arr[1:]`` with ``>=``).
"""

from __future__ import annotations

import re
from typing import Any

from transferlab.coding_rl.tasks.code_task import TestCase, load_task
from transferlab.coding_rl.tasks.mutations import line_diff
from transferlab.coding_rl.tasks.repo_task import BugInfo, RepoTask, make_repo_task
from transferlab.coding_rl.tasks.seed_tasks import SEED_DIR

__all__ = ["SEED_REPOS", "binary_search_task", "calculator_task", "quick_sort_task", "seed_repo_tasks"]

GENERATOR = "transferlab.coding_rl.tasks.seed_repos"
_BUG_COMMENT = re.compile(r"[ \t]*#\s*bug:.*$", re.MULTILINE)

CALCULATOR_BUGGY = '''"""A small calculator."""


def add(a, b):
    """Return a + b."""
    return a + b


def subtract(a, b):
    """Return a - b."""
    return a - b


def multiply(a, b):
    """Return a * b."""
    return a * b


def divide(a, b):
    """Return a / b."""
    return a / b
'''

CALCULATOR_FIXED = CALCULATOR_BUGGY.replace(
    '''    """Return a / b."""
    return a / b''',
    '''    """Return a / b."""
    if b == 0:
        raise ValueError("cannot divide by zero")
    return a / b''',
)

CALCULATOR_ISSUE = """division does not handle a zero divisor

`divide(1, 0)` in `src/calculator.py` crashes with `ZeroDivisionError: division by zero` instead of
reporting the problem. Dividing by zero should raise a `ValueError` with a clear message; every other
operation (add, subtract, multiply, and divide with a non-zero divisor) must keep working.
"""

BINARY_SEARCH_ISSUE = """binary_search never returns for some inputs

`binary_search([1, 3, 5, 7, 9], 9)` in `src/binary_search.py` does not finish; it should return `4`.
`binary_search(arr, target)` returns the index of `target` in the ascending list `arr`, or `-1` if it
is absent.
"""

QUICK_SORT_ISSUE = """quick_sort loses repeated values

`quick_sort([2, 2, 1])` in `src/quick_sort.py` returns `[1, 2]` but should return `[1, 2, 2]`.
`quick_sort(arr)` returns a new list with the elements of `arr` in ascending order.
"""

QUICK_SORT_BAD_LINE = "    right = [x for x in arr if x > pivot]"
QUICK_SORT_GOOD_LINE = "    right = [x for x in arr[1:] if x >= pivot]"
QUICK_SORT_HIDDEN: list[dict[str, Any]] = [
    {"input": [3, 3, 3], "expected": [3, 3, 3]},
    {"input": [5, 1, 5, 2, 5], "expected": [1, 2, 5, 5, 5]},
    {"input": [0, -1, 0, -1], "expected": [-1, -1, 0, 0]},
    {"input": [9, 8, 7, 9], "expected": [7, 8, 9, 9]},
]


def _case(fn: str, args: list[Any], expected: Any = None, raises: str | None = None) -> TestCase:
    data: dict[str, Any] = {"args": args, "call": fn}
    data.update({"raises": raises} if raises else {"expected": expected})
    return TestCase.model_validate(data)


def _strip_bug_comments(source: str) -> str:
    return _BUG_COMMENT.sub("", source)


def _bug(operator: str, reference: str, buggy: str) -> BugInfo:
    diff = line_diff(reference, buggy, allow_deletion=True)
    if diff is None:
        raise AssertionError("a seed task's reference and buggy sources must differ in one place")
    line, before, after = diff
    return BugInfo(operator=operator, line=line, before=before, after=after)


def calculator_task() -> RepoTask:
    """The seed calculator: ``divide`` does not guard a zero divisor."""
    dev = [
        _case("add", [2, 3], 5),
        _case("subtract", [10, 4], 6),
        _case("multiply", [3, 4], 12),
        _case("divide", [8, 2], 4.0),
        _case("divide", [1, 0], raises="ValueError"),
    ]
    hidden = [
        _case("add", [-1, 1], 0),
        _case("subtract", [0, 5], -5),
        _case("multiply", [-2, 3], -6),
        _case("divide", [7, 2], 3.5),
        _case("divide", [0, 5], 0.0),
        _case("divide", [5, 0], raises="ValueError"),
        _case("divide", [-3.5, 0], raises="ValueError"),
    ]
    bug = _bug("seed", CALCULATOR_FIXED, CALCULATOR_BUGGY)
    return make_repo_task(
        task_id="seed-calculator",
        module="calculator",
        buggy_source=CALCULATOR_BUGGY,
        reference_source=CALCULATOR_FIXED,
        entry_point="divide",
        dev_tests=dev,
        hidden_tests=hidden,
        issue=CALCULATOR_ISSUE,
        group="seed/calculator",
        bug=bug,
        time_limit_s=2.0,
        efficiency_budget_s=1.0,
        provenance={
            "source": "design note 000",
            "generator": GENERATOR,
            "kind": "missing guard",
            "bugs": [bug.model_dump()],
        },
    )


def binary_search_task() -> RepoTask:
    """The seed binary search with ``low = mid`` and ``high = mid``."""
    code_task = load_task(SEED_DIR / "binary_search.json")
    buggy = _strip_bug_comments((SEED_DIR / "binary_search_buggy.py").read_text(encoding="utf-8"))
    fixed = (SEED_DIR / "binary_search_fixed.py").read_text(encoding="utf-8")
    ref_lines, bug_lines = fixed.splitlines(), buggy.splitlines()
    if len(ref_lines) != len(bug_lines):
        raise AssertionError("binary_search_buggy.py and binary_search_fixed.py must have the same lines")
    bugs = [
        BugInfo(operator="seed", line=i + 1, before=r, after=b)
        for i, (r, b) in enumerate(zip(ref_lines, bug_lines, strict=True))
        if r != b
    ]
    return make_repo_task(
        task_id="seed-binary_search",
        module="binary_search",
        buggy_source=buggy,
        reference_source=fixed,
        entry_point=code_task.entry_point,
        dev_tests=code_task.test_cases,
        hidden_tests=code_task.hidden_test_cases,
        issue=BINARY_SEARCH_ISSUE,
        group="seed/binary_search",
        bug=bugs[0],
        time_limit_s=code_task.time_limit_s,
        efficiency_budget_s=code_task.efficiency_budget_s,
        provenance={
            "source": "design note 004",
            "generator": GENERATOR,
            "kind": "boundary updates",
            "files": [
                "seed/binary_search_buggy.py",
                "seed/binary_search_fixed.py",
                "seed/binary_search.json",
            ],
            "bugs": [b.model_dump() for b in bugs],
        },
    )


def quick_sort_task() -> RepoTask:
    """The seed quick sort that drops the elements equal to the pivot."""
    code_task = load_task(SEED_DIR / "quick_sort.json")
    buggy = _strip_bug_comments((SEED_DIR / "quick_sort_buggy.py").read_text(encoding="utf-8"))
    if QUICK_SORT_BAD_LINE not in buggy.splitlines():
        raise AssertionError(f"quick_sort_buggy.py no longer has the line {QUICK_SORT_BAD_LINE!r}")
    fixed = buggy.replace(QUICK_SORT_BAD_LINE, QUICK_SORT_GOOD_LINE)
    bug = _bug("seed", fixed, buggy)
    hidden = [TestCase.model_validate(c) for c in QUICK_SORT_HIDDEN]
    return make_repo_task(
        task_id="seed-quick_sort",
        module="quick_sort",
        buggy_source=buggy,
        reference_source=fixed,
        entry_point=code_task.entry_point,
        dev_tests=code_task.test_cases,
        hidden_tests=hidden,
        issue=QUICK_SORT_ISSUE,
        group="seed/quick_sort",
        bug=bug,
        time_limit_s=code_task.time_limit_s,
        efficiency_budget_s=code_task.efficiency_budget_s,
        provenance={
            "source": "design note 000",
            "generator": GENERATOR,
            "kind": "dropped equality case",
            "files": ["seed/quick_sort_buggy.py", "seed/quick_sort.json"],
            "bugs": [bug.model_dump()],
        },
    )


SEED_REPOS = {
    "calculator": calculator_task,
    "binary_search": binary_search_task,
    "quick_sort": quick_sort_task,
}


def seed_repo_tasks() -> list[RepoTask]:
    """The three seed repositories: calculator, binary search, quick sort."""
    return [make() for make in SEED_REPOS.values()]

"""Mutation operators: each one's exact mutant lines on hand-written functions, determinism, scope."""

from __future__ import annotations

import ast

import pytest

from transferlab.coding_rl.tasks.mutations import (
    OPERATORS,
    REJECT_DUPLICATE,
    candidates,
    line_diff,
    mutate,
    normalize,
)


def afters(source: str, operator: str, entry_point: str = "f") -> list[tuple[str, str]]:
    """(before, after) of every usable mutant, checking each one's line number on the way."""
    found = candidates(source, entry_point, operator)
    out = []
    for m in found.usable:
        assert m.reference == normalize(source)
        assert m.operator == operator
        if operator != "remove_guard":
            assert m.reference.splitlines()[m.line - 1] == m.before
        assert m.buggy.splitlines()[m.line - 1] == m.after
        out.append((m.before.strip(), m.after.strip()))
    return out


def test_comparison_off_by_one() -> None:
    src = "def f(a, b):\n    if a > 0:\n        return 0 < a < b\n    return a <= 9\n"
    assert afters(src, "comparison_off_by_one") == [
        ("if a > 0:", "if a >= 0:"),
        ("return 0 < a < b", "return 0 <= a < b"),
        ("return 0 < a < b", "return 0 < a <= b"),
    ]


def test_range_off_by_one() -> None:
    src = "def f(n):\n    t = 0\n    for i in range(1, n):\n        t += i\n    return t\n"
    assert [a for _, a in afters(src, "range_off_by_one")] == [
        "for i in range(1, n + 1):",
        "for i in range(1, n - 1):",
        "for i in range(2, n):",
        "for i in range(0, n):",
    ]
    one_arg = "def f(xs):\n    return [xs[i] for i in range(len(xs) - 1)]\n"
    assert [a for _, a in afters(one_arg, "range_off_by_one")] == [
        "return [xs[i] for i in range(len(xs))]",
        "return [xs[i] for i in range(len(xs) - 2)]",
    ]


def test_index_off_by_one() -> None:
    src = "def f(xs, i):\n    return xs[i] + xs[1:]\n"
    assert [a for _, a in afters(src, "index_off_by_one")] == [
        "return xs[i + 1] + xs[1:]",
        "return xs[i - 1] + xs[1:]",
        "return xs[i] + xs[2:]",
        "return xs[i] + xs[0:]",
    ]
    assert afters("def f(d):\n    return d['key']\n", "index_off_by_one") == []  # string keys are left alone


BINARY_SEARCH = '''
def f(arr, target):
    """Binary search: low = mid + 1 in a docstring is not code."""
    low, high = 0, len(arr) - 1
    while low <= high:
        mid = (low + high) // 2
        if arr[mid] == target:
            return mid
        elif arr[mid] < target:
            low = mid + 1
        else:
            high = mid - 1
    return -1
'''


def test_boundary_update() -> None:
    assert afters(BINARY_SEARCH, "boundary_update") == [
        ("low, high = (0, len(arr) - 1)", "low, high = (0, len(arr))"),
        ("low = mid + 1", "low = mid"),
        ("high = mid - 1", "high = mid"),
    ]


def test_swap_operator() -> None:
    src = "def f(a, b, c):\n    return a + b * c\n"
    assert [a for _, a in afters(src, "swap_operator")] == ["return a - b * c", "return a + (b + c)"]
    src2 = "def f(x, y):\n    return x and y == 1\n"
    assert sorted(a for _, a in afters(src2, "swap_operator")) == [
        "return x and y != 1",
        "return x or y == 1",
    ]


def test_drop_equality() -> None:
    src = "def f(a, b, c):\n    return a <= b or a == c\n"
    assert sorted(a for _, a in afters(src, "drop_equality")) == ["return a < b or a == c", "return a <= b"]


def test_remove_guard() -> None:
    src = (
        "def f(xs):\n"
        '    """Doc."""\n'
        "    if not xs:\n"
        "        return 0\n"
        "    for x in xs:\n"
        "        if x < 0:\n"
        "            continue\n"
        "    return xs[0]\n"
    )
    found = candidates(src, "f", "remove_guard")
    assert len(found.usable) == 1  # the `continue` guard is its loop's only statement: kept
    m = found.usable[0]
    assert (m.line, m.after) == (3, "    for x in xs:")
    assert m.before == "    if not xs:\n        return 0\n    for x in xs:"
    # replacing `after` by `before` at `line` restores the reference
    lines = m.buggy.splitlines()
    lines[m.line - 1] = m.before
    assert "\n".join(lines) == m.reference


def test_wrong_return() -> None:
    src = (
        "def f(n):\n"
        "    if n == 0:\n        return True\n"
        "    if n == 1:\n        return n > 0\n"
        "    if n == 2:\n        return []\n"
        "    if n == 3:\n        return 0\n"
        "    if n == 4:\n        return ''\n"
        "    return -1\n"
    )
    assert [a for _, a in afters(src, "wrong_return")] == [
        "return 0",
        "return False",
        "return not n > 0",
        "return None",
        "return 1",
        "return None",
    ]


DOC_AND_HELPERS = '''
import math
from typing import List


def helper(x: List[int]) -> bool:
    return x[0] + 1 < 3


def f(xs: List[int], k: int) -> bool:
    """Return True when xs[0] + 1 < k or len(xs) <= 2 (never mutate this text)."""
    if not xs:
        return False
    return xs[0] + 1 < k or len(xs) <= 2 and math.floor(k) == k
'''


@pytest.mark.parametrize("operator", list(OPERATORS))
def test_only_the_entry_point_body_changes(operator: str) -> None:
    reference = ast.parse(normalize(DOC_AND_HELPERS))
    produced = list(OPERATORS[operator](DOC_AND_HELPERS, "f"))
    for mutated in produced:
        assert ast.dump(mutated.body[0]) == ast.dump(reference.body[0])  # import math
        assert ast.dump(mutated.body[1]) == ast.dump(reference.body[1])  # from typing import List
        assert ast.dump(mutated.body[2]) == ast.dump(reference.body[2])  # helper
        fn = mutated.body[3]
        assert isinstance(fn, ast.FunctionDef)
        assert ast.get_docstring(fn) == ast.get_docstring(reference.body[3])  # type: ignore[arg-type]
        assert ast.dump(fn.args) == ast.dump(reference.body[3].args)  # type: ignore[attr-defined]
    assert candidates(DOC_AND_HELPERS, "f", operator).usable or operator in (
        "range_off_by_one",
        "boundary_update",
    )


def test_every_usable_mutant_is_a_one_line_change() -> None:
    for operator in OPERATORS:
        for m in candidates(BINARY_SEARCH, "f", operator).usable:
            assert m.buggy != m.reference
            diff = line_diff(m.reference, m.buggy, allow_deletion=operator == "remove_guard")
            assert diff == (m.line, m.before, m.after)
            compile(m.buggy, "<m>", "exec")


def test_line_diff() -> None:
    assert line_diff("a\nb\nc", "a\nB\nc") == (2, "b", "B")
    assert line_diff("a\nb\nc", "a\nb\nc") is None
    assert line_diff("a\nb\nc", "A\nb\nC") is None
    assert line_diff("a\nb\nc", "a\nc") is None
    assert line_diff("a\nb\nc", "a\nc", allow_deletion=True) == (2, "b\nc", "c")
    assert line_diff("a\nb\nc", "a\nb", allow_deletion=True) == (2, "b\nc", "b")


def test_mutate_is_deterministic_by_seed() -> None:
    def picks(seed: int) -> list[tuple[str, int]]:
        return [
            (r.operator, m.site)
            for r in mutate(BINARY_SEARCH, "f", seed=seed, per_operator=2)
            for m in r.picked
        ]

    assert picks(0) == picks(0)
    assert any(picks(s) != picks(0) for s in range(1, 6))
    for r in mutate(BINARY_SEARCH, "f", seed=3, per_operator=2):
        assert len(r.picked) == min(2, len(r.usable))
        assert [m.site for m in r.picked] == sorted(m.site for m in r.picked)
    assert all(not r.picked for r in mutate(BINARY_SEARCH, "f", per_operator=0))


def test_mutate_never_repeats_a_mutant_across_operators() -> None:
    results = mutate(BINARY_SEARCH, "f", per_operator=100)
    buggy = [m.buggy for r in results for m in r.usable]
    assert len(buggy) == len(set(buggy))
    assert all(set(r.rejected) <= {REJECT_DUPLICATE} for r in results)


def test_mutate_rejects_unknown_operators() -> None:
    with pytest.raises(ValueError, match="unknown mutation operator"):
        mutate(BINARY_SEARCH, "f", operators=("nope",))
    assert all(not r.usable for r in mutate("def g():\n    return 1 < 2\n", "f"))  # no such function

"""The bug-edit normal form, checked by hand, and the wrong-patch and mutation-adequacy measures on
hand-made tasks whose answers are worked out in the comments."""

from __future__ import annotations

from transferlab.coding_rl.tasks.novelty import (
    abstract_edit,
    abstract_line,
    arg_names,
    task_edit,
    uncaught_mutants,
    wrong_patches,
)

from .conftest import BUGGY, POOL, REFERENCE, hand_task


def test_abstract_line_by_hand() -> None:
    assert abstract_line("    return n * 3 - 5", ["n"]) == "return <arg0> * <num> - <num>"
    assert abstract_line("total += i * 3", ["xs"]) == "total += i * <num>"  # locals stay
    assert abstract_line("return len(s) > 2", ["s"]) == "return len ( <arg0> ) > <num>"  # builtins stay
    assert abstract_line("return s[:2] + '-'", ["s"]) == "return <arg0> [ : <num> ] + <str>"
    assert abstract_line(r"return 'it\'s' + t", ["s", "t"]) == "return <str> + <arg1>"
    assert abstract_line("if n_items <= n:", ["n"]) == "if n_items <= <arg0> :"  # whole names only
    assert abstract_line("return -1.5e3", []) == "return - <num>"


def test_abstract_edit_forgets_constants_and_argument_names_only() -> None:
    edit = abstract_edit("    return n * 3 - 5", "    return n * 3 + 5", ["n"])
    assert edit == ("return <arg0> * <num> - <num>", "return <arg0> * <num> + <num>")
    assert abstract_edit("return size * 7 - 9", "return size * 7 + 9", ["size"]) == edit
    # the argument's position counts, not its name
    two = abstract_edit("return lo - hi", "return lo + hi", ["lo", "hi"])
    assert two == ("return <arg0> - <arg1>", "return <arg0> + <arg1>")
    assert abstract_edit("return p - q", "return p + q", ["p", "q"]) == two
    assert abstract_edit("return q - p", "return q + p", ["p", "q"]) != two
    # another operator or another line is another edit
    assert abstract_edit("if n < 3:", "if n <= 3:", ["n"]) != abstract_edit("if n < 3:", "if n > 3:", ["n"])
    assert abstract_edit("if n < 3:", "if n <= 3:", ["n"]) == abstract_edit("if v < 8:", "if v <= 8:", ["v"])
    assert edit != abstract_edit("return n * 3 - 5", "return n * 3 + 5", ["m"])  # n is then a local


def test_a_deleted_guard_keeps_its_shape() -> None:
    before = "    if not s:\n        return ''\n    return s[0] + s[-1]"
    after = "    return s[0] + s[-1]"
    assert abstract_edit(before, after, ["s"]) == (
        "if not <arg0> : | > return <str> | return <arg0> [ <num> ] + <arg0> [ - <num> ]",
        "return <arg0> [ <num> ] + <arg0> [ - <num> ]",
    )


def test_arg_names_read_the_last_definition() -> None:
    source = "def f(a):\n    return a\n\ndef g(x, y=1):\n    return x + y\n\ndef f(p, q):\n    return p\n"
    assert arg_names(source, "f") == ("p", "q")
    assert arg_names(source, "g") == ("x", "y")
    assert arg_names(source, "h") == ()


def test_task_edit_reads_the_bug_and_the_arguments() -> None:
    task = hand_task("t", REFERENCE, BUGGY, [0], [1])
    assert task_edit(task) == ("return <arg0> * <num> + <num>", "return <arg0> * <num> - <num>")


def test_wrong_patches_by_hand() -> None:
    # Mutants of the buggy line `x * 2 - 1`: `x * 2 + 1` (the fix) and `x + 2 - 1` (= x + 1). With every
    # test at x = 0 (where x + 1 == 2x + 1 == 1) the second passes them all though it is wrong at 1 and 2.
    thin = hand_task("thin", REFERENCE, BUGGY, [0], [0])
    assert wrong_patches(thin, POOL) == ["    return x + 2 - 1"]
    assert wrong_patches(thin) == []  # on the tests' own input (0) it behaves as the fix does
    # a hidden case at x = 1 (expects 3; x + 1 gives 2) catches it
    assert wrong_patches(hand_task("caught", REFERENCE, BUGGY, [0], [1]), POOL) == []


def test_uncaught_mutants_by_hand() -> None:
    # Mutants of the fixed line `x * 2 + 1`: `x * 2 - 1` (the bug, wrong everywhere) and `x + 2 + 1`
    # (= x + 3, right only at x = 2). Hidden tests at x = 2 alone let the second through.
    assert uncaught_mutants(hand_task("t", REFERENCE, BUGGY, [0], [2]), POOL) == ["    return x + 2 + 1"]
    assert uncaught_mutants(hand_task("t", REFERENCE, BUGGY, [0], [1, 2]), POOL) == []

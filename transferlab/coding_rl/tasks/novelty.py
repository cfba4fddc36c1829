"""How new a split's tasks are to training, and how well hidden tests pin the fix down.

A reviewer asks two things of a held-out coding split: does it test skill on code the policy has not
seen (no function template, no bug edit shared with training), and can a wrong patch pass it (hidden
tests that let a mutant of the buggy file through grade a wrong repair as right)?

- **Abstract edits.** :func:`abstract_edit` is the normal form a bug edit is compared in: its
  ``before`` and ``after`` lines with every number written ``<num>``, every string literal ``<str>``
  and each argument of the function ``<argI>`` (its position in the signature); other names (locals,
  builtins) and operators stay. Two tasks carry "the same bug edit up to constants and argument names"
  when their abstract edits are equal.
- **Wrong patches.** :func:`wrong_patches` applies every mutation operator of
  :mod:`~transferlab.coding_rl.tasks.mutations` to the buggy file's entry function and keeps the
  mutants that are not the fix but pass every developer and hidden test while they behave differently
  from the fix on ``inputs`` (the input pool; with none given, the tests' own inputs): a wrong
  one-line patch the grader would accept. Mutants that behave as the fix does on every input are not
  wrong. :func:`uncaught_mutants` asks the same of the fixed file's mutants and the hidden tests alone
  (mutation adequacy).

:mod:`~transferlab.coding_rl.tasks.audit` puts these figures side by side per split. Everything runs
in this process on the project's own generated code (the grammar has no unbounded loop); pure and
deterministic.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from transferlab.coding_rl.sandbox.verifier import values_equal
from transferlab.coding_rl.tasks.code_task import TestCase
from transferlab.coding_rl.tasks.mutations import mutate, normalize
from transferlab.coding_rl.tasks.repo_task import RepoTask

__all__ = [
    "AbstractEdit",
    "Outcome",
    "abstract_edit",
    "abstract_line",
    "arg_names",
    "run_calls",
    "task_edit",
    "uncaught_mutants",
    "wrong_patches",
]

AbstractEdit = tuple[str, str]
"""(before, after) of a bug edit in normal form (:func:`abstract_edit`)."""

_TOKEN: Final = re.compile(
    r"""(?P<num>\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)"""
    r"""|(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
    r"""|(?P<name>[A-Za-z_]\w*)"""
    r"""|(?P<op>\*\*|//|==|!=|<=|>=|->|\+=|-=|\*=|/=|%=|[^\s\w])"""
)


def abstract_line(line: str, args: Sequence[str]) -> str:
    """One line of code in normal form: tokens separated by one space, numbers ``<num>``, string
    literals ``<str>``, the function's arguments ``<arg0>``, ``<arg1>``, ... (leading space dropped).

    >>> abstract_line("    return n * 3 - 5", ["n"])
    'return <arg0> * <num> - <num>'
    >>> abstract_line("if len(word) <= 2:", ["word"])
    'if len ( <arg0> ) <= <num> :'
    """
    position = {name: f"<arg{i}>" for i, name in enumerate(args)}
    out = []
    for match in _TOKEN.finditer(line):
        kind, text = match.lastgroup, match.group()
        if kind == "num":
            out.append("<num>")
        elif kind == "str":
            out.append("<str>")
        elif kind == "name":
            out.append(position.get(text, text))
        else:
            out.append(text)
    return " ".join(out)


def _abstract_block(text: str, args: Sequence[str]) -> str:
    """Lines in normal form joined by `` | ``, each nested line marked with ``>`` per level below the
    block's first line (a deleted guard keeps its shape)."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return ""
    base = min(len(line) - len(line.lstrip(" ")) for line in lines)
    parts = []
    for line in lines:
        depth = (len(line) - len(line.lstrip(" ")) - base) // 4
        parts.append(">" * depth + (" " if depth else "") + abstract_line(line, args))
    return " | ".join(parts)


def abstract_edit(before: str, after: str, args: Sequence[str]) -> AbstractEdit:
    """The bug edit ``before`` → ``after`` (the reference line(s) and the buggy line) up to constants
    and argument names: see the module docstring.

    >>> abstract_edit("    return n * 3 - 5", "    return n * 3 + 5", ["n"])
    ('return <arg0> * <num> - <num>', 'return <arg0> * <num> + <num>')
    >>> abstract_edit("return size * 7 - 9", "return size * 7 + 9", ["size"])  # other names, constants
    ('return <arg0> * <num> - <num>', 'return <arg0> * <num> + <num>')
    """
    return _abstract_block(before, args), _abstract_block(after, args)


def arg_names(source: str, entry_point: str) -> tuple[str, ...]:
    """The positional argument names of ``entry_point`` in ``source`` (the last definition wins, as in
    Python); ``()`` when there is no such function."""
    found: tuple[str, ...] = ()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            found = tuple(a.arg for a in node.args.posonlyargs + node.args.args)
    return found


def task_edit(task: RepoTask) -> AbstractEdit:
    """``task``'s bug edit (``meta.bug``) in normal form, its arguments read from the reference."""
    bug = task.meta.bug
    return abstract_edit(bug.before, bug.after, arg_names(task.reference_source, task.meta.entry_point))


# ---------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Outcome:
    """What one call did: its value, or the name of the exception it raised."""

    value: Any = None
    error: str | None = None

    def same(self, other: Outcome, tol: float = 1e-6) -> bool:
        """Equal values (:func:`values_equal`), or the same exception class."""
        if self.error is not None or other.error is not None:
            return self.error == other.error
        return values_equal(self.value, other.value, tol)

    def text(self) -> str:
        return f"raises `{self.error}`" if self.error else f"returns `{self.value!r}`"


def run_calls(source: str, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Outcome]:
    """``fn(*args)`` for each ``(fn, args)`` of ``calls``, run here on a deep copy of the arguments;
    a module that does not run gives every call its exception."""
    namespace: dict[str, Any] = {}
    try:
        exec(compile(source, "<generated>", "exec"), namespace)  # the project's own generated code
    except Exception as exc:
        return [Outcome(error=type(exc).__name__) for _ in calls]
    out = []
    for fn, args in calls:
        try:
            out.append(Outcome(namespace[fn](*copy.deepcopy(list(args)))))
        except Exception as exc:  # a mutant that raises is caught by that input
            out.append(Outcome(error=type(exc).__name__))
    return out


def _passes(task: RepoTask, outcomes: Sequence[Outcome], cases: Sequence[TestCase]) -> bool:
    tol = task.meta.float_tolerance
    for case, got in zip(cases, outcomes, strict=True):
        if case.raises is not None:
            if got.error != case.raises:
                return False
        elif got.error is not None or not values_equal(case.expected, got.value, tol):
            return False
    return True


def _calls(task: RepoTask, cases: Sequence[TestCase]) -> list[tuple[str, list[Any]]]:
    return [(c.call or task.meta.entry_point, list(c.call_args())) for c in cases]


def _survivors(
    task: RepoTask, source: str, cases: list[TestCase], inputs: Sequence[Sequence[Any]] | None
) -> list[str]:
    """The buggy lines of the mutants of ``source``'s entry function that are not the reference, pass
    every case of ``cases`` and differ from the reference on ``inputs`` (by default the inputs of the
    task's own tests of the entry point)."""
    entry = task.meta.entry_point
    reference = normalize(task.reference_source)
    every = list(task.dev_tests) + list(task.hidden_tests)
    pool = (
        [list(a) for a in inputs]
        if inputs is not None
        else [list(c.call_args()) for c in every if (c.call or entry) == entry]
    )
    expected = run_calls(reference, [(entry, a) for a in pool])
    out = []
    for found in mutate(source, entry, per_operator=0):
        for mutant in found.usable:
            if mutant.buggy == reference:
                continue  # the fix
            got = run_calls(mutant.buggy, _calls(task, cases) + [(entry, a) for a in pool])
            if not _passes(task, got[: len(cases)], cases):
                continue
            if all(e.same(g) for e, g in zip(expected, got[len(cases) :], strict=True)):
                continue  # behaves as the fix on every input: not wrong
            out.append(mutant.after)
    return out


def wrong_patches(task: RepoTask, inputs: Sequence[Sequence[Any]] | None = None) -> list[str]:
    """The wrong one-line patches of ``task`` that pass every developer and hidden test: mutants of the
    buggy file's entry function (every operator, every site) that are not the reference file and behave
    differently from it on ``inputs`` (argument lists of the entry point; by default the inputs of the
    task's own tests of it), as the lines they write."""
    return _survivors(task, task.buggy_source, list(task.dev_tests) + list(task.hidden_tests), inputs)


def uncaught_mutants(task: RepoTask, inputs: Sequence[Sequence[Any]] | None = None) -> list[str]:
    """The mutants of the fixed file's entry function that behave differently from it on ``inputs`` yet
    pass every hidden test (mutation adequacy asks for none), as the lines they write."""
    return _survivors(task, task.reference_source, list(task.hidden_tests), inputs)

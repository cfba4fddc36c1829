"""Procedurally generated repository tasks for ``CodeRepair-v0``: many small, varied repositories.

:func:`procedural_repo_tasks` writes ``n_functions`` distinct functions from a small grammar
(:data:`SHAPES`: short arithmetic, comparison, string and list bodies of one or two arguments, with
guards, loops and slices), names them (``verb_noun``), groups them 1-3 per module file
(``src/<domain>_<suffix>.py``), injects bugs with the operators of
:mod:`~transferlab.coding_rl.tasks.mutations`, and packages each kept mutant as a
:class:`~transferlab.coding_rl.tasks.repo_task.RepoTask`.

- **Tests.** Per function, inputs come from a fixed pool per argument type (inputs on which the
  reference raises are left out); reference outputs are computed by running the reference here.
  Developer (4-6 cases) and hidden (3-5 cases) tests are drawn from two disjoint halves of the pool,
  greedily so that every mutant that can be caught is caught by both; the developer file also calls
  each other function of the module once, so a patch that drops them fails.
- **Bugs.** Every usable mutant of :func:`~transferlab.coding_rl.tasks.mutations.mutate` is run on
  the pool here; a mutant is kept when the chosen developer tests and the chosen hidden tests each
  catch it (equivalent mutants never are) and its buggy line occurs once in the file (so the expert's
  one-line ``edit_file`` fixes it). At most ``per_operator`` per operator and ``max_bugs_per_function``
  per function are kept, picked by a seeded ``random.Random``.
- **Split.** By module: a seeded shuffle puts ``held_out_fraction`` of the modules (so of the
  functions) in ``held-out``. A function's ``group`` is ``procedural/<module>.<function>``; a
  function and all its mutants are on one side, and the module's other functions too. Function names
  and bodies (shape and constants) are unique across the whole generation, so the held-out split never
  shares a function with train.
- **Issue.** The first failing developer test (``f(x)`` returns ``got`` but should return
  ``expected``) and what the function should do (the shape's description).

Deterministic: the same ``(n_functions, seed, held_out_fraction)`` gives the same tasks (string-seeded
``random.Random``; no set or hash order).
"""

from __future__ import annotations

import copy
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Final

from transferlab.coding_rl.sandbox.verifier import values_equal
from transferlab.coding_rl.tasks.code_task import TestCase
from transferlab.coding_rl.tasks.mutations import Mutant, mutate, normalize
from transferlab.coding_rl.tasks.repo_task import BugInfo, RepoTask, Split, make_repo_task

__all__ = [
    "SHAPES",
    "FunctionSpec",
    "Shape",
    "bug_kinds",
    "max_functions",
    "procedural_repo_tasks",
    "renamed",
    "task_names",
]

GENERATOR: Final = "transferlab.coding_rl.tasks.procedural"
TIME_LIMIT_S: Final = 1.0
DEV_CASES: Final = (4, 6)  # (at least, at most) cases of the buggy function in the developer tests
HIDDEN_CASES: Final = (3, 5)
_K: Final = tuple(range(1, 10))


@dataclass(frozen=True)
class Shape:
    """A function body template: ``{a}`` / ``{b}`` are the arguments, other fields are slots."""

    name: str
    args: tuple[str, ...]  # argument types: int, str, list
    body: tuple[str, ...]  # lines, indented relative to the body
    doc: str  # what the function should do (the issue's last line)
    slots: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def instances(self) -> list[dict[str, Any]]:
        """Every assignment of the slots (``m`` is ``k + d`` when both are slots)."""
        names = sorted(self.slots)
        out = []
        for values in product(*(self.slots[n] for n in names)):
            chosen = dict(zip(names, values, strict=True))
            if "d" in chosen:
                chosen["m"] = chosen["k"] + chosen["d"]
            out.append(chosen)
        return out


def _s(name: str, args: str, body: str, doc: str, **slots: tuple[Any, ...]) -> Shape:
    return Shape(name, tuple(args.split()), tuple(body.split("\n")), doc, slots)


KD: Final = {"k": tuple(range(0, 8)), "d": (2, 3, 5)}
SHAPES: Final[tuple[Shape, ...]] = (
    # --- one int
    _s("affine", "int", "return {a} * {k} - {m}", "Return {a} times {k} minus {m}.", k=_K[1:], d=(2, 4, 6)),
    _s(
        "above",
        "int",
        "if {a} < {k}:\n    return 0\nreturn {a} - {k}",
        "Return how far {a} is above {k} (0 when {a} is below {k}).",
        k=_K,
    ),
    _s(
        "clamp",
        "int",
        "if {a} < {k}:\n    return {k}\nif {a} > {m}:\n    return {m}\nreturn {a}",
        "Return {a} clamped to the range {k}..{m}.",
        **KD,
    ),
    _s(
        "compare_to",
        "int",
        "if {a} > {k}:\n    return 1\nif {a} < {k}:\n    return -1\nreturn 0",
        "Return 1 if {a} is above {k}, -1 if it is below, 0 if it equals {k}.",
        k=_K,
    ),
    _s(
        "loop_sum",
        "int",
        "total = 0\nfor i in range({a}):\n    total += i * {k}\nreturn total",
        "Return the sum of i * {k} for every i from 0 up to but not including {a}.",
        k=(2, 3, 4, 5, 6, 7),
    ),
    _s(
        "range_sum",
        "int",
        "return sum(range({k}, {a} + 1))",
        "Return the sum of the integers from {k} to {a}, inclusive.",
        k=_K,
    ),
    _s(
        "multiples",
        "int",
        "return list(range(0, {a}, {k}))",
        "Return the multiples of {k} from 0 up to but not including {a}, as a list.",
        k=(2, 3, 4),
    ),
    _s(
        "in_band",
        "int",
        "return {k} <= {a} <= {m}",
        "Return whether {a} is between {k} and {m}, inclusive.",
        **KD,
    ),
    _s("outside", "int", "return {a} < {k} or {a} > {m}", "Return whether {a} is outside {k}..{m}.", **KD),
    _s(
        "next_step",
        "int",
        "if {a} % {k} == 0:\n    return {a} + {k}\nreturn {a} + 1",
        "Return {a} + {k} when {a} is a multiple of {k}, else {a} + 1.",
        k=(2, 3, 4, 5),
    ),
    # --- two ints
    _s("lin", "int int", "return {a} * {k} + {b}", "Return {a} times {k} plus {b}.", k=_K[1:]),
    _s("diff_scaled", "int int", "return ({a} - {b}) * {k}", "Return {a} minus {b}, times {k}.", k=_K[1:]),
    _s(
        "bigger_plus",
        "int int",
        "if {a} > {b}:\n    return {a} + {k}\nreturn {b} + {k}",
        "Return the larger of {a} and {b}, plus {k}.",
        k=_K,
    ),
    _s(
        "inclusive_range",
        "int int",
        "stop = {b} + 1\nreturn list(range({a}, stop, {k}))",
        "Return every {k}-th integer from {a} to {b}, inclusive, as a list.",
        k=(1, 2, 3),
    ),
    _s(
        "span",
        "int int",
        "width = {b} - {a} + 1\nreturn width * {k}",
        "Return {k} times the number of integers from {a} to {b}, inclusive.",
        k=_K[1:],
    ),
    _s(
        "close",
        "int int",
        "return abs({a} - {b}) <= {k}",
        "Return whether {a} and {b} differ by at most {k}.",
        k=_K,
    ),
    _s(
        "both_above",
        "int int",
        "return {a} > {k} and {b} > {k}",
        "Return whether both {a} and {b} are above {k}.",
        k=_K,
    ),
    _s(
        "equal_or_far",
        "int int",
        "return {a} == {b} or {a} > {b} + {k}",
        "Return whether {a} equals {b} or exceeds {b} by more than {k}.",
        k=_K,
    ),
    _s(
        "count_multiples",
        "int int",
        "count = 0\nfor i in range({a}, {b}):\n    if i % {k} == 0:\n        count += 1\nreturn count",
        "Count the multiples of {k} from {a} up to but not including {b}.",
        k=(2, 3, 4, 5),
    ),
    # --- one string
    _s(
        "ends",
        "str",
        "if not {a}:\n    return ''\nreturn {a}[0] + {a}[-1]",
        "Return the first and last characters of {a} ('' for an empty string).",
    ),
    _s(
        "truncate",
        "str",
        "if len({a}) <= {k}:\n    return {a}\nreturn {a}[:{k}] + '{sep}'",
        "Return {a} if it has at most {k} characters, else its first {k} characters and '{sep}'.",
        k=(1, 2, 3, 4),
        sep=("-", "~", "."),
    ),
    _s("drop_front", "str", "return {a}[{k}:]", "Return {a} without its first {k} characters.", k=(1, 2, 3)),
    _s(
        "longer_than",
        "str",
        "return len({a}) > {k}",
        "Return whether {a} has more than {k} characters.",
        k=_K[:6],
    ),
    _s(
        "count_char",
        "str",
        "return {a}.count('{c}') >= {k}",
        "Return whether '{c}' occurs in {a} at least {k} times.",
        k=(1, 2, 3),
        c=("a", "e", "o"),
    ),
    _s(
        "starts_or_ends",
        "str",
        "return {a}.startswith('{c}') or {a}.endswith('{c}')",
        "Return whether {a} starts or ends with '{c}'.",
        c=("a", "e", "o", "l"),
    ),
    _s(
        "repeat",
        "str",
        "return {a} * {k} + '{sep}'",
        "Return {a} repeated {k} times, then '{sep}'.",
        k=(2, 3),
        sep=("-", "!", "."),
    ),
    _s(
        "has_and_long",
        "str",
        "return '{c}' in {a} and len({a}) >= {k}",
        "Return whether {a} contains '{c}' and has at least {k} characters.",
        k=(2, 3, 4, 5),
        c=("a", "e", "o"),
    ),
    _s(
        "char_at",
        "str",
        "if len({a}) <= {k}:\n    return ''\nreturn {a}[{k}]",
        "Return the character of {a} at index {k} ('' when {a} is too short).",
        k=(0, 1, 2, 3),
    ),
    _s(
        "capitalize",
        "str",
        "if not {a}:\n    return {a}\nreturn {a}[0].upper() + {a}[1:]",
        "Return {a} with its first character in upper case.",
    ),
    # --- two strings
    _s(
        "join",
        "str str",
        "return {a} + '{sep}' + {b}",
        "Return {a} and {b} joined by '{sep}'.",
        sep=("-", ":", "/", "+"),
    ),
    _s(
        "longer_by",
        "str str",
        "return len({a}) == len({b}) + {k}",
        "Return whether {a} is exactly {k} characters longer than {b}.",
        k=(0, 1, 2),
    ),
    _s(
        "same_prefix",
        "str str",
        "return {a}[:{k}] == {b}[:{k}]",
        "Return whether {a} and {b} have the same first {k} characters.",
        k=(1, 2, 3),
    ),
    _s(
        "longer_of",
        "str str",
        "if len({a}) >= len({b}):\n    return {a}\nreturn {b}",
        "Return the longer of {a} and {b} ({a} on a tie).",
    ),
    # --- one list
    _s(
        "ends_sum",
        "list",
        "if not {a}:\n    return 0\nreturn {a}[0] + {a}[-1]",
        "Return the first element of {a} plus the last (0 for an empty list).",
    ),
    _s(
        "head_sum",
        "list",
        "return sum({a}[:{k}])",
        "Return the sum of the first {k} elements of {a}.",
        k=(1, 2, 3),
    ),
    _s(
        "tail_sum",
        "list",
        "return sum({a}[{k}:])",
        "Return the sum of the elements of {a} after the first {k}.",
        k=(1, 2, 3),
    ),
    _s(
        "shift_all",
        "list",
        "return [x + {k} for x in {a}]",
        "Return {a} with {k} added to every element.",
        k=_K,
    ),
    _s(
        "keep_above",
        "list",
        "return [x for x in {a} if x > {k}]",
        "Return the elements of {a} that are above {k}, in order.",
        k=(0, 1, 2, 3, 4, 5),
    ),
    _s(
        "count_at_least",
        "list",
        "return len([x for x in {a} if x >= {k}])",
        "Count the elements of {a} that are at least {k}.",
        k=(1, 2, 3, 4, 5),
    ),
    _s(
        "maximum",
        "list",
        "if not {a}:\n    return None\nbest = {a}[0]\nfor x in {a}[1:]:\n    if x > best:\n        best = x\n"
        "return best",
        "Return the largest element of {a} (None for an empty list).",
    ),
    _s(
        "minimum",
        "list",
        "if not {a}:\n    return None\nbest = {a}[0]\nfor x in {a}[1:]:\n    if x < best:\n        best = x\n"
        "return best",
        "Return the smallest element of {a} (None for an empty list).",
    ),
    _s(
        "count_divisible",
        "list",
        "count = 0\nfor x in {a}:\n    if x % {k} == 0:\n        count += 1\nreturn count",
        "Count the elements of {a} that are multiples of {k}.",
        k=(2, 3, 4, 5),
    ),
    _s(
        "spread",
        "list",
        "if len({a}) < 2:\n    return 0\nreturn {a}[-1] - {a}[0]",
        "Return the last element of {a} minus the first (0 when {a} has fewer than 2 elements).",
    ),
    _s(
        "scaled_total",
        "list",
        "total = 0\nfor x in {a}:\n    total += x * {k}\nreturn total",
        "Return the sum of {k} times each element of {a}.",
        k=(2, 3, 4, 5, 6),
    ),
    _s(
        "all_below",
        "list",
        "return all((x < {k} for x in {a}))",
        "Return whether every element of {a} is below {k}.",
        k=(3, 4, 5, 6, 7, 8),
    ),
    # --- a list and an int
    _s("take", "list int", "return {a}[:{b}]", "Return the first {b} elements of {a}."),
    _s(
        "below",
        "list int",
        "return [x for x in {a} if x < {b}]",
        "Return the elements of {a} that are below {b}, in order.",
    ),
    _s(
        "contains_plus",
        "list int",
        "return {b} + {k} in {a}",
        "Return whether {b} + {k} is an element of {a}.",
        k=(1, 2, 3),
    ),
    _s(
        "at_index",
        "list int",
        "if {b} >= len({a}):\n    return -1\nreturn {a}[{b}]",
        "Return the element of {a} at index {b}, or -1 when {b} is past the end.",
    ),
)
"""The grammar: every (shape, slot assignment) is one distinct function."""

ARG_NAMES: Final[dict[tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    ("int",): (("n",), ("value",), ("size",), ("amount",), ("level",), ("p",)),
    ("int", "int"): (("a", "b"), ("p", "q"), ("lo", "hi"), ("start", "end"), ("left", "right"), ("u", "v")),
    ("str",): (("s",), ("text",), ("word",), ("name",), ("label",), ("tag",)),
    ("str", "str"): (("s", "t"), ("first", "second"), ("word", "other"), ("head", "tail"), ("left", "right")),
    ("list",): (("xs",), ("items",), ("values",), ("nums",), ("scores",), ("data",)),
    ("list", "int"): (("xs", "n"), ("items", "k"), ("values", "limit"), ("nums", "j"), ("data", "pos")),
}
VERBS: Final = (
    "scale", "shift", "clip", "count", "pick", "trim", "score", "merge", "check", "pad", "total",
    "bound", "blend", "mark", "split", "rank", "probe", "fold", "tally", "rate", "grade", "match",
    "sort", "weigh", "track", "price", "mask", "stamp", "test", "index",
)  # fmt: skip
NOUNS: Final = (
    "value", "item", "word", "label", "step", "level", "point", "ratio", "name", "token", "entry",
    "order", "batch", "range", "total", "score", "price", "slot", "block", "frame", "note", "field",
    "stock", "queue", "page", "span", "key", "row", "cell", "unit",
)  # fmt: skip
DOMAINS: Final = (
    "pricing", "geometry", "inventory", "scores", "text", "stats", "ledger", "grid", "timer", "orders",
    "billing", "weather", "routes", "catalog", "survey", "parser", "report", "budget", "ranking",
    "shipping", "labels", "records", "signals", "metrics",
)  # fmt: skip
SUFFIXES: Final = ("ops", "util", "core", "tools", "helpers", "rules")

_INTS: Final = (-3, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15)
_INT_PAIRS: Final = (-2, 0, 1, 3, 4, 5, 7, 9, 12)
_STRS: Final = (
    "",
    "a",
    "ab",
    "abc",
    "tea",
    "hello",
    "banana",
    "level",
    "xyz",
    "aaa",
    "moon",
    "idea",
    "oboe",
    "eel",
)
_STR_PAIRS: Final = ("", "a", "ab", "tea", "team", "hello", "help", "oboe")
_LISTS: Final[tuple[list[int], ...]] = (
    [], [0], [3], [1, 2], [2, 1], [4, 4], [1, 2, 3], [3, -1, 2], [5, 0, 5, 1], [-2, -7, 4], [9, 8, 7, 6],
    [1, 3, 5, 7, 9], [6, 2, 8, 4], [10, 12, 6],
)  # fmt: skip
_LIST_INTS: Final = (0, 1, 2, 3, 5, 9)


def _pool(arg_types: tuple[str, ...]) -> list[list[Any]]:
    """Every candidate argument list for a function of these argument types, in a fixed order."""
    pools: dict[tuple[str, ...], list[list[Any]]] = {
        ("int",): [[x] for x in _INTS],
        ("int", "int"): [[x, y] for x in _INT_PAIRS for y in _INT_PAIRS],
        ("str",): [[s] for s in _STRS],
        ("str", "str"): [[s, t] for s in _STR_PAIRS for t in _STR_PAIRS],
        ("list",): [[list(xs)] for xs in _LISTS],
        ("list", "int"): [[list(xs), n] for xs in _LISTS for n in _LIST_INTS],
    }
    return copy.deepcopy(pools[arg_types])


@dataclass(frozen=True)
class FunctionSpec:
    """One generated function: its shape instance, names and source."""

    shape: Shape
    slots: dict[str, Any]
    name: str
    arg_names: tuple[str, ...]

    def source(self) -> str:
        names = dict(zip(("a", "b"), self.arg_names, strict=False))
        body = "\n".join("    " + line.format(**names, **self.slots) for line in self.shape.body)
        return f"def {self.name}({', '.join(self.arg_names)}):\n{body}\n"

    def description(self) -> str:
        names = dict(zip(("a", "b"), (f"`{n}`" for n in self.arg_names), strict=False))
        return self.shape.doc.format(**names, **self.slots)


def max_functions() -> int:
    """How many distinct functions the grammar and the name lists allow."""
    instances = sum(len(s.instances()) for s in SHAPES)
    return min(instances, len(VERBS) * len(NOUNS))


def _draw_functions(n: int, rng: random.Random) -> list[FunctionSpec]:
    """``n`` functions with distinct (shape, slots) and distinct names."""
    instances = [(shape, slots) for shape in SHAPES for slots in shape.instances()]
    # Shapes with many slot values would crowd out the others: draw a shape first, then an instance.
    by_shape: dict[str, list[dict[str, Any]]] = {s.name: s.instances() for s in SHAPES}
    for values in by_shape.values():
        rng.shuffle(values)
    names = [f"{v}_{n_}" for v in VERBS for n_ in NOUNS]
    rng.shuffle(names)
    shapes = list(SHAPES)
    out: list[FunctionSpec] = []
    while len(out) < n:
        live = [s for s in shapes if by_shape[s.name]]
        if not live:
            raise AssertionError(f"the grammar has only {len(instances)} functions")
        shape = rng.choice(live)
        slots = by_shape[shape.name].pop()
        arg_names = rng.choice(ARG_NAMES[shape.args])
        out.append(FunctionSpec(shape, slots, names[len(out)], arg_names))
    return out


def _modules(functions: list[FunctionSpec], rng: random.Random) -> list[tuple[str, list[FunctionSpec]]]:
    """The functions grouped 1-3 per module, each module with a distinct name."""
    names = [f"{d}_{s}" for d in DOMAINS for s in SUFFIXES]
    rng.shuffle(names)
    out: list[tuple[str, list[FunctionSpec]]] = []
    i = 0
    while i < len(functions):
        size = rng.choice((1, 2, 2, 3))
        k = len(out)
        name = names[k % len(names)] + (str(k // len(names) + 1) if k >= len(names) else "")
        out.append((name, functions[i : i + size]))
        i += size
    return out


# ---------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class _Outcome:
    value: Any = None
    error: str | None = None  # exception class name

    def same(self, other: _Outcome) -> bool:
        if self.error is not None or other.error is not None:
            return self.error == other.error
        return values_equal(self.value, other.value, 1e-6)

    def text(self) -> str:
        return f"raises `{self.error}`" if self.error else f"returns `{self.value!r}`"


def _run(source: str, fn: str, inputs: list[list[Any]]) -> list[_Outcome]:
    """``fn(*args)`` for each input, run here (the grammar has no unbounded loop)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "<procedural>", "exec"), namespace)  # our own generated code
    out = []
    for args in inputs:
        try:
            out.append(_Outcome(namespace[fn](*copy.deepcopy(args))))
        except Exception as exc:  # a mutant that raises is caught by that input
            out.append(_Outcome(error=type(exc).__name__))
    return out


def _cover(order: list[int], kills: list[set[int]], bounds: tuple[int, int]) -> list[int]:
    """Inputs (indices, from ``order``): the first ``bounds[0] - 1``, then greedily the one catching the
    most uncaught mutants until all are caught or ``bounds[1]`` are chosen, then topped up."""
    chosen = order[: bounds[0] - 1]
    uncaught = [k for k in kills if k and not k & set(chosen)]
    while uncaught and len(chosen) < bounds[1]:
        best = max((i for i in order if i not in chosen), key=lambda i: sum(i in k for k in uncaught))
        if not any(best in k for k in uncaught):
            break
        chosen.append(best)
        uncaught = [k for k in uncaught if best not in k]
    chosen += [i for i in order if i not in chosen][: max(0, bounds[0] - len(chosen))]
    return chosen


def _case(fn: str, args: list[Any], expected: Any) -> TestCase:
    return TestCase.model_validate(
        {"args": copy.deepcopy(args), "call": fn, "expected": copy.deepcopy(expected)}
    )


@dataclass
class _Tested:
    """A function's chosen tests and the mutants they catch."""

    dev: list[int]
    hidden: list[int]
    kept: list[Mutant]


def _test_function(
    source: str, spec: FunctionSpec, inputs: list[list[Any]], mutants: list[Mutant], rng: random.Random
) -> _Tested:
    reference = _run(source, spec.name, inputs)
    caught = [
        {
            i
            for i, (r, o) in enumerate(zip(reference, _run(m.buggy, spec.name, inputs), strict=True))
            if not r.same(o)
        }
        for m in mutants
    ]
    order = list(range(len(inputs)))
    rng.shuffle(order)
    dev_pool, hidden_pool = set(order[0::2]), set(order[1::2])
    both = [k if k & dev_pool and k & hidden_pool else set() for k in caught]
    dev = _cover([i for i in order if i in dev_pool], [k & dev_pool for k in both], DEV_CASES)
    hidden = _cover([i for i in order if i in hidden_pool], [k & hidden_pool for k in both], HIDDEN_CASES)
    kept = [
        m
        for m, k in zip(mutants, caught, strict=True)
        if k & set(dev)
        and k & set(hidden)
        and m.buggy.count(m.after) == 1
        and m.buggy.replace(m.after, m.before, 1) == m.reference
    ]
    return _Tested(dev, hidden, kept)


# ---------------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class _Module:
    name: str
    functions: list[FunctionSpec]
    source: str  # normalized reference
    inputs: dict[str, list[list[Any]]]  # per function: pool inputs on which the reference returns


def _build_module(name: str, functions: list[FunctionSpec]) -> _Module:
    source = normalize("\n\n".join(f.source() for f in functions))
    inputs = {}
    for f in functions:
        pool = _pool(f.shape.args)
        outcomes = _run(source, f.name, pool)
        inputs[f.name] = [args for args, o in zip(pool, outcomes, strict=True) if o.error is None]
    return _Module(name, functions, source, inputs)


RARE_FIRST: Final = (
    "boundary_update",
    "range_off_by_one",
    "comparison_off_by_one",
    "index_off_by_one",
    "drop_equality",
    "remove_guard",
    "wrong_return",
    "swap_operator",
)
"""The order in which a function's bugs are kept: ``swap_operator`` applies to nearly every function and
would crowd out the rarer kinds."""


def _pick(kept: list[Mutant], per_operator: int, cap: int, rng: random.Random) -> list[Mutant]:
    """At most ``per_operator`` mutants per operator (seeded picks), then ``cap``, rarer kinds first."""
    by_op: dict[str, list[Mutant]] = {}
    for m in kept:
        by_op.setdefault(m.operator, []).append(m)
    rank = {op: i for i, op in enumerate(RARE_FIRST)}
    ops = sorted(by_op, key=lambda op: rank.get(op, len(rank)))
    picked = [m for op in ops for m in rng.sample(by_op[op], min(per_operator, len(by_op[op])))]
    return picked[:cap]


def _issue(spec: FunctionSpec, case: TestCase, got: _Outcome) -> str:
    call = f"{spec.name}({', '.join(repr(a) for a in case.call_args())})"
    return (
        f"`{spec.name}` returns a wrong result\n\n`{call}` {got.text()} but should return "
        f"`{case.expected!r}`.\n\nWhat `{spec.name}` should do: {spec.description()}\n"
    )


def _function_tasks(
    module: _Module, spec: FunctionSpec, *, seed: int, split: Split, per_operator: int, cap: int
) -> list[RepoTask]:
    group = f"procedural/{module.name}.{spec.name}"
    rng = random.Random(f"procedural:{seed}:{group}")
    found = mutate(module.source, spec.name, seed=seed, per_operator=0, key=group)
    mutants = [m for f in found for m in f.usable]
    inputs = module.inputs[spec.name]
    tested = _test_function(module.source, spec, inputs, mutants, rng)
    reference = _run(module.source, spec.name, inputs)
    dev = [_case(spec.name, inputs[i], reference[i].value) for i in tested.dev]
    hidden = [_case(spec.name, inputs[i], reference[i].value) for i in tested.hidden]
    others = [
        _case(
            f.name, module.inputs[f.name][0], _run(module.source, f.name, module.inputs[f.name][:1])[0].value
        )
        for f in module.functions
        if f is not spec and module.inputs[f.name]
    ]
    tasks = []
    for pick, mutant in enumerate(_pick(tested.kept, per_operator, cap, rng)):
        outcomes = _run(mutant.buggy, spec.name, [inputs[i] for i in tested.dev])
        failing = next(j for j, i in enumerate(tested.dev) if not reference[i].same(outcomes[j]))
        tasks.append(
            make_repo_task(
                task_id=f"procedural-{module.name}-{spec.name}-{mutant.operator}-{pick}",
                module=module.name,
                buggy_source=mutant.buggy,
                reference_source=mutant.reference,
                entry_point=spec.name,
                dev_tests=dev + others,
                hidden_tests=hidden,
                issue=_issue(spec, dev[failing], outcomes[failing]),
                group=group,
                bug=BugInfo(
                    operator=mutant.operator, line=mutant.line, before=mutant.before, after=mutant.after
                ),
                split=split,
                time_limit_s=TIME_LIMIT_S,
                provenance={
                    "source": "procedural",
                    "generator": GENERATOR,
                    "seed": seed,
                    "shape": spec.shape.name,
                    "kind": "/".join(spec.shape.args),
                    "operator": mutant.operator,
                    "site": mutant.site,
                    "pick": pick,
                    "failing_dev_test": failing,
                    "module_functions": [f.name for f in module.functions],
                },
            )
        )
    return tasks


def procedural_repo_tasks(
    n_functions: int = 240,
    seed: int = 0,
    held_out_fraction: float = 0.25,
    *,
    per_operator: int = 1,
    max_bugs_per_function: int = 3,
) -> tuple[list[RepoTask], list[RepoTask]]:
    """(train, held-out) repository tasks from ``n_functions`` generated functions (module docstring).

    Raises ``ValueError`` naming the fix for a count, fraction or cap out of range.
    """
    limit = max_functions()
    if not 2 <= n_functions <= limit:
        raise ValueError(
            f"n_functions must be in 2..{limit} (the grammar's distinct functions), got {n_functions}"
        )
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    if per_operator < 1 or max_bugs_per_function < 1:
        raise ValueError(
            "per_operator and max_bugs_per_function must be >= 1, "
            f"got {per_operator} and {max_bugs_per_function}"
        )
    rng = random.Random(f"procedural:{seed}")
    modules = _modules(_draw_functions(n_functions, rng), rng)
    order = list(range(len(modules)))
    rng.shuffle(order)
    n_held = min(len(modules) - 1, max(1, round(held_out_fraction * len(modules))))
    held = set(order[:n_held])
    train: list[RepoTask] = []
    held_out: list[RepoTask] = []
    for m, (name, functions) in enumerate(modules):
        module = _build_module(name, functions)
        split: Split = "held-out" if m in held else "train"
        for spec in functions:
            tasks = _function_tasks(
                module, spec, seed=seed, split=split, per_operator=per_operator, cap=max_bugs_per_function
            )
            (held_out if m in held else train).extend(tasks)
    return train, held_out


def _substitute(text: str, mapping: dict[str, str]) -> str:
    """Replace each whole identifier of ``mapping`` in ``text`` (one pass, so swaps are safe)."""
    if not mapping:
        return text
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)) + r")\b"
    )
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def renamed(task: RepoTask, rng: random.Random, avoid: frozenset[str] = frozenset()) -> RepoTask:
    """``task`` with its module and every function of the module given fresh names (augmentation).

    The new function names are ``verb_noun`` pairs and the module a ``domain_suffix`` name of this
    grammar, drawn with ``rng`` from the names not in ``avoid`` and not already in the module (pass the
    held-out split's names as ``avoid`` so a renamed training task never takes a held-out name). Code,
    tests, issue and bug lines change consistently, so the task is as solvable as before and its bug the
    same; the task id gets an ``-as-<module>`` suffix and provenance records the original names. A demo
    made from renamed copies cannot be imitated by remembering which path goes with which function
    name: the policy has to copy names from what it reads.
    """
    functions = [str(f) for f in task.meta.provenance.get("module_functions", [task.meta.entry_point])]
    module = task.meta.source_path.removeprefix("src/").removesuffix(".py")
    taken = set(avoid) | set(functions) | {module}
    free_names = [f"{v}_{n_}" for v in VERBS for n_ in NOUNS if f"{v}_{n_}" not in taken]
    free_modules = [f"{d}_{s}" for d in DOMAINS for s in SUFFIXES if f"{d}_{s}" not in taken]
    if len(free_names) < len(functions) or not free_modules:
        raise ValueError(f"no free names left to rename {task.meta.task_id}; pass a smaller avoid set")
    mapping = dict(zip(functions, rng.sample(free_names, len(functions)), strict=True))
    new_module = rng.choice(free_modules)
    mapping[module] = new_module

    def sub(text: str) -> str:
        return _substitute(text, mapping)

    def case(c: TestCase) -> TestCase:
        return c if c.call is None else c.model_copy(update={"call": sub(c.call)})

    bug = task.meta.bug
    meta = task.meta
    return make_repo_task(
        task_id=f"{meta.task_id}-as-{new_module}",
        module=new_module,
        buggy_source=sub(task.buggy_source),
        reference_source=sub(task.reference_source),
        entry_point=mapping[meta.entry_point],
        dev_tests=[case(c) for c in task.dev_tests],
        hidden_tests=[case(c) for c in task.hidden_tests],
        issue=sub(meta.issue),
        group=meta.group,
        bug=BugInfo(operator=bug.operator, line=bug.line, before=sub(bug.before), after=sub(bug.after)),
        split=meta.split,
        time_limit_s=meta.time_limit_s,
        provenance={
            **meta.provenance,
            "module_functions": [mapping[f] for f in functions],
            "renamed_from": {"module": module, "functions": functions},
        },
    )


def task_names(tasks: list[RepoTask]) -> frozenset[str]:
    """Every module and function name of ``tasks`` (what :func:`renamed` should avoid)."""
    names: set[str] = set()
    for t in tasks:
        names.add(t.meta.source_path.removeprefix("src/").removesuffix(".py"))
        names.update(str(f) for f in t.meta.provenance.get("module_functions", [t.meta.entry_point]))
    return frozenset(names)


def bug_kinds(tasks: list[RepoTask]) -> dict[str, int]:
    """How many tasks each mutation operator made (sorted by operator)."""
    return dict(sorted(Counter(t.meta.bug.operator for t in tasks).items()))

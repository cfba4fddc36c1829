"""Procedurally generated repository tasks for ``CodeRepair-v0``: many small, varied repositories.

:func:`procedural_splits` writes ``n_functions`` distinct functions from a small grammar
(:data:`SHAPES`: short arithmetic, comparison, string and list bodies of one or two arguments, with
guards, loops and slices), names them (``verb_noun``), groups them 1-3 per module file
(``src/<domain>_<suffix>.py``), injects bugs with the operators of
:mod:`~transferlab.coding_rl.tasks.mutations`, and packages each kept mutant as a
:class:`~transferlab.coding_rl.tasks.repo_task.RepoTask`, in three splits.

- **Split.** By template: :func:`assign_shapes` puts each shape, with every slot assignment
  of it, in ``train``, ``validation`` or ``test`` (a seeded shuffle; validation and test each take
  about their fraction of the grammar's functions); functions are drawn per split in proportion, and a
  module holds functions of one split. A validation or test task whose bug edit, with constants and
  argument names abstracted (:func:`~transferlab.coding_rl.tasks.novelty.abstract_edit`), occurs in
  train is dropped (``TaskSplits.dropped`` counts them). So no validation or test task shares a
  function template or a bug edit with training; function and module names are unique across the
  generation. Settings are tuned on validation; only a committed result scores test.
  :func:`procedural_repo_tasks` is the two-way view (validation and test joined as ``held-out``).
- **Tests.** Per function, inputs come from a fixed pool per argument type (inputs on which the
  reference raises are left out); reference outputs are computed by running the reference here.
  Developer tests (4-6 cases) come from one half of the pool, greedily so that every mutant both
  halves can catch is caught; the developer file also calls each other function of the module once,
  so a patch that drops them fails. Hidden tests (3-12 cases) are **mutation-adequate**: every
  single-operator mutant of the fixed file, and of the task's buggy file (a wrong one-line patch),
  that behaves differently from the fix on the pool fails at least one of them. They come from the
  other half first, then the rest of the pool; a developer case only for a mutant nothing else
  catches (a boundary). A bug whose wrong patches cannot all be caught within 12 cases is not kept
  (``TaskSplits.dropped`` counts these too).
- **Bugs.** Every usable mutant of :func:`~transferlab.coding_rl.tasks.mutations.mutate` is run on
  the pool here; a mutant is kept when the chosen developer tests and hidden tests each catch it
  (equivalent mutants never are) and its buggy line occurs once in the file (so the expert's one-line
  ``edit_file`` fixes it). At most ``per_operator`` per operator and ``max_bugs_per_function`` per
  function are kept, picked by a seeded ``random.Random``.
- **Issue.** The first failing developer test (``f(x)`` returns ``got`` but should return
  ``expected``) and what the function should do (the shape's description).

``transferlab coding tasks audit`` measures the novelty and the adequacy of a generation
(:mod:`~transferlab.coding_rl.tasks.audit`). Deterministic: the same arguments give the same tasks
(string-seeded ``random.Random``; no set or hash order).
"""

from __future__ import annotations

import copy
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Final

from transferlab.coding_rl.tasks.code_task import TestCase
from transferlab.coding_rl.tasks.mutations import Mutant, mutate, normalize
from transferlab.coding_rl.tasks.novelty import Outcome, run_calls, task_edit
from transferlab.coding_rl.tasks.repo_task import (
    SPLITS,
    BugInfo,
    RepoTask,
    SplitName,
    TaskSplits,
    make_repo_task,
)

__all__ = [
    "DEFAULT_FUNCTIONS",
    "SHAPES",
    "FunctionSpec",
    "Shape",
    "assign_shapes",
    "bug_kinds",
    "input_pool",
    "max_functions",
    "procedural_repo_tasks",
    "procedural_splits",
    "renamed",
    "task_names",
]

GENERATOR: Final = "transferlab.coding_rl.tasks.procedural"
TIME_LIMIT_S: Final = 1.0
DEV_CASES: Final = (4, 6)  # (at least, at most) cases of the buggy function in the developer tests
HIDDEN_CASES: Final = (3, 12)  # enough to catch every wrong one-line patch (mutation adequacy)
DEFAULT_FUNCTIONS: Final = 240
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
    # --- more templates: each has lines of its own, so its bug edits are its own
    _s(
        "bucket",
        "int",
        "if {a} <= {k}:\n    return 'low'\nif {a} <= {m}:\n    return 'mid'\nreturn 'high'",
        "Return 'low' when {a} is at most {k}, 'mid' when it is at most {m}, else 'high'.",
        **KD,
    ),
    _s(
        "round_down",
        "int",
        "return {a} - {a} % {k}",
        "Return {a} rounded down to a multiple of {k}.",
        k=(2, 3, 4, 5, 6),
    ),
    _s(
        "squared_gap", "int", "gap = {a} - {k}\nreturn gap * gap", "Return the square of {a} minus {k}.", k=_K
    ),
    _s(
        "sign_scale",
        "int",
        "if {a} >= 0:\n    return {a} * {k}\nreturn -{a}",
        "Return {a} times {k} when {a} is not negative, else minus {a}.",
        k=(2, 3, 4, 5, 6, 7),
    ),
    _s(
        "triangle",
        "int",
        "return {a} * ({a} + {k}) // 2",
        "Return {a} times ({a} plus {k}), halved and rounded down.",
        k=(1, 2, 3, 4, 5),
    ),
    _s(
        "countdown",
        "int",
        "return list(range({a}, {k}, -1))",
        "Return the integers from {a} down to but not including {k}, as a list.",
        k=(0, 1, 2, 3),
    ),
    _s(
        "weighted",
        "int int",
        "return {a} * {k} + {b} * {m}",
        "Return {a} times {k} plus {b} times {m}.",
        k=(1, 2, 3, 4, 5),
        d=(1, 2),
    ),
    _s(
        "midpoint",
        "int int",
        "return ({a} + {b}) // 2 + {k}",
        "Return the mean of {a} and {b}, rounded down, plus {k}.",
        k=_K,
    ),
    _s(
        "gap_or_more",
        "int int",
        "if {a} >= {b}:\n    return {a} - {b}\nreturn {b} - {a} + {k}",
        "Return {a} minus {b} when {a} is at least {b}, else {b} minus {a} plus {k}.",
        k=(1, 2, 3, 4, 5, 6),
    ),
    _s(
        "double_less",
        "int int",
        "result = {a}\nfor _ in range({k}):\n    result = result * 2 - {b}\nreturn result",
        "Starting from {a}, {k} times double the value and subtract {b}; return the result.",
        k=(1, 2, 3),
    ),
    _s(
        "in_window",
        "int int",
        "return {b} - {k} <= {a} < {b} + {k}",
        "Return whether {a} is at least {b} minus {k} and below {b} plus {k}.",
        k=(1, 2, 3, 4, 5),
    ),
    _s(
        "sum_mod",
        "int int",
        "total = 0\nfor v in range({a}, {b} + 1):\n    total += v % {k}\nreturn total",
        "Return the sum of v % {k} for every integer v from {a} to {b}, inclusive.",
        k=(2, 3, 4),
    ),
    _s(
        "wrap",
        "str",
        "return '{c}' + {a} + '{c}'",
        "Return {a} with '{c}' before and after it.",
        c=("*", "#", "|", "="),
    ),
    _s(
        "vowel_count",
        "str",
        "return sum((1 for ch in {a} if ch in '{v}')) + {k}",
        "Return how many characters of {a} are one of '{v}', plus {k}.",
        v=("aeiou", "ae", "lo"),
        k=(0, 1, 2),
    ),
    _s(
        "middle",
        "str",
        "if len({a}) < {k}:\n    return {a}\nreturn {a}[1:-1]",
        "Return {a} without its first and last characters ({a} itself when shorter than {k}).",
        k=(2, 3, 4),
    ),
    _s(
        "find_plus",
        "str",
        "pos = {a}.find('{c}')\nif pos < 0:\n    return {k}\nreturn pos + {k}",
        "Return the index of the first '{c}' in {a} plus {k} ({k} when {a} has no '{c}').",
        k=(1, 2, 3),
        c=("a", "e", "o"),
    ),
    _s(
        "shout",
        "str",
        "if len({a}) > {k}:\n    return {a}.upper()\nreturn {a}",
        "Return {a} in upper case when it has more than {k} characters, else {a} unchanged.",
        k=(1, 2, 3, 4, 5),
    ),
    _s(
        "repeats",
        "str",
        "runs = 0\nfor i in range(1, len({a})):\n    if {a}[i] == {a}[i - 1]:\n        runs += 1\n"
        "return runs + {k}",
        "Return how many characters of {a} equal the one before them, plus {k}.",
        k=(0, 1, 2),
    ),
    _s(
        "common_start",
        "str str",
        "n = 0\nfor x, y in zip({a}, {b}):\n    if x != y:\n        break\n    n += 1\nreturn n * {k}",
        "Return {k} times the length of the longest common prefix of {a} and {b}.",
        k=(1, 2, 3),
    ),
    _s(
        "splice",
        "str str",
        "return {a}[:{k}] + {b}[{k}:]",
        "Return the first {k} characters of {a} followed by {b} without its first {k} characters.",
        k=(1, 2, 3),
    ),
    _s(
        "neighbour_products",
        "list",
        "total = {k}\nfor i in range(len({a}) - 1):\n    total += {a}[i] * {a}[i + 1]\nreturn total",
        "Return {k} plus the sum of the products of neighbouring elements of {a}.",
        k=(0, 1, 2, 3, 4),
    ),
    _s(
        "running",
        "list",
        "out = []\ntotal = {k}\nfor x in {a}:\n    total -= x\n    out.append(total)\nreturn out",
        "Return the running values of {k} minus the elements of {a} so far, as a list.",
        k=(0, 1, 2, 3),
    ),
    _s(
        "second_largest",
        "list",
        "if len({a}) < 2:\n    return {k}\nreturn sorted({a})[-2]",
        "Return the second largest element of {a} ({k} when it has fewer than 2 elements).",
        k=(0, 1, 9),
    ),
    _s(
        "first_above",
        "list",
        "for x in {a}:\n    if x > {k}:\n        return x\nreturn -1",
        "Return the first element of {a} above {k}, or -1 when there is none.",
        k=(0, 1, 2, 3, 4, 5, 6),
    ),
    _s(
        "last_below",
        "list",
        "found = None\nfor x in {a}:\n    if x < {k}:\n        found = x\nreturn found",
        "Return the last element of {a} below {k} (None when there is none).",
        k=(1, 2, 3, 4, 5, 6),
    ),
    _s(
        "window_sum",
        "list int",
        "return sum({a}[{b}:{b} + {k}])",
        "Return the sum of the {k} elements of {a} from index {b} on (fewer at the end).",
        k=(2, 3),
    ),
    _s(
        "rotate",
        "list int",
        "if not {a}:\n    return []\nshift = {b} % len({a})\nreturn {a}[shift:] + {a}[:shift]",
        "Return {a} rotated left by {b} places ([] for an empty list).",
    ),
    _s(
        "count_equal",
        "list int",
        "return len([x for x in {a} if x == {b}]) + {k}",
        "Count the elements of {a} equal to {b}, plus {k}.",
        k=(0, 1, 2),
    ),
    _s(
        "nth_scaled",
        "list int",
        "if {b} < len({a}):\n    return {a}[{b}] * {k}\nreturn 0",
        "Return the element of {a} at index {b} times {k}, or 0 when {b} is past the end.",
        k=(1, 2, 3),
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


def input_pool(task: RepoTask) -> list[list[Any]]:
    """The input pool of a procedural task's entry point: the grammar's pool for its argument types
    (provenance ``kind``), less the inputs on which the reference raises (as generation leaves them)."""
    pool = _pool(tuple(str(task.meta.provenance["kind"]).split("/")))
    outcomes = _run(task.reference_source, task.meta.entry_point, pool)
    return [args for args, o in zip(pool, outcomes, strict=True) if o.error is None]


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


def _check_fractions(validation_fraction: float, test_fraction: float) -> None:
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must be in (0, 1), got {value}")
    if validation_fraction + test_fraction >= 0.8:
        raise ValueError(
            f"validation_fraction + test_fraction must be below 0.8 (training keeps the rest), got "
            f"{validation_fraction} + {test_fraction}"
        )


def assign_shapes(
    seed: int, validation_fraction: float = 0.2, test_fraction: float = 0.2
) -> dict[str, SplitName]:
    """Each shape's split: a shuffle of the shapes seeded with ``seed``, then ``test`` takes shapes in
    that order until it holds ``test_fraction`` of the grammar's functions, ``validation`` the next ones
    up to ``validation_fraction``, and ``train`` the rest (keyed by shape name, in :data:`SHAPES`
    order). A shape, with every slot assignment of it, is on one side only."""
    _check_fractions(validation_fraction, test_fraction)
    size = {s.name: len(s.instances()) for s in SHAPES}
    order = [s.name for s in SHAPES]
    random.Random(f"procedural-shapes:{seed}").shuffle(order)
    total = sum(size.values())
    chosen: dict[str, SplitName] = {}
    i = 0
    targets: tuple[tuple[SplitName, float], ...] = (
        ("test", test_fraction),
        ("validation", validation_fraction),
    )
    for split, fraction in targets:
        filled = 0
        while i < len(order) and filled < fraction * total:
            chosen[order[i]] = split
            filled += size[order[i]]
            i += 1
    chosen.update({name: "train" for name in order[i:]})
    return {s.name: chosen[s.name] for s in SHAPES}


def _split_sizes(n: int, shapes: dict[str, SplitName]) -> dict[SplitName, int]:
    """Functions drawn per split: ``n`` shared in proportion to the split's functions in the grammar,
    at least one each (``train`` takes what rounding leaves)."""
    size = {s.name: len(s.instances()) for s in SHAPES}
    total = sum(size.values())
    share = {split: sum(size[k] for k, v in shapes.items() if v == split) for split in SPLITS}
    out: dict[SplitName, int] = {
        split: max(1, round(n * share[split] / total)) for split in ("validation", "test")
    }
    out["train"] = n - out["validation"] - out["test"]
    return {split: out[split] for split in SPLITS}


def _draw_functions(
    counts: dict[SplitName, int], shapes: dict[str, SplitName], rng: random.Random
) -> dict[SplitName, list[FunctionSpec]]:
    """Per split, ``counts[split]`` functions of its shapes with distinct (shape, slots); every name is
    distinct across the splits."""
    # Shapes with many slot values would crowd out the others: draw a shape first, then an instance.
    by_shape: dict[str, list[dict[str, Any]]] = {s.name: s.instances() for s in SHAPES}
    for values in by_shape.values():
        rng.shuffle(values)
    names = [f"{v}_{n_}" for v in VERBS for n_ in NOUNS]
    rng.shuffle(names)
    out: dict[SplitName, list[FunctionSpec]] = {}
    used = 0
    for split in SPLITS:
        pool = [s for s in SHAPES if shapes[s.name] == split]
        drawn: list[FunctionSpec] = []
        while len(drawn) < counts[split]:
            live = [s for s in pool if by_shape[s.name]]
            if not live:
                have = sum(len(s.instances()) for s in pool)
                raise ValueError(
                    f"the {split} split's templates have only {have} functions, {counts[split]} asked: "
                    "lower n_functions"
                )
            shape = rng.choice(live)
            slots = by_shape[shape.name].pop()
            arg_names = rng.choice(ARG_NAMES[shape.args])
            drawn.append(FunctionSpec(shape, slots, names[used], arg_names))
            used += 1
        out[split] = drawn
    return out


def _modules(
    functions: list[FunctionSpec], rng: random.Random, names: list[str], first: int
) -> list[tuple[str, list[FunctionSpec]]]:
    """The functions grouped 1-3 per module; module ``k`` (counted from ``first``) is named
    ``names[k]`` (with a number once the names run out), so modules of several calls never clash."""
    out: list[tuple[str, list[FunctionSpec]]] = []
    i = 0
    while i < len(functions):
        size = rng.choice((1, 2, 2, 3))
        k = first + len(out)
        name = names[k % len(names)] + (str(k // len(names) + 1) if k >= len(names) else "")
        out.append((name, functions[i : i + size]))
        i += size
    return out


# ---------------------------------------------------------------------------------------- running


def _run(source: str, fn: str, inputs: list[list[Any]]) -> list[Outcome]:
    """``fn(*args)`` for each input, run here (the grammar has no unbounded loop)."""
    return run_calls(source, [(fn, args) for args in inputs])


def _cover(
    order: list[int], kills: list[set[int]], bounds: tuple[int, int], start: Sequence[int] = ()
) -> list[int]:
    """Inputs (indices, from ``order``): ``start``, then the first of ``order`` up to ``bounds[0] - 1``,
    then greedily the one catching the most uncaught mutants until all are caught or ``bounds[1]`` are
    chosen, then topped up to ``bounds[0]``."""
    chosen = list(start) + [i for i in order if i not in start][: max(0, bounds[0] - 1 - len(start))]
    uncaught = [k for k in kills if k and not k & set(chosen)]
    while uncaught and len(chosen) < bounds[1]:
        rest = [i for i in order if i not in chosen]
        if not rest:
            break
        best = max(rest, key=lambda i: sum(i in k for k in uncaught))
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


def _kills(reference: list[Outcome], source: str, fn: str, inputs: list[list[Any]]) -> set[int]:
    """The inputs on which ``source``'s ``fn`` behaves differently from the reference."""
    outcomes = _run(source, fn, inputs)
    return {i for i, (r, o) in enumerate(zip(reference, outcomes, strict=True)) if not r.same(o)}


@dataclass
class _Tested:
    """A function's chosen tests, the inputs hidden cases are drawn from (in order of preference) and
    the mutants the tests catch."""

    dev: list[int]
    hidden: list[int]
    candidates: list[int]
    kept: list[Mutant]
    adequate: bool  # the hidden cases catch every mutant of the reference that differs on the pool


def _test_function(
    source: str, spec: FunctionSpec, inputs: list[list[Any]], mutants: list[Mutant], rng: random.Random
) -> _Tested:
    """Developer cases (from one half of the pool) that catch the mutants both halves can catch, and
    hidden cases that catch every mutant of the reference that differs from it on the pool (mutation
    adequacy), within the bounds: from the other half first, then the rest of the pool, and a developer
    case only for a mutant that no other input catches."""
    reference = _run(source, spec.name, inputs)
    caught = [_kills(reference, m.buggy, spec.name, inputs) for m in mutants]
    order = list(range(len(inputs)))
    rng.shuffle(order)
    dev_half, hidden_half = order[0::2], order[1::2]
    both = [k & set(dev_half) if k & set(hidden_half) else set() for k in caught]
    dev = _cover(dev_half, both, DEV_CASES)
    # a developer case last: only for a mutant that no other input of the pool catches (a boundary)
    candidates = hidden_half + [i for i in dev_half if i not in dev] + dev
    hidden = _cover(candidates, caught, HIDDEN_CASES)
    adequate = all(k & set(hidden) for k in caught if k)
    kept = [
        m
        for m, k in zip(mutants, caught, strict=True)
        if k & set(dev)
        and k & set(hidden)
        and m.buggy.count(m.after) == 1
        and m.buggy.replace(m.after, m.before, 1) == m.reference
    ]
    return _Tested(dev, hidden, candidates, kept, adequate)


def _task_hidden(
    tested: _Tested, mutant: Mutant, spec: FunctionSpec, inputs: list[list[Any]], reference: list[Outcome]
) -> list[int] | None:
    """The hidden cases of the task ``mutant`` makes: the function's, plus (greedily) cases that catch
    every mutant of the buggy file that differs from the reference on the pool (a wrong one-line patch);
    None when that takes more than the bound."""
    found = mutate(mutant.buggy, spec.name, per_operator=0)
    kills = [
        _kills(reference, m.buggy, spec.name, inputs)
        for f in found
        for m in f.usable
        if m.buggy != mutant.reference
    ]
    hidden = _cover(tested.candidates, kills, HIDDEN_CASES, start=tested.hidden)
    return hidden if all(k & set(hidden) for k in kills if k) else None


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


def _pick(kept: list[Mutant], per_operator: int, rng: random.Random) -> list[Mutant]:
    """At most ``per_operator`` mutants per operator (seeded picks), rarer kinds first."""
    by_op: dict[str, list[Mutant]] = {}
    for m in kept:
        by_op.setdefault(m.operator, []).append(m)
    rank = {op: i for i, op in enumerate(RARE_FIRST)}
    ops = sorted(by_op, key=lambda op: rank.get(op, len(rank)))
    return [m for op in ops for m in rng.sample(by_op[op], min(per_operator, len(by_op[op])))]


def _issue(spec: FunctionSpec, case: TestCase, got: Outcome) -> str:
    call = f"{spec.name}({', '.join(repr(a) for a in case.call_args())})"
    return (
        f"`{spec.name}` returns a wrong result\n\n`{call}` {got.text()} but should return "
        f"`{case.expected!r}`.\n\nWhat `{spec.name}` should do: {spec.description()}\n"
    )


DROP_INADEQUATE: Final = "hidden tests cannot catch every mutant of the fixed or buggy file"
DROP_SHARED_EDIT: Final = "bug edit (abstract) occurs in train"


def _function_tasks(
    module: _Module, spec: FunctionSpec, *, seed: int, split: SplitName, per_operator: int, cap: int
) -> tuple[list[RepoTask], int]:
    """Up to ``cap`` tasks of ``spec``'s bugs, and how many picked bugs were left out because no hidden
    cases within the bound catch every wrong patch (all of them when the fixed file's mutants are not
    all caught)."""
    group = f"procedural/{module.name}.{spec.name}"
    rng = random.Random(f"procedural:{seed}:{group}")
    found = mutate(module.source, spec.name, seed=seed, per_operator=0, key=group)
    mutants = [m for f in found for m in f.usable]
    inputs = module.inputs[spec.name]
    tested = _test_function(module.source, spec, inputs, mutants, rng)
    picked = _pick(tested.kept, per_operator, rng)
    if not tested.adequate:
        return [], min(len(picked), cap)
    reference = _run(module.source, spec.name, inputs)
    dev = [_case(spec.name, inputs[i], reference[i].value) for i in tested.dev]
    others = [
        _case(
            f.name, module.inputs[f.name][0], _run(module.source, f.name, module.inputs[f.name][:1])[0].value
        )
        for f in module.functions
        if f is not spec and module.inputs[f.name]
    ]
    tasks: list[RepoTask] = []
    skipped = 0
    for mutant in picked:
        if len(tasks) == cap:
            break
        hidden = _task_hidden(tested, mutant, spec, inputs, reference)
        if hidden is None:
            skipped += 1
            continue
        pick = len(tasks)
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
                hidden_tests=[_case(spec.name, inputs[i], reference[i].value) for i in hidden],
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
    return tasks, skipped


def _check_counts(n_functions: int, per_operator: int, max_bugs_per_function: int) -> None:
    limit = max_functions()
    if not 3 <= n_functions <= limit:
        raise ValueError(
            f"n_functions must be in 3..{limit} (one function per split at least; the grammar's distinct "
            f"functions at most), got {n_functions}"
        )
    if per_operator < 1 or max_bugs_per_function < 1:
        raise ValueError(
            "per_operator and max_bugs_per_function must be >= 1, "
            f"got {per_operator} and {max_bugs_per_function}"
        )


def procedural_splits(
    n_functions: int = DEFAULT_FUNCTIONS,
    seed: int = 0,
    *,
    validation_fraction: float = 0.2,
    test_fraction: float = 0.2,
    per_operator: int = 1,
    max_bugs_per_function: int = 3,
) -> TaskSplits:
    """Train / validation / test repository tasks from ``n_functions`` generated functions, disjoint by
    template and by abstract bug edit, with mutation-adequate hidden tests (module docstring).

    Raises ``ValueError`` naming the fix for a count, fraction or cap out of range.
    """
    _check_counts(n_functions, per_operator, max_bugs_per_function)
    shapes = assign_shapes(seed, validation_fraction, test_fraction)
    rng = random.Random(f"procedural:{seed}")
    drawn = _draw_functions(_split_sizes(n_functions, shapes), shapes, rng)
    module_names = [f"{d}_{s}" for d in DOMAINS for s in SUFFIXES]
    rng.shuffle(module_names)
    out: dict[SplitName, list[RepoTask]] = {}
    dropped: dict[str, dict[str, int]] = {}
    first = 0
    for split in SPLITS:
        modules = _modules(drawn[split], rng, module_names, first)
        first += len(modules)
        tasks: list[RepoTask] = []
        skipped = 0
        for name, functions in modules:
            module = _build_module(name, functions)
            for spec in functions:
                made, n_skipped = _function_tasks(
                    module, spec, seed=seed, split=split, per_operator=per_operator, cap=max_bugs_per_function
                )
                tasks.extend(made)
                skipped += n_skipped
        reasons = {DROP_INADEQUATE: skipped}
        if split != "train":
            seen = {task_edit(t) for t in out["train"]}
            kept = [t for t in tasks if task_edit(t) not in seen]
            reasons[DROP_SHARED_EDIT] = len(tasks) - len(kept)
            tasks = kept
        out[split] = tasks
        dropped[split] = reasons
    return TaskSplits(out["train"], out["validation"], out["test"], dropped)


def procedural_repo_tasks(
    n_functions: int = DEFAULT_FUNCTIONS,
    seed: int = 0,
    held_out_fraction: float = 0.4,
    *,
    per_operator: int = 1,
    max_bugs_per_function: int = 3,
) -> tuple[list[RepoTask], list[RepoTask]]:
    """(train, held-out): :func:`procedural_splits` with ``held_out_fraction`` shared evenly between
    validation and test, the two joined and labelled ``held-out`` (:meth:`TaskSplits.two_way`; the
    view of ``--tasks procedural``). Experiments that tune settings use :func:`procedural_splits` and
    score validation or test, never both.

    Raises ``ValueError`` naming the fix for a count, fraction or cap out of range.
    """
    if not 0.0 < held_out_fraction < 0.8:
        raise ValueError(f"held_out_fraction must be in (0, 0.8), got {held_out_fraction}")
    splits = procedural_splits(
        n_functions,
        seed,
        validation_fraction=held_out_fraction / 2,
        test_fraction=held_out_fraction / 2,
        per_operator=per_operator,
        max_bugs_per_function=max_bugs_per_function,
    )
    return splits.two_way()


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

"""Synthetic bug injection: mutation operators over ``ast``, one small function each.

Injecting a bug (an off-by-one, say) into a correct function turns it into a repair task, the
synthetic-task recipe of the project's founding design note.

Every operator takes a module's source and the name of its entry-point function and yields
candidate mutated modules (``ast.Module``), one change each. Only the entry-point function's body
is touched: never its docstring, never annotations, never the module's imports or the helper
functions a HumanEval prompt defines next to it.

The reference is ``ast.unparse(ast.parse(source))`` and a mutant is ``ast.unparse(mutated)``, so a
line diff of the two shows exactly the changed line (:class:`Mutant` ``line`` / ``before`` /
``after``). A candidate whose diff is not exactly one line (or that changes nothing, does not
compile, or repeats another candidate) is not used.

The operators (names are the rows of the corpus build's survival table):

``comparison_off_by_one``
    a strict comparison admits its boundary: ``<`` → ``<=``, ``>`` → ``>=``.
``range_off_by_one``
    a ``range(...)`` bound moves by one: the stop (and, with two or more arguments, the start)
    ± 1; ``n - 1`` becomes ``n`` or ``n - 2``, never ``n - 1 + 1``.
``index_off_by_one``
    a subscript index ± 1 (``a[i]`` → ``a[i + 1]``), or a slice bound ± 1 (``a[1:]`` → ``a[2:]``).
``boundary_update``
    an assignment of ``expr ± 1`` loses the ``± 1`` (``low = mid + 1`` → ``low = mid``, the seed
    binary search's bug); also per element of a tuple assignment.
``swap_operator``
    ``+`` ↔ ``-``, ``*`` → ``+`` (in expressions and augmented assignments), ``and`` ↔ ``or``,
    ``==`` ↔ ``!=``, ``<`` ↔ ``>``, ``<=`` ↔ ``>=``, ``in`` ↔ ``not in``, ``is`` ↔ ``is not``.
``drop_equality``
    the equality case of a comparison is lost: ``<=`` → ``<``, ``>=`` → ``>`` (the opposite
    direction of ``comparison_off_by_one``, so the two never produce the same mutant), and an
    ``x == y`` alternative of an ``or`` is dropped (``a < b or a == b`` → ``a < b``).
``remove_guard``
    an ``if`` without ``else`` whose body is a single ``return`` / ``raise`` / ``continue`` /
    ``break`` is deleted (not when it is the only statement of its block). The diff is then a
    deletion; :class:`Mutant` anchors it on the line that now stands where the guard was (or the
    line before, at the end of the module): ``after`` is that line and ``before`` is the guard's
    lines plus it, so replacing ``after`` by ``before`` at ``line`` restores the reference.
``wrong_return``
    a ``return`` gives a wrong value: a comparison / boolean expression / ``all`` / ``any`` /
    ``isinstance`` call ``X`` → ``not X`` (``not X`` → ``X``); constants ``True`` ↔ ``False``,
    ``0`` ↔ ``1``, any other number → ``0``, a non-empty string or list/tuple display → empty,
    an empty string or container display → ``None``.

:func:`mutate` samples at most ``per_operator`` usable candidates per function and operator with
a ``random.Random`` seeded by ``(seed, function key, operator)``: the same seed gives the same
mutants whatever the order in which functions are processed.
"""

from __future__ import annotations

import ast
import copy
import difflib
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OPERATORS",
    "REJECT_COMPILE",
    "REJECT_DUPLICATE",
    "REJECT_NOT_ONE_LINE",
    "REJECT_NO_CHANGE",
    "Mutant",
    "OperatorCandidates",
    "boundary_update",
    "candidates",
    "comparison_off_by_one",
    "drop_equality",
    "index_off_by_one",
    "line_diff",
    "mutate",
    "normalize",
    "range_off_by_one",
    "remove_guard",
    "swap_operator",
    "wrong_return",
]

Site = Callable[[], None]  # applies one mutation to the tree it was found in
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

# Reasons a candidate is not usable (counted per operator, before sampling).
REJECT_NO_CHANGE = "no change"
REJECT_NOT_ONE_LINE = "diff not one line"
REJECT_COMPILE = "does not compile"
REJECT_DUPLICATE = "duplicate of another candidate"

_SKIP_FIELDS = frozenset({"annotation", "returns", "type_comment", "decorator_list"})
_STMT_LIST_FIELDS = ("body", "orelse", "finalbody")
_GUARD_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_BOOL_CALLS = frozenset({"all", "any", "isinstance", "callable", "bool", "hasattr", "issubclass"})


# --------------------------------------------------------------------------- tree helpers


def normalize(source: str) -> str:
    """The reference form of a module: ``ast.unparse(ast.parse(source))``."""
    return ast.unparse(ast.parse(source))


def _entry_function(module: ast.Module, entry_point: str) -> FunctionNode | None:
    """The last top-level definition named entry_point (the one Python would bind)."""
    found = None
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            found = node
    return found


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _body_statements(fn: FunctionNode) -> list[ast.stmt]:
    """The function's statements, without its docstring."""
    return fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else list(fn.body)


def _children(node: ast.AST) -> Iterator[ast.AST]:
    for name, value in ast.iter_fields(node):
        if name in _SKIP_FIELDS:
            continue
        if isinstance(value, list):
            yield from (v for v in value if isinstance(v, ast.AST))
        elif isinstance(value, ast.AST):
            yield value


def _body_nodes(fn: FunctionNode) -> list[ast.AST]:
    """Every node of the function body in a fixed (breadth-first) order; docstrings and annotations
    (of nested definitions too) are left out."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(_body_statements(fn))
    while todo:
        nxt: list[ast.AST] = []
        for node in todo:
            if _is_docstring(node):
                continue
            out.append(node)
            nxt.extend(_children(node))
        todo = nxt
    return out


def _int_value(node: ast.AST) -> int | None:
    """The value of an int literal (not a bool), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_int(node: ast.AST) -> bool:
    return _int_value(node) is not None


def _int_offset(node: ast.expr) -> tuple[ast.expr | None, int] | None:
    """``node`` as (base, k) with node == base + k: constants (base None), ``-c``, ``e + c``, ``e - c``."""
    value = _int_value(node)
    if value is not None:
        return None, value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _int_value(node.operand)
        return None if value is None else (None, -value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        k = _int_value(node.right)
        if k is None:
            return None
        return node.left, k if isinstance(node.op, ast.Add) else -k
    return None


def _shift(node: ast.expr, delta: int) -> ast.expr:
    """``node + delta``, written the way a person would (``n - 1`` + 1 is ``n``, not ``n - 1 + 1``)."""
    parts = _int_offset(node)
    base, k = (node, 0) if parts is None else parts
    k += delta
    if base is None:
        return ast.Constant(k) if k >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-k))
    base = copy.deepcopy(base)
    if k == 0:
        return base
    return ast.BinOp(base, ast.Add() if k > 0 else ast.Sub(), ast.Constant(abs(k)))


def _set_field(node: ast.AST, name: str, value: Any) -> Site:
    def apply() -> None:
        setattr(node, name, value)

    return apply


def _set_item(items: list[Any], index: int, value: Any) -> Site:
    def apply() -> None:
        items[index] = value

    return apply


def _del_item(items: list[Any], index: int) -> Site:
    def apply() -> None:
        del items[index]

    return apply


def _parents(fn: FunctionNode) -> list[tuple[ast.AST, ast.AST, str, int | None]]:
    """(node, parent, field, index in the field's list or None) for every body node."""
    out: list[tuple[ast.AST, ast.AST, str, int | None]] = []
    for parent in [fn, *_body_nodes(fn)]:
        for name, value in ast.iter_fields(parent):
            if name in _SKIP_FIELDS or (parent is fn and name != "body"):
                continue
            if isinstance(value, list):
                out.extend(
                    (v, parent, name, i)
                    for i, v in enumerate(value)
                    if isinstance(v, ast.AST) and not _is_docstring(v)
                )
            elif isinstance(value, ast.AST):
                out.append((value, parent, name, None))
    return out


def _replace(parent: ast.AST, name: str, index: int | None, new: ast.AST) -> Site:
    if index is None:
        return _set_field(parent, name, new)
    return _set_item(getattr(parent, name), index, new)


def _sites_to_modules(
    source: str, entry_point: str, find: Callable[[FunctionNode], list[Site]]
) -> Iterator[ast.Module]:
    """One mutated copy of the module per site ``find`` reports, in site order."""
    module = ast.parse(source)
    fn = _entry_function(module, entry_point)
    if fn is None:
        return
    for k in range(len(find(fn))):
        mutated = copy.deepcopy(module)
        target = _entry_function(mutated, entry_point)
        assert target is not None
        find(target)[k]()
        yield mutated


# --------------------------------------------------------------------------- sites per operator


def _comparison_sites(fn: FunctionNode) -> list[Site]:
    swap: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.LtE, ast.Gt: ast.GtE}
    return [
        _set_item(node.ops, i, swap[type(op)]())
        for node in _body_nodes(fn)
        if isinstance(node, ast.Compare)
        for i, op in enumerate(node.ops)
        if type(op) in swap
    ]


def _range_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for node in _body_nodes(fn):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and 1 <= len(node.args) <= 3
            and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)
        ):
            continue
        positions = [0] if len(node.args) == 1 else [1, 0]  # the stop first
        sites.extend(
            _set_item(node.args, j, _shift(node.args[j], delta)) for j in positions for delta in (1, -1)
        )
    return sites


def _index_like(node: ast.expr) -> bool:
    """An expression that can be an integer index (not a string key, tuple or slice)."""
    if isinstance(node, ast.Constant):
        return _is_int(node)
    return isinstance(node, ast.Name | ast.BinOp | ast.UnaryOp | ast.Call | ast.Attribute | ast.Subscript)


def _index_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for node in _body_nodes(fn):
        if not isinstance(node, ast.Subscript):
            continue
        sl = node.slice
        if isinstance(sl, ast.Slice):
            for bound in ("lower", "upper"):
                value = getattr(sl, bound)
                if value is not None and _index_like(value):
                    sites.extend(_set_field(sl, bound, _shift(value, d)) for d in (1, -1))
        elif _index_like(sl):
            sites.extend(_set_field(node, "slice", _shift(sl, d)) for d in (1, -1))
    return sites


def _drop_one(node: ast.expr) -> ast.expr | None:
    """``e`` for ``e + 1`` / ``e - 1``, else None."""
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add | ast.Sub)
        and _is_int(node.right)
        and isinstance(node.right, ast.Constant)
        and node.right.value == 1
    ):
        return copy.deepcopy(node.left)
    return None


def _boundary_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for node in _body_nodes(fn):
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        value = node.value
        if isinstance(value, ast.Tuple):
            for i, elt in enumerate(value.elts):
                new = _drop_one(elt)
                if new is not None:
                    sites.append(_set_item(value.elts, i, new))
        else:
            new = _drop_one(value)
            if new is not None:
                sites.append(_set_field(node, "value", new))
    return sites


_SWAP_BINOP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
}
_SWAP_CMP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.Gt,
    ast.Gt: ast.Lt,
    ast.LtE: ast.GtE,
    ast.GtE: ast.LtE,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


def _swap_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for node in _body_nodes(fn):
        if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _SWAP_BINOP:
            sites.append(_set_field(node, "op", _SWAP_BINOP[type(node.op)]()))
        elif isinstance(node, ast.BoolOp):
            sites.append(_set_field(node, "op", ast.Or() if isinstance(node.op, ast.And) else ast.And()))
        elif isinstance(node, ast.Compare):
            sites.extend(
                _set_item(node.ops, i, _SWAP_CMP[type(op)]())
                for i, op in enumerate(node.ops)
                if type(op) in _SWAP_CMP
            )
    return sites


def _drop_equality_sites(fn: FunctionNode) -> list[Site]:
    drop: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.LtE: ast.Lt, ast.GtE: ast.Gt}
    sites: list[Site] = []
    for node, parent, name, index in _parents(fn):
        if isinstance(node, ast.Compare):
            sites.extend(
                _set_item(node.ops, i, drop[type(op)]()) for i, op in enumerate(node.ops) if type(op) in drop
            )
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            for i, value in enumerate(node.values):
                if isinstance(value, ast.Compare) and [type(o) for o in value.ops] == [ast.Eq]:
                    rest = [copy.deepcopy(v) for j, v in enumerate(node.values) if j != i]
                    new = rest[0] if len(rest) == 1 else ast.BoolOp(ast.Or(), rest)
                    sites.append(_replace(parent, name, index, new))
    return sites


def _guard_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for owner in [fn, *_body_nodes(fn)]:
        for name in _STMT_LIST_FIELDS:
            stmts = getattr(owner, name, None)
            if not isinstance(stmts, list) or len(stmts) < 2:
                continue
            for i, stmt in enumerate(stmts):
                if (
                    isinstance(stmt, ast.If)
                    and not stmt.orelse
                    and len(stmt.body) == 1
                    and isinstance(stmt.body[0], _GUARD_EXITS)
                ):
                    if owner is fn and len(_body_statements(fn)) < 2:
                        continue  # the guard is the function's only statement
                    sites.append(_del_item(stmts, i))
    return sites


def _is_boolean(node: ast.expr) -> bool:
    if isinstance(node, ast.Compare | ast.BoolOp):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _BOOL_CALLS


def _wrong_value(node: ast.expr) -> ast.expr | None:
    """The wrong value ``wrong_return`` puts in place of a returned ``node`` (None: no rule)."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return ast.Constant(not value)
        if isinstance(value, int | float):
            if value == 0:
                return ast.Constant(type(value)(1))
            return ast.Constant(type(value)(0))
        if isinstance(value, str):
            return ast.Constant("") if value else ast.Constant(None)
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return copy.deepcopy(node.operand)
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        negated = node.operand.value
        if type(negated) is int or type(negated) is float:
            return ast.Constant(type(negated)(0))  # -1 -> 0
    if _is_boolean(node):
        return ast.UnaryOp(ast.Not(), copy.deepcopy(node))
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        if not node.elts:
            return ast.Constant(None)
        return ast.List([], ast.Load()) if isinstance(node, ast.List | ast.Set) else ast.Tuple([], ast.Load())
    if isinstance(node, ast.Dict):
        return ast.Constant(None) if not node.keys else ast.Dict([], [])
    return None


def _wrong_return_sites(fn: FunctionNode) -> list[Site]:
    sites: list[Site] = []
    for node in _body_nodes(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            new = _wrong_value(node.value)
            if new is not None:
                sites.append(_set_field(node, "value", new))
    return sites


# --------------------------------------------------------------------------- operators


def comparison_off_by_one(source: str, entry_point: str) -> Iterator[ast.Module]:
    """``<`` → ``<=``, ``>`` → ``>=``."""
    return _sites_to_modules(source, entry_point, _comparison_sites)


def range_off_by_one(source: str, entry_point: str) -> Iterator[ast.Module]:
    """A ``range(...)`` stop (or start) ± 1."""
    return _sites_to_modules(source, entry_point, _range_sites)


def index_off_by_one(source: str, entry_point: str) -> Iterator[ast.Module]:
    """A subscript index or slice bound ± 1."""
    return _sites_to_modules(source, entry_point, _index_sites)


def boundary_update(source: str, entry_point: str) -> Iterator[ast.Module]:
    """``x = e + 1`` / ``x = e - 1`` → ``x = e`` (``low = mid + 1`` → ``low = mid``)."""
    return _sites_to_modules(source, entry_point, _boundary_sites)


def swap_operator(source: str, entry_point: str) -> Iterator[ast.Module]:
    """``+`` ↔ ``-``, ``*`` → ``+``, ``and`` ↔ ``or``, ``==`` ↔ ``!=`` and the other comparison swaps."""
    return _sites_to_modules(source, entry_point, _swap_sites)


def drop_equality(source: str, entry_point: str) -> Iterator[ast.Module]:
    """``<=`` → ``<``, ``>=`` → ``>``; an ``x == y`` alternative of an ``or`` dropped."""
    return _sites_to_modules(source, entry_point, _drop_equality_sites)


def remove_guard(source: str, entry_point: str) -> Iterator[ast.Module]:
    """Delete an ``if`` (no ``else``) whose body is one return / raise / continue / break."""
    return _sites_to_modules(source, entry_point, _guard_sites)


def wrong_return(source: str, entry_point: str) -> Iterator[ast.Module]:
    """A ``return`` gives a wrong value (``not X``, a flipped constant, an emptied display)."""
    return _sites_to_modules(source, entry_point, _wrong_return_sites)


Operator = Callable[[str, str], Iterator[ast.Module]]
OPERATORS: dict[str, Operator] = {
    "comparison_off_by_one": comparison_off_by_one,
    "range_off_by_one": range_off_by_one,
    "index_off_by_one": index_off_by_one,
    "boundary_update": boundary_update,
    "swap_operator": swap_operator,
    "drop_equality": drop_equality,
    "remove_guard": remove_guard,
    "wrong_return": wrong_return,
}


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Mutant:
    """One usable mutant: the reference, the buggy module and the changed line."""

    operator: str
    site: int  # position among the operator's candidates for this function
    reference: str
    buggy: str
    line: int  # 1-based, in the buggy module
    before: str  # the reference text at that line
    after: str  # the buggy text at that line


@dataclass
class OperatorCandidates:
    """What one operator made of one function: usable candidates, rejections, the sampled ones."""

    operator: str
    usable: list[Mutant] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    picked: list[Mutant] = field(default_factory=list)


def line_diff(reference: str, buggy: str, allow_deletion: bool = False) -> tuple[int, str, str] | None:
    """(line in buggy, before, after) when buggy differs from reference in exactly one line (or, with
    ``allow_deletion``, by one deleted block, anchored as the module docstring describes); else None."""
    ref, bug = reference.splitlines(), buggy.splitlines()
    ops = [
        op for op in difflib.SequenceMatcher(a=ref, b=bug, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if len(ops) != 1:
        return None
    tag, i1, i2, j1, j2 = ops[0]
    if tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1:
        return j1 + 1, ref[i1], bug[j1]
    if tag == "delete" and allow_deletion and bug:
        removed = "\n".join(ref[i1:i2])
        if j1 < len(bug):  # anchor on the line now standing where the block was
            return j1 + 1, removed + "\n" + bug[j1], bug[j1]
        return j1, bug[j1 - 1] + "\n" + removed, bug[j1 - 1]  # at the end: anchor on the line before
    return None


def candidates(
    source: str, entry_point: str, operator: str, exclude: set[str] | None = None
) -> OperatorCandidates:
    """Every usable mutant ``operator`` makes of ``entry_point`` in ``source`` (nothing sampled).

    ``exclude`` holds buggy modules already produced (by earlier operators); repeats are rejected.
    """
    op = OPERATORS[operator]
    reference = normalize(source)
    out = OperatorCandidates(operator)
    seen = set() if exclude is None else exclude
    for site, mutated in enumerate(op(source, entry_point)):
        buggy = ast.unparse(mutated)
        if buggy == reference:
            out.rejected[REJECT_NO_CHANGE] += 1
            continue
        diff = line_diff(reference, buggy, allow_deletion=operator == "remove_guard")
        if diff is None:
            out.rejected[REJECT_NOT_ONE_LINE] += 1
            continue
        try:
            compile(buggy, "<mutant>", "exec")
        except (SyntaxError, ValueError):
            out.rejected[REJECT_COMPILE] += 1
            continue
        if buggy in seen:
            out.rejected[REJECT_DUPLICATE] += 1
            continue
        seen.add(buggy)
        line, before, after = diff
        out.usable.append(Mutant(operator, site, reference, buggy, line, before, after))
    return out


def mutate(
    source: str,
    entry_point: str,
    *,
    seed: int = 0,
    per_operator: int = 2,
    operators: tuple[str, ...] | None = None,
    key: str | None = None,
) -> list[OperatorCandidates]:
    """For each operator (in OPERATORS order): the usable candidates and at most ``per_operator`` of
    them picked by ``random.Random`` seeded with ``(seed, key or entry_point, operator)``.

    A buggy module produced by an earlier operator is a duplicate for later ones.
    """
    if per_operator < 0:
        raise ValueError(f"per_operator must be >= 0, got {per_operator}")
    names = tuple(OPERATORS) if operators is None else operators
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown mutation operator(s) {unknown}; known: {sorted(OPERATORS)}")
    seen: set[str] = set()
    results = []
    for name in names:
        found = candidates(source, entry_point, name, exclude=seen)
        rng = random.Random(f"{seed}:{key or entry_point}:{name}")
        picks = sorted(rng.sample(range(len(found.usable)), min(per_operator, len(found.usable))))
        found.picked = [found.usable[i] for i in picks]
        results.append(found)
    return results

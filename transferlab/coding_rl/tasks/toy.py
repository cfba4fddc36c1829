"""Tiny coding tasks a from-scratch policy can learn on a CPU in minutes.

**Single-step** (:func:`toy_tasks`): each task asks for a one-line function of ``x`` —
``return x + 3``, ``return 7 - x``, ``return max(x, 2)`` — described in words, with five test cases.
The train / held-out split is by (operation, constant), so held-out tasks need the policy to map the
words of an unseen description onto code.

**Imperfect demonstrations** (:func:`noisy_demonstrations`): a demonstrator that writes a plausible
bug (wrong operator, constant off by one) in a given share of its bodies — the way real history
contains mistakes. SFT copies the mistakes; RL against the verifier can remove them. This is what
gives RL headroom over SFT in ``transferlab coding experiment learn``.

**Multi-turn** (:func:`toy_repo_splits`, :func:`toy_repo_tasks`): the same functions as one-file
repositories for `transferlab/CodeRepair-v0` with the wrong operator; the agent must read the source to
know the constant (the issue names only the right operation), edit the line, test and submit
(:func:`toy_repo_plan` is the expert's plan). These repositories split into train / validation / test
by the expert's edit (the operator it writes over the wrong one, :func:`repo_edit`): operations that
share an edit (``sub`` and ``rsub`` both turn ``+`` into ``-``) are on one side, so no validation or
test task is repaired by an edit, verbatim or up to constants and argument names, that a training
task teaches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from transferlab.coding_rl.tasks.code_task import CodeTask, TestCase, task_from_dict
from transferlab.coding_rl.tasks.repo_task import (
    SPLITS,
    BugInfo,
    RepoTask,
    Split,
    SplitName,
    TaskSplits,
    make_repo_task,
)

# name -> (description template with {k}, body template with {k}, python function)
OPERATIONS: dict[str, tuple[str, str, Callable[[int, int], int]]] = {
    "add": ("Return x plus {k}.", "return x + {n}", lambda x, k: x + k),
    "sub": ("Return x minus {k}.", "return x - {n}", lambda x, k: x - k),
    "mul": ("Return x times {k}.", "return x * {n}", lambda x, k: x * k),
    "rsub": ("Return {k} minus x.", "return {n} - x", lambda x, k: k - x),
    "max": ("Return the larger of x and {k}.", "return max(x, {n})", lambda x, k: max(x, k)),
    "min": ("Return the smaller of x and {k}.", "return min(x, {n})", lambda x, k: min(x, k)),
}
BASIC_OPERATIONS = ("add", "sub", "mul")
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
INPUTS = [0, 1, 2, 5, 10]
_WRONG_OPERATOR = {"add": "sub", "sub": "add", "mul": "add", "rsub": "sub", "max": "min", "min": "max"}


def _body(op: str, k: int) -> str:
    return OPERATIONS[op][1].format(n=k)


def toy_task(op: str, k: int) -> CodeTask:
    """`f(x) = <op>(x, k)` with its description, signature and five tests (three public, two hidden)."""
    if op not in OPERATIONS:
        raise ValueError(f"unknown toy operation {op!r}; choose from {sorted(OPERATIONS)}")
    if not 0 <= k <= 9:
        raise ValueError(f"toy constants are 0..9 (they are spelled out in words), got {k}")
    words, _, fn = OPERATIONS[op]
    return task_from_dict(
        {
            "task_id": f"toy/{op}-{k}",
            "task_description": words.format(k=NUMBER_WORDS[k]),
            "function_signature": "def f(x: int) -> int:",
            "test_cases": [{"input": x, "expected": fn(x, k)} for x in INPUTS[:3]],
            "hidden_test_cases": [{"input": x, "expected": fn(x, k)} for x in INPUTS[3:]],
            "time_limit_s": 1.0,
            "provenance": {"source": "toy", "operation": op, "constant": k, "solution": _body(op, k)},
        },
        source=f"toy/{op}-{k}",
    )


def toy_solution(task: CodeTask) -> str:
    """The one-line body that solves a toy task (for SFT demonstrations)."""
    return "    " + str(task.provenance["solution"])


def toy_tasks(
    held_out_fraction: float = 0.25, seed: int = 0, operations: tuple[str, ...] = BASIC_OPERATIONS
) -> tuple[list[CodeTask], list[CodeTask]]:
    """Every (operation, constant 0..9) task, split into (train, held-out) by a seeded shuffle."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    tasks = [toy_task(op, k) for op in operations for k in range(10)]
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(held_out_fraction * len(tasks)))
    held = {order[i] for i in range(n_held)}
    return [t for i, t in enumerate(tasks) if i not in held], [t for i, t in enumerate(tasks) if i in held]


def buggy_body(task: CodeTask, rng: random.Random) -> str:
    """A plausible wrong body that fails a test: the wrong operator, or the constant off by one."""
    op, k = str(task.provenance["operation"]), int(task.provenance["constant"])
    fn = OPERATIONS[op][2]
    candidates = [_body(_WRONG_OPERATOR[op], k), _body(op, (k + 1) % 10), _body(op, (k + 9) % 10)]
    wrong = [b for b in candidates if any(_eval(b, x) != fn(x, k) for x in INPUTS)]
    return "    " + rng.choice(wrong)


def noisy_demonstrations(
    tasks: list[CodeTask], per_task: int, error_rate: float, seed: int
) -> list[tuple[CodeTask, str]]:
    """``per_task`` demonstrations of each task; each is a plausible bug with probability ``error_rate``."""
    if not 0.0 <= error_rate < 1.0:
        raise ValueError(f"error_rate must be in [0, 1), got {error_rate}")
    rng = random.Random(seed)
    return [
        (t, buggy_body(t, rng) if rng.random() < error_rate else toy_solution(t))
        for t in tasks
        for _ in range(per_task)
    ]


# ------------------------------------------------------------------------------------ multi-turn tasks


def _module(body: str) -> str:
    return f"def f(x):\n    {body}\n"


REPO_BUGS: dict[str, tuple[str, str, str]] = {
    "add": ("return x - {n}", "-", "+"),
    "sub": ("return x + {n}", "+", "-"),
    "mul": ("return x + {n}", "+", "*"),
    "rsub": ("return {n} + x", "+", "-"),
    "max": ("return min(x, {n})", "min", "max"),
    "min": ("return max(x, {n})", "max", "min"),
}
"""Per operation: the buggy body, the wrong operator in it (found once in the file) and the right one."""

FIX_HINTS = {
    "add": "it should add its constant to x",
    "sub": "it should subtract its constant from x",
    "mul": "it should multiply x by its constant",
    "rsub": "it should subtract x from its constant",
    "max": "it should return the larger of x and its constant",
    "min": "it should return the smaller of x and its constant",
}
"""The issue names the right operation but not the constant: only reading the source tells it."""


def toy_repo_task(op: str, k: int, split: Split = "train") -> RepoTask:
    """`toy/<op>-<k>` as a repository whose `src/toy.py` uses the wrong operator.

    The issue says what f should do, not what the file says: the expert reads the file first (seed
    000's read-before-write), then edits the wrong operator into the right one (:data:`REPO_BUGS`).
    Raises ``ValueError`` for the few (op, k) whose wrong operator behaves the same (``x + 0``).
    """
    reference = _body(op, k)
    wrong = REPO_BUGS[op][0].format(n=k)
    fn = OPERATIONS[op][2]
    if not has_repo_bug(op, k):
        raise ValueError(f"toy/{op}-{k}: the wrong operator gives the same results; no bug to fix")

    def case(x: int) -> TestCase:
        return TestCase.model_validate({"args": [x], "call": "f", "expected": fn(x, k)})

    dev = [case(x) for x in INPUTS[:3]]
    failing = next((i for i, x in enumerate(INPUTS[:3]) if _eval(wrong, x) != fn(x, k)), 0)
    return make_repo_task(
        task_id=f"toy-repo/{op}-{k}",
        module="toy",
        buggy_source=_module(wrong),
        reference_source=_module(reference),
        entry_point="f",
        dev_tests=dev,
        hidden_tests=[case(x) for x in INPUTS[3:]],
        issue=f"f(x) is wrong: {FIX_HINTS[op]}.",
        group=f"toy/{op}-{k}",
        bug=BugInfo(operator="toy", line=2, before=f"    {reference}", after=f"    {wrong}"),
        split=split,
        time_limit_s=1.0,
        provenance={"source": "toy", "operation": op, "constant": k, "failing_dev_test": failing},
    )


def has_repo_bug(op: str, k: int) -> bool:
    """Whether the wrong operator changes f's results (it does except for ``x + 0`` / ``x - 0``)."""
    wrong, fn = REPO_BUGS[op][0].format(n=k), OPERATIONS[op][2]
    return any(_eval(wrong, x) != fn(x, k) for x in INPUTS)


def _eval(body: str, x: int) -> object:
    namespace: dict[str, object] = {}
    exec(_module(body), namespace)
    return namespace["f"](x)  # type: ignore[operator]


def repo_edit(op: str) -> tuple[str, str]:
    """The expert's edit on ``op``'s repository: (the wrong operator it replaces, the right one)."""
    _, wrong, right = REPO_BUGS[op]
    return wrong, right


def assign_edits(
    seed: int, operations: tuple[str, ...], validation_fraction: float = 0.2, test_fraction: float = 0.2
) -> dict[str, SplitName]:
    """Each operation's split, by its expert edit: the distinct edits (sorted) are shuffled with a
    ``random.Random`` seeded by ``seed``; ``test`` takes the first ``max(1, round(test_fraction x
    edits))``, ``validation`` the next ``max(1, round(validation_fraction x edits))`` (none when only
    two edits exist: train and test keep one each), ``train`` the rest. Raises ``ValueError`` naming
    the fix for unknown operations or fewer than two distinct edits."""
    unknown = sorted(set(operations) - set(OPERATIONS))
    if unknown:
        raise ValueError(f"unknown toy operation(s) {unknown}; choose from {sorted(OPERATIONS)}")
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must be in (0, 1), got {value}")
    edits = sorted({repo_edit(op) for op in operations})
    if len(edits) < 2:
        raise ValueError(
            f"operations {list(operations)} share one expert edit, so no split can keep its edits out of "
            f"training: add an operation with another edit (one of {sorted(OPERATIONS)})"
        )
    random.Random(f"toy-repo-split:{seed}").shuffle(edits)
    n_test = min(len(edits) - 1, max(1, round(test_fraction * len(edits))))
    n_val = min(len(edits) - 1 - n_test, max(1, round(validation_fraction * len(edits))))
    side: dict[tuple[str, str], SplitName] = {}
    for i, edit in enumerate(edits):
        side[edit] = "test" if i < n_test else "validation" if i < n_test + n_val else "train"
    return {op: side[repo_edit(op)] for op in operations}


def toy_repo_splits(
    seed: int = 0,
    operations: tuple[str, ...] = BASIC_OPERATIONS,
    *,
    validation_fraction: float = 0.2,
    test_fraction: float = 0.2,
) -> TaskSplits:
    """The toy functions as CodeRepair-v0 tasks in train / validation / test, split by the expert's edit
    (:func:`assign_edits`; in ``operations`` order, then constant); the (op, k) whose wrong operator
    changes nothing are left out."""
    sides = assign_edits(seed, operations, validation_fraction, test_fraction)
    out: dict[SplitName, list[RepoTask]] = {split: [] for split in SPLITS}
    for op in operations:
        out[sides[op]] += [toy_repo_task(op, k, sides[op]) for k in range(10) if has_repo_bug(op, k)]
    return TaskSplits(out["train"], out["validation"], out["test"])


def toy_repo_tasks(
    held_out_fraction: float = 0.4, seed: int = 0, operations: tuple[str, ...] = BASIC_OPERATIONS
) -> tuple[list[RepoTask], list[RepoTask]]:
    """(train, held-out): :func:`toy_repo_splits` with ``held_out_fraction`` shared evenly between
    validation and test, the two joined and labelled ``held-out`` (:meth:`TaskSplits.two_way`): the
    view of the callers that score every task outside training. No held-out task shares an expert edit
    with training either way."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    splits = toy_repo_splits(
        seed, operations, validation_fraction=held_out_fraction / 2, test_fraction=held_out_fraction / 2
    )
    return splits.two_way()


def call(action: str, **args: str) -> str:
    """One tool call as the JSON text the environment parses."""
    return json.dumps({"action": action, **args})


def toy_repo_plan(task: RepoTask) -> list[str]:
    """The expert's short plan on a toy repository: read the source, swap the operator, test, submit."""
    _, wrong, right = REPO_BUGS[str(task.meta.provenance["operation"])]
    return [
        call("read_file", path=task.meta.source_path),
        call("edit_file", path=task.meta.source_path, old=wrong, new=right),
        call("run_tests", target="all"),
        call("submit"),
    ]

"""Hand-made one-function tasks whose wrong patches and uncaught mutants are worked out by hand."""

from __future__ import annotations

from transferlab.coding_rl.tasks.code_task import TestCase
from transferlab.coding_rl.tasks.novelty import run_calls
from transferlab.coding_rl.tasks.repo_task import BugInfo, RepoTask, make_repo_task


def hand_task(task_id: str, reference: str, buggy: str, dev: list[int], hidden: list[int]) -> RepoTask:
    """A one-function task on ``f(x)``; its cases call the reference for their expected values."""
    expected = run_calls(reference, [("f", [x]) for x in dev + hidden])
    cases = [
        TestCase.model_validate({"args": [x], "call": "f", "expected": e.value})
        for x, e in zip(dev + hidden, expected, strict=True)
    ]
    ref_line, bug_line = reference.splitlines()[1], buggy.splitlines()[1]
    return make_repo_task(
        task_id=task_id,
        module="calc",
        buggy_source=buggy,
        reference_source=reference,
        entry_point="f",
        dev_tests=cases[: len(dev)],
        hidden_tests=cases[len(dev) :],
        issue="f is wrong",
        group=f"hand/{task_id}",
        bug=BugInfo(operator="swap_operator", line=2, before=ref_line, after=bug_line),
    )


REFERENCE = "def f(x):\n    return x * 2 + 1\n"
BUGGY = "def f(x):\n    return x * 2 - 1\n"
POOL = [[0], [1], [2]]

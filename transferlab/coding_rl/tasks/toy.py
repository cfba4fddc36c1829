"""Tiny single-step code tasks a from-scratch policy can learn on a CPU in minutes.

Each task asks for a one-line function of ``x`` — ``return x + 3``, ``return x * 2``, ``return x - 7``
— described in words, with five test cases. The train / held-out split is by (operation, constant),
so held-out tasks need the policy to map the words of an unseen description onto code.
"""

from __future__ import annotations

import random

from transferlab.coding_rl.tasks.code_task import CodeTask, task_from_dict

OPERATIONS: dict[str, tuple[str, str]] = {
    "add": ("plus", "+"),
    "sub": ("minus", "-"),
    "mul": ("times", "*"),
}
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
INPUTS = [0, 1, 2, 5, 10]


def _apply(op: str, x: int, k: int) -> int:
    return x + k if op == "add" else x - k if op == "sub" else x * k


def toy_task(op: str, k: int) -> CodeTask:
    """`f(x) = x <op> k` with its description, signature and five tests."""
    word, symbol = OPERATIONS[op]
    return task_from_dict(
        {
            "task_id": f"toy/{op}-{k}",
            "task_description": f"Return x {word} {NUMBER_WORDS[k]}.",
            "function_signature": "def f(x: int) -> int:",
            "test_cases": [{"input": x, "expected": _apply(op, x, k)} for x in INPUTS[:3]],
            "hidden_test_cases": [{"input": x, "expected": _apply(op, x, k)} for x in INPUTS[3:]],
            "time_limit_s": 1.0,
            "provenance": {
                "source": "toy",
                "operation": op,
                "constant": k,
                "solution": f"return x {symbol} {k}",
            },
        },
        source=f"toy/{op}-{k}",
    )


def toy_solution(task: CodeTask) -> str:
    """The one-line body that solves a toy task (for SFT demonstrations)."""
    return "    " + str(task.provenance["solution"])


def toy_tasks(held_out_fraction: float = 0.25, seed: int = 0) -> tuple[list[CodeTask], list[CodeTask]]:
    """All 30 toy tasks split into (train, held-out) by a seeded shuffle of (operation, constant)."""
    tasks = [toy_task(op, k) for op in OPERATIONS for k in range(10)]
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(held_out_fraction * len(tasks)))
    held = {order[i] for i in range(n_held)}
    return [t for i, t in enumerate(tasks) if i not in held], [t for i, t in enumerate(tasks) if i in held]

"""The expert's line edits: the smallest unique piece of a line, and demonstrations of a failed edit."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from transferlab.coding_rl.agents import line_fix, lines_plan, minimal_edit, recovery_plan
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.corpus import open_verifier
from transferlab.coding_rl.tasks.procedural import procedural_repo_tasks
from transferlab.coding_rl.tasks.repo_task import RepoTask


@pytest.mark.parametrize(
    ("buggy", "fixed", "edit"),
    [
        ("    for i in range(n - 1):", "    for i in range(n):", (" - 1", "")),  # a deletion
        ("    return a == b or a >= b + 7", "    return a == b or a > b + 7", (" >= ", " > ")),
        ("    return xs[0] + xs[-2]", "    return xs[0] + xs[-1]", ("2", "1")),
        # ' + ' occurs twice, so the piece grows left until it is unique
        ("    return name + 3 + '!'", "    return name * 3 + '!'", (" name + ", " name * ")),
        ("    best = values[1]", "    best = values[0]", ("1", "0")),
    ],
)
def test_minimal_edit_by_hand(buggy: str, fixed: str, edit: tuple[str, str]) -> None:
    assert minimal_edit(buggy, fixed) == edit
    old, new = edit
    assert buggy.count(old) == 1 and buggy.replace(old, new) == fixed


def test_minimal_edit_refuses_equal_lines() -> None:
    with pytest.raises(ValueError, match="nothing to edit"):
        minimal_edit("x = 1", "x = 1")


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    with open_verifier(workers=1) as v:
        yield v


@pytest.fixture(scope="module")
def tasks() -> list[RepoTask]:
    train, held = procedural_repo_tasks(40, seed=0, held_out_fraction=0.25)
    return train + held


def test_every_single_line_procedural_bug_has_a_line_fix(tasks: list[RepoTask]) -> None:
    fixes = [line_fix(t) for t in tasks]
    assert all(f is not None for f in fixes)
    for task, (line, old, new) in zip(tasks, fixes, strict=True):
        lines = task.buggy_source.split("\n")
        assert lines[line - 1].count(old) == 1
        lines[line - 1] = lines[line - 1].replace(old, new)
        assert "\n".join(lines) == task.reference_source, task.task_id


def test_a_recovery_demonstration_fails_its_first_edit_then_solves(
    tasks: list[RepoTask], verifier: Verifier
) -> None:
    rng = random.Random(0)
    pairs = [(t, rng.choice(tasks)) for t in tasks[:6]]
    plans = [(t, p) for t, d in pairs if (p := recovery_plan(t, d)) is not None]
    assert plans, "no decoy failed on any task"
    assert recovery_plan(tasks[0], tasks[0]) is None  # its own fix applies: not a failed edit
    env = CodeRepairEnv([t for t, _ in plans], sandbox=verifier.backend, max_steps=5)
    try:
        for task, plan in plans:
            env.reset(options={"task": task.task_id})
            assert plan[2:] == lines_plan(task)[1:]
            infos = [env.step(a)[4] for a in plan]
            assert json.loads(plan[1])["action"] == "edit_file" and not infos[1]["tool_ok"]
            assert all(i["tool_ok"] for i in infos[2:]) and infos[-1]["success"] is True, task.task_id
    finally:
        env.close()

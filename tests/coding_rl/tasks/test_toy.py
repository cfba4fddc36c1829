"""Toy tasks: solutions pass and bugs fail in the real sandbox; seeded splits (the repositories' by expert
edit), noise and expert plans."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from transferlab.coding_rl.sandbox.backends import open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import candidate_source
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.novelty import task_edit
from transferlab.coding_rl.tasks.repo_task import SPLITS
from transferlab.coding_rl.tasks.toy import (
    BASIC_OPERATIONS,
    OPERATIONS,
    assign_edits,
    buggy_body,
    has_repo_bug,
    noisy_demonstrations,
    repo_edit,
    toy_repo_plan,
    toy_repo_splits,
    toy_repo_tasks,
    toy_solution,
    toy_task,
    toy_tasks,
)

ALL_OPS = tuple(OPERATIONS)


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    backend, config, _ = open_backend(SandboxConfig(workers=2))
    yield Verifier(backend, config)
    backend.close()


@pytest.fixture(scope="module")
def every_task() -> list[CodeTask]:
    train, held = toy_tasks(operations=ALL_OPS)
    return train + held


def test_toy_tasks_cover_every_operation_and_constant_once(every_task: list[CodeTask]) -> None:
    assert len(every_task) == 60
    assert {t.task_id for t in every_task} == {f"toy/{op}-{k}" for op in ALL_OPS for k in range(10)}
    add3 = toy_task("add", 3)
    assert add3.task_description == "Return x plus three."
    assert toy_solution(add3) == "    return x + 3"
    assert [c.expected for c in add3.test_cases + add3.hidden_test_cases] == [3, 4, 5, 8, 13]
    assert (len(add3.test_cases), len(add3.hidden_test_cases)) == (3, 2)


def test_every_solution_passes_in_the_sandbox(verifier: Verifier, every_task: list[CodeTask]) -> None:
    grades = verifier.grade_many([(t, candidate_source(t, toy_solution(t))) for t in every_task])
    failed = {t.task_id: g.status for t, g in zip(every_task, grades, strict=True) if g.status != "passed"}
    assert failed == {}
    assert all(g.passed == g.total == 5 for g in grades)


def test_every_buggy_body_fails_a_test_in_the_sandbox(verifier: Verifier, every_task: list[CodeTask]) -> None:
    rng = random.Random(0)
    bodies = sorted({(t.task_id, buggy_body(t, rng)) for t in every_task for _ in range(12)})
    by_id = {t.task_id: t for t in every_task}
    assert len(bodies) > 2 * len(every_task)  # the three kinds of bug (operator, k+1, k-1) all occur
    assert all(body != toy_solution(by_id[tid]) for tid, body in bodies)
    grades = verifier.grade_many([(by_id[tid], candidate_source(by_id[tid], body)) for tid, body in bodies])
    passing = [(tid, body) for (tid, body), g in zip(bodies, grades, strict=True) if g.passed == g.total]
    assert passing == []
    assert all(g.executed for g in grades)  # plausible bugs: they run, they are just wrong


def test_noisy_demonstrations_make_mistakes_at_the_given_rate() -> None:
    train, _ = toy_tasks()
    demos = noisy_demonstrations(train, per_task=20, error_rate=0.3, seed=1)
    assert len(demos) == 20 * len(train)
    assert [t.task_id for t, _ in demos] == [t.task_id for t in train for _ in range(20)]
    wrong = sum(body != toy_solution(t) for t, body in demos)
    assert abs(wrong / len(demos) - 0.3) < 0.05  # 660 draws: the binomial std is 0.018
    assert demos == noisy_demonstrations(train, per_task=20, error_rate=0.3, seed=1)
    assert demos != noisy_demonstrations(train, per_task=20, error_rate=0.3, seed=2)
    assert all(body == toy_solution(t) for t, body in noisy_demonstrations(train, 3, 0.0, seed=1))
    with pytest.raises(ValueError, match=r"error_rate must be in \[0, 1\)"):
        noisy_demonstrations(train, 1, 1.0, seed=0)


def test_toy_task_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown toy operation 'div'"):
        toy_task("div", 1)
    with pytest.raises(ValueError, match=r"0\.\.9"):
        toy_task("add", 10)
    with pytest.raises(ValueError, match="held_out_fraction"):
        toy_tasks(held_out_fraction=1.0)


def test_splits_are_seeded_and_disjoint() -> None:
    train, held = toy_tasks(seed=3)
    again = toy_tasks(seed=3)
    other = toy_tasks(seed=4)
    assert [t.task_id for t in train] == [t.task_id for t in again[0]]
    assert {t.task_id for t in held} != {t.task_id for t in other[1]}
    assert (len(train), len(held)) == (22, 8) and not {t.task_id for t in train} & {t.task_id for t in held}
    assert {str(t.provenance["operation"]) for t in train + held} == set(BASIC_OPERATIONS)


@pytest.mark.parametrize("operations", [ALL_OPS, BASIC_OPERATIONS], ids=["all", "basic"])
def test_toy_repo_splits_keep_every_expert_edit_out_of_training(operations: tuple[str, ...]) -> None:
    every = {f"toy-repo/{op}-{k}" for op in operations for k in range(10) if has_repo_bug(op, k)}
    sides = []
    for seed in range(4):
        splits = toy_repo_splits(seed, operations)
        assert splits == toy_repo_splits(seed, operations)  # seeded
        ids = [t.task_id for s in SPLITS for t in splits.of(s)]
        assert sorted(ids) == sorted(every)  # each task once
        for split in SPLITS:
            assert {t.meta.split for t in splits.of(split)} == {split}
        assert splits.validation and splits.test
        edits = {repo_edit(str(t.meta.provenance["operation"])) for t in splits.train}
        abstract = {task_edit(t) for t in splits.train}
        for task in splits.validation + splits.test:
            assert repo_edit(str(task.meta.provenance["operation"])) not in edits, task.task_id  # verbatim
            assert task_edit(task) not in abstract, task.task_id  # up to constants and names
        sides.append(assign_edits(seed, operations))
    assert len({tuple(sorted(s.items())) for s in sides}) > 1  # the seed moves the split
    assert all(s["sub"] == s["rsub"] for s in sides if "rsub" in s)  # both write '-' over '+'


def test_two_edits_leave_validation_empty_and_one_edit_is_an_error() -> None:
    splits = toy_repo_splits(0, ("add", "sub"))
    assert splits.train and splits.test and not splits.validation
    with pytest.raises(ValueError, match="share one expert edit"):
        toy_repo_splits(0, ("sub", "rsub"))
    with pytest.raises(ValueError, match="unknown toy operation"):
        toy_repo_splits(0, ("add", "pow"))


def test_held_out_toy_repo_tasks_are_validation_and_test_marked_held_out() -> None:
    train, held = toy_repo_tasks(0.25, seed=5)
    splits = toy_repo_splits(5, validation_fraction=0.125, test_fraction=0.125)
    assert train == splits.train and {t.meta.split for t in train} == {"train"}
    assert [t.task_id for t in held] == [t.task_id for t in splits.validation + splits.test]
    assert {t.meta.split for t in held} == {"held-out"}


def test_toy_repo_reference_passes_and_the_buggy_source_fails(verifier: Verifier) -> None:
    train, held = toy_repo_tasks(operations=ALL_OPS)
    tasks = train + held
    assert len(tasks) == 58  # add-0 and sub-0 have no operator bug
    items = [(t.code_task("all"), src) for t in tasks for src in (t.reference_source, t.buggy_source)]
    grades = verifier.grade_many(items)
    for i, task in enumerate(tasks):
        reference, buggy = grades[2 * i], grades[2 * i + 1]
        assert reference.status == "passed" and reference.passed == reference.total == 5, task.task_id
        assert buggy.executed and buggy.passed < buggy.total, task.task_id
        failing = task.meta.provenance["failing_dev_test"]
        dev_fails = [k for k, outcome in enumerate(buggy.tests[:3]) if outcome.status != "passed"]
        assert failing == (dev_fails[0] if dev_fails else 0), task.task_id


def test_toy_repo_plan_swaps_exactly_the_wrong_operator() -> None:
    train, held = toy_repo_tasks(operations=ALL_OPS)
    for task in train + held:
        read, edit, run, submit = (json.loads(a) for a in toy_repo_plan(task))
        path = task.meta.source_path
        assert read == {"action": "read_file", "path": path}
        assert run == {"action": "run_tests", "target": "all"}
        assert submit == {"action": "submit"}
        assert edit["action"] == "edit_file" and edit["path"] == path
        buggy_lines = task.buggy_source.splitlines()
        reference_lines = task.reference_source.splitlines()
        line = task.meta.bug.line - 1
        assert edit["old"] in buggy_lines[line] and edit["new"] in reference_lines[line]
        assert edit["old"] not in task.meta.issue  # the issue names the right operation, never the bug
        assert task.buggy_source.count(edit["old"]) == 1
        assert task.buggy_source.replace(edit["old"], edit["new"]) == task.reference_source
        assert [i for i, (a, b) in enumerate(zip(buggy_lines, reference_lines, strict=True)) if a != b] == [
            line
        ]

"""Procedural repository tasks: deterministic; train / validation / test disjoint by template, bug edit,
function and module; mutation-adequate hidden tests; valid in the real sandbox, solved by the scripted
expert in CodeRepair-v0, and small enough for a tiny policy's context."""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Iterator
from collections.abc import Set as AbstractSet

import pytest

from transferlab.coding_rl.agents import PLANS, expert_plan
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.corpus import open_verifier
from transferlab.coding_rl.tasks.mutations import OPERATORS
from transferlab.coding_rl.tasks.novelty import task_edit, uncaught_mutants, wrong_patches
from transferlab.coding_rl.tasks.procedural import (
    DOMAINS,
    DROP_INADEQUATE,
    DROP_SHARED_EDIT,
    SHAPES,
    SUFFIXES,
    assign_shapes,
    bug_kinds,
    input_pool,
    max_functions,
    procedural_repo_tasks,
    procedural_splits,
    renamed,
    task_names,
)
from transferlab.coding_rl.tasks.repo_task import SPLITS, RepoTask, TaskSplits
from transferlab.coding_rl.tasks.validate import CHECKS, validate_tasks


@pytest.fixture(scope="module")
def default() -> TaskSplits:
    return procedural_splits()


@pytest.fixture(scope="module")
def preset() -> TaskSplits:
    """The agent-learn cpu preset's tasks."""
    from transferlab.coding_rl.experiments.agent_learn import task_splits
    from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS

    return task_splits(AGENT_LEARN_PRESETS["cpu"])


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    with open_verifier(workers=2) as v:
        yield v


def _sample(tasks: list[RepoTask], k: int, seed: int) -> list[RepoTask]:
    return random.Random(seed).sample(tasks, k)


class _Canonical(ast.NodeTransformer):
    """A function with its name and arguments renamed to f, arg0, arg1 (the computation only)."""

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.names = {a.arg: f"arg{i}" for i, a in enumerate(fn.args.args)}

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.names.get(node.id, node.id), node.ctx)

    def visit_arg(self, node: ast.arg) -> ast.arg:
        return ast.arg(self.names.get(node.arg, node.arg))


def _functions(task: RepoTask) -> tuple[set[str], set[str]]:
    """(names, canonical bodies) of every function in the task's reference module."""
    defs = [n for n in ast.parse(task.reference_source).body if isinstance(n, ast.FunctionDef)]
    bodies = set()
    for fn in defs:
        canonical = _Canonical(fn).visit(ast.parse(ast.unparse(fn)).body[0])
        canonical.name = "f"
        bodies.add(ast.unparse(canonical))
    return {fn.name for fn in defs}, bodies


def test_same_seed_same_tasks_and_another_seed_others() -> None:
    first, again, other = (procedural_splits(40, seed=s) for s in (3, 3, 4))
    assert first == again
    assert [t.task_id for t in first.train] != [t.task_id for t in other.train]
    assert assign_shapes(3) == assign_shapes(3) != assign_shapes(4)


def test_assign_shapes_puts_each_shape_on_one_side_in_proportion() -> None:
    sides = assign_shapes(0, validation_fraction=0.2, test_fraction=0.25)
    assert list(sides) == [s.name for s in SHAPES]
    size = {s.name: len(s.instances()) for s in SHAPES}
    total, largest = sum(size.values()), max(size.values())
    share = {split: sum(size[k] for k, v in sides.items() if v == split) / total for split in SPLITS}
    assert 0.25 <= share["test"] < 0.25 + largest / total  # whole shapes, until the share is reached
    assert 0.2 <= share["validation"] < 0.2 + largest / total
    assert share["train"] > 0.4


def _disjoint(a: AbstractSet[object], b: AbstractSet[object]) -> bool:
    return bool(a) and bool(b) and not a & b


def test_the_splits_share_no_template_edit_function_or_module(default: TaskSplits) -> None:
    for split in SPLITS:
        assert {t.meta.split for t in default.of(split)} == {split}
    sides = [default.of(s) for s in SPLITS]
    for i, j in ((0, 1), (0, 2), (1, 2)):
        a, b = sides[i], sides[j]
        assert _disjoint({t.meta.group for t in a}, {t.meta.group for t in b})
        assert _disjoint({t.meta.source_path for t in a}, {t.meta.source_path for t in b})
        assert _disjoint({t.meta.provenance["shape"] for t in a}, {t.meta.provenance["shape"] for t in b})
        names = [set().union(*(_functions(t)[0] for t in side)) for side in (a, b)]
        bodies = [set().union(*(_functions(t)[1] for t in side)) for side in (a, b)]
        assert _disjoint(names[0], names[1])
        assert _disjoint(bodies[0], bodies[1])  # not even under other names
    seen = {task_edit(t) for t in default.train}
    for split in ("validation", "test"):
        assert not {task_edit(t) for t in default.of(split)} & seen, split  # up to constants and names
        assert default.dropped[split][DROP_SHARED_EDIT] > 0  # the rule had work to do


def test_the_preset_size_gives_a_test_split_of_120_disjoint_tasks(preset: TaskSplits) -> None:
    assert len(preset.test) >= 120 and len(preset.validation) >= 120
    train_shapes = {t.meta.provenance["shape"] for t in preset.train}
    train_edits = {task_edit(t) for t in preset.train}
    for split in ("validation", "test"):
        assert not {t.meta.provenance["shape"] for t in preset.of(split)} & train_shapes
        assert not {task_edit(t) for t in preset.of(split)} & train_edits


def test_counts_kinds_and_sizes_at_the_defaults(default: TaskSplits) -> None:
    every = default.train + default.validation + default.test
    assert len(default.train) >= 250 and len(default.validation) >= 75 and len(default.test) >= 75
    assert len({t.task_id for t in every}) == len(every)
    groups = {t.meta.group for t in every}
    for split in ("validation", "test"):
        share = len({t.meta.group for t in default.of(split)}) / len(groups)
        assert 0.12 < share < 0.3, split  # about a fifth of the functions each
    kinds = bug_kinds(every)
    assert set(kinds) == set(OPERATORS)  # every operator makes some task
    assert max(kinds.values()) < 0.5 * len(every)
    assert all(len(t.buggy_source.splitlines()) <= 25 and len(t.files) == 2 for t in every)
    assert len({t.meta.source_path for t in every}) > 100


def test_every_task_is_fixed_by_one_line_and_tested_enough(default: TaskSplits) -> None:
    for task in default.train + default.validation + default.test:
        bug, buggy, ref = task.meta.bug, task.buggy_source, task.reference_source
        assert buggy.count(bug.after) == 1 and buggy.replace(bug.after, bug.before, 1) == ref, task.task_id
        own = [c for c in task.dev_tests if c.call == task.meta.entry_point]
        assert len(own) >= 4 and 3 <= len(task.hidden_tests) <= 12, task.task_id
        failing = task.meta.provenance["failing_dev_test"]
        call = f"{task.meta.entry_point}({', '.join(repr(a) for a in task.dev_tests[failing].call_args())})"
        assert call in task.meta.issue, task.task_id


def test_hidden_tests_are_mutation_adequate_on_a_small_generation() -> None:
    splits = procedural_splits(40, seed=1)
    every = splits.train + splits.validation + splits.test
    assert len(every) > 60
    for task in every:
        pool = input_pool(task)
        assert wrong_patches(task, pool) == [], task.task_id  # no wrong one-line patch passes
        assert uncaught_mutants(task, pool) == [], task.task_id  # hidden tests catch every mutant
    assert all(DROP_INADEQUATE in splits.dropped[s] for s in SPLITS)  # counted, even when 0


def test_the_two_way_view_joins_validation_and_test_as_held_out() -> None:
    splits = procedural_splits(40, seed=3, validation_fraction=0.15, test_fraction=0.15)
    train, held = procedural_repo_tasks(40, seed=3, held_out_fraction=0.3)
    assert train == splits.train
    assert [t.task_id for t in held] == [t.task_id for t in splits.validation + splits.test]
    assert {t.meta.split for t in held} == {"held-out"}


def test_a_sample_is_valid_in_the_sandbox(default: TaskSplits, verifier: Verifier) -> None:
    sample = _sample(default.train, 12, seed=0) + _sample(default.validation, 4, seed=0)
    sample += _sample(default.test, 4, seed=0)
    results = validate_tasks(sample, verifier, reruns=3)
    failed = {r.task_id: r.failed_checks() for r in results if not r.ok}
    assert failed == {}
    assert all(set(r.checks) == set(CHECKS) for r in results)


def test_the_expert_solves_a_sample_in_code_repair(default: TaskSplits, verifier: Verifier) -> None:
    sample = _sample(default.train, 4, seed=1) + _sample(default.validation, 1, seed=1)
    sample += _sample(default.test, 1, seed=1)
    env = CodeRepairEnv(sample, sandbox=verifier.backend, max_steps=7)
    try:
        for task in sample:
            env.reset(options={"task": task.task_id})
            plan = expert_plan(task)
            assert json.loads(plan[3])["action"] == "edit_file"  # the one-line fix, not a rewrite
            for action in plan:
                _, _, terminated, truncated, info = env.step(action)
                assert info["tool_ok"], (task.task_id, action)
            assert terminated and not truncated and info["success"] is True, task.task_id
            failing_run = json.loads(plan[4])["target"]
            assert failing_run.endswith(f"::test_{task.meta.provenance['failing_dev_test']}")
    finally:
        env.close()


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match=rf"n_functions must be in 3\.\.{max_functions()}"):
        procedural_splits(2)
    with pytest.raises(ValueError, match="test_fraction must be in"):
        procedural_splits(10, test_fraction=0.0)
    with pytest.raises(ValueError, match=r"validation_fraction \+ test_fraction must be below 0\.8"):
        procedural_splits(10, validation_fraction=0.4, test_fraction=0.4)
    with pytest.raises(ValueError, match="held_out_fraction must be in"):
        procedural_repo_tasks(10, held_out_fraction=0.0)
    with pytest.raises(ValueError, match="max_bugs_per_function must be >= 1"):
        procedural_splits(10, max_bugs_per_function=0)


def test_renamed_copies_are_valid_take_no_held_out_name_and_change_every_name(
    default: TaskSplits, verifier: Verifier
) -> None:
    train = default.train
    avoid = task_names(default.validation + default.test)
    sample = _sample(train, 8, seed=2)
    copies = [renamed(t, random.Random(i), avoid) for i, t in enumerate(sample)]
    for task, copy in zip(sample, copies, strict=True):
        old_names, old_bodies = _functions(task)
        new_names, new_bodies = _functions(copy)
        assert new_bodies == old_bodies  # the same computations
        assert not new_names & old_names and not new_names & avoid
        assert copy.meta.source_path != task.meta.source_path
        assert copy.meta.group == task.meta.group and copy.meta.split == "train"
        assert copy.meta.bug.operator == task.meta.bug.operator
        assert copy.meta.entry_point in copy.meta.issue and task.meta.entry_point not in copy.meta.issue
    # the copies are real tasks: the sandbox validates them and the expert fixes them
    results = validate_tasks(copies, verifier, reruns=1)
    assert {r.task_id: r.failed_checks() for r in results if not r.ok} == {}
    env = CodeRepairEnv(copies, sandbox=verifier.backend, max_steps=7)
    try:
        for task in copies:
            env.reset(options={"task": task.task_id})
            for action in expert_plan(task):
                _, _, terminated, _, info = env.step(action)
            assert terminated and info["success"] is True, task.task_id
    finally:
        env.close()


def test_renamed_is_seeded_and_refuses_when_no_name_is_free(default: TaskSplits) -> None:
    task = default.train[0]
    assert renamed(task, random.Random(5)) == renamed(task, random.Random(5))
    everything = frozenset(f"{d}_{s}" for d in DOMAINS for s in SUFFIXES)
    with pytest.raises(ValueError, match="no free names"):
        renamed(task, random.Random(0), everything)


WORKFLOWS = {
    "direct": ["search_code", "read_file", "edit_file", "run_tests", "submit"],
    "short": ["read_file", "edit_file", "run_tests", "submit"],
    "lines": ["read_file", "edit_file", "run_tests", "submit"],
}


@pytest.mark.parametrize("workflow", sorted(WORKFLOWS))
def test_the_short_workflows_read_before_they_write_test_and_solve(
    default: TaskSplits, verifier: Verifier, workflow: str
) -> None:
    sample = _sample(default.train, 3, seed=3) + _sample(default.test, 2, seed=3)
    env = CodeRepairEnv(sample, sandbox=verifier.backend, max_steps=5)
    try:
        for task in sample:
            env.reset(options={"task": task.task_id})
            plan = PLANS[workflow](task)
            assert [json.loads(a)["action"] for a in plan] == WORKFLOWS[workflow]
            events: set[str] = set()
            for action in plan:
                _, _, terminated, _, info = env.step(action)
                assert info["tool_ok"], (task.task_id, action)
                events |= {k for k, v in info["components"].items() if v}
            assert terminated and info["success"] is True, task.task_id
            assert {"read_before_write", "test_after_modify"} <= events
    finally:
        env.close()

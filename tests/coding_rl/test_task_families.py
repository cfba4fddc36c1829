"""What ``--tasks`` / ``--split`` resolve to: the built-in families, a corpus directory, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from transferlab.coding_rl.task_families import TaskFamilyError, resolve_tasks
from transferlab.coding_rl.tasks.repo_task import save_repo_task
from transferlab.coding_rl.tasks.seed_repos import binary_search_task, calculator_task


def test_toy_is_single_step_and_splits_by_operation_and_constant() -> None:
    train, held = resolve_tasks("toy", "train"), resolve_tasks("toy", "held-out")
    assert train.mode == held.mode == "code"
    assert train.tasks and held.tasks
    assert not set(train.task_ids) & set(held.task_ids)
    assert len(train.tasks) + len(held.tasks) == 60  # six operations x constants 0..9


def test_toy_repos_and_seed_are_agent_tasks_with_expert_plans() -> None:
    repos = resolve_tasks("toy-repos", "held-out")
    assert repos.mode == "agent" and all(t.meta.split == "held-out" for t in repos.tasks)
    assert repos.max_plan_steps() == 4  # read, edit, test, submit
    seed = resolve_tasks("seed", "train")
    assert seed.task_ids == ["seed-calculator", "seed-binary_search", "seed-quick_sort"]
    assert seed.max_plan_steps() == 7


def test_procedural_is_agent_tasks_split_by_function_with_expert_plans() -> None:
    train, held = resolve_tasks("procedural", "train"), resolve_tasks("procedural", "held-out")
    assert train.mode == held.mode == "agent"
    assert len(train.tasks) >= 300 and held.tasks
    assert {t.meta.split for t in held.tasks} == {"held-out"}
    assert not {t.meta.group for t in train.tasks} & {t.meta.group for t in held.tasks}
    assert held.max_plan_steps() == 7  # the scripted expert's read, search, read, edit, test, test, submit


def test_a_corpus_directory_splits_by_each_tasks_split(tmp_path: Path) -> None:
    save_repo_task(calculator_task(), tmp_path)
    save_repo_task(binary_search_task().model_copy(update={"meta": _held_out_meta()}), tmp_path)
    assert resolve_tasks(str(tmp_path), "train").task_ids == ["seed-calculator"]
    assert resolve_tasks(str(tmp_path), "held-out").task_ids == ["seed-binary_search"]


def _held_out_meta() -> object:
    return binary_search_task().meta.model_copy(update={"split": "held-out"})


@pytest.mark.parametrize(
    ("spec", "split", "needle"),
    [
        ("toys", "train", "neither a built-in family nor a directory"),
        ("toy", "test", "--split 'test' does not exist"),
        ("seed", "held-out", "--split train"),
    ],
)
def test_bad_specs_name_the_fix(spec: str, split: str, needle: str) -> None:
    with pytest.raises(TaskFamilyError) as info:
        resolve_tasks(spec, split)
    assert needle in str(info.value)


def test_an_empty_directory_is_not_a_corpus(tmp_path: Path) -> None:
    with pytest.raises(TaskFamilyError, match="holds no task"):
        resolve_tasks(str(tmp_path), "train")


def test_code_demonstrations_need_no_sandbox(tok: object) -> None:
    toy = resolve_tasks("toy", "train")
    demos = toy.demonstrations(tok)
    assert len(demos) == len(toy.tasks)
    assert all(d.steps[0].action_ids for d in demos)

"""The repository task directory format: save / load round trip and clear errors for malformed dirs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from transferlab.coding_rl.tasks.code_task import TaskError, TestCase
from transferlab.coding_rl.tasks.repo_task import (
    BugInfo,
    RepoTask,
    TaskSplits,
    load_corpus,
    load_repo_task,
    make_repo_task,
    save_repo_task,
)
from transferlab.coding_rl.tasks.seed_repos import calculator_task

BUGGY = "def add_one(x):\n    return x + 2\n"
FIXED = "def add_one(x):\n    return x + 1\n"


def small_task(task_id: str = "demo-add_one", split: str = "train") -> RepoTask:
    cases = [TestCase.model_validate({"input": i, "expected": i + 1}) for i in range(6)]
    return make_repo_task(
        task_id=task_id,
        module="add_one",
        buggy_source=BUGGY,
        reference_source=FIXED,
        entry_point="add_one",
        dev_tests=cases[:4],
        hidden_tests=cases[4:],
        issue="add_one(1) returns 3, should be 2",
        group="demo/add_one",
        split=split,  # type: ignore[arg-type]
        bug=BugInfo(operator="human", line=2, before="    return x + 1", after="    return x + 2"),
        provenance={"source": "hand-written"},
    )


def test_round_trip(tmp_path: Path) -> None:
    task = small_task()
    path = save_repo_task(task, tmp_path)
    assert path == tmp_path / task.task_id
    for rel in (
        "task.json",
        "repo/src/add_one.py",
        "repo/tests/test_add_one.py",
        "tests/dev.json",
        "tests/hidden.json",
        "reference/src/add_one.py",
    ):
        assert (path / rel).is_file(), rel
    loaded = load_repo_task(path)
    assert loaded == task
    assert loaded.buggy_source == BUGGY
    assert loaded.test_paths() == ["tests/test_add_one.py"]
    assert "add_one(0) == 1" in loaded.files["tests/test_add_one.py"]
    # hidden tests and the reference stay out of the agent's working copy
    assert not any("hidden" in p or "reference" in p for p in loaded.files)


def test_round_trip_with_call_and_raises(tmp_path: Path) -> None:
    task = calculator_task()
    loaded = load_repo_task(save_repo_task(task, tmp_path))
    assert loaded == task
    assert {c.call for c in loaded.dev_tests} == {"add", "subtract", "multiply", "divide"}
    assert any(c.raises == "ValueError" for c in loaded.hidden_tests)


def test_save_replaces_an_existing_task(tmp_path: Path) -> None:
    save_repo_task(small_task(), tmp_path)
    changed = small_task()
    changed.meta.issue = "new issue text"
    save_repo_task(changed, tmp_path)
    assert load_repo_task(tmp_path / changed.task_id).meta.issue == "new issue text"
    assert [p.name for p in tmp_path.iterdir()] == [changed.task_id]  # no temp dirs left behind


def test_load_corpus_filters_by_split(tmp_path: Path) -> None:
    save_repo_task(small_task("a-task", "train"), tmp_path)
    save_repo_task(small_task("b-task", "held-out"), tmp_path)
    assert [t.task_id for t in load_corpus(tmp_path)] == ["a-task", "b-task"]
    assert [t.task_id for t in load_corpus(tmp_path, "held-out")] == ["b-task"]


def test_three_way_splits_round_trip_next_to_old_held_out_tasks(tmp_path: Path) -> None:
    for task_id, split in (("a", "train"), ("b", "validation"), ("c", "test"), ("d", "held-out")):
        save_repo_task(small_task(task_id, split), tmp_path)
    assert [t.task_id for t in load_corpus(tmp_path, "validation")] == ["b"]
    assert [t.task_id for t in load_corpus(tmp_path, "test")] == ["c"]
    assert [t.task_id for t in load_corpus(tmp_path, "held-out")] == ["d"]  # corpora written before
    path = save_repo_task(small_task("e", "train"), tmp_path)
    (path / "task.json").write_text((path / "task.json").read_text().replace('"train"', '"heldout"'))
    with pytest.raises(TaskError, match="split"):
        load_repo_task(path)


def test_task_splits_count_and_join_validation_and_test_as_held_out() -> None:
    splits = TaskSplits(
        train=[small_task("a", "train")],
        validation=[small_task("b", "validation")],
        test=[small_task("c", "test"), small_task("d", "test")],
    )
    assert splits.counts() == {"train": 1, "validation": 1, "test": 2}
    assert splits.of("test") == splits.test
    train, held = splits.two_way()
    assert train == splits.train
    assert [t.task_id for t in held] == ["b", "c", "d"]
    assert {t.meta.split for t in held} == {"held-out"}
    assert splits.validation[0].meta.split == "validation"  # copies: the splits are left as they were


@pytest.mark.parametrize(
    "missing",
    ["task.json", "tests/hidden.json", "tests/dev.json", "reference/src/add_one.py", "repo/src/add_one.py"],
)
def test_malformed_dir_names_the_missing_file(tmp_path: Path, missing: str) -> None:
    path = save_repo_task(small_task(), tmp_path)
    target = path / missing
    target.unlink()
    with pytest.raises(TaskError) as err:
        load_repo_task(path)
    name = Path(missing).name if missing != "repo/src/add_one.py" else "src/add_one.py"
    assert name in str(err.value)


def test_malformed_task_json(tmp_path: Path) -> None:
    path = save_repo_task(small_task(), tmp_path)
    (path / "task.json").write_text('{"task_id": "x"}', encoding="utf-8")
    with pytest.raises(TaskError, match=r"task\.json"):
        load_repo_task(path)
    shutil.rmtree(path)
    with pytest.raises(TaskError, match=r"task\.json is missing"):
        load_repo_task(path)

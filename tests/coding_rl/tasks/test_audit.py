"""The novelty and mutation-adequacy audit: zero on the generated families, and every must-be-0 figure
reported when a hand-made split breaks it."""

from __future__ import annotations

import json

from transferlab.coding_rl.tasks.audit import audit_family, audit_procedural, audit_toy, markdown
from transferlab.coding_rl.tasks.procedural import procedural_splits
from transferlab.coding_rl.tasks.repo_task import RepoTask, TaskSplits
from transferlab.coding_rl.tasks.toy import BASIC_OPERATIONS, OPERATIONS, toy_repo_splits

from .conftest import BUGGY, POOL, REFERENCE, hand_task


def test_a_small_procedural_generation_passes_and_matches_its_splits() -> None:
    audit = audit_procedural(30, 2)
    assert audit.failures() == []
    assert {k: v.tasks for k, v in audit.splits.items()} == procedural_splits(30, 2).counts()
    assert audit.splits["train"].shared_templates is None  # novelty is measured off train
    assert audit.splits["test"].shared_edits == 0 and audit.splits["test"].templates > 0
    data = json.loads(json.dumps(audit.to_json()))
    assert data["ok"] is True and data["settings"]["n_functions"] == 30
    assert set(data["splits"]) == {"train", "validation", "test"}


def test_the_toy_repositories_pass_for_every_operation_set_and_seed() -> None:
    for operations in (tuple(sorted(OPERATIONS)), BASIC_OPERATIONS, ("add", "sub")):
        for seed in (0, 1, 2):
            audit = audit_toy(seed, operations)
            assert audit.failures() == [], (operations, seed)
            assert {k: v.tasks for k, v in audit.splits.items()} == toy_repo_splits(seed, operations).counts()


def _group(t: RepoTask) -> str:
    return t.meta.group.removesuffix("-copy")


def test_a_split_that_breaks_the_rules_is_reported_figure_by_figure() -> None:
    thin = hand_task("thin", REFERENCE, BUGGY, [0], [0])  # a wrong patch passes (test_novelty)
    copy = thin.model_copy(update={"meta": thin.meta.model_copy(update={"group": "hand/thin-copy"})})
    clean = hand_task("clean", "def f(x):\n    return x - 4\n", "def f(x):\n    return x + 4\n", [0], [1, 5])
    splits = TaskSplits(train=[thin], validation=[copy], test=[clean])
    audit = audit_family(
        "hand",
        splits,
        template=_group,
        expert_edit=lambda t: (t.meta.bug.before, t.meta.bug.after),
        inputs=lambda t: POOL,
        settings={"what": "hand-made"},
    )
    assert audit.failures() == [
        "hand train: wrong_patches = 1",
        "hand validation: shared_templates = 1",
        "hand validation: shared_edits = 1",
        "hand validation: shared_expert_edits = 1",
        "hand validation: wrong_patches = 1",
    ]
    test = audit.splits["test"]
    assert (test.tasks, test.shared_templates, test.shared_edits, test.wrong_patches) == (1, 0, 0, 0)
    assert audit.to_json()["ok"] is False
    table = markdown(audit).splitlines()
    assert table[2] == "| train | 1 | 1 | - | - | - | 1 | 0 |"
    assert table[3] == "| validation | 1 | 1 | 1 | 1 | 1 | 1 | 0 |"
    assert table[4] == "| test | 1 | 1 | 0 | 0 | 0 | 0 | 0 |"

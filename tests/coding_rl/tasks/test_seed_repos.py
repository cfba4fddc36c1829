"""The seed repositories: their files and bugs, and that each validates in the sandbox."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.corpus import open_verifier
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.seed_repos import (
    binary_search_task,
    calculator_task,
    quick_sort_task,
    seed_repo_tasks,
)
from transferlab.coding_rl.tasks.validate import (
    CHECKS,
    Check,
    TaskValidation,
    _retry_timing,
    timing_suspect,
    validate_task,
    validate_tasks,
)


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    with open_verifier(workers=2) as v:
        yield v


def test_three_seed_repos() -> None:
    tasks = seed_repo_tasks()
    assert [t.task_id for t in tasks] == ["seed-calculator", "seed-binary_search", "seed-quick_sort"]
    for task in tasks:
        assert task.meta.split == "train"
        assert task.meta.group == "seed/" + task.task_id.removeprefix("seed-")
        assert task.meta.bug.operator == "seed"
        assert "# bug" not in task.buggy_source  # nothing in the repo gives the bug away
        assert task.buggy_source != task.reference_source
        assert task.test_paths() == [f"tests/test_{task.meta.source_path[4:-3]}.py"]
        assert len(task.dev_tests) + len(task.hidden_tests) >= 5


def test_bug_lines() -> None:
    calc = calculator_task()
    lines = calc.buggy_source.splitlines()
    assert lines[calc.meta.bug.line - 1] == calc.meta.bug.after == "    return a / b"
    assert calc.meta.bug.before.startswith("    if b == 0:\n        raise ValueError(")

    search = binary_search_task()
    bugs = search.meta.provenance["bugs"]
    assert [(b["before"].strip(), b["after"].strip()) for b in bugs] == [
        ("low = mid + 1", "low = mid"),
        ("high = mid - 1", "high = mid"),
    ]
    assert search.meta.bug.line == bugs[0]["line"] < bugs[1]["line"]
    for b in bugs:
        assert search.buggy_source.splitlines()[b["line"] - 1] == b["after"]
        assert search.reference_source.splitlines()[b["line"] - 1] == b["before"]

    sort = quick_sort_task()
    assert sort.buggy_source.splitlines()[sort.meta.bug.line - 1] == sort.meta.bug.after
    assert sort.reference_source.splitlines()[sort.meta.bug.line - 1] == sort.meta.bug.before
    assert ">=" in sort.meta.bug.before and ">=" not in sort.meta.bug.after


def test_calculator_tests_cover_every_function() -> None:
    task = calculator_task()
    for cases in (task.dev_tests, task.hidden_tests):
        assert {c.call for c in cases} == {"add", "subtract", "multiply", "divide"}
        assert any(c.call == "divide" and c.raises == "ValueError" for c in cases)
    assert "with pytest.raises(ValueError):" in task.files["tests/test_calculator.py"]
    assert task.meta.issue.startswith("division does not handle a zero divisor")


@pytest.mark.parametrize(
    "make",
    [calculator_task, binary_search_task, quick_sort_task],
    ids=["calculator", "binary_search", "quick_sort"],
)
def test_seed_repo_validates(make: Callable[[], RepoTask], verifier: Verifier) -> None:
    task = make()
    result = validate_task(task, verifier)
    assert list(result.checks) == list(CHECKS)
    assert result.ok, {name: c.detail for name, c in result.checks.items() if not c.ok}
    assert result.first_dev_failure is not None


def test_calculator_rejects_a_file_with_only_divide(verifier: Verifier) -> None:
    """Overwriting the module with a fixed `divide` alone fails the add / subtract / multiply tests."""
    task = calculator_task()
    only_divide = (
        "def divide(a, b):\n    if b == 0:\n        raise ValueError('zero divisor')\n    return a / b\n"
    )
    result = verifier.grade(task.code_task("all"), only_divide)
    assert result.status != "passed"
    assert verifier.grade(task.code_task("all"), task.reference_source).status == "passed"


def _busy_machine_verdict(task: RepoTask, verifier: Verifier) -> TaskValidation:
    """The task's real validation, as a loaded machine could have seen it: the reference over budget."""
    real = validate_task(task, verifier)
    checks = dict(real.checks)
    checks["runtime_within_budget"] = Check(ok=False, detail="reference took 1.400s; budget 1s")
    return real.model_copy(update={"ok": False, "checks": checks})


def test_a_task_dropped_only_for_timing_is_revalidated_alone_and_kept(verifier: Verifier) -> None:
    task = calculator_task()
    busy = _busy_machine_verdict(task, verifier)
    assert timing_suspect(busy)
    [quiet] = _retry_timing([task], [busy], verifier, reruns=3, fail_fast=True)
    assert quiet.ok and quiet.runs == 3


def test_a_task_really_over_budget_stays_dropped_after_the_quiet_retry(verifier: Verifier) -> None:
    task = calculator_task()
    tight = task.model_copy(update={"meta": task.meta.model_copy(update={"efficiency_budget_s": 1e-9})})
    [result] = validate_tasks([tight], verifier, fail_fast=True)
    assert not result.ok and result.failed_checks() == ["runtime_within_budget"]


def test_only_timing_prone_failures_are_suspects(verifier: Verifier) -> None:
    task = calculator_task()
    real = validate_task(task, verifier)
    assert not timing_suspect(real)  # valid: nothing to retry
    checks = dict(real.checks)
    checks["buggy_fails_dev"] = Check(ok=False, detail="passed, 5/5 passed")
    assert not timing_suspect(real.model_copy(update={"ok": False, "checks": checks}))
    checks = dict(real.checks)
    checks["deterministic_3_reruns"] = Check(ok=False, detail="3 runs, 2 different verdicts")
    assert timing_suspect(real.model_copy(update={"ok": False, "checks": checks}))

"""Task validation for repository tasks: the quality checks a task passes before it is trained on.

The checks make concrete the founding design note's ``validate_task_quality`` (the task has a
solution, enough tests, and a stable environment that runs it).

A task is valid when every named check holds:

- ``reference_passes_all``: the reference source passes every developer and hidden test;
- ``buggy_fails_dev``: the buggy source fails at least one developer test;
- ``buggy_fails_hidden``: the buggy source fails at least one hidden test;
- ``at_least_5_tests``: developer + hidden tests number at least :data:`MIN_TESTS`;
- ``deterministic_3_reruns``: the verdicts (status and every test's pass/fail) are the same on each of
  the reruns (three by default);
- ``runtime_within_budget``: the reference never hits the wall-time limit and runs within the task's
  ``efficiency_budget_s`` on every rerun.

One *run* grades the reference on all tests, and the buggy source on the developer tests and on the
hidden tests separately (so a buggy version that hangs on a developer test is still judged on the
hidden ones). Every job goes through the :class:`~transferlab.coding_rl.sandbox.verifier.Verifier`,
batched with ``grade_many``. A sandbox ``infra_error`` never counts for a check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from transferlab.coding_rl.tasks.repo_task import RepoTask

if TYPE_CHECKING:
    from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
    from transferlab.coding_rl.tasks.code_task import CodeTask

__all__ = [
    "CHECKS",
    "DROP_ORDER",
    "DROP_REASONS",
    "MIN_TESTS",
    "Check",
    "DevFailure",
    "TaskValidation",
    "validate_task",
    "validate_tasks",
]

MIN_TESTS = 5
CHECKS: tuple[str, ...] = (
    "reference_passes_all",
    "buggy_fails_dev",
    "buggy_fails_hidden",
    "at_least_5_tests",
    "deterministic_3_reruns",
    "runtime_within_budget",
)
# The order in which a failed check becomes a task's drop reason (cheap, static checks first).
DROP_ORDER: tuple[str, ...] = (
    "at_least_5_tests",
    "reference_passes_all",
    "buggy_fails_dev",
    "buggy_fails_hidden",
    "runtime_within_budget",
    "deterministic_3_reruns",
)
DROP_REASONS: dict[str, str] = {
    "at_least_5_tests": "fewer than 5 tests",
    "reference_passes_all": "reference fails a test",
    "buggy_fails_dev": "buggy passes every developer test",
    "buggy_fails_hidden": "buggy passes every hidden test",
    "runtime_within_budget": "reference over the runtime budget",
    "deterministic_3_reruns": "verdicts differ between reruns",
}
NOT_RUN = "not run: an earlier check failed"

ProgressFn = Callable[[int, int], None]  # (jobs graded so far, jobs planned so far)


class Check(BaseModel):
    """One check's verdict; ``ok`` is None when it was not run (fail-fast validation)."""

    ok: bool | None = Field(description="True: holds; False: fails; None: not run.")
    detail: str = Field(default="", description="What was measured.")


class DevFailure(BaseModel):
    """The buggy version's first failing developer test (what a generated issue reports)."""

    index: int = Field(description="Position among the developer tests.")
    message: str = Field(description="The verifier's message, e.g. 'expected 3, got 2'.")
    status: str = Field(description="Status of the buggy developer run (failed / error / timeout ...).")


class TaskValidation(BaseModel):
    """Every check's verdict for one task (JSON-able with ``to_json``)."""

    task_id: str
    ok: bool
    checks: dict[str, Check]
    runs: int = Field(description="Runs done (each: reference on all tests, buggy on dev and hidden).")
    reference_runtime_s: float | None = Field(default=None, description="Slowest reference run.")
    first_dev_failure: DevFailure | None = None

    def failed_checks(self) -> list[str]:
        """Names of the checks that failed (not those that were not run)."""
        return [name for name, check in self.checks.items() if check.ok is False]

    def drop_reason(self) -> str | None:
        """Why the task is dropped (the first failed check in DROP_ORDER), or None if it is valid."""
        if self.ok:
            return None
        failed = set(self.failed_checks())
        return next((DROP_REASONS[name] for name in DROP_ORDER if name in failed), "not validated")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class _Run:
    reference: GradeResult
    buggy_dev: GradeResult
    buggy_hidden: GradeResult

    def signature(self) -> tuple[Any, ...]:
        return tuple(
            (g.status, tuple(t.status for t in g.tests))
            for g in (self.reference, self.buggy_dev, self.buggy_hidden)
        )


def _n_tests(task: RepoTask) -> int:
    return len(task.dev_tests) + len(task.hidden_tests)


def _jobs(
    task: RepoTask, cache: dict[int, tuple[CodeTask, CodeTask, CodeTask]]
) -> list[tuple[CodeTask, str]]:
    key = id(task)
    if key not in cache:
        cache[key] = (task.code_task("all"), task.code_task("dev"), task.code_task("hidden"))
    every, dev, hidden = cache[key]
    return [(every, task.reference_source), (dev, task.buggy_source), (hidden, task.buggy_source)]


def _grade(
    verifier: Verifier,
    items: list[tuple[CodeTask, str]],
    done: int,
    planned: int,
    progress: ProgressFn | None,
) -> list[GradeResult]:
    if progress is None:
        return verifier.grade_many(items)
    chunk = max(32, 16 * verifier.backend.workers)
    out: list[GradeResult] = []
    for start in range(0, len(items), chunk):
        out.extend(verifier.grade_many(items[start : start + chunk]))
        progress(done + len(out), planned)
    return out


def _first_run_ok(task: RepoTask, run: _Run) -> bool:
    """The checks one run decides, all holding (fail-fast: only then are the reruns worth doing)."""
    ref, dev, hidden = run.reference, run.buggy_dev, run.buggy_hidden
    return (
        ref.status == "passed"
        and _fails(dev)
        and _fails(hidden)
        and ref.runtime_s <= task.meta.efficiency_budget_s
    )


def _fails(result: GradeResult) -> bool:
    return result.status != "infra_error" and result.passed < result.total


def _verdict(result: GradeResult) -> str:
    if result.status == "infra_error":
        return f"sandbox infra error: {result.message}"
    text = f"{result.status}, {result.passed}/{result.total} passed"
    first = next((t for t in result.tests if t.status == "failed" and t.message), None)
    if first is not None:
        text += f"; test {first.index}: {first.message}"
    return text + (f" ({result.message})" if result.message else "")


def _first_dev_failure(result: GradeResult) -> DevFailure | None:
    if result.status == "infra_error":
        return None
    for outcome in result.tests:
        if outcome.status == "failed":
            return DevFailure(
                index=outcome.index,
                message=outcome.message or result.message or result.status,
                status=result.status,
            )
    return None


def _evaluate(task: RepoTask, runs: list[_Run], reruns: int) -> TaskValidation:
    n = _n_tests(task)
    checks: dict[str, Check] = {name: Check(ok=None, detail=NOT_RUN) for name in CHECKS}
    checks["at_least_5_tests"] = Check(
        ok=n >= MIN_TESTS,
        detail=f"{n} tests ({len(task.dev_tests)} developer, {len(task.hidden_tests)} hidden)",
    )
    if not runs:
        return TaskValidation(task_id=task.task_id, ok=False, checks=checks, runs=0)
    first = runs[0]
    bad_ref = next((r.reference for r in runs if r.reference.status != "passed"), None)
    checks["reference_passes_all"] = Check(
        ok=bad_ref is None, detail=_verdict(bad_ref if bad_ref is not None else first.reference)
    )
    checks["buggy_fails_dev"] = Check(ok=_fails(first.buggy_dev), detail=_verdict(first.buggy_dev))
    checks["buggy_fails_hidden"] = Check(ok=_fails(first.buggy_hidden), detail=_verdict(first.buggy_hidden))
    slowest = max(r.reference.runtime_s for r in runs)
    budget = task.meta.efficiency_budget_s
    timed_out = any(r.reference.status == "timeout" for r in runs)
    checks["runtime_within_budget"] = Check(
        ok=not timed_out and slowest <= budget,
        detail=f"reference {'hit the wall-time limit' if timed_out else f'took {slowest:.3f}s'}; "
        f"budget {budget:g}s",
    )
    if len(runs) >= reruns:
        distinct = {r.signature() for r in runs}
        checks["deterministic_3_reruns"] = Check(
            ok=len(distinct) == 1,
            detail=f"{len(runs)} runs, "
            + ("same verdicts" if len(distinct) == 1 else f"{len(distinct)} different verdicts"),
        )
    ok = all(c.ok is True for c in checks.values())
    return TaskValidation(
        task_id=task.task_id,
        ok=ok,
        checks=checks,
        runs=len(runs),
        reference_runtime_s=round(slowest, 6),
        first_dev_failure=_first_dev_failure(first.buggy_dev),
    )


def validate_tasks(
    tasks: Sequence[RepoTask],
    verifier: Verifier,
    reruns: int = 3,
    *,
    fail_fast: bool = False,
    progress: ProgressFn | None = None,
    retry_timing: bool = True,
) -> list[TaskValidation]:
    """Validate many tasks, every sandbox job batched through ``verifier.grade_many``.

    With ``fail_fast`` a task with too few tests is not run at all, and only tasks whose first run
    passes every check are rerun (the others' ``deterministic_3_reruns`` is reported as not run).
    ``progress(done, planned)`` is called as jobs finish.

    Verdicts must not depend on how busy the machine is: a task that fails only where timing enters
    (the reference over its runtime budget, a timeout, an infrastructure error) is validated again on
    its own, with the sandbox otherwise idle, and that quiet verdict is kept (``retry_timing``).
    """
    if reruns < 1:
        raise ValueError(f"reruns must be >= 1, got {reruns}")
    cache: dict[int, tuple[CodeTask, CodeTask, CodeTask]] = {}
    runs: list[list[_Run]] = [[] for _ in tasks]
    active = [i for i, t in enumerate(tasks) if not (fail_fast and _n_tests(t) < MIN_TESTS)]
    done = 0
    rounds = [1, reruns - 1] if fail_fast else [reruns]
    if retry_timing:
        return _retry_timing(
            tasks,
            validate_tasks(
                tasks, verifier, reruns, fail_fast=fail_fast, progress=progress, retry_timing=False
            ),
            verifier,
            reruns,
            fail_fast,
        )
    for r, count in enumerate(rounds):
        if r == 1:
            active = [i for i in active if _first_run_ok(tasks[i], runs[i][0])]
        items = [job for _ in range(count) for i in active for job in _jobs(tasks[i], cache)]
        planned = done + len(items) + (3 * (reruns - 1) * len(active) if fail_fast and r == 0 else 0)
        results = _grade(verifier, items, done, planned, progress)
        done += len(items)
        per_round = 3 * len(active)
        for c in range(count):
            for k, i in enumerate(active):
                base = c * per_round + 3 * k
                runs[i].append(_Run(*results[base : base + 3]))
    return [_evaluate(task, runs[i], reruns) for i, task in enumerate(tasks)]


TIMING_CHECKS = frozenset({"runtime_within_budget", "deterministic_3_reruns", "reference_passes_all"})
"""Checks a busy machine can fail (a slow or timed-out reference, a verdict that flips on a timeout)."""

TIMING_STATUSES = frozenset({"timeout", "infra_error"})


def timing_suspect(validation: TaskValidation) -> bool:
    """Whether a failed validation may be the machine's load, not the task: only timing-prone checks
    failed, and a run was over budget, timed out or hit an infrastructure error."""
    failed = set(validation.failed_checks())
    if validation.ok or not failed or not failed <= TIMING_CHECKS:
        return False
    if "runtime_within_budget" in failed:
        return True
    details = " ".join(validation.checks[name].detail for name in failed)
    return any(status in details for status in TIMING_STATUSES) or "different verdicts" in details


def _retry_timing(
    tasks: Sequence[RepoTask],
    validations: list[TaskValidation],
    verifier: Verifier,
    reruns: int,
    fail_fast: bool,
) -> list[TaskValidation]:
    """``validations`` with each timing suspect replaced by a validation of that task alone."""
    out = list(validations)
    for i, validation in enumerate(validations):
        if timing_suspect(validation):
            out[i] = validate_tasks([tasks[i]], verifier, reruns, fail_fast=fail_fast, retry_timing=False)[0]
    return out


def validate_task(task: RepoTask, verifier: Verifier, reruns: int = 3) -> TaskValidation:
    """Run every check on one task (reruns included) and report each."""
    return validate_tasks([task], verifier, reruns)[0]

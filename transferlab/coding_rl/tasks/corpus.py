"""The repository-task corpus: seed repositories plus HumanEval functions with injected bugs.

:func:`build_corpus` takes every HumanEval canonical solution that has converted tests
(``prompt + canonical_solution``), injects bugs with the operators of
:mod:`~transferlab.coding_rl.tasks.mutations` (at most ``per_operator`` per function and operator),
packages each mutant as a repository task, validates every candidate in the sandbox
(:mod:`~transferlab.coding_rl.tasks.validate`; forkserver, or subprocess where forkserver is
unavailable), and writes the survivors, one directory each, plus ``corpus.json`` (the build
report) under ``out_dir``.

- Tests: the HumanEval task's developer cases stay developer tests and its hidden cases stay hidden
  (if it has none, the last third of the developer cases becomes hidden); fewer than 5 tests in total
  drops every mutant of the function ("fewer than 5 tests").
- Split: by source function. A function's ``group`` (``humaneval/<n>``, ``seed/<name>``) is
  ``held-out`` when a SHA-256 hash of ``"<seed>:<group>"`` maps below ``held_out_fraction``, so every
  mutant of a function lands on the same side. Seed tasks are always ``train``.
- Issue text (mutants): a bug report written from the buggy version's first failing developer test
  (``f(x)`` returns ``got`` but should return ``expected``) plus the docstring's summary.
- Task ids: ``humaneval-<n>-<operator>-<k>`` (k-th pick for that function and operator) and
  ``seed-<name>``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from transferlab.coding_rl.tasks.code_task import CodeTask, TestCase
from transferlab.coding_rl.tasks.mutations import OPERATORS, Mutant, mutate
from transferlab.coding_rl.tasks.repo_task import BugInfo, RepoTask, Split, make_repo_task, save_repo_task
from transferlab.coding_rl.tasks.validate import DROP_REASONS, MIN_TESTS, DevFailure, validate_tasks

if TYPE_CHECKING:
    from transferlab.coding_rl.sandbox.verifier import Verifier

__all__ = [
    "CORPUS_FILE",
    "MUTANT_EFFICIENCY_BUDGET_S",
    "MUTANT_TIME_LIMIT_S",
    "SEED_ROW",
    "BuildReport",
    "OperatorRow",
    "bug_report",
    "build_corpus",
    "mutant_task",
    "open_verifier",
    "split_for",
]

CORPUS_FILE = "corpus.json"
SEED_ROW = "seed"
MUTANT_TIME_LIMIT_S = 2.0  # wall limit per test run: bounds what a mutant that loops forever costs
MUTANT_EFFICIENCY_BUDGET_S = 1.0
GENERATOR = "transferlab.coding_rl.tasks.mutations"
_OWN_TASK_DIR = re.compile(r"^(humaneval-\d+-[a-z_]+-\d+|seed-[A-Za-z0-9_]+)$")
_MAX_SHOWN = 150


class OperatorRow(BaseModel):
    """One row of the survival table."""

    operator: str
    candidates: int = Field(default=0, description="Usable distinct mutants found, before sampling.")
    produced: int = Field(default=0, description="Candidates sampled and put to validation.")
    survived: int = Field(default=0, description="Candidates that passed every check.")
    dropped: dict[str, int] = Field(default_factory=dict, description="Dropped candidates by reason.")

    @property
    def survival(self) -> float:
        return self.survived / self.produced if self.produced else 0.0

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


class BuildReport(BaseModel):
    """What a build produced; written as ``corpus.json``."""

    out_dir: str
    seed: int
    per_operator: int
    held_out_fraction: float
    backend: str
    humaneval_version: str
    functions: dict[str, int] = Field(
        description="HumanEval problems: total, with tests, with >= 5 tests, "
        "with at least one validated task."
    )
    problems_without_tests: list[str]
    operators: dict[str, OperatorRow]
    splits: dict[str, int] = Field(description="Validated tasks per split.")
    groups: dict[str, int] = Field(description="Source functions per split.")
    total_validated: int
    tasks: list[dict[str, Any]] = Field(description="Every saved task: task_id, split, group, operator.")
    build_time_s: float

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def totals(self) -> OperatorRow:
        total = OperatorRow(operator="total")
        for row in self.operators.values():
            total.candidates += row.candidates
            total.produced += row.produced
            total.survived += row.survived
            for reason, n in row.dropped.items():
                total.dropped[reason] = total.dropped.get(reason, 0) + n
        return total

    def markdown_table(self) -> str:
        """The per-operator survival table as markdown."""
        lines = [
            "| operator | candidates | produced | survived | survival | dropped (reason: count) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for row in [*self.operators.values(), self.totals()]:
            dropped = "; ".join(
                f"{r}: {n}" for r, n in sorted(row.dropped.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            name = f"**{row.operator}**" if row.operator == "total" else f"`{row.operator}`"
            lines.append(
                f"| {name} | {row.candidates} | {row.produced} | {row.survived} | "
                f"{100 * row.survival:.0f}% | {dropped or '-'} |"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: how many tasks, the split, the time."""
        return (
            f"{self.total_validated} validated tasks (train {self.splits.get('train', 0)}, held-out "
            f"{self.splits.get('held-out', 0)}; groups train {self.groups.get('train', 0)}, held-out "
            f"{self.groups.get('held-out', 0)}) in {self.build_time_s:.1f}s -> {self.out_dir}"
        )


def split_for(group: str, seed: int, held_out_fraction: float) -> Split:
    """The split of a source function: seed groups are train; others by a hash of (seed, group)."""
    if group.startswith("seed/"):
        return "train"
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return "held-out" if u < held_out_fraction else "train"


@contextmanager
def open_verifier(workers: int = 2, backend: str = "forkserver") -> Iterator[Verifier]:
    """A Verifier on ``backend`` (forkserver by default; subprocess if that is unavailable here)."""
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import Verifier

    sandbox, config, _ = open_backend(SandboxConfig(backend=backend, workers=workers))
    try:
        yield Verifier(sandbox, config)
    finally:
        sandbox.close()


# --------------------------------------------------------------------------- issue text


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _call_text(fn: str, case: TestCase) -> str:
    args = ", ".join(repr(a) for a in case.call_args())
    if len(args) > _MAX_SHOWN:
        args = args[: _MAX_SHOWN - 3] + "..."
    return f"{case.call or fn}({args})"


def _docstring_summary(description: str) -> str:
    """The docstring's first paragraph, before any example."""
    kept: list[str] = []
    for raw in description.strip().splitlines():
        line = raw.strip()
        if not line:
            if kept:
                break
            continue
        if line.startswith(">>>") or re.match(r"^(for )?examples?\b", line, re.IGNORECASE):
            break
        kept.append(line)
    text = " ".join(kept)
    return text if len(text) <= 400 else text[:397] + "..."


def bug_report(fn: str, case: TestCase, failure: DevFailure, description: str) -> str:
    """A short issue from the buggy version's first failing developer test."""
    call, expected = _call_text(fn, case), _short(case.expected)
    message = failure.message
    if case.raises is not None:
        title, body = f"`{fn}` does not raise", f"`{call}` should raise `{case.raises}`: {message}."
    elif message.startswith("expected ") and ", got " in message:
        got = message.rsplit(", got ", 1)[1]
        title, body = (
            f"`{fn}` returns a wrong result",
            f"`{call}` returns `{got}` but should return `{expected}`.",
        )
    elif message.startswith("no result") and failure.status == "timeout":
        title = f"`{fn}` does not finish"
        body = f"`{call}` does not finish within the time limit; it should return `{expected}`."
    elif message.startswith("no result"):
        title, body = f"`{fn}` crashes", f"`{call}` crashes the process; it should return `{expected}`."
    else:
        title = f"`{fn}` raises an error"
        body = f"`{call}` raises `{message}` but should return `{expected}`."
    summary = _docstring_summary(description)
    return f"{title}\n\n{body}\n" + (f"\nWhat `{fn}` should do: {summary}\n" if summary else "")


# --------------------------------------------------------------------------- mutant tasks


def _problem_number(task_id: str) -> str:
    return task_id.rsplit("/", 1)[-1]


def _dev_hidden(problem: CodeTask) -> tuple[list[TestCase], list[TestCase]]:
    dev, hidden = list(problem.test_cases), list(problem.hidden_test_cases)
    if not hidden:
        cut = len(dev) - len(dev) // 3
        dev, hidden = dev[:cut], dev[cut:]
    return dev, hidden


def mutant_task(
    problem: CodeTask, mutant: Mutant, pick: int, *, seed: int, split: Split, candidates: int = 0
) -> RepoTask:
    """A HumanEval mutant as a repository task (its issue is a placeholder until validation)."""
    number = _problem_number(problem.task_id)
    dev, hidden = _dev_hidden(problem)
    fn = problem.entry_point
    return make_repo_task(
        task_id=f"humaneval-{number}-{mutant.operator}-{pick}",
        module=fn,
        buggy_source=mutant.buggy,
        reference_source=mutant.reference,
        entry_point=fn,
        dev_tests=dev,
        hidden_tests=hidden,
        issue=f"`{fn}` returns a wrong result",
        group=f"humaneval/{number}",
        split=split,
        bug=BugInfo(operator=mutant.operator, line=mutant.line, before=mutant.before, after=mutant.after),
        time_limit_s=MUTANT_TIME_LIMIT_S,
        efficiency_budget_s=MUTANT_EFFICIENCY_BUDGET_S,
        float_tolerance=problem.float_tolerance,
        provenance={
            **problem.provenance,
            "generator": GENERATOR,
            "operator": mutant.operator,
            "seed": seed,
            "site": mutant.site,
            "pick": pick,
            "candidates": candidates,
        },
    )


def _remove_stale(out_dir: Path, keep: set[str]) -> None:
    """Delete task directories an earlier build wrote (our id pattern, with task.json) not in keep."""
    for path in out_dir.iterdir():
        if (
            path.is_dir()
            and _OWN_TASK_DIR.match(path.name)
            and path.name not in keep
            and (path / "task.json").is_file()
        ):
            shutil.rmtree(path)


def _mutant_candidates(
    problems: list[CodeTask],
    solutions: dict[str, str],
    rows: dict[str, OperatorRow],
    *,
    seed: int,
    per_operator: int,
    held_out_fraction: float,
) -> tuple[list[RepoTask], dict[str, CodeTask], int]:
    """Mutant tasks to validate, their source problems by task id, and how many problems have 5+ tests.

    Counts every sampled candidate in ``rows``; those that cannot make a task are dropped there.
    """
    candidates: list[RepoTask] = []
    problem_of: dict[str, CodeTask] = {}
    enough_tests = 0
    for problem in problems:
        group = f"humaneval/{_problem_number(problem.task_id)}"
        split = split_for(group, seed, held_out_fraction)
        n_tests = len(problem.test_cases) + len(problem.hidden_test_cases)
        enough_tests += n_tests >= MIN_TESTS
        unusable = DROP_REASONS["at_least_5_tests"] if n_tests < MIN_TESTS else None
        for found in mutate(
            solutions[problem.task_id], problem.entry_point, seed=seed, per_operator=per_operator, key=group
        ):
            row = rows[found.operator]
            row.candidates += len(found.usable)
            row.produced += len(found.picked)
            for pick, mutant in enumerate(found.picked):
                if unusable is not None:
                    row.drop(unusable)
                    continue
                task = mutant_task(
                    problem, mutant, pick, seed=seed, split=split, candidates=len(found.usable)
                )
                problem_of[task.task_id] = problem
                candidates.append(task)
    return candidates, problem_of, enough_tests


def build_corpus(
    out_dir: str | Path,
    seed: int = 0,
    per_operator: int = 2,
    held_out_fraction: float = 0.2,
    workers: int = 2,
    progress: bool = True,
    *,
    limit: int | None = None,
    backend: str = "forkserver",
    reruns: int = 3,
) -> BuildReport:
    """Build, validate and write the corpus; returns the report also written as ``corpus.json``.

    ``limit`` takes only the first HumanEval problems (for quick builds and tests).
    """
    from transferlab.coding_rl.tasks.humaneval import humaneval_version, load_humaneval
    from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
    from transferlab.platform.io import atomic_write_json

    if not 0.0 <= held_out_fraction <= 1.0:
        raise ValueError(f"held_out_fraction must be in [0, 1], got {held_out_fraction}")
    if per_operator < 0:
        raise ValueError(f"per_operator must be >= 0, got {per_operator}")
    started = time.perf_counter()
    out = Path(out_dir)
    conv = load_humaneval(limit)
    rows = {name: OperatorRow(operator=name) for name in (*OPERATORS, SEED_ROW)}
    candidates, descriptions, enough_tests = _mutant_candidates(
        conv.tasks,
        conv.solutions,
        rows,
        seed=seed,
        per_operator=per_operator,
        held_out_fraction=held_out_fraction,
    )
    seeds = seed_repo_tasks()
    rows[SEED_ROW].candidates = rows[SEED_ROW].produced = len(seeds)
    everything = [*seeds, *candidates]

    bar = None
    if progress and not sys.stderr.isatty():  # a log file: one line, not a bar redrawn thousands of times
        print(f"... validating {len(everything)} candidate tasks in the sandbox", file=sys.stderr)
    elif progress:
        from tqdm import tqdm

        bar = tqdm(
            total=3 * reruns * len(everything),
            desc="validating",
            unit="job",
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def on_progress(done: int, planned: int) -> None:
        assert bar is not None
        bar.total = planned
        bar.n = done
        bar.refresh()

    try:
        with open_verifier(workers, backend) as verifier:
            backend_used = verifier.backend.name
            validations = validate_tasks(
                everything,
                verifier,
                reruns,
                fail_fast=True,
                progress=on_progress if bar is not None else None,
            )
    finally:
        if bar is not None:
            bar.close()

    survivors: list[RepoTask] = []
    for task, result in zip(everything, validations, strict=True):
        row = rows[SEED_ROW if task.meta.group.startswith("seed/") else task.meta.bug.operator]
        if not result.ok:
            row.drop(result.drop_reason() or "not validated")
            continue
        row.survived += 1
        if task.task_id in descriptions and result.first_dev_failure is not None:
            problem = descriptions[task.task_id]
            case = task.dev_tests[result.first_dev_failure.index]
            issue = bug_report(
                task.meta.entry_point, case, result.first_dev_failure, problem.task_description
            )
            task = task.model_copy(update={"meta": task.meta.model_copy(update={"issue": issue})})
        survivors.append(task)

    out.mkdir(parents=True, exist_ok=True)
    _remove_stale(out, {t.task_id for t in survivors})
    for task in survivors:
        save_repo_task(task, out)
    splits = {"train": 0, "held-out": 0}
    groups: dict[str, set[str]] = {"train": set(), "held-out": set()}
    for task in survivors:
        splits[task.meta.split] += 1
        groups[task.meta.split].add(task.meta.group)
    report = BuildReport(
        out_dir=str(out),
        seed=seed,
        per_operator=per_operator,
        held_out_fraction=held_out_fraction,
        backend=backend_used,
        humaneval_version=humaneval_version(),
        functions={
            "humaneval_problems": conv.problems_total,
            "with_tests": len(conv.tasks),
            "with_5_tests": enough_tests,
            "with_validated_task": len(
                {t.meta.group for t in survivors if t.meta.group.startswith("humaneval/")}
            ),
        },
        problems_without_tests=list(conv.problems_without_tests),
        operators=rows,
        splits=splits,
        groups={k: len(v) for k, v in groups.items()},
        total_validated=len(survivors),
        tasks=[
            {
                "task_id": t.task_id,
                "split": t.meta.split,
                "group": t.meta.group,
                "operator": t.meta.bug.operator,
            }
            for t in survivors
        ],
        build_time_s=round(time.perf_counter() - started, 3),
    )
    atomic_write_json(out / CORPUS_FILE, report.to_json())
    return report

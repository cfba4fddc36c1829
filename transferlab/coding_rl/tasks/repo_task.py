"""Repository tasks: a small repository with a bug, an issue, developer tests and hidden tests.

On disk, one directory per task::

    <task_id>/
      task.json               metadata (below) — the agent never sees it
      repo/                   the working copy the agent starts from
        src/<module>.py       the buggy source
        tests/test_<module>.py  developer tests, readable pytest-style (read-only to the agent)
      tests/dev.json          developer test cases (what `run_tests` runs), input/expected format
      tests/hidden.json       hidden test cases (what the verifier runs on submit) — never copied
      reference/src/<module>.py  the fixed source — never shown

`task.json` holds: `task_id`, `issue` (the text the agent gets), `source_path` (e.g. `src/calc.py`),
`entry_point`, `split` (`train` / `validation` / `test`; `held-out` in the two-way split of the
HumanEval corpus and of corpora written before the three-way splits, which still load), `group` (the
source function: every mutant of one function carries the same group, and a split never divides a
group), `time_limit_s`,
`float_tolerance`, `efficiency_budget_s`, `bug` (operator, line, before, after) and `provenance`
(source, generator, seed). Test cases use the JSON task format of `code_task.py`.

Users add their own tasks — e.g. from real bug-fix pull requests — by writing such a directory.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transferlab.coding_rl.tasks.code_task import CodeTask, TaskError, TestCase, task_from_dict
from transferlab.platform.config import EvalSplit
from transferlab.platform.io import temp_directory

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain

Split = Literal["train", "validation", "test", "held-out"]
"""A task's split. Generated families (procedural, toy repositories) use ``train`` / ``validation`` /
``test``: settings are tuned on validation and only a committed result scores test. ``held-out`` is the
two-way split of the HumanEval corpus (``transferlab coding tasks build``) and of task directories
written before the three-way splits; they load unchanged."""
"""The splits an experiment may score: pilots score ``validation``, a committed result ``test``."""
SplitName = Literal["train", "validation", "test"]
"""The three splits of a generated family."""
SPLITS: Final[tuple[SplitName, ...]] = ("train", "validation", "test")


class BugInfo(BaseModel):
    """Where the bug is (for the expert agent and for reports; never shown to the policy)."""

    model_config = ConfigDict(extra="forbid")
    operator: str = Field(description="Mutation operator, or 'seed' / 'human' for hand-made bugs.")
    line: int = Field(ge=1, description="1-based line of the bug in the buggy source.")
    before: str = Field(description="The reference line.")
    after: str = Field(description="The buggy line.")


class RepoTaskMeta(BaseModel):
    """The contents of task.json."""

    model_config = ConfigDict(extra="forbid")
    task_id: str = Field(pattern=r"^[A-Za-z0-9_.\-/]+$", description="Unique id; also the directory name.")
    issue: str = Field(min_length=1, description="The issue text the agent receives.")
    source_path: str = Field(description="Path of the buggy file inside repo/, e.g. src/calc.py.")
    entry_point: str = Field(description="Default function the test cases call.")
    split: Split = Field(
        default="train", description="train, validation or test (held-out: the two-way HumanEval corpus)."
    )
    group: str = Field(description="Source function this task derives from; splits never divide a group.")
    time_limit_s: float = Field(default=2.0, gt=0, le=300, description="Wall limit for a test run.")
    float_tolerance: float = Field(default=1e-6, ge=0, description="Float comparison tolerance.")
    efficiency_budget_s: float = Field(default=1.0, gt=0, description="Runtime that earns the bonus.")
    bug: BugInfo = Field(description="The injected or known bug.")
    provenance: dict[str, Any] = Field(default_factory=dict, description="Source, generator, seed.")


class RepoTask(BaseModel):
    """A loaded repository task: metadata, files, tests and the reference source."""

    model_config = ConfigDict(extra="forbid")
    meta: RepoTaskMeta
    files: dict[str, str] = Field(description="The initial working copy: relative path -> text.")
    dev_tests: list[TestCase] = Field(min_length=1, description="Cases `run_tests` runs.")
    hidden_tests: list[TestCase] = Field(min_length=1, description="Cases the verifier runs on submit.")
    reference_source: str = Field(description="The fixed version of meta.source_path.")

    @property
    def task_id(self) -> str:
        return self.meta.task_id

    @property
    def domain(self) -> Domain:
        """Always ``coding`` (:class:`~transferlab.platform.agent_env.Task`)."""
        return "coding"

    @property
    def split(self) -> str:
        return self.meta.split

    @property
    def provenance(self) -> dict[str, Any]:
        return self.meta.provenance

    @property
    def buggy_source(self) -> str:
        return self.files[self.meta.source_path]

    def test_paths(self) -> list[str]:
        """Files the agent may read but not write."""
        return sorted(p for p in self.files if p.startswith("tests/"))

    def code_task(self, which: Literal["dev", "hidden", "all"] = "all") -> CodeTask:
        """The tests as a CodeTask for the verifier (dev only, hidden only, or dev + hidden)."""
        dev = [t.to_json_dict() for t in self.dev_tests]
        hidden = [t.to_json_dict() for t in self.hidden_tests]
        cases = {"dev": (dev, []), "hidden": (hidden, []), "all": (dev, hidden)}[which]
        return task_from_dict(
            {
                "task_id": self.meta.task_id,
                "task_description": self.meta.issue,
                "function_signature": f"def {self.meta.entry_point}(...):",
                "entry_point": self.meta.entry_point,
                "test_cases": cases[0],
                "hidden_test_cases": cases[1],
                "time_limit_s": self.meta.time_limit_s,
                "float_tolerance": self.meta.float_tolerance,
                "efficiency_budget_s": self.meta.efficiency_budget_s,
            },
            source=self.meta.task_id,
        )


@dataclass(frozen=True)
class TaskSplits:
    """One generation's tasks in its three splits, and how many were left out of each, and why
    (``dropped[split][reason]``: e.g. a bug edit that occurs in training)."""

    train: list[RepoTask]
    validation: list[RepoTask]
    test: list[RepoTask]
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)

    def of(self, split: SplitName) -> list[RepoTask]:
        """The tasks of ``split``."""
        return {"train": self.train, "validation": self.validation, "test": self.test}[split]

    def counts(self) -> dict[str, int]:
        """Tasks per split, in :data:`SPLITS` order."""
        return {s: len(self.of(s)) for s in SPLITS}

    def scored(self, split: EvalSplit) -> tuple[list[RepoTask], list[RepoTask]]:
        """(train, the tasks of ``split``): what an experiment trains on and scores; a ValueError
        naming the fix when that split is empty (too few distinct templates or edits)."""
        tasks = self.of(split)
        if not tasks:
            raise ValueError(
                f"the {split} split is empty ({self.counts()}): it needs tasks whose template and bug "
                "edit occur nowhere in training; give more operations or functions"
            )
        return list(self.train), list(tasks)

    def two_way(self) -> tuple[list[RepoTask], list[RepoTask]]:
        """(train, validation + test relabelled ``held-out``): the two-way view of callers that score
        every task outside training (``--tasks procedural --split held-out``)."""
        held = [
            t.model_copy(update={"meta": t.meta.model_copy(update={"split": "held-out"})})
            for t in self.validation + self.test
        ]
        return list(self.train), held


def render_dev_tests(module: str, cases: list[TestCase], entry_point: str) -> str:
    """Developer tests as a readable pytest file (shown to the agent; `run_tests` runs the JSON cases)."""
    lines = [f"from src.{module} import *  # noqa: F403", ""]
    for i, case in enumerate(cases):
        fn = case.call or entry_point
        args = ", ".join(repr(a) for a in case.call_args())
        lines.append(f"def test_{i}():")
        if case.raises:
            lines += [
                "    import pytest",
                "",
                f"    with pytest.raises({case.raises}):",
                f"        {fn}({args})",
            ]
        else:
            lines.append(f"    assert {fn}({args}) == {case.expected!r}")
        lines.append("")
    return "\n".join(lines)


def save_repo_task(task: RepoTask, root: Path) -> Path:
    """Write the task directory under root atomically (a temp dir renamed into place)."""
    target = root / task.meta.task_id
    tmp = temp_directory(target.parent, ".tmp-")
    try:
        (tmp / "task.json").write_text(task.meta.model_dump_json(indent=2) + "\n", encoding="utf-8")
        for rel, text in task.files.items():
            path = tmp / "repo" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        (tmp / "tests").mkdir()
        for name, cases in (("dev.json", task.dev_tests), ("hidden.json", task.hidden_tests)):
            (tmp / "tests" / name).write_text(json.dumps([c.to_json_dict() for c in cases], indent=1) + "\n")
        ref = tmp / "reference" / task.meta.source_path
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(task.reference_source, encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _read_cases(path: Path) -> list[TestCase]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskError(f"cannot read test cases {path}: {exc}") from None
    if not isinstance(data, list):
        raise TaskError(f"{path} must hold a JSON list of test cases")
    try:
        return [TestCase.model_validate(c) for c in data]
    except ValidationError as exc:
        raise TaskError(f"invalid test case in {path}: {exc.errors()[0]['msg']}") from None


def load_repo_task(path: Path) -> RepoTask:
    """Load a task directory; raises TaskError naming what is missing or malformed."""
    path = Path(path)
    meta_path = path / "task.json"
    if not meta_path.is_file():
        raise TaskError(f"{path} is not a repository task: {meta_path.name} is missing")
    try:
        meta = RepoTaskMeta.model_validate_json(meta_path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise TaskError(f"invalid {meta_path}: {problems}") from None
    repo = path / "repo"
    files = {
        p.relative_to(repo).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(repo.rglob("*"))
        if p.is_file()
    }
    if meta.source_path not in files:
        raise TaskError(f"{path}: source_path {meta.source_path!r} is not in repo/")
    ref = path / "reference" / meta.source_path
    if not ref.is_file():
        raise TaskError(f"{path}: the reference source {ref} is missing")
    return RepoTask(
        meta=meta,
        files=files,
        dev_tests=_read_cases(path / "tests" / "dev.json"),
        hidden_tests=_read_cases(path / "tests" / "hidden.json"),
        reference_source=ref.read_text(encoding="utf-8"),
    )


def load_corpus(root: Path, split: Split | None = None) -> list[RepoTask]:
    """Every task directory under root (sorted by id), optionally one split only."""
    tasks = [load_repo_task(p.parent) for p in sorted(Path(root).rglob("task.json"))]
    return [t for t in tasks if split is None or t.meta.split == split]


def make_repo_task(
    *,
    task_id: str,
    module: str,
    buggy_source: str,
    reference_source: str,
    entry_point: str,
    dev_tests: list[TestCase],
    hidden_tests: list[TestCase],
    issue: str,
    group: str,
    bug: BugInfo,
    split: Split = "train",
    provenance: dict[str, Any] | None = None,
    time_limit_s: float = 2.0,
    float_tolerance: float = 1e-6,
    efficiency_budget_s: float = 1.0,
) -> RepoTask:
    """A one-module repository task: ``src/<module>.py`` (buggy) and ``tests/test_<module>.py``."""
    source_path = f"src/{module}.py"
    meta = RepoTaskMeta(
        task_id=task_id,
        issue=issue,
        source_path=source_path,
        entry_point=entry_point,
        split=split,
        group=group,
        time_limit_s=time_limit_s,
        float_tolerance=float_tolerance,
        efficiency_budget_s=efficiency_budget_s,
        bug=bug,
        provenance=dict(provenance or {}),
    )
    files = {
        source_path: buggy_source if buggy_source.endswith("\n") else buggy_source + "\n",
        f"tests/test_{module}.py": render_dev_tests(module, dev_tests, entry_point),
    }
    reference = reference_source if reference_source.endswith("\n") else reference_source + "\n"
    return RepoTask(
        meta=meta,
        files=files,
        dev_tests=list(dev_tests),
        hidden_tests=list(hidden_tests),
        reference_source=reference,
    )

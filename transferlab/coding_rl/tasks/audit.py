"""The novelty and mutation-adequacy audit of the generated coding task families.

For each split of a family (:class:`~transferlab.coding_rl.tasks.repo_task.TaskSplits`), next to
training:

- ``tasks``: how many tasks, and ``templates``: how many distinct function templates they use (the
  procedural shape; the toy operation);
- ``shared_templates``: tasks whose template occurs in train;
- ``shared_edits``: tasks whose bug edit, with constants and argument names abstracted
  (:func:`~transferlab.coding_rl.tasks.novelty.abstract_edit`), occurs in train;
- ``shared_expert_edits``: tasks whose expert edit occurs verbatim in train (the line the procedural
  expert rewrites; the operator the toy expert writes over the wrong one);
- ``wrong_patches``: tasks where a mutant of the buggy file that is not the fix, and behaves
  differently from it on the input pool, passes every developer and hidden test
  (:func:`~transferlab.coding_rl.tasks.novelty.wrong_patches`);
- ``uncaught_mutants``: tasks where a mutant of the fixed file that behaves differently from it on the
  input pool passes every hidden test (:func:`~transferlab.coding_rl.tasks.novelty.uncaught_mutants`).

Every figure but ``tasks`` and ``templates`` must be 0 on validation and test, and the two mutant
figures on train too (:meth:`FamilyAudit.failures`); ``transferlab coding tasks audit`` exits 1 when
one is not.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any, Final

from transferlab.coding_rl.tasks.novelty import task_edit, uncaught_mutants, wrong_patches
from transferlab.coding_rl.tasks.repo_task import SPLITS, RepoTask, TaskSplits

__all__ = ["FamilyAudit", "SplitAudit", "audit_family", "audit_procedural", "audit_toy", "markdown"]

NOVELTY: Final = ("shared_templates", "shared_edits", "shared_expert_edits")
"""Figures that must be 0 on validation and test (train shares everything with itself)."""
ADEQUACY: Final = ("wrong_patches", "uncaught_mutants")
"""Figures that must be 0 on every split."""

Inputs = Callable[[RepoTask], list[list[Any]]]


@dataclass(frozen=True)
class SplitAudit:
    """One split's figures (module docstring); the novelty figures are None on train."""

    tasks: int
    templates: int
    shared_templates: int | None
    shared_edits: int | None
    shared_expert_edits: int | None
    wrong_patches: int
    uncaught_mutants: int


@dataclass(frozen=True)
class FamilyAudit:
    """A family's audit: its settings, each split's figures and what the generation dropped."""

    family: str
    settings: dict[str, Any]
    splits: dict[str, SplitAudit]
    dropped: dict[str, dict[str, int]]

    def failures(self) -> list[str]:
        """``"<family> <split>: <figure> = n"`` for every must-be-0 figure that is not 0."""
        out = []
        for split, figures in self.splits.items():
            names = ADEQUACY if split == "train" else NOVELTY + ADEQUACY
            out += [
                f"{self.family} {split}: {name} = {getattr(figures, name)}"
                for name in names
                if getattr(figures, name)
            ]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "settings": dict(self.settings),
            "splits": {k: asdict(v) for k, v in self.splits.items()},
            "dropped": {k: dict(v) for k, v in self.dropped.items()},
            "ok": not self.failures(),
        }


def audit_family(
    family: str,
    splits: TaskSplits,
    template: Callable[[RepoTask], str],
    expert_edit: Callable[[RepoTask], Hashable],
    inputs: Inputs,
    settings: dict[str, Any],
) -> FamilyAudit:
    """The figures of each split of ``splits`` (module docstring); ``template``, ``expert_edit`` and
    ``inputs`` (the input pool of a task's entry point) say what those are in this family."""
    train = splits.train
    seen_templates = {template(t) for t in train}
    seen_edits = {task_edit(t) for t in train}
    seen_expert = {expert_edit(t) for t in train}
    out: dict[str, SplitAudit] = {}
    for split in SPLITS:
        tasks = splits.of(split)
        novel = split != "train"
        out[split] = SplitAudit(
            tasks=len(tasks),
            templates=len({template(t) for t in tasks}),
            shared_templates=sum(template(t) in seen_templates for t in tasks) if novel else None,
            shared_edits=sum(task_edit(t) in seen_edits for t in tasks) if novel else None,
            shared_expert_edits=sum(expert_edit(t) in seen_expert for t in tasks) if novel else None,
            wrong_patches=sum(bool(wrong_patches(t, inputs(t))) for t in tasks),
            uncaught_mutants=sum(bool(uncaught_mutants(t, inputs(t))) for t in tasks),
        )
    return FamilyAudit(family, settings, out, splits.dropped)


def audit_procedural(
    n_functions: int, seed: int, validation_fraction: float = 0.2, test_fraction: float = 0.2
) -> FamilyAudit:
    """The audit of :func:`~transferlab.coding_rl.tasks.procedural.procedural_splits` with these
    settings (the input pool of a function is the grammar's pool for its argument types)."""
    from transferlab.coding_rl.tasks.procedural import input_pool, procedural_splits

    splits = procedural_splits(
        n_functions, seed, validation_fraction=validation_fraction, test_fraction=test_fraction
    )
    return audit_family(
        "procedural",
        splits,
        template=lambda t: str(t.meta.provenance["shape"]),
        expert_edit=lambda t: (t.meta.bug.before.strip(), t.meta.bug.after.strip()),
        inputs=input_pool,
        settings={
            "n_functions": n_functions,
            "seed": seed,
            "validation_fraction": validation_fraction,
            "test_fraction": test_fraction,
        },
    )


def audit_toy(
    seed: int, operations: tuple[str, ...], validation_fraction: float = 0.2, test_fraction: float = 0.2
) -> FamilyAudit:
    """The audit of :func:`~transferlab.coding_rl.tasks.toy.toy_repo_splits` (the transfer source's
    repositories); the input pool is the toy inputs."""
    from transferlab.coding_rl.tasks.toy import INPUTS, repo_edit, toy_repo_splits

    splits = toy_repo_splits(
        seed, operations, validation_fraction=validation_fraction, test_fraction=test_fraction
    )
    return audit_family(
        "toy-repos",
        splits,
        template=lambda t: str(t.meta.provenance["operation"]),
        expert_edit=lambda t: repo_edit(str(t.meta.provenance["operation"])),
        inputs=lambda t: [[x] for x in INPUTS],
        settings={
            "seed": seed,
            "operations": list(operations),
            "validation_fraction": validation_fraction,
            "test_fraction": test_fraction,
        },
    )


COLUMNS: Final = (
    ("tasks", "tasks"),
    ("templates", "templates"),
    ("shared_templates", "templates shared with train"),
    ("shared_edits", "abstract bug edits shared with train"),
    ("shared_expert_edits", "expert edits shared with train (verbatim)"),
    ("wrong_patches", "wrong one-line patches passing dev + hidden"),
    ("uncaught_mutants", "fixed-file mutants passing hidden"),
)
"""The table's columns: (figure, header); the last five count tasks and must be 0 (novelty: off train)."""


def markdown(audit: FamilyAudit) -> str:
    """``audit`` as a Markdown table (one row per split; ``-`` where a figure does not apply), then what
    generation dropped, per split and reason."""
    lines = [
        "| split | " + " | ".join(header for _, header in COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for split, figures in audit.splits.items():
        cells = [
            "-" if getattr(figures, name) is None else str(getattr(figures, name)) for name, _ in COLUMNS
        ]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    if audit.dropped:
        lines += ["", "tasks dropped in generation:"]
        for split, reasons in audit.dropped.items():
            lines.append(f"- {split}: " + ", ".join(f"{n} ({reason})" for reason, n in reasons.items()))
    return "\n".join(lines)

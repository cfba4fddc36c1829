"""What ``--tasks`` names on the train and eval commands: a built-in task family or a task corpus.

* ``toy`` — single-step functions (:func:`~transferlab.coding_rl.tasks.toy.toy_tasks`, every
  operation), trained in mode ``code``; demonstrations are the one-line solutions;
* ``toy-repos`` — the same functions as multi-turn CodeRepair-v0 repositories
  (:func:`~transferlab.coding_rl.tasks.toy.toy_repo_tasks`), mode ``agent``; demonstrations play the
  expert's short plan (:func:`~transferlab.coding_rl.tasks.toy.toy_repo_plan`) in the environment;
* ``procedural`` — generated one-module repositories (1-3 functions each) with mutation-operator bugs
  (:func:`~transferlab.coding_rl.tasks.procedural.procedural_repo_tasks` at its defaults, split by
  function), mode ``agent``;
* ``seed`` — the three seed repositories (calculator, binary search, quick sort), mode ``agent``;
* a directory built by ``transferlab coding tasks build`` — its repository tasks, mode ``agent``.

Repository tasks (``seed`` and corpora) are demonstrated by the scripted expert
(:func:`~transferlab.coding_rl.agents.expert_plan`). The split is ``train`` or ``held-out``: the toy
families split by (operation, constant) as the experiments do; repository tasks carry their own
split. A family with no task in the asked split is an error (:class:`TaskFamilyError`), never an
empty run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from transferlab.coding_rl.sandbox.backends import SandboxBackend
    from transferlab.coding_rl.tasks.code_task import CodeTask
    from transferlab.coding_rl.tasks.repo_task import RepoTask
    from transferlab.platform.trajectory import Trajectory

__all__ = [
    "FAMILIES",
    "HELD_OUT_FRACTION",
    "SPLITS",
    "TaskFamilyError",
    "TaskSet",
    "resolve_tasks",
]

FAMILIES: Final = ("toy", "toy-repos", "procedural", "seed")
"""The built-in task families (besides a corpus directory)."""
SPLITS: Final = ("train", "held-out")
HELD_OUT_FRACTION: Final = 0.25
"""Share of the toy (operation, constant) pairs held out, as in the coding experiments."""

Split = Literal["train", "held-out"]


class TaskFamilyError(ValueError):
    """``--tasks`` / ``--split`` name nothing usable; the message names the fix."""


@dataclass(frozen=True)
class TaskSet:
    """The tasks of one family and split, and how the trainers treat them."""

    name: str
    """The family (``toy``, ``toy-repos``, ``seed``) or the corpus directory as given."""
    split: Split
    mode: Literal["code", "agent"]
    """``code``: one completion per task; ``agent``: CodeRepair-v0 episodes."""
    tasks: list[Any]
    """CodeTasks (mode ``code``) or RepoTasks (mode ``agent``)."""

    @property
    def task_ids(self) -> list[str]:
        return [str(t.task_id) for t in self.tasks]

    def plan(self, task: RepoTask) -> list[str]:
        """The scripted expert's tool calls on a repository task of this set."""
        if self.name == "toy-repos":
            from transferlab.coding_rl.tasks.toy import toy_repo_plan

            return toy_repo_plan(task)
        from transferlab.coding_rl.agents import expert_plan

        return expert_plan(task)

    def demonstrations(self, tokenizer: Any, sandbox: SandboxBackend | None = None) -> list[Trajectory]:
        """One demonstration per task, as exact-id trajectories (played in CodeRepair-v0 for agents).

        Agent demonstrations step the real environment, so they need ``sandbox``.
        """
        if self.mode == "code":
            from transferlab.coding_rl.single_step import code_demonstration
            from transferlab.coding_rl.tasks.toy import toy_solution

            return [code_demonstration(tokenizer, t, toy_solution(t), i) for i, t in enumerate(self.tasks)]
        if sandbox is None:
            raise ValueError("agent demonstrations play the tasks in CodeRepair-v0: pass a sandbox")
        from transferlab.agent_rl.sft import scripted_demonstration
        from transferlab.coding_rl.env.code_repair import CodeRepairEnv

        plans = [self.plan(t) for t in self.tasks]
        env = CodeRepairEnv(self.tasks, sandbox=sandbox, max_steps=max(len(p) for p in plans))
        try:
            return [
                scripted_demonstration(env, t, plan, tokenizer)
                for t, plan in zip(self.tasks, plans, strict=True)
            ]
        finally:
            env.close()

    def max_plan_steps(self) -> int:
        """The longest expert plan (tool calls) of the set; 1 for single-step tasks."""
        if self.mode == "code":
            return 1
        return max(len(self.plan(t)) for t in self.tasks)


def _toy(split: Split) -> list[CodeTask]:
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_tasks

    train, held = toy_tasks(HELD_OUT_FRACTION, 0, tuple(sorted(OPERATIONS)))
    return train if split == "train" else held


def _toy_repos(split: Split) -> list[RepoTask]:
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_repo_tasks

    train, held = toy_repo_tasks(HELD_OUT_FRACTION, 0, tuple(sorted(OPERATIONS)))
    return train if split == "train" else held


def _corpus(path: Path) -> list[RepoTask]:
    from transferlab.coding_rl.tasks.code_task import TaskError
    from transferlab.coding_rl.tasks.repo_task import load_corpus

    try:
        tasks = load_corpus(path)
    except TaskError as exc:
        raise TaskFamilyError(f"--tasks {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFamilyError(f"--tasks {path}: cannot read the corpus ({exc})") from None
    if not tasks:
        raise TaskFamilyError(
            f"--tasks {path} is a directory but holds no task (no task.json under it); build a corpus "
            "with `transferlab coding tasks build --out DIR`, or use a built-in family: "
            + ", ".join(FAMILIES)
        )
    return tasks


def _check_split(split: str) -> Split:
    if split not in SPLITS:
        raise TaskFamilyError(f"--split {split!r} does not exist; use one of: {', '.join(SPLITS)}")
    return "train" if split == "train" else "held-out"


def resolve_tasks(spec: str, split: str) -> TaskSet:
    """The tasks ``--tasks spec --split split`` name; raises :class:`TaskFamilyError` naming the fix."""
    chosen = _check_split(split)
    if spec == "toy":
        return TaskSet("toy", chosen, "code", list(_toy(chosen)))
    if spec == "toy-repos":
        tasks: Sequence[Any] = _toy_repos(chosen)
        return TaskSet("toy-repos", chosen, "agent", list(tasks))
    if spec == "procedural":
        from transferlab.coding_rl.tasks.procedural import procedural_repo_tasks

        train, held = procedural_repo_tasks(held_out_fraction=HELD_OUT_FRACTION)
        return TaskSet("procedural", chosen, "agent", train if chosen == "train" else held)
    if spec == "seed":
        from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks

        every: list[RepoTask] = seed_repo_tasks()
        name = "seed"
    else:
        path = Path(spec).expanduser()
        if not path.is_dir():
            what = "a file, not a directory" if path.exists() else "neither a built-in family nor a directory"
            raise TaskFamilyError(
                f"--tasks {spec!r} is {what}; use one of {', '.join(FAMILIES)}, or a task corpus "
                "directory built by `transferlab coding tasks build`"
            )
        every, name = _corpus(path), spec
    picked = [t for t in every if t.meta.split == chosen]
    if not picked:
        have = sorted({t.meta.split for t in every})
        raise TaskFamilyError(
            f"--tasks {name} has no {chosen!r} tasks (its splits: {', '.join(have)}); pass "
            + " or ".join(f"--split {s}" for s in have)
        )
    return TaskSet(name, chosen, "agent", picked)

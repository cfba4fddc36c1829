"""Scripted agents for `transferlab/CodeRepair-v0`: baselines and demonstration makers.

- ``random``: valid JSON calls to random tools with random arguments;
- ``naive``: the early-training attempt of the founding design note's calculator story — read the
  tests, search, then write a patch without reading the source (it overwrites the module with only
  the fixed entry point);
- ``expert``: the same story's workflow "after 1000 rounds" of training — read tests, search, read
  the source, edit the bug (it knows the injected bug), run the failing test, run all tests, submit.

An agent is a plan: ``act(observation) -> action text``; ``begin(task)`` starts an episode.
"""

from __future__ import annotations

import ast
import json
import random
import re
from typing import Protocol

from transferlab.coding_rl.tasks.repo_task import RepoTask


class ScriptedAgent(Protocol):
    name: str

    def begin(self, task: RepoTask, seed: int) -> None: ...

    def act(self, observation: str) -> str: ...


def call(action: str, **args: str) -> str:
    return json.dumps({"action": action, **args})


class ExpertAgent:
    """Knows the bug; follows the read -> search -> read -> edit -> test -> test all -> submit workflow."""

    name = "expert"

    def begin(self, task: RepoTask, seed: int) -> None:
        self.plan = expert_plan(task)

    def act(self, observation: str) -> str:
        return self.plan.pop(0) if self.plan else call("submit")


def _one_line_bug(task: RepoTask) -> tuple[str, str] | None:
    """``(before, after)`` when the buggy text ``after`` is unique and the only difference, else None."""
    bug = task.meta.bug
    before, after = bug.before.strip("\n"), bug.after.strip("\n")
    single = len(task.meta.provenance.get("bugs", [bug])) <= 1
    buggy = task.buggy_source
    if (
        single
        and after
        and buggy.count(after) == 1
        and buggy.replace(after, before, 1) == task.reference_source
    ):
        return before, after
    return None


def _fix_action(task: RepoTask) -> str:
    """edit_file when the buggy line is unique and the only difference, else write the reference."""
    path, bug = task.meta.source_path, _one_line_bug(task)
    if bug is not None:
        return call("edit_file", path=path, old=bug[1], new=bug[0])
    return call("write_file", path=path, content=task.reference_source)


def expert_plan(task: RepoTask) -> list[str]:
    test_file = task.test_paths()[0]
    failing = _first_failing_dev_test(task)
    return [
        call("read_file", path=test_file),
        call("search_code", pattern=f"def {task.meta.entry_point}"),
        call("read_file", path=task.meta.source_path),
        _fix_action(task),
        call("run_tests", target=f"{test_file}::test_{failing}"),
        call("run_tests", target="all"),
        call("submit"),
    ]


def direct_plan(task: RepoTask) -> list[str]:
    """The expert's shortest workflow: search, read the source, fix, run all tests, submit.

    Each call follows from the last observation alone (search hits -> read that file -> its text ->
    fix -> "wrote" -> run the tests -> a test report -> submit), which a small policy can imitate
    without counting its own turns; it still reads before it writes and tests after it modifies.
    """
    return [
        call("search_code", pattern=f"def {task.meta.entry_point}"),
        call("read_file", path=task.meta.source_path),
        _fix_action(task),
        call("run_tests", target="all"),
        call("submit"),
    ]


def short_plan(task: RepoTask) -> list[str]:
    """Read the one source file the issue's file list names, fix, run all tests, submit.

    Every procedural repository has one source module, listed in the first observation, so the
    policy copies its path from there instead of finding it by searching for a name (the hardest copy
    for a small model: the name's first word follows a backtick in the issue and a space in the call).
    """
    return [
        call("read_file", path=task.meta.source_path),
        _fix_action(task),
        call("run_tests", target="all"),
        call("submit"),
    ]


_TOKEN = re.compile(r"\w+|\S")


def minimal_edit(buggy: str, fixed: str) -> tuple[str, str]:
    """The smallest ``(old, new)`` that turns line ``buggy`` into ``fixed`` with ``old`` unique in it.

    Tokens (words and single symbols) common to both ends are kept; what is between them is the edit,
    with the whitespace around it (``"for i in range(n - 1):"`` -> ``"for i in range(n):"`` gives
    ``(" - 1", "")``). When that piece is blank or occurs twice in ``buggy``, it grows by one token at a
    time, alternately on the left and the right, up to the whole line.
    """
    if buggy == fixed:
        raise ValueError(f"the two lines are the same ({buggy!r}): there is nothing to edit")
    b = [m.span() for m in _TOKEN.finditer(buggy)]
    f = [m.span() for m in _TOKEN.finditer(fixed)]
    same = lambda i, j: buggy[slice(*b[i])] == fixed[slice(*f[j])]  # noqa: E731
    left = 0
    while left < min(len(b), len(f)) and same(left, left):
        left += 1
    right = 0
    while right < min(len(b), len(f)) - left and same(-1 - right, -1 - right):
        right += 1
    for turn in range(len(b) + len(f) + 1):
        old = buggy[b[left - 1][1] if left else 0 : b[-right][0] if right else len(buggy)]
        new = fixed[f[left - 1][1] if left else 0 : f[-right][0] if right else len(fixed)]
        if old.strip() and buggy.count(old) == 1:
            return old, new
        if left and (turn % 2 == 0 or not right):
            left -= 1
        elif right:
            right -= 1
        else:
            break
    return buggy, fixed


def line_fix(task: RepoTask) -> tuple[int, str, str] | None:
    """``(line, old, new)`` of the expert's line edit, or None when the bug is not one unique line."""
    bug = _one_line_bug(task)
    lines = task.buggy_source.split("\n")
    if bug is None or bug[1] not in lines:  # the buggy text must be a whole line
        return None
    before, after = bug
    return lines.index(after) + 1, *minimal_edit(after, before)


def _line_fix_action(task: RepoTask) -> str:
    fix = line_fix(task)
    if fix is None:
        return _fix_action(task)
    line, old, new = fix
    return call("edit_file", path=task.meta.source_path, line=str(line), old=old, new=new)


def lines_plan(task: RepoTask) -> list[str]:
    """Like :func:`short_plan`, but the fix is a line edit: the line number ``read_file`` shows, and
    the smallest piece of that line that changes (:func:`minimal_edit`), such as ``" >= "`` -> ``" > "``.

    A small policy copies a short piece and a number far more reliably than a whole line: with the
    whole line, a tiny policy tends to write the line of a similar function it memorised.
    """
    return [
        call("read_file", path=task.meta.source_path),
        _line_fix_action(task),
        call("run_tests", target="all"),
        call("submit"),
    ]


def recovery_plan(task: RepoTask, decoy: RepoTask) -> list[str] | None:
    """:func:`lines_plan` with a failed first edit: ``decoy``'s line edit, tried on ``task``'s file.

    None unless that edit fails as a tool error on ``task`` (its line does not exist, or the piece
    does not occur once there), so the file is unchanged and the expert can go on with the right fix.
    Demonstrations made from it show a policy what to do after an error: make the right edit.
    """
    wrong, fix = line_fix(decoy), line_fix(task)
    if wrong is None or fix is None:
        return None
    line, old, new = wrong
    lines = task.buggy_source.split("\n")
    if line <= len(lines) and lines[line - 1].count(old) == 1:
        return None
    plan = lines_plan(task)
    path = task.meta.source_path
    return [plan[0], call("edit_file", path=path, line=str(line), old=old, new=new), *plan[1:]]


PLANS = {"full": expert_plan, "direct": direct_plan, "short": short_plan, "lines": lines_plan}
"""The expert workflows by name (what an experiment's ``workflow`` setting picks)."""


def _first_failing_dev_test(task: RepoTask) -> int:
    """Index of a developer test the bug breaks (from provenance when recorded, else 0)."""
    idx = task.meta.provenance.get("failing_dev_test")
    return int(idx) if isinstance(idx, int) and 0 <= idx < len(task.dev_tests) else 0


class NaiveAgent:
    """Writes a patch without reading the source (an early-training attempt), then tests and submits.

    Without reading, it cannot know the code: its patch is a blind one-line edit (a random mutation of
    the entry point, which it has only seen in a search hit), written over the whole module.
    """

    name = "naive"

    def begin(self, task: RepoTask, seed: int) -> None:
        patch = entry_point_only(
            blind_edit(task.buggy_source, task.meta.entry_point, seed), task.meta.entry_point
        )
        self.plan = [
            call("read_file", path=task.test_paths()[0]),
            call("search_code", pattern=f"def {task.meta.entry_point}"),
            call("write_file", path=task.meta.source_path, content=patch),
            call("run_tests"),
            call("submit"),
        ]

    def act(self, observation: str) -> str:
        return self.plan.pop(0) if self.plan else call("submit")


def blind_edit(source: str, entry_point: str, seed: int) -> str:
    """A random one-line mutation of the entry point (the source itself if none applies)."""
    from transferlab.coding_rl.tasks.mutations import mutate

    mutants = [m for found in mutate(source, entry_point, seed=seed, per_operator=1) for m in found.picked]
    return random.Random(seed).choice(mutants).buggy if mutants else source


def entry_point_only(source: str, entry_point: str) -> str:
    """Just the entry point's definition: what a patch written without reading the file keeps."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            return ast.unparse(node) + "\n"
    return source


class RandomAgent:
    """Valid JSON calls to random tools with random arguments; submits with small probability."""

    name = "random"

    def begin(self, task: RepoTask, seed: int) -> None:
        self.rng = random.Random(seed)
        self.files = sorted(task.files)
        self.words = sorted(
            {w for text in task.files.values() for w in text.split() if w.isidentifier()}
        ) or ["x"]

    def act(self, observation: str) -> str:
        rng, path = self.rng, self.rng.choice(self.files)
        tool = rng.choices(
            ["read_file", "search_code", "write_file", "edit_file", "run_tests", "submit"],
            weights=[3, 2, 1, 2, 2, 1],
        )[0]
        if tool == "read_file":
            return call(tool, path=path)
        if tool == "search_code":
            return call(tool, pattern=rng.choice(self.words))
        if tool == "write_file":
            return call(tool, path=path, content=" ".join(rng.choices(self.words, k=5)) + "\n")
        if tool == "edit_file":
            return call(tool, path=path, old=rng.choice(self.words), new=rng.choice(self.words))
        if tool == "run_tests":
            return call(tool)
        return call("submit")


AGENTS: dict[str, type] = {"expert": ExpertAgent, "naive": NaiveAgent, "random": RandomAgent}


def make_agent(name: str) -> ScriptedAgent:
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose one of {sorted(AGENTS)}")
    agent: ScriptedAgent = AGENTS[name]()
    return agent

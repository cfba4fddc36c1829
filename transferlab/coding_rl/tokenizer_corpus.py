"""The coding agent's tokenizer corpus: repository tasks as texts, and the tool-call language.

:func:`corpus_texts` is what :func:`~transferlab.agent_rl.policies.tokenizer.train_tokenizer` is
trained on for ``CodeRepair-v0``: per task an environment-style intro, the repository's files, the
scripted expert's tool calls and synthetic calls of all six tools (:func:`synthetic_tool_calls`). It
reads repository tasks, so it lives with the coding domain, not with the policies.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Iterable, Iterator
from typing import Final

from transferlab.coding_rl.tasks.repo_task import RepoTask

__all__ = ["corpus_texts", "default_texts", "synthetic_tool_calls"]

_IDENT: Final = re.compile(r"\b(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")


def _identifiers(text: str) -> list[str]:
    return _IDENT.findall(text)


def synthetic_tool_calls(task: RepoTask, rng: random.Random) -> list[str]:
    """JSON calls of all six tools on ``task`` (``json.dumps`` format, as the scripted agents write)."""
    from transferlab.coding_rl.env.workspace import TOOLS

    def call(action: str, **args: str) -> str:
        return json.dumps({"action": action, **args})

    paths = sorted(task.files)
    source = task.meta.source_path
    names = _identifiers(task.buggy_source) or [task.meta.entry_point]
    tests = task.test_paths()
    calls = [call("read_file", path=p) for p in paths]
    calls += [call("search_code", pattern=f"def {n}") for n in names]
    calls.append(call("search_code", pattern=rng.choice(names)))
    bug = task.meta.bug
    calls.append(call("edit_file", path=source, old=bug.after.strip("\n"), new=bug.before.strip("\n")))
    calls.append(call("write_file", path=source, content=task.buggy_source))
    calls.append(call("run_tests"))
    calls.append(call("run_tests", target="all"))
    for test_file in tests:
        calls.append(call("run_tests", target=test_file))
        calls.append(
            call("run_tests", target=f"{test_file}::test_{rng.randrange(max(1, len(task.dev_tests)))}")
        )
    calls.append(call("submit"))
    covered = {json.loads(c)["action"] for c in calls}
    missing = set(TOOLS) - covered
    assert not missing, f"synthetic tool calls miss {missing}"  # keeps this in step with the env's tools
    return calls


def _intro(task: RepoTask) -> str:
    """An observation shaped like the environment's first one (issue, files, tools)."""
    from transferlab.coding_rl.env.workspace import TOOLS

    tools = ", ".join(f"{name}({', '.join(args)})" for name, args in TOOLS.items())
    return "\n".join(
        [
            f"Issue: {task.meta.issue}",
            "",
            "Repository files:",
            *(f"  {f}" for f in sorted(task.files)),
            "",
            f"Tools, one JSON object per turn: {tools}; run_tests takes an optional target "
            '("all", a test file, or "file::test_<i>").',
        ]
    )


def corpus_texts(tasks: Iterable[RepoTask], seed: int = 0) -> Iterator[str]:
    """Training texts for the tokenizer, in a deterministic order.

    Per task: an environment-style intro (issue, file list, tool list), every repository file
    (source and developer tests), the scripted expert's tool calls and synthetic JSON calls of all six
    tools (:func:`synthetic_tool_calls`, random choices from ``random.Random(seed)``). The reference
    (fixed) source and hidden tests are not used.
    """
    from transferlab.coding_rl.agents import expert_plan

    rng = random.Random(seed)
    for task in tasks:
        yield _intro(task)
        for path in sorted(task.files):
            yield task.files[path]
        yield from expert_plan(task)
        yield from synthetic_tool_calls(task, rng)
        yield f"wrote {task.meta.source_path}"
        yield f"=== {task.meta.source_path} ===\n{task.buggy_source}"


@functools.cache
def default_texts() -> tuple[str, ...]:
    """The coding agent's tokenizer corpus on the toy tasks (what the experiments' tokenizer reads).

    Built once per process (it renders every toy repository)."""
    from transferlab.coding_rl.tasks.toy import toy_repo_tasks, toy_solution, toy_tasks

    code_train, _ = toy_tasks(0.25, 0)  # training text only: no held-out task shapes the vocabulary
    repo_train, _ = toy_repo_tasks(0.25, 0)
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in code_train]
    return tuple(texts * 10 + list(corpus_texts(repo_train)) * 3)

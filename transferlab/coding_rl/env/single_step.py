"""Single-step code tasks as a one-turn tool environment, and the coding env factories the trainers name.

A :class:`CodeTaskEnv` plays one :class:`~transferlab.coding_rl.tasks.code_task.CodeTask` per episode:
``reset`` gives the prompt (the description and the signature), ``step(body)`` runs the signature and
the body against every test of the task in the sandbox and ends the episode with the verifier's reward.
With it the agent-RL stack (:mod:`transferlab.agent_rl`) trains single-step code tasks as it trains
CodeRepair-v0 and OpsAnalysis-v0: through an env factory named in ``RLConfig.env_factory``.

The factories (:func:`code_task_env`, :func:`code_repair_env`) grade in one sandbox per process
(:func:`process_sandbox`), opened on first use and closed when the process exits, unless the caller
hands one in (``sandbox=``, for a worker in the caller's process).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Sequence
from typing import Any

from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.platform.agent_env import FAILED, RewardTable, Task

__all__ = [
    "CodeTaskEnv",
    "candidate_source",
    "code_repair_env",
    "code_task_env",
    "process_sandbox",
    "prompt_text",
]

_SANDBOXES: dict[str, SandboxBackend] = {}
_LOCK = threading.Lock()


def prompt_text(task: CodeTask) -> str:
    """What the policy is asked: the task's description, then its signature."""
    return f"{task.task_description}\n{task.function_signature}"


def candidate_source(task: CodeTask, body: str) -> str:
    """What the sandbox runs: the signature followed by the policy's body."""
    return f"{task.function_signature}\n{body.rstrip()}\n"


def process_sandbox(backend: str = "forkserver") -> SandboxBackend:
    """This process's sandbox of ``backend`` (one worker), opened on first use, closed at exit."""
    with _LOCK:
        if backend not in _SANDBOXES:
            opened, _, _ = open_backend(SandboxConfig(backend=backend, workers=1))
            _SANDBOXES[backend] = opened
            atexit.register(opened.close)
        return _SANDBOXES[backend]


def _code_table() -> RewardTable:
    """The verifier's components, each paid as the verifier weighs it (weight 1 per point)."""
    names = ("executes", "pass_rate", "efficient")
    return RewardTable(weights={**dict.fromkeys(names, 1.0), FAILED: 0.0}, final=(*names, FAILED))


class CodeTaskEnv:
    """One code task per episode, one turn: the answer is the function's body, graded in the sandbox."""

    domain = "coding"
    max_steps = 1

    def __init__(self, tasks: Sequence[CodeTask], sandbox: SandboxBackend) -> None:
        self.tasks = list(tasks)
        self.verifier = Verifier(sandbox)
        self.rewards = _code_table()
        self.last_timings: dict[str, float] = {}
        self._task: CodeTask | None = None
        self._last: str | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task"]`` (else the first task); the prompt."""
        task = (options or {}).get("task", self.tasks[0] if self.tasks else None)
        if not isinstance(task, CodeTask):
            raise ValueError(f"CodeTaskEnv plays code tasks (CodeTask), got {type(task).__name__}")
        self._task = task
        self._last = prompt_text(task)
        return self._last, {"task_id": task.task_id}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade ``action`` as the body; the episode ends (observation: the verdict's status)."""
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        t0 = time.perf_counter()
        grade = self.verifier.grade(self._task, candidate_source(self._task, action))
        self.last_timings = {"sandbox_s": time.perf_counter() - t0}
        self._last = grade.status
        info = {
            "components": dict(grade.reward_components),
            "success": grade.status == "passed",
            "tool": None,
        }
        return grade.status, float(grade.reward), True, False, info

    def render(self) -> str | None:
        """The last observation."""
        return self._last

    def close(self) -> None:
        """Nothing to release: the sandbox belongs to the process (or to the caller)."""


def code_task_env(
    tasks: Sequence[Task],
    *,
    rewards: str = "dense",
    max_steps: int = 1,
    sandbox: SandboxBackend | None = None,
    sandbox_backend: str = "forkserver",
) -> CodeTaskEnv:
    """The single-step env as a :class:`~transferlab.platform.agent_env.ToolEnvFactory` (``rewards`` and
    ``max_steps`` are accepted for the factory's signature: one turn, the verifier's reward)."""
    code = [t for t in tasks if isinstance(t, CodeTask)]
    if len(code) != len(tasks):
        other = next(type(t).__name__ for t in tasks if not isinstance(t, CodeTask))
        raise ValueError(
            f"the single-step code env plays CodeTasks, got a {other}; use the env of its domain"
        )
    return CodeTaskEnv(code, sandbox if sandbox is not None else process_sandbox(sandbox_backend))


def code_repair_env(
    tasks: Sequence[Task],
    *,
    rewards: str = "dense",
    max_steps: int = 10,
    sandbox: SandboxBackend | None = None,
    sandbox_backend: str = "forkserver",
) -> Any:
    """CodeRepair-v0 on this process's sandbox (or ``sandbox``), as an env factory."""
    from transferlab.coding_rl.env.code_repair import code_repair_env as make

    box = sandbox if sandbox is not None else process_sandbox(sandbox_backend)
    return make(tasks, rewards=rewards, max_steps=max_steps, sandbox=box)

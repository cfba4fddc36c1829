"""`IdentityEnv`: the trainer's smallest tool environment — repeat the word the observation names.

A sanity task family for the RL loop (the RL analogue of fitting one batch): deterministic, instant, no
sandbox. If GRPO or PPO cannot raise success here within a few steps, the trainer is broken, whatever
the coding results say (``tests/agent_rl/test_identity_learns.py``).

It implements the agent-environment contract (:mod:`transferlab.platform.agent_env`) like
``CodeRepair-v0`` and ``OpsAnalysis-v0`` do, so the real loop trains on it unchanged::

    RLConfig(mode="agent", env_factory="transferlab.agent_rl.identity_env:identity_env_factory")

with :func:`identity_tasks` as the tasks.

>>> env = IdentityEnv(identity_tasks(2, seed=0))
>>> env.tasks[0].target
'red'
>>> env.reset(options={"task": env.tasks[0]})[0]
'Repeat this word:\\nred'
>>> env.step(" red\\n")[1:4]
(1.0, True, False)
>>> _ = env.reset(options={"task": env.tasks[0]})
>>> env.step("blue")[:4]
('wrong: expected red', -1.0, True, False)
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium import spaces

from transferlab.platform.agent_env import FAILED, RewardTable, finish_step
from transferlab.platform.tools import CHARSET, MAX_TEXT, to_charset

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain

__all__ = [
    "DENSE_IDENTITY_REWARDS",
    "IDENTITY_EVENTS",
    "SPARSE_IDENTITY_REWARDS",
    "WORDS",
    "IdentityEnv",
    "IdentityTask",
    "identity_corpus",
    "identity_env_factory",
    "identity_reward_table",
    "identity_tasks",
]

WORDS: tuple[str, ...] = ("red", "green", "blue", "gold")
"""The targets a task may name (a tokenizer trained on :func:`identity_corpus` makes each one token)."""

PROMPT = "Repeat this word:\n{target}"
"""The first observation; the target follows a newline, so it is the same token the answer is."""

DENSE_IDENTITY_REWARDS = RewardTable(
    weights={"correct": 1.0, FAILED: -1.0, "no_answer": -0.1},
    descriptions={
        "correct": "the answer is the target word (ends the episode; success)",
        FAILED: "another word (ends the episode), the step limit, or a rollout's context/timeout cut",
        "no_answer": "an empty answer (the episode goes on until the step limit)",
    },
    final=("correct", FAILED),
)
"""Dense table: every ending pays +1 (correct) or -1 (``task_failed``); an empty answer costs 0.1."""

SPARSE_IDENTITY_REWARDS = DENSE_IDENTITY_REWARDS.model_copy(update={"end_only": True})
"""Sparse table: only the endings (``correct`` / ``task_failed``)."""

IDENTITY_EVENTS: tuple[str, ...] = tuple(DENSE_IDENTITY_REWARDS.weights)
"""Every event the env records (a table must weigh them all)."""


def identity_reward_table(mode: str) -> RewardTable:
    """The ``"dense"`` or ``"sparse"`` table."""
    tables = {"dense": DENSE_IDENTITY_REWARDS, "sparse": SPARSE_IDENTITY_REWARDS}
    if mode not in tables:
        raise ValueError(f"error: unknown reward mode {mode!r} for IdentityEnv; use 'dense' or 'sparse'")
    return tables[mode]


@dataclass(frozen=True)
class IdentityTask:
    """One task: the word to repeat (a :class:`~transferlab.platform.agent_env.Task`)."""

    task_id: str
    target: str
    split: str = "train"
    seed: int = 0

    @property
    def domain(self) -> Domain:
        """``coding``: the coding trainer's sanity family."""
        return "coding"

    @property
    def provenance(self) -> dict[str, Any]:
        """The generator and its seed."""
        return {"source": "identity", "seed": self.seed}


def identity_tasks(
    n: int, seed: int = 0, split: str = "train", words: Sequence[str] = WORDS
) -> list[IdentityTask]:
    """``n`` tasks with balanced targets: ``words`` cycled (each within one of the others' count), in an
    order shuffled by ``random.Random(seed)``."""
    if n < 1:
        raise ValueError(f"error: n must be >= 1, got {n}")
    if not words:
        raise ValueError("error: no words to draw targets from; pass at least one word")
    targets = [words[i % len(words)] for i in range(n)]
    random.Random(seed).shuffle(targets)
    return [
        IdentityTask(task_id=f"identity-{split}-{seed}-{i:04d}", target=t, split=split, seed=seed)
        for i, t in enumerate(targets)
    ]


def identity_corpus(words: Sequence[str] = WORDS, repeats: int = 8) -> list[str]:
    """Texts to train a tokenizer on so that every word (bare, after a newline) is a single token."""
    return [text for _ in range(repeats) for w in words for text in (PROMPT.format(target=w), w)]


class IdentityEnv(gym.Env[str, str]):
    """Repeat the word the observation names.

    ## Description
    The textbook identity task as a tool environment: the first observation names a target word; the
    correct action is that word. Deterministic, instant, no sandbox.

    ## Action Space
    ``Text(max_length=32768)``: the answer, compared after stripping surrounding whitespace.

    ## Observation Space
    ``Text(max_length=32768)`` over printable ASCII: ``"Repeat this word:\\n{target}"`` after reset;
    ``"correct"``, ``"wrong: expected {target}"`` or ``"no answer; say the word"`` after a step.

    ## Rewards
    :data:`DENSE_IDENTITY_REWARDS` or :data:`SPARSE_IDENTITY_REWARDS` (or any table weighing
    :data:`IDENTITY_EVENTS`): ``correct`` +1, ``task_failed`` -1, ``no_answer`` -0.1 (dense only).

    ## Starting State
    ``options={"task": task}`` plays that :class:`IdentityTask`; otherwise a task is drawn from
    ``tasks`` with ``self.np_random``.

    ## Episode End
    ``terminated`` on the first non-empty answer (success when it is the target, else ``task_failed``);
    ``truncated`` after ``max_steps`` empty answers (``task_failed``). A rollout may also cut an episode
    at its context limit or timeout (``info["cut"]``), paying ``task_failed``.

    ## Arguments
    ``tasks`` (at least one), ``rewards`` ("dense", "sparse" or a table), ``max_steps`` (1).
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (Gymnasium declares it an instance attribute)
    domain: Domain = "coding"

    def __init__(
        self,
        tasks: Sequence[IdentityTask],
        rewards: str | RewardTable = "dense",
        max_steps: int = 1,
        render_mode: str | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("error: IdentityEnv needs at least one task; pass identity_tasks(n)")
        if max_steps < 1:
            raise ValueError(f"error: max_steps must be >= 1, got {max_steps}")
        self.tasks = list(tasks)
        self.rewards = identity_reward_table(rewards) if isinstance(rewards, str) else rewards
        self.rewards.require(IDENTITY_EVENTS, "IdentityEnv")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self.task: IdentityTask | None = None
        self.steps = 0
        self.done = True
        self._last_obs = ""
        self.last_timings: dict[str, float] = {"env_s": 0.0}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            if not isinstance(task, IdentityTask):
                raise ValueError(
                    f'error: options["task"] must be an IdentityTask, got {type(task).__name__}; build '
                    "tasks with identity_tasks(n)"
                )
            self.task = task
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.steps = 0
        self.done = False
        self._last_obs = to_charset(PROMPT.format(target=self.task.target))
        return self._last_obs, {
            "task_id": self.task.task_id,
            "split": self.task.split,
            "max_steps": self.max_steps,
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.done:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        t0 = time.perf_counter()
        self.steps += 1
        answer = action.strip()
        events: dict[str, float] = {}
        info: dict[str, Any] = {
            "step": self.steps,
            "tool": "answer",
            "tool_ok": bool(answer),
            "success": None,
        }
        terminated = bool(answer)
        if not answer:
            events["no_answer"] = 1
            text = "no answer; say the word"
        elif answer == self.task.target:
            events["correct"] = 1
            info["success"] = True
            text = "correct"
        else:
            events[FAILED] = 1
            info["success"] = False
            text = f"wrong: expected {self.task.target}"
        out = finish_step(
            text,
            events,
            info,
            terminated=terminated,
            step=self.steps,
            max_steps=self.max_steps,
            table=self.rewards,
            ending="an answer",
        )
        if out.truncated:
            info["success"] = False
        info["reward_components"] = info["components"]
        self.done = out.terminated or out.truncated
        self._last_obs = out.observation
        self.last_timings = {"env_s": time.perf_counter() - t0}
        return out

    def render(self) -> str | None:  # type: ignore[override]
        return self._last_obs if self.render_mode == "ansi" else None


def identity_env_factory(tasks: Sequence[IdentityTask], *, rewards: str, max_steps: int) -> IdentityEnv:
    """One episode's :class:`IdentityEnv` (a :class:`~transferlab.platform.agent_env.ToolEnvFactory`)."""
    return IdentityEnv(tasks, rewards=rewards, max_steps=max_steps)

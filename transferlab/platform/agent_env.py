"""The agent-environment contract both domains implement: a task, a tool environment, a reward table.

A tool environment (``CodeRepair-v0``, ``OpsAnalysis-v0``) plays one :class:`Task` per episode. The
policy writes one JSON tool call per step (:mod:`transferlab.platform.tools`) and reads text back;
every step's reward is a sum of named components weighed by a :class:`RewardTable`. The trainers and
rollout code see only :class:`Task` and :class:`ToolEnv`, so one trainer trains either domain.

* :class:`Task` — what the trainer and the trajectories need of a task: its id, domain, split and
  provenance. An environment knows how to turn its own tasks into a first observation.
* :class:`ToolEnv` — ``reset(seed=, options={"task": task})`` gives the first observation,
  ``step(action)`` gives ``(observation, reward, terminated, truncated, info)`` with
  ``info["components"]`` (the step's weighed reward components) and ``info["events"]`` (what happened);
  ``max_steps`` is the step limit, ``rewards`` the table it pays by, ``render()`` the last observation
  (``render_mode="ansi"``), ``last_timings`` the seconds the last step spent (kept out of ``info``,
  which is deterministic).
* :class:`ToolEnvFactory` — builds one episode's environment as ``f(tasks, rewards=, max_steps=, **options)``.
* :class:`RewardTable` — named components and their weights; :meth:`RewardTable.weigh` pays a step.
* :func:`finish_step` — the tail every step shares: the step limit, the weighed reward and the
  observation within the text space.
* :func:`cut_penalty` — the terminal reward of an episode the rollout cut (context limit, timeout).

**Endings.** Every way an episode can end pays a defined terminal reward, in every table:

=============  ===========================================  =====================================
ending         who ends it                                  terminal component(s)
=============  ===========================================  =====================================
submit         the env (``terminated``; submit / report)    the domain's success component(s), or
                                                            ``task_failed`` on a failed submit
                                                            (coding)
step limit     the env (``truncated``; :func:`finish_step`) ``task_failed``
context limit  the rollout (``info["cut"] = "context"``)    ``task_failed`` (:func:`cut_penalty`)
timeout        the rollout (``info["cut"] = "timeout"``)    ``task_failed`` (:func:`cut_penalty`)
=============  ===========================================  =====================================

``task_failed`` is a ``final`` component, so a sparse (``end_only``) table pays it too: running out of
context or time never pays more than running out of steps. Each domain's table states the amounts.

>>> table = RewardTable(
...     weights={"query": 0.5, "task_complete": 20.0, "task_failed": -5.0},
...     final=("task_complete", "task_failed"),
... )
>>> table.weigh({"query": 2, "task_complete": 1})
(21.0, {'query': 1.0, 'task_complete': 20.0})
>>> table.model_copy(update={"end_only": True}).weigh({"query": 2, "task_complete": 1})
(20.0, {'task_complete': 20.0})
>>> step = finish_step("ok", {"query": 1}, {}, terminated=False, step=3, max_steps=3, table=table,
...                    ending="a report")
>>> step.observation, step.reward, step.truncated, step.info["events"]
('ok\\n(step limit of 3 reached without a report)', -4.5, True, {'query': 1, 'task_failed': 1})
>>> cut_penalty(table, "context")
(-5.0, {'task_failed': -5.0})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from pydantic import Field, model_validator

from transferlab.platform.config import BaseConfig
from transferlab.platform.tools import to_charset

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain

__all__ = [
    "CUT_REASONS",
    "FAILED",
    "RewardTable",
    "StepResult",
    "Task",
    "ToolEnv",
    "ToolEnvFactory",
    "cut_penalty",
    "finish_step",
]

FAILED = "task_failed"
"""The component every tool environment records when an episode hits its step limit unfinished (and
the rollout records when it cuts one, :func:`cut_penalty`)."""

CUT_REASONS: tuple[str, ...] = ("context", "timeout")
"""Why a rollout may end an episode the env itself has not ended (``info["cut"]`` of the last step)."""


@runtime_checkable
class Task(Protocol):
    """A task of a tool environment, as the trainer and the trajectories see it."""

    @property
    def task_id(self) -> str:
        """A stable id, unique within the domain."""
        ...

    @property
    def domain(self) -> Domain:
        """``coding`` or ``ecommerce`` (the trajectories' domain)."""
        ...

    @property
    def split(self) -> str:
        """The task's split (training or held-out, in the domain's spelling)."""
        ...

    @property
    def provenance(self) -> Mapping[str, Any]:
        """Where the task came from (source, generator, seed)."""
        ...


@runtime_checkable
class ToolEnv(Protocol):
    """A text tool environment: one task per episode, one JSON tool call per step."""

    domain: Domain
    """The domain its trajectories are recorded under."""
    max_steps: int
    """Steps per episode; the step that reaches it without finishing is ``truncated``."""
    rewards: RewardTable
    """The table every step is weighed by (and an episode the rollout cuts, :func:`cut_penalty`)."""
    last_timings: dict[str, float]
    """Seconds the last step spent (``env_s``, and ``sandbox_s`` where a sandbox ran)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode (``options={"task": task}`` plays that task); the first observation."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One tool call: observation, reward, terminated, truncated, info (with ``components``)."""
        ...

    def render(self) -> str | None:
        """The last observation when built with ``render_mode="ansi"``, else None."""
        ...

    def close(self) -> None:
        """Release what the environment holds (workspaces, sandboxes)."""
        ...


class ToolEnvFactory(Protocol):
    """Builds one episode's environment (``RLConfig.env_factory`` names one as ``module:function``)."""

    def __call__(self, tasks: Sequence[Any], *, rewards: str, max_steps: int, **options: Any) -> ToolEnv: ...


class RewardTable(BaseConfig):
    """Named per-step reward components and their weights (one type for every tool environment).

    A step records events (``{"tool_error": 1}``, or a score such as ``{"report_score": 7.5}``);
    :meth:`weigh` multiplies each by its component's weight. An ``end_only`` (sparse) table pays only
    the ``final`` components. A weight of 0 switches a component off; it is still recorded.
    """

    weights: dict[str, float] = Field(description="Component name -> weight per event (or per point).")
    descriptions: dict[str, str] = Field(
        default_factory=dict, description="Component name -> when it is paid (documentation)."
    )
    final: tuple[str, ...] = Field(
        default=(), description="The components paid at the episode's end (all a sparse table pays)."
    )
    end_only: bool = Field(default=False, description="Sparse: pay only the final components.")

    @model_validator(mode="after")
    def _known_names(self) -> RewardTable:
        unknown = sorted((set(self.descriptions) | set(self.final)) - set(self.weights))
        if unknown:
            raise ValueError(
                f"descriptions or final name components without a weight: {unknown}; add them to weights"
            )
        return self

    def __getitem__(self, name: str) -> float:
        """The weight of component ``name``."""
        if name not in self.weights:
            raise KeyError(f"no reward component {name!r}; this table has {sorted(self.weights)}")
        return self.weights[name]

    def require(self, names: Iterable[str], env: str) -> None:
        """Raise ``ValueError`` unless the table weighs every event ``env`` records."""
        missing = sorted(set(names) - set(self.weights))
        if missing:
            raise ValueError(
                f"the reward table has no weight for {missing}, which {env} records; add them to "
                "weights (start from the environment's dense table)"
            )

    def weigh(self, events: Mapping[str, float]) -> tuple[float, dict[str, float]]:
        """The step's total and components: each event's count (or score) times its weight."""
        components = {
            name: self[name] * count
            for name, count in events.items()
            if not (self.end_only and name not in self.final)
        }
        return float(sum(components.values())), components


class StepResult(NamedTuple):
    """What a tool environment's ``step`` returns (a plain 5-tuple to Gymnasium)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def finish_step(
    text: str,
    events: dict[str, float],
    info: dict[str, Any],
    *,
    terminated: bool,
    step: int,
    max_steps: int,
    table: RewardTable,
    ending: str,
) -> StepResult:
    """The tail of every tool step: the step limit, the weighed reward, the observation's charset.

    A step that reaches ``max_steps`` without ``terminated`` is truncated: it records ``task_failed``
    and the observation says the limit was reached without ``ending`` (e.g. ``"a submit"``).
    ``info`` gains ``components`` and ``events``.
    """
    truncated = not terminated and step >= max_steps
    if truncated:
        events[FAILED] = 1
        text += f"\n(step limit of {max_steps} reached without {ending})"
    reward, components = table.weigh(events)
    info.update(components=components, events=events)
    return StepResult(to_charset(text), reward, terminated, truncated, info)


def cut_penalty(table: RewardTable, reason: str) -> tuple[float, dict[str, float]]:
    """The terminal reward of an episode the rollout cut for ``reason`` (one of :data:`CUT_REASONS`).

    The same as the step limit's: one ``task_failed`` event weighed by ``table`` (so a sparse table pays
    it too, ``task_failed`` being final). Returns ``(reward, components)`` to add to the last step.
    Raises ``ValueError`` for another reason or a table without a ``task_failed`` weight.
    """
    if reason not in CUT_REASONS:
        raise ValueError(
            f"unknown cut reason {reason!r}; a rollout cuts for one of {list(CUT_REASONS)} (the env pays "
            "its own endings: submit and step limit)"
        )
    table.require([FAILED], f"an episode cut by its {reason} limit")
    return table.weigh({FAILED: 1})

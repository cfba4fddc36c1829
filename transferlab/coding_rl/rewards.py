"""Code rewards as plain functions: executes +1, pass rate x 10, efficient +1.

The weights, the dense and sparse agent tables and the worked example below (a quick sort that
passes 60% of its tests earns 8.0, an advantage of +0.5 against an expected 7.5) are those of the
project's founding design note.

How each way a CodeRepair-v0 episode can end pays (the terminal component; a dense table also pays the
last step's other components, e.g. ``tool_error`` -1 for a garbled last call):

===================================  ===============  ===============
ending                               dense            sparse
===================================  ===============  ===============
submit, verifier passes              task_complete    task_complete
                                     +20              +20
submit, verifier fails               task_failed 0    task_failed -5
step limit (env, ``truncated``)      task_failed 0    task_failed -5
context limit (rollout cut)          task_failed 0    task_failed -5
timeout (rollout cut)                task_failed 0    task_failed -5
===================================  ===============  ===============

The rollout pays the context and timeout cuts with
:func:`~transferlab.platform.agent_env.cut_penalty`, the step limit's ``task_failed``; so in the sparse
table an episode that runs out of context or time returns -5, exactly what a failed submit or the step
limit returns, never more.

>>> spec = CodeRewardSpec()
>>> code_reward(executed=True, pass_rate=0.6, efficient=True, spec=spec).total
8.0
>>> advantage(8.0, baseline=7.5)
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from transferlab.platform.agent_env import RewardTable
from transferlab.platform.config import BaseConfig


class CodeRewardSpec(BaseConfig):
    """Weights of the code reward's components; saved with every run that uses it."""

    executes: float = Field(default=1.0, description="Paid when the code loads and runs.")
    pass_rate: float = Field(default=10.0, description="Multiplies the fraction of tests passed (0..1).")
    efficient: float = Field(
        default=1.0,
        description="Paid when a test passes and the run stays within the task's efficiency budget.",
    )


@dataclass(frozen=True)
class RewardBreakdown:
    """Named reward components and their sum."""

    components: dict[str, float]

    @property
    def total(self) -> float:
        return round(sum(self.components.values()), 10)


def code_reward(
    *, executed: bool, pass_rate: float, efficient: bool, spec: CodeRewardSpec
) -> RewardBreakdown:
    """The code reward: `executes` if it ran, `pass_rate` x share passed, `efficient` if fast and useful."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass_rate must be in [0, 1], got {pass_rate}")
    return RewardBreakdown(
        {
            "executes": spec.executes if executed else 0.0,
            "pass_rate": spec.pass_rate * pass_rate,
            "efficient": spec.efficient if efficient else 0.0,
        }
    )


def advantage(reward: float, baseline: float) -> float:
    """A = actual reward - expected reward (the buggy quick sort: 8.0 - 7.5 = +0.5)."""
    return round(reward - baseline, 10)


CODING_EVENTS: dict[str, str] = {
    "read_file_success": "A file was read.",
    "search_code_success": "A search found matches.",
    "write_file_success": "A write or edit changed a file.",
    "tool_error": "Malformed, unknown or failed tool call.",
    "read_before_write": "The written file had been read first.",
    "write_without_read": "The written file had never been read.",
    "test_after_modify": "Tests run after a modification.",
    "redundant_action": "Same call again with nothing changed since.",
    "test_pass": "Every test of the run passed.",
    "test_fail": "At least one test of the run failed.",
    "all_tests_pass": "A run of all developer tests passed.",
    "task_complete": "Submitted and the verifier passed every test.",
    "task_failed": "Submitted and did not pass, or ended without a submit: the step limit (the env), "
    "the context limit or the timeout (the rollout's cut, cut_penalty). 0 dense, -5 sparse.",
}
"""Every event CodeRepair-v0 records, and when."""

DENSE_REWARDS = RewardTable(
    weights={
        "read_file_success": 0.5,
        "search_code_success": 0.5,
        "write_file_success": 0.5,
        "tool_error": -1.0,
        "read_before_write": 1.0,
        "write_without_read": -2.0,
        "test_after_modify": 1.5,
        "redundant_action": -0.5,
        "test_pass": 3.0,
        "test_fail": -2.0,
        "all_tests_pass": 5.0,
        "task_complete": 20.0,
        "task_failed": 0.0,
    },
    descriptions=CODING_EVENTS,
    final=("task_complete", "task_failed"),
)
"""The coding environment's dense table, the founding design note's per-step table. Every component is
recorded per step, whatever its weight. ``search_code_success`` is not in the note's table but in its
worked trajectory (step 2, +0.5). A failed submit, the step limit, the context limit and the timeout
each pay ``task_failed`` 0 (the note's table has no failure penalty); success pays +20."""
SPARSE_REWARDS = DENSE_REWARDS.model_copy(
    update={"weights": {**DENSE_REWARDS.weights, "task_failed": -5.0}, "end_only": True}
)
"""+20 on success, -5 on failure, at the end only: a failed submit, the step limit, the context limit and
the timeout each pay -5 (``task_failed``, a final component)."""


def reward_table(name: str) -> RewardTable:
    """`dense` (a reward at every step) or `sparse` (+20 on success, -5 on failure, at the end only)."""
    tables = {"dense": DENSE_REWARDS, "sparse": SPARSE_REWARDS}
    if name not in tables:
        raise ValueError(f"unknown reward table {name!r}; choose one of {sorted(tables)}")
    return tables[name].model_copy(deep=True)

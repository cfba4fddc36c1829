"""Code rewards as plain functions: executes +1, pass rate x 10, efficient +1.

The weights, the dense and sparse agent tables and the worked example below (a quick sort that
passes 60% of its tests earns 8.0, an advantage of +0.5 against an expected 7.5) are those of the
project's founding design note.

>>> spec = CodeRewardSpec()
>>> code_reward(executed=True, pass_rate=0.6, efficient=True, spec=spec).total
8.0
>>> advantage(8.0, baseline=7.5)
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

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


class AgentRewardTable(BaseConfig):
    """Per-step reward components of the agent environment (the design note's dense table by default).

    Every component is recorded per step, whatever its weight; a weight of 0 switches it off.
    `search_code_success` is not in the design note's table but in its worked trajectory (step 2,
    +0.5).
    """

    read_file_success: float = Field(default=0.5, description="A file was read.")
    search_code_success: float = Field(default=0.5, description="A search found matches.")
    write_file_success: float = Field(default=0.5, description="A write or edit changed a file.")
    tool_error: float = Field(default=-1.0, description="Malformed, unknown or failed tool call.")
    read_before_write: float = Field(default=1.0, description="The written file had been read first.")
    write_without_read: float = Field(default=-2.0, description="The written file had never been read.")
    test_after_modify: float = Field(default=1.5, description="Tests run after a modification.")
    redundant_action: float = Field(default=-0.5, description="Same call again with nothing changed since.")
    test_pass: float = Field(default=3.0, description="Every test of the run passed.")
    test_fail: float = Field(default=-2.0, description="At least one test of the run failed.")
    all_tests_pass: float = Field(default=5.0, description="A run of all developer tests passed.")
    task_complete: float = Field(default=20.0, description="Submitted and the verifier passed every test.")
    task_failed: float = Field(default=0.0, description="Submitted (or ran out of steps) and did not pass.")
    end_only: bool = Field(
        default=False, description="Sparse: pay only task_complete / task_failed, at the episode's end."
    )

    def weigh(self, events: dict[str, float]) -> dict[str, float]:
        """Components of one step: each event count times its weight (end-only tables keep the end)."""
        out: dict[str, float] = {}
        for name, count in events.items():
            if self.end_only and name not in ("task_complete", "task_failed"):
                continue
            out[name] = float(getattr(self, name)) * count
        return out


DENSE_REWARDS = AgentRewardTable()
SPARSE_REWARDS = AgentRewardTable(task_failed=-5.0, end_only=True)


def reward_table(name: str) -> AgentRewardTable:
    """`dense` (a reward at every step) or `sparse` (+20 on success, -5 on failure, at the end only)."""
    tables = {"dense": DENSE_REWARDS, "sparse": SPARSE_REWARDS}
    if name not in tables:
        raise ValueError(f"unknown reward table {name!r}; choose one of {sorted(tables)}")
    return tables[name].model_copy()

"""Code rewards as plain functions (seed 000): executes +1, pass rate x 10, efficient +1.

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
        description="Paid when at least one test passes and the run stays within the task's efficiency budget.",
    )


@dataclass(frozen=True)
class RewardBreakdown:
    """Named reward components and their sum."""

    components: dict[str, float]

    @property
    def total(self) -> float:
        return round(sum(self.components.values()), 10)


def code_reward(*, executed: bool, pass_rate: float, efficient: bool, spec: CodeRewardSpec) -> RewardBreakdown:
    """The seed's reward: `executes` if it ran, `pass_rate` x fraction passed, `efficient` if fast and useful."""
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
    """A = actual reward - expected reward (seed 000: 8.0 - 7.5 = +0.5)."""
    return round(reward - baseline, 10)

"""Code rewards (note 000): executes +1, pass rate x 10, efficient +1, and a spec that changes them."""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest

from transferlab.coding_rl import rewards
from transferlab.coding_rl.rewards import CodeRewardSpec, RewardBreakdown, advantage, code_reward
from transferlab.coding_rl.sandbox.backends import ExecutionReport, ExecutionRequest
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.code_task import task_from_dict
from transferlab.platform.config import ConfigError

DEFAULT = CodeRewardSpec()


def test_seed_example_is_eight_with_advantage_plus_half() -> None:
    breakdown = code_reward(executed=True, pass_rate=0.6, efficient=True, spec=DEFAULT)
    assert breakdown.components == {"executes": 1.0, "pass_rate": 6.0, "efficient": 1.0}
    assert breakdown.total == 8.0
    assert advantage(breakdown.total, baseline=7.5) == 0.5


@pytest.mark.parametrize(
    ("executed", "pass_rate", "efficient", "components", "total"),
    [
        (False, 0.0, False, {"executes": 0.0, "pass_rate": 0.0, "efficient": 0.0}, 0.0),
        (True, 0.0, False, {"executes": 1.0, "pass_rate": 0.0, "efficient": 0.0}, 1.0),
        (True, 1.0, True, {"executes": 1.0, "pass_rate": 10.0, "efficient": 1.0}, 12.0),
        (True, 1.0, False, {"executes": 1.0, "pass_rate": 10.0, "efficient": 0.0}, 11.0),
        (False, 0.5, False, {"executes": 0.0, "pass_rate": 5.0, "efficient": 0.0}, 5.0),
    ],
)
def test_components(
    executed: bool, pass_rate: float, efficient: bool, components: dict[str, float], total: float
) -> None:
    breakdown = code_reward(executed=executed, pass_rate=pass_rate, efficient=efficient, spec=DEFAULT)
    assert breakdown.components == components
    assert breakdown.total == total


def test_total_is_rounded_not_float_noise() -> None:
    breakdown = code_reward(executed=True, pass_rate=0.7, efficient=False, spec=CodeRewardSpec(pass_rate=0.1))
    assert breakdown.total == 1.07  # 1 + 0.1 * 0.7, not 1.0699999999999998
    assert advantage(0.1 + 0.2, baseline=0.3) == 0.0
    assert advantage(7.5, baseline=8.0) == -0.5


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf")])
def test_pass_rate_out_of_range_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="pass_rate must be in"):
        code_reward(executed=True, pass_rate=bad, efficient=False, spec=DEFAULT)


def test_a_changed_spec_changes_every_component() -> None:
    spec = CodeRewardSpec(executes=0.5, pass_rate=20.0, efficient=-1.0)
    breakdown = code_reward(executed=True, pass_rate=0.25, efficient=True, spec=spec)
    assert breakdown.components == {"executes": 0.5, "pass_rate": 5.0, "efficient": -1.0}
    assert breakdown.total == 4.5
    assert isinstance(breakdown, RewardBreakdown)


def test_spec_round_trips_through_a_saved_file(tmp_path: Path) -> None:
    spec = CodeRewardSpec(executes=2.0, pass_rate=5.0, efficient=0.0)
    path = spec.save(tmp_path / "reward.json")
    assert CodeRewardSpec.from_file(path) == spec
    assert CodeRewardSpec.from_dict(spec.to_dict()) == spec


def test_spec_rejects_unknown_keys_and_bad_types() -> None:
    with pytest.raises(ConfigError):
        CodeRewardSpec.from_dict({"executes": 1.0, "bonus": 3.0})
    with pytest.raises(ConfigError):
        CodeRewardSpec.from_dict({"pass_rate": "lots"})


def test_module_doctests_hold() -> None:
    result = doctest.testmod(rewards)
    assert result.attempted >= 2 and result.failed == 0


class _FixedReport:
    """A backend that answers every job with the same hand-made report (no sandbox)."""

    name = "fixed"
    workers = 1

    def __init__(self, report: ExecutionReport) -> None:
        self.report = report

    def execute(self, request: ExecutionRequest) -> ExecutionReport:
        return self.report

    def close(self) -> None:
        pass


def _report(values: list[Any], wall_s: float) -> ExecutionReport:
    frames = [{"e": "start"}, {"e": "loaded"}]
    frames += [{"e": "result", "i": i, "ok": True, "value": v} for i, v in enumerate(values)]
    return ExecutionReport(frames=[*frames, {"e": "done"}], exit_code=0, wall_s=wall_s)


def test_the_verifier_pays_what_its_spec_says() -> None:
    task = task_from_dict(
        {
            "task_description": "double",
            "function_signature": "def double(x):",
            "test_cases": [{"input": i, "expected": 2 * i} for i in range(4)],
            "efficiency_budget_s": 0.5,
        }
    )
    fast = _FixedReport(_report([0, 2, 4, 7], wall_s=0.1))  # 3 of 4 right
    default = Verifier(fast).grade(task, "def double(x): ...")
    assert (default.reward, default.reward_components) == (
        9.5,
        {"executes": 1.0, "pass_rate": 7.5, "efficient": 1.0},
    )
    spec = CodeRewardSpec(executes=0.0, pass_rate=4.0, efficient=3.0)
    custom = Verifier(fast, reward_spec=spec).grade(task, "def double(x): ...")
    assert (custom.reward, custom.reward_components) == (
        6.0,
        {"executes": 0.0, "pass_rate": 3.0, "efficient": 3.0},
    )
    slow = Verifier(_FixedReport(_report([0, 2, 4, 7], wall_s=0.6)), reward_spec=spec).grade(task, "...")
    assert slow.reward_components["efficient"] == 0.0  # over the task's efficiency budget

"""The ops family's measures: replays, gaming probes."""

from __future__ import annotations

import pytest

from transferlab.platform.measures import spread
from transferlab.simulator.ops import task_ids
from transferlab.simulator.ops.compare_column import ops_episode, ops_probes, ops_replay


def test_ops_replay_has_zero_spread() -> None:
    from transferlab.simulator.ops import ExpertAgent

    tid = task_ids("train", 1)[0]
    expert = ops_episode(tid, ExpertAgent())
    returns, report_s = ops_replay(tid, expert["actions"], replays=3)
    assert spread(returns)["std"] == 0.0 and returns[0] == pytest.approx(expert["return"])
    assert len(report_s) == 3


def test_ops_probes_hold_on_training_scenarios() -> None:
    probe = ops_probes(task_ids("train", 5))
    assert probe.value is not None and probe.value <= 0.05  # the best degenerate probe's success
    assert probe.extra["held"] is True
    assert probe.extra["probes"]["expert"] == 1.0 and probe.extra["probes"]["spray: stock_out"] == 0.0

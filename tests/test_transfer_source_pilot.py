"""scripts/transfer_source_pilot.py: field=value changes of the transfer experiment's coding stage."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "transfer_source_pilot.py"
spec = importlib.util.spec_from_file_location("transfer_source_pilot", SCRIPT)
assert spec is not None and spec.loader is not None
pilot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pilot)


def test_changes_nest_by_dot_and_read_json_values() -> None:
    got = pilot.parse_changes(["demo_tasks=20", "sft.steps=150", "sft.schedule=constant", "rl.rewards=dense"])
    assert got == {
        "demo_tasks": 20,
        "sft": {"steps": 150, "schedule": "constant"},
        "rl": {"rewards": "dense"},
    }
    with pytest.raises(SystemExit, match="not field=value"):
        pilot.parse_changes(["sft.steps"])


def test_the_previous_preset_is_reachable_and_rl_steps_zero_skips_grpo() -> None:
    changes = pilot.parse_changes(
        ["demo_tasks=20", "sft.steps=150", "sft.context_weight=0", "rl.rewards=dense", "rl.steps=0"]
    )
    _, stage, rl_steps = pilot.changed_stage(changes, seed=3)
    assert (stage.demo_tasks, stage.sft.steps, stage.sft.context_weight) == (20, 150, 0.0)
    assert stage.sft.copy_weight == 0.5  # untouched: the cpu preset's
    assert stage.rl.rewards == "dense" and rl_steps == 0 and stage.rl.steps == 1
    assert changes["rl"]["steps"] == 0  # the pilot's record keeps what was asked
    assert stage.sft.seed == stage.rl.seed == 3
    _, preset, steps = pilot.changed_stage({}, seed=0)
    assert (preset.demo_tasks, preset.sft.steps, preset.rl.rewards, steps) == (38, 400, "sparse", 30)

"""scripts/ops_failures.py: each held-out episode's ending, counted by kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from transferlab.platform.trajectory import StepRecord, Trajectory

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ops_failures.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("ops_failures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _episode(*calls: tuple[str, bool]) -> Trajectory:
    steps = [
        StepRecord(
            episode_id="e",
            step=k,
            task_id="ops-0001",
            domain="ecommerce",
            action_text=text,
            action_ids=[1],
            observation_text="o",
            observation_ids=[2],
            reward=0.0,
            terminated=k == len(calls) - 1,
            info={"tool_ok": ok},
            prompt_ids=[0] if k == 0 else [],
        )
        for k, (text, ok) in enumerate(calls)
    ]
    return Trajectory(steps)


def test_endings_name_reports_failed_calls_and_text_that_is_not_json() -> None:
    m = _module()
    query = ('{"action": "check_inventory", "category": "shoes"}', True)
    report = ('{"action": "generate_report", "text": "Cause: a stock-out."}', True)
    broken = ('{"action": "generate_report", "text": "Sales of shoes.0/10', False)
    assert m.tool_of(query[0]) == "check_inventory" and m.tool_of(broken[0]) == "BAD"
    assert m.tool_of("[1, 2]") == "BAD"
    assert m.ending(_episode(query, report)) == (
        "reported",
        "calls=2",
        "failed=0",
        "report attempts=1",
        "not JSON=0",
    )
    assert m.ending(_episode(query, broken, broken)) == (
        "no report",
        "calls=3",
        "failed=2",
        "report attempts=0",
        "not JSON=2",
    )

"""Smoke test of benchmarks/simulator_speed.py at its ``--quick`` size (no timing is asserted).

The script runs once, as a user would (a subprocess: the training-budget measurement spawns worker
processes that import the script's module by name); its JSON and Markdown are checked for shape, for
positive finite rates and ratios, and for verdicts that follow from the measured numbers.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator_speed.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("simulator_speed", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _load()


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, str]:
    out = tmp_path_factory.mktemp("speed")
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--json",
        str(out / "r.json"),
        "--markdown",
        str(out / "r.md"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "r.json").read_text()), (out / "r.md").read_text(), proc.stdout


def test_every_implementation_is_timed_at_every_size(quick: tuple[dict[str, Any], str, str]) -> None:
    result, _, _ = quick
    cfg = bench.SpeedConfig.quick()
    measured = {(r["implementation"], r["customers"], r["markets"]) for r in result["rows"]}
    for n in cfg.sizes:
        assert {(bench.REFERENCE, n, 1), (bench.VECTOR, n, 1)} <= measured
    assert {(bench.LEARNED, cfg.episode_customers, b) for b in cfg.batches} <= measured
    for r in result["rows"]:
        assert r["customer_days"] == r["customers"] * r["markets"] * r["days"]
        for key in ("customer_days_per_s", "customer_days_per_wall_s"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert math.isfinite(r["ratio_to_reference"]) and r["ratio_to_reference"] > 0
        if r["implementation"] == bench.REFERENCE:
            assert r["ratio_to_reference"] == pytest.approx(1.0)


def test_verdicts_follow_from_the_measurements(quick: tuple[dict[str, Any], str, str]) -> None:
    result, _, _ = quick
    thresholds = {"reference": bench.TARGET_RATIO, "customer-days/s": bench.TARGET_RATE}
    timed = [r for r in result["rows"] if r["implementation"] != bench.REFERENCE]
    assert len(result["verdicts"]) == 2 * len(timed) + 1  # ratio and rate per implementation, the budget
    for v in result["verdicts"]:
        assert math.isfinite(v["measured"]) and v["measured"] > 0
        if "min" in v["target"]:
            assert v["verdict"] == ("PASS" if v["measured"] < bench.TARGET_SECONDS else "FAIL")
        else:
            (threshold,) = [t for key, t in thresholds.items() if key in v["target"]]
            assert v["verdict"] == ("PASS" if v["measured"] >= threshold else "FAIL")
    budget = result["budget"]
    assert budget["measured_episodes"] >= bench.SpeedConfig.quick().measured_episodes
    for key in ("measured_wall_s", "extrapolated_s", "extrapolated_cpu_s", "projected_s", "startup_s"):
        assert math.isfinite(budget[key]) and budget[key] > 0, key
    assert 0 < budget["cpu_share"] <= 1.05
    assert budget["extrapolated_s"] > budget["measured_wall_s"]  # 8 episodes stand for 100,000


def test_tables_are_printed_and_written_with_the_command(quick: tuple[dict[str, Any], str, str]) -> None:
    result, markdown, stdout = quick
    assert "| implementation | customers per market |" in stdout and "| target |" in stdout
    assert "benchmarks/simulator_speed.py --quick --json" in markdown
    assert result["command"].startswith(".venv/bin/python benchmarks/simulator_speed.py --quick")
    assert markdown.count("| PASS |") + markdown.count("| FAIL |") == len(result["verdicts"])


def test_verdict_thresholds() -> None:
    assert bench.verdict(100.0, 100.0) == "PASS" and bench.verdict(99.9, 100.0) == "FAIL"
    assert (
        bench.verdict(599.0, 600.0, below=True) == "PASS"
        and bench.verdict(600.0, 600.0, below=True) == "FAIL"
    )
    assert bench.verdict(None, 1.0) == "n/a" and bench.verdict(float("nan"), 1.0) == "n/a"


def test_the_action_plan_launches_a_campaign_on_about_a_third_of_days() -> None:
    plan = bench.action_plan(50, 30, seed=0)
    assert plan.shape == (50, 30) and plan.min() >= 0 and plan.max() < 151
    assert 0.25 < np.mean(plan > 0) < 0.42
    assert (bench.action_plan(50, 30, seed=0) == plan).all()


def test_the_learned_simulator_is_compared_at_a_measured_size() -> None:
    with pytest.raises(ValueError, match="episode_customers"):
        bench.SpeedConfig(sizes=(1_000,), episode_customers=500)

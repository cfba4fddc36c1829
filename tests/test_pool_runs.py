"""scripts/pool_runs.py: seeds of runs of one config pooled into one paired comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from transferlab.platform.results import read_result

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pool_runs.py"


def make_run(
    root: Path, seeds: list[int], per_seed: dict[int, dict[str, list[float]]], lr: float = 1e-4
) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"seeds": seeds, "rl": {"lr": lr}}))
    for seed in seeds:
        for arm, values in per_seed[seed].items():
            (root / "arms" / f"{arm}-seed{seed}").mkdir(parents=True)
            (root / "arms" / f"{arm}-seed{seed}" / "result.json").write_text(json.dumps({"held_out": values}))
    return root


def pool(*runs: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, runs)], capture_output=True, text=True)


def test_two_runs_pool_into_one_comparison_by_hand(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", [0], {0: {"sft": [0.0, 0.5], "rl": [0.5, 1.0]}})
    b = make_run(tmp_path / "b", [1], {1: {"sft": [1.0, 1.0], "rl": [1.0, 1.0]}})
    done = pool(a, b, "--out", str(tmp_path / "pooled"))
    assert done.returncode == 0, done.stderr
    assert "seed 0: sft 0.250  rl 0.750  rl - sft +50.0" in done.stdout
    assert "seed 1: sft 1.000  rl 1.000  rl - sft +0.0" in done.stdout
    # (0.5 + 0.5 + 0 + 0) / 4 paired differences
    assert "rl - sft over 2 seed clusters: +25.0 points" in done.stdout
    assert "rl - sft over 4 seed+task clusters: +25.0 points" in done.stdout
    result = read_result(tmp_path / "pooled")
    assert result.seeds == [0, 1] and result.comparison("rl - sft").estimate == pytest.approx(0.25)
    assert result.arms["rl"].held_out_success.estimate == pytest.approx(0.875)  # (0.5 + 1 + 1 + 1) / 4
    assert result.arms["sft"].model_dump()["per_seed"] == [0.25, 1.0]
    assert result.settings["pooled_runs"] == [str(a), str(b)] and result.settings["rl"] == {"lr": 1e-4}


def test_other_settings_a_shared_seed_or_an_unfinished_arm_are_refused(tmp_path: Path) -> None:
    values = {0: {"sft": [0.0], "rl": [1.0]}, 1: {"sft": [0.0], "rl": [1.0]}}
    a = make_run(tmp_path / "a", [0], values)
    other = make_run(tmp_path / "other", [1], values, lr=5e-5)
    assert "has other settings than" in pool(a, other).stderr
    again = make_run(tmp_path / "again", [0], values)
    assert "seed 0 is in more than one run" in pool(a, again).stderr
    unfinished = make_run(tmp_path / "unfinished", [1], {1: {"sft": [0.0]}})
    done = pool(a, unfinished)
    assert done.returncode != 0 and "rl-seed1/result.json is missing" in done.stderr

"""scripts/rl_pilot.py: one SFT policy, then RL variants from it, each scored and written as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "rl_pilot.py"


def pilot(*args: str, root: Path) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--preset", "smoke", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["code", "ops"])
def test_a_pilot_trains_one_sft_and_scores_variants_from_it(domain: str, tmp_path: Path) -> None:
    sft = pilot(domain, "sft", "--eval", root=tmp_path)
    run = Path(sft["run_dir"])
    assert 0.0 <= sft["held_out"] <= 1.0
    variant = pilot(domain, "rl", str(run), "task_sampling=informative", "lr=0.001", root=tmp_path)
    assert variant["changes"] == {"task_sampling": "informative", "lr": 0.001}
    assert 0.0 <= variant["held_out"] <= 1.0
    saved = json.loads((run / "pilot-task_sampling=informative,lr=0.001.json").read_text())
    assert saved["held_out"] == variant["held_out"]
    assert (run / "arms" / "pilot-task_sampling-informative_lr-0.001" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_an_sft_pilot_takes_sft_changes_and_a_seed(tmp_path: Path) -> None:
    sft = pilot("ops", "sft", "lr=0.01", "--seed", "1", root=tmp_path)
    assert sft["changes"] == {"lr": 0.01} and sft["seed"] == 1
    config = json.loads((Path(sft["run_dir"]) / "config.json").read_text())
    assert config["sft"]["lr"] == 0.01 and config["seeds"] == [1]
    assert (Path(sft["run_dir"]) / "arms" / "sft-seed1" / "policy" / "config.json").exists()


def test_an_unknown_variant_is_one_error_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "code", "rl", str(tmp_path), "fancy"], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "variant 'fancy' is neither one of" in done.stderr


@pytest.mark.slow
def test_an_sft_pilot_takes_an_experiment_field(tmp_path: Path) -> None:
    sft = pilot("code", "sft", "recovery_every=3", "steps=2", root=tmp_path)
    assert sft["changes"] == {"recovery_every": 3, "steps": 2}
    config = json.loads((Path(sft["run_dir"]) / "config.json").read_text())
    assert config["recovery_every"] == 3 and config["sft"]["steps"] == 2


def test_pass_at_ks_averages_the_unbiased_estimator_over_tasks() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_pilot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # two tasks of 4 episodes: 1 success (pass@2 = 1 - 3/6), 0 successes
    assert module.pass_at_ks([0.25, 0.0], 4) == pytest.approx(
        {"pass@1": 0.125, "pass@2": 0.25, "pass@4": 0.5}
    )
    assert module.pass_at_ks([0.5], 2) == pytest.approx({"pass@1": 0.5, "pass@2": 1.0})


@pytest.mark.slow
def test_an_sft_pilot_scores_several_episodes_per_task_as_pass_at_k(tmp_path: Path) -> None:
    sft = pilot("code", "sft", "eval_episodes=2", "eval_temperature=1.0", "steps=2", "--eval", root=tmp_path)
    assert sft["pass@1"] == pytest.approx(sft["held_out"])
    assert sft["pass@1"] <= sft["pass@2"] <= 1.0
    assert all(r in (0.0, 0.5, 1.0) for r in sft["per_task"])

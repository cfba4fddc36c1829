"""The does-it-learn experiment: the verdict logic by hand, and the smoke preset end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.coding_rl.experiments.learn import LearnConfig, summarise, verdict
from transferlab.platform.stats import Interval


def iv(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate, low, high, 0.95, 45)


def test_verdict_claims_improvement_only_when_the_interval_excludes_zero() -> None:
    assert verdict("grpo", iv(0.139, 0.047, 0.231)).startswith("GRPO improved held-out success beyond SFT")
    assert "+13.9 points [+4.7, +23.1]" in verdict("grpo", iv(0.139, 0.047, 0.231))
    assert verdict("ppo", iv(0.086, -0.003, 0.172)).startswith("Only that the pipeline ran")
    assert verdict("ppo", iv(-0.2, -0.3, -0.1)).startswith("PPO made held-out success worse")


def test_summarise_pools_seeds_and_pairs_rl_with_sft_by_seed_and_task() -> None:
    config = LearnConfig(seeds=[0, 1], algos=["grpo"])
    results = {
        "untrained-seed0": {"sampled": [0.0, 0.0], "greedy": [0.0, 0.0]},
        "untrained-seed1": {"sampled": [0.0, 0.0], "greedy": [0.0, 0.0]},
        "sft-seed0": {"sampled": [0.5, 0.25], "greedy": [1.0, 0.0]},
        "sft-seed1": {"sampled": [0.5, 0.75], "greedy": [1.0, 1.0]},
        "grpo-seed0": {"sampled": [0.75, 0.5], "greedy": [1.0, 1.0]},
        "grpo-seed1": {"sampled": [0.75, 1.0], "greedy": [1.0, 1.0]},
    }
    out = summarise(config, results, 12.0)
    assert out["stages"]["sft"]["sampled"]["estimate"] == pytest.approx(0.5)
    assert out["stages"]["grpo"]["per_seed"] == [0.625, 0.875]
    diff = out["vs_sft"]["grpo"]
    # every (seed, task) pair gained exactly 0.25, so the paired interval is that point
    assert diff["estimate"] == diff["low"] == diff["high"] == pytest.approx(0.25)
    assert diff["verdict"].startswith("GRPO improved")


@pytest.mark.slow
def test_learn_smoke_preset_writes_arms_and_a_report_and_resumes(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["coding", "experiment", "learn", "--preset", "smoke", "--runs-root", str(tmp_path / "runs")]
    result = runner.invoke(app, [*args, "--report-dir", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert "pipeline ran" in result.output or "improved" in result.output or "worse" in result.output
    [run_dir] = (tmp_path / "runs" / "coding-learn").iterdir()
    arms = {p.name for p in (run_dir / "arms").iterdir()}
    assert arms == {"untrained-seed0", "sft-seed0", "grpo-seed0", "ppo-seed0"}
    assert (run_dir / "arms" / "grpo-seed0" / "checkpoint.pt").is_file()
    for name in ("report.md", "report.html", "figures/stages.png", "figures/curves.png"):
        assert (tmp_path / "report" / name).is_file(), name
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    assert set(summary["stages"]) == {"untrained", "sft", "grpo", "ppo"}
    before = {a: (run_dir / "arms" / a / "result.json").stat().st_mtime_ns for a in arms}
    again = runner.invoke(app, [*args, "--resume", str(run_dir)])
    assert again.exit_code == 0, again.output
    after = {a: (run_dir / "arms" / a / "result.json").stat().st_mtime_ns for a in arms}
    assert after == before  # finished arms are kept, not recomputed


def test_bad_seeds_and_config_files_are_clear_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["coding", "experiment", "learn", "--seeds", "a,b"])
    assert bad.exit_code == 2 and "--seeds must be comma-separated integers" in bad.output
    missing = runner.invoke(app, ["coding", "experiment", "learn", "--config", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "nope.json" in missing.output

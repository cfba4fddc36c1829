"""The does-it-learn experiment: the verdict logic by hand, and the smoke preset end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.coding_rl.experiments.learn import LearnConfig, build_result, primary, summarise, verdict
from transferlab.coding_rl.experiments.presets import LEARN_PRESETS
from transferlab.platform.harness import experiment_command
from transferlab.platform.results import Comparison, read_result
from transferlab.platform.stats import mde

RESULTS = {
    "untrained-seed0": {"sampled": [0.0, 0.0], "greedy": [0.0, 0.0]},
    "untrained-seed1": {"sampled": [0.0, 0.0], "greedy": [0.0, 0.0]},
    "sft-seed0": {"sampled": [0.5, 0.25], "greedy": [1.0, 0.0]},
    "sft-seed1": {"sampled": [0.5, 0.75], "greedy": [1.0, 1.0]},
    "grpo-seed0": {"sampled": [0.75, 0.5], "greedy": [1.0, 1.0]},
    "grpo-seed1": {"sampled": [0.75, 1.0], "greedy": [1.0, 1.0]},
}


def comparison(estimate: float, low: float, high: float) -> Comparison:
    return Comparison(
        name="grpo - sft", estimate=estimate, ci=(low, high), cluster="seed", n_clusters=3, mde=mde(low, high)
    )


def test_verdict_claims_improvement_only_when_the_interval_excludes_zero() -> None:
    assert "improved: +13.9 points [4.7, 23.1]" in verdict(comparison(0.139, 0.047, 0.231))
    assert "worse: \u221220.0 points" in verdict(comparison(-0.2, -0.3, -0.1))


def test_a_run_whose_interval_straddles_zero_says_pipeline_ran_with_its_mde() -> None:
    # the committed +13.9 points with its seed-clustered interval, which includes zero
    line = verdict(comparison(0.139, -0.012, 0.29))
    assert "pipeline ran, no detectable change: +13.9 points [\u22121.2, 29.0] (MDE 21.6 points)" in line
    assert "95% t-interval over 3 seeds" in line
    assert "improved" not in line


def test_build_result_pools_seeds_and_pairs_rl_with_sft_by_seed_and_by_seed_and_task() -> None:
    config = LearnConfig(seeds=[0, 1], algos=["grpo"], eval_samples=8)
    result = build_result(config, RESULTS, "transferlab coding experiment learn --preset cpu --seeds 0,1")
    assert result.seeds == [0, 1] and result.settings["eval_samples"] == 8
    sft = result.arms["sft"]
    assert sft.held_out_success.estimate == pytest.approx(0.5)
    assert sft.n_episodes == 2 * 2 * 8  # seeds x tasks x samples
    assert sft.model_extra is not None and sft.model_extra["per_seed"] == [0.375, 0.625]
    by_seed = primary(result, "grpo")
    assert (by_seed.cluster, by_seed.n_clusters) == ("seed", 2)
    assert by_seed.estimate == pytest.approx(0.25)
    assert by_seed.mde == pytest.approx(mde(*by_seed.ci))
    # every (seed, task) pair gained exactly 0.25: with pairs as clusters the interval is that point
    [by_pair] = [c for c in result.comparisons if c.name == "grpo - sft" and c.cluster == "seed+task"]
    assert by_pair.n_clusters == 4
    assert by_pair.ci == pytest.approx((0.25, 0.25)) and by_pair.verdict == "improved"
    names = {(c.name, c.cluster) for c in result.comparisons}
    assert names == {
        ("sft - untrained", "seed"),
        ("grpo - sft", "seed"),
        ("grpo - sft", "seed+task"),
        ("grpo - sft (greedy)", "seed"),
    }
    summary = summarise(result, 12.0)
    assert summary["vs_sft"]["grpo"]["verdict"] == verdict(by_seed)
    assert summary["stages"]["sft"]["sampled"]["estimate"] == pytest.approx(0.5)  # what the demo reads
    assert summary["stages"]["grpo"]["per_seed"] == [0.625, 0.875]


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
    result_json = read_result(run_dir / "result.json")
    assert read_result(tmp_path / "report") == result_json
    assert set(result_json.arms) == {"untrained", "sft", "grpo", "ppo"}
    assert result_json.command == (
        f"transferlab coding experiment learn --preset smoke --runs-root {tmp_path / 'runs'} "
        f"--report-dir {tmp_path / 'report'}"
    )
    for arm in result_json.arms.values():
        lo, hi = arm.held_out_success.ci
        assert lo <= hi and arm.model_extra is not None
        assert arm.n_episodes == arm.model_extra["held_out_tasks"] * 2  # smoke: 2 samples per task
    for c in result_json.comparisons:
        assert c.cluster in ("seed", "seed+task") and c.n_clusters >= 1 and c.mde >= 0
    markdown = (tmp_path / "report" / "report.md").read_text().replace("\\", "")  # Markdown escapes
    for algo in ("grpo", "ppo"):
        assert verdict(primary(result_json, algo)) in markdown  # the report says what result.json says
        assert verdict(primary(result_json, algo)) in result.output
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    # the summary holds the result as built; the file adds its provenance
    written = result_json.model_dump(mode="json")
    assert written.pop("provenance")["command"] == result_json.command
    assert summary["result"] == written
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


def test_the_command_names_the_preset_and_what_differs_from_it_else_the_saved_config() -> None:
    cpu = LEARN_PRESETS["cpu"]
    changed = cpu.model_copy(
        update={"seeds": [4, 5], "rl": cpu.rl.model_copy(update={"rollout_backend": "ray"})}
    )
    run_dir = Path("runs/coding-learn/x")
    assert experiment_command(
        "transferlab coding experiment learn", changed, LEARN_PRESETS, run_dir, Path("runs"), Path("docs/r")
    ) == (
        "transferlab coding experiment learn --preset cpu --seeds 4,5 --rollout-backend ray "
        "--report-dir docs/r"
    )
    custom = cpu.model_copy(update={"eval_samples": 3})
    assert experiment_command(
        "transferlab coding experiment learn", custom, LEARN_PRESETS, run_dir, Path("elsewhere"), None
    ) == (
        "transferlab coding experiment learn --config runs/coding-learn/x/config.json --runs-root elsewhere"
    )


def test_report_rows_show_the_mde_and_say_unknown_for_a_zero_width_interval() -> None:
    from transferlab.platform.held_out import comparison_rows
    from transferlab.platform.results import Arm, Result

    arm = Arm.model_validate({"held_out_success": {"estimate": 0.0, "ci": [0.0, 0.0]}, "n_episodes": 4})
    flat = Comparison(name="rl - sft", estimate=0.0, ci=(0.0, 0.0), cluster="seed", n_clusters=3, mde=0.0)
    wide = Comparison(
        name="rl - rft", estimate=0.1, ci=(-0.1, 0.3), cluster="seed", n_clusters=3, mde=mde(-0.1, 0.3)
    )
    result = Result(
        experiment="x", command="c", seeds=[0], settings={}, arms={"sft": arm}, comparisons=[flat, wide]
    )
    rows = comparison_rows(result)
    assert rows[0]["MDE (points)"] == "unknown"
    assert rows[1]["MDE (points)"] == f"{mde(-0.1, 0.3) * 100:.1f}" == "28.6"
    assert rows[1]["verdict"].startswith("pipeline ran")
    pairs = Comparison(
        name="rl - sft", estimate=0.1, ci=(0.05, 0.15), cluster="seed+task", n_clusters=9, mde=0.07
    )
    [row] = comparison_rows(result.model_copy(update={"comparisons": [pairs]}))
    assert row["verdict"] == "conditional on these policies" and row["MDE (points)"] == "-"

"""The agent experiments: summaries by hand, and the smoke presets end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.coding_rl.experiments.agent import (
    HELD_OUT_KEY,
    AgentExperimentConfig,
    _held_out_points,
    dense_sparse_report,
    result_ablations,
    result_dense_sparse,
    summarise_dense_sparse,
)
from transferlab.platform.harness import Experiment
from transferlab.platform.metrics import ParquetLogger
from transferlab.platform.results import read_result


def arm(
    train_success: list[float], held: list[float], curve: list[list[float]] | None = None
) -> dict[str, Any]:
    return {
        "train_success": train_success,
        "episodes": [10.0] * len(train_success),
        "held_out": held,
        "held_out_curve": curve or [],
        "frac_zero_std": [0.5] * len(train_success),
    }


def test_episodes_to_threshold_and_their_ratio_by_hand() -> None:
    config = AgentExperimentConfig(seeds=[0, 1], threshold=0.5, smooth=1)
    config = config.model_copy(update={"held_out_threshold": 0.5})
    results = {  # SFT held-out success 0.25 in both seeds: every held-out curve starts at [0, 0.25]
        "sft-seed0": {"held_out": [0.0, 0.5]},
        "sft-seed1": {"held_out": [0.5, 0.0]},
        # training: dense crosses 0.5 between 10 and 20 episodes (0.25 -> 0.75: halfway, at 15) and at
        # 10 exactly; held-out: halfway between 10 and 20 (15), and halfway between 0 and 10 (5)
        "dense-seed0": arm([0.25, 0.75, 1.0], [1.0, 1.0], [[10, 0.25], [20, 0.75]]),
        "dense-seed1": arm([0.5, 0.5, 0.5], [0.5, 1.0], [[10, 0.75], [20, 1.0]]),
        # sparse gets there at 30 and at 25 on training success; at 30 and 20 on the held-out curve
        "sparse-seed0": arm([0.0, 0.0, 0.5], [0.0, 0.5], [[10, 0.0], [20, 0.25], [30, 0.5]]),
        "sparse-seed1": arm([0.0, 0.25, 0.75], [0.5, 0.5], [[10, 0.25], [20, 0.5], [30, 0.5]]),
    }
    result = result_dense_sparse(config, results, "transferlab coding experiment dense-sparse")
    dense, sparse = result.arms["dense"].model_extra, result.arms["sparse"].model_extra
    assert dense is not None and sparse is not None
    assert dense["held_out_curve"][0] == [[0.0, 0.25], [10.0, 0.25], [20.0, 0.75]]
    assert dense["episodes_to_held_out_threshold"] == [15.0, 5.0]
    assert sparse["episodes_to_held_out_threshold"] == [30.0, 20.0]
    assert sparse["held_out_episodes_ratio_to_dense"] == pytest.approx(25 / 10)
    assert dense["episodes_to_threshold"] == [15.0, 10.0]
    assert sparse["episodes_to_threshold"] == [30.0, 25.0]
    assert sparse["episodes_ratio_to_dense"] == pytest.approx(27.5 / 12.5)
    assert dense["episodes"] == 30
    assert result.arms["dense"].n_episodes == 2 * 2 * config.eval_episodes
    diff = result.comparison("dense - sparse")
    assert diff.estimate == pytest.approx(0.875 - 0.375)
    assert (diff.cluster, diff.n_clusters) == ("seed", 2)
    clusters = {(c.name, c.cluster, c.n_clusters) for c in result.comparisons}
    assert ("dense - sparse", "seed+task", 4) in clusters and ("sparse - sft", "seed", 2) in clusters
    summary = summarise_dense_sparse(result, 60.0)
    assert summary["ratio"] == pytest.approx(27.5 / 12.5)
    assert summary["held_out_ratio"] == pytest.approx(25 / 10)
    assert summary["arms"]["dense"]["held_out"]["estimate"] == pytest.approx(0.875)


def test_an_arm_that_never_reaches_the_held_out_threshold_gives_no_ratio_and_the_report_says_why(
    tmp_path: Path,
) -> None:
    config = AgentExperimentConfig(seeds=[0, 1], held_out_threshold=0.5, smooth=1, curve_every=1)
    sft = {f"sft-seed{s}": {"held_out": [0.25, 0.25]} for s in (0, 1)}
    results = {
        **sft,
        "dense-seed0": arm([0.5], [0.5, 0.5], [[10, 0.5]]),
        "dense-seed1": arm([0.5], [1.0, 0.5], [[10, 0.75]]),
        "sparse-seed0": arm([0.5], [0.25, 0.5], [[10, 0.75]]),
        "sparse-seed1": arm([0.5], [0.25, 0.25], [[10, 0.25]]),  # never gets to 0.5
    }
    result = result_dense_sparse(config, results, "transferlab coding experiment dense-sparse")
    sparse = result.arms["sparse"].model_extra
    assert sparse is not None
    assert sparse["episodes_to_held_out_threshold"] == [5.0, None]
    assert sparse["held_out_episodes_ratio_to_dense"] is None
    assert sparse["episodes_ratio_to_dense"] == pytest.approx(1.0)  # training: both at 10 episodes
    exp, _ = Experiment.open("coding-dense-sparse", config, tmp_path, None, Console(quiet=True))
    with exp.run:
        markdown = dense_sparse_report(config, results, result, 1.0, exp).to_markdown().replace("\\", "")
    held_out_line = next(line for line in markdown.splitlines() if "50% held-out success" in line)
    assert "sparse 5, never (per seed)" in held_out_line
    assert "No ratio sparse / dense: sparse did not reach it in every seed." in held_out_line
    assert "15% success with sparse rewards vs 45% with dense (3x)" in held_out_line
    assert "Measured ratio sparse / dense: 1.00x" in markdown  # the training figures, labelled as such


def test_held_out_points_pair_each_evaluation_with_the_episodes_trained_so_far(tmp_path: Path) -> None:
    path = tmp_path / "metrics.parquet"
    with ParquetLogger(path) as logger:
        for step, episodes in enumerate([4.0, 3.0, 4.0, 4.0]):  # step 1 lost a group
            logger.log(step, {"rollout/episodes": episodes, **({HELD_OUT_KEY: step / 8} if step % 2 else {})})
    assert _held_out_points(path) == [[7.0, 0.125], [15.0, 0.375]]
    assert _held_out_points(tmp_path / "missing.parquet") == []


def test_ablation_comparisons_say_pipeline_ran_when_the_interval_straddles_zero() -> None:
    config = AgentExperimentConfig(seeds=[0, 1, 2])
    drift = {"kl_to_sft": 0.125, "observation_nll": 2.0, "observation_nll_sft": 2.5}
    held = {  # per seed, per task; kl beats baseline on some tasks and loses on others
        "sft": [[0.0, 0.25], [0.25, 0.25], [0.0, 0.5]],
        "baseline": [[0.25, 0.5], [0.5, 0.25], [0.25, 0.5]],
        "kl": [[0.5, 0.5], [0.25, 0.25], [0.25, 0.5]],  # per seed +0.125, -0.125, 0 against baseline
        "unmasked": [[0.0, 0.0], [0.25, 0.0], [0.0, 0.25]],
    }
    results = {
        f"{name}-seed{s}": {"held_out": values, "train_success": [0.5], **drift}
        for name, per_seed in held.items()
        for s, values in enumerate(per_seed)
    }
    result = result_ablations(config, results, "transferlab coding experiment ablations")
    kl = next(c for c in result.comparisons if c.name == "kl - baseline" and c.cluster == "seed")
    assert kl.estimate == pytest.approx(0.0) and kl.ci[0] < 0 < kl.ci[1]
    line = kl.sentence()
    assert "pipeline ran, no detectable change" in line and "MDE" in line and "improved" not in line
    assert result.arms["kl"].model_extra == {
        "per_seed": [0.5, 0.25, 0.375],
        "kl_to_sft": 0.125,
        "observation_nll": 2.0,
        "observation_nll_sft": 2.5,
        "final_train_success": 0.5,
    }


@pytest.mark.slow
@pytest.mark.parametrize("which", ["dense-sparse", "ablations"])
def test_agent_smoke_presets_write_a_report(tmp_path: Path, which: str) -> None:
    result = CliRunner().invoke(
        app,
        [
            "coding",
            "experiment",
            which,
            "--preset",
            "smoke",
            "--runs-root",
            str(tmp_path / "runs"),
            "--report-dir",
            str(tmp_path / "report"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "report.md").is_file() and (tmp_path / "report" / "report.html").is_file()
    [run_dir] = next((tmp_path / "runs").iterdir()).iterdir()
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    expected = (
        {"sft", "dense", "sparse"} if which == "dense-sparse" else {"sft", "baseline", "kl", "unmasked"}
    )
    assert set(summary["arms"]) == expected
    result_json = read_result(run_dir / "result.json")
    assert read_result(tmp_path / "report") == result_json
    assert set(result_json.arms) == expected and result_json.experiment == f"coding-{which}"
    assert result_json.command.startswith(f"transferlab coding experiment {which} --preset smoke")
    for arm in result_json.arms.values():
        assert arm.held_out_success.ci[0] <= arm.held_out_success.ci[1] and arm.n_episodes >= 1
    assert result_json.comparisons
    markdown = (tmp_path / "report" / "report.md").read_text().replace("\\", "")  # Markdown escapes
    for c in result_json.comparisons:
        held_out_tasks = result_json.arms["sft"].n_episodes  # smoke: 1 seed x 1 episode per task
        assert c.cluster in ("seed", "seed+task")
        assert c.n_clusters == (1 if c.cluster == "seed" else held_out_tasks)
        assert c.mde >= 0
    primary = next(c for c in result_json.comparisons if c.cluster == "seed")
    assert primary.sentence() in markdown  # the report says what result.json says
    if which == "dense-sparse":
        _check_held_out_curves(run_dir, summary, markdown)


def _check_held_out_curves(run_dir: Path, summary: dict[str, Any], markdown: str) -> None:
    """Each RL arm's held-out curve: one point per RL step (curve_every 1), step 0 the SFT arm's held-out
    value, the last the arm's final one, exactly; step 0 is also the saved SFT policy's score on the
    same held-out episodes."""
    from transferlab.agent_rl.policies.model import load_policy
    from transferlab.coding_rl.experiments.common import evaluate_agent, opened_sandbox
    from transferlab.coding_rl.experiments.presets import AGENT_PRESETS
    from transferlab.coding_rl.tasks.toy import toy_repo_tasks

    smoke = AGENT_PRESETS["smoke"]
    arms = summary["result"]["arms"]
    for name in ("dense", "sparse"):
        [curve] = arms[name]["held_out_curve"]  # one seed
        assert len(curve) == 1 + smoke.rl.steps
        assert curve[0] == [0.0, arms["sft"]["per_seed"][0]]
        assert curve[-1][1] == arms[name]["per_seed"][0]
        assert [p[0] for p in curve] == sorted(p[0] for p in curve) and curve[-1][0] == arms[name]["episodes"]
        assert len(arms[name]["episodes_to_held_out_threshold"]) == 1
    assert "held-out success, on the held-out curve" in markdown and "held_out_curves" in markdown
    _, held = toy_repo_tasks(smoke.held_out_fraction, 0, tuple(smoke.operations))
    model, tokenizer = load_policy(run_dir / "arms" / "sft-seed0" / "policy", device="cpu", dtype="float32")
    with opened_sandbox(smoke.backend) as sandbox:
        direct = evaluate_agent(
            model,
            tokenizer,
            held,
            sandbox,
            episodes_per_task=smoke.eval_episodes,
            max_new_tokens=smoke.rl.max_new_tokens,
            max_context=smoke.rl.max_context,
            max_steps=smoke.rl.max_steps,
        )
    assert arms["dense"]["held_out_curve"][0][0] == [0.0, sum(direct) / len(direct)]

"""The agent experiments: summaries by hand, and the smoke presets end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.coding_rl.experiments.agent import (
    AgentExperimentConfig,
    result_ablations,
    result_dense_sparse,
    summarise_dense_sparse,
)
from transferlab.platform.results import read_result


def arm(train_success: list[float], held: list[float]) -> dict[str, Any]:
    return {
        "train_success": train_success,
        "episodes": [10.0] * len(train_success),
        "held_out": held,
        "frac_zero_std": [0.5] * len(train_success),
    }


def test_episodes_to_threshold_and_their_ratio_by_hand() -> None:
    config = AgentExperimentConfig(seeds=[0, 1], threshold=0.5, smooth=1)
    results = {
        "sft-seed0": {"held_out": [0.0, 0.5]},
        "sft-seed1": {"held_out": [0.5, 0.5]},
        # dense crosses 0.5 between 10 and 20 episodes (0.25 -> 0.75: halfway, at 15) and at 10 exactly
        "dense-seed0": arm([0.25, 0.75, 1.0], [1.0, 1.0]),
        "dense-seed1": arm([0.5, 0.5, 0.5], [0.5, 1.0]),
        # sparse gets there at 30 and at 25
        "sparse-seed0": arm([0.0, 0.0, 0.5], [0.0, 0.5]),
        "sparse-seed1": arm([0.0, 0.25, 0.75], [0.5, 0.5]),
    }
    result = result_dense_sparse(config, results, "transferlab coding experiment dense-sparse")
    dense, sparse = result.arms["dense"].model_extra, result.arms["sparse"].model_extra
    assert dense is not None and sparse is not None
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
    assert summary["arms"]["dense"]["held_out"]["estimate"] == pytest.approx(0.875)


def test_ablation_comparisons_say_pipeline_ran_when_the_interval_straddles_zero() -> None:
    config = AgentExperimentConfig(seeds=[0, 1, 2])
    drift = {"kl_to_sft": 0.125, "observation_nll": 2.0, "observation_nll_sft": 2.5}
    held = {  # per seed, per task; kl beats baseline on some tasks and loses on others
        "sft": [[0.0, 0.25], [0.25, 0.25], [0.0, 0.5]],
        "baseline": [[0.25, 0.5], [0.5, 0.25], [0.25, 0.5]],
        "kl": [[0.5, 0.25], [0.25, 0.5], [0.5, 0.25]],
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
        "per_seed": [0.375, 0.375, 0.375],
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

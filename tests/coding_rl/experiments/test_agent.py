"""The agent experiments: summaries by hand, and the smoke presets end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.coding_rl.experiments.agent import AgentExperimentConfig, summarise_dense_sparse


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
    out = summarise_dense_sparse(config, results, 60.0)
    assert out["arms"]["dense"]["episodes_to_threshold"] == [15.0, 10.0]
    assert out["arms"]["sparse"]["episodes_to_threshold"] == [30.0, 25.0]
    assert out["ratio"] == pytest.approx(27.5 / 12.5)
    assert out["arms"]["dense"]["episodes"] == 30
    assert out["dense_minus_sparse"]["estimate"] == pytest.approx(0.875 - 0.375)


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

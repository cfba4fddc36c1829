"""The pure part of runs side by side: configs that differ, metric summaries, curves, listing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from pydantic import Field

from transferlab.platform import run_compare as rc
from transferlab.platform.config import BaseConfig
from transferlab.platform.metrics import MemoryLogger
from transferlab.platform.runstore import RunStore


class OptimConfig(BaseConfig):
    lr: float = Field(default=1e-3, description="Learning rate.")


class SmallConfig(BaseConfig):
    seed: int = Field(default=0, description="Random seed.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser.")


def long_frame(rows: list[tuple[int, str, float]]) -> pd.DataFrame:
    logger = MemoryLogger()
    for step, key, value in rows:
        logger.log(step, {key: value})
    return logger.to_frame()


def test_flatten_and_differing_keys_count_absent_as_a_value() -> None:
    assert rc.flatten({"a": 1, "opt": {"lr": 2, "betas": [0.9]}, "empty": {}}) == {
        "a": 1,
        "opt.lr": 2,
        "opt.betas": [0.9],
        "empty": {},
    }
    configs = [{"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5}, {"a": 1, "b": 2, "c": 3}]
    assert rc.differing_keys(configs) == (["b", "c"], 1)
    assert rc.differing_keys([{"a": 1}]) == ([], 1)
    assert rc.differing_keys([]) == ([], 0)


def test_summary_uses_the_highest_step_and_the_last_value_at_a_repeated_step() -> None:
    frame = long_frame([(10, "train/loss", 0.5), (0, "train/loss", 2.0), (10, "train/loss", 0.4)])
    summary = rc.summarize(frame, "train/loss")
    assert summary == rc.MetricSummary(last=0.4, step=10, min=0.4, max=2.0, points=2)
    assert rc.summarize(frame, "eval/return") is None


@pytest.fixture
def root(tmp_path: Path) -> Path:
    store = RunStore(tmp_path / "runs")
    with store.create_run("cql", SmallConfig(seed=1), run_id="a") as run:
        run.logger.log(0, {"train/loss": 1.0})
        run.logger.log(5, {"train/loss": 0.5, "eval/return": 3.0})
    with store.create_run("cql", SmallConfig(seed=2, optim=OptimConfig(lr=0.1)), run_id="b") as run:
        run.logger.log(2, {"train/loss": 0.8})
    compare_dir = tmp_path / "runs" / "compare" / "20250102-030405-abc123"
    compare_dir.mkdir(parents=True)
    (compare_dir / "result.json").write_text(json.dumps({"ok": True}))
    (compare_dir / "report.md").write_text("# Report\n")
    (tmp_path / "runs" / "empty").mkdir()
    return tmp_path / "runs"


def test_listing_includes_compare_dirs_without_meta(root: Path) -> None:
    assert rc.experiments(root) == ["compare", "cql"]  # "empty" holds no run
    assert rc.experiments(root / "nowhere") == []
    assert [i.run_id for i in rc.list_runs(root, "cql")] == ["b", "a"]
    [info] = rc.list_runs(root, "compare")
    assert (info.status, info.created_at[:19], info.seed) == ("finished", "2025-01-02T03:04:05", None)
    assert rc.run_label(info) == "20250102-030405-abc123 · finished · 2025-01-02 03:04:05 · no seed"
    assert rc.read_report(info.dir) == "# Report\n"
    assert rc.read_result(info.dir) == {"ok": True}
    assert rc.read_report(root / "cql" / "a") is None and rc.read_result(root / "cql" / "a") is None


def test_comparison_frames(root: Path) -> None:
    comparison = rc.compare(rc.list_runs(root, "cql"))
    assert comparison.labels == ["b", "a"]
    assert (comparison.differ, comparison.n_equal) == (["optim.lr", "seed"], 1)  # _config_class is equal
    config = rc.config_frame(comparison).to_dict(orient="index")
    assert config == {"optim.lr": {"b": "0.1", "a": "0.001"}, "seed": {"b": "2", "a": "1"}}
    rows = {
        (r["metric"], r["stat"]): (r["b"], r["a"]) for r in rc.metrics_frame(comparison).to_dict("records")
    }
    assert rows[("train/loss", "last")] == (0.8, 0.5)
    assert rows[("train/loss", "step")] == (2.0, 5.0)
    assert rows[("train/loss", "max")] == (0.8, 1.0)
    assert math.isnan(rows[("eval/return", "last")][0]) and rows[("eval/return", "last")][1] == 3.0
    curves = rc.curves(comparison, "train/loss")
    assert curves.index.tolist() == [0, 2, 5] and curves.columns.tolist() == ["b", "a"]
    assert curves["a"].isna().tolist() == [False, True, False]
    assert curves["a"].dropna().tolist() == [1.0, 0.5]
    assert rc.curves(comparison, "eval/return").columns.tolist() == ["a"]
    assert rc.curves(comparison, "kl/ref").empty


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(rc.RunCompareError, match=r"cannot read .*config\.json"):
        rc.read_config(tmp_path)
    assert rc.read_config(tmp_path / "missing") == {}

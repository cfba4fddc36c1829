"""TensorBoard and MLflow adapters: what a run logs arrives in each, read back with their own readers
(TensorBoard's event accumulator, MLflow's client on a local file store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from transferlab.platform.config import BaseConfig
from transferlab.platform.metric_sinks import (
    SINKS_ENV,
    MLflowLogger,
    TensorBoardLogger,
    chosen_sinks,
)
from transferlab.platform.metrics import MultiLogger, read_metrics
from transferlab.platform.runstore import RunStore


class _Config(BaseConfig):
    seed: int = Field(default=3, description="A seed.")


def _tensorboard_scalars(log_dir: Path, key: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(key)]


def _mlflow_history(uri: str, experiment: str, run_name: str, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    [run] = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.runName = '{run_name}'")
    assert run.info.status == "FINISHED"
    return [
        (m.step, m.value)
        for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
    ]


def test_tensorboard_logger_writes_scalars_tensorboard_reads(tmp_path: Path) -> None:
    with TensorBoardLogger(tmp_path / "tb") as logger:
        logger.log(0, {"train/loss": 1.5, "eval/success": 0.25})
        logger.log(4, {"train/loss": 0.75})
    assert _tensorboard_scalars(tmp_path / "tb", "train/loss") == [(0, 1.5), (4, 0.75)]
    assert _tensorboard_scalars(tmp_path / "tb", "eval/success") == [(0, 0.25)]
    with pytest.raises(ValueError, match="key"):
        TensorBoardLogger(tmp_path / "tb2").log(0, {"no namespace": 1.0})


def test_mlflow_logger_writes_a_run_mlflow_reads(tmp_path: Path) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    with MLflowLogger(uri, "exp", "r1") as logger:
        logger.log(1, {"train/loss": 2.0})
        logger.log(2, {"train/loss": 1.0})
    assert _mlflow_history(uri, "exp", "r1", "train/loss") == [(1, 2.0), (2, 1.0)]


def test_sinks_are_chosen_by_name_and_a_bad_name_is_refused() -> None:
    assert chosen_sinks({}) == []
    assert chosen_sinks({SINKS_ENV: " TensorBoard, mlflow,tensorboard "}) == ["tensorboard", "mlflow"]
    with pytest.raises(ValueError, match="unknown sink"):
        chosen_sinks({SINKS_ENV: "wandb"})


def test_a_run_logs_to_the_run_store_and_both_sinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SINKS_ENV, "tensorboard,mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = RunStore(tmp_path / "runs")
    with store.create_run("demo", _Config()) as run:
        assert isinstance(run.logger, MultiLogger)
        run.logger.log(0, {"demo/x": 1.0})
        run.logger.log(1, {"demo/x": 3.0})
    metrics = read_metrics(run.metrics_path)
    assert list(metrics["value"]) == [1.0, 3.0]  # the run store stays the record
    assert _tensorboard_scalars(run.dir / "tensorboard", "demo/x") == [(0, 1.0), (1, 3.0)]
    uri = (tmp_path / "runs" / "mlruns").as_uri()
    assert _mlflow_history(uri, "demo", run.run_id, "demo/x") == [(0, 1.0), (1, 3.0)]


def test_a_bad_sink_choice_creates_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SINKS_ENV, "tensorbord")
    with pytest.raises(ValueError, match="unknown sink"):
        RunStore(tmp_path / "runs").create_run("demo", _Config())
    assert not (tmp_path / "runs").exists()


def test_without_a_choice_the_run_logs_only_to_the_run_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SINKS_ENV, raising=False)
    with RunStore(tmp_path).create_run("demo", _Config()) as run:
        run.logger.log(0, {"demo/x": 1.0})
        assert not isinstance(run.logger, MultiLogger)
    assert not (run.dir / "tensorboard").exists() and not (tmp_path / "mlruns").exists()

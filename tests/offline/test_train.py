"""The offline training job: run directory layout, resume at learner granularity, config validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from transferlab.offline.datasets import DatasetConfig
from transferlab.offline.evaluate import OfflineEvalConfig
from transferlab.offline.learners import LEARNERS, Learner
from transferlab.offline.train import OfflineResult, OfflineTrainConfig, train_offline
from transferlab.platform.config import ConfigError
from transferlab.simulator.logs import Logs, LogSpec, generate_logs
from transferlab.simulator.world_config import WorldConfig

LEARNER_NAMES = ["discrete_cql", "td3_plus_bc"]


@pytest.fixture(scope="module")
def logs() -> Logs:
    return generate_logs(LogSpec(days=70, epsilon=0.3, world=WorldConfig(n_customers=200, seed=5)))


def _config(**update: Any) -> OfflineTrainConfig:
    fields: dict[str, Any] = {
        "learners": LEARNER_NAMES,
        "steps": 30,
        "dataset": DatasetConfig(horizon=10),
        "evaluation": OfflineEvalConfig(episodes=4, n_boot=100, fqe_steps=0),
    }
    return OfflineTrainConfig(**(fields | update))


@pytest.fixture(scope="module")
def run(logs: Logs, tmp_path_factory: pytest.TempPathFactory) -> tuple[OfflineResult, Path]:
    run_dir = tmp_path_factory.mktemp("offline") / "run"
    return train_offline(logs, _config(), run_dir=run_dir), run_dir


def test_train_offline_writes_the_run_directory(run: tuple[OfflineResult, Path]) -> None:
    result, run_dir = run
    assert result.run_dir == run_dir
    assert json.loads((run_dir / "config.json").read_text()) == _config().to_dict()
    for name in LEARNER_NAMES:
        assert (run_dir / "learners" / name / "config.json").is_file()
        assert (run_dir / "learners" / name / "model.d3").is_file()
        history = json.loads((run_dir / "history" / f"{name}.json").read_text())
        assert history == result.histories[name]
        assert history["offline/step"] == [30.0]
    assert set(result.learners) == set(LEARNER_NAMES)
    assert result.evaluation is not None
    saved = json.loads((run_dir / "result.json").read_text())
    assert saved == json.loads(json.dumps(result.evaluation.to_dict()))
    assert set(saved["policies"]) == {*LEARNER_NAMES, "marketer", "no_campaign"}
    assert saved["n_rows"] == len(result.dataset) == 70 and saved["n_episodes"] == 7
    report = (run_dir / "report.md").read_text()
    assert "figures/values.png" in report and "figures/training.png" in report
    assert saved["selection"]["chosen"] in report
    assert (run_dir / "report.html").is_file()
    assert (run_dir / "figures" / "values.png").is_file() and (run_dir / "figures" / "training.png").is_file()
    assert torch.get_num_threads() == 1  # restored to the caller's count


def test_train_offline_resumes_saved_learners(
    run: tuple[OfflineResult, Path], logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, run_dir = run
    # simulate a job killed after the first learner: the second learner and its history are gone
    shutil.rmtree(run_dir / "learners" / "td3_plus_bc")
    (run_dir / "history" / "td3_plus_bc.json").unlink()
    cql_model = run_dir / "learners" / "discrete_cql" / "model.d3"
    cql_bytes, cql_mtime = cql_model.read_bytes(), cql_model.stat().st_mtime_ns

    fitted: list[str] = []
    real_fit = Learner.fit

    def spy(self: Learner, *args: Any, **kwargs: Any) -> dict[str, list[float]]:
        fitted.append(self.config.name)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(Learner, "fit", spy)
    again = train_offline(logs, _config(), run_dir=run_dir)
    assert fitted == ["td3_plus_bc"]  # discrete_cql was loaded, not retrained
    assert cql_model.stat().st_mtime_ns == cql_mtime and cql_model.read_bytes() == cql_bytes
    assert (run_dir / "learners" / "td3_plus_bc" / "model.d3").is_file()
    assert again.histories["discrete_cql"] == first.histories["discrete_cql"]  # read back from history/
    # the loaded learner acts like the one trained in the first run
    obs = first.dataset.observations
    assert (again.learners["discrete_cql"].predict(obs) == first.learners["discrete_cql"].predict(obs)).all()
    assert again.evaluation is not None and first.evaluation is not None
    assert (
        again.evaluation.to_dict()["policies"]["discrete_cql"]
        == (first.evaluation.to_dict()["policies"]["discrete_cql"])
    )


def test_train_offline_without_evaluation_or_run_dir(logs: Logs) -> None:
    result = train_offline(logs, _config(learners=["discrete_cql"], evaluate=False, steps=5))
    assert result.evaluation is None and result.run_dir is None
    assert set(result.learners) == {"discrete_cql"} and result.histories["discrete_cql"]["offline/step"] == [
        5.0
    ]


def test_unknown_or_repeated_learner_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown learner\(s\) \['nope'\]") as exc:
        OfflineTrainConfig(learners=["discrete_cql", "nope"])
    for name in LEARNERS:
        assert name in str(exc.value)
    with pytest.raises(ConfigError, match="repeat a name"):
        OfflineTrainConfig(learners=["iql", "iql"])
    with pytest.raises(ConfigError):
        OfflineTrainConfig(learners=[])

"""The offline training job: logs -> dataset -> d3rlpy learners -> evaluation -> run directory.

``transferlab offline train`` runs :func:`train_offline`. A run directory holds::

    config.json          this job's OfflineTrainConfig
    learners/<name>/     each trained learner (config.json + model.d3), written atomically
    history/<name>.json  each learner's per-epoch d3rlpy losses (keys offline/...)
    result.json          the evaluation (world, simulator, OPE, coverage, selection)
    report.md/.html      the same as a report with plots

A run is resumable at learner granularity: a learner already saved in ``learners/`` is loaded, not
retrained, so rerunning a killed job finishes the remaining learners and the evaluation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from transferlab.offline.datasets import DatasetConfig, OfflineDataset, from_logs
from transferlab.offline.evaluate import OfflineEvalConfig, OfflineEvaluation, evaluate_learners, quiet_d3rlpy
from transferlab.offline.learners import LEARNERS, Learner, learner_config, load_learner
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json

if TYPE_CHECKING:
    from transferlab.simulator.logs import Logs

Progress = Callable[[str, float], None]

CONFIG_FILE = "config.json"
RESULT_FILE = "result.json"
LEARNERS_DIR = "learners"
HISTORY_DIR = "history"


class OfflineTrainConfig(BaseConfig):
    """One offline training job (saved as config.json in its run directory)."""

    learners: list[str] = Field(
        default_factory=lambda: ["discrete_cql"],
        min_length=1,
        description="Learners to train: any of discrete_cql, discrete_bcq, discrete_bc, dqn, cql, iql, "
        "td3_plus_bc.",
    )
    steps: int = Field(3000, ge=1, description="Gradient steps per learner.")
    seed: int = Field(0, ge=0, description="Seed of every learner (and of the evaluation).")
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-learner config fields, e.g. {'discrete_cql': {'alpha': 2.0}}."
    )
    dataset: DatasetConfig = Field(
        default_factory=DatasetConfig, description="How the logs become the dataset (horizon, reward...)."
    )
    evaluate: bool = Field(True, description="Evaluate the learners after training.")
    fit_simulator: bool = Field(
        False, description="Fit a simulator on the (first) logs and evaluate the learners in it too."
    )
    evaluation: OfflineEvalConfig = Field(
        default_factory=OfflineEvalConfig, description="World / simulator / OPE evaluation settings."
    )
    torch_threads: int = Field(1, ge=1, description="torch.set_num_threads during the job.")

    @field_validator("learners")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [n for n in v if n not in LEARNERS]
        if unknown:
            raise ValueError(f"unknown learner(s) {unknown}; use any of {', '.join(LEARNERS)}")
        if len(set(v)) != len(v):
            raise ValueError(f"learners {v} repeat a name; give each once")
        return v


@dataclass
class OfflineResult:
    """What :func:`train_offline` returns."""

    config: OfflineTrainConfig
    dataset: OfflineDataset
    learners: dict[str, Learner]
    histories: dict[str, dict[str, list[float]]]
    evaluation: OfflineEvaluation | None
    train_seconds: float
    run_dir: Path | None


def train_learners(
    dataset: OfflineDataset,
    config: OfflineTrainConfig,
    run_dir: Path | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Learner], dict[str, dict[str, list[float]]]]:
    """Train (or, in a resumed run, load) every learner of ``config`` on ``dataset``."""
    learners: dict[str, Learner] = {}
    histories: dict[str, dict[str, list[float]]] = {}
    mdps: dict[str, Any] = {}
    n = len(config.learners)
    for i, name in enumerate(config.learners):
        saved = run_dir / LEARNERS_DIR / name if run_dir is not None else None
        if saved is not None and saved.is_dir():
            learners[name] = load_learner(saved)
            hist_file = run_dir / HISTORY_DIR / f"{name}.json"  # type: ignore[operator]
            histories[name] = json.loads(hist_file.read_text()) if hist_file.is_file() else {}
            continue
        learner = learner_config(name, seed=config.seed, **config.overrides.get(name, {})).create()
        if learner.kind not in mdps:
            mdps[learner.kind] = dataset.to_mdp(learner.kind)  # type: ignore[arg-type]

        def step(done: int, total: int, i: int = i, name: str = name) -> None:
            if progress is not None:
                progress(f"training {name}", (i + done / total) / n)

        histories[name] = learner.fit(mdps[learner.kind], config.steps, progress=step)
        learners[name] = learner
        if run_dir is not None:
            atomic_write_json(run_dir / HISTORY_DIR / f"{name}.json", histories[name])
            learner.save(run_dir / LEARNERS_DIR / name)
    return learners, histories


def train_offline(
    logs: Logs | Sequence[Logs],
    config: OfflineTrainConfig | None = None,
    *,
    run_dir: str | Path | None = None,
    progress: Progress | None = None,
    simulator: Any | None = None,
) -> OfflineResult:
    """Build the dataset from ``logs``, train the learners, evaluate them; write ``run_dir`` if given.

    ``simulator`` (a fitted ``LearnedSimulator``) adds the simulator's values to the evaluation; else
    one is fitted on the first logs when ``config.fit_simulator``.
    """
    import torch

    from transferlab.offline.report import write_report

    config = config or OfflineTrainConfig()
    quiet_d3rlpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.torch_threads)
    items = [logs] if not isinstance(logs, Sequence) else list(logs)
    out = Path(run_dir) if run_dir is not None else None
    try:
        dataset = from_logs(items, config.dataset)  # bad logs fail before anything is written
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / CONFIG_FILE, config.to_dict())
        t0 = time.perf_counter()
        learners, histories = train_learners(
            dataset, config, out, _scaled(progress, 0.0, 0.6 if config.evaluate else 1.0)
        )
        seconds = time.perf_counter() - t0
        evaluation = None
        if config.evaluate:
            sim = simulator
            if sim is None and config.fit_simulator:
                from transferlab.simulator.learned import LearnedSimulator

                if progress is not None:
                    progress("fitting the simulator on the logs", 0.6)
                sim = LearnedSimulator.fit(items[0])
            evaluation = evaluate_learners(
                items, dataset, learners, config.evaluation, sim=sim, progress=_scaled(progress, 0.62, 1.0)
            )
            if out is not None:
                atomic_write_json(out / RESULT_FILE, evaluation.to_dict())
                write_report(evaluation, out, histories=histories)
    finally:
        torch.set_num_threads(threads)
    return OfflineResult(config, dataset, learners, histories, evaluation, seconds, out)


def _scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    if progress is None:
        return None
    p = progress
    return lambda msg, frac: p(msg, lo + (hi - lo) * frac)


__all__ = ["OfflineResult", "OfflineTrainConfig", "train_learners", "train_offline"]

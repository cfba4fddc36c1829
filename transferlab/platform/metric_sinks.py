"""Metrics to TensorBoard and MLflow too: logger adapters (as d3rlpy's and SB3's), next to the run store.

The run store's ``metrics.parquet`` is always written; these are extra destinations, chosen with the
environment variable ``TRANSFERLAB_METRICS`` (comma-separated, case-insensitive)::

    TRANSFERLAB_METRICS=tensorboard        # <run dir>/tensorboard/ (tensorboard --logdir runs)
    TRANSFERLAB_METRICS=mlflow             # an MLflow run per job, in $MLFLOW_TRACKING_URI
    TRANSFERLAB_METRICS=tensorboard,mlflow # both

Without ``$MLFLOW_TRACKING_URI`` the MLflow sink writes a local file store, ``<runs root>/mlruns``
(``mlflow ui --backend-store-uri <runs root>/mlruns``); MLflow keeps that store in maintenance mode,
so for a ``file:`` URI the adapter sets ``MLFLOW_ALLOW_FILE_STORE=true`` for this process. Each sink's
package is imported only when chosen; a missing one is an error naming the package to install
(``pip install tensorboard`` / ``pip install mlflow-skinny``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transferlab.platform.metrics import MetricsLogger, _LoggerBase, _validate_step, validate_metrics

__all__ = ["SINKS", "SINKS_ENV", "MLflowLogger", "TensorBoardLogger", "chosen_sinks", "sinks_for_run"]

SINKS_ENV = "TRANSFERLAB_METRICS"
SINKS = ("tensorboard", "mlflow")


class SinkUnavailable(ValueError):
    """A chosen metrics sink whose package is not installed (the message names it)."""


class TensorBoardLogger(_LoggerBase):
    """Scalars to TensorBoard event files in ``log_dir`` (``torch.utils.tensorboard``)."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # torch is there; its writer needs the tensorboard package
            raise SinkUnavailable(
                f"{SINKS_ENV}=tensorboard needs the tensorboard package: pip install tensorboard"
            ) from err
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """One scalar per key at ``step``."""
        self._check_open()
        step = _validate_step(step)
        now = time.time()
        for key, value in validate_metrics(metrics).items():
            self._writer.add_scalar(key, value, global_step=step, walltime=now)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        if self._closed:
            return
        self._writer.close()
        self._closed = True


class MLflowLogger(_LoggerBase):
    """Scalars to one MLflow run (``experiment`` / ``run_name``) in the store at ``tracking_uri``."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as err:
            raise SinkUnavailable(
                f"{SINKS_ENV}=mlflow needs the mlflow package: pip install mlflow-skinny"
            ) from err
        if tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client: Any = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = (
            found.experiment_id if found is not None else self.client.create_experiment(experiment)
        )
        run = self.client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {}))
        self.run_id: str = run.info.run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Every key at ``step`` in one batch."""
        from mlflow.entities import Metric

        self._check_open()
        step = _validate_step(step)
        now_ms = int(time.time() * 1000)
        batch = [Metric(key, value, now_ms, step) for key, value in validate_metrics(metrics).items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def flush(self) -> None:
        """Nothing buffered: every ``log`` is sent."""

    def close(self) -> None:
        """Mark the MLflow run finished (idempotent)."""
        if self._closed:
            return
        self.client.set_terminated(self.run_id)
        self._closed = True


def chosen_sinks(env: Mapping[str, str] | None = None) -> list[str]:
    """The sinks ``$TRANSFERLAB_METRICS`` names; a ``ValueError`` naming the choices for any other."""
    text = (os.environ if env is None else env).get(SINKS_ENV, "")
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SINKS]
    if unknown:
        raise ValueError(
            f"{SINKS_ENV}={text!r}: unknown sink(s) {unknown}; use {', '.join(SINKS)} (comma-separated)"
        )
    return list(dict.fromkeys(names))


def sinks_for_run(
    run_dir: str | os.PathLike[str],
    experiment: str,
    run_id: str,
    runs_root: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
) -> list[MetricsLogger]:
    """The extra loggers of one run as ``$TRANSFERLAB_METRICS`` chooses (none by default)."""
    env = os.environ if env is None else env
    sinks: list[MetricsLogger] = []
    for name in chosen_sinks(env):
        if name == "tensorboard":
            sinks.append(TensorBoardLogger(Path(run_dir) / "tensorboard"))
        else:
            uri = env.get("MLFLOW_TRACKING_URI") or (Path(runs_root) / "mlruns").absolute().as_uri()
            sinks.append(MLflowLogger(uri, experiment, run_id, tags={"transferlab.run_dir": str(run_dir)}))
    return sinks

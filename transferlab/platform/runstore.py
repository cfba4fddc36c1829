"""A small on-disk run store: one directory per run holding config, metadata, metrics and artifacts.

Layout::

    runs/<experiment>/<run-id>/
        config.json        # BaseConfig.save (has "_config_class")
        meta.json          # experiment, run_id, status, created_at, seed, versions, git commit, host
        metrics.parquet    # long-format metrics (see transferlab.platform.metrics)
        artifacts/         # anything else; created on first use

Usage::

    store = RunStore(Path("runs"))
    with store.create_run("offline-cql", cfg) as run:
        run.logger.log(step, {"train/loss": loss})
        run.write_artifact_json("eval.json", results)
    # meta.json status is "finished", or "failed" if the block raised
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import pandas as pd

import transferlab
from transferlab.platform.config import BaseConfig, config_class_path
from transferlab.platform.io import atomic_write_json
from transferlab.platform.metrics import ParquetLogger, read_metrics, validate_key

__all__ = ["Run", "RunInfo", "RunStatus", "RunStore", "compare_runs", "new_run_id", "validate_name"]

RunStatus = Literal["running", "finished", "failed"]
C = TypeVar("C", bound=BaseConfig)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
CONFIG_FILE = "config.json"
META_FILE = "meta.json"
METRICS_FILE = "metrics.parquet"
ARTIFACTS_DIR = "artifacts"


def validate_name(value: str, what: str = "name") -> str:
    """Return ``value`` if it is a safe single path component (``[A-Za-z0-9_.-]+``, not ``.``/``..``)."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            f"invalid {what} {value!r}: use only letters, digits, '_', '.' and '-' "
            "(no spaces or slashes, not '.' or '..'), e.g. 'offline-cql' or 'seed_3'"
        )
    return value


def _utc_now() -> datetime:
    return datetime.now(UTC)


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run id ``YYYYmmdd-HHMMSS-<6 hex>`` (UTC time plus random suffix)."""
    now = now or _utc_now()
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@functools.lru_cache(maxsize=1)
def _git_commit() -> str | None:
    """The git commit of the transferlab source tree, or None when not in a git checkout."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(transferlab.__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and commit else None


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


@dataclass(frozen=True)
class RunInfo:
    """Summary of one run, read from its ``meta.json``."""

    experiment: str
    run_id: str
    dir: Path
    status: str
    created_at: str
    finished_at: str | None
    seed: int | None
    meta: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dir(cls, run_dir: Path) -> RunInfo:
        """Read ``run_dir/meta.json`` (experiment/run id fall back to the directory names)."""
        meta = _read_json(run_dir / META_FILE)
        return cls(
            experiment=str(meta.get("experiment", run_dir.parent.name)),
            run_id=str(meta.get("run_id", run_dir.name)),
            dir=run_dir,
            status=str(meta.get("status", "unknown")),
            created_at=str(meta.get("created_at", "")),
            finished_at=meta.get("finished_at"),
            seed=meta.get("seed"),
            meta=meta,
        )


class Run:
    """Handle on one run directory. Use as a context manager to record finished/failed status."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(run_dir)
        if not (self.dir / META_FILE).is_file():
            raise FileNotFoundError(f"not a run directory (no {META_FILE}): {self.dir}")
        meta = self.meta
        self.experiment: str = str(meta.get("experiment", self.dir.parent.name))
        self.run_id: str = str(meta.get("run_id", self.dir.name))
        self._logger: ParquetLogger | None = None

    def __repr__(self) -> str:
        return f"Run(experiment={self.experiment!r}, run_id={self.run_id!r}, dir={str(self.dir)!r})"

    # ------------------------------------------------------------------ paths

    @property
    def config_path(self) -> Path:
        """``<dir>/config.json``."""
        return self.dir / CONFIG_FILE

    @property
    def meta_path(self) -> Path:
        """``<dir>/meta.json``."""
        return self.dir / META_FILE

    @property
    def metrics_path(self) -> Path:
        """``<dir>/metrics.parquet``."""
        return self.dir / METRICS_FILE

    @property
    def artifacts_dir(self) -> Path:
        """``<dir>/artifacts`` (created on first access)."""
        path = self.dir / ARTIFACTS_DIR
        path.mkdir(exist_ok=True)
        return path

    def artifact_path(self, name: str) -> Path:
        """Path for artifact ``name`` (may contain ``/`` subdirectories, which are created).

        Absolute paths and ``..`` are rejected so artifacts stay inside the run directory.
        """
        rel = Path(name)
        if not name or rel.is_absolute() or any(part in ("..", "") for part in rel.parts):
            raise ValueError(f"invalid artifact name {name!r}: use a relative path inside artifacts/")
        path = self.artifacts_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------------ contents

    @property
    def meta(self) -> dict[str, Any]:
        """Current contents of ``meta.json``."""
        return _read_json(self.meta_path)

    @property
    def status(self) -> str:
        """``running``, ``finished`` or ``failed``."""
        return str(self.meta.get("status", "unknown"))

    @property
    def logger(self) -> ParquetLogger:
        """ParquetLogger on ``metrics.parquet`` (created on first use; appends to existing metrics)."""
        if self._logger is None:
            self._logger = ParquetLogger(self.metrics_path)
        return self._logger

    def write_artifact_json(self, name: str, obj: Any) -> Path:
        """Atomically write ``obj`` as JSON to ``artifacts/<name>``; returns the path."""
        return atomic_write_json(self.artifact_path(name), obj)

    def load_config(self, cls: type[C]) -> C:
        """Load ``config.json`` as ``cls`` (raises ConfigError if it does not fit)."""
        return cls.from_file(self.config_path)

    def metrics(self) -> pd.DataFrame:
        """Flushed metrics of this run as a long frame (empty if nothing was logged)."""
        if self._logger is not None:
            self._logger.flush()
        return read_metrics(self.metrics_path, missing_ok=True)

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into ``meta.json`` atomically; returns the new metadata."""
        meta = self.meta
        meta.update(fields)
        atomic_write_json(self.meta_path, meta)
        return meta

    # ------------------------------------------------------------------ lifecycle

    def close_logger(self) -> None:
        """Flush and close the metrics logger if one was opened."""
        if self._logger is not None:
            self._logger.close()
            self._logger = None

    def finish(self, status: Literal["finished", "failed"] = "finished", error: str | None = None) -> None:
        """Flush metrics and record ``status`` and ``finished_at`` (plus ``error`` if given) in meta.json."""
        if status not in ("finished", "failed"):
            raise ValueError(f"status must be 'finished' or 'failed', got {status!r}")
        try:
            self.close_logger()
        finally:
            extra: dict[str, Any] = {"error": error} if error is not None else {}
            self.update_meta(status=status, finished_at=_utc_now().isoformat(), **extra)

    def __enter__(self) -> Self:
        if self.status != "running":  # resuming a finished/failed run
            resumed = [*self.meta.get("resumed_at", []), _utc_now().isoformat()]
            self.update_meta(status="running", finished_at=None, resumed_at=resumed)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.finish("failed", error=f"{type(exc).__name__}: {exc}")
        elif self.status == "running":
            self.finish("finished")
        else:
            self.close_logger()


class RunStore:
    """Creates, opens, lists and compares runs under ``root/<experiment>/<run-id>/``."""

    def __init__(self, root: str | os.PathLike[str] = Path("runs")) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunStore(root={str(self.root)!r})"

    def run_dir(self, experiment: str, run_id: str) -> Path:
        """Directory of a run (validated names; may not exist)."""
        return self.root / validate_name(experiment, "experiment name") / validate_name(run_id, "run id")

    def create_run(
        self,
        experiment: str,
        config: BaseConfig,
        run_id: str | None = None,
        seed: int | None = None,
    ) -> Run:
        """Create a new run directory with ``config.json`` and ``meta.json`` (status ``running``).

        ``seed`` defaults to ``config.seed`` when the config has an int ``seed`` field. Refuses to
        reuse an existing run directory (use :meth:`open_run` to resume).
        """
        if not isinstance(config, BaseConfig):
            raise TypeError(f"config must be a BaseConfig, got {type(config).__name__}")
        now = _utc_now()
        run_id = run_id if run_id is not None else new_run_id(now)
        run_dir = self.run_dir(experiment, run_id)
        if seed is None:
            config_seed = getattr(config, "seed", None)
            seed = config_seed if isinstance(config_seed, int) and not isinstance(config_seed, bool) else None
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise FileExistsError(
                f"run directory already exists: {run_dir}; pass a new run_id, or resume it with "
                f"RunStore.open_run({experiment!r}, {run_id!r})"
            ) from None
        meta: dict[str, Any] = {
            "experiment": experiment,
            "run_id": run_id,
            "status": "running",
            "created_at": now.isoformat(),
            "finished_at": None,
            "seed": seed,
            "config_class": config_class_path(type(config)),
            "transferlab_version": transferlab.__version__,
            "python_version": platform.python_version(),
            "git_commit": _git_commit(),
            "hostname": socket.gethostname(),
        }
        try:
            config.save(run_dir / CONFIG_FILE)
            atomic_write_json(run_dir / META_FILE, meta)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return Run(run_dir)

    def open_run(self, experiment: str, run_id: str) -> Run:
        """Open an existing run (e.g. to resume: its logger appends to the existing metrics)."""
        run_dir = self.run_dir(experiment, run_id)
        if not (run_dir / META_FILE).is_file():
            known = [info.run_id for info in self.list_runs(experiment)][:10]
            raise FileNotFoundError(
                f"no run {run_id!r} in experiment {experiment!r} under {self.root}; "
                f"recent runs: {', '.join(known) if known else '(none)'}"
            )
        return Run(run_dir)

    def open_path(self, path: str | os.PathLike[str]) -> Run:
        """Open a run by its directory path."""
        return Run(path)

    def list_runs(self, experiment: str | None = None) -> list[RunInfo]:
        """All runs (of ``experiment``, or of every experiment), newest first by ``created_at``.

        Directories without a readable ``meta.json`` are skipped with a warning.
        """
        if experiment is not None:
            exp_dirs = [self.root / validate_name(experiment, "experiment name")]
        else:
            exp_dirs = sorted(p for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []
        infos: list[RunInfo] = []
        for exp_dir in exp_dirs:
            if not exp_dir.is_dir():
                continue
            for run_dir in sorted(p for p in exp_dir.iterdir() if p.is_dir()):
                if not (run_dir / META_FILE).is_file():
                    continue
                try:
                    infos.append(RunInfo.from_dir(run_dir))
                except (OSError, ValueError) as exc:
                    warnings.warn(f"skipping run {run_dir}: unreadable {META_FILE} ({exc})", stacklevel=2)
        infos.sort(key=lambda info: (info.created_at, info.run_id), reverse=True)
        return infos

    def compare(
        self, run_dirs: Iterable[str | os.PathLike[str] | Run | RunInfo], keys: Sequence[str]
    ) -> pd.DataFrame:
        """Last value of each metric key per run; see :func:`compare_runs`."""
        return compare_runs(run_dirs, keys)


def _run_dir_of(item: str | os.PathLike[str] | Run | RunInfo) -> Path:
    if isinstance(item, Run | RunInfo):
        return item.dir
    return Path(item)


def compare_runs(
    run_dirs: Iterable[str | os.PathLike[str] | Run | RunInfo], keys: Sequence[str]
) -> pd.DataFrame:
    """One row per run: ``experiment, run_id, status`` and, per key, its value at the highest step.

    Keys a run never logged (or runs without metrics) give NaN. Only flushed metrics are seen.
    """
    keys = [validate_key(k) for k in keys]
    rows: list[dict[str, Any]] = []
    for item in run_dirs:
        run_dir = _run_dir_of(item)
        info = RunInfo.from_dir(run_dir)
        row: dict[str, Any] = {"experiment": info.experiment, "run_id": info.run_id, "status": info.status}
        row.update(dict.fromkeys(keys, float("nan")))
        metrics_path = run_dir / METRICS_FILE
        if metrics_path.exists():
            df = read_metrics(metrics_path)
            df = df[df["key"].isin(keys)].sort_values("step", kind="stable")
            last = df.drop_duplicates(subset="key", keep="last")
            row.update(zip(last["key"], last["value"].astype(float), strict=True))
        rows.append(row)
    columns = ["experiment", "run_id", "status", *keys]
    out = pd.DataFrame(rows, columns=columns)
    for key in keys:
        out[key] = out[key].astype("float64")
    return out

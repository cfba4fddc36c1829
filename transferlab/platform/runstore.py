"""A small on-disk run store: one directory per run holding config, metadata, metrics and artifacts.

Layout::

    runs/<experiment>/<run-id>/
        config.json        # BaseConfig.save (has "_config_class")
        meta.json          # experiment, run_id, status, created_at, seed, versions, git commit, host
        metrics.parquet    # long-format metrics (see transferlab.platform.metrics)
        owner.json         # pid, host, started, heartbeat of the live process writing the run
        .owner.lock        # flock held by that process (released by the OS when it dies)
        artifacts/         # anything else; created on first use

Usage::

    store = RunStore(Path("runs"))
    with store.create_run("offline-cql", cfg) as run:
        run.logger.log(step, {"train/loss": loss})
        run.write_artifact_json("eval.json", results)
    # meta.json status is "finished", or "failed" if the block raised

One live process owns a run directory: :meth:`RunStore.create_run` and :meth:`Run.acquire` (also
``with run:``) take an OS lock on it and refresh a heartbeat in ``owner.json``; a second process that
tries to write or resume it gets :class:`RunInUseError` naming the owner. A run whose meta says
``running`` but that no live process owns is listed as ``interrupted``. Reopening a run records the
time in ``meta.json["resumed_at"]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import secrets
import shutil
import socket
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import pandas as pd

import transferlab
from transferlab.platform.config import BaseConfig, config_class_path
from transferlab.platform.io import atomic_write_json
from transferlab.platform.metric_sinks import chosen_sinks, sinks_for_run
from transferlab.platform.metrics import MultiLogger, ParquetLogger, read_metrics, validate_key
from transferlab.platform.provenance import git_state

__all__ = [
    "Run",
    "RunInUseError",
    "RunInfo",
    "RunLock",
    "RunStatus",
    "RunStore",
    "compare_runs",
    "effective_status",
    "is_owned",
    "new_run_id",
    "validate_name",
]

RunStatus = Literal["running", "interrupted", "finished", "failed"]
"""``interrupted``: meta.json says ``running`` but no live process owns the run (it was killed)."""
C = TypeVar("C", bound=BaseConfig)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
CONFIG_FILE = "config.json"
META_FILE = "meta.json"
METRICS_FILE = "metrics.parquet"
ARTIFACTS_DIR = "artifacts"
OWNER_FILE = "owner.json"
LOCK_FILE = ".owner.lock"
HEARTBEAT_S = 5.0
"""Seconds between refreshes of ``owner.json["heartbeat"]``."""
STALE_AFTER_S = 60.0
"""A run owned on another host counts as interrupted when its heartbeat is older than this."""


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


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


class RunInUseError(RuntimeError):
    """A live process owns the run directory (raised instead of letting two processes write it)."""


def _owner_text(directory: Path) -> str:
    """``pid N on host H (started ..., heartbeat Ns ago)`` from ``owner.json``, or a fallback."""
    try:
        owner = _read_json(directory / OWNER_FILE)
    except (OSError, ValueError):
        return "another process (owner.json unreadable)"
    age = time.time() - float(owner.get("heartbeat", 0.0))
    return (
        f"pid {owner.get('pid')} on host {owner.get('host')} "
        f"(started {owner.get('started')}, heartbeat {age:.0f}s ago)"
    )


@dataclass
class _Held:
    """A directory this process owns: the open lock file and what ``owner.json`` says."""

    fd: int
    owner: dict[str, Any]


_HELD: dict[Path, _Held] = {}
_HELD_LOCK = threading.Lock()
_HEARTBEAT: threading.Thread | None = None


def _heartbeat_loop() -> None:
    """Refresh ``owner.json["heartbeat"]`` of every directory this process owns, forever (daemon)."""
    while True:
        time.sleep(HEARTBEAT_S)
        with _HELD_LOCK:
            held = list(_HELD.items())
        for directory, entry in held:
            if not directory.is_dir():  # removed under us: do not bring it back
                continue
            entry.owner["heartbeat"] = time.time()
            with contextlib.suppress(OSError):
                atomic_write_json(directory / OWNER_FILE, entry.owner)


def _start_heartbeat() -> None:
    global _HEARTBEAT
    if _HEARTBEAT is None or not _HEARTBEAT.is_alive():
        _HEARTBEAT = threading.Thread(target=_heartbeat_loop, name="runstore-heartbeat", daemon=True)
        _HEARTBEAT.start()


def _try_flock(fd: int, mode: int, attempts: int = 5) -> bool:
    """Non-blocking ``flock``; a few short retries ride out another process's :func:`is_owned` probe."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(0.05)
            continue
        return True
    return False


class RunLock:
    """Ownership of a directory by this process: an ``fcntl.flock`` plus ``owner.json`` with a heartbeat.

    The owner is the process, not this object: every ``RunLock`` of this process on the directory
    shares the one lock, which lasts until :meth:`release` or the process ends. The flock dies with
    the process (SIGKILL included), so :func:`is_owned` tells a live owner from a dead one on this
    host; the heartbeat does it for runs on another host. ``shared=True`` lets several cooperating
    processes hold the directory at once (each then locks the parts it writes, e.g. the arms of an
    experiment), while still refusing an exclusive owner.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).resolve()

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self.directory in _HELD

    def acquire(self, shared: bool = False, what: str = "run") -> None:
        """Take the lock (a no-op if this process holds it) or raise :class:`RunInUseError`."""
        with _HELD_LOCK:
            if self.directory in _HELD:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            if not _try_flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX):
                os.close(fd)
                raise RunInUseError(
                    f"{what} {self.directory} is in use by {_owner_text(self.directory)}: wait for that "
                    "process to finish, or stop it and run the command again to resume"
                )
            now = time.time()
            owner = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": datetime.fromtimestamp(now, UTC).isoformat(),
                "heartbeat": now,
                "shared": shared,
            }
            try:
                atomic_write_json(self.directory / OWNER_FILE, owner)
            except BaseException:
                os.close(fd)
                raise
            _HELD[self.directory] = _Held(fd, owner)
            _start_heartbeat()

    def release(self) -> None:
        """Remove our ``owner.json`` and drop the lock (a no-op if this process does not hold it).

        A shared holder leaves ``owner.json``: the other holders' heartbeats rewrite it.
        """
        with _HELD_LOCK:
            entry = _HELD.pop(self.directory, None)
            if entry is None:
                return
            try:
                if (
                    not entry.owner["shared"]
                    and _read_json(self.directory / OWNER_FILE)["pid"] == os.getpid()
                ):
                    (self.directory / OWNER_FILE).unlink()
            except (OSError, ValueError, KeyError):
                pass  # gone already
            os.close(entry.fd)  # closing the descriptor releases the flock


def is_owned(directory: str | os.PathLike[str]) -> bool:
    """Whether a live process holds ``directory``'s run lock.

    On this host the flock decides (probe: a non-blocking exclusive lock). An ``owner.json`` from
    another host counts while its heartbeat is younger than :data:`STALE_AFTER_S`.
    """
    directory = Path(directory)
    try:
        owner = _read_json(directory / OWNER_FILE)
    except (OSError, ValueError):
        owner = {}
    host = owner.get("host")
    if host is not None and host != socket.gethostname():
        return time.time() - float(owner.get("heartbeat", 0.0)) < STALE_AFTER_S
    lock_path = directory / LOCK_FILE
    if not lock_path.exists():
        return False
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's lock
    return False


def effective_status(run_dir: Path, meta: dict[str, Any]) -> str:
    """meta.json's status, except ``interrupted`` for a ``running`` run that no live process owns."""
    status = str(meta.get("status", "unknown"))
    return "interrupted" if status == "running" and not is_owned(run_dir) else status


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
            status=effective_status(run_dir, meta),
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
        self._logger: ParquetLogger | MultiLogger | None = None
        self._lock = RunLock(self.dir)
        self._opened = True  # an existing run: acquiring it is a resume (create_run clears this)

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
        """``running``, ``interrupted`` (running, but no live process owns it), ``finished`` or ``failed``."""
        return effective_status(self.dir, self.meta)

    @property
    def owned(self) -> bool:
        """Whether this object holds the run's lock."""
        return self._lock.held

    @property
    def logger(self) -> ParquetLogger | MultiLogger:
        """ParquetLogger on ``metrics.parquet`` (created on first use; appends to existing metrics),
        plus TensorBoard and MLflow when ``$TRANSFERLAB_METRICS`` chooses them
        (:mod:`~transferlab.platform.metric_sinks`).

        Takes the run's lock first (:class:`RunInUseError` if another process owns the run).
        """
        if self._logger is None:
            self._lock.acquire()
            parquet = ParquetLogger(self.metrics_path)
            sinks = sinks_for_run(self.dir, self.experiment, self.run_id, self.dir.parent.parent)
            self._logger = MultiLogger(parquet, *sinks) if sinks else parquet
        return self._logger

    def write_artifact_json(self, name: str, obj: Any) -> Path:
        """Atomically write ``obj`` as JSON to ``artifacts/<name>``; returns the path.

        Takes the run's lock first (:class:`RunInUseError` if another process owns the run).
        """
        self._lock.acquire()
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

    def acquire(self, shared: bool = False) -> Self:
        """Own the run for writing; reopening an existing run records a resume. Idempotent.

        Raises :class:`RunInUseError` (naming the owner's pid) when another live process owns it.
        An existing run gets ``status: running`` and a timestamp appended to ``resumed_at``.
        ``shared=True`` admits other shared holders (processes splitting one run between them).
        """
        if self._lock.held:
            return self
        self._lock.acquire(shared)
        if self._opened:
            self._opened = False
            resumed = [*self.meta.get("resumed_at", []), _utc_now().isoformat()]
            self.update_meta(status="running", finished_at=None, resumed_at=resumed)
        return self

    def release(self) -> None:
        """Flush the metrics and give up ownership (another process may then resume the run)."""
        try:
            self.close_logger()
        finally:
            self._lock.release()

    def close_logger(self) -> None:
        """Flush and close the metrics logger if one was opened."""
        if self._logger is not None:
            self._logger.close()
            self._logger = None

    def finish(self, status: Literal["finished", "failed"] = "finished", error: str | None = None) -> None:
        """Flush metrics, record ``status`` and ``finished_at`` (plus ``error``) in meta.json, release."""
        if status not in ("finished", "failed"):
            raise ValueError(f"status must be 'finished' or 'failed', got {status!r}")
        try:
            self.close_logger()
        finally:
            try:
                extra: dict[str, Any] = {"error": error} if error is not None else {}
                self.update_meta(status=status, finished_at=_utc_now().isoformat(), **extra)
            finally:
                self._lock.release()

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.finish("failed", error=f"{type(exc).__name__}: {exc}")
        elif self.meta.get("status") == "running":
            self.finish("finished")
        else:
            self.release()


def _new_meta(
    experiment: str, run_id: str, config: BaseConfig, seed: int | None, now: datetime
) -> dict[str, Any]:
    """The ``meta.json`` of a run that starts now (status ``running``); ``seed`` defaults to
    ``config.seed`` when the config has an int ``seed`` field."""
    if seed is None:
        config_seed = getattr(config, "seed", None)
        seed = config_seed if isinstance(config_seed, int) and not isinstance(config_seed, bool) else None
    return {
        "experiment": experiment,
        "run_id": run_id,
        "status": "running",
        "created_at": now.isoformat(),
        "finished_at": None,
        "seed": seed,
        "config_class": config_class_path(type(config)),
        "transferlab_version": transferlab.__version__,
        "python_version": platform.python_version(),
        "git_commit": git_state()[0],
        "hostname": socket.gethostname(),
    }


def start_run_meta(run_dir: str | os.PathLike[str], experiment: str, config: BaseConfig) -> Run:
    """The run contract for a job that owns its directory itself (under its own :class:`RunLock`):
    write ``meta.json`` (status ``running``) if there is none, or mark a rerun as a resume; the
    returned :class:`Run` records the end with :func:`end_run_meta`. ``runs list`` then sees the job."""
    directory = Path(run_dir)
    now = _utc_now()
    if (directory / META_FILE).is_file():
        run = Run(directory)
        resumed = [*run.meta.get("resumed_at", []), now.isoformat()]
        run.update_meta(status="running", finished_at=None, resumed_at=resumed)
        return run
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_json(directory / META_FILE, _new_meta(experiment, directory.name, config, None, now))
    return Run(directory)


@contextlib.contextmanager
def recorded_run(run_dir: str | os.PathLike[str], experiment: str, config: BaseConfig) -> Iterator[Run]:
    """:func:`start_run_meta`, then :func:`end_run_meta` with ``finished``, or ``failed`` and the error
    (which goes on) when the block raises: a job that owns its directory, as a run ``runs list`` sees."""
    run = start_run_meta(run_dir, experiment, config)
    try:
        yield run
    except BaseException as err:
        end_run_meta(run, err)
        raise
    end_run_meta(run)


def end_run_meta(run: Run, error: BaseException | None = None) -> None:
    """Record ``finished`` (or ``failed`` with the error) and the time in the run's ``meta.json``."""
    fields: dict[str, Any] = {
        "status": "failed" if error else "finished",
        "finished_at": _utc_now().isoformat(),
    }
    if error is not None:
        fields["error"] = f"{type(error).__name__}: {error}"
    run.update_meta(**fields)


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
        shared: bool = False,
    ) -> Run:
        """Create a new run directory with ``config.json`` and ``meta.json`` (status ``running``).

        ``seed`` defaults to ``config.seed`` when the config has an int ``seed`` field. Refuses to
        reuse an existing run directory (use :meth:`open_run` to resume). The returned run is owned
        by this process (see :meth:`Run.acquire`; ``shared`` as there) until it finishes.
        """
        if not isinstance(config, BaseConfig):
            raise TypeError(f"config must be a BaseConfig, got {type(config).__name__}")
        chosen_sinks()  # a bad $TRANSFERLAB_METRICS fails here, before anything is created
        now = _utc_now()
        run_id = run_id if run_id is not None else new_run_id(now)
        run_dir = self.run_dir(experiment, run_id)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise FileExistsError(
                f"run directory already exists: {run_dir}; pass a new run_id, or resume it with "
                f"RunStore.open_run({experiment!r}, {run_id!r})"
            ) from None
        meta = _new_meta(experiment, run_id, config, seed, now)
        lock = RunLock(run_dir)
        try:
            lock.acquire(shared)
            config.save(run_dir / CONFIG_FILE)
            atomic_write_json(run_dir / META_FILE, meta)
        except BaseException:
            lock.release()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        run = Run(run_dir)
        run._lock, run._opened = lock, False
        return run

    def open_run(self, experiment: str, run_id: str) -> Run:
        """Open an existing run to read it, or to resume it with :meth:`Run.acquire` / ``with run:``.

        Its logger appends to the existing metrics; a trainer that resumes from a checkpoint drops
        the rows logged after it (:func:`~transferlab.platform.metrics.drop_logged_after`).
        """
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

"""A tiny metrics-logging interface (in the spirit of SB3's ``logger.record`` / d3rlpy's LoggerAdapter).

Every trainer logs scalars through a :class:`MetricsLogger`::

    logger.log(step, {"train/loss": 0.31, "eval/pass@1": 0.42})

Keys are namespaced ``namespace/name`` (see ``docs/metrics.md``); a malformed key raises
``ValueError``. Metrics on disk are a long-format Parquet table with columns
``step:int64, key:str, value:float64, wall_time:float64`` — read them back with
:func:`read_metrics` or, one column per key, :func:`wide_metrics`.

Exact resume: a trainer flushes its logger *before* writing each checkpoint, and on resume calls
:func:`drop_logged_after` with the checkpoint's step (``-1`` when it starts over), so a run killed at
any moment ends with every (step, key) row exactly once.
"""

from __future__ import annotations

import io
import math
import numbers
import operator
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, TextIO, runtime_checkable

import numpy as np
import pandas as pd

from transferlab.platform.io import AtomicRewriter

__all__ = [
    "COLUMNS",
    "KEY_PATTERN",
    "ConsoleLogger",
    "MemoryLogger",
    "MetricsLogger",
    "MultiLogger",
    "ParquetLogger",
    "drop_logged_after",
    "read_metrics",
    "validate_key",
    "validate_metrics",
    "wide_metrics",
]

KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(/[a-z0-9_][a-z0-9_.@-]*)+$")
"""A metric key: a lowercase namespace, then one or more ``/``-separated name parts."""

COLUMNS: tuple[str, ...] = ("step", "key", "value", "wall_time")
"""Columns of the long-format metrics table, in order."""

_KEY_FORM = (
    "'namespace/name' — lowercase namespace [a-z][a-z0-9_]*, then one or more '/part' segments "
    "of [a-z0-9_.@-] (e.g. 'train/loss', 'eval/pass@1', 'env/episode/return')"
)


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid namespaced metric key, else raise ``ValueError`` saying why."""
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        hint = ""
        if isinstance(key, str):
            if "/" not in key:
                hint = f"; did you mean 'train/{key.lower()}'?"
            elif key != key.lower():
                hint = f"; did you mean {key.lower()!r}?"
        raise ValueError(f"invalid metric key {key!r}: expected {_KEY_FORM}{hint}")
    return key


def _validate_step(step: int) -> int:
    """Return ``step`` as a non-negative Python int (numpy ints accepted, floats/bools rejected)."""
    if isinstance(step, bool):
        raise TypeError(f"step must be an int, got bool {step!r}")
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an int, got {type(step).__name__} {step!r}") from None
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


def validate_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """Check every key and convert every value to ``float`` (NaN/inf allowed; non-numbers rejected)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        validate_key(key)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.item()
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"metric {key!r}: value must be a real number, got {type(value).__name__} {value!r}"
            )
        out[key] = float(value)
    return out


@runtime_checkable
class MetricsLogger(Protocol):
    """Anything that records scalar metrics at integer steps."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` (namespaced key -> scalar) at ``step``."""
        ...

    def flush(self) -> None:
        """Push buffered metrics to their destination."""
        ...

    def close(self) -> None:
        """Flush and release resources; further ``log`` calls are errors."""
        ...


class _LoggerBase:
    """Shared plumbing: closed-state checking and context-manager support."""

    _closed: bool = False

    def close(self) -> None:
        """Flush and release resources (subclasses implement)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        """Raise ``RuntimeError`` if this logger was closed."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _frame(steps: list[int], keys: list[str], values: list[float], times: list[float]) -> pd.DataFrame:
    """Build a long-format metrics frame with the canonical dtypes."""
    return pd.DataFrame(
        {
            "step": np.asarray(steps, dtype=np.int64),
            "key": pd.Series(keys, dtype="str"),
            "value": np.asarray(values, dtype=np.float64),
            "wall_time": np.asarray(times, dtype=np.float64),
        }
    )


def _normalise(df: pd.DataFrame, source: object) -> pd.DataFrame:
    """Check columns and coerce dtypes of a metrics frame read from ``source``."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{source} is not a metrics table: missing columns {missing}; expected {list(COLUMNS)}"
        )
    return _frame(
        df["step"].astype("int64").tolist(),
        df["key"].astype("str").tolist(),
        df["value"].astype("float64").tolist(),
        df["wall_time"].astype("float64").tolist(),
    )


class ParquetLogger(AtomicRewriter, _LoggerBase):
    """Buffered logger writing a long-format Parquet file.

    Every ``flush_every`` calls to :meth:`log` (and on :meth:`flush` / :meth:`close`) the whole file
    is rewritten atomically with all rows so far, so a crash never leaves a corrupt file. If ``path``
    already exists its rows are loaded first and new rows are appended (resume).
    """

    def __init__(self, path: str | os.PathLike[str], flush_every: int = 100) -> None:
        self._init_rewriter(path, flush_every)
        self._steps: list[int] = []
        self._keys: list[str] = []
        self._values: list[float] = []
        self._times: list[float] = []
        if self.path.exists():
            existing = read_metrics(self.path)
            self._steps = existing["step"].tolist()
            self._keys = existing["key"].tolist()
            self._values = existing["value"].tolist()
            self._times = existing["wall_time"].tolist()

    @property
    def num_rows(self) -> int:
        """Rows held so far (loaded from disk + logged), flushed or not."""
        return len(self._steps)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Buffer one row per key; flush when ``flush_every`` log calls have accumulated."""
        self._check_open()
        step = _validate_step(step)
        clean = validate_metrics(metrics)
        now = time.time()
        with self._lock:
            for key, value in clean.items():
                self._steps.append(step)
                self._keys.append(key)
                self._values.append(value)
                self._times.append(now)
            due = self._note_added(bool(clean))
        if due:
            self.flush()

    def drop_after(self, step: int) -> int:
        """Forget rows logged after ``step`` (a resumed run redoes those steps); returns how many."""
        with self._lock:
            keep = [i for i, s in enumerate(self._steps) if s <= step]
            dropped = len(self._steps) - len(keep)
            if dropped:
                self._steps = [self._steps[i] for i in keep]
                self._keys = [self._keys[i] for i in keep]
                self._values = [self._values[i] for i in keep]
                self._times = [self._times[i] for i in keep]
                self._dirty = True
        if dropped:
            self.flush()
        return dropped

    def _payload(self) -> bytes:
        """Every row so far as a Parquet file (an empty table with the columns if none yet)."""
        buffer = io.BytesIO()
        _frame(self._steps, self._keys, self._values, self._times).to_parquet(buffer, index=False)
        return buffer.getvalue()

    def close(self) -> None:
        """Flush and mark closed (idempotent)."""
        if self._closed:
            return
        self.flush()
        self._closed = True

    def to_frame(self) -> pd.DataFrame:
        """All rows so far (including unflushed ones) as a long-format frame."""
        with self._lock:
            return _frame(self._steps, self._keys, self._values, self._times)


class MemoryLogger(_LoggerBase):
    """Keeps every row in memory; handy in tests and notebooks."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float, float]] = []
        """``(step, key, value, wall_time)`` tuples in logging order."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append one row per key."""
        self._check_open()
        step = _validate_step(step)
        now = time.time()
        self.rows.extend((step, key, value, now) for key, value in validate_metrics(metrics).items())

    def flush(self) -> None:
        """Nothing to flush."""

    def drop_after(self, step: int) -> int:
        """Forget rows logged after ``step`` (a resumed run redoes those steps); returns how many."""
        before = len(self.rows)
        self.rows = [row for row in self.rows if row[0] <= step]
        return before - len(self.rows)

    def close(self) -> None:
        """Mark closed; rows stay readable."""
        self._closed = True

    def keys(self) -> list[str]:
        """Distinct keys logged, in first-seen order."""
        return list(dict.fromkeys(row[1] for row in self.rows))

    def series(self, key: str) -> pd.Series:
        """Values of ``key`` as a float Series indexed by step (logging order, duplicates kept)."""
        validate_key(key)
        picked = [(s, v) for s, k, v, _ in self.rows if k == key]
        index = pd.Index([s for s, _ in picked], dtype="int64", name="step")
        return pd.Series([v for _, v in picked], index=index, dtype="float64", name=key)

    def latest(self, key: str) -> float | None:
        """Most recently logged value of ``key``, or None if never logged."""
        for _, k, v, _ in reversed(self.rows):
            if k == key:
                return v
        return None

    def to_frame(self) -> pd.DataFrame:
        """All rows as a long-format frame."""
        return _frame(
            [r[0] for r in self.rows],
            [r[1] for r in self.rows],
            [r[2] for r in self.rows],
            [r[3] for r in self.rows],
        )


def _fmt(value: float) -> str:
    """Compact number formatting for console output."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


class ConsoleLogger(_LoggerBase):
    """Prints the latest value of every key every ``every`` calls to :meth:`log`.

    Uses a ``rich`` table when ``use_rich`` is True (default: when ``file`` is a terminal), otherwise
    one plain line: ``step 100 | eval/return=10.5 | train/loss=0.123``.
    """

    def __init__(self, every: int = 1, file: TextIO | None = None, use_rich: bool | None = None) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.file = file
        self._use_rich = use_rich
        self._latest: dict[str, float] = {}
        self._step: int | None = None
        self._calls = 0
        self._pending = False

    def _stream(self) -> TextIO:
        return self.file if self.file is not None else sys.stdout

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Remember the values; print every ``every``-th call."""
        self._check_open()
        self._step = _validate_step(step)
        self._latest.update(validate_metrics(metrics))
        self._calls += 1
        self._pending = True
        if self._calls % self.every == 0:
            self._print()

    def _print(self) -> None:
        stream = self._stream()
        use_rich = self._use_rich if self._use_rich is not None else stream.isatty()
        items = sorted(self._latest.items())
        if use_rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=f"step {self._step}", show_header=True)
            table.add_column("metric")
            table.add_column("value", justify="right")
            for key, value in items:
                table.add_row(key, _fmt(value))
            Console(file=stream).print(table)
        else:
            body = " | ".join(f"{k}={_fmt(v)}" for k, v in items)
            print(f"step {self._step} | {body}", file=stream, flush=True)
        self._pending = False

    def flush(self) -> None:
        """Print the latest values if some were logged since the last print."""
        if self._pending:
            self._print()

    def close(self) -> None:
        """Flush and mark closed (idempotent)."""
        if self._closed:
            return
        self.flush()
        self._closed = True


class MultiLogger(_LoggerBase):
    """Fans every call out to several loggers (keys are validated once, up front)."""

    def __init__(self, *loggers: MetricsLogger) -> None:
        self.loggers: tuple[MetricsLogger, ...] = loggers

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Validate, then forward to every logger."""
        self._check_open()
        step = _validate_step(step)
        clean = validate_metrics(metrics)
        for logger in self.loggers:
            logger.log(step, clean)

    def flush(self) -> None:
        """Flush every logger, even if one fails (the first error is re-raised)."""
        self._each("flush")

    def drop_after(self, step: int) -> int:
        """Drop rows after ``step`` in every logger that keeps rows; returns the most dropped by one."""
        return max((drop_logged_after(logger, step) for logger in self.loggers), default=0)

    def close(self) -> None:
        """Close every logger, even if one fails (the first error is re-raised)."""
        if self._closed:
            return
        self._closed = True
        self._each("close")

    def _each(self, method: str) -> None:
        first: BaseException | None = None
        for logger in self.loggers:
            try:
                getattr(logger, method)()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first


def drop_logged_after(logger: MetricsLogger | None, step: int) -> int:
    """Forget the rows ``logger`` holds for steps after ``step``; returns how many were dropped.

    For a resumed trainer: ``step`` is its checkpoint's last step, or ``-1`` when no checkpoint
    exists and it starts over. Loggers that keep no rows (console) drop nothing; wrappers that
    forward to an ``inner`` logger (e.g. a key-prefixing one) are followed.
    """
    if logger is None:
        return 0
    drop = getattr(logger, "drop_after", None)
    if callable(drop):
        return int(drop(step))
    inner = getattr(logger, "inner", None)
    return drop_logged_after(inner, step) if isinstance(inner, MetricsLogger) else 0


def read_metrics(path: str | os.PathLike[str], missing_ok: bool = False) -> pd.DataFrame:
    """Read a metrics Parquet file as a long frame (``step, key, value, wall_time``) in logging order.

    A missing file raises ``FileNotFoundError``, or gives an empty frame when ``missing_ok``.
    """
    p = Path(path)
    if not p.exists():
        if missing_ok:
            return _frame([], [], [], [])
        raise FileNotFoundError(f"metrics file not found: {p}")
    return _normalise(pd.read_parquet(p), p)


def wide_metrics(source: str | os.PathLike[str] | pd.DataFrame) -> pd.DataFrame:
    """One row per step (index ``step``), one column per key (sorted), NaN where a key was not logged.

    ``source`` is a metrics file or a long frame. If a key was logged more than once at a step (e.g.
    after a resume), the last value wins.
    """
    df = source if isinstance(source, pd.DataFrame) else read_metrics(source)
    df = _normalise(df, "metrics frame") if isinstance(source, pd.DataFrame) else df
    latest = df.drop_duplicates(subset=["step", "key"], keep="last")
    wide = latest.pivot(index="step", columns="key", values="value").sort_index()
    wide = wide.reindex(columns=sorted(wide.columns))
    wide.columns.name = None
    wide.index = wide.index.astype("int64")
    wide.index.name = "step"
    return wide

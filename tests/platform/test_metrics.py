"""Metrics loggers: key convention, Parquet round trip, resume, wide pivot, fan-out."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from transferlab.platform.metrics import (
    ConsoleLogger,
    MemoryLogger,
    MetricsLogger,
    MultiLogger,
    ParquetLogger,
    drop_logged_after,
    read_metrics,
    validate_key,
    wide_metrics,
)


@pytest.mark.parametrize(
    "key", ["train/loss", "eval/pass@1", "env/episode/return", "sys/gpu_mem.max", "t2/a-b"]
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    "key", ["loss", "Train/loss", "train/", "/loss", "train/Loss", "train loss/x", "1x/y"]
)
def test_bad_key_rejected_with_expected_form(key: str) -> None:
    with pytest.raises(ValueError, match="namespace/name") as info:
        MemoryLogger().log(0, {key: 1.0})
    assert repr(key) in str(info.value)


def test_bad_key_hint() -> None:
    with pytest.raises(ValueError, match="did you mean 'train/loss'"):
        validate_key("loss")


def test_bad_values_and_steps_rejected() -> None:
    logger = MemoryLogger()
    with pytest.raises(TypeError, match="train/loss"):
        logger.log(0, {"train/loss": "high"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="step must be >= 0"):
        logger.log(-1, {"train/loss": 1.0})
    with pytest.raises(TypeError, match="step must be an int"):
        logger.log(1.5, {"train/loss": 1.0})  # type: ignore[arg-type]
    assert logger.rows == []


def test_all_loggers_satisfy_protocol(tmp_path: Path) -> None:
    for logger in (ParquetLogger(tmp_path / "m.parquet"), MemoryLogger(), ConsoleLogger(), MultiLogger()):
        assert isinstance(logger, MetricsLogger)


def test_parquet_roundtrip_values_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "metrics.parquet"
    with ParquetLogger(path, flush_every=1000) as logger:
        logger.log(0, {"train/loss": 1.5, "train/lr": np.float32(0.25)})  # type: ignore[dict-item]
        logger.log(np.int64(10), {"train/loss": 0.5, "eval/pass@1": 1})  # type: ignore[arg-type]
        logger.log(20, {"train/loss": float("nan")})
        assert not path.exists()  # still buffered
    schema = pq.read_schema(path)
    assert str(schema.field("step").type) == "int64"
    assert str(schema.field("value").type) == "double"
    assert str(schema.field("wall_time").type) == "double"
    assert "string" in str(schema.field("key").type)

    df = read_metrics(path)
    assert list(df.columns) == ["step", "key", "value", "wall_time"]
    assert df["step"].tolist() == [0, 0, 10, 10, 20]
    assert df["key"].tolist() == ["train/loss", "train/lr", "train/loss", "eval/pass@1", "train/loss"]
    assert df["value"].tolist()[:4] == [1.5, 0.25, 0.5, 1.0]
    assert math.isnan(df["value"].iloc[4])
    assert (df["wall_time"] > 1e9).all()


def test_parquet_flushes_every_n_calls(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    logger = ParquetLogger(path, flush_every=2)
    logger.log(1, {"train/loss": 1.0})
    assert not path.exists()
    logger.log(2, {"train/loss": 2.0})
    assert read_metrics(path)["step"].tolist() == [1, 2]
    logger.log(3, {"train/loss": 3.0})
    assert read_metrics(path)["step"].tolist() == [1, 2]
    logger.close()
    assert read_metrics(path)["step"].tolist() == [1, 2, 3]
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(4, {"train/loss": 4.0})


def test_parquet_resume_appends(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    with ParquetLogger(path) as first:
        first.log(1, {"train/loss": 1.0})
        first.log(2, {"train/loss": 0.8})
    resumed = ParquetLogger(path)
    assert resumed.num_rows == 2
    resumed.log(3, {"train/loss": 0.6, "eval/return": 5.0})
    resumed.close()
    df = read_metrics(path)
    assert df["step"].tolist() == [1, 2, 3, 3]
    assert df["value"].tolist() == [1.0, 0.8, 0.6, 5.0]


def test_close_without_logging_writes_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    ParquetLogger(path).close()
    df = read_metrics(path)
    assert df.empty and list(df.columns) == ["step", "key", "value", "wall_time"]


def test_read_metrics_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="metrics file not found"):
        read_metrics(tmp_path / "none.parquet")
    assert read_metrics(tmp_path / "none.parquet", missing_ok=True).empty


def test_wide_pivot(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    with ParquetLogger(path) as logger:
        logger.log(0, {"train/loss": 2.0})
        logger.log(5, {"train/loss": 1.0, "eval/return": 3.0})
        logger.log(5, {"eval/return": 4.0})  # re-logged at the same step: last value wins
        logger.log(9, {"eval/return": 6.0})
    wide = wide_metrics(path)
    assert wide.index.name == "step"
    assert wide.index.tolist() == [0, 5, 9]
    assert list(wide.columns) == ["eval/return", "train/loss"]
    assert wide.loc[5, "eval/return"] == 4.0
    assert wide.loc[5, "train/loss"] == 1.0
    assert wide["eval/return"].isna().tolist() == [True, False, False]
    assert wide["train/loss"].isna().tolist() == [False, False, True]


def test_memory_logger_series_and_wide() -> None:
    logger = MemoryLogger()
    logger.log(1, {"train/loss": 3.0, "eval/return": 1.0})
    logger.log(2, {"train/loss": 2.0})
    series = logger.series("train/loss")
    assert series.name == "train/loss"
    assert series.index.tolist() == [1, 2] and series.tolist() == [3.0, 2.0]
    assert logger.series("eval/never").empty
    assert logger.latest("train/loss") == 2.0
    assert logger.latest("eval/never") is None
    assert logger.keys() == ["train/loss", "eval/return"]
    wide = wide_metrics(logger.to_frame())
    assert wide["train/loss"].tolist() == [3.0, 2.0]
    assert wide["eval/return"].iloc[0] == 1.0
    assert wide["eval/return"].isna().tolist() == [False, True]


def test_console_logger_prints_every_n() -> None:
    out = io.StringIO()
    logger = ConsoleLogger(every=2, file=out, use_rich=False)
    logger.log(1, {"train/loss": 0.5})
    assert out.getvalue() == ""
    logger.log(2, {"train/loss": 0.25, "eval/return": 12.0})
    assert out.getvalue() == "step 2 | eval/return=12 | train/loss=0.25\n"
    logger.log(3, {"train/loss": 0.125})
    logger.close()  # flushes the pending, unprinted values
    assert out.getvalue().splitlines()[-1] == "step 3 | eval/return=12 | train/loss=0.125"


def test_console_logger_rich_table() -> None:
    out = io.StringIO()
    logger = ConsoleLogger(file=out, use_rich=True)
    logger.log(7, {"train/loss": 0.5})
    text = out.getvalue()
    assert "step 7" in text and "train/loss" in text and "0.5" in text


def test_multi_logger_fans_out_and_validates_first(tmp_path: Path) -> None:
    mem = MemoryLogger()
    path = tmp_path / "m.parquet"
    multi = MultiLogger(mem, ParquetLogger(path))
    multi.log(1, {"train/loss": 1.0})
    with pytest.raises(ValueError, match="invalid metric key"):
        multi.log(2, {"train/loss": 2.0, "BAD": 1.0})
    multi.close()
    assert [r[:3] for r in mem.rows] == [(1, "train/loss", 1.0)]
    pd.testing.assert_series_equal(
        read_metrics(path)["value"], pd.Series([1.0], name="value"), check_index_type=False
    )


class _Prefixed:
    """A key-prefixing wrapper like ops training's PrefixLogger: forwards to ``inner``."""

    def __init__(self, inner: MetricsLogger) -> None:
        self.inner = inner

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.inner.log(step, {f"ops/{k}": v for k, v in metrics.items()})

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


def test_drop_logged_after_reaches_every_logger_that_keeps_rows(tmp_path: Path) -> None:
    memory, parquet = MemoryLogger(), ParquetLogger(tmp_path / "m.parquet")
    fan = MultiLogger(_Prefixed(memory), parquet, ConsoleLogger(file=io.StringIO()))
    for step in range(5):
        fan.log(step, {"train/loss": float(step)})
    fan.flush()
    assert drop_logged_after(fan, 2) == 2
    assert [r[0] for r in memory.rows] == [0, 1, 2] and memory.keys() == ["ops/train/loss"]
    assert read_metrics(parquet.path)["step"].tolist() == [0, 1, 2]  # rewritten on disk at once
    assert drop_logged_after(memory, -1) == 3 and memory.rows == []
    assert drop_logged_after(ConsoleLogger(file=io.StringIO()), 0) == 0
    assert drop_logged_after(None, 0) == 0

"""Runs side by side: the pure part of ``transferlab runs compare`` and of the app's Experiments page.

Reads run directories (``config.json``, ``meta.json``, ``metrics.parquet``; ``result.json`` and
``report.md`` for the run dirs ``transferlab compare`` writes) and returns plain data and frames:
the config keys that differ, each metric's last/min/max, and curves over steps. Nothing here prints
or imports streamlit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from transferlab.platform.metrics import read_metrics
from transferlab.platform.runstore import (
    CONFIG_FILE,
    META_FILE,
    METRICS_FILE,
    RunInfo,
    RunStore,
    validate_name,
)

__all__ = [
    "REPORT_FILE",
    "RESULT_FILE",
    "Comparison",
    "MetricSummary",
    "RunCompareError",
    "compare",
    "config_frame",
    "config_value",
    "curves",
    "differing_keys",
    "experiments",
    "flatten",
    "list_runs",
    "metric_series",
    "metrics_frame",
    "read_config",
    "read_report",
    "read_result",
    "run_label",
    "summarize",
]

RESULT_FILE = "result.json"
REPORT_FILE = "report.md"


class RunCompareError(ValueError):
    """A run that cannot be compared (e.g. an unreadable ``config.json``); the message says which."""


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> one level with dotted keys (``{"opt": {"lr": 1}}`` -> ``{"opt.lr": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.json`` flattened (``{}`` when it has none); unreadable -> RunCompareError."""
    try:
        data = json.loads((Path(run_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RunCompareError(f"cannot read {Path(run_dir) / CONFIG_FILE}: {err}") from None
    return flatten(data) if isinstance(data, dict) else {}


def differing_keys(configs: Sequence[Mapping[str, Any]]) -> tuple[list[str], int]:
    """Config keys whose value is not the same in every run (absent counts as a value), and how many are."""
    if not configs:
        return [], 0
    absent = object()
    keys = sorted({k for cfg in configs for k in cfg})
    differ = [k for k in keys if any(cfg.get(k, absent) != configs[0].get(k, absent) for cfg in configs[1:])]
    return differ, len(keys) - len(differ)


def config_value(value: Any) -> str:
    """A config value as one short string (strings as they are, the rest as sorted JSON)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def metric_series(metrics: pd.DataFrame, key: str) -> pd.Series:
    """Values of ``key`` indexed by step, sorted by step (the last logged value wins at a repeated step)."""
    rows = metrics[metrics["key"] == key].drop_duplicates(subset="step", keep="last")
    return rows.set_index("step")["value"].sort_index(kind="stable")


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one run: its value at the highest step, and min/max over steps."""

    last: float
    step: int
    min: float
    max: float
    points: int


def summarize(metrics: pd.DataFrame, key: str) -> MetricSummary | None:
    """The :class:`MetricSummary` of ``key`` in a long metrics frame, or None if it was never logged."""
    values = metric_series(metrics, key)
    if values.empty:
        return None
    return MetricSummary(
        last=float(values.iloc[-1]),
        step=int(values.index[-1]),
        min=float(values.min()),
        max=float(values.max()),
        points=len(values),
    )


# ----------------------------------------------------------------------------- listing for the app


def _created_from(run_dir: Path) -> str:
    """Creation time of a run dir without ``meta.json``: its ``YYYYmmdd-HHMMSS-...`` id, else mtime."""
    try:
        when = datetime.strptime(run_dir.name[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        when = datetime.fromtimestamp(run_dir.stat().st_mtime, tz=UTC)
    return when.isoformat()


def _result_only_info(run_dir: Path) -> RunInfo:
    """A RunInfo for a ``transferlab compare`` dir (``result.json`` but no ``meta.json``)."""
    try:
        seed = read_config(run_dir).get("seed")
    except RunCompareError:
        seed = None
    return RunInfo(
        experiment=run_dir.parent.name,
        run_id=run_dir.name,
        dir=run_dir,
        status="finished",
        created_at=_created_from(run_dir),
        finished_at=None,
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        meta={},
    )


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / META_FILE).is_file() or (path / RESULT_FILE).is_file())


def _valid(name: str) -> bool:
    try:
        validate_name(name)
    except ValueError:
        return False
    return True


def experiments(root: Path) -> list[str]:
    """Experiment names under ``root`` that hold at least one run, sorted."""
    if not Path(root).is_dir():
        return []
    return sorted(
        p.name
        for p in Path(root).iterdir()
        if p.is_dir() and _valid(p.name) and any(_is_run_dir(r) for r in p.iterdir())
    )


def list_runs(root: Path, experiment: str) -> list[RunInfo]:
    """Runs of ``experiment``, newest first: RunStore's, plus ``transferlab compare`` dirs (no meta)."""
    infos = RunStore(root).list_runs(experiment)
    exp_dir = Path(root) / experiment
    extra = [
        _result_only_info(p)
        for p in sorted(exp_dir.iterdir() if exp_dir.is_dir() else [])
        if p.is_dir() and not (p / META_FILE).is_file() and (p / RESULT_FILE).is_file()
    ]
    return sorted([*infos, *extra], key=lambda i: (i.created_at, i.run_id), reverse=True)


def run_label(info: RunInfo) -> str:
    """``<run-id> · <status> · <created> · seed <n>`` for pickers."""
    seed = "no seed" if info.seed is None else f"seed {info.seed}"
    return f"{info.run_id} · {info.status} · {info.created_at[:19].replace('T', ' ')} · {seed}"


# ----------------------------------------------------------------------------- side by side


@dataclass(frozen=True)
class Comparison:
    """Selected runs loaded once: their configs, metrics and the config keys that differ."""

    infos: list[RunInfo]
    configs: list[dict[str, Any]]
    frames: list[pd.DataFrame]
    differ: list[str]
    n_equal: int

    @property
    def labels(self) -> list[str]:
        """Run ids, or ``<experiment>/<run-id>`` where an id repeats."""
        ids = [i.run_id for i in self.infos]
        return [i.run_id if ids.count(i.run_id) == 1 else f"{i.experiment}/{i.run_id}" for i in self.infos]

    @property
    def metric_keys(self) -> list[str]:
        """Every metric key some selected run logged, sorted."""
        return sorted({str(k) for df in self.frames for k in df["key"]})


def _arm_prefix(arm_dir: Path, run_dir: Path) -> str:
    """``arms/<arm>/`` with the arm's path parts made metric-key safe (lowercase, ``[a-z0-9_.@-]``)."""
    parts = arm_dir.relative_to(run_dir / "arms").parts
    safe = [re.sub(r"[^a-z0-9_.@-]", "_", p.lower()).lstrip(".@-") or "_" for p in parts]
    return "arms/" + "/".join(safe) + "/"


def read_run_metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics, an experiment's arms included: each arm's ``arms/<arm>/metrics.parquet`` rows
    with their keys under ``arms/<arm>/`` (so ``runs compare`` and its plots see what the arms logged)."""
    run_dir = Path(run_dir)
    frames = [read_metrics(run_dir / METRICS_FILE, missing_ok=True)]
    for path in sorted((run_dir / "arms").glob(f"**/{METRICS_FILE}")):
        arm = read_metrics(path, missing_ok=True)
        if not arm.empty:
            arm = arm.assign(key=_arm_prefix(path.parent, run_dir) + arm["key"].astype(str))
            frames.append(arm)
    frames = [f for f in frames if not f.empty] or frames[:1]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def compare(infos: Sequence[RunInfo]) -> Comparison:
    """Read the configs and metrics (arms' included: :func:`read_run_metrics`) of ``infos``."""
    configs = [read_config(i.dir) for i in infos]
    frames = [read_run_metrics(i.dir) for i in infos]
    differ, n_equal = differing_keys(configs)
    return Comparison(list(infos), configs, frames, differ, n_equal)


MEANINGFUL = ("held_out", "success", "eval/", "reward", "return", "profit", "loss")
"""What a page opens on, best first: a key holding the first of these that any key holds."""


def default_metric(keys: Sequence[str]) -> str | None:
    """The metric to show first: held-out success before training success, evaluation before
    training, then reward or return, profit, loss (see :data:`MEANINGFUL`); the first key otherwise.

    >>> default_metric(["demo/steps", "train/loss", "eval/held_out_success", "train/success"])
    'eval/held_out_success'
    """
    for word in MEANINGFUL:
        hits = [k for k in keys if word in k]
        if hits:
            return hits[0]
    return keys[0] if keys else None


def config_frame(comparison: Comparison) -> pd.DataFrame:
    """One row per differing config key, one column per run; ``—`` where a run lacks the key."""
    rows = {
        key: [config_value(c[key]) if key in c else "—" for c in comparison.configs]
        for key in comparison.differ
    }
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=comparison.labels)
    frame.index.name = "config key"
    return frame


def metrics_frame(comparison: Comparison, keys: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows ``(metric, stat)`` for stat in last/step/min/max, one column per run; NaN where not logged."""
    keys = comparison.metric_keys if keys is None else list(keys)
    stats = ("last", "step", "min", "max")
    rows: list[dict[str, Any]] = []
    for key in keys:
        summaries = [summarize(df, key) for df in comparison.frames]
        for stat in stats:
            row: dict[str, Any] = {"metric": key, "stat": stat}
            for label, s in zip(comparison.labels, summaries, strict=True):
                row[label] = math.nan if s is None else float(getattr(s, stat))
            rows.append(row)
    return pd.DataFrame(rows, columns=["metric", "stat", *comparison.labels])


def curves(comparison: Comparison, key: str) -> pd.DataFrame:
    """``key`` over steps: index ``step``, one column per run that logged it (NaN between its steps)."""
    series = {
        label: metric_series(df, key) for label, df in zip(comparison.labels, comparison.frames, strict=True)
    }
    series = {label: s for label, s in series.items() if not s.empty}
    if not series:
        return pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    frame = pd.concat(series, axis=1).sort_index()
    frame.index.name = "step"
    return frame


def read_report(run_dir: Path) -> str | None:
    """The run's ``report.md`` (what ``transferlab compare`` writes), or None."""
    path = Path(run_dir) / REPORT_FILE
    return path.read_text(encoding="utf-8") if path.is_file() else None


def read_result(run_dir: Path) -> Any | None:
    """The run's parsed ``result.json``, or None when it has none; malformed -> RunCompareError."""
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunCompareError(f"cannot read {path}: {err}") from None

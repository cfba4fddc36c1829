"""The learned simulator as one object: fit from logs, make markets, save to and load from a directory.

A simulator directory holds::

    config.json       the SimFitConfig it was fitted with (``load_config`` rebuilds it)
    params.npz        the compiled parameters (SimParams: lookup tables, coefficients, start state)
    fit_report.json   held-out purchase log loss / AUC vs a constant, daily orders on the held-out
                      tail, the fitted noise and every mechanism's estimates, sizes and fit time
    fit_report.md     the same, for people

Saving is atomic: everything is written to a temporary sibling directory renamed into place.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from transferlab.platform.config import ConfigError
from transferlab.platform.io import atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text
from transferlab.simulator.learned.fast_market import SimMarket, SimParams
from transferlab.simulator.learned.fit import SimFitConfig, fit_simulator
from transferlab.simulator.logs import Logs

SIM_FILES = ("config.json", "params.npz", "fit_report.json", "fit_report.md")


class SimulatorError(ValueError):
    """A simulator directory is missing, incomplete or unreadable; the message says how to fix it."""


class LearnedSimulator:
    """A market simulator fitted on logs only.

    >>> sim = LearnedSimulator(SimFitConfig(), SimParams.toy(), {})
    >>> sim.market(n_envs=4, n_customers=100, seed=0).reset(seed=0).shape
    (4, 17)
    """

    def __init__(self, config: SimFitConfig, params: SimParams, report: dict[str, Any]) -> None:
        self.config = config
        self.params = params
        self.report = report

    @classmethod
    def fit(cls, logs: Logs, config: SimFitConfig | None = None) -> LearnedSimulator:
        """Fit every mechanism on ``logs`` (see :mod:`transferlab.simulator.learned.fit`)."""
        config = config or SimFitConfig()
        result = fit_simulator(logs, config)
        return cls(config, result.params, result.report)

    def market(
        self, n_envs: int = 1, n_customers: int = 1000, seed: int = 0, track_campaigns: bool = True
    ) -> SimMarket:
        """``n_envs`` simulated markets of ``n_customers`` customers, reset with ``seed``."""
        return SimMarket(self.params, n_envs, n_customers, seed, track_campaigns)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the simulator directory atomically; ``path`` must not exist or be empty."""
        out = Path(path)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise SimulatorError(
                f"{out} already exists and is not empty: choose a new directory or remove it"
            )
        with atomic_directory(out) as tmp:
            self.config.save(tmp / "config.json")
            buffer = io.BytesIO()
            np.savez_compressed(buffer, allow_pickle=False, **self.params.to_arrays())
            atomic_write_bytes(tmp / "params.npz", buffer.getvalue())
            atomic_write_json(tmp / "fit_report.json", _jsonable(self.report))
            atomic_write_text(tmp / "fit_report.md", report_markdown(self.report))
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LearnedSimulator:
        """Read a directory written by :meth:`save`."""
        import json

        root = Path(path)
        missing = [f for f in SIM_FILES[:3] if not (root / f).exists()]
        if missing:
            raise SimulatorError(
                f"{root} is not a learned simulator (missing {', '.join(missing)}): "
                f"make one with `transferlab sim fit LOGS --out {root}`"
            )
        try:
            config = SimFitConfig.from_file(root / "config.json")
        except ConfigError as exc:
            raise SimulatorError(f"{root / 'config.json'}: {exc}") from None
        with np.load(root / "params.npz") as arrays:
            params = SimParams.from_arrays({k: arrays[k] for k in arrays.files})
        report = json.loads((root / "fit_report.json").read_text())
        return cls(config, params, report)


def _jsonable(obj: Any) -> Any:
    """Plain JSON types (numpy scalars to Python numbers; NaN and infinities to None)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def report_markdown(report: dict[str, Any]) -> str:
    """The fit report as Markdown: headline figures first, then every section as a table."""
    lines = ["# Learned simulator: fit report", ""]
    purchase = report.get("purchase", {})
    if purchase:
        daily = purchase.get("daily_orders_heldout", {})
        lines += [
            f"Purchase model ({purchase.get('model')}): held-out log loss "
            f"{_fmt(purchase.get('heldout_log_loss'))} vs {_fmt(purchase.get('baseline_log_loss'))} for a "
            f"constant rate; AUC {_fmt(purchase.get('heldout_auc'))}.",
            f"Daily orders on the {daily.get('days')} held-out days: predicted "
            f"{_fmt(daily.get('predicted_mean'))} "
            f"vs actual {_fmt(daily.get('actual_mean'))} a day (MAE {_fmt(daily.get('mae'))}). "
            f"Day-level demand shock sd {_fmt(purchase.get('shock_sd'))}.",
            f"Fit time {_fmt(report.get('fit_seconds'))} s.",
            "",
        ]
    for section, body in report.items():
        if not isinstance(body, dict):
            continue
        lines += [f"## {section}", "", "| key | value |", "| --- | --- |"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in body.items()]
        lines.append("")
    return "\n".join(lines)

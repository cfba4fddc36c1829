"""Historical logs: the ground-truth world run under the marketer's behaviour policy, as Parquet.

A log directory holds::

    campaigns.parquet   one row per day's decision: context (ctx_*), action, catalog index,
                        propensity, the campaign's outcome vector (o_*; NaN until matured, with
                        ``matured`` / ``retention_{30,60,90}_known`` flags), the day's shop totals
                        (day_*), and the historical campaign record,
                        ``{"actions": [...], "result": {...}}``, as JSON
    events.parquet      customer events: push, purchase, delivery, late_delivery, complaint,
                        return, reactivation (t in days, customer, campaign, category, money)
    customers.parquet   what the shop knows at sign-up: customer id and CRM segment
    daily.parquet       one row per day: shop totals and the observed market (stock cover,
                        competitor price index per category)
    manifest.json       the config, the policy, row counts, and the command that made them

Nothing here reads the world's hidden traits into the logs: a learned simulator fitted on these
files sees only what a real shop would have.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferlab.platform.io import atomic_directory, atomic_write_json
from transferlab.simulator.behaviour import MarketerPolicy
from transferlab.simulator.vocabulary import CATEGORIES, OUTCOME_KEYS
from transferlab.simulator.world import RETENTION_HORIZONS, MarketWorld
from transferlab.simulator.world_config import WorldConfig

LOG_FILES = ("campaigns", "events", "customers", "daily")
SCHEMA_VERSION = 1
ACTION_COLUMNS = ("discount", "push_hour", "segment", "budget", "category")
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "campaigns": (
        "day",
        "action_index",
        *ACTION_COLUMNS,
        "propensity",
        "launched",
        "campaign_id",
        "reached",
        "matured",
        *(f"o_{k}" for k in OUTCOME_KEYS),
        "day_gmv",
        "day_profit",
    ),
    "events": ("t", "day", "event", "customer", "campaign", "category", "list_value", "paid", "discount"),
    "customers": ("customer", "segment"),
    "daily": ("day", "orders", "gmv", "profit", *(f"competitor_{c}" for c in CATEGORIES)),
}


class LogError(ValueError):
    """A log directory is missing, empty or malformed; the message names the file, column and fix."""


@dataclass(frozen=True)
class LogSpec:
    """How to generate logs: the world, how long, and the marketer."""

    days: int = 365
    epsilon: float = 0.1
    world: WorldConfig | None = None

    def __post_init__(self) -> None:
        if self.days < 7:
            raise ValueError(f"days={self.days} is too short for logs: use at least 7 (a year is 365)")


@dataclass
class Logs:
    """The four log tables, in memory."""

    campaigns: pd.DataFrame
    events: pd.DataFrame
    customers: pd.DataFrame
    daily: pd.DataFrame
    manifest: dict[str, Any]


def run_behaviour_policy(
    spec: LogSpec, progress: Callable[[int, int], None] | None = None
) -> tuple[MarketWorld, list[dict[str, Any]]]:
    """Run the world for ``spec.days`` under the marketer; returns the world and the decision rows."""
    world_cfg = spec.world or WorldConfig()
    world = MarketWorld(world_cfg)
    rows = drive_with_marketer(world, spec.days, spec.epsilon, progress)
    return world, rows


def drive_with_marketer(
    world: MarketWorld,
    days: int,
    epsilon: float = 0.1,
    progress: Callable[[int, int], None] | None = None,
    on_day: Callable[[int, MarketWorld], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``world`` ``days`` days under the marketer (seeded by the world's seed); the decision rows.

    ``on_day(day, world)`` is called at the start of every day, before the marketer decides (e.g. to
    fork the world there).
    """
    policy = MarketerPolicy(epsilon=epsilon)
    rng = np.random.default_rng([world.config.seed, 1])
    rows: list[dict[str, Any]] = []
    weekly_gmv: list[float] = []
    for day in range(days):
        if on_day is not None:
            on_day(day, world)
        state = world.observe()
        baseline = float(np.mean(weekly_gmv[-56:])) if len(weekly_gmv) >= 7 else 0.0
        index, action, propensity = policy.act(state, baseline, rng)
        cid = world.launch(action)
        report = world.advance()
        weekly_gmv.append(state["gmv_7d"])
        row: dict[str, Any] = {"day": day, **{f"ctx_{k}": v for k, v in state.items() if k != "day"}}
        row.update(action_index=index, **action.to_dict(), propensity=propensity, launched=cid is not None)
        row.update(campaign_id=-1 if cid is None else cid, gmv_baseline=baseline)
        row.update({f"day_{k}": v for k, v in report.as_dict().items() if k != "day"})
        rows.append(row)
        if progress is not None:
            progress(day + 1, days)
    return rows


def _outcome_columns(world: MarketWorld, rows: list[dict[str, Any]]) -> None:
    """Fill each decision row's campaign outcome: NaN where not (yet) known, never a silent zero."""
    for row in rows:
        cid = row["campaign_id"]
        record = world.campaigns[cid] if cid >= 0 else None
        row["reached"] = record.reached if record else 0
        row["matured"] = bool(record and record.matured)
        for k in OUTCOME_KEYS:
            known = record is not None and record.matured
            if k.startswith("retention_"):
                known = record is not None and record.retention_known[int(k.split("_")[1])]
            row[f"o_{k}"] = record.outcome[k] if known and record else np.nan
        for h in RETENTION_HORIZONS:
            row[f"retention_{h}_known"] = bool(record and record.retention_known[h])
        row["result_json"] = (
            json.dumps(record.result()) if record else json.dumps({"actions": [], "result": None})
        )


def generate_logs(spec: LogSpec, progress: Callable[[int, int], None] | None = None) -> Logs:
    """Run the world under the behaviour policy and collect the four log tables."""
    world, rows = run_behaviour_policy(spec, progress)
    _outcome_columns(world, rows)
    campaigns = pd.DataFrame(rows)
    daily = world.daily_frame()
    # the observed market each day (what the shop sees: stock cover and rival prices at decision time)
    ctx = campaigns[
        [c for c in campaigns.columns if c.startswith("ctx_stock") or c.startswith("ctx_competitor")]
    ]
    daily = pd.concat([daily, ctx.rename(columns=lambda c: c.removeprefix("ctx_"))], axis=1)
    world_cfg = spec.world or WorldConfig()
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "days": spec.days,
        "epsilon": spec.epsilon,
        "world": world_cfg.model_dump(mode="json"),
        "rows": {
            "campaigns": len(campaigns),
            "events": 0,
            "customers": world.customers.n,
            "days": len(daily),
        },
        "made_by": "transferlab sim generate-logs",
    }
    events = world.event_frame()
    manifest["rows"]["events"] = len(events)
    return Logs(campaigns, events, world.customer_frame(), daily, manifest)


def write_logs(logs: Logs, out: str | os.PathLike[str]) -> Path:
    """Write the tables to ``out`` atomically: a temporary sibling directory renamed into place."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise LogError(f"{out} already exists and is not empty: choose a new directory or remove it")
    with atomic_directory(out) as tmp:
        for name in LOG_FILES:
            getattr(logs, name).to_parquet(tmp / f"{name}.parquet", index=False)
        atomic_write_json(tmp / "manifest.json", logs.manifest)
    return out


def read_logs(path: str | os.PathLike[str]) -> Logs:
    """Read and validate a log directory; raises :class:`LogError` naming the problem and the fix."""
    path = Path(path)
    if not path.is_dir():
        raise LogError(
            f"{path} is not a log directory: make one with `transferlab sim generate-logs --out {path}`"
        )
    tables: dict[str, pd.DataFrame] = {}
    for name in LOG_FILES:
        file = path / f"{name}.parquet"
        if not file.exists():
            raise LogError(
                f"{file} is missing: a log directory needs {', '.join(f + '.parquet' for f in LOG_FILES)}"
            )
        try:
            tables[name] = pd.read_parquet(file)
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            raise LogError(
                f"{file} is not a readable Parquet table ({err}): regenerate the logs with "
                f"`transferlab sim generate-logs --out {path}`"
            ) from err
    validate_tables(tables)
    manifest_file = path / "manifest.json"
    try:
        manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
    except (OSError, ValueError) as err:
        raise LogError(f"{manifest_file} is not valid JSON ({err}): regenerate the logs") from err
    return Logs(manifest=manifest, **tables)


def validate_tables(tables: dict[str, pd.DataFrame]) -> None:
    """Check that every table is non-empty and has its required columns."""
    for name, required in REQUIRED_COLUMNS.items():
        df = tables[name]
        missing = [c for c in required if c not in df.columns]
        if missing:
            raise LogError(
                f"{name} log is missing column(s) {missing}; "
                "regenerate it with `transferlab sim generate-logs`"
            )
        if df.empty and name != "events":
            raise LogError(
                f"{name} log is empty: the logs hold no {name}; generate logs with at least 7 days"
            )
    camp = tables["campaigns"]
    bad = camp.index[(camp["propensity"] <= 0) | (camp["propensity"] > 1) | camp["propensity"].isna()]
    if len(bad):
        raise LogError(f"campaigns log rows {list(bad[:5])} have propensities outside (0, 1]")


def spec_dict(spec: LogSpec) -> dict[str, Any]:
    """JSON-able form of a spec."""
    d = asdict(spec)
    d["world"] = (spec.world or WorldConfig()).model_dump(mode="json")
    return d

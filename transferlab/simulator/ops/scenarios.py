"""Ops analysis tasks: worlds whose cause of a category's sales drop is known, made by running the world.

Each scenario runs the ground-truth :class:`~transferlab.simulator.world.MarketWorld` for ``days`` days
and injects one cause through the world's own state and calendar between days (never by editing its
output tables):

* ``stock_out``: the category's stock is emptied ``lead_in`` days before the analysis window and the
  replenishment order is held back (``on_order``) for ``outage`` days, then delivered, exactly as the
  world's reorder mechanism would. In this world a stock-out *backorders*: orders are still taken and
  ship 5-12 days late, so the evidence is stock-out days, late deliveries and complaints.
* ``competitor_price_cut``: the competitor's price index of the category is held at ``competitor_depth``
  for the whole window (the world's cut mechanism, deeper and longer than its natural 15% cuts).
* ``failed_campaign``: a 50%-off push to every customer on the category, launched ``campaign_lead``
  days before the window: orders pulled into the previous window, negative campaign profit.
* ``shipping_delays``: the category's carrier turns late ``delay_lead`` days before the window (the
  world's ``carrier_late`` / ``carrier_extra_days``, opt-in): late deliveries and complaints about
  delivery rise while the shelf stays full, and customers whose orders came late buy the category less
  (the world's ``late_delivery_aversion``, on in every scenario world). A stock-out also ships late
  (backorders), so ``stock_out`` lists ``shipping_delays`` as related; the converse does not hold.
* ``seasonality``: the category has a yearly cycle (the world's ``category_seasonality``) whose trough
  falls just after the window, so the same window last year dipped too; nothing else happened in the
  category in either year's windows. Every family runs ``days`` (540) days so that last year's
  windows exist in every scenario and past the first months' decay of the starting customer cohort.

``DROPPED_FAMILIES`` is empty since the world gained per-category seasonality and carrier delays.

The world's customer base also decays (CDNOW-calibrated dropout), so every category tends to fall a
little; a scenario is kept only when the target category's orders fell and the world recorded no other
cause (a natural competitor cut or stock-out) in that category during the two windows (and, for
``seasonality``, during last year's windows, which must have dipped too). Generation is deterministic
given the scenario seed, cached per seed, and takes one to a few seconds (a retry per unclean world).

>>> s = scenario(11)
>>> s.task.family, s.task.split
('competitor_price_cut', 'train')
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_bytes
from transferlab.simulator.vocabulary import CATEGORIES, CampaignAction
from transferlab.simulator.world import COST_RATIO, MarketWorld
from transferlab.simulator.world_config import WorldConfig

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain

FAMILIES: tuple[str, ...] = (
    "stock_out",
    "competitor_price_cut",
    "failed_campaign",
    "shipping_delays",
    "seasonality",
)
#: Families the world cannot express yet (none since the world's per-category seasonality and carrier delay).
DROPPED_FAMILIES: dict[str, str] = {}
#: Every cause a report may blame (the grader penalises blaming one that is absent).
ALL_CAUSES: tuple[str, ...] = (*FAMILIES, *DROPPED_FAMILIES)
#: Causes a report may name without penalty: a stock-out backorders, so its orders ship late and
#: customers complain about delivery (naming late deliveries there is a consequence, not a false cause).
#: Not the other way round: in ``shipping_delays`` the shelf is full and a stock-out is a false cause.
RELATED: dict[str, tuple[str, ...]] = {"stock_out": ("shipping_delays",)}
YEAR = 365
SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""Scenario splits: pilots, presets and hyper-parameters are scored on validation; test only by a
committed result."""
SPLIT_EVERY = 5  # of every five scenario groups: one validation, one test, three train
MAX_ATTEMPTS = 24
PCT = 1.0
"""Tolerance on a percentage (a report may round -27.3% to -27%)."""
COUNT = 0.5
"""Tolerance on a count (it must be the count itself)."""


class ScenarioConfig(BaseConfig):
    """Size of the scenario worlds and the strength of each injected cause."""

    n_customers: int = Field(default=4000, ge=100, description="Customers in each scenario world.")
    days: int = Field(
        default=540,
        ge=70,
        le=800,
        description="Days simulated; the window is the last ones. Every family keeps the same history, "
        "so whether last year's window exists says nothing about the cause; the seasonality family "
        "needs days >= 365 + 2 x window.",
    )
    window: int = Field(
        default=30, ge=7, le=60, description="Days of the analysis window (and the one before)."
    )
    rate_scale: float = Field(default=3.0, gt=0, description="World purchase-rate multiplier (busier shop).")
    drift_per_month: float = Field(default=0.05, ge=0, description="World preference drift (kept small).")
    reactivation_rate: float = Field(default=0.003, ge=0, le=1, description="World daily comeback chance.")
    competitor_depth: tuple[float, float] = Field(
        default=(0.6, 0.75),
        description="Range of the competitor price index held during a cut (uniform per scenario; the "
        "world clips at 0.6; its natural cuts go to 0.85, and a cut to 0.78 read as one no deeper "
        "than those on a validation scenario).",
    )
    outage: tuple[int, int] = Field(default=(20, 30), description="Stock-out length range in days.")
    lead_in: tuple[int, int] = Field(
        default=(1, 8), description="Range of days before the window the stock-out starts."
    )
    campaign_lead: tuple[int, int] = Field(
        default=(5, 12), description="Range of days before the window the campaign runs."
    )
    campaign_discount: tuple[float, ...] = Field(
        default=(0.4, 0.45, 0.5),
        description="The failed campaign's discount, one drawn per scenario (each sells below cost in "
        "some category: the category is drawn among those whose cost ratio is at least 1 - discount).",
    )
    late_delivery_aversion: float = Field(
        default=1.5, ge=0, le=5, description="World late_delivery_aversion (late orders cut repeat buying)."
    )
    carrier_late: tuple[float, float] = Field(
        default=(0.5, 0.9), description="Range of the delayed carrier's extra late-delivery probability."
    )
    carrier_extra_days: tuple[int, int] = Field(
        default=(3, 8), description="Range of the delayed carrier's extra days late."
    )
    delay_lead: tuple[int, int] = Field(
        default=(8, 20), description="Range of days before the window the category's carrier turns late."
    )
    season_amplitude: tuple[float, float] = Field(
        default=(0.35, 0.6), description="Range of the seasonal category's yearly amplitude (uniform)."
    )
    season_trough_after: tuple[int, int] = Field(
        default=(0, 10), description="Days after the window's end the yearly trough falls (uniform)."
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> Self:
        bounds: dict[str, tuple[float, float]] = {
            "competitor_depth": (0.6, 0.85),
            "outage": (1, 60),
            "lead_in": (0, 20),
            "campaign_lead": (1, 20),
            "carrier_late": (0, 1),
            "carrier_extra_days": (0, 20),
            "delay_lead": (0, 30),
            "season_amplitude": (0, 0.9),
            "season_trough_after": (0, 30),
        }
        for name, (lo, hi) in bounds.items():
            a, b = getattr(self, name)
            if not lo <= a <= b <= hi:
                raise ValueError(f"{name}=({a}, {b}) must be a range (low <= high) within [{lo}, {hi}]")
        if not self.campaign_discount or any(not 0 < d <= 0.5 for d in self.campaign_discount):
            raise ValueError(f"campaign_discount={self.campaign_discount} must list discounts in (0, 0.5]")
        if any(d < 1 - max(COST_RATIO) for d in self.campaign_discount):
            raise ValueError(
                f"campaign_discount={self.campaign_discount}: a failed campaign sells below cost, so each "
                f"discount must be at least {1 - max(COST_RATIO):.2f} (1 - the highest cost ratio)"
            )
        return self


@dataclass(frozen=True)
class ScenarioDraw:
    """The strength of one scenario's cause, drawn from :class:`ScenarioConfig`'s ranges, so no
    evidence number is the same in every scenario of a family."""

    outage: int
    lead_in: int
    competitor_depth: float
    campaign_discount: float
    campaign_lead: int
    carrier_late: float
    carrier_extra_days: int
    delay_lead: int
    season_amplitude: float
    season_trough_after: int

    @classmethod
    def sample(cls, cfg: ScenarioConfig, rng: np.random.Generator) -> ScenarioDraw:
        def integer(r: tuple[int, int]) -> int:
            return int(rng.integers(r[0], r[1] + 1))

        def real(r: tuple[float, float], digits: int) -> float:
            return round(float(rng.uniform(*r)), digits)

        return cls(
            outage=integer(cfg.outage),
            lead_in=integer(cfg.lead_in),
            competitor_depth=real(cfg.competitor_depth, 2),
            campaign_discount=float(cfg.campaign_discount[int(rng.integers(len(cfg.campaign_discount)))]),
            campaign_lead=integer(cfg.campaign_lead),
            carrier_late=real(cfg.carrier_late, 2),
            carrier_extra_days=integer(cfg.carrier_extra_days),
            delay_lead=integer(cfg.delay_lead),
            season_amplitude=real(cfg.season_amplitude, 3),
            season_trough_after=integer(cfg.season_trough_after),
        )


@dataclass(frozen=True)
class Evidence:
    """A number a good report cites: matched when the report has a number within ``tol`` of one form."""

    name: str
    cause: str  # the cause it supports, or "sales" for the drop itself
    values: tuple[float, ...]  # accepted forms (e.g. a share and its percentage), compared in absolute value
    tol: float

    def matches(self, number: float) -> bool:
        return any(abs(abs(number) - abs(v)) <= self.tol for v in self.values)


@dataclass(frozen=True)
class OpsTask:
    """One analysis task: the question, the true causes and the numbers behind them."""

    task_id: str
    seed: int
    family: str
    split: str
    category: str
    question: str
    causes: tuple[str, ...]
    related: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    window: int
    days: int
    world_seed: int

    @property
    def absent(self) -> tuple[str, ...]:
        """Causes a report must not blame."""
        return tuple(c for c in ALL_CAUSES if c not in self.causes and c not in self.related)

    @property
    def domain(self) -> Domain:
        """Always ``ecommerce`` (:class:`~transferlab.platform.agent_env.Task`)."""
        return "ecommerce"

    @property
    def provenance(self) -> dict[str, Any]:
        """The generator and the seeds the scenario is built from."""
        return {"source": "scenario", "family": self.family, "seed": self.seed, "world_seed": self.world_seed}


@dataclass
class Scenario:
    """A task and the shop's logs it is answered from (tables as :mod:`transferlab.simulator.logs`)."""

    task: OpsTask
    events: pd.DataFrame = field(repr=False)
    market: pd.DataFrame = field(repr=False)  # per day: stock cover and competitor index per category
    campaigns: pd.DataFrame = field(repr=False)
    truth: list[dict[str, Any]] = field(repr=False)
    draw: ScenarioDraw | None = field(default=None, repr=False)  # the cause's drawn strength


def split_of(seed: int) -> str:
    """The split of a scenario seed, by its group (seed // number of families, one scenario of each
    family): group % 5 == 0 is ``validation``, == 1 is ``test``, the rest ``train``. Every scenario is
    its own world (its seed, its drawn cause strength), so no two splits share one."""
    group = (seed // len(FAMILIES)) % SPLIT_EVERY
    return "validation" if group == 0 else "test" if group == 1 else "train"


def check_split(split: str) -> str:
    """``split`` when it is one of :data:`SPLITS`; a ValueError naming them otherwise."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return split


def family_of(seed: int) -> str:
    return FAMILIES[seed % len(FAMILIES)]


def task_seeds(split: str, n: int, start: int = 0) -> list[int]:
    """The first ``n`` scenario seeds (from ``start``) of ``split``; families cycle within a split."""
    check_split(split)
    out: list[int] = []
    seed = start
    while len(out) < n:
        if split_of(seed) == split:
            out.append(seed)
        seed += 1
    return out


def task_id_of(seed: int) -> str:
    """The task id of scenario ``seed`` (``ops-0007``)."""
    return f"ops-{seed:04d}"


def seed_of(task_id: str) -> int:
    """The scenario seed of a task id; a ValueError naming the expected form otherwise."""
    if not task_id.startswith("ops-") or not task_id[4:].isdigit():
        raise ValueError(f"unknown task id {task_id!r}; ids look like 'ops-0007'")
    return int(task_id[4:])


def task_ids(split: str, n: int, start: int = 0) -> list[str]:
    """The ids of :func:`task_seeds` ``(split, n, start)``."""
    return [task_id_of(s) for s in task_seeds(split, n, start)]


def scenario(seed: int, config: ScenarioConfig | None = None) -> Scenario:
    """The scenario of ``seed`` (cached per seed and config: in memory, and on disk in
    :func:`cache_dir` so that other processes and later runs load it instead of running the world)."""
    cfg = config or ScenarioConfig()
    return _cached(seed, cfg.model_dump_json())


CACHE_ENV = "TRANSFERLAB_SCENARIO_CACHE"
"""Environment variable naming the on-disk scenario cache; ``off`` keeps scenarios in memory only."""
_log = logging.getLogger(__name__)


def cache_dir() -> Path | None:
    """Where built scenarios are kept: ``$TRANSFERLAB_SCENARIO_CACHE``, else
    ``$XDG_CACHE_HOME/transferlab/ops-scenarios`` (``~/.cache/...``); None when the variable is
    ``off``. A scenario takes seconds to build (a 540-day world) and milliseconds to load."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "transferlab" / "ops-scenarios"


@functools.cache
def _code_digest() -> str:
    """A digest of the simulator's sources: any change to the world or the scenarios makes new keys,
    so a cache never serves a scenario the current code would not build."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _cache_path(seed: int, config_json: str) -> Path | None:
    directory = cache_dir()
    if directory is None:
        return None
    key = hashlib.sha256(f"{_code_digest()}|{config_json}".encode()).hexdigest()[:16]
    return directory / key / f"{seed}.pkl"


@functools.lru_cache(maxsize=256)
def _cached(seed: int, config_json: str) -> Scenario:
    path = _cache_path(seed, config_json)
    if path is not None and path.exists():
        try:
            loaded = pickle.loads(path.read_bytes())
            if isinstance(loaded, Scenario) and loaded.task.seed == seed:
                return loaded
        except Exception as exc:  # a truncated or foreign file: build the scenario again
            _log.warning("ignoring unreadable cached scenario %s (%s); building it again", path, exc)
    built = _build(seed, ScenarioConfig.model_validate_json(config_json))
    if path is not None:
        try:
            atomic_write_bytes(path, pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:  # a read-only or full disk costs speed, never the result
            _log.warning("could not cache scenario %d in %s: %s", seed, path.parent, exc)
    return built


def _build(seed: int, cfg: ScenarioConfig) -> Scenario:
    """Run the scenario's world until it is clean (or the attempts run out); each attempt draws the
    cause's strength afresh (:class:`ScenarioDraw`)."""
    family = family_of(seed)
    rng = np.random.default_rng([seed, 8])
    order = rng.permutation(len(CATEGORIES))
    last: Scenario | None = None
    for attempt in range(MAX_ATTEMPTS):
        draw = ScenarioDraw.sample(cfg, rng)
        cats = order
        if family == "failed_campaign":  # the discount sells below cost where cost of goods >= 1 - discount
            cats = np.array([k for k in order if COST_RATIO[k] >= 1 - draw.campaign_discount - 1e-9])
        k = int(cats[attempt % len(cats)])
        last = _run(seed, family, k, seed * 1000 + attempt, cfg, draw)
        if _clean(last):
            return last
    assert last is not None
    return last


def _run(seed: int, family: str, k: int, world_seed: int, cfg: ScenarioConfig, p: ScenarioDraw) -> Scenario:
    start = cfg.days - cfg.window
    so_start, cut_start, launch = start - p.lead_in, start - 2, start - p.campaign_lead
    delay_start = start - p.delay_lead
    cat = CATEGORIES[k]
    injected: dict[str, Any] = {"cause": family, "category": cat, "injected": True}
    season = _season(cfg, cat, p) if family == "seasonality" else {}
    if season:
        injected.update(day=0, amplitude=season[cat][0], peak=season[cat][1])
    world = MarketWorld(
        WorldConfig(
            n_customers=cfg.n_customers,
            seed=world_seed,
            rate_scale=cfg.rate_scale,
            drift_per_month=cfg.drift_per_month,
            reactivation_rate=cfg.reactivation_rate,
            late_delivery_aversion=cfg.late_delivery_aversion,
            category_seasonality=season,
        )
    )
    rows = []
    for d in range(cfg.days):
        if family == "shipping_delays" and d == delay_start:  # the category's carrier turns late
            world.carrier_late[k], world.carrier_extra_days[k] = p.carrier_late, p.carrier_extra_days
            injected.update(day=d, late=p.carrier_late, extra_days=p.carrier_extra_days)
        if family == "stock_out" and so_start <= d < so_start + p.outage:
            # the shelf is empty and the supplier holds the order back: nothing arrives, backorders pile up
            world.stock[k], world.on_order[k] = min(float(world.stock[k]), 0.0), True
            injected.update(day=so_start, days=p.outage)
        if family == "stock_out" and d == so_start + p.outage:  # the held order arrives
            world.stock[k] += math.ceil(world.config.stock_days * world.expected_daily_demand[k]) + 1
            world.on_order[k] = False
        if family == "competitor_price_cut" and d >= cut_start:
            world.competitor[k] = p.competitor_depth
            world.competitor_cut_left[k] = max(int(world.competitor_cut_left[k]), 2)
            injected.update(day=cut_start, depth=round(1 - p.competitor_depth, 2), days=cfg.days - cut_start)
        if family == "failed_campaign" and d == launch:
            budget = cfg.n_customers * world.config.push_cost
            action = CampaignAction(
                discount=p.campaign_discount, push_hour=20, segment="all", budget=budget, category=cat
            )
            injected.update(day=d, campaign=world.launch(action))
        world.advance()
        rows.append({**world.observe(), "day": d})  # the state after day d closed
    truth = [*world.truth, injected]
    events = world.event_frame()
    market = pd.DataFrame(rows).drop(columns=["weekday"])
    campaigns = pd.DataFrame(
        [
            {"campaign": r.campaign_id, "day": r.day, **r.action.to_dict(), "reached": r.reached, **r.outcome}
            for r in world.campaigns
        ]
    )
    task = _task(seed, family, cat, world_seed, cfg, events, market, campaigns)
    return Scenario(task, events, market, campaigns, truth, draw=p)


def _season(cfg: ScenarioConfig, cat: str, p: ScenarioDraw) -> dict[str, tuple[float, int]]:
    """The seasonal category's yearly cycle: its trough just after the window, this year and last."""
    trough = cfg.days - 1 + p.season_trough_after
    return {cat: (p.season_amplitude, (trough - YEAR // 2) % YEAR)}


def _clean(s: Scenario) -> bool:
    """Kept when sales fell and no other cause was recorded in the category during the two windows.

    For ``seasonality`` the same two windows last year must be clean too (they are its evidence), and
    last year's window must have dipped as well.
    """
    t = s.task
    change = next(e for e in t.evidence if e.name == "orders_change_pct").values[0]
    spans = [t.days - t.window - 14]  # overlaps the window (natural cuts last 7-14 days)
    if t.family == "seasonality":
        spans.append(spans[0] - YEAR)
        if next(e for e in t.evidence if e.name == "last_year_orders_change_pct").values[0] > -5.0:
            return False
    other = [
        r
        for r in s.truth
        if r["category"] == t.category
        and r["cause"] != t.family
        and any(lo <= r["day"] < lo + t.window + 14 for lo in spans)
    ]
    return change <= -5.0 and not other


def window_sales(events: pd.DataFrame, category: str, days: int, window: int) -> dict[str, float]:
    """Orders and GMV of ``category`` in the last ``window`` days and the one before, and the changes."""
    p = events[(events["event"] == "purchase") & (events["category"] == CATEGORIES.index(category))]
    last = p[(p["day"] >= days - window) & (p["day"] < days)]
    prev = p[(p["day"] >= days - 2 * window) & (p["day"] < days - window)]
    out = {
        "orders": float(len(last)),
        "orders_prev": float(len(prev)),
        "gmv": float(last["paid"].sum()),
        "gmv_prev": float(prev["paid"].sum()),
    }
    out["orders_change_pct"] = _pct(out["orders"], out["orders_prev"])
    out["gmv_change_pct"] = _pct(out["gmv"], out["gmv_prev"])
    return out


def _pct(now: float, before: float) -> float:
    return round(100.0 * (now / before - 1.0), 1) if before > 0 else 0.0


def _task(
    seed: int,
    family: str,
    cat: str,
    world_seed: int,
    cfg: ScenarioConfig,
    events: pd.DataFrame,
    market: pd.DataFrame,
    campaigns: pd.DataFrame,
) -> OpsTask:
    days, w = cfg.days, cfg.window
    sales = window_sales(events, cat, days, w)
    ev: list[Evidence] = [
        Evidence("orders_change_pct", "sales", (sales["orders_change_pct"], sales["gmv_change_pct"]), PCT)
    ]
    if family == "stock_out":
        in_win = market[market["day"] >= days - w]
        out_days = float((in_win[f"stock_days_{cat}"] <= 0).sum())
        k = CATEGORIES.index(cat)
        recent = events[(events["day"] >= days - w) & (events["category"] == k)]
        late = float((recent["event"] == "late_delivery").sum())
        ev += [
            Evidence("stock_out_days", "stock_out", (out_days,), COUNT),
            Evidence("late_deliveries", "stock_out", (late,), COUNT),
        ]
    elif family == "competitor_price_cut":
        col = market[f"competitor_{cat}"]
        now = float(col[market["day"] >= days - w].mean())
        before = float(col[(market["day"] >= days - 2 * w) & (market["day"] < days - w)].mean())
        ev += [
            Evidence("competitor_index", "competitor_price_cut", (round(now, 2),), 0.005),
            Evidence("competitor_change_pct", "competitor_price_cut", (_pct(now, before),), PCT),
        ]
    elif family == "shipping_delays":
        k = CATEGORIES.index(cat)
        recent = events[(events["day"] >= days - w) & (events["category"] == k)]
        late = float((recent["event"] == "late_delivery").sum())
        complaints = float((recent["event"] == "complaint").sum())
        ev += [
            Evidence("late_deliveries", "shipping_delays", (late,), COUNT),
            Evidence("delivery_complaints", "shipping_delays", (complaints,), COUNT),
        ]
    elif family == "seasonality":
        last = window_sales(events, cat, days - YEAR, w)
        ev += [
            Evidence(
                "last_year_orders_change_pct",
                "seasonality",
                (last["orders_change_pct"], last["gmv_change_pct"]),
                PCT,
            ),
            Evidence("last_year_orders", "seasonality", (last["orders"],), COUNT),
        ]
    else:
        camp = campaign_summary(events, campaigns, cat)[0]
        margin = camp["margin"]
        ev += [
            Evidence("campaign_discount_pct", "failed_campaign", (camp["discount_pct"],), COUNT),
            Evidence("campaign_margin", "failed_campaign", (round(margin, 2),), 1.0),
        ]
    return OpsTask(
        task_id=task_id_of(seed),
        seed=seed,
        family=family,
        split=split_of(seed),
        category=cat,
        question=f"Find why sales of {cat} fell in the last {w} days.",
        causes=(family,),
        related=RELATED.get(family, ()),
        evidence=tuple(ev),
        window=w,
        days=days,
        world_seed=world_seed,
    )


def campaign_summary(events: pd.DataFrame, campaigns: pd.DataFrame, category: str) -> list[dict[str, float]]:
    """Per campaign on ``category`` (or on all): discounted orders, discount given, margin after costs.

    The margin is what the shop books on the campaign's discounted orders of the category: paid minus
    cost of goods (the shop's own cost ratio per category) minus the push cost.
    """
    if campaigns.empty:
        return []
    k = CATEGORIES.index(category)
    out: list[dict[str, float]] = []
    for rec in campaigns.to_dict("records"):
        row: dict[str, Any] = {str(key): v for key, v in rec.items()}
        if row["category"] not in ("all", category):
            continue
        mine = events[
            (events["event"] == "purchase")
            & (events["campaign"] == row["campaign"])
            & (events["category"] == k)
            & (events["discount"] > 0)
        ]
        paid, listed = float(mine["paid"].sum()), float(mine["list_value"].sum())
        out.append(
            {
                "campaign": float(row["campaign"]),
                "day": float(row["day"]),
                "discount_pct": round(100 * float(row["discount"]), 1),
                "orders": float(len(mine)),
                "gmv": round(paid, 2),
                "discount_given": round(listed - paid, 2),
                "margin": round(paid - COST_RATIO[k] * listed - float(row["push_cost"]), 2),
            }
        )
    return out

"""The ground-truth ecommerce world: the stand-in for the real market, with known hidden truth.

Time is a simpy event calendar measured in days. Each day has a *day start* (competitor prices,
preference drift, replenishment arrivals, deliveries and returns that fall due), campaign *pushes* at
their hour, and a *day close* where every customer's purchase is drawn — customers are numpy vectors
updated inside these events, not one process each. Campaign results become known on their own
calendar events: GMV/profit/satisfaction at ``maturity_days`` after launch, retention at 30/60/90.

Hidden per-customer traits: segment behaviour, purchase rate and dropout (BG/NBD, calibrated to
CDNOW), order value (lognormal, CDNOW), price sensitivity, preferred hour, category preferences.

Mechanisms: weekly seasonality; day-level demand shocks; competitor price index per category with
occasional price cuts; preference drift; diminishing returns of discount (saturating uplift) and of
budget (reach capped by the segment's subscribers); push fatigue (weaker response, unsubscribes,
churn); purchases pulled forward (recency suppression after a purchase); stock-outs with
replenishment lead times, late deliveries and complaints; returns 7-21 days after delivery.
Opt-in (off by default, and then the world draws exactly the same numbers as without them): a yearly
demand cycle per category (``category_seasonality``), a late carrier per category
(``category_carrier_delay``, or ``carrier_late`` / ``carrier_extra_days`` changed between days), and
customers who buy a category less after an order of it came late (``late_delivery_aversion``).

>>> world = MarketWorld(WorldConfig(n_customers=500, seed=1))
>>> world.launch(CampaignAction(discount=0.2, push_hour=20, segment="loyal", budget=5.0))
0
>>> day = world.advance()
>>> day.day, day.pushes
(0, 78)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from transferlab.simulator.vocabulary import (
    CATEGORIES,
    DAY_KEYS,
    NOOP,
    OUTCOME_KEYS,
    SEGMENTS,
    CampaignAction,
    campaign_satisfaction,
)
from transferlab.simulator.world_config import CustomerPrior, WorldConfig

K = len(CATEGORIES)
WEEKLY_SEASON = np.array([0.92, 0.9, 0.94, 0.98, 1.06, 1.12, 1.08])
WEEKLY_SEASON = WEEKLY_SEASON / WEEKLY_SEASON.mean()
COST_RATIO = np.array([0.55, 0.5, 0.6, 0.4])  # cost of goods / list value, per category
SEGMENT_SHARE = np.array([0.3, 0.4, 0.15, 0.15])
# hidden behaviour behind each CRM label: rate, spend and churn multipliers, price sensitivity, hour
SEGMENT_RATE = np.array([0.8, 0.9, 1.8, 1.0])
SEGMENT_SPEND = np.array([0.7, 1.0, 1.0, 1.8])
SEGMENT_CHURN = np.array([1.2, 1.0, 0.5, 0.8])
SEGMENT_PRICE_SENS = np.array([6.0, 3.0, 1.5, 0.7])
SEGMENT_HOUR = np.array([21, 13, 20, 10])
SEGMENT_RETURN = np.array([0.05, 0.0, -0.02, 0.02])
DAY_START, DAY_CLOSE = 0.0, 23.5 / 24
RETENTION_HORIZONS = (30, 60, 90)
COMPLAINT_IF_LATE = 0.35


@dataclass
class Customers:
    """Every customer's traits (hidden) and state, as parallel arrays of length ``n``."""

    segment: np.ndarray  # int: index in SEGMENTS (the shop knows this label)
    rate: np.ndarray  # purchases per day at baseline
    p_drop: np.ndarray  # chance of dropping out after a purchase
    spend_mu: np.ndarray  # log-mean of one order's list value
    price_sens: np.ndarray
    pref_hour: np.ndarray
    cat_logits: np.ndarray  # (n, K)
    alive: np.ndarray
    subscribed: np.ndarray
    fatigue: np.ndarray
    last_purchase: np.ndarray  # day of last purchase, -inf if none
    n_orders: np.ndarray
    unhappy: np.ndarray  # bad experiences so far (late deliveries, complaints)
    promo_strength: np.ndarray  # current uplift of the pushed offer (0 = none)
    promo_discount: np.ndarray
    promo_category: np.ndarray  # -1: all categories
    promo_campaign: np.ndarray  # id of the campaign whose offer is active, -1 if none
    promo_left: np.ndarray  # days the offer still works

    @property
    def n(self) -> int:
        return len(self.rate)


@dataclass
class CampaignRecord:
    """One launched campaign: its decision context, action, reach, and outcomes as they mature.

    Outcomes count the targeted customers' orders placed while the campaign's offer was active
    (what a marketer can attribute), and those orders' returns, complaints and late deliveries up to
    ``maturity_days`` after launch. Retention: share of targeted customers who bought again within
    30/60/90 days.
    """

    campaign_id: int
    day: int
    action: CampaignAction
    context: dict[str, float]
    targeted: np.ndarray = field(repr=False)
    reached: int = 0
    outcome: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OUTCOME_KEYS, 0.0))
    matured: bool = False
    matured_day: int | None = None
    retention_known: dict[int, bool] = field(default_factory=lambda: dict.fromkeys(RETENTION_HORIZONS, False))

    def result(self) -> dict[str, Any]:
        """The outcome as a historical campaign record's ``result`` (known keys only).

        The record format is the founding design note's ``{"actions": [...], "result": {"gmv": ...,
        "roi": ...}}``.
        """
        res = {k: v for k, v in self.outcome.items() if not k.startswith("retention")}
        spend = self.outcome["push_cost"] + self.outcome["discount_cost"]
        res["roi"] = self.outcome["profit"] / spend if spend > 0 else 0.0
        for h in RETENTION_HORIZONS:
            if self.retention_known[h]:
                res[f"retention_{h}"] = self.outcome[f"retention_{h}"]
        return {"actions": [self.action.to_dict()], "result": res if self.matured else None}


@dataclass
class DayReport:
    """What happened in the whole shop on one day (the truth an environment's reward is made of)."""

    day: int
    orders: int = 0
    gmv: float = 0.0
    profit: float = 0.0
    discount_cost: float = 0.0
    push_cost: float = 0.0
    pushes: int = 0
    returns: int = 0
    refunds: float = 0.0
    complaints: int = 0
    late_deliveries: int = 0
    stockouts: int = 0
    active_customers: int = 0
    matured_campaigns: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "matured_campaigns"}

    def vector(self) -> np.ndarray:
        """The day's outcomes in :data:`~transferlab.simulator.vocabulary.DAY_KEYS` order."""
        return np.array([float(getattr(self, k)) for k in DAY_KEYS])


class _EventLog:
    """Customer events collected as column batches (cheap appends), turned into a DataFrame on demand."""

    COLUMNS = ("t", "day", "event", "customer", "campaign", "category", "list_value", "paid", "discount")

    def __init__(self) -> None:
        self._batches: list[dict[str, np.ndarray]] = []

    def add(self, t: float, event: str, customer: np.ndarray, **cols: Any) -> None:
        n = len(customer)
        if n == 0:
            return
        batch = {"t": np.full(n, t), "event": np.full(n, event, dtype=object), "customer": customer}
        for name in ("campaign", "category"):
            batch[name] = np.broadcast_to(np.asarray(cols.get(name, -1), dtype=np.int64), (n,)).copy()
        for name in ("list_value", "paid", "discount"):
            batch[name] = np.broadcast_to(np.asarray(cols.get(name, 0.0), dtype=float), (n,)).copy()
        if "hour" in cols:
            batch["t"] = np.floor(t) + np.asarray(cols["hour"], dtype=float) / 24
        self._batches.append(batch)

    def frame(self) -> pd.DataFrame:
        if not self._batches:
            return pd.DataFrame({c: [] for c in self.COLUMNS})
        cols = {c: np.concatenate([b[c] for b in self._batches]) for c in self.COLUMNS if c != "day"}
        df = pd.DataFrame(cols)
        df.insert(1, "day", np.floor(df["t"]).astype(np.int64))
        df["event"] = df["event"].astype(str)
        return df.sort_values(["t", "customer"], kind="stable").reset_index(drop=True)


class MarketWorld:
    """The ground-truth market. ``launch`` today's campaign, then ``advance`` the calendar."""

    def __init__(self, config: WorldConfig | None = None, prior: CustomerPrior | None = None) -> None:
        self.config = config or WorldConfig()
        self.prior = prior or CustomerPrior.from_cdnow()
        self.rng = np.random.default_rng(self.config.seed)
        self.env = simpy.Environment()
        self.customers = self._sample_customers(self.config.n_customers)
        self.competitor = np.ones(K)
        self.competitor_cut_left = np.zeros(K, dtype=np.int64)
        self.trend = np.zeros(K)
        share = _softmax(self.customers.cat_logits).mean(axis=0)
        self.expected_daily_demand = self.customers.rate.sum() * self.config.rate_scale * share
        self.stock = np.ceil(self.config.stock_days * self.expected_daily_demand) + 1
        self.on_order = np.zeros(K, dtype=bool)
        self.season_amplitude, self.season_peak = _per_category(self.config.category_seasonality)
        self.carrier_late, self.carrier_extra_days = _per_category(self.config.category_carrier_delay)
        self.campaigns: list[CampaignRecord] = []
        self.events = _EventLog()
        self.truth: list[dict[str, Any]] = []  # hidden causes (competitor cuts, stock-outs), for analysis
        self.history: list[DayReport] = []
        self._today = DayReport(day=0)
        self._cache_traits()
        self._pending: dict[int, tuple[float, str, tuple[Any, ...]]] = {}
        self._seq = 0
        self.env.process(self._clock())

    # ------------------------------------------------------------------ public API

    @property
    def day(self) -> int:
        """The current day (the one ``advance`` will simulate next)."""
        return math.floor(self.env.now + 1e-9)

    def launch(self, action: CampaignAction) -> int | None:
        """Schedule today's campaign (its pushes go out at ``action.push_hour``); returns its id."""
        if action.is_noop:
            return None
        cid = len(self.campaigns)
        record = CampaignRecord(cid, self.day, action, self.observe(), targeted=np.empty(0, dtype=np.int64))
        self.campaigns.append(record)
        self._at(self.day + action.push_hour / 24, self._push, cid)
        return cid

    def advance(self, days: int = 1) -> DayReport:
        """Run the calendar ``days`` days forward; returns the last day's report."""
        if days < 1:
            raise ValueError(f"days={days} must be >= 1")
        for _ in range(days):
            self.env.run(until=self.day + 1)
        return self.history[-1]

    def step(self, action: CampaignAction = NOOP) -> DayReport:
        """Launch ``action`` today and simulate the day."""
        self.launch(action)
        return self.advance()

    def observe(self) -> dict[str, float]:
        """The market state a marketer sees before deciding today (no hidden traits)."""
        recent = self.history[-7:]
        c = self.customers
        state: dict[str, float] = {
            "day": float(self.day),
            "weekday": float((self.day + self.config.start_weekday) % 7),
            "orders_7d": float(sum(r.orders for r in recent)),
            "gmv_7d": float(sum(r.gmv for r in recent)),
            "profit_7d": float(sum(r.profit for r in recent)),
            "complaints_7d": float(sum(r.complaints for r in recent)),
            "returns_7d": float(sum(r.returns for r in recent)),
            "pushes_7d": float(sum(r.pushes for r in recent)),
            "active_90d": float(np.mean(c.last_purchase > self.day - 90)),
            "subscribed": float(np.mean(c.subscribed)),
        }
        cover = self.stock / np.maximum(self.expected_daily_demand, 1e-9)
        for k, name in enumerate(CATEGORIES):
            state[f"stock_days_{name}"] = float(cover[k])
            state[f"competitor_{name}"] = float(self.competitor[k])
        return state

    def yearly_season(self, day: int) -> np.ndarray | None:
        """Each category's yearly demand factor on ``day`` (``category_seasonality``); None when off."""
        if not self.season_amplitude.any():
            return None
        return 1.0 + self.season_amplitude * np.cos(2 * math.pi * (day - self.season_peak) / 365.0)

    def event_frame(self) -> pd.DataFrame:
        """Every customer event so far (push, purchase, delivery, return, complaint, reactivation)."""
        return self.events.frame()

    def customer_frame(self) -> pd.DataFrame:
        """What the shop knows about each customer at sign-up: id and CRM segment."""
        seg = np.asarray(SEGMENTS, dtype=object)[self.customers.segment]
        return pd.DataFrame({"customer": np.arange(self.customers.n), "segment": seg.astype(str)})

    def daily_frame(self) -> pd.DataFrame:
        """One row per simulated day: shop totals and the observed market (prices, stock)."""
        return pd.DataFrame([r.as_dict() for r in self.history])

    # ------------------------------------------------------------------ setup

    def _cache_traits(self) -> None:
        """Per-customer constants of the daily hazard, computed once (traits never change)."""
        c = self.customers
        self._cat_exp = np.exp(c.cat_logits - c.cat_logits.max(axis=1, keepdims=True))
        self._base_rate = c.rate * self.config.rate_scale
        self._sens3 = c.price_sens / 3.0

    def _sample_customers(self, n: int) -> Customers:
        rng, p = self.rng, self.prior
        segment = rng.choice(len(SEGMENTS), size=n, p=SEGMENT_SHARE)
        rate_mult = SEGMENT_RATE / (SEGMENT_SHARE @ SEGMENT_RATE)
        spend_mult = SEGMENT_SPEND / (SEGMENT_SHARE @ SEGMENT_SPEND)
        rate = rng.gamma(p.r, 1.0 / p.alpha_days, size=n) * rate_mult[segment]
        p_drop = np.clip(rng.beta(p.a, p.b, size=n) * SEGMENT_CHURN[segment], 0.0, 0.95)
        spend_mu = p.spend_log_mu + np.log(spend_mult[segment]) + rng.normal(0, 0.3, size=n)
        price_sens = SEGMENT_PRICE_SENS[segment] * rng.lognormal(0.0, 0.3, size=n)
        pref_hour = (SEGMENT_HOUR[segment] + np.rint(rng.normal(0, 2.5, size=n))).astype(np.int64) % 24
        cat_logits = rng.normal(0, 1.0, size=(n, K))
        z = np.zeros(n)
        return Customers(
            segment=segment,
            rate=rate,
            p_drop=p_drop,
            spend_mu=spend_mu,
            price_sens=price_sens,
            pref_hour=pref_hour,
            cat_logits=cat_logits,
            alive=np.ones(n, dtype=bool),
            subscribed=np.ones(n, dtype=bool),
            fatigue=z.copy(),
            last_purchase=np.full(n, -np.inf),
            n_orders=np.zeros(n, dtype=np.int64),
            unhappy=z.copy(),
            promo_strength=z.copy(),
            promo_discount=z.copy(),
            promo_category=np.full(n, -1, dtype=np.int64),
            promo_campaign=np.full(n, -1, dtype=np.int64),
            promo_left=np.zeros(n, dtype=np.int64),
        )

    # ------------------------------------------------------------------ calendar

    def _at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Call the method ``fn(*args)`` at time ``t`` on the event calendar.

        The call is also kept as data in ``_pending`` (method name and arguments) until it fires, so
        :meth:`fork` can put the same future events on a copy's calendar.
        """
        key = self._seq
        self._seq += 1
        self._pending[key] = (t, fn.__name__, args)
        event = self.env.timeout(max(0.0, t - self.env.now))
        event.callbacks.append(lambda _event: self._fire(key))

    def _fire(self, key: int) -> None:
        _, name, args = self._pending.pop(key)
        getattr(self, name)(*args)

    def fork(self, seed: int) -> MarketWorld:
        """An independent copy of this world, from now on with its own random stream ``seed``.

        Same customers, stock, campaigns, history and pending events (deliveries, returns,
        maturities, replenishments); a different future. Only at a day boundary (after ``advance``).
        """
        if abs(self.env.now - round(self.env.now)) > 1e-9:
            raise RuntimeError(f"fork at a day boundary (after advance), not at t={self.env.now}")
        new = object.__new__(MarketWorld)
        new.config = self.config.model_copy(update={"seed": seed})
        new.prior = self.prior
        new.rng = np.random.default_rng(seed)
        new.env = simpy.Environment(initial_time=self.env.now)
        new.customers = copy.deepcopy(self.customers)
        new._cache_traits()
        for name in (
            "competitor",
            "competitor_cut_left",
            "trend",
            "expected_daily_demand",
            "stock",
            "on_order",
            "season_amplitude",
            "season_peak",
            "carrier_late",
            "carrier_extra_days",
        ):
            setattr(new, name, getattr(self, name).copy())
        new.campaigns = copy.deepcopy(self.campaigns)
        new.events = _EventLog()
        new.events._batches = list(self.events._batches)
        new.truth = copy.deepcopy(self.truth)
        new.history = copy.deepcopy(self.history)
        new._today = new.history[-1] if new.history else DayReport(day=0)
        new._pending, new._seq = {}, 0
        for _, (t, name, args) in sorted(self._pending.items()):
            new._at(t, getattr(new, name), *copy.deepcopy(args))
        new.env.process(new._clock())
        return new

    def _clock(self) -> Generator[simpy.Event, Any, None]:
        while True:
            self._day_start()
            yield self.env.timeout(DAY_CLOSE - DAY_START)
            self._day_close()
            yield self.env.timeout(1.0 - DAY_CLOSE)

    def _day_start(self) -> None:
        self._today = DayReport(day=self.day)
        self._move_competitors()
        self._drift()

    def _move_competitors(self) -> None:
        rng, cfg = self.rng, self.config
        self.competitor = 1.0 + 0.9 * (self.competitor - 1.0) + rng.normal(0, cfg.competitor_volatility, K)
        self.competitor_cut_left = np.maximum(self.competitor_cut_left - 1, 0)
        starts = (rng.random(K) < 1 / 60) & (self.competitor_cut_left == 0)
        for k in np.flatnonzero(starts):
            depth, days = rng.uniform(0.1, 0.2), int(rng.integers(7, 15))
            self.competitor_cut_left[k] = days
            self.truth.append(
                {
                    "day": self.day,
                    "cause": "competitor_price_cut",
                    "category": CATEGORIES[k],
                    "depth": depth,
                    "days": days,
                }
            )
        cut = self.competitor_cut_left > 0
        self.competitor = np.where(cut, np.minimum(self.competitor, 0.85), self.competitor)
        self.competitor = np.clip(self.competitor, 0.6, 1.4)

    def _drift(self) -> None:
        sd = self.config.drift_per_month / math.sqrt(30)
        self.trend = self.trend + self.rng.normal(0, sd, K)

    # ------------------------------------------------------------------ pushes

    def _push(self, campaign_id: int) -> None:
        record = self.campaigns[campaign_id]
        c, cfg, a, rng = self.customers, self.config, record.action, self.rng
        eligible = c.subscribed.copy()
        if a.segment != "all":
            eligible &= c.segment == SEGMENTS.index(a.segment)
        ids = np.flatnonzero(eligible)
        cap = a.reach_cap(cfg.push_cost)
        if len(ids) > cap:
            ids = np.sort(rng.choice(ids, size=cap, replace=False))
        record.targeted, record.reached = ids, len(ids)
        cost = len(ids) * cfg.push_cost
        record.outcome["push_cost"] += cost
        record.outcome["profit"] -= cost
        self._today.push_cost += cost
        self._today.profit -= cost
        self._today.pushes += len(ids)
        self.events.add(self.env.now, "push", ids, campaign=record.campaign_id, discount=a.discount)
        if len(ids) == 0:
            self._schedule_maturity(record)
            return
        hour_gap = np.abs(c.pref_hour[ids] - a.push_hour)
        hour_match = np.exp(-(np.minimum(hour_gap, 24 - hour_gap) ** 2) / (2 * 3.0**2))
        tired = 1.0 / (1.0 + c.fatigue[ids])
        saturating = 1.0 - np.exp(-2.0 * c.price_sens[ids] * a.discount)
        strength = ((cfg.max_uplift - 1.0) * saturating + 0.3) * hour_match * tired
        if a.category != "all":
            strength *= _softmax(c.cat_logits[ids] + self.trend)[:, CATEGORIES.index(a.category)] * K / 2
        c.promo_strength[ids] = strength
        c.promo_discount[ids] = a.discount
        c.promo_category[ids] = -1 if a.category == "all" else CATEGORIES.index(a.category)
        c.promo_campaign[ids] = record.campaign_id
        c.promo_left[ids] = cfg.promo_days
        c.fatigue[ids] += 1.0
        unsub = rng.random(len(ids)) < 0.02 * np.maximum(c.fatigue[ids] - 2.0, 0.0)
        c.subscribed[ids[unsub]] = False
        lapsed = ids[~c.alive[ids]]
        back = lapsed[rng.random(len(lapsed)) < 0.05 * (a.discount / 0.3) * hour_match[~c.alive[ids]]]
        c.alive[back] = True
        self.events.add(self.env.now, "reactivation", back, campaign=record.campaign_id)
        self._schedule_maturity(record)

    def _schedule_maturity(self, record: CampaignRecord) -> None:
        cid = record.campaign_id
        self._at(record.day + self.config.maturity_days + DAY_CLOSE + 1e-6, self._mature, cid)
        for h in RETENTION_HORIZONS:
            self._at(record.day + h + DAY_CLOSE + 1e-6, self._retention, cid, h)

    def _mature(self, campaign_id: int) -> None:
        record = self.campaigns[campaign_id]
        o = record.outcome
        o["satisfaction"] = campaign_satisfaction(
            o["orders"], o["complaints"], o["returns"], o["late_deliveries"]
        )
        record.matured, record.matured_day = True, self.day
        self._today.matured_campaigns.append(record.campaign_id)

    def _retention(self, campaign_id: int, horizon: int) -> None:
        record = self.campaigns[campaign_id]
        if len(record.targeted):
            bought = self.customers.last_purchase[record.targeted] >= record.day  # purchases close the day
            record.outcome[f"retention_{horizon}"] = float(bought.mean())
        record.retention_known[horizon] = True

    # ------------------------------------------------------------------ the day's purchases

    def _day_close(self) -> None:
        c, cfg, rng, d = self.customers, self.config, self.rng, self.day
        weekday = (d + cfg.start_weekday) % 7
        shock = math.exp(rng.normal(0, cfg.noise) - cfg.noise**2 / 2)
        # each customer's category mix softmax(cat_logits + trend), folded into the price response:
        # sum_k pref_k * exp(-0.5 (1/competitor_k - 1)): dearer than the rival, fewer buy
        drift = np.exp(self.trend - self.trend.max())
        rival = np.exp(-0.5 * (1.0 / self.competitor - 1.0))
        price_term = (self._cat_exp @ (drift * rival)) / (self._cat_exp @ drift)
        day_scale = WEEKLY_SEASON[weekday] * shock
        rate = self._base_rate * day_scale * price_term**self._sens3
        season = self.yearly_season(d)
        if season is not None:  # the customer's own mix of the categories' yearly factors
            rate = rate * (self._cat_exp @ (drift * season)) / (self._cat_exp @ drift)
        promo_on = c.promo_left > 0
        on = np.flatnonzero(promo_on)
        strength = c.promo_strength[on]
        pulled_in = cfg.promo_reach_rate * cfg.rate_scale * day_scale / (cfg.max_uplift - 0.7)
        rate[on] = rate[on] * (1.0 + strength) + pulled_in * strength
        rate *= -np.expm1(-(d - c.last_purchase) / max(cfg.pull_forward_days, 1e-9))  # recency
        p = -np.expm1(-rate)
        buyers = np.flatnonzero(c.alive & (rng.random(c.n) < p))
        prefs = _softmax(c.cat_logits[buyers] + self.trend)
        self._orders(buyers, prefs if season is None else prefs * season, promo_on[buyers])
        self._decay_promos(promo_on)
        self._lifecycle()
        self._replenish_check()
        self._today.active_customers = int(np.sum(c.alive & (c.last_purchase > d - 90)))
        self.history.append(self._today)

    def _orders(self, ids: np.ndarray, prefs: np.ndarray, promo: np.ndarray) -> None:
        c, rng, d = self.customers, self.rng, self.day
        n = len(ids)
        if n == 0:
            return
        pc = c.promo_category[ids]
        boost = np.where(
            promo[:, None] & ((pc[:, None] == np.arange(K)) | (pc[:, None] < 0)),
            1.0 + c.promo_strength[ids, None],
            1.0,
        )
        w = prefs * boost
        cat = _sample_rows(rng, w / w.sum(axis=1, keepdims=True))
        applies = promo & ((pc < 0) | (pc == cat))
        discount = np.where(applies, c.promo_discount[ids], 0.0)
        list_value = np.exp(rng.normal(c.spend_mu[ids], self.prior.spend_log_sigma))
        paid = list_value * (1.0 - discount)
        cogs = list_value * COST_RATIO[cat]
        campaign = np.where(promo, c.promo_campaign[ids], -1)
        hour = np.where(promo, rng.integers(0, 24, n), (c.pref_hour[ids] + rng.integers(-2, 3, n)) % 24)
        backorder = np.zeros(n, dtype=bool)
        for k in range(K):
            mine = np.flatnonzero(cat == k)
            avail = int(max(self.stock[k], 0))
            backorder[mine[avail:]] = True
            self.stock[k] -= len(mine)
        if backorder.any():
            self._today.stockouts += int(backorder.sum())
            for k in np.unique(cat[backorder]):
                if not any(
                    t["cause"] == "stock_out" and t["category"] == CATEGORIES[k] and t["day"] >= d - 7
                    for t in self.truth[-20:]
                ):
                    self.truth.append({"day": d, "cause": "stock_out", "category": CATEGORIES[int(k)]})
        self.events.add(
            self.env.now,
            "purchase",
            ids,
            campaign=campaign,
            category=cat,
            list_value=list_value,
            paid=paid,
            discount=discount,
            hour=hour,
        )
        self._book(campaign, "orders", np.ones(n))
        self._book(campaign, "gmv", paid)
        self._book(campaign, "profit", paid - cogs)
        self._book(campaign, "discount_cost", list_value - paid)
        t = self._today
        t.orders += n
        t.gmv += float(paid.sum())
        t.profit += float((paid - cogs).sum())
        t.discount_cost += float((list_value - paid).sum())
        c.last_purchase[ids] = d
        c.n_orders[ids] += 1
        drop = rng.random(n) < c.p_drop[ids] * (1.0 + 0.5 * c.unhappy[ids])
        c.alive[ids[drop]] = False
        self._ship(ids, cat, paid, cogs, discount, campaign, backorder)

    def _ship(
        self,
        ids: np.ndarray,
        cat: np.ndarray,
        paid: np.ndarray,
        cogs: np.ndarray,
        discount: np.ndarray,
        campaign: np.ndarray,
        backorder: np.ndarray,
    ) -> None:
        rng, d = self.rng, self.day
        n = len(ids)
        congestion = max(0.0, self._today.orders / max(self.expected_daily_demand.sum(), 1e-9) - 2.0)
        p_late: float | np.ndarray = 0.03 + 0.02 * congestion
        extra_days: int | np.ndarray = 4
        if self.carrier_late.any() or self.carrier_extra_days.any():  # a category's carrier is in trouble
            p_late = p_late + self.carrier_late[cat]
            extra_days = extra_days + self.carrier_extra_days[cat]
        carrier_late = rng.random(n) < p_late
        delay = 2 + rng.geometric(0.6, n) + np.where(backorder, rng.integers(5, 13, n), 0)
        late = backorder | carrier_late
        delay = np.where(carrier_late & ~backorder, delay + extra_days, delay)
        for dd in np.unique(delay):
            sel = delay == dd
            self._at(
                d + int(dd) + 0.5,
                self._deliver,
                ids[sel],
                cat[sel],
                paid[sel],
                cogs[sel],
                discount[sel],
                campaign[sel],
                late[sel],
            )

    def _deliver(
        self,
        ids: np.ndarray,
        cat: np.ndarray,
        paid: np.ndarray,
        cogs: np.ndarray,
        discount: np.ndarray,
        campaign: np.ndarray,
        late: np.ndarray,
    ) -> None:
        c, rng, cfg = self.customers, self.rng, self.config
        self.events.add(self.env.now, "delivery", ids, campaign=campaign, category=cat, paid=paid)
        late_ids = ids[late]
        self.events.add(self.env.now, "late_delivery", late_ids, campaign=campaign[late], category=cat[late])
        self._today.late_deliveries += int(late.sum())
        self._book(campaign[late], "late_deliveries", np.ones(int(late.sum())))
        c.unhappy[late_ids] += 1.0
        if cfg.late_delivery_aversion > 0 and len(late_ids):
            self._avert(late_ids, cat[late])
        complain = late & (rng.random(len(ids)) < COMPLAINT_IF_LATE)
        self.events.add(
            self.env.now, "complaint", ids[complain], campaign=campaign[complain], category=cat[complain]
        )
        self._today.complaints += int(complain.sum())
        self._book(campaign[complain], "complaints", np.ones(int(complain.sum())))
        c.unhappy[ids[complain]] += 1.0
        p_return = 0.06 + 0.25 * discount + 0.15 * late + SEGMENT_RETURN[c.segment[ids]]
        ret = rng.random(len(ids)) < p_return
        lo, hi = cfg.return_window
        when = rng.integers(lo, hi + 1, len(ids))
        for w in np.unique(when[ret]):
            sel = ret & (when == w)
            self._at(
                self.day + int(w) + 0.5, self._return, ids[sel], cat[sel], paid[sel], cogs[sel], campaign[sel]
            )

    def _avert(self, ids: np.ndarray, cat: np.ndarray) -> None:
        """Customers whose order of a category came late like that category less (repeat orders fall)."""
        c = self.customers
        np.add.at(c.cat_logits, (ids, cat), -self.config.late_delivery_aversion)
        rows = np.unique(ids)
        logits = c.cat_logits[rows]
        self._cat_exp[rows] = np.exp(logits - logits.max(axis=1, keepdims=True))

    def _return(
        self, ids: np.ndarray, cat: np.ndarray, paid: np.ndarray, cogs: np.ndarray, campaign: np.ndarray
    ) -> None:
        self.events.add(self.env.now, "return", ids, campaign=campaign, category=cat, paid=-paid)
        loss = paid - 0.9 * cogs
        self._today.returns += len(ids)
        self._today.refunds += float(paid.sum())
        self._today.profit -= float(loss.sum())
        self._book(campaign, "returns", np.ones(len(ids)))
        self._book(campaign, "refunds", paid)
        self._book(campaign, "gmv", -paid)
        self._book(campaign, "profit", -loss)
        np.add.at(self.stock, cat, 1)

    def _book(self, campaign: np.ndarray, key: str, values: np.ndarray) -> None:
        """Add ``values`` to the outcome ``key`` of each order's campaign (unmatured campaigns only)."""
        for cid in np.unique(campaign):
            if cid < 0:
                continue
            record = self.campaigns[int(cid)]
            if not record.matured:
                record.outcome[key] += float(values[campaign == cid].sum())

    def _decay_promos(self, promo_on: np.ndarray) -> None:
        c = self.customers
        on = np.flatnonzero(promo_on)
        c.promo_left[on] -= 1
        c.promo_strength[on] *= self.config.promo_decay
        ended = on[c.promo_left[on] == 0]
        c.promo_strength[ended] = 0.0
        c.promo_campaign[ended] = -1

    def _lifecycle(self) -> None:
        c, rng, cfg = self.customers, self.rng, self.config
        c.fatigue *= cfg.fatigue_decay
        worn = np.flatnonzero(c.alive & (c.fatigue > 3.0))
        c.alive[worn[rng.random(len(worn)) < 0.002 * (c.fatigue[worn] - 3.0)]] = False
        lapsed = np.flatnonzero(~c.alive)
        back = lapsed[rng.random(len(lapsed)) < cfg.reactivation_rate]
        c.alive[back] = True
        self.events.add(self.env.now, "reactivation", back)

    def _replenish_check(self) -> None:
        cfg = self.config
        low = (self.stock < cfg.reorder_days * self.expected_daily_demand) & ~self.on_order
        for k in np.flatnonzero(low):
            qty = math.ceil(cfg.stock_days * self.expected_daily_demand[k]) + 1
            lead = int(self.rng.integers(cfg.lead_time_days[0], cfg.lead_time_days[1] + 1))
            self.on_order[k] = True
            self._at(self.day + lead + DAY_START + 1e-6, self._receive, int(k), qty)

    def _receive(self, k: int, qty: int) -> None:
        self.stock[k] += qty
        self.on_order[k] = False


def _per_category(table: dict[str, tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """A ``category -> (value, integer)`` config table as two arrays in CATEGORIES order (zeros: off)."""
    values, ints = np.zeros(K), np.zeros(K, dtype=np.int64)
    for name, (value, n) in table.items():
        values[CATEGORIES.index(name)], ints[CATEGORIES.index(name)] = value, n
    return values, ints


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _sample_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probs``."""
    u = rng.random(len(probs))[:, None]
    return np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), probs.shape[1] - 1)

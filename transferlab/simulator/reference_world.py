"""The ground-truth world written the straightforward way: one simpy process per customer.

The same model as :class:`~transferlab.simulator.world.MarketWorld` (same hazards, parameters and
mechanisms, the constants imported from ``world.py``), but every customer is a :class:`Customer` object
with scalar traits and its own simpy process: it sleeps until each day's close (its own timeout), draws
its own purchase with Python floats, and is woken by a push (a simpy interrupt) when a campaign reaches
it. Each order is a process of its own that waits for the day's books to close (carrier congestion
depends on the day's total), for delivery and then, maybe, for its return. The market-level state
(competitor prices, preference trend, the day's demand shock, stock, campaigns, the day's report) is
shared on the world; the shop's own calendar draws the day's market at day start and closes the
books just after the customers' day close.

It exists as the reference for ``benchmarks/simulator_speed.py`` (how much the vector world and the
learned simulator gain over the obvious implementation) and as an independent check of the vector
world: the two use different random streams, so they agree in distribution, not draw by draw
(``tests/simulator/test_reference_world.py``). A change to the world's model belongs in both files;
that test fails when they drift apart.

>>> from transferlab.simulator.world_config import CustomerPrior, WorldConfig
>>> prior = CustomerPrior(r=0.243, alpha_days=30.9, a=0.793, b=2.426, spend_log_mu=3.2, spend_log_sigma=0.8)
>>> world = ReferenceWorld(WorldConfig(n_customers=200, seed=1), prior=prior)
>>> world.launch(CampaignAction(discount=0.2, push_hour=20, segment="all", budget=1.0))
0
>>> world.advance().pushes
50
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from transferlab.simulator.vocabulary import CATEGORIES, NOOP, SEGMENTS, CampaignAction, campaign_satisfaction
from transferlab.simulator.world import (
    COMPLAINT_IF_LATE,
    COST_RATIO,
    DAY_CLOSE,
    DAY_START,
    RETENTION_HORIZONS,
    SEGMENT_CHURN,
    SEGMENT_HOUR,
    SEGMENT_PRICE_SENS,
    SEGMENT_RATE,
    SEGMENT_RETURN,
    SEGMENT_SHARE,
    SEGMENT_SPEND,
    WEEKLY_SEASON,
    CampaignRecord,
    DayReport,
)
from transferlab.simulator.world_config import CustomerPrior, WorldConfig

K = len(CATEGORIES)
_SEASON = [float(x) for x in WEEKLY_SEASON]
_RATE_MULT = [float(x) for x in SEGMENT_RATE / (SEGMENT_SHARE @ SEGMENT_RATE)]
_SPEND_MULT = [float(x) for x in SEGMENT_SPEND / (SEGMENT_SHARE @ SEGMENT_SPEND)]
_COST = [float(x) for x in COST_RATIO]
_SHARE = [float(x) for x in SEGMENT_SHARE]
_CHURN = [float(x) for x in SEGMENT_CHURN]
_PRICE_SENS = [float(x) for x in SEGMENT_PRICE_SENS]
_HOUR = [int(x) for x in SEGMENT_HOUR]
_RETURN = [float(x) for x in SEGMENT_RETURN]
BOOKS_CLOSE = DAY_CLOSE + 1e-7  # the shop closes its books just after every customer's day close
EVENT_COLUMNS = ("t", "day", "event", "customer", "campaign", "category", "list_value", "paid", "discount")


@dataclass
class Push:
    """A campaign's offer as it reaches one customer (the cause of the interrupt)."""

    campaign: int
    discount: float
    hour: int
    category: int  # -1: all categories


@dataclass
class Order:
    """One purchase on its way: what was bought, for how much, and under which campaign."""

    customer: Customer
    category: int
    list_value: float
    paid: float
    discount: float
    campaign: int
    backorder: bool

    @property
    def cogs(self) -> float:
        return self.list_value * _COST[self.category]


class Customer:
    """One customer: hidden traits, state, and the simpy process that lives their days."""

    def __init__(self, world: ReferenceWorld, cid: int) -> None:
        rng, p = world.rng, world.prior
        self.world, self.id = world, cid
        self.segment = rng.choices(range(len(SEGMENTS)), weights=_SHARE)[0]
        s = self.segment
        self.rate = rng.gammavariate(p.r, 1.0 / p.alpha_days) * _RATE_MULT[s]
        self.p_drop = min(max(rng.betavariate(p.a, p.b) * _CHURN[s], 0.0), 0.95)
        self.spend_mu = p.spend_log_mu + math.log(_SPEND_MULT[s]) + rng.gauss(0.0, 0.3)
        self.price_sens = _PRICE_SENS[s] * rng.lognormvariate(0.0, 0.3)
        self.pref_hour = (_HOUR[s] + round(rng.gauss(0.0, 2.5))) % 24
        self.cat_logits = [rng.gauss(0.0, 1.0) for _ in range(K)]
        self.alive = self.subscribed = True
        self.fatigue = self.unhappy = 0.0
        self.last_purchase = -math.inf
        self.n_orders = 0
        self.promo_strength = self.promo_discount = 0.0
        self.promo_category = self.promo_campaign = -1
        self.promo_left = 0
        self.process = world.env.process(self.live())

    def prefs(self) -> list[float]:
        """Today's category preferences (softmax of own logits plus the market's drift)."""
        z = [x + t for x, t in zip(self.cat_logits, self.world.trend, strict=True)]
        top = max(z)
        e = [math.exp(x - top) for x in z]
        total = sum(e)
        return [x / total for x in e]

    def live(self) -> Generator[simpy.Event, Any, None]:
        """Sleep until each day's close, then buy (maybe); a push interrupts the sleep."""
        env, day = self.world.env, 0
        while True:
            try:
                yield env.timeout(day + DAY_CLOSE - env.now)
            except simpy.Interrupt as interrupt:
                if isinstance(interrupt.cause, Push):
                    self.receive_push(interrupt.cause)
                continue
            self.close_day()
            day += 1

    # ------------------------------------------------------------------ pushes

    def receive_push(self, push: Push) -> None:
        w, cfg, rng = self.world, self.world.config, self.world.rng
        gap = abs(self.pref_hour - push.hour)
        hour_match = math.exp(-(min(gap, 24 - gap) ** 2) / (2 * 3.0**2))
        saturating = 1.0 - math.exp(-2.0 * self.price_sens * push.discount)
        strength = ((cfg.max_uplift - 1.0) * saturating + 0.3) * hour_match / (1.0 + self.fatigue)
        if push.category >= 0:
            strength *= self.prefs()[push.category] * K / 2
        self.promo_strength, self.promo_discount = strength, push.discount
        self.promo_category, self.promo_campaign = push.category, push.campaign
        self.promo_left = cfg.promo_days
        self.fatigue += 1.0
        if rng.random() < 0.02 * max(self.fatigue - 2.0, 0.0):
            self.subscribed = False
        if not self.alive and rng.random() < 0.05 * (push.discount / 0.3) * hour_match:
            self.alive = True
            w.log("reactivation", self.id, campaign=push.campaign)

    # ------------------------------------------------------------------ the day's purchase

    def close_day(self) -> None:
        w, cfg, rng, d = self.world, self.world.config, self.world.rng, self.world.day
        prefs = self.prefs()
        price_term = sum(p * f for p, f in zip(prefs, w.price_factor, strict=True))
        price_term = math.exp(math.log(price_term) * self.price_sens / 3.0)
        promo_on = self.promo_left > 0
        recency = 1.0 - math.exp(-(d - self.last_purchase) / max(cfg.pull_forward_days, 1e-9))
        day_scale = cfg.rate_scale * _SEASON[w.weekday] * w.shock
        strength = self.promo_strength if promo_on else 0.0
        pulled_in = cfg.promo_reach_rate * day_scale * strength / (cfg.max_uplift - 0.7)
        rate = (self.rate * day_scale * price_term * (1.0 + strength) + pulled_in) * recency
        if rng.random() < -math.expm1(-rate) and self.alive:
            self.buy(prefs, promo_on)
        if promo_on:
            self.promo_left -= 1
            self.promo_strength *= cfg.promo_decay
            if self.promo_left == 0:
                self.promo_strength, self.promo_campaign = 0.0, -1
        self.fatigue *= cfg.fatigue_decay
        if self.alive and rng.random() < 0.002 * max(self.fatigue - 3.0, 0.0):
            self.alive = False
        if not self.alive and rng.random() < cfg.reactivation_rate:
            self.alive = True
            w.log("reactivation", self.id)

    def buy(self, prefs: list[float], promo_on: bool) -> None:
        w, rng, d = self.world, self.world.rng, self.world.day
        pc = self.promo_category
        weights = [
            p * (1.0 + self.promo_strength if promo_on and (pc < 0 or pc == k) else 1.0)
            for k, p in enumerate(prefs)
        ]
        cat = rng.choices(range(K), weights=weights)[0]
        discount = self.promo_discount if promo_on and (pc < 0 or pc == cat) else 0.0
        list_value = math.exp(rng.gauss(self.spend_mu, w.prior.spend_log_sigma))
        campaign = self.promo_campaign if promo_on else -1
        hour = rng.randint(0, 23) if promo_on else (self.pref_hour + rng.randint(-2, 2)) % 24
        order = Order(self, cat, list_value, list_value * (1.0 - discount), discount, campaign, False)
        order.backorder = w.take_stock(cat)
        w.log("purchase", self.id, campaign, cat, list_value, order.paid, discount, t=d + hour / 24)
        w.book_order(order)
        self.last_purchase = d
        self.n_orders += 1
        if rng.random() < self.p_drop * (1.0 + 0.5 * self.unhappy):
            self.alive = False
        w.env.process(self.fulfil(order, w.closed))

    # ------------------------------------------------------------------ delivery and return

    def fulfil(self, order: Order, day_closed: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """Ship once the day's orders are all in (carrier congestion), deliver, maybe return."""
        w, rng, cfg = self.world, self.world.rng, self.world.config
        yield day_closed
        d = w.day
        carrier_late = rng.random() < 0.03 + 0.02 * w.congestion
        delay = 2 + _geometric(rng, 0.6) + (rng.randint(5, 12) if order.backorder else 0)
        if carrier_late and not order.backorder:
            delay += 4
        late = order.backorder or carrier_late
        yield w.env.timeout(d + delay + 0.5 - w.env.now)
        self.delivered(order, late)
        p_return = 0.06 + 0.25 * order.discount + 0.15 * late + _RETURN[self.segment]
        if rng.random() < p_return:
            lo, hi = cfg.return_window
            yield w.env.timeout(w.day + rng.randint(lo, hi) + 0.5 - w.env.now)
            w.book_return(order)

    def delivered(self, order: Order, late: bool) -> None:
        w, rng = self.world, self.world.rng
        c, k = order.campaign, order.category
        w.log("delivery", self.id, c, k, paid=order.paid)
        if not late:
            return
        w.log("late_delivery", self.id, c, k)
        w.today.late_deliveries += 1
        w.book(c, "late_deliveries", 1.0)
        self.unhappy += 1.0
        if rng.random() < COMPLAINT_IF_LATE:
            w.log("complaint", self.id, c, k)
            w.today.complaints += 1
            w.book(c, "complaints", 1.0)
            self.unhappy += 1.0


class ReferenceWorld:
    """The ground-truth market, one simpy process per customer. Same API as ``MarketWorld``."""

    def __init__(self, config: WorldConfig | None = None, prior: CustomerPrior | None = None) -> None:
        self.config = config or WorldConfig()
        self.prior = prior or CustomerPrior.from_cdnow()
        self.rng = random.Random(self.config.seed)
        self.env = simpy.Environment()
        self.competitor = [1.0] * K
        self.competitor_cut_left = [0] * K
        self.trend = [0.0] * K
        self.price_factor = [1.0] * K
        self.weekday, self.shock, self.congestion = 0, 1.0, 0.0
        self.closed = self.env.event()  # succeeds when the day's books close (orders then ship)
        self.customers = [Customer(self, i) for i in range(self.config.n_customers)]
        share = np.mean([c.prefs() for c in self.customers], axis=0)
        total_rate = sum(c.rate for c in self.customers)
        self.expected_daily_demand = [float(total_rate * self.config.rate_scale * s) for s in share]
        self.stock = [float(math.ceil(self.config.stock_days * e) + 1) for e in self.expected_daily_demand]
        self.on_order = [False] * K
        self.campaigns: list[CampaignRecord] = []
        self.events: list[tuple[float, str, int, int, int, float, float, float]] = []
        self.truth: list[dict[str, Any]] = []
        self.history: list[DayReport] = []
        self.today = DayReport(day=0)
        self.env.process(self._clock())

    # ------------------------------------------------------------------ public API (as MarketWorld)

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
        self._at(self.day + action.push_hour / 24, self._push, record)
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
        recent, n = self.history[-7:], len(self.customers)
        state: dict[str, float] = {
            "day": float(self.day),
            "weekday": float((self.day + self.config.start_weekday) % 7),
        }
        for key in ("orders", "gmv", "profit", "complaints", "returns", "pushes"):
            state[f"{key}_7d"] = float(sum(getattr(r, key) for r in recent))
        state |= {
            "active_90d": sum(c.last_purchase > self.day - 90 for c in self.customers) / n,
            "subscribed": sum(c.subscribed for c in self.customers) / n,
        }
        for k, name in enumerate(CATEGORIES):
            state[f"stock_days_{name}"] = self.stock[k] / max(self.expected_daily_demand[k], 1e-9)
            state[f"competitor_{name}"] = self.competitor[k]
        return state

    def daily_frame(self) -> pd.DataFrame:
        """One row per simulated day: shop totals."""
        return pd.DataFrame([r.as_dict() for r in self.history])

    def event_frame(self) -> pd.DataFrame:
        """Every customer event so far, in the columns of ``MarketWorld.event_frame``."""
        rows = [(t, math.floor(t), *rest) for t, *rest in self.events]
        df = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
        return df.sort_values(["t", "customer"], kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------ what customers call

    def log(
        self,
        event: str,
        customer: int,
        campaign: int = -1,
        category: int = -1,
        list_value: float = 0.0,
        paid: float = 0.0,
        discount: float = 0.0,
        t: float | None = None,
    ) -> None:
        """Append one customer event."""
        when = self.env.now if t is None else t
        self.events.append((when, event, customer, campaign, category, list_value, paid, discount))

    def book(self, campaign: int, key: str, value: float) -> None:
        """Add ``value`` to the outcome ``key`` of ``campaign`` (if any, and not matured yet)."""
        if campaign >= 0 and not self.campaigns[campaign].matured:
            self.campaigns[campaign].outcome[key] += value

    def take_stock(self, k: int) -> bool:
        """Take one unit of category ``k`` from stock; True when there was none (a backorder)."""
        backorder = self.stock[k] <= 0
        self.stock[k] -= 1
        if backorder:
            self.today.stockouts += 1
            d = self.day
            if not any(
                t["cause"] == "stock_out" and t["category"] == CATEGORIES[k] and t["day"] >= d - 7
                for t in self.truth[-20:]
            ):
                self.truth.append({"day": d, "cause": "stock_out", "category": CATEGORIES[k]})
        return backorder

    def book_order(self, o: Order) -> None:
        margin = o.paid - o.cogs
        for key, value in (("orders", 1.0), ("gmv", o.paid), ("profit", margin)):
            self.book(o.campaign, key, value)
        self.book(o.campaign, "discount_cost", o.list_value - o.paid)
        self.today.orders += 1
        self.today.gmv += o.paid
        self.today.profit += margin
        self.today.discount_cost += o.list_value - o.paid

    def book_return(self, o: Order) -> None:
        self.log("return", o.customer.id, o.campaign, o.category, paid=-o.paid)
        loss = o.paid - 0.9 * o.cogs
        self.today.returns += 1
        self.today.refunds += o.paid
        self.today.profit -= loss
        for key, value in (("returns", 1.0), ("refunds", o.paid), ("gmv", -o.paid), ("profit", -loss)):
            self.book(o.campaign, key, value)
        self.stock[o.category] += 1

    # ------------------------------------------------------------------ the market's calendar

    def _at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        def proc() -> Generator[simpy.Event, Any, None]:
            yield self.env.timeout(max(0.0, t - self.env.now))
            fn(*args)

        self.env.process(proc())

    def _clock(self) -> Generator[simpy.Event, Any, None]:
        """Day start: the day's market (prices, drift, demand shock); after the customers' close: books."""
        while True:
            self._day_start()
            yield self.env.timeout(BOOKS_CLOSE - DAY_START)
            self._close_books()
            yield self.env.timeout(1.0 - BOOKS_CLOSE)

    def _day_start(self) -> None:
        cfg = self.config
        self.today = DayReport(day=self.day)
        self._move_competitors()
        sd = cfg.drift_per_month / math.sqrt(30)
        self.trend = [t + self.rng.gauss(0.0, sd) for t in self.trend]
        self.weekday = (self.day + cfg.start_weekday) % 7
        self.shock = math.exp(self.rng.gauss(0.0, cfg.noise) - cfg.noise**2 / 2)
        self.price_factor = [math.exp(-0.5 * (1.0 / c - 1.0)) for c in self.competitor]

    def _move_competitors(self) -> None:
        rng, vol = self.rng, self.config.competitor_volatility
        for k in range(K):
            price = 1.0 + 0.9 * (self.competitor[k] - 1.0) + rng.gauss(0.0, vol)
            self.competitor_cut_left[k] = max(self.competitor_cut_left[k] - 1, 0)
            if rng.random() < 1 / 60 and self.competitor_cut_left[k] == 0:
                depth, days = rng.uniform(0.1, 0.2), rng.randint(7, 14)
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
            if self.competitor_cut_left[k] > 0:
                price = min(price, 0.85)
            self.competitor[k] = min(max(price, 0.6), 1.4)

    def _close_books(self) -> None:
        """After every customer's purchase: carrier congestion, restocking, the day's report."""
        d = self.day
        self.congestion = max(0.0, self.today.orders / max(sum(self.expected_daily_demand), 1e-9) - 2.0)
        closed, self.closed = self.closed, self.env.event()
        closed.succeed()
        self._replenish_check()
        self.today.active_customers = sum(c.alive and c.last_purchase > d - 90 for c in self.customers)
        self.history.append(self.today)

    def _replenish_check(self) -> None:
        cfg = self.config
        for k in range(K):
            if self.stock[k] < cfg.reorder_days * self.expected_daily_demand[k] and not self.on_order[k]:
                qty = math.ceil(cfg.stock_days * self.expected_daily_demand[k]) + 1
                lead = self.rng.randint(*cfg.lead_time_days)
                self.on_order[k] = True
                self._at(self.day + lead + DAY_START + 1e-6, self._receive, k, qty)

    def _receive(self, k: int, qty: int) -> None:
        self.stock[k] += qty
        self.on_order[k] = False

    # ------------------------------------------------------------------ campaigns

    def _push(self, record: CampaignRecord) -> None:
        """Pick who the budget reaches, charge the pushes, and interrupt each reached customer."""
        a = record.action
        seg = -1 if a.segment == "all" else SEGMENTS.index(a.segment)
        eligible = [c for c in self.customers if c.subscribed and (seg < 0 or c.segment == seg)]
        cap = a.reach_cap(self.config.push_cost)
        if len(eligible) > cap:
            eligible = sorted(self.rng.sample(eligible, cap), key=lambda c: c.id)
        record.targeted, record.reached = np.array([c.id for c in eligible], dtype=np.int64), len(eligible)
        cost = len(eligible) * self.config.push_cost
        record.outcome["push_cost"] += cost
        record.outcome["profit"] -= cost
        self.today.push_cost += cost
        self.today.profit -= cost
        self.today.pushes += len(eligible)
        push = Push(record.campaign_id, a.discount, a.push_hour, _category_index(a.category))
        for c in eligible:
            self.log("push", c.id, record.campaign_id, discount=a.discount)
            c.process.interrupt(push)
        self._at(record.day + self.config.maturity_days + DAY_CLOSE + 1e-6, self._mature, record)
        for h in RETENTION_HORIZONS:
            self._at(record.day + h + DAY_CLOSE + 1e-6, self._retention, record, h)

    def _mature(self, record: CampaignRecord) -> None:
        o = record.outcome
        o["satisfaction"] = campaign_satisfaction(
            o["orders"], o["complaints"], o["returns"], o["late_deliveries"]
        )
        record.matured, record.matured_day = True, self.day
        self.today.matured_campaigns.append(record.campaign_id)

    def _retention(self, record: CampaignRecord, horizon: int) -> None:
        if len(record.targeted):
            bought = [self.customers[i].last_purchase >= record.day for i in record.targeted]
            record.outcome[f"retention_{horizon}"] = sum(bought) / len(bought)
        record.retention_known[horizon] = True


def _category_index(category: str) -> int:
    return -1 if category == "all" else CATEGORIES.index(category)


def _geometric(rng: random.Random, p: float) -> int:
    """Trials until the first success (numpy's ``geometric``: 1, 2, ...)."""
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))

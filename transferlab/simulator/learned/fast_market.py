"""The fast simulated market: a batch of independent shops, each day a handful of numpy array ops.

:class:`SimParams` holds everything the fit learned, compiled to plain numpy arrays (lookup tables
and coefficients; no scikit-learn in the loop). :class:`SimMarket` simulates ``n_envs`` markets of
``n_customers`` customers each, with customer state as ``(n_envs, n_customers)`` arrays:

* each customer's purchase log-odds is a sum of table look-ups: segment x offer on/off x recency x
  frequency (folded each day with weekday, competitor prices, the demand shock and log age into one
  table per market), the active offer (segment x catalog action x days since the push) and push
  fatigue while an offer is active (pushes in the last 7/30 days, from a 30-bit push history per
  customer);
* the day's buyers (a sparse list) get a category, an order value, a discount, a stock-out or
  carrier delay, a delivery delay, maybe a complaint and a return; late deliveries, complaints and
  returns are booked in small ring buffers on the day they happen;
* stock cover and competitor prices are an exogenous process, block-bootstrapped from the daily log.

>>> import numpy as np
>>> market = SimMarket(SimParams.toy(), n_envs=2, n_customers=50, seed=0)
>>> market.reset(seed=1).shape, market.step(np.array([0, 7])).shape, market.day
((2, 17), (2, 12), 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from transferlab.simulator.learned.features import (
    AGE_OFFSET,
    FREQUENCY_LUT,
    NEVER,
    RECENCY_LUT,
    F,
    K,
    R,
    S,
)
from transferlab.simulator.vocabulary import (
    CATALOG,
    DAY_KEYS,
    OBS_KEYS,
    OUTCOME_KEYS,
    TARGETS,
    campaign_satisfaction,
)

A = len(CATALOG)
PUSH_BITS = np.uint32((1 << 30) - 1)
WEEK_BITS = np.uint32(127)
DAY = {k: i for i, k in enumerate(DAY_KEYS)}
OUT = {k: i for i, k in enumerate(OUTCOME_KEYS)}
PENDING_KEYS = ("returns", "refunds", "return_loss", "complaints", "late_deliveries")
"""What the ring buffers hold per future day (``return_loss``: the profit a return takes back)."""
PEND = {k: i for i, k in enumerate(PENDING_KEYS)}
RETENTION_HORIZONS = (30, 60, 90)


@dataclass
class SimParams:
    """Everything the learned simulator needs, as numpy arrays (see ``fit.py`` for how each is fit).

    Purchase model (log-odds tables): ``base`` (S, 2, R, F) intercept + segment + recency x frequency
    (the second index: without / with an active offer, whose effect depends on recency and frequency);
    ``age_coef`` (F,) on ``log(min(age, age_cap) + 30)`` (``age_cap``: the oldest age in the logs, so the
    simulator never extrapolates the logs' trend); ``weekday_coef`` (7,); ``competitor_coef`` (S,) on the
    mean log competitor index; ``cover_coef`` (1,); ``fatigue_coef`` (2,) on pushes 7d and pushes 30d / 4
    while an offer is active, each count capped at ``fatigue_cap`` (2,); ``offer`` (S, A, promo_days)
    the offer's log-odds by segment, catalog action and days since the push; ``shock_sd`` (1,)
    day-level demand shock. ``offer_channel`` (1,): 1 when the offer is a second purchase channel
    (``offer_form='noisy_or'``): then ``base[:, 1]`` is that channel's own table (with the day's terms,
    the fatigue and the ``offer`` table added) and P = 1 - (1 - P_customer)(1 - P_offer); 0 (the
    default, and what simulators saved before it existed load as) adds the offer to the log-odds.

    Orders: ``spend_mu`` (S,), ``spend_discount`` (1,), ``spend_sigma`` (1,) lognormal list value;
    ``category_cdf`` (S, K); ``cost_ratio`` (K,) cost of goods / list value; ``return_recovery`` (K,)
    share of the cost recovered when an item comes back.

    Fulfilment: ``stockout_edges`` (B-1,) stock-cover bucket edges, ``stockout_prob`` (B,);
    ``late_prob`` (1,) carrier delay; ``delay_cdf`` (2, H) delivery delay in days when on time / late;
    ``complaint_prob`` (2,) on time / late; ``return_coef`` (3 + S,) log-odds of a return: intercept,
    discount, late, segment; ``return_lag_cdf`` (L,) days from delivery to return.

    Lifecycle: ``unsub_prob`` (8,) by pushes in the last 7 days (including this one);
    ``active_coef`` (3,) share of customers who bought 1-30/31-60/61-90 days ago counted active;
    ``push_cost`` (1,); ``maturity_days`` (1,); ``promo_days`` (1,).

    Market and start: ``exo`` (D, 2K) daily stock cover and competitor index; ``block_days`` (1,);
    ``history`` (7, len(DAY_KEYS)) the last logged week per customer; ``pending_rate``
    (len(PENDING_KEYS),) per customer per day; ``start_weekday`` (1,); ``init_*`` (C,) the logged
    customers' state after the log (segment, since, orders, age, push bits, offer action and age,
    subscribed).
    """

    base: np.ndarray
    age_coef: np.ndarray
    age_cap: np.ndarray
    weekday_coef: np.ndarray
    competitor_coef: np.ndarray
    cover_coef: np.ndarray
    fatigue_coef: np.ndarray
    fatigue_cap: np.ndarray
    offer: np.ndarray
    shock_sd: np.ndarray
    spend_mu: np.ndarray
    spend_discount: np.ndarray
    spend_sigma: np.ndarray
    category_cdf: np.ndarray
    cost_ratio: np.ndarray
    return_recovery: np.ndarray
    stockout_edges: np.ndarray
    stockout_prob: np.ndarray
    late_prob: np.ndarray
    delay_cdf: np.ndarray
    complaint_prob: np.ndarray
    return_coef: np.ndarray
    return_lag_cdf: np.ndarray
    unsub_prob: np.ndarray
    active_coef: np.ndarray
    push_cost: np.ndarray
    maturity_days: np.ndarray
    promo_days: np.ndarray
    exo: np.ndarray
    block_days: np.ndarray
    history: np.ndarray
    pending_rate: np.ndarray
    start_weekday: np.ndarray
    init_segment: np.ndarray
    init_since: np.ndarray
    init_orders: np.ndarray
    init_age: np.ndarray
    init_push_bits: np.ndarray
    init_offer_action: np.ndarray
    init_offer_age: np.ndarray
    init_subscribed: np.ndarray
    offer_channel: np.ndarray = field(default_factory=lambda: np.array(0))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every field as an array (for ``np.savez``)."""
        return {f.name: np.asarray(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: Any) -> SimParams:
        """Rebuild from :meth:`to_arrays` output (or an ``np.load`` of it); missing keys are an error
        (except ``offer_channel``, which simulators saved before it existed lack)."""
        missing = [f.name for f in fields(cls) if f.name not in arrays and f.name != "offer_channel"]
        if missing:
            raise ValueError(f"simulator parameters lack {missing}: refit with `transferlab sim fit`")
        return cls(**{f.name: np.asarray(arrays[f.name]) for f in fields(cls) if f.name in arrays})

    @property
    def n_promo_days(self) -> int:
        return int(self.promo_days)

    @classmethod
    def toy(cls, n_customers: int = 20, n_days: int = 30) -> SimParams:
        """A small hand-made parameter set (for doctests and shape tests; not fitted)."""
        rng = np.random.default_rng(0)
        promo = 3
        discount = np.array([a.discount for a in CATALOG])
        offer = np.zeros((S, A, promo), dtype=np.float32)
        offer[:, 1:, :] = (0.5 + 4 * discount[None, 1:, None]) * 0.7 ** np.arange(promo)
        exo = np.column_stack([rng.uniform(0, 20, (n_days, K)), rng.uniform(0.8, 1.1, (n_days, K))])
        delay = np.cumsum(np.array([[0, 0, 0.5, 0.3, 0.2, 0, 0, 0], [0, 0, 0, 0, 0, 0.5, 0.3, 0.2]]), axis=1)
        return cls(
            base=np.full((S, 2, R, F), -4.0, dtype=np.float32),
            age_coef=np.zeros(F, dtype=np.float32),
            age_cap=np.array(n_days + 1),
            weekday_coef=np.zeros(7, dtype=np.float32),
            competitor_coef=np.zeros(S, dtype=np.float32),
            cover_coef=np.zeros(1),
            fatigue_coef=np.zeros(2),
            fatigue_cap=np.array([7, 30]),
            offer=offer,
            shock_sd=np.array(0.1),
            spend_mu=np.full(S, 3.2),
            spend_discount=np.array(0.0),
            spend_sigma=np.array(0.8),
            category_cdf=np.tile(np.cumsum(np.full(K, 1 / K)), (S, 1)),
            cost_ratio=np.full(K, 0.5),
            return_recovery=np.full(K, 0.9),
            stockout_edges=np.array([0.0, 1.0]),
            stockout_prob=np.array([0.9, 0.2, 0.0]),
            late_prob=np.array(0.03),
            delay_cdf=delay,
            complaint_prob=np.array([0.0, 0.35]),
            return_coef=np.array([-2.7, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
            return_lag_cdf=np.clip((np.arange(22) - 6) / 15, 0.0, 1.0),
            unsub_prob=np.array([0.0, 0.0, 0.0, 0.02, 0.04, 0.06, 0.08, 0.1]),
            active_coef=np.array([0.9, 0.8, 0.7]),
            push_cost=np.array(0.02),
            maturity_days=np.array(30),
            promo_days=np.array(promo),
            exo=exo,
            block_days=np.array(7),
            history=np.zeros((7, len(DAY_KEYS))),
            pending_rate=np.zeros(len(PENDING_KEYS)),
            start_weekday=np.array(0),
            init_segment=rng.integers(0, S, n_customers),
            init_since=np.full(n_customers, NEVER),
            init_orders=np.zeros(n_customers, dtype=np.int64),
            init_age=np.full(n_customers, n_days + 1),
            init_push_bits=np.zeros(n_customers, dtype=np.uint32),
            init_offer_action=np.zeros(n_customers, dtype=np.int64),
            init_offer_age=np.zeros(n_customers, dtype=np.int64),
            init_subscribed=np.ones(n_customers, dtype=bool),
        )


def noisy_or_logit(l0: np.ndarray, lq: np.ndarray, on: np.ndarray | bool = True) -> np.ndarray:
    """Log-odds of ``1 - (1 - sigmoid(l0)) (1 - sigmoid(lq))`` where ``on``, else ``l0``."""
    a = -np.logaddexp(0.0, l0) - np.where(on, np.logaddexp(0.0, lq), 0.0)  # log(1 - p)
    return np.log(-np.expm1(np.minimum(a, -1e-12))) - a


def sample_cdf(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws: the first index whose cumulative probability exceeds ``u`` (rows: per draw)."""
    if cdf.ndim == 1:
        return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)
    return np.minimum((u[:, None] >= cdf).sum(axis=1), cdf.shape[1] - 1)


def pending_survival(params: SimParams) -> np.ndarray:
    """(H, len(PENDING_KEYS)): chance an order's delayed event is still to come ``j + 1`` days later.

    Used to seed the ring buffers at reset with what the logged shop's recent orders have pending.
    """
    delay_pmf = np.diff(np.concatenate([[0.0], params.delay_cdf.mean(axis=0)]))
    lag_pmf = np.diff(np.concatenate([[0.0], params.return_lag_cdf]))
    total_pmf = np.convolve(delay_pmf, lag_pmf)
    horizon = len(total_pmf) + 1
    surv = np.zeros((horizon, len(PENDING_KEYS)))
    for pmf, keys in ((total_pmf, ("returns", "refunds", "return_loss")), (delay_pmf, PENDING_KEYS[3:])):
        tail = 1.0 - np.cumsum(pmf)  # tail[j] = P(lag > j)
        for key in keys:
            surv[: len(tail), PEND[key]] = np.clip(tail, 0.0, 1.0)
    return surv


@dataclass
class CampaignOutcomes:
    """Campaigns launched since reset and their attributable outcome vectors so far.

    Attributes:
        env: (G,) market index; day: (G,) launch day; action_index: (G,) catalog index;
        reached: (G,) customers pushed; matured: (G,) whether ``maturity_days`` have passed;
        outcomes: (G, len(OUTCOME_KEYS)) like ``world.CampaignRecord.outcome``: the targeted
            customers' orders while the offer was active, their gmv (net of refunds), profit,
            discount and push cost, and those orders' returns, refunds, complaints and late deliveries
            up to ``maturity_days`` after launch; satisfaction from those counts; retention_h the
            share of targeted customers who bought within h days (NaN until known).
    """

    env: np.ndarray
    day: np.ndarray
    action_index: np.ndarray
    reached: np.ndarray
    matured: np.ndarray
    outcomes: np.ndarray

    def frame(self) -> pd.DataFrame:
        """One row per campaign (``env``, ``day``, ``action_index``, ``reached``, ``matured``, outcomes)."""
        df = pd.DataFrame(self.outcomes, columns=list(OUTCOME_KEYS))
        for name in ("matured", "reached", "action_index", "day", "env"):
            df.insert(0, name, getattr(self, name))
        return df


class _CampaignBook:
    """Growing arrays of the campaigns launched in a :class:`SimMarket`, and their delayed bookings."""

    def __init__(self, track_targets: bool) -> None:
        self.track_targets = track_targets
        self.env: list[np.ndarray] = []
        self.day: list[np.ndarray] = []
        self.action: list[np.ndarray] = []
        self.reached: list[np.ndarray] = []
        self.totals = np.zeros((0, len(OUTCOME_KEYS)))
        self.targets: list[np.ndarray] = []
        self.purchases: list[np.ndarray] = []  # flat customer indices of each day's buyers
        self.launch_day = np.zeros(0, dtype=np.int64)
        # delayed bookings not yet due: day, campaign id, outcome column, value
        self.due = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))

    @property
    def n(self) -> int:
        return len(self.totals)

    def open(self, env: np.ndarray, day: int, action: np.ndarray, reached: np.ndarray) -> np.ndarray:
        """Register campaigns launched today; returns their ids."""
        ids = np.arange(self.n, self.n + len(env))
        self.env.append(env)
        self.day.append(np.full(len(env), day))
        self.action.append(action)
        self.reached.append(reached)
        self.totals = np.concatenate([self.totals, np.zeros((len(env), len(OUTCOME_KEYS)))])
        self.launch_day = np.concatenate([self.launch_day, np.full(len(env), day)])
        return ids

    def book(self, ids: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
        """Add ``values`` (n, len(cols)) to outcome columns ``cols`` of campaigns ``ids`` (< 0: skipped)."""
        ok = ids >= 0
        if ok.any():
            np.add.at(self.totals, (ids[ok, None], cols[None, :]), values[ok])

    def schedule(
        self, ids: np.ndarray, due: np.ndarray, cols: np.ndarray, values: np.ndarray, maturity: int
    ) -> None:
        """Book ``values`` on day ``due`` unless the campaign has matured by then (or the value is 0)."""
        ok = (values != 0) & (due <= self.launch_day[ids] + maturity)
        parts = (due[ok], ids[ok], cols[ok], values[ok])
        self.due = tuple(np.concatenate([old, new]) for old, new in zip(self.due, parts, strict=True))  # type: ignore[assignment]

    def settle(self, day: int) -> None:
        """Book what falls due on ``day``."""
        due_day, ids, cols, values = self.due
        now = due_day == day
        if now.any():
            np.add.at(self.totals, (ids[now], cols[now]), values[now])
            self.due = (due_day[~now], ids[~now], cols[~now], values[~now])

    def outcomes(self, today: int, maturity: int, n_customers: int) -> CampaignOutcomes:
        """The accumulated outcome vectors (``today``: the first day not yet simulated)."""
        day = _concat(self.day)
        totals = self.totals.copy()
        for g in range(self.n):
            o = totals[g]
            o[OUT["satisfaction"]] = campaign_satisfaction(
                o[OUT["orders"]], o[OUT["complaints"]], o[OUT["returns"]], o[OUT["late_deliveries"]]
            )
            for h in RETENTION_HORIZONS:
                o[OUT[f"retention_{h}"]] = self._retention(g, int(day[g]), h, today)
        return CampaignOutcomes(
            env=_concat(self.env),
            day=day,
            action_index=_concat(self.action),
            reached=_concat(self.reached),
            matured=today > day + maturity,
            outcomes=totals,
        )

    def _retention(self, g: int, day: int, horizon: int, today: int) -> float:
        if not self.track_targets or today <= day + horizon:
            return float("nan")
        targets = self.targets[g]
        if len(targets) == 0:
            return 0.0
        window = self.purchases[day : day + horizon + 1]
        bought = np.concatenate(window) if window else np.zeros(0, dtype=np.int64)
        return float(np.isin(targets, bought).mean())


def _flat(a: np.ndarray) -> np.ndarray:
    """A flat view of a C-contiguous array (fancy indexing on it is much faster than ``a.flat``)."""
    return a.reshape(-1)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


class SimMarket:
    """``n_envs`` independent simulated markets of ``n_customers`` customers each.

    API: ``reset(seed) -> obs (n_envs, len(OBS_KEYS))``; ``step(action_indices (n_envs,) ints into
    CATALOG) -> (n_envs, len(DAY_KEYS))`` that day's shop-wide outcomes; ``observe()``; ``day``
    (days simulated since reset); ``campaign_outcomes()``. Every draw comes from one seeded numpy
    Generator: the same seed and actions give the same result.

    Args:
        params: the compiled parameters (``LearnedSimulator.params``).
        n_envs: markets simulated side by side.
        n_customers: customers per market, bootstrapped from the logged customers' final state.
        seed: seed of the first :meth:`reset` (called here).
        track_campaigns: keep each campaign's targeted customers and each day's buyers so that
            :meth:`campaign_outcomes` can report retention (costs memory; off for benchmarks).
    """

    def __init__(
        self,
        params: SimParams,
        n_envs: int = 1,
        n_customers: int = 1000,
        seed: int = 0,
        track_campaigns: bool = True,
    ) -> None:
        if n_envs < 1 or n_customers < 1:
            raise ValueError(f"n_envs={n_envs} and n_customers={n_customers} must be >= 1")
        self.params = params
        self.n_envs, self.n_customers = n_envs, n_customers
        self.track_campaigns = track_campaigns
        self._compile()
        self.reset(seed)

    # ------------------------------------------------------------------ setup

    def _compile(self) -> None:
        """Flatten the tables and precompute per-action constants (float32)."""
        p = self.params
        self.promo_days = p.n_promo_days
        fat = p.fatigue_coef.astype(np.float64)
        cap7, cap30 = (int(c) for c in p.fatigue_cap)
        week, month = np.minimum(np.arange(8), cap7)[:, None], np.minimum(np.arange(31), cap30)[None, :]
        self._fatigue = (fat[0] * week + fat[1] / 4 * month).astype(np.float32).ravel()  # [week * 31 + month]
        self._offer = p.offer.astype(np.float32).ravel()
        self._discount = np.array([a.discount for a in CATALOG])
        self._target = np.array([TARGETS.index(a.segment) - 1 for a in CATALOG])  # -1: all
        self._cap = np.array([a.reach_cap(float(p.push_cost)) if not a.is_noop else 0 for a in CATALOG])
        self._maturity = int(p.maturity_days)
        cover, log_comp = p.exo[:, :K], np.log(np.clip(p.exo[:, K:], 1e-3, None)).mean(axis=1)
        cover_term = float(p.cover_coef.ravel()[0]) * np.log1p(np.clip(cover, 0.0, None).mean(axis=1))
        self._exo_term = cover_term[:, None] + log_comp[:, None] * p.competitor_coef[None, :]  # (D, S)
        self._stockout_p = p.stockout_prob[np.searchsorted(p.stockout_edges, cover, side="left")]  # (D, K)
        self._order_cols = np.array(
            [DAY[k] for k in ("orders", "gmv", "profit", "discount_cost", "stockouts")]
        )
        self._pending_cols = np.array(
            [PEND[k] for k in ("late_deliveries", "complaints", "returns", "refunds", "return_loss")]
        )
        self._campaign_cols = np.array([OUT[k] for k in ("orders", "gmv", "profit", "discount_cost")])
        self._campaign_later_cols = np.array(
            [OUT[k] for k in ("late_deliveries", "complaints", "returns", "refunds", "profit", "gmv")]
        )
        self._push_cols = np.array([OUT["push_cost"], OUT["profit"]])
        self._campaign_sign = np.array([1.0, 1.0, 1.0, 1.0, -1.0])  # a return takes its loss off the profit
        self._survival = pending_survival(p)
        self._ring = len(self._survival) + 2
        # counted active, by recency bucket (buckets 0-4: 1-30 days, 5: 31-60, 6: 61-90; see features)
        self._active_lut = np.zeros(R, dtype=np.float64)
        self._active_lut[:5], self._active_lut[5], self._active_lut[6] = p.active_coef

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start fresh markets from customers bootstrapped from the logs; returns the observation."""
        p, n_env, n = self.params, self.n_envs, self.n_customers
        self.rng = np.random.default_rng(seed)
        pick = self.rng.integers(0, len(p.init_segment), (n_env, n))
        self.seg = p.init_segment[pick].astype(np.int32)
        self._seg_offer = self.seg * np.int32(A * self.promo_days)
        self.last = np.where(p.init_since[pick] >= NEVER, -NEVER, -p.init_since[pick]).astype(np.int32)
        self.orders = p.init_orders[pick].astype(np.int32)
        env_seg = self.seg + np.arange(n_env, dtype=np.int32)[:, None] * np.int32(S)
        self._base_index = env_seg * np.int32(2 * R * F) + self._frequency_bucket(self.orders)
        self.age0 = p.init_age[pick].astype(np.float64)
        self._uniform_age = bool((self.age0 == self.age0[:, :1]).all()) and not int(p.offer_channel)
        self.push_bits = p.init_push_bits[pick].astype(np.uint32)
        offer_on = p.init_offer_action[pick] > 0
        self.offer_action = np.where(offer_on, p.init_offer_action[pick], 0).astype(np.int32)
        self.offer_age = np.where(offer_on, p.init_offer_age[pick], 0).astype(np.int32)
        self.offer_campaign = np.full((n_env, n), -1, dtype=np.int64)
        self.subscribed = p.init_subscribed[pick].astype(bool)
        self.day = 0
        self.weekday0 = int(p.start_weekday)
        self._ptr = self.rng.integers(0, len(p.exo), n_env)
        self._block_left = self.rng.integers(1, int(p.block_days) + 1, n_env)
        self._history = np.tile(p.history * n, (n_env, 1, 1))
        self._pending = self._seed_pending()
        self.book = _CampaignBook(self.track_campaigns)
        return self.observe()

    def _seed_pending(self) -> np.ndarray:
        """Ring buffers (n_envs, H, len(PENDING_KEYS)) holding what the logged shop's recent orders owe."""
        p, n = self.params, self.n_customers
        pending = np.zeros((self.n_envs, self._ring, len(PENDING_KEYS)))
        mean = p.pending_rate * n * self._survival  # (H, keys) expected events still to come
        counts = self.rng.poisson(
            mean[None, :, [PEND["returns"], PEND["late_deliveries"]]].repeat(self.n_envs, 0)
        )
        rates = p.pending_rate
        per_return = np.divide(
            rates[[PEND["refunds"], PEND["return_loss"]]], max(rates[PEND["returns"]], 1e-12)
        )
        h = len(mean)
        pending[:, :h, PEND["returns"]] = counts[..., 0]
        pending[:, :h, PEND["refunds"]] = counts[..., 0] * per_return[0]
        pending[:, :h, PEND["return_loss"]] = counts[..., 0] * per_return[1]
        pending[:, :h, PEND["late_deliveries"]] = counts[..., 1]
        share = rates[PEND["complaints"]] / max(rates[PEND["late_deliveries"]], 1e-12)
        pending[:, :h, PEND["complaints"]] = self.rng.binomial(counts[..., 1], min(share, 1.0))
        return pending

    # ------------------------------------------------------------------ observation

    def _exo_today(self) -> np.ndarray:
        """(n_envs, 2K) today's stock cover and competitor indexes."""
        return self.params.exo[self._ptr]

    def observe(self) -> np.ndarray:
        """(n_envs, len(OBS_KEYS)) the state a marketer sees before deciding today (like ``MarketWorld``)."""
        week = self._history.sum(axis=1)
        obs = np.empty((self.n_envs, len(OBS_KEYS)))
        obs[:, 0] = (self.weekday0 + self.day) % 7
        for j, key in enumerate(("orders", "gmv", "profit", "complaints", "returns", "pushes"), start=1):
            obs[:, j] = week[:, DAY[key]]
        obs[:, 7] = ((self.day - self.last) <= 89).mean(axis=1)
        obs[:, 8] = self.subscribed.mean(axis=1)
        exo = self._exo_today()
        obs[:, 9 : 9 + K] = exo[:, :K]
        obs[:, 9 + K :] = exo[:, K:]
        return obs

    # ------------------------------------------------------------------ one day

    def step(self, action_indices: np.ndarray) -> np.ndarray:
        """Run every market one day with its catalog action; returns (n_envs, len(DAY_KEYS))."""
        actions = np.asarray(action_indices)
        if actions.shape != (self.n_envs,) or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"actions must be {self.n_envs} integer catalog indices, got {actions!r}")
        if actions.min() < 0 or actions.max() >= A:
            raise ValueError(f"action indices must be in [0, {A}), got {actions.tolist()}")
        out = np.zeros((self.n_envs, len(DAY_KEYS)))
        self.push_bits = (self.push_bits << np.uint32(1)) & PUSH_BITS
        if (actions > 0).any():
            self._push(actions, out)
        buyers = self._buyers()
        self._orders(buyers, out)
        self._settle(out)
        self._end_of_day(buyers, out)
        return out

    def _push(self, actions: np.ndarray, out: np.ndarray) -> None:
        """Send today's pushes: subscribed customers of the target segment, up to the budget's reach."""
        pushed = self._reach(actions)
        env = pushed // self.n_customers
        reached = np.bincount(env, minlength=self.n_envs)
        launched = np.flatnonzero(actions > 0)
        ids = np.full(self.n_envs, -1, dtype=np.int64)
        ids[launched] = self.book.open(launched, self.day, actions[launched], reached[launched])
        cost = reached * float(self.params.push_cost)
        self.book.book(ids, self._push_cols, np.column_stack([cost, -cost]))
        if self.track_campaigns:
            bounds = np.searchsorted(env, launched, side="left"), np.searchsorted(env, launched, side="right")
            self.book.targets.extend(pushed[lo:hi] for lo, hi in zip(*bounds, strict=True))
        flat = _flat
        flat(self.offer_action)[pushed] = actions[env]
        flat(self.offer_age)[pushed] = 0
        flat(self.offer_campaign)[pushed] = ids[env]
        bits = flat(self.push_bits)[pushed] | np.uint32(1)
        flat(self.push_bits)[pushed] = bits
        recent = np.bitwise_count(bits & WEEK_BITS)
        unsub = self.rng.random(len(pushed)) < self.params.unsub_prob[np.minimum(recent, 7)]
        flat(self.subscribed)[pushed[unsub]] = False
        out[:, DAY["pushes"]] = reached
        out[:, DAY["push_cost"]] = cost
        out[:, DAY["profit"]] -= cost

    def _reach(self, actions: np.ndarray) -> np.ndarray:
        """Flat indices of the customers each market's campaign reaches (sorted)."""
        target = self._target[actions][:, None]
        eligible = self.subscribed & (actions[:, None] > 0) & ((target < 0) | (self.seg == target))
        count = eligible.sum(axis=1)
        cap = self._cap[actions]
        for e in np.flatnonzero(count > cap):
            keys = np.where(eligible[e], self.rng.random(self.n_customers), 2.0)
            eligible[e] = keys <= np.partition(keys, cap[e] - 1)[cap[e] - 1] if cap[e] > 0 else False
        return np.flatnonzero(eligible)

    @staticmethod
    def _frequency_bucket(orders: np.ndarray) -> np.ndarray:
        return FREQUENCY_LUT.take(np.minimum(orders, len(FREQUENCY_LUT) - 1))

    def purchase_logit(self) -> np.ndarray:
        """(n_envs, n_customers) today's purchase log-odds of every customer (float32).

        Also leaves today's recency buckets in ``self._recency`` (for the active-customer count).
        """
        since = self.day - self.last
        np.minimum(since, len(RECENCY_LUT) - 1, out=since)
        self._recency = RECENCY_LUT.take(since)
        on = self.offer_action > 0
        index = self._recency * np.int32(F) + self._base_index
        if int(self.params.offer_channel):
            return self._two_channel_logit(index, on)
        index += on * np.int32(R * F)
        logit = self._day_table().take(index)
        if not self._uniform_age:
            fb = self._frequency_bucket(self.orders)
            logit += (self.params.age_coef[fb] * self._log_age(self.age0)).astype(np.float32)
        fatigue, offer = self._offer_terms(slice(None))
        logit += fatigue * on
        logit += offer
        return logit

    def _offer_terms(self, mask: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """Push fatigue and the offer table's log-odds of the customers in ``mask`` (the offer table
        is zero without an offer; the fatigue term counts only while one is active)."""
        bits = self.push_bits[mask]
        week, month = np.bitwise_count(bits & WEEK_BITS), np.bitwise_count(bits)
        offer = self._seg_offer[mask] + self.offer_action[mask] * np.int32(self.promo_days)
        offer += self.offer_age[mask]
        return self._fatigue.take(week * np.uint8(31) + month), self._offer.take(offer)

    def _two_channel_logit(self, index: np.ndarray, on: np.ndarray) -> np.ndarray:
        """Log-odds of buying through the customer's own channel or the offer's (offer_channel=1)."""
        table = self._day_table()
        logit = table.take(index)
        fb = self._frequency_bucket(self.orders)
        logit += (self.params.age_coef[fb] * self._log_age(self.age0)).astype(np.float32)
        if not on.any():
            return logit
        fatigue, offer = self._offer_terms(on)
        lq = table.take(index[on] + np.int32(R * F))
        lq += fatigue
        lq += offer
        logit[on] = noisy_or_logit(logit[on].astype(np.float64), lq.astype(np.float64)).astype(np.float32)
        return logit

    def _day_table(self) -> np.ndarray:
        """(n_envs * S * 2 * R * F,) today's log-odds table per market: the base table plus weekday,
        competitor prices, stock cover, the demand shock and (when every customer of a market has
        the same age) the age term."""
        p = self.params
        sd = float(p.shock_sd)
        shock = self.rng.normal(-(sd**2) / 2, sd, self.n_envs) if sd > 0 else np.zeros(self.n_envs)
        day_term = p.weekday_coef[(self.weekday0 + self.day) % 7] + shock
        env_seg = self._exo_term[self._ptr] + day_term[:, None]  # (E, S)
        table = p.base[None] + env_seg[:, :, None, None, None]
        if self._uniform_age:
            log_age = self._log_age(self.age0[:, 0])
            table = table + (log_age[:, None] * p.age_coef[None, :])[:, None, None, None, :]
        return table.astype(np.float32).ravel()

    def _log_age(self, age0: np.ndarray) -> np.ndarray:
        """The age feature today, the age capped at the oldest age the logs saw."""
        return np.log(np.minimum(age0 + self.day, float(self.params.age_cap)) + AGE_OFFSET)

    def _buyers(self) -> np.ndarray:
        """Flat indices of today's buyers."""
        logit = self.purchase_logit()
        u = self.rng.random(logit.shape, dtype=np.float32)
        np.negative(logit, out=logit)
        np.exp(logit, out=logit)
        logit += np.float32(1.0)
        logit *= u
        return np.flatnonzero(logit < np.float32(1.0))

    def _orders(self, idx: np.ndarray, out: np.ndarray) -> None:
        """Draw each order's category, value, discount and fulfilment; book the day and the campaigns."""
        p, rng, n = self.params, self.rng, len(idx)
        if n == 0:
            return
        env, seg = idx // self.n_customers, _flat(self.seg)[idx]
        action = _flat(self.offer_action)[idx]
        discount = self._discount[action]
        u = rng.random((7, n))
        cat = sample_cdf(p.category_cdf[seg], u[0])
        list_value = np.exp(
            p.spend_mu[seg] + p.spend_discount * discount + p.spend_sigma * rng.standard_normal(n)
        )
        paid = list_value * (1.0 - discount)
        cogs = list_value * p.cost_ratio[cat]
        stockout = u[1] < self._stockout_p[self._ptr[env], cat]
        late = stockout | (u[2] < p.late_prob)
        delay = np.where(late, sample_cdf(p.delay_cdf[1], u[3]), sample_cdf(p.delay_cdf[0], u[3]))
        complaint = u[4] < p.complaint_prob[late.astype(np.int64)]
        z = p.return_coef[0] + p.return_coef[1] * discount + p.return_coef[2] * late + p.return_coef[3 + seg]
        returned = (u[5] < 1.0 / (1.0 + np.exp(-z))) * 1.0
        lag = delay + sample_cdf(p.return_lag_cdf, u[6])
        loss = paid - p.return_recovery[cat] * cogs
        now = np.stack([np.ones(n), paid, paid - cogs, list_value - paid, stockout * 1.0], axis=1)
        np.add.at(out, (env[:, None], self._order_cols[None, :]), now)
        # delayed: late deliveries, complaints (on delivery); returns, refunds, lost profit (on return)
        later = np.stack([late * 1.0, complaint * 1.0, returned, paid * returned, loss * returned])
        slot = (self.day + np.stack([delay, delay, lag, lag, lag])) % self._ring
        np.add.at(self._pending, (env[None, :], slot, self._pending_cols[:, None]), later)
        campaign = np.where(action > 0, _flat(self.offer_campaign)[idx], -1)
        mine = campaign >= 0
        if mine.any():
            c = campaign[mine]
            self.book.book(c, self._campaign_cols, now[mine, :4])
            values = later[:, mine] * self._campaign_sign[:, None]
            due = np.stack([delay, delay, lag, lag, lag])[:, mine] + self.day
            values = np.concatenate([values, -paid[mine][None, :] * returned[mine]])  # gmv net of refunds
            due = np.concatenate([due, due[-1:]])
            cols = np.broadcast_to(self._campaign_later_cols[:, None], values.shape)
            self.book.schedule(
                np.broadcast_to(c, values.shape).ravel(),
                due.ravel(),
                cols.ravel(),
                values.ravel(),
                self._maturity,
            )

    def _settle(self, out: np.ndarray) -> None:
        """Credit today's due returns, refunds, complaints and late deliveries; clear their slot."""
        slot = self.day % self._ring
        due = self._pending[:, slot, :]
        for key in ("returns", "refunds", "complaints", "late_deliveries"):
            out[:, DAY[key]] += due[:, PEND[key]]
        out[:, DAY["profit"]] -= due[:, PEND["return_loss"]]
        due[:] = 0.0
        self.book.settle(self.day)

    def _end_of_day(self, buyers: np.ndarray, out: np.ndarray) -> None:
        """Record the buyers, age the offers, count active customers, advance the calendar."""
        p = self.params
        _flat(self.last)[buyers] = self.day
        orders = _flat(self.orders)
        before = self._frequency_bucket(orders[buyers])
        orders[buyers] += 1
        _flat(self._base_index)[buyers] += self._frequency_bucket(orders[buyers]) - before
        if self.track_campaigns:
            self.book.purchases.append(buyers)
        self.offer_age += self.offer_action > 0
        expired = np.flatnonzero(self.offer_age >= self.promo_days)
        _flat(self.offer_action)[expired] = 0
        _flat(self.offer_age)[expired] = 0
        active = self._active_lut.take(self._recency).sum(axis=1)
        lut, env = self._active_lut, buyers // self.n_customers
        active += np.bincount(env, lut[0] - lut[_flat(self._recency)[buyers]], minlength=self.n_envs)
        out[:, DAY["active_customers"]] = np.rint(active)
        self._history[:, self.day % 7, :] = out
        self.day += 1
        self._block_left -= 1
        self._ptr += 1
        jump = (self._block_left <= 0) | (self._ptr >= len(p.exo))
        if jump.any():
            self._ptr[jump] = self.rng.integers(0, len(p.exo), int(jump.sum()))
            self._block_left[jump] = int(p.block_days)

    # ------------------------------------------------------------------ campaigns

    def campaign_outcomes(self) -> CampaignOutcomes:
        """Outcome vectors (OUTCOME_KEYS) of the campaigns launched since reset, accumulated so far."""
        return self.book.outcomes(self.day, self._maturity, self.n_customers)


__all__ = ["PENDING_KEYS", "CampaignOutcomes", "SimMarket", "SimParams", "sample_cdf"]

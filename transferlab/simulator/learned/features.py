"""The customer-day panel: what the shop could know about each customer on each day, from the logs.

Only the four log tables are read (``campaigns``, ``events``, ``customers``, ``daily``); never the
manifest's world config. For customer ``c`` on day ``d`` the state is built from events *before*
the day's purchase draw (pushes go out during the day, purchases close it):

* ``segment``: the CRM label; ``age``: days since sign-up (the log start: the customers table has
  every customer from day 0);
* ``since``: days since the last purchase before ``d`` (:data:`NEVER` when none) and ``orders``: how
  many purchases before ``d``;
* the active offer: the most recent push on or before ``d`` within ``promo_days`` (its campaign's
  discount, push hour, catalog index, and ``offer_age`` = days since that push, -1 when none);
* ``pushes_7d`` / ``pushes_30d``: pushes received in ``[d-6, d]`` / ``[d-29, d]`` (fatigue proxy);
* the day: weekday, mean log competitor price index and mean stock cover (daily log);
* the label: did ``c`` buy on ``d``.

The same encodings (:func:`recency_bucket`, :func:`frequency_bucket`, :class:`DesignLayout`) are
used by the fitted model's design matrix and by the compiled simulator, so they cannot drift apart.

>>> recency_bucket(np.array([1, 3, 10, 400])).tolist(), frequency_bucket(np.array([0, 1, 5, 40])).tolist()
([0, 1, 3, 8], [0, 1, 4, 6])
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
from scipy import sparse

from transferlab.simulator.logs import LogError, Logs
from transferlab.simulator.vocabulary import (
    CATALOG,
    CATEGORIES,
    DAY_KEYS,
    SEGMENTS,
    CampaignAction,
    catalog_index,
)

S, K = len(SEGMENTS), len(CATEGORIES)
NEVER = 1_000_000
"""``since`` of a customer who never bought (and ``-NEVER`` is their last purchase day)."""
RECENCY_EDGES = (1, 2, 4, 8, 15, 31, 61, 91, 181)
"""Lower edges of the recency buckets (days since the last purchase); never-buyers fall in the last."""
FREQUENCY_EDGES = (0, 1, 2, 3, 4, 6, 10)
"""Lower edges of the frequency buckets (orders so far)."""
R, F = len(RECENCY_EDGES), len(FREQUENCY_EDGES)
AGE_OFFSET = 30.0
"""The age feature is ``log(age + AGE_OFFSET)``."""
EXO_COLUMNS = (*(f"stock_days_{c}" for c in CATEGORIES), *(f"competitor_{c}" for c in CATEGORIES))
"""The observed market of each day (daily log), bootstrapped as an exogenous process by the simulator."""
EXTRA_COLUMNS: dict[str, tuple[str, ...]] = {"daily": (*DAY_KEYS, *EXO_COLUMNS)}
"""Columns the learned simulator needs beyond ``logs.REQUIRED_COLUMNS``."""

_RECENCY_LUT = np.searchsorted(np.asarray(RECENCY_EDGES), np.arange(RECENCY_EDGES[-1] + 1), side="right") - 1
_FREQUENCY_LUT = (
    np.searchsorted(np.asarray(FREQUENCY_EDGES), np.arange(FREQUENCY_EDGES[-1] + 1), side="right") - 1
)
RECENCY_LUT = np.maximum(_RECENCY_LUT, 0).astype(np.int32)
"""Recency bucket of ``min(since, 181)`` (index by days since the last purchase)."""
FREQUENCY_LUT = _FREQUENCY_LUT.astype(np.int32)
"""Frequency bucket of ``min(orders, 10)``."""


def recency_bucket(since: np.ndarray) -> np.ndarray:
    """Bucket of days since the last purchase (never-buyers: the last bucket)."""
    return RECENCY_LUT[np.minimum(since, len(RECENCY_LUT) - 1)]


def frequency_bucket(orders: np.ndarray) -> np.ndarray:
    """Bucket of orders so far."""
    return FREQUENCY_LUT[np.minimum(orders, len(FREQUENCY_LUT) - 1)]


def hour_features(hour: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The push hour on the circle: ``(cos, sin)`` of ``2 pi hour / 24``."""
    angle = 2 * np.pi * np.asarray(hour, dtype=np.float64) / 24
    return np.cos(angle), np.sin(angle)


# --------------------------------------------------------------------------------------------------
# The logs as dense arrays
# --------------------------------------------------------------------------------------------------


@dataclass
class LogArrays:
    """The logs as dense customer x day arrays plus per-campaign and per-day lookups.

    Attributes:
        segment: (C,) segment index of each customer (row order of the customers table).
        bought: (C, D) whether the customer bought that day.
        push_campaign: (C, D) campaign id of the push received that day, -1 when none.
        camp_discount, camp_hour, camp_action: per campaign id: discount, push hour, catalog index
            (-1 when the action is not on the catalog).
        weekday: (D,) weekday of each day; log_competitor, cover: (D,) day features.
        daily: (D, len(DAY_KEYS)) the shop totals; exo: (D, 2K) stock cover and competitor indexes.
        purchases: the purchase events with a ``row`` column (customer row index).
        events: every event with the ``row`` column.
    """

    customer_ids: np.ndarray
    segment: np.ndarray
    bought: np.ndarray
    push_campaign: np.ndarray
    camp_discount: np.ndarray
    camp_hour: np.ndarray
    camp_action: np.ndarray
    weekday: np.ndarray
    log_competitor: np.ndarray
    cover: np.ndarray
    daily: np.ndarray
    exo: np.ndarray
    events: pd.DataFrame
    campaigns: pd.DataFrame

    @property
    def n_customers(self) -> int:
        return len(self.segment)

    @property
    def n_days(self) -> int:
        return self.bought.shape[1]

    @property
    def purchases(self) -> pd.DataFrame:
        return self.events[self.events["event"] == "purchase"]


def check_columns(logs: Logs) -> None:
    """Raise :class:`LogError` when a table lacks a column the learned simulator needs."""
    for table, needed in EXTRA_COLUMNS.items():
        missing = [c for c in needed if c not in getattr(logs, table).columns]
        if missing:
            raise LogError(
                f"{table} log is missing column(s) {missing} that the learned simulator needs; "
                "regenerate it with `transferlab sim generate-logs`"
            )
    if logs.daily.empty or logs.customers.empty:
        raise LogError("the logs hold no days or no customers: generate logs with at least 7 days")
    if not (logs.events["event"] == "purchase").any():
        raise LogError("the events log holds no purchases: nothing to fit a purchase model on")


def log_arrays(logs: Logs) -> LogArrays:
    """Turn the four log tables into dense arrays (validates the columns first)."""
    check_columns(logs)
    customers = logs.customers.reset_index(drop=True)
    unknown = sorted(set(customers["segment"]) - set(SEGMENTS))
    if unknown:
        raise LogError(f"customers log has unknown segment(s) {unknown}; use {', '.join(SEGMENTS)}")
    row_of = pd.Series(np.arange(len(customers)), index=customers["customer"].to_numpy())
    daily = logs.daily.sort_values("day").reset_index(drop=True)
    n_days = int(daily["day"].max()) + 1
    if len(daily) != n_days:
        raise LogError(f"daily log has {len(daily)} rows for days 0-{n_days - 1}: one row per day is needed")
    events = logs.events[logs.events["day"] < n_days].copy()
    rows = row_of.reindex(events["customer"].to_numpy()).to_numpy()
    if np.isnan(rows).any():
        raise LogError(
            f"events log mentions {int(np.isnan(rows).sum())} event(s) of customers missing "
            "from the customers log; regenerate the logs"
        )
    events["row"] = rows.astype(np.int64)
    segment = np.array([SEGMENTS.index(s) for s in customers["segment"]], dtype=np.int64)
    bought = np.zeros((len(customers), n_days), dtype=bool)
    buy = events[events["event"] == "purchase"]
    bought[buy["row"].to_numpy(), buy["day"].to_numpy()] = True
    push_campaign = np.full((len(customers), n_days), -1, dtype=np.int64)
    push = events[events["event"] == "push"]
    push_campaign[push["row"].to_numpy(), push["day"].to_numpy()] = push["campaign"].to_numpy()
    discount, hour, action = _campaign_lookup(logs.campaigns, events)
    exo = daily[list(EXO_COLUMNS)].to_numpy(dtype=np.float64)
    return LogArrays(
        customer_ids=customers["customer"].to_numpy(),
        segment=segment,
        bought=bought,
        push_campaign=push_campaign,
        camp_discount=discount,
        camp_hour=hour,
        camp_action=action,
        weekday=_weekdays(logs.campaigns, n_days),
        log_competitor=np.log(np.clip(exo[:, K:], 1e-3, None)).mean(axis=1),
        cover=cover_feature(exo[:, :K]),
        daily=daily[list(DAY_KEYS)].to_numpy(dtype=np.float64),
        exo=exo,
        events=events,
        campaigns=logs.campaigns,
    )


def cover_feature(stock_days: np.ndarray) -> np.ndarray:
    """The day's stock-cover feature: ``log1p`` of the mean cover (days) over categories, floored at 0."""
    return np.log1p(np.clip(np.asarray(stock_days, dtype=np.float64), 0.0, None).mean(axis=-1))


def _weekdays(campaigns: pd.DataFrame, n_days: int) -> np.ndarray:
    """Weekday of each day, anchored on the decision context's ``ctx_weekday`` (else day 0 is a Monday)."""
    first_weekday = 0
    if "ctx_weekday" in campaigns.columns and len(campaigns):
        first = campaigns.sort_values("day").iloc[0]
        first_weekday = int(first["ctx_weekday"]) - int(first["day"])
    return (first_weekday + np.arange(n_days)) % 7


def _campaign_lookup(campaigns: pd.DataFrame, events: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """Per campaign id: discount, push hour and catalog index (-1 when not on the catalog)."""
    launched = campaigns[campaigns["campaign_id"] >= 0]
    n = int(max(launched["campaign_id"].max() if len(launched) else -1, events["campaign"].max())) + 1
    discount, hour = np.zeros(max(n, 1)), np.full(max(n, 1), 20, dtype=np.int64)
    action = np.full(max(n, 1), -1, dtype=np.int64)
    ids = launched["campaign_id"].to_numpy()
    discount[ids] = launched["discount"].to_numpy(dtype=np.float64)
    hour[ids] = launched["push_hour"].to_numpy().astype(np.int64)
    for cid, row in zip(
        ids,
        launched[["discount", "push_hour", "segment", "budget", "category"]].itertuples(index=False),
        strict=True,
    ):
        action[cid] = _catalog_index_of(row)
    return discount, hour, action


def _catalog_index_of(row: tuple[object, ...]) -> int:
    """Catalog index of a logged action (discount, hour, segment, budget, category), -1 when off it."""
    discount, hour, segment, budget, category = row
    try:
        action = CampaignAction(
            float(discount),  # type: ignore[arg-type]
            int(hour),  # type: ignore[call-overload]
            str(segment),
            float(budget),  # type: ignore[arg-type]
            str(category),
        )
    except ValueError:
        return -1
    return catalog_index(action)


# --------------------------------------------------------------------------------------------------
# Customer-day states
# --------------------------------------------------------------------------------------------------


@dataclass
class Panel:
    """Customer-day rows: observable state, label and sampling weight (parallel 1-D arrays)."""

    row: np.ndarray  # customer row index in the customers table
    day: np.ndarray
    segment: np.ndarray
    since: np.ndarray
    orders: np.ndarray
    age: np.ndarray
    weekday: np.ndarray
    log_competitor: np.ndarray
    cover: np.ndarray
    pushes_7d: np.ndarray
    pushes_30d: np.ndarray
    offer_age: np.ndarray  # days since the active offer's push; -1: no active offer
    offer_discount: np.ndarray
    offer_hour: np.ndarray
    offer_action: np.ndarray  # catalog index of the offer's campaign (0: none, -1: off the catalog)
    label: np.ndarray
    weight: np.ndarray

    def __len__(self) -> int:
        return len(self.day)

    def take(self, index: np.ndarray) -> Panel:
        """The rows at ``index`` (boolean mask or integer positions)."""
        return Panel(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def concat(parts: list[Panel]) -> Panel:
        """Rows of all ``parts``, in order."""
        return Panel(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Panel)})

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (for inspection and tests)."""
        return pd.DataFrame({f.name: getattr(self, f.name) for f in fields(self)})


def _shifted(a: np.ndarray, lag: int, fill: int) -> np.ndarray:
    """``a`` moved ``lag`` columns right (column d holds column d - lag)."""
    out = np.full_like(a, fill)
    if lag < a.shape[1]:
        out[:, lag:] = a[:, : a.shape[1] - lag]
    return out


def customer_day_states(arr: LogArrays, promo_days: int, rows: np.ndarray) -> Panel:
    """The state of customers ``rows`` on every day 0..D (D: the day after the log, for the end state).

    Rows are ordered customer-major. Labels of day D are False (unknown).
    """
    n_days = arr.n_days
    days = np.arange(n_days + 1)
    pad = np.zeros((len(rows), 1), dtype=bool)
    bought = np.concatenate([arr.bought[rows], pad], axis=1)
    push_c = np.concatenate([arr.push_campaign[rows], np.full((len(rows), 1), -1)], axis=1)
    cum_b = np.cumsum(bought, axis=1)
    last_buy = np.maximum.accumulate(np.where(bought, days, -NEVER), axis=1)
    since = days - _shifted(last_buy, 1, -NEVER)
    pushed = push_c >= 0
    cum_p = np.cumsum(pushed, axis=1)
    last_push = np.maximum.accumulate(np.where(pushed, days, -NEVER), axis=1)
    offer_age = days - last_push
    active = (last_push >= 0) & (offer_age < promo_days)
    camp = np.where(active, np.take_along_axis(push_c, np.clip(last_push, 0, None), axis=1), -1)
    safe = np.maximum(camp, 0)
    shape = bought.shape
    return Panel(
        row=np.repeat(rows, n_days + 1),
        day=np.tile(days, len(rows)),
        segment=np.repeat(arr.segment[rows], n_days + 1),
        since=np.minimum(since, NEVER).ravel(),
        orders=(cum_b - bought).ravel(),
        age=np.broadcast_to(days + 1, shape).ravel(),
        weekday=np.broadcast_to(np.append(arr.weekday, (arr.weekday[-1] + 1) % 7), shape).ravel(),
        log_competitor=np.broadcast_to(np.append(arr.log_competitor, arr.log_competitor[-1]), shape).ravel(),
        cover=np.broadcast_to(np.append(arr.cover, arr.cover[-1]), shape).ravel(),
        pushes_7d=(cum_p - _shifted(cum_p, 7, 0)).ravel(),
        pushes_30d=(cum_p - _shifted(cum_p, 30, 0)).ravel(),
        offer_age=np.where(active, offer_age, -1).ravel(),
        offer_discount=np.where(active, arr.camp_discount[safe], 0.0).ravel(),
        offer_hour=np.where(active, arr.camp_hour[safe], 0).ravel(),
        offer_action=np.where(active, arr.camp_action[safe], 0).ravel(),
        label=bought.ravel(),
        weight=np.ones(bought.size),
    )


def iter_states(arr: LogArrays, promo_days: int, chunk: int) -> Iterator[Panel]:
    """Customer-day states (days 0..D-1) of every customer, ``chunk`` customers at a time."""
    for start in range(0, arr.n_customers, chunk):
        rows = np.arange(start, min(start + chunk, arr.n_customers))
        states = customer_day_states(arr, promo_days, rows)
        yield states.take(states.day < arr.n_days)


def build_panel(
    arr: LogArrays, promo_days: int, negative_rate: float, rng: np.random.Generator, chunk: int = 5000
) -> Panel:
    """The training panel: every purchase day, and a ``negative_rate`` sample of the other days.

    Sampled negatives carry weight ``1 / negative_rate`` so weighted fits stay calibrated.
    """
    parts = []
    for states in iter_states(arr, promo_days, chunk):
        keep = states.label | (rng.random(len(states)) < negative_rate)
        part = states.take(keep)
        part.weight = np.where(part.label, 1.0, 1.0 / negative_rate)
        parts.append(part)
    return Panel.concat(parts)


def end_states(arr: LogArrays, promo_days: int, chunk: int = 5000) -> Panel:
    """Every customer's state on day D, the day after the log ends (the simulator's starting point)."""
    parts = []
    for start in range(0, arr.n_customers, chunk):
        rows = np.arange(start, min(start + chunk, arr.n_customers))
        states = customer_day_states(arr, promo_days, rows)
        parts.append(states.take(states.day == arr.n_days))
    return Panel.concat(parts)


def push_history_bits(arr: LogArrays, days: int = 30) -> np.ndarray:
    """(C,) uint32 bit masks: bit j set when the customer got a push on day ``D - 1 - j``."""
    recent = arr.push_campaign[:, max(arr.n_days - days, 0) :] >= 0
    bits = np.zeros(arr.n_customers, dtype=np.uint32)
    for j in range(recent.shape[1]):
        bits |= recent[:, -1 - j].astype(np.uint32) << np.uint32(j)
    return bits


# --------------------------------------------------------------------------------------------------
# The purchase model's design matrix
# --------------------------------------------------------------------------------------------------


SHRUNK_BLOCKS = (
    "competitor",
    "discount",
    "discount2",
    "hour_cos",
    "hour_sin",
    "discount_age",
    "offer_recency",
    "offer_frequency",
)
"""Design blocks fitted with the stronger ``interaction_c`` penalty (per-segment deviations, interactions)."""


@dataclass(frozen=True)
class DesignLayout:
    """Column blocks of the purchase model's design matrix (each becomes one compiled table).

    Push fatigue enters only through the offer (a main effect of recent pushes on everyone's purchase
    rate would mostly learn the marketer's habit of pushing when sales are weak). The panel's stock
    cover is not a column either: customers do not see stock, and in the logs cover
    trends with the ageing customer base (stock depletes while early buyers lapse), so its
    coefficient would be a spurious time trend that the bootstrapped cover then replays.

    Blocks: ``segment`` (S one-hot), ``recency_frequency`` (R x F one-hot), ``age`` (log age, per
    frequency bucket), ``weekday`` (7 one-hot), ``competitor`` (mean log price index, per segment),
    and for an active offer: ``fatigue`` (pushes in the last 7 days, pushes in the last 30 days / 4:
    tired customers answer an offer less), ``offer_age`` (one-hot days since the push), ``offer_main``
    (discount, discount squared, cos and sin of the push hour), their per-segment deviations
    ``discount``, ``discount2``, ``hour_cos``, ``hour_sin``, then ``discount_age``, and
    ``offer_recency`` / ``offer_frequency`` (one-hot: an offer moves rare buyers more, in log-odds,
    than regulars). The blocks in :data:`SHRUNK_BLOCKS` get a stronger L2 penalty (the logs hold few
    campaigns, so per-segment deviations are noisy).

    ``pushes_cap`` caps the two push counts (the logs' largest, so the simulator never extrapolates
    fatigue linearly beyond what the marketer ever did).
    """

    promo_days: int
    pushes_cap: tuple[int, int] = (7, 30)
    offer_segment: bool = False
    """Add ``offer_segment`` (one-hot segment while an offer is active): each segment's own response."""

    @property
    def blocks(self) -> dict[str, int]:
        return {
            "segment": S,
            "recency_frequency": R * F,
            "age": F,
            "weekday": 7,
            "competitor": S,
            "fatigue": 2,
            "offer_age": self.promo_days,
            "offer_main": 4,
            "discount": S,
            "discount2": S,
            "hour_cos": S,
            "hour_sin": S,
            "discount_age": 1,
            "offer_recency": R,
            "offer_frequency": F,
            **({"offer_segment": S} if self.offer_segment else {}),
        }

    def start(self, block: str) -> int:
        """First column of ``block``."""
        offset = 0
        for name, width in self.blocks.items():
            if name == block:
                return offset
            offset += width
        raise KeyError(block)

    @property
    def n_columns(self) -> int:
        return sum(self.blocks.values())

    def shrunk_columns(self) -> np.ndarray:
        """Indices of the columns in :data:`SHRUNK_BLOCKS`."""
        return np.concatenate(
            [np.arange(self.start(b), self.start(b) + self.blocks[b]) for b in SHRUNK_BLOCKS]
        )

    def names(self) -> list[str]:
        """Column names, e.g. ``discount[loyal]``."""
        labels: dict[str, list[str]] = {
            "segment": list(SEGMENTS),
            "recency_frequency": [f"r{r}f{f}" for r in range(R) for f in range(F)],
            "age": [f"f{f}" for f in range(F)],
            "weekday": [str(w) for w in range(7)],
            "competitor": list(SEGMENTS),
            "fatigue": ["pushes_7d*offer", "pushes_30d/4*offer"],
            "offer_age": [str(k) for k in range(self.promo_days)],
            "offer_main": ["discount", "discount2", "hour_cos", "hour_sin"],
            **{b: list(SEGMENTS) for b in ("discount", "discount2", "hour_cos", "hour_sin")},
            "offer_recency": [f"r{r}" for r in range(R)],
            "offer_frequency": [f"f{f}" for f in range(F)],
            "offer_segment": list(SEGMENTS),
        }
        out: list[str] = []
        for block, width in self.blocks.items():
            out.extend(f"{block}[{x}]" for x in labels.get(block, [""] * width))
        return out


def design_matrix(panel: Panel, layout: DesignLayout) -> sparse.csr_matrix:
    """The purchase model's features of every panel row (sparse, float64)."""
    n = len(panel)
    seg = panel.segment.astype(np.int64)
    fb = frequency_bucket(panel.orders)
    rb = recency_bucket(panel.since)
    active = panel.offer_age >= 0
    k = np.where(active, panel.offer_age, 0).astype(np.int64)
    disc = np.where(active, panel.offer_discount, 0.0)
    cos_h, sin_h = hour_features(panel.offer_hour)
    on = active.astype(np.float64)
    p7 = np.minimum(panel.pushes_7d, layout.pushes_cap[0]).astype(np.float64)
    st = layout.start
    entries: list[tuple[np.ndarray, np.ndarray]] = [
        (st("segment") + seg, np.ones(n)),
        (st("recency_frequency") + rb * F + fb, np.ones(n)),
        (st("age") + fb, np.log(panel.age + AGE_OFFSET)),
        (st("weekday") + panel.weekday.astype(np.int64), np.ones(n)),
        (st("competitor") + seg, panel.log_competitor.astype(np.float64)),
        (np.full(n, st("fatigue")), p7 * on),
        (np.full(n, st("fatigue") + 1), np.minimum(panel.pushes_30d, layout.pushes_cap[1]) / 4.0 * on),
        (st("offer_age") + k, on),
        (np.full(n, st("offer_main")), disc),
        (np.full(n, st("offer_main") + 1), disc**2),
        (np.full(n, st("offer_main") + 2), cos_h * on),
        (np.full(n, st("offer_main") + 3), sin_h * on),
        (st("discount") + seg, disc),
        (st("discount2") + seg, disc**2),
        (st("hour_cos") + seg, cos_h * on),
        (st("hour_sin") + seg, sin_h * on),
        (np.full(n, st("discount_age")), disc * k),
        (st("offer_recency") + rb, on),
        (st("offer_frequency") + fb, on),
    ]
    if layout.offer_segment:
        entries.append((st("offer_segment") + seg, on))
    cols = np.concatenate([c for c, _ in entries])
    vals = np.concatenate([v for _, v in entries])
    rows = np.tile(np.arange(n), len(entries))
    keep = vals != 0
    matrix = sparse.coo_matrix((vals[keep], (rows[keep], cols[keep])), shape=(n, layout.n_columns))
    return matrix.tocsr()


def catalog_offer_features() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per catalog action: discount, cos and sin of the push hour (index 0, no campaign: zeros)."""
    discount = np.array([a.discount for a in CATALOG])
    cos_h, sin_h = hour_features(np.array([a.push_hour for a in CATALOG]))
    return discount, cos_h, sin_h


def log_tail_days(n_days: int, fraction: float) -> int:
    """First day of the held-out tail when ``fraction`` of the days are held out (at least one day)."""
    return max(1, min(n_days - 1, math.floor(n_days * (1.0 - fraction))))

"""Fitting the learned simulator from logs alone, and compiling it to :class:`SimParams`.

Each mechanism is a small function of the log arrays that returns its compiled parameters and a
report entry:

* purchase probability per customer-day: a weighted logistic regression (or a histogram gradient
  boosting model distilled into the same tables) on the panel of :mod:`.features`, checked on a
  held-out tail of days; compiled into additive lookup tables;
* the day-level demand shock: the spread of daily orders around the model's prediction beyond
  Poisson noise (method of moments on the training days);
* order value (lognormal per segment, with a discount term), category choice per segment, cost of
  goods and what a return recovers (non-negative least squares on the daily profit identity);
* fulfilment: stock-outs by stock cover (EM over the daily stock-out counts), carrier delays,
  delivery delays (empirical), complaints given late, returns (logistic on discount, lateness and
  segment) and their lag (empirical);
* unsubscribes by push fatigue, inferred from who stops getting pushes when a campaign reached every
  eligible subscriber; the active-customer count by recency.

Nothing reads the manifest's world config: only the four log tables.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator
from scipy import sparse
from scipy.optimize import nnls
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import log_loss, roc_auc_score
from threadpoolctl import threadpool_limits

from transferlab.platform.config import BaseConfig
from transferlab.simulator.learned.fast_market import PEND, PENDING_KEYS, SimParams, noisy_or_logit
from transferlab.simulator.learned.features import (
    FREQUENCY_LUT,
    NEVER,
    RECENCY_LUT,
    DesignLayout,
    F,
    K,
    LogArrays,
    Panel,
    R,
    S,
    build_panel,
    catalog_offer_features,
    design_matrix,
    end_states,
    iter_states,
    log_arrays,
    log_tail_days,
    push_history_bits,
)
from transferlab.simulator.logs import LogError, Logs
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, SEGMENTS

INTERACTION_GRID = (0.003, 0.03, 0.3, 3.0)
"""Candidate ``interaction_c`` values tried on the held-out tail when the config leaves it None."""
STOCKOUT_EDGES = (0.0, 1.0, 3.0)
"""Stock-cover buckets (days) of the stock-out model: <= 0, (0, 1], (1, 3], > 3."""
DAY = {k: i for i, k in enumerate(DAY_KEYS)}


class SimFitConfig(BaseConfig):
    """How the learned simulator is fitted from logs."""

    seed: int = Field(0, ge=0, description="Seed of the negative sampling and of the boosting model.")
    model: Literal["logistic", "hgb"] = Field(
        "logistic",
        description="Purchase model: 'logistic' (weighted logistic regression on the engineered features) "
        "or 'hgb' (histogram gradient boosting, distilled into the same lookup tables for the fast loop).",
    )
    l2_c: float = Field(
        1.0, gt=0, description="Inverse L2 strength of the logistic regressions (scikit-learn's C)."
    )
    interaction_c: float | None = Field(
        None,
        gt=0,
        description="Inverse L2 strength of the purchase model's per-segment deviations and interactions "
        "(offer by segment, recency and frequency; competitor by segment); None picks the best of "
        "INTERACTION_GRID by held-out log loss.",
    )
    negative_rate: float = Field(
        0.1,
        gt=0,
        le=1,
        description="Share of no-purchase customer-days kept in the training panel (weighted back up).",
    )
    validation_fraction: float = Field(
        0.2, ge=0.05, le=0.5, description="Share of the last days held out for the fit report."
    )
    refit_on_all: bool = Field(
        True,
        description="Refit the purchase model on all days after the held-out check (else keep that fit).",
    )
    promo_days: int | None = Field(
        None,
        ge=1,
        le=30,
        description="Days a pushed offer can work; None infers it from the logs (the longest lag from a push "
        "to a purchase attributed to it, plus one).",
    )
    maturity_days: int | None = Field(
        None,
        ge=1,
        le=120,
        description="Days after launch when a campaign's outcome is final; None infers it from the "
        "campaigns log's `matured` flags (30 when they do not tell).",
    )
    block_days: int = Field(
        14,
        ge=1,
        le=365,
        description="Block length (days) of the bootstrap of stock cover and competitor prices.",
    )
    noise_scale: float = Field(
        1.0, ge=0, le=10, description="Multiplier on the fitted day-level demand shock (0: no shock)."
    )
    smoothing: float = Field(
        20.0,
        ge=0,
        description="Pseudo-observations pulling sparse rates (unsubscribes by fatigue, stock-outs by cover) "
        "toward their pooled rate.",
    )
    offer_segment: bool = Field(
        False, description="Give each segment its own response to an active offer (a column per segment)."
    )
    offer_form: Literal["log_odds", "noisy_or"] = Field(
        "log_odds",
        description="How an offer moves a purchase: 'log_odds' (its terms add to the customer's log-odds) or "
        "'noisy_or' (a second purchase channel: P = 1 - (1 - P_customer)(1 - P_offer), so an offer "
        "adds about the same purchase rate to rare and regular buyers).",
    )
    hgb_max_iter: int = Field(150, ge=10, le=2000, description="Boosting iterations when model='hgb'.")
    chunk_customers: int = Field(
        5000, ge=100, description="Customers per chunk when building customer-day states (memory bound)."
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="BLAS/OpenMP threads of the fit (its problems are small: more threads mostly contend).",
    )

    @model_validator(mode="after")
    def _two_channel_is_logistic(self) -> SimFitConfig:
        if self.offer_form == "noisy_or" and self.model != "logistic":
            raise ValueError(
                "offer_form='noisy_or' is fitted by maximum likelihood of the logistic terms: "
                "use model='logistic' with it, or offer_form='log_odds' with model='hgb'"
            )
        return self


@dataclass
class FitResult:
    """The compiled parameters and the fit report."""

    params: SimParams
    report: dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Purchase model
# --------------------------------------------------------------------------------------------------


@dataclass
class PurchaseModel:
    """Linear log-odds over the design matrix: ``logit = X @ coef + intercept``."""

    coef: np.ndarray
    intercept: float
    extra: dict[str, float]
    booster: Any = None
    """The boosting model the tables were distilled from (model='hgb'), for the held-out check."""
    offer_intercept: float | None = None
    """The offer channel's intercept when the offer is a second channel (offer_form='noisy_or')."""

    def logit(self, panel: Panel, layout: DesignLayout) -> np.ndarray:
        x = design_matrix(panel, layout)
        if self.offer_intercept is None:
            return np.asarray(x @ self.coef) + self.intercept
        m0, mq = channel_masks(layout)
        l0 = np.asarray(x @ (self.coef * m0)) + self.intercept
        lq = np.asarray(x @ (self.coef * mq)) + self.offer_intercept
        return noisy_or_logit(l0, lq, panel.offer_age >= 0)


OFFER_BLOCKS = (
    "fatigue",
    "offer_age",
    "offer_main",
    "discount",
    "discount2",
    "hour_cos",
    "hour_sin",
    "discount_age",
    "offer_recency",
    "offer_frequency",
    "offer_segment",
)
SHARED_BLOCKS = ("weekday", "competitor")


def channel_masks(layout: DesignLayout) -> tuple[np.ndarray, np.ndarray]:
    """0/1 column masks of the customer channel and of the offer channel (day terms in both)."""
    m0, mq = np.zeros(layout.n_columns), np.zeros(layout.n_columns)
    for block, width in layout.blocks.items():
        lo = layout.start(block)
        if block in OFFER_BLOCKS or block in SHARED_BLOCKS:
            mq[lo : lo + width] = 1.0
        if block not in OFFER_BLOCKS:
            m0[lo : lo + width] = 1.0
    return m0, mq


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -z)


def two_channel_objective(
    theta: np.ndarray,
    x0: sparse.csr_matrix,
    xq: sparse.csr_matrix,
    on: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    pen: np.ndarray,
) -> tuple[float, np.ndarray]:
    """Penalised weighted negative log-likelihood of the two-channel model and its gradient.

    ``theta`` = (coef, customer intercept, offer intercept); ``P = 1 - sigmoid(-l0) sigmoid(-lq)^on``
    with ``l0 = x0 @ coef + b0`` and ``lq = xq @ coef + bq``; the L2 term is ``0.5 * sum(pen * coef^2)``.
    Both are divided by the total weight (scale-free for the optimiser).
    """
    coef, b0, bq = theta[:-2], theta[-2], theta[-1]
    l0, lq = x0 @ coef + b0, xq @ coef + bq
    a = np.minimum(_log_sigmoid(-l0) + on * _log_sigmoid(-lq), -1e-12)  # log(1 - p)
    log_p = np.log(-np.expm1(a))
    nll = -float(np.sum(w * (y * log_p + (1 - y) * a)))
    g_a = w * (y * np.exp(a - log_p) - (1 - y))  # d nll / d a
    g0 = -g_a * np.exp(_log_sigmoid(l0))
    gq = -g_a * on * np.exp(_log_sigmoid(lq))
    grad = np.concatenate([x0.T @ g0 + xq.T @ gq + pen * coef, [g0.sum(), gq.sum()]])
    total = float(w.sum())
    return (nll + 0.5 * float(np.sum(pen * coef**2))) / total, grad / total


def fit_two_channel(
    x0: sparse.csr_matrix,
    xq: sparse.csr_matrix,
    on: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    pen: np.ndarray,
    theta0: np.ndarray,
) -> tuple[np.ndarray, int]:
    """The maximum of :func:`two_channel_objective` (L-BFGS from ``theta0``) and its iteration count."""
    from scipy.optimize import minimize

    res = minimize(
        two_channel_objective,
        theta0,
        args=(x0, xq, on, y, w, pen),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 2000},
    )
    return np.asarray(res.x), int(res.nit)


OFFER_START_RATE = 0.002
"""The offer channel's starting purchase probability per offer-day (the fit moves it)."""


def _fit_noisy_or(
    panel: Panel, layout: DesignLayout, config: SimFitConfig, interaction_c: float, start: PurchaseModel
) -> PurchaseModel:
    """The two-channel purchase model, started from the one-channel fit's customer terms."""
    x = design_matrix(panel, layout).tocsr()
    m0, mq = channel_masks(layout)
    pen = np.full(layout.n_columns, 1.0 / config.l2_c)
    pen[layout.shrunk_columns()] = 1.0 / interaction_c
    theta0 = np.concatenate([start.coef * m0, [start.intercept, math.log(OFFER_START_RATE)]])
    theta, iterations = fit_two_channel(
        x @ sparse.diags(m0),
        x @ sparse.diags(mq),
        (panel.offer_age >= 0).astype(np.float64),
        panel.label.astype(np.float64),
        panel.weight.astype(np.float64),
        pen,
        theta0,
    )
    coef = fill_unsupported(theta[:-2], column_support(panel, layout), layout)
    return PurchaseModel(
        coef, float(theta[-2]), {"noisy_or_iterations": float(iterations)}, offer_intercept=float(theta[-1])
    )


def fit_purchase(
    panel: Panel, layout: DesignLayout, config: SimFitConfig, interaction_c: float = 0.03
) -> PurchaseModel:
    """Fit the purchase model on ``panel`` (weighted rows).

    The shrunk blocks get L2 strength ``1 / interaction_c`` instead of ``1 / l2_c``: their columns
    are scaled by ``sqrt(interaction_c / l2_c)`` for the fit and their coefficients scaled back.
    """
    if config.model == "hgb":
        return _fit_hgb_distilled(panel, layout, config)
    scale = np.ones(layout.n_columns)
    scale[layout.shrunk_columns()] = np.sqrt(interaction_c / config.l2_c)
    x = design_matrix(panel, layout) @ sparse.diags(scale)
    lr = LogisticRegression(C=config.l2_c, solver="newton-cholesky", max_iter=200, tol=1e-6)
    lr.fit(x, panel.label, sample_weight=panel.weight)
    coef = fill_unsupported(lr.coef_[0] * scale, column_support(panel, layout), layout)
    model = PurchaseModel(coef, float(lr.intercept_[0]), {})
    if config.offer_form == "noisy_or":
        return _fit_noisy_or(panel, layout, config, interaction_c, model)
    return model


def column_support(panel: Panel, layout: DesignLayout) -> np.ndarray:
    """How many panel rows have each design column non-zero."""
    x = design_matrix(panel, layout)
    return np.bincount(x.indices, minlength=layout.n_columns)


FILLED_BLOCKS = ("age", "weekday", "offer_age", "offer_recency", "offer_frequency")
"""One-hot-like blocks whose unseen levels borrow the nearest seen level's coefficient."""


def fill_unsupported(coef: np.ndarray, support: np.ndarray, layout: DesignLayout) -> np.ndarray:
    """Give every level the logs never showed the coefficient of the nearest level they did.

    Recency x frequency cells borrow from the nearest seen cell of the same frequency bucket (then
    the nearest bucket), so a customer who drifts past the logs' longest recency keeps the last
    estimate instead of an unfitted zero; likewise for the other one-hot blocks.
    """
    out = coef.copy()
    st = layout.start("recency_frequency")
    seen = support[st : st + R * F].reshape(R, F) > 0
    if seen.any():
        rs, fs = np.nonzero(seen)
        cells = out[st : st + R * F].reshape(R, F).copy()
        for r, f in zip(*np.nonzero(~seen), strict=True):
            nearest = np.argmin(10 * np.abs(fs - f) + np.abs(rs - r))
            cells[r, f] = cells[rs[nearest], fs[nearest]]
        out[st : st + R * F] = cells.ravel()
    for block in FILLED_BLOCKS:
        lo, width = layout.start(block), layout.blocks[block]
        levels = np.flatnonzero(support[lo : lo + width] > 0)
        if len(levels) == 0:
            continue
        for j in np.flatnonzero(support[lo : lo + width] == 0):
            out[lo + j] = out[lo + levels[np.argmin(np.abs(levels - j))]]
    return out


def _fit_hgb_distilled(panel: Panel, layout: DesignLayout, config: SimFitConfig) -> PurchaseModel:
    """Histogram gradient boosting on the same features, distilled into the linear tables."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    x = design_matrix(panel, layout)
    dense = x.toarray()
    hgb = HistGradientBoostingClassifier(
        max_iter=config.hgb_max_iter, learning_rate=0.05, early_stopping=False, random_state=config.seed
    )
    hgb.fit(dense, panel.label, sample_weight=panel.weight)
    target = np.asarray(hgb.decision_function(dense), dtype=np.float64)
    ridge = Ridge(alpha=1e-3).fit(x, target, sample_weight=panel.weight)
    resid = target - ridge.predict(x)
    r2 = 1.0 - np.average(resid**2, weights=panel.weight) / np.average(
        (target - np.average(target, weights=panel.weight)) ** 2, weights=panel.weight
    )
    return PurchaseModel(ridge.coef_.copy(), float(ridge.intercept_), {"distillation_r2": float(r2)}, hgb)


def evaluate_purchase(
    model: PurchaseModel, train: Panel, test: Panel, layout: DesignLayout
) -> dict[str, float]:
    """Held-out weighted log loss and AUC of the model vs the constant (training rate) baseline."""
    p = _sigmoid(model.logit(test, layout))
    base = float(np.average(train.label, weights=train.weight))
    out = {
        "heldout_rows": len(test),
        "heldout_log_loss": float(log_loss(test.label, p, sample_weight=test.weight, labels=[0, 1])),
        "baseline_log_loss": float(
            log_loss(test.label, np.full(len(test), base), sample_weight=test.weight, labels=[0, 1])
        ),
        "heldout_auc": _auc(test.label, p, test.weight),
        "heldout_calibration": float(np.sum(test.weight * p) / max(np.sum(test.weight * test.label), 1e-12)),
        **model.extra,
    }
    if model.booster is not None:
        ph = model.booster.predict_proba(design_matrix(test, layout).toarray())[:, 1]
        out["hgb_heldout_log_loss"] = float(
            log_loss(test.label, ph, sample_weight=test.weight, labels=[0, 1])
        )
        out["hgb_heldout_auc"] = _auc(test.label, ph, test.weight)
    return out


def _auc(label: np.ndarray, score: np.ndarray, weight: np.ndarray) -> float:
    if label.all() or not label.any():
        return float("nan")
    return float(roc_auc_score(label, score, sample_weight=weight))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def predict_daily_orders(
    arr: LogArrays, model: PurchaseModel, layout: DesignLayout, chunk: int
) -> np.ndarray:
    """(D,) expected orders per logged day: the model's purchase probabilities summed over customers."""
    total = np.zeros(arr.n_days)
    for states in iter_states(arr, layout.promo_days, chunk):
        total += np.bincount(states.day, _sigmoid(model.logit(states, layout)), minlength=arr.n_days)
    return total


def fit_shock(actual: np.ndarray, predicted: np.ndarray) -> float:
    """SD of a multiplicative day-level shock: Var(a - p) = p + sd^2 p^2 (method of moments).

    >>> round(fit_shock(np.array([10.0, 10.0]), np.array([10.0, 10.0])), 3)
    0.0
    """
    excess = float(np.sum((actual - predicted) ** 2 - predicted))
    return math.sqrt(max(excess, 0.0) / max(float(np.sum(predicted**2)), 1e-12))


def compile_purchase(model: PurchaseModel, layout: DesignLayout) -> dict[str, np.ndarray]:
    """Lookup tables of the linear log-odds (see :class:`SimParams`); exact for catalog offers.

    ``base`` is (S, 2, R, F): segment, whether an offer is active, recency and frequency buckets.
    """
    w, st, p = model.coef, layout.start, layout.promo_days
    seg = w[st("segment") : st("segment") + S]
    rf = w[st("recency_frequency") : st("recency_frequency") + R * F].reshape(R, F)
    rf_offer = (
        w[st("offer_recency") : st("offer_recency") + R][:, None]
        + w[st("offer_frequency") : st("offer_frequency") + F][None, :]
    )[None] + (w[st("offer_segment") : st("offer_segment") + S] if layout.offer_segment else np.zeros(S))[
        :, None, None
    ]  # (S, R, F)
    if model.offer_intercept is None:
        base_off = model.intercept + seg[:, None, None] + rf[None]  # (S, R, F)
        base = np.stack([base_off, base_off + rf_offer], axis=1)  # (S, 2, R, F)
    else:  # the second index holds the offer channel's own table
        base = np.stack(
            [
                model.intercept + seg[:, None, None] + rf[None],
                model.offer_intercept + rf_offer,
            ],
            axis=1,
        )
    disc, cos_h, sin_h = catalog_offer_features()
    k = np.arange(p)

    names = ("discount", "discount2", "hour_cos", "hour_sin")
    main = dict(zip(names, w[st("offer_main") : st("offer_main") + 4], strict=True))

    def per_seg(block: str) -> np.ndarray:
        """Per-segment coefficients of ``block``: the main effect (if any) plus the segment's deviation."""
        return w[st(block) : st(block) + S] + main.get(block, 0.0)

    offer = (
        w[st("offer_age") : st("offer_age") + p][None, None, :]
        + (per_seg("discount")[:, None] * disc[None, :])[:, :, None]
        + (per_seg("discount2")[:, None] * disc[None, :] ** 2)[:, :, None]
        + (per_seg("hour_cos")[:, None] * cos_h[None, :])[:, :, None]
        + (per_seg("hour_sin")[:, None] * sin_h[None, :])[:, :, None]
        + w[st("discount_age")] * disc[None, :, None] * k[None, None, :]
    )
    offer[:, 0, :] = 0.0  # no campaign, no offer
    return {
        "base": base.astype(np.float32),
        "age_coef": w[st("age") : st("age") + F].astype(np.float32),
        "weekday_coef": w[st("weekday") : st("weekday") + 7].astype(np.float32),
        "competitor_coef": per_seg("competitor").astype(np.float32),
        "cover_coef": np.zeros(1),  # stock cover is not in the purchase model (see DesignLayout)
        "fatigue_coef": w[st("fatigue") : st("fatigue") + 2].astype(np.float32),
        "fatigue_cap": np.asarray(layout.pushes_cap),
        "offer": offer.astype(np.float32),
        "offer_channel": np.array(0 if model.offer_intercept is None else 1),
    }


def compiled_logit(tables: dict[str, np.ndarray], panel: Panel) -> np.ndarray:
    """The compiled tables' log-odds of panel rows whose offer is on the catalog (for checks)."""
    fb = FREQUENCY_LUT[np.minimum(panel.orders, len(FREQUENCY_LUT) - 1)]
    rb = RECENCY_LUT[np.minimum(panel.since, len(RECENCY_LUT) - 1)]
    on = panel.offer_age >= 0
    k = np.where(on, panel.offer_age, 0)
    action = np.where(on, panel.offer_action, 0)
    fat = tables["fatigue_coef"].astype(np.float64)
    cap7, cap30 = tables["fatigue_cap"]
    day = (
        tables["weekday_coef"][panel.weekday]
        + tables["competitor_coef"][panel.segment] * panel.log_competitor
    )
    age = tables["age_coef"][fb] * np.log(panel.age + 30.0)
    offer = (
        fat[0] * np.minimum(panel.pushes_7d, cap7) + fat[1] * np.minimum(panel.pushes_30d, cap30) / 4
    ) * on + tables["offer"][panel.segment, action, k]
    if int(tables.get("offer_channel", 0)):
        l0 = tables["base"][panel.segment, 0, rb, fb] + age + day
        return noisy_or_logit(l0, tables["base"][panel.segment, 1, rb, fb] + day + offer, on)
    return tables["base"][panel.segment, on.astype(np.int64), rb, fb] + age + day + offer


def offer_effect_summary(offer: np.ndarray) -> dict[str, float]:
    """Mean offer log-odds on the push day by discount level (over segments, hours and budgets)."""
    disc = np.array([a.discount for a in CATALOG])
    return {
        f"{d:g}": float(offer[:, (disc == d) & (np.arange(len(CATALOG)) > 0), 0].mean())
        for d in sorted(set(disc))
    }


# --------------------------------------------------------------------------------------------------
# Orders: value, category, cost
# --------------------------------------------------------------------------------------------------


def match_orders(arr: LogArrays) -> pd.DataFrame:
    """Every purchase with its delivery day, late flag, complaint flag and return day (NaN: none yet)."""
    ev = arr.events
    cols = ["row", "day", "category", "list_value", "paid", "discount", "campaign"]
    orders = ev[ev["event"] == "purchase"][cols].reset_index(drop=True)
    orders["key"] = np.round(orders["paid"].to_numpy() * 1e6).astype(np.int64)
    orders["segment"] = arr.segment[orders["row"].to_numpy()]

    def keyed(name: str, sign: float) -> pd.DataFrame:
        df = ev[ev["event"] == name][["row", "day", "category", "paid"]].copy()
        df["key"] = np.round(sign * df["paid"].to_numpy() * 1e6).astype(np.int64)
        return df.drop(columns="paid")

    deliveries = keyed("delivery", 1.0).rename(columns={"day": "delivery_day"})
    orders = orders.merge(
        deliveries.drop_duplicates(["row", "category", "key"]), on=["row", "category", "key"], how="left"
    )
    returns = keyed("return", -1.0).rename(columns={"day": "return_day"})
    orders = orders.merge(
        returns.drop_duplicates(["row", "category", "key"]), on=["row", "category", "key"], how="left"
    )
    for name, flag in (("late_delivery", "late"), ("complaint", "complaint")):
        hits = ev[ev["event"] == name][["row", "day", "category"]].drop_duplicates()
        hits = hits.rename(columns={"day": "delivery_day"}).assign(**{flag: True})
        orders = orders.merge(hits, on=["row", "delivery_day", "category"], how="left")
        orders[flag] = orders[flag].astype("boolean").fillna(False).astype(bool)
    return orders


def fit_spend(orders: pd.DataFrame, split_day: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Lognormal list value: ``log v = mu[segment] + b * discount + sigma * z``; held-out RMSE."""

    def design(df: pd.DataFrame) -> np.ndarray:
        return np.column_stack([np.eye(S)[df["segment"].to_numpy()], df["discount"].to_numpy()])

    y = np.log(orders["list_value"].to_numpy())
    train = orders["day"].to_numpy() < split_day
    held = ~train if (~train).sum() >= 5 else train

    def solve(mask: np.ndarray) -> np.ndarray:
        coef, *_ = np.linalg.lstsq(design(orders[mask]), y[mask], rcond=None)
        return coef

    coef_split = solve(train)
    rmse = float(np.sqrt(np.mean((y[held] - design(orders[held]) @ coef_split) ** 2)))
    base_rmse = float(np.sqrt(np.mean((y[held] - y[train].mean()) ** 2)))
    coef = solve(np.ones(len(orders), dtype=bool))
    sigma = float(np.std(y - design(orders) @ coef))
    params = {"spend_mu": coef[:S], "spend_discount": np.array(coef[S]), "spend_sigma": np.array(sigma)}
    report = {
        "mu_by_segment": dict(zip(SEGMENTS, map(float, coef[:S]), strict=True)),
        "discount_coef": float(coef[S]),
        "sigma": sigma,
        "heldout_rmse_log_value": rmse,
        "baseline_rmse_log_value": base_rmse,
    }
    return params, report


def fit_categories(orders: pd.DataFrame) -> np.ndarray:
    """(S, K) cumulative category-choice probabilities per segment (add-one smoothing)."""
    counts = np.ones((S, K))
    np.add.at(counts, (orders["segment"].to_numpy(), orders["category"].to_numpy()), 1.0)
    return np.cumsum(counts / counts.sum(axis=1, keepdims=True), axis=1)


def fit_costs(arr: LogArrays, orders: pd.DataFrame) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Cost of goods per category and the share a return recovers, from the daily profit identity.

    ``gmv - push_cost - refunds - profit = sum_k c_k L_k - sum_k c_k rho_k R_k`` per day, with ``L_k``
    the list value sold and ``R_k`` the list value returned that day: non-negative least squares.
    """
    n_days = arr.n_days
    sold = np.zeros((n_days, K))
    np.add.at(
        sold, (orders["day"].to_numpy(), orders["category"].to_numpy()), orders["list_value"].to_numpy()
    )
    back = orders[orders["return_day"].notna() & (orders["return_day"] < n_days)]
    returned = np.zeros((n_days, K))
    np.add.at(
        returned,
        (back["return_day"].to_numpy().astype(np.int64), back["category"].to_numpy()),
        back["list_value"],
    )
    d = arr.daily
    y = d[:, DAY["gmv"]] - d[:, DAY["push_cost"]] - d[:, DAY["refunds"]] - d[:, DAY["profit"]]
    coef, _ = nnls(np.column_stack([sold, -returned]), y)
    pooled = float(np.sum(coef[:K] * sold.sum(axis=0)) / max(sold.sum(), 1e-12))
    cost = np.where(sold.sum(axis=0) > 0, coef[:K], pooled)
    recovery = np.clip(np.divide(coef[K:], cost, out=np.full(K, 0.9), where=cost > 0), 0.0, 1.0)
    recovery = np.where(returned.sum(axis=0) > 0, recovery, 0.9)
    resid = y - np.column_stack([sold, -returned]) @ coef
    report = {
        "cost_ratio": dict(
            zip(("womenswear", "menswear", "shoes", "accessories"), map(float, cost), strict=True)
        ),
        "return_recovery": list(map(float, recovery)),
        "daily_residual_sd": float(np.std(resid)),
    }
    return {"cost_ratio": cost, "return_recovery": recovery}, report


# --------------------------------------------------------------------------------------------------
# Fulfilment and returns
# --------------------------------------------------------------------------------------------------


def fit_stockouts(arr: LogArrays, orders: pd.DataFrame, smoothing: float) -> np.ndarray:
    """P(stock-out | stock-cover bucket of the order's category): EM over the daily stock-out counts."""
    n = np.zeros((arr.n_days, K))
    np.add.at(n, (orders["day"].to_numpy(), orders["category"].to_numpy()), 1.0)
    bucket = np.searchsorted(np.asarray(STOCKOUT_EDGES), arr.exo[:, :K], side="left")
    outs = arr.daily[:, DAY["stockouts"]]
    pooled = outs.sum() / max(n.sum(), 1.0)
    prob = np.full(len(STOCKOUT_EDGES) + 1, pooled)
    for _ in range(100):
        w = n * prob[bucket]
        share = np.divide(
            w, w.sum(axis=1, keepdims=True), out=np.zeros_like(w), where=w.sum(axis=1, keepdims=True) > 0
        )
        expected = outs[:, None] * share
        num = np.bincount(bucket.ravel(), expected.ravel(), minlength=len(prob))
        den = np.bincount(bucket.ravel(), n.ravel(), minlength=len(prob))
        prob = np.clip((num + smoothing * pooled) / (den + smoothing), 0.0, 1.0)
    return prob


def _pmf_cdf(values: np.ndarray, length: int | None = None) -> np.ndarray:
    """Cumulative distribution over 0..max of non-negative integer ``values`` (padded with ones)."""
    counts = np.bincount(values.astype(np.int64), minlength=length or 0)
    cdf = np.cumsum(counts) / max(counts.sum(), 1)
    if length is not None and len(cdf) < length:
        cdf = np.concatenate([cdf, np.ones(length - len(cdf))])
    return cdf


def fit_fulfilment(
    arr: LogArrays, orders: pd.DataFrame, stockout_prob: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Carrier-late rate, delivery delay distributions (on time / late) and complaint rates."""
    delivered = orders[orders["delivery_day"].notna()]
    censor = arr.n_days - 30 if arr.n_days > 60 else arr.n_days
    settled = delivered[delivered["day"] < censor]
    settled = settled if len(settled) >= 20 else delivered
    delay = (settled["delivery_day"] - settled["day"]).to_numpy()
    late = settled["late"].to_numpy()
    bucket = np.searchsorted(
        np.asarray(STOCKOUT_EDGES), arr.exo[settled["day"].to_numpy(), settled["category"].to_numpy()]
    )
    expected_out = float(stockout_prob[bucket].sum())
    carrier = max(float(late.sum()) - expected_out, 0.0) / max(len(late) - expected_out, 1.0)
    length = int(delay.max()) + 1 if len(delay) else 1
    on_cdf = _pmf_cdf(delay[~late], length) if (~late).any() else np.ones(length)
    late_cdf = _pmf_cdf(delay[late], length) if late.any() else on_cdf
    d_late, d_on = delivered["late"].to_numpy(), ~delivered["late"].to_numpy()
    complaint = delivered["complaint"].to_numpy()
    prob = np.array(
        [complaint[d_on].sum() / max(d_on.sum(), 1), complaint[d_late].sum() / max(d_late.sum(), 1)]
    )
    params = {
        "late_prob": np.array(carrier),
        "delay_cdf": np.vstack([on_cdf, late_cdf]),
        "complaint_prob": prob,
    }
    report = {
        "carrier_late_prob": carrier,
        "late_share": float(late.mean()) if len(late) else 0.0,
        "mean_delay_on_time": float(delay[~late].mean()) if (~late).any() else float("nan"),
        "mean_delay_late": float(delay[late].mean()) if late.any() else float("nan"),
        "complaint_prob_on_time": float(prob[0]),
        "complaint_prob_late": float(prob[1]),
        "stockout_prob_by_cover": dict(
            zip(("<=0", "0-1", "1-3", ">3"), map(float, stockout_prob), strict=True)
        ),
    }
    return params, report


def fit_returns(
    arr: LogArrays, orders: pd.DataFrame, config: SimFitConfig
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Return probability (logistic on discount, late, segment) and the lag from delivery to return."""
    delivered = orders[orders["delivery_day"].notna()]
    back = delivered[delivered["return_day"].notna()]
    lag = (back["return_day"] - back["delivery_day"]).to_numpy()
    lag_cdf = _pmf_cdf(lag) if len(lag) else np.ones(1)
    max_lag = len(lag_cdf) - 1
    settled = delivered[delivered["delivery_day"] < arr.n_days - 1 - max_lag]
    settled = settled if len(settled) >= 20 else delivered
    y = settled["return_day"].notna().to_numpy()
    x = np.column_stack(
        [settled["discount"], settled["late"].astype(float), np.eye(S)[settled["segment"].to_numpy()]]
    )
    if y.all() or not y.any():
        rate = float(np.clip(y.mean() if len(y) else 0.0, 1e-4, 1 - 1e-4))  # no delivered orders: none back
        coef = np.concatenate([[math.log(rate / (1 - rate))], np.zeros(2 + S)])
    else:
        lr = LogisticRegression(C=config.l2_c, max_iter=1000).fit(x, y)
        coef = np.concatenate([lr.intercept_, lr.coef_[0]])
    report = {
        "return_rate": float(y.mean()) if len(y) else 0.0,
        "coef": dict(zip(("intercept", "discount", "late", *SEGMENTS), map(float, coef), strict=True)),
        "lag_days": [int(np.argmax(lag_cdf > 0)), max_lag],
        "mean_lag": float(lag.mean()) if len(lag) else float("nan"),
    }
    return {"return_coef": coef, "return_lag_cdf": lag_cdf}, report


# --------------------------------------------------------------------------------------------------
# Lifecycle: unsubscribes, active customers
# --------------------------------------------------------------------------------------------------


def estimate_push_cost(arr: LogArrays) -> float:
    """Cost of one push: total push cost over total pushes in the daily log."""
    pushes = arr.daily[:, DAY["pushes"]].sum()
    if pushes <= 0:
        raise LogError("the daily log shows no pushes: the logs hold no campaigns to fit the offer effect on")
    return float(arr.daily[:, DAY["push_cost"]].sum() / pushes)


def infer_unsubscribed(arr: LogArrays, push_cost: float) -> tuple[np.ndarray, np.ndarray]:
    """Who unsubscribed, and at which push.

    A campaign whose reach stayed under its budget's cap pushed every subscribed customer of its
    target; a customer who had been pushed before but not by such a later campaign had unsubscribed,
    at their last push (the only moment the shop loses a subscriber). Returns ``(unsubscribed (C,),
    last_push_day (C,), -1 when never pushed)``.
    """
    camp = arr.campaigns[arr.campaigns["campaign_id"] >= 0]
    cap = np.floor(camp["budget"].to_numpy() / push_cost + 1e-9)
    full = camp[camp["reached"].to_numpy() < cap]
    last_full = np.full(S, -1)
    for s, name in enumerate(SEGMENTS):
        launched = full.loc[full["segment"].isin(["all", name]), "day"]
        last_full[s] = int(launched.max()) if len(launched) else -1
    last_push = np.where(arr.push_campaign >= 0, np.arange(arr.n_days), -1).max(axis=1)
    unsub = (last_push >= 0) & (last_full[arr.segment] > last_push)
    return unsub, last_push


def fit_unsubscribe(
    arr: LogArrays, unsub: np.ndarray, last_push: np.ndarray, smoothing: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """P(unsubscribe at a push | pushes in the last 7 days, this one included).

    Smoothed toward the pooled rate and made non-decreasing in fatigue (an unseen level gets the rate
    of the level below it): more pushes never make a subscriber less likely to leave.
    """
    pushed = arr.push_campaign >= 0
    cum = np.cumsum(pushed, axis=1)
    week = (
        cum
        - np.concatenate([np.zeros((len(cum), 7), dtype=cum.dtype), cum[:, :-7]], axis=1)[:, : cum.shape[1]]
    )
    rows, days = np.nonzero(pushed)
    is_last = days == last_push[rows]
    label = is_last & unsub[rows]
    known = ~is_last | unsub[rows]  # a last push without a later full campaign is censored
    fat = np.minimum(week[rows, days], 7)[known]
    y = label[known].astype(float)
    n = np.bincount(fat, minlength=8).astype(float)
    k = np.bincount(fat, y, minlength=8)
    pooled = k.sum() / max(n.sum(), 1.0)
    prob = (k + smoothing * pooled) / (n + smoothing)
    seen = np.flatnonzero(n > 0)
    if len(seen):
        prob = np.interp(np.arange(8), seen, prob[seen], left=prob[seen[0]], right=prob[seen[-1]])
        prob[seen[-1] :] = prob[seen[-1]]
    prob = np.maximum.accumulate(prob)
    report = {
        "inferred_unsubscribed": int(unsub.sum()),
        "pooled_rate": float(pooled),
        "by_pushes_7d": list(map(float, prob)),
        "pushes_used": int(n.sum()),
    }
    return prob, report


def fit_active(arr: LogArrays) -> np.ndarray:
    """Share of customers who last bought 0-30 / 31-60 / 61-90 days ago that the shop counts active."""
    days = np.arange(arr.n_days)
    last = np.maximum.accumulate(np.where(arr.bought, days, -NEVER), axis=1)
    since = days - last
    cols = [((since >= lo) & (since <= hi)).sum(axis=0) for lo, hi in ((0, 30), (31, 60), (61, 90))]
    coef, _ = nnls(np.column_stack(cols).astype(float), arr.daily[:, DAY["active_customers"]])
    return np.clip(coef, 0.0, 1.0)


# --------------------------------------------------------------------------------------------------
# Inferred conventions, start state
# --------------------------------------------------------------------------------------------------


def infer_promo_days(arr: LogArrays) -> int:
    """Longest lag from a campaign's launch to a purchase attributed to it, plus one (7 when none)."""
    camp = arr.campaigns[arr.campaigns["campaign_id"] >= 0].set_index("campaign_id")["day"]
    buys = arr.purchases[arr.purchases["campaign"] >= 0]
    lag = buys["day"].to_numpy() - camp.reindex(buys["campaign"].to_numpy()).to_numpy()
    lag = lag[~np.isnan(lag)]
    return int(np.clip(lag.max() + 1, 1, 30)) if len(lag) else 7


def infer_maturity_days(arr: LogArrays, default: int = 30) -> int:
    """Days from launch to maturity consistent with the campaigns log's ``matured`` flags.

    A campaign launched on day ``u`` is matured at the end of the log iff ``u + M <= D - 1``: the last
    matured launch bounds ``M`` from above and the first open one from below. ``default`` (30 days,
    the time an ecommerce result takes to come back) is kept when it lies within the bounds, else
    the nearest bound.
    """
    camp = arr.campaigns[arr.campaigns["campaign_id"] >= 0]
    flags = camp["matured"].astype(bool)
    upper = arr.n_days - 1 - int(camp.loc[flags, "day"].max()) if flags.any() else 120
    lower = arr.n_days - int(camp.loc[~flags, "day"].min()) if (~flags).any() else 1
    return int(np.clip(default, max(lower, 1), max(min(upper, 120), lower, 1)))


def start_state(arr: LogArrays, promo_days: int, subscribed: np.ndarray, chunk: int) -> dict[str, np.ndarray]:
    """The logged customers' state the day after the log (bootstrapped by ``SimMarket.reset``)."""
    end = end_states(arr, promo_days, chunk)
    on = (end.offer_age >= 0) & (end.offer_action > 0)
    return {
        "init_segment": end.segment.astype(np.int64),
        "init_since": end.since.astype(np.int64),
        "init_orders": end.orders.astype(np.int64),
        "init_age": end.age.astype(np.int64),
        "init_push_bits": push_history_bits(arr),
        "init_offer_action": np.where(on, end.offer_action, 0).astype(np.int64),
        "init_offer_age": np.where(on, end.offer_age, 0).astype(np.int64),
        "init_subscribed": subscribed,
        "start_weekday": np.array((int(arr.weekday[-1]) + 1) % 7),
    }


def recent_rates(
    arr: LogArrays, orders: pd.DataFrame, recovery: np.ndarray, cost: np.ndarray
) -> dict[str, np.ndarray]:
    """The last week per customer (observation history) and the recent daily rate of delayed events."""
    c, d = arr.n_customers, arr.daily
    tail = d[-60:]
    back = orders[orders["return_day"].notna()]
    cat = back["category"].to_numpy()
    loss = back["paid"].to_numpy() - recovery[cat] * cost[cat] * back["list_value"].to_numpy()
    loss_per_return = float(loss.mean()) if len(loss) else 0.0
    rate = np.zeros(len(PENDING_KEYS))
    rate[PEND["returns"]] = tail[:, DAY["returns"]].mean() / c
    rate[PEND["refunds"]] = tail[:, DAY["refunds"]].mean() / c
    rate[PEND["return_loss"]] = rate[PEND["returns"]] * loss_per_return
    rate[PEND["complaints"]] = tail[:, DAY["complaints"]].mean() / c
    rate[PEND["late_deliveries"]] = tail[:, DAY["late_deliveries"]].mean() / c
    return {"history": d[-7:] / c, "pending_rate": rate}


# --------------------------------------------------------------------------------------------------
# The whole fit
# --------------------------------------------------------------------------------------------------


def _choose_interaction_c(
    train: Panel, test: Panel, layout: DesignLayout, config: SimFitConfig
) -> tuple[float, dict[str, float]]:
    """``config.interaction_c``, or the grid value with the best held-out log loss (and the grid's losses)."""
    if config.interaction_c is not None or config.model == "hgb" or not test.label.any():
        return config.interaction_c or INTERACTION_GRID[1], {}
    losses = {}
    for c in INTERACTION_GRID:
        p = _sigmoid(fit_purchase(train, layout, config, c).logit(test, layout))
        losses[f"{c:g}"] = float(log_loss(test.label, p, sample_weight=test.weight, labels=[0, 1]))
    best = min(INTERACTION_GRID, key=lambda c: losses[f"{c:g}"])
    return best, losses


def _purchase_stage(
    arr: LogArrays, config: SimFitConfig, promo_days: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Fit, check on the held-out tail, estimate the shock, refit, compile."""
    rng = np.random.default_rng(config.seed)
    panel = build_panel(arr, promo_days, config.negative_rate, rng, config.chunk_customers)
    on = panel.offer_age >= 0
    caps = (int(panel.pushes_7d[on].max(initial=1)), int(panel.pushes_30d[on].max(initial=1)))
    layout = DesignLayout(promo_days, pushes_cap=caps, offer_segment=config.offer_segment)
    split = log_tail_days(arr.n_days, config.validation_fraction)
    train, test = panel.take(panel.day < split), panel.take(panel.day >= split)
    if not train.label.any():
        raise LogError(f"no purchases before day {split}: the logs are too short to fit a purchase model")
    interaction_c, grid = _choose_interaction_c(train, test, layout, config)
    model = fit_purchase(train, layout, config, interaction_c)
    report: dict[str, Any] = {
        "model": config.model,
        "offer_form": config.offer_form,
        "offer_segment": config.offer_segment,
        "interaction_c": interaction_c,
        "interaction_grid_log_loss": grid,
        "panel_rows": len(panel),
        "panel_purchases": int(panel.label.sum()),
        "split_day": split,
        **evaluate_purchase(model, train, test, layout),
    }
    predicted = predict_daily_orders(arr, model, layout, config.chunk_customers)
    actual = arr.daily[:, DAY["orders"]]
    shock = fit_shock(actual[:split], predicted[:split]) * config.noise_scale
    tail = slice(split, arr.n_days)
    report["daily_orders_heldout"] = {
        "days": arr.n_days - split,
        "actual_mean": float(actual[tail].mean()),
        "predicted_mean": float(predicted[tail].mean()),
        "mae": float(np.abs(actual[tail] - predicted[tail]).mean()),
        "correlation": float(np.corrcoef(actual[tail], predicted[tail])[0, 1])
        if arr.n_days - split > 2
        else float("nan"),
    }
    report["shock_sd"] = shock
    if config.refit_on_all:
        model = fit_purchase(panel, layout, config, interaction_c)
    tables = compile_purchase(model, layout)
    report["offer_logit_by_discount"] = offer_effect_summary(tables["offer"])
    return {**tables, "shock_sd": np.array(shock)}, report


def fit_simulator(logs: Logs, config: SimFitConfig | None = None) -> FitResult:
    """Fit every mechanism from ``logs`` and compile them into :class:`SimParams`."""
    config = config or SimFitConfig()
    with threadpool_limits(config.threads):
        return _fit(logs, config)


def _fit(logs: Logs, config: SimFitConfig) -> FitResult:
    started = time.perf_counter()
    arr = log_arrays(logs)
    promo = config.promo_days or infer_promo_days(arr)
    maturity = config.maturity_days or infer_maturity_days(arr)
    push_cost = estimate_push_cost(arr)
    purchase, purchase_report = _purchase_stage(arr, config, promo)
    orders = match_orders(arr)
    split = log_tail_days(arr.n_days, config.validation_fraction)
    spend, spend_report = fit_spend(orders, split)
    costs, cost_report = fit_costs(arr, orders)
    stockout = fit_stockouts(arr, orders, config.smoothing)
    fulfil, fulfil_report = fit_fulfilment(arr, orders, stockout)
    returns, return_report = fit_returns(arr, orders, config)
    unsub, last_push = infer_unsubscribed(arr, push_cost)
    unsub_prob, unsub_report = fit_unsubscribe(arr, unsub, last_push, config.smoothing)
    params = SimParams(
        **purchase,
        **spend,
        category_cdf=fit_categories(orders),
        **costs,
        stockout_edges=np.asarray(STOCKOUT_EDGES),
        stockout_prob=stockout,
        **fulfil,
        **returns,
        unsub_prob=unsub_prob,
        active_coef=fit_active(arr),
        push_cost=np.array(push_cost),
        maturity_days=np.array(maturity),
        promo_days=np.array(promo),
        exo=arr.exo.copy(),
        block_days=np.array(config.block_days),
        age_cap=np.array(arr.n_days),
        **recent_rates(arr, orders, costs["return_recovery"], costs["cost_ratio"]),
        **start_state(arr, promo, ~unsub, config.chunk_customers),
    )
    report = {
        "logs": {
            "customers": arr.n_customers,
            "days": arr.n_days,
            "events": len(arr.events),
            "purchases": len(orders),
            "pushes": int((arr.push_campaign >= 0).sum()),
        },
        "inferred": {"promo_days": promo, "maturity_days": maturity, "push_cost": push_cost},
        "purchase": purchase_report,
        "spend": spend_report,
        "costs": cost_report,
        "fulfilment": fulfil_report,
        "returns": return_report,
        "unsubscribe": unsub_report,
        "active_coef": list(map(float, params.active_coef)),
        "lifecycle": {
            "reactivation_events": int((arr.events["event"] == "reactivation").sum()),
            "lapse_model": "none explicit: recency x frequency (and age) carry lapsing and coming back",
        },
        "sizes": {
            "params_bytes": int(sum(v.nbytes for v in params.to_arrays().values())),
            "start_customers": len(params.init_segment),
            "exo_days": len(params.exo),
        },
        "fit_seconds": time.perf_counter() - started,
    }
    return FitResult(params, report)

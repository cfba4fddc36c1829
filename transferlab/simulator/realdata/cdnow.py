"""CDNOW transactions: load them, summarise each customer, forecast repeat purchases in a holdout.

The CDNOW sample (Fader, Hardie & Lee 2005) holds every purchase of 2,357 customers who first bought in
the first quarter of 1997, until the end of June 1998. The classic protocol fits a purchase model on the
first 39 weeks (the calibration period, up to 1997-09-30) and forecasts each customer's repeat purchases
in the next 39 weeks (the holdout, up to 1998-06-30).

File format: whitespace-separated, an optional header line, then one purchase a line with 4 columns
(``customer_id date cds dollars``) or 5 (``master_id sample_id date cds dollars``); dates are
``YYYYMMDD``. A customer's purchases on one day count as one transaction (their CDs and dollars add up).

Per customer (time in weeks, measured from the customer's first purchase):

* ``x``: repeat transactions in the calibration period (transactions after the first one);
* ``t_x``: the time of the last calibration transaction (0 when ``x == 0``);
* ``T``: the age at the calibration end, ``(calibration_end - first purchase day) / 7``;
* ``holdout``: transactions after the calibration end, up to and including the holdout end.

The cohort is the customers whose first purchase is on or before the calibration end.

>>> from transferlab.simulator.realdata.cdnow import parse_transactions, summarise
>>> tx = parse_transactions(["1 19970101 2 29.33", "1 19970108 1 9.99", "1 19971010 1 11.0"])
>>> c = summarise(tx)
>>> (int(c.x[0]), float(c.t_x[0]), round(float(c.T[0]), 3), int(c.holdout[0]))
(1, 1.0, 38.857, 1)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import numpy as np

from transferlab.simulator.realdata import bgnbd, purchase_model

DEFAULT_CALIBRATION_END = date(1997, 9, 30)
DEFAULT_HOLDOUT_END = date(1998, 6, 30)
DAYS_PER_WEEK = 7.0
_DATE = re.compile(r"\d{8}")


class CdnowError(ValueError):
    """Bad CDNOW input; the message names the problem and how to fix it."""


@dataclass(frozen=True)
class Transactions:
    """One row per customer and purchase day (same-day purchases merged), sorted by customer then day."""

    customer: np.ndarray  # str ids
    day: np.ndarray  # datetime64[D]
    cds: np.ndarray  # int
    dollars: np.ndarray  # float

    def __len__(self) -> int:
        return len(self.customer)


@dataclass(frozen=True)
class CustomerData:
    """Per-customer summary of a calibration/holdout split (arrays aligned on ``customer``)."""

    customer: np.ndarray
    x: np.ndarray
    t_x: np.ndarray
    T: np.ndarray
    holdout: np.ndarray
    holdout_days: np.ndarray  # day offsets after the calibration end of every holdout transaction
    calibration_end: date
    holdout_end: date

    @property
    def holdout_weeks(self) -> float:
        return (self.holdout_end - self.calibration_end).days / DAYS_PER_WEEK

    def __len__(self) -> int:
        return len(self.customer)


# --------------------------------------------------------------------------------------------- loading


def load_transactions(path: str | Path) -> Transactions:
    """Read a CDNOW transaction file (see the module docstring); raise `CdnowError` when it is malformed."""
    path = Path(path)
    if not path.is_file():
        raise CdnowError(f"{path}: no such file; pass the path of a CDNOW transaction file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CdnowError(f"{path}: cannot read it as text ({exc}); pass a plain-text CDNOW file") from exc
    try:
        return parse_transactions(text.splitlines())
    except CdnowError as exc:
        raise CdnowError(f"{path}: {exc}") from None


def parse_transactions(lines: Iterable[str]) -> Transactions:
    """Parse CDNOW lines (an optional header, then 4 or 5 whitespace-separated columns) and merge days."""
    rows: dict[tuple[str, date], list[float]] = {}
    n_columns = 0
    first = True
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if first and _is_header(fields):
            first = False
            continue
        first = False
        if n_columns == 0:
            n_columns = len(fields)
            if n_columns not in (4, 5):
                raise CdnowError(_column_message(number, len(fields)))
        elif len(fields) != n_columns:
            raise CdnowError(_column_message(number, len(fields), n_columns))
        customer, day, cds, dollars = _parse_row(fields, number)
        merged = rows.setdefault((customer, day), [0.0, 0.0])
        merged[0] += cds
        merged[1] += dollars
    if not rows:
        raise CdnowError("no transactions; the file is empty or holds only a header line")
    keys = sorted(rows)
    return Transactions(
        customer=np.array([k[0] for k in keys], dtype=object),
        day=np.array([k[1] for k in keys], dtype="datetime64[D]"),
        cds=np.array([rows[k][0] for k in keys], dtype=np.int64),
        dollars=np.array([rows[k][1] for k in keys], dtype=float),
    )


def _is_header(fields: list[str]) -> bool:
    """A first line with a word in it (a letter) and no ``YYYYMMDD`` date in the date column is a header."""
    has_word = any(c.isalpha() for f in fields for c in f)
    return has_word and not (len(fields) >= 3 and _DATE.fullmatch(fields[-3]) is not None)


def _column_message(number: int, found: int, expected: int | None = None) -> str:
    if expected is None:
        wanted = "4 (id date cds dollars) or 5 (master_id sample_id date cds dollars)"
    else:
        wanted = f"{expected}, like the first data line"
    return f"line {number}: {found} columns, expected {wanted}; fix or remove that line"


def _parse_row(fields: list[str], number: int) -> tuple[str, date, int, float]:
    customer, day_text, cds_text, dollars_text = fields[0], fields[-3], fields[-2], fields[-1]
    try:
        if _DATE.fullmatch(day_text) is None:
            raise ValueError(day_text)
        day = datetime.strptime(day_text, "%Y%m%d").date()
    except ValueError:
        raise CdnowError(
            f"line {number}: unparseable date {day_text!r}; dates must be YYYYMMDD, e.g. 19970101"
        ) from None
    try:
        cds = float(cds_text)
        dollars = float(dollars_text)
    except ValueError:
        raise CdnowError(
            f"line {number}: cds {cds_text!r} and dollars {dollars_text!r} must be numbers"
        ) from None
    if not (math.isfinite(cds) and cds >= 0 and cds == int(cds)):
        raise CdnowError(f"line {number}: cds {cds_text!r} must be a whole number >= 0")
    if not math.isfinite(dollars) or dollars < 0:
        raise CdnowError(f"line {number}: negative or non-finite dollars {dollars_text!r}; fix that line")
    return customer, day, int(cds), dollars


# ------------------------------------------------------------------------------------------ summaries


def summarise(
    transactions: Transactions,
    calibration_end: date = DEFAULT_CALIBRATION_END,
    holdout_end: date = DEFAULT_HOLDOUT_END,
) -> CustomerData:
    """Per-customer ``x``, ``t_x``, ``T`` and holdout count for the cohort of ``calibration_end``."""
    if calibration_end >= holdout_end:
        raise CdnowError(
            f"calibration end {calibration_end} is not before holdout end {holdout_end}; "
            "pass a --calibration-end earlier than --holdout-end"
        )
    cal = np.datetime64(calibration_end, "D")
    hold = np.datetime64(holdout_end, "D")
    customers, starts = np.unique(transactions.customer.astype(str), return_index=True)
    first_day = transactions.day[starts]
    cohort = first_day <= cal
    if not cohort.any():
        raise CdnowError(
            f"no customer made a first purchase on or before the calibration end {calibration_end} "
            f"(the earliest purchase is on {transactions.day.min()}); pass a later --calibration-end"
        )
    index = np.searchsorted(customers, transactions.customer.astype(str))
    weeks = (transactions.day - first_day[index]).astype(float) / DAYS_PER_WEEK
    in_cal = transactions.day <= cal
    in_hold = (transactions.day > cal) & (transactions.day <= hold)
    n = len(customers)
    x = np.bincount(index[in_cal], minlength=n) - 1
    t_x = np.zeros(n)
    np.maximum.at(t_x, index[in_cal], weeks[in_cal])
    holdout = np.bincount(index[in_hold], minlength=n)
    T = (cal - first_day).astype(float) / DAYS_PER_WEEK
    keep_hold = in_hold & cohort[index]
    return CustomerData(
        customer=customers[cohort],
        x=x[cohort],
        t_x=t_x[cohort],
        T=T[cohort],
        holdout=holdout[cohort],
        holdout_days=(transactions.day[keep_hold] - cal).astype(np.int64),
        calibration_end=calibration_end,
        holdout_end=holdout_end,
    )


# ------------------------------------------------------------------------------------------ forecasts


@dataclass(frozen=True)
class ModelForecast:
    """One fitted model's holdout forecast: per-customer expectations and the cumulative weekly curve."""

    name: str
    params: dict[str, float]
    log_likelihood: float
    predicted: np.ndarray  # expected holdout repeat transactions, per customer
    curve: np.ndarray  # expected cumulative holdout repeat transactions at the end of each week

    def figures(self, actual: np.ndarray) -> dict[str, float]:
        """Predicted total, ``relative_error = |predicted - actual| / actual`` and per-customer MAE."""
        total_actual = float(actual.sum())
        total_predicted = float(self.predicted.sum())
        return {
            "holdout_predicted_repeat": total_predicted,
            "relative_error": abs(total_predicted - total_actual) / max(total_actual, 1.0),
            "per_customer_mae": float(np.mean(np.abs(self.predicted - actual))),
        }


@dataclass(frozen=True)
class ForecastReport:
    """Both models' holdout forecasts for one calibration/holdout split."""

    data: CustomerData
    weeks: np.ndarray  # holdout week ends, in weeks after the calibration end
    actual_curve: np.ndarray  # actual cumulative holdout repeat transactions at each week end
    model: ModelForecast
    baseline: ModelForecast

    def to_dict(self) -> dict[str, object]:
        """The JSON object of ``transferlab sim cdnow-forecast --json``."""
        actual = self.data.holdout
        return {
            "calibration_end": self.data.calibration_end.isoformat(),
            "holdout_end": self.data.holdout_end.isoformat(),
            "holdout_weeks": self.data.holdout_weeks,
            "customers": len(self.data),
            "calibration_repeat": int(self.data.x.sum()),
            "holdout_actual_repeat": int(actual.sum()),
            **self.model.figures(actual),
            "model": _model_dict(self.model, actual),
            "bgnbd": _model_dict(self.baseline, actual),
            "curve": {
                "week": _rounded(self.weeks),
                "actual": [int(v) for v in self.actual_curve],
                self.model.name: _rounded(self.model.curve),
                self.baseline.name: _rounded(self.baseline.curve),
            },
        }


def _model_dict(forecast: ModelForecast, actual: np.ndarray) -> dict[str, object]:
    return {
        "name": forecast.name,
        **forecast.figures(actual),
        "params": forecast.params,
        "log_likelihood": forecast.log_likelihood,
    }


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]


def holdout_weeks_grid(data: CustomerData) -> tuple[np.ndarray, np.ndarray]:
    """Week ends of the holdout (the last one cut at the holdout end) and the actual cumulative counts."""
    total_days = (data.holdout_end - data.calibration_end).days
    days = np.minimum(np.arange(1, math.ceil(total_days / DAYS_PER_WEEK) + 1) * 7, total_days)
    actual = np.searchsorted(np.sort(data.holdout_days), days, side="right")
    return days / DAYS_PER_WEEK, actual


def forecast(data: CustomerData) -> ForecastReport:
    """Fit our purchase model and the BG/NBD baseline on the calibration period; forecast the holdout."""
    if int(data.x.sum()) == 0:
        raise CdnowError(
            f"no repeat purchase in the calibration period up to {data.calibration_end}: the purchase "
            "models cannot be fitted; pass a later --calibration-end"
        )
    weeks, actual_curve = holdout_weeks_grid(data)
    ours = purchase_model.fit(data.x, data.t_x, data.T)
    base = bgnbd.fit(data.x, data.t_x, data.T)

    def our_expectation(t: float) -> np.ndarray:
        return purchase_model.conditional_expected(ours.params, t, data.x, data.t_x, data.T)

    def base_expectation(t: float) -> np.ndarray:
        return bgnbd.conditional_expected(base.params, t, data.x, data.t_x, data.T)

    model = ModelForecast(
        name=purchase_model.NAME,
        params=ours.params.as_dict(),
        log_likelihood=ours.log_likelihood,
        predicted=our_expectation(data.holdout_weeks),
        curve=np.array([our_expectation(w).sum() for w in weeks]),
    )
    baseline = ModelForecast(
        name="bgnbd",
        params=base.params.as_dict(),
        log_likelihood=base.log_likelihood,
        predicted=base_expectation(data.holdout_weeks),
        curve=np.array([base_expectation(w).sum() for w in weeks]),
    )
    return ForecastReport(data, weeks, actual_curve, model, baseline)


def plot_curve(report: ForecastReport, path: str | Path) -> None:
    """Save a PNG of the cumulative holdout repeat purchases: actual, our model and BG/NBD."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    axes.plot(report.weeks, report.actual_curve, color="black", label="actual")
    axes.plot(report.weeks, report.model.curve, linestyle="--", label=f"ours ({report.model.name})")
    axes.plot(report.weeks, report.baseline.curve, linestyle=":", label="BG/NBD")
    axes.set_xlabel(f"weeks after the calibration end ({report.data.calibration_end})")
    axes.set_ylabel("cumulative repeat transactions")
    axes.set_title(f"Holdout forecast, {len(report.data)} customers")
    axes.legend()
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)

"""The customer prior of the ground-truth ecommerce world, measured on the CDNOW calibration period.

`world_prior` summarises CDNOW transactions into the few numbers the world draws its customers from
(`transferlab.simulator.world_config.CustomerPrior` reads them): the BG/NBD purchase/dropout
distribution with its time unit converted to days, the lognormal of one transaction's dollars, the
repeat rate and the inter-purchase gaps. Every figure uses the cohort of customers who first bought on
or before the calibration end and their transactions up to it (same-day purchases merged), the period
the forecasting models are fitted on.

The committed ``transferlab/simulator/data/cdnow_prior.json`` is written once, from the shared CDNOW
sample, by::

    python -m transferlab.simulator.realdata.cdnow_prior ../shared/data/cdnow/CDNOW_sample.txt

so the product never reads ../shared at run time.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from transferlab.simulator.realdata import bgnbd
from transferlab.simulator.realdata.cdnow import (
    DAYS_PER_WEEK,
    DEFAULT_CALIBRATION_END,
    CdnowError,
    Transactions,
    load_transactions,
    summarise,
)

PRIOR_PATH = Path(__file__).resolve().parents[1] / "data" / "cdnow_prior.json"
MADE_BY = "python -m transferlab.simulator.realdata.cdnow_prior ../shared/data/cdnow/CDNOW_sample.txt"


@dataclass(frozen=True)
class WorldPrior:
    """The world's customer prior. Times are in days; ``alpha_weeks`` is the same rate in weeks.

    Attributes:
        r, alpha_days: Gamma(shape r, rate alpha_days) of purchase rates per day (BG/NBD).
        alpha_weeks: the same rate in weeks, as fitted (``alpha_days = 7 * alpha_weeks``).
        a, b: Beta(a, b) of the probability a customer drops out after a purchase (BG/NBD).
        spend_log_mu, spend_log_sigma: lognormal of one transaction's dollars (MLE on positive values).
        spend_mean, spend_median: the mean and median dollars of a transaction (all of them).
        repeat_rate: share of customers with at least one repeat transaction in the calibration period.
        inter_purchase_days_mean, inter_purchase_days_median: days between a customer's consecutive
            transactions.
    """

    calibration_end: str
    customers: int
    transactions: int
    r: float
    alpha_days: float
    alpha_weeks: float
    a: float
    b: float
    bgnbd_log_likelihood: float
    spend_log_mu: float
    spend_log_sigma: float
    spend_mean: float
    spend_median: float
    repeat_rate: float
    inter_purchase_days_mean: float
    inter_purchase_days_median: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def world_prior(transactions: Transactions, calibration_end: date = DEFAULT_CALIBRATION_END) -> WorldPrior:
    """Measure the world's customer prior on the calibration period of ``transactions``."""
    data = summarise(transactions, calibration_end, calibration_end + timedelta(days=1))
    fit = bgnbd.fit(data.x, data.t_x, data.T)
    in_period = np.isin(transactions.customer.astype(str), data.customer) & (
        transactions.day <= np.datetime64(calibration_end, "D")
    )
    dollars = transactions.dollars[in_period]
    log_dollars = np.log(dollars[dollars > 0])
    gaps = _inter_purchase_days(transactions.customer[in_period], transactions.day[in_period])
    return WorldPrior(
        calibration_end=calibration_end.isoformat(),
        customers=len(data),
        transactions=int(in_period.sum()),
        r=fit.params.r,
        alpha_days=fit.params.alpha * DAYS_PER_WEEK,
        alpha_weeks=fit.params.alpha,
        a=fit.params.a,
        b=fit.params.b,
        bgnbd_log_likelihood=fit.log_likelihood,
        spend_log_mu=float(log_dollars.mean()),
        spend_log_sigma=float(log_dollars.std()),
        spend_mean=float(dollars.mean()),
        spend_median=float(np.median(dollars)),
        repeat_rate=float(np.mean(data.x > 0)),
        inter_purchase_days_mean=float(gaps.mean()),
        inter_purchase_days_median=float(np.median(gaps)),
    )


def _inter_purchase_days(customer: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days between consecutive transactions of the same customer (rows sorted by customer, then day)."""
    same = customer[1:] == customer[:-1]
    return (day[1:] - day[:-1]).astype(float)[same]


def write_world_prior(source: str | Path, out: str | Path = PRIOR_PATH) -> dict[str, object]:
    """Measure the prior on ``source`` and write it, with the command that made it, as JSON to ``out``."""
    prior = world_prior(load_transactions(source))
    document = {
        "made_by": MADE_BY,
        "source": "CDNOW sample of Fader, Hardie & Lee (2005), ../shared/data/cdnow/CDNOW_sample.txt",
        "time_unit": "day (alpha_days; alpha_weeks = alpha_days / 7 is the fitted weekly rate)",
        **prior.to_dict(),
    }
    Path(out).write_text(json.dumps(document, indent=2) + "\n")
    return document


def main(argv: list[str]) -> int:
    """``python -m transferlab.simulator.realdata.cdnow_prior FILE [OUT]``."""
    if len(argv) not in (1, 2):
        print(f"usage: {MADE_BY.split(' ../')[0]} FILE [OUT]", file=sys.stderr)
        return 2
    out = argv[1] if len(argv) == 2 else PRIOR_PATH
    try:
        document = write_world_prior(argv[0], out)
    except CdnowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

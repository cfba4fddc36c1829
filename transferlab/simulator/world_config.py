"""Configuration of the ground-truth world, and its customer prior calibrated to CDNOW.

The prior (purchase rates, dropout, order values) comes from
``transferlab/simulator/data/cdnow_prior.json``, fitted on the real CDNOW transactions by
``transferlab.simulator.realdata`` (the file names the command that made it), so the world's
baseline purchase timing and spend are real ones; the product never needs ../shared at run time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pydantic import Field, field_validator

from transferlab.platform.config import BaseConfig
from transferlab.simulator.vocabulary import CATEGORIES

PRIOR_RESOURCE = "cdnow_prior.json"


@dataclass(frozen=True)
class CustomerPrior:
    """Population distribution of customers' baseline behaviour (BG/NBD + lognormal spend).

    Attributes:
        r: shape of the Gamma distribution of purchase rates.
        alpha_days: rate (in days) of that Gamma: mean rate is r / alpha_days purchases per day.
        a, b: Beta distribution of the probability a customer drops out after a purchase.
        spend_log_mu, spend_log_sigma: lognormal of one transaction's value in dollars.
    """

    r: float
    alpha_days: float
    a: float
    b: float
    spend_log_mu: float
    spend_log_sigma: float

    @classmethod
    def from_cdnow(cls) -> CustomerPrior:
        """The prior fitted on the CDNOW sample (package data)."""
        text = resources.files("transferlab.simulator").joinpath("data", PRIOR_RESOURCE).read_text()
        return cls.from_mapping(json.loads(text))

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> CustomerPrior:
        """Build from the JSON written by the CDNOW fit (extra keys are ignored)."""
        try:
            return cls(
                r=float(data["r"]),
                alpha_days=float(data["alpha_days"]),
                a=float(data["a"]),
                b=float(data["b"]),
                spend_log_mu=float(data["spend_log_mu"]),
                spend_log_sigma=float(data["spend_log_sigma"]),
            )
        except KeyError as exc:
            raise ValueError(
                f"customer prior is missing {exc.args[0]!r}; regenerate cdnow_prior.json"
            ) from exc


class WorldConfig(BaseConfig):
    """The ground-truth market: its size, seed, and the strength of each mechanism."""

    n_customers: int = Field(1000, ge=10, le=2_000_000, description="Customers in the market.")
    seed: int = Field(0, ge=0, description="Seed of every random draw in the world.")
    start_weekday: int = Field(0, ge=0, le=6, description="Weekday of day 0 (0 = Monday).")
    rate_scale: float = Field(
        1.0,
        gt=0,
        description="Multiplier on the CDNOW purchase rates (1 = CDNOW's baseline timing; larger "
        "gives a busier shop with the same shape).",
    )
    push_cost: float = Field(0.02, gt=0, description="Cost in dollars of one push to one customer.")
    promo_days: int = Field(
        7, ge=1, le=30, description="Days a pushed offer keeps working (delayed conversions)."
    )
    promo_decay: float = Field(
        0.7, gt=0, lt=1, description="Daily decay of a pushed offer's uplift after the push day."
    )
    max_uplift: float = Field(
        6.0, gt=0, description="Largest multiplier a generous discount puts on a customer's purchase rate."
    )
    promo_reach_rate: float = Field(
        0.03,
        ge=0,
        le=1,
        description="Daily purchase chance a fully effective offer adds on top of a customer's own rate "
        "(brings in customers who would not have bought at all).",
    )
    fatigue_decay: float = Field(0.85, gt=0, lt=1, description="Daily decay of push fatigue.")
    pull_forward_days: float = Field(
        10.0,
        ge=0,
        description="Recency suppression time constant: a purchase lowers the next days' rate "
        "(purchases pulled forward by a promotion are missing later).",
    )
    reactivation_rate: float = Field(
        0.0005, ge=0, le=1, description="Daily chance a lapsed customer comes back on their own."
    )
    return_window: tuple[int, int] = Field(
        (7, 21), description="Days after delivery within which a return happens (uniform)."
    )
    maturity_days: int = Field(
        30, ge=7, le=120, description="Days after launch when a campaign's GMV/profit outcome is final."
    )
    stock_days: float = Field(
        21.0, gt=0, description="Initial stock per category, in days of expected baseline demand."
    )
    reorder_days: float = Field(7.0, ge=0, description="Reorder point, in days of expected baseline demand.")
    lead_time_days: tuple[int, int] = Field(
        (5, 12), description="Replenishment lead time range in days (uniform per order)."
    )
    competitor_volatility: float = Field(
        0.02, ge=0, le=0.5, description="Daily standard deviation of the competitor price index."
    )
    drift_per_month: float = Field(
        0.15, ge=0, le=2, description="Monthly drift of category preferences (logit random walk sd)."
    )
    noise: float = Field(
        0.1,
        ge=0,
        le=2,
        description="Day-level demand shock sd (the same action never gives the same result).",
    )
    category_seasonality: dict[str, tuple[float, int]] = Field(
        default_factory=dict,
        description="Yearly demand cycle per category: category -> (amplitude, peak day of year). The "
        "category's purchase rate is multiplied by 1 + amplitude * cos(2 pi (day - peak) / 365), day 0 "
        "being day 0 of the year; amplitude in [0, 0.9]. Empty (default): no yearly cycle, only the "
        "weekly one shared by every category.",
    )
    category_carrier_delay: dict[str, tuple[float, int]] = Field(
        default_factory=dict,
        description="Carrier trouble per category from day 0: category -> (extra late-delivery "
        "probability in [0, 1], extra days late >= 0). Late orders take the world's lateness path "
        "(complaints, returns, unhappy customers who drop out sooner). Empty (default): every category "
        "has the shop-wide carrier lateness. A scenario may change it between days through "
        "MarketWorld.carrier_late / carrier_extra_days.",
    )
    late_delivery_aversion: float = Field(
        0.0,
        ge=0,
        le=5,
        description="Drop in a customer's preference logit for a category each time an order of it "
        "arrives late: repeat purchases of a category with late deliveries fall (0, the default: "
        "lateness only brings complaints, returns and earlier dropout).",
    )

    @field_validator("category_seasonality")
    @classmethod
    def _check_seasonality(cls, value: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
        for name, (amplitude, peak) in value.items():
            _check_category(name)
            if not 0.0 <= amplitude <= 0.9 or not math.isfinite(amplitude):
                raise ValueError(f"seasonal amplitude of {name!r} is {amplitude}; use a value in [0, 0.9]")
            if not 0 <= peak < 365:
                raise ValueError(f"peak day of {name!r} is {peak}; use a day of year in [0, 364]")
        return value

    @field_validator("category_carrier_delay")
    @classmethod
    def _check_carrier_delay(cls, value: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
        for name, (extra_p, extra_days) in value.items():
            _check_category(name)
            if not 0.0 <= extra_p <= 1.0:
                raise ValueError(f"extra late probability of {name!r} is {extra_p}; use a value in [0, 1]")
            if extra_days < 0:
                raise ValueError(f"extra days late of {name!r} is {extra_days}; use 0 or more")
        return value


def _check_category(name: str) -> None:
    if name not in CATEGORIES:
        raise ValueError(f"unknown category {name!r}; use one of {', '.join(CATEGORIES)}")

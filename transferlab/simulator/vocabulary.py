"""The vocabulary of the ecommerce market: segments, categories, campaign actions and outcome vectors.

Shared by the ground-truth world, the behaviour policy, the logs, the learned simulator and the
Gymnasium environments, so they cannot drift apart. A campaign is one day's marketing decision::

    >>> a = CampaignAction(discount=0.1, push_hour=20, segment="loyal", budget=50.0)
    >>> a.is_noop, a.reach_cap(push_cost=0.05)
    (False, 1000)
    >>> NOOP.is_noop
    True

Outcomes are vectors (:data:`OUTCOME_KEYS`), never collapsed before the user picks weights.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SEGMENTS: tuple[str, ...] = ("bargain", "casual", "loyal", "premium")
"""CRM segments the shop knows each customer by (their behaviour behind the label is hidden)."""

TARGETS: tuple[str, ...] = ("all", *SEGMENTS)
"""Who a campaign can target: everyone, or one segment."""

CATEGORIES: tuple[str, ...] = ("womenswear", "menswear", "shoes", "accessories")
"""Product categories, each with its own price, cost, stock and competitor."""

PROMO_CATEGORIES: tuple[str, ...] = ("all", *CATEGORIES)
"""What a campaign's discount applies to."""

MAX_DISCOUNT = 0.5
MAX_BUDGET = 10_000.0

OUTCOME_KEYS: tuple[str, ...] = (
    "orders",
    "gmv",
    "profit",
    "discount_cost",
    "push_cost",
    "returns",
    "refunds",
    "complaints",
    "late_deliveries",
    "satisfaction",
    "retention_30",
    "retention_60",
    "retention_90",
)
"""The outcome vector of one campaign (over its targeted customers; see ``world.CampaignRecord``)."""

PRIMARY_OUTCOMES: tuple[str, ...] = ("gmv", "profit", "satisfaction", "retention_30")
"""The four conflicting objectives of an ecommerce shop (GMV, margin, satisfaction, retention)."""


class ActionError(ValueError):
    """A campaign action is invalid; the message names the field and how to fix it."""


@dataclass(frozen=True)
class CampaignAction:
    """One campaign: a discount pushed to a target segment at an hour, within a budget.

    Attributes:
        discount: fraction off list price in [0, 0.5]; 0 is a plain reminder push.
        push_hour: hour of the day the push is sent, 0-23.
        segment: ``"all"`` or one of :data:`SEGMENTS`.
        budget: money for pushes (each reached customer costs ``push_cost``); 0 means no campaign.
        category: ``"all"`` or one of :data:`CATEGORIES`: what the discount applies to.
    """

    discount: float = 0.0
    push_hour: int = 20
    segment: str = "all"
    budget: float = 0.0
    category: str = "all"

    def __post_init__(self) -> None:
        validate_action(self)

    @property
    def is_noop(self) -> bool:
        """No campaign today (no budget)."""
        return self.budget <= 0.0

    def reach_cap(self, push_cost: float) -> int:
        """How many customers the budget pays for."""
        return math.floor(self.budget / push_cost + 1e-9)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for logs and JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CampaignAction:
        """Rebuild from :meth:`to_dict` output; unknown keys are an error."""
        unknown = set(data) - {"discount", "push_hour", "segment", "budget", "category"}
        if unknown:
            raise ActionError(
                f"unknown action field(s) {sorted(unknown)}; "
                "use discount, push_hour, segment, budget, category"
            )
        return cls(**data)


def validate_action(action: CampaignAction) -> None:
    """Raise :class:`ActionError` naming the first bad field of ``action`` and the fix."""
    d = action.discount
    if not isinstance(d, int | float) or not math.isfinite(d) or d < 0 or d > MAX_DISCOUNT:
        raise ActionError(
            f"discount={d!r} is outside [0, {MAX_DISCOUNT}]: give a fraction off list price, "
            "e.g. 0.1 for 10% off (negative discounts are price rises; use 0)"
        )
    if isinstance(action.push_hour, bool) or not isinstance(action.push_hour, int | np.integer):
        raise ActionError(f"push_hour={action.push_hour!r} must be an integer hour 0-23")
    if not 0 <= int(action.push_hour) <= 23:
        raise ActionError(f"push_hour={action.push_hour} is outside 0-23: give the hour of the day")
    if action.segment not in TARGETS:
        raise ActionError(f"unknown segment {action.segment!r}; use one of {', '.join(TARGETS)}")
    if action.category not in PROMO_CATEGORIES:
        raise ActionError(f"unknown category {action.category!r}; use one of {', '.join(PROMO_CATEGORIES)}")
    b = action.budget
    if not isinstance(b, int | float) or not math.isfinite(b) or b < 0 or b > MAX_BUDGET:
        raise ActionError(f"budget={b!r} is outside [0, {MAX_BUDGET:g}]: give money for pushes")


NOOP = CampaignAction()
"""No campaign."""


# --------------------------------------------------------------------------------------------------
# The discrete action catalog (for discrete policies, offline RL and the environments)
# --------------------------------------------------------------------------------------------------

CATALOG_DISCOUNTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3)
CATALOG_HOURS: tuple[int, ...] = (9, 13, 20)
CATALOG_BUDGETS: tuple[float, ...] = (20.0, 60.0)


def action_catalog() -> tuple[CampaignAction, ...]:
    """The discrete campaign menu: index 0 is no campaign, then every (discount, hour, segment, budget).

    The discount applies to all categories. 1 + 5 x 3 x 5 x 2 = 151 actions.
    """
    combos = itertools.product(CATALOG_DISCOUNTS, CATALOG_HOURS, TARGETS, CATALOG_BUDGETS)
    return (NOOP, *(CampaignAction(d, h, s, b) for d, h, s, b in combos))


CATALOG: tuple[CampaignAction, ...] = action_catalog()


def catalog_index(action: CampaignAction) -> int:
    """Index of ``action`` in :data:`CATALOG`, or -1 when it is not on the menu."""
    try:
        return _CATALOG_INDEX[action]
    except KeyError:
        return -1


_CATALOG_INDEX: dict[CampaignAction, int] = {a: i for i, a in enumerate(CATALOG)}


def campaign_satisfaction(orders: float, complaints: float, returns: float, late: float) -> float:
    """Satisfaction score in [0, 1] of a campaign's orders: 1 minus weighted bad experiences per order.

    >>> campaign_satisfaction(orders=10, complaints=1, returns=2, late=2)
    0.8
    """
    if orders <= 0:
        return 1.0
    bad = complaints + 0.5 * returns + 0.5 * late
    return float(min(1.0, max(0.0, 1.0 - bad / orders)))


DAY_KEYS: tuple[str, ...] = (
    "orders",
    "gmv",
    "profit",
    "discount_cost",
    "push_cost",
    "pushes",
    "returns",
    "refunds",
    "complaints",
    "late_deliveries",
    "stockouts",
    "active_customers",
)
"""One day's shop-wide outcome vector (what an environment's reward is made of)."""

OBS_KEYS: tuple[str, ...] = (
    "weekday",
    "orders_7d",
    "gmv_7d",
    "profit_7d",
    "complaints_7d",
    "returns_7d",
    "pushes_7d",
    "active_90d",
    "subscribed",
    *(f"stock_days_{c}" for c in CATEGORIES),
    *(f"competitor_{c}" for c in CATEGORIES),
)
"""The market state a marketer observes before deciding (``MarketWorld.observe()`` minus the day)."""

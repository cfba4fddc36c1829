"""What a suggestion looks like, how it is validated, and how risky we think it is.

A suggestion is a campaign (:class:`ActionSpec`) plus the proposer's reasoning, confidence, claimed
risk and evidence. :func:`parse_suggestion` turns untrusted JSON into a :class:`SuggestionIn` or raises
:class:`SuggestionError` with one line naming the field and the fix::

    >>> s = parse_suggestion({
    ...     "action": {"discount": 0.05, "push_hour": 20, "segment": "loyal", "budget": 30.0},
    ...     "reasoning": "loyal customers respond to small reminders", "confidence": 0.8, "risk": "low",
    ...     "evidence": {"predicted": {"profit": {"estimate": 12.0, "low": 3.0, "high": 20.0}}},
    ... })
    >>> classify_risk(s.action, s.evidence, s.confidence)
    'low'
    >>> try:
    ...     parse_suggestion({"action": {"discount": 0.7}, "reasoning": "x", "confidence": 1, "risk": "low"})
    ... except SuggestionError as e:
    ...     print(str(e)[:55])
    action.discount: discount=0.7 is outside [0, 0.5]: give

The proposer's risk claim is never trusted alone: the stored risk is
``effective_risk(claimed, classify_risk(...))``, the higher of the two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from transferlab.simulator.vocabulary import OUTCOME_KEYS, ActionError, CampaignAction

Risk = Literal["low", "medium", "high"]
RISKS: tuple[Risk, ...] = ("low", "medium", "high")
"""Risk tiers, lowest first."""

MAX_REASONING = 4000
MAX_PRODUCTS = 20
MAX_PRODUCT_CHARS = 64
MAX_TEXT = 500  # policy names, run directories, OPE estimator names
MAX_EXPIRES_HOURS = 24 * 30
MAX_ERROR = 600  # an error line never echoes a huge input


class ReviewError(Exception):
    """Base of every human-review error; ``str(e)`` is one clear line naming the fix."""


class SuggestionError(ReviewError, ValueError):
    """A malformed suggestion or action; the message names the field path and the fix."""


_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

#: How to fix each field, by its last path element (used in :class:`SuggestionError` messages).
_FIXES: dict[str, str] = {
    "action": "give an object with discount, push_hour, segment, budget (and optional category, products)",
    "discount": "give a fraction off list price in [0, 0.5], e.g. 0.1",
    "push_hour": "give an integer hour of the day, 0-23",
    "segment": "give 'all' or one of bargain, casual, loyal, premium",
    "budget": "give money for pushes in [0, 10000]",
    "category": "give 'all' or one of womenswear, menswear, shoes, accessories",
    "products": f"give at most {MAX_PRODUCTS} strings of at most {MAX_PRODUCT_CHARS} characters",
    "reasoning": f"give plain text of 1 to {MAX_REASONING} characters",
    "confidence": "give a number in [0, 1]",
    "risk": "give one of low, medium, high",
    "evidence": "give an object with optional predicted, ope, policy, run_dir",
    "predicted": f"give an object mapping outcome keys ({', '.join(OUTCOME_KEYS)}) to intervals",
    "estimate": "give a finite number with low <= estimate <= high",
    "low": "give a finite number with low <= estimate <= high",
    "high": "give a finite number with low <= estimate <= high",
    "ope": "give an object with estimator (str), estimate, low, high (numbers), trusted (bool); "
    "optional ess, ess_share, behaviour (numbers)",
    "policy": f"give a policy name of at most {MAX_TEXT} characters",
    "run_dir": f"give a run directory of at most {MAX_TEXT} characters",
    "expires_in_hours": f"give hours in (0, {MAX_EXPIRES_HOURS}]",
}


_CAMPAIGN_FIELDS = frozenset({"discount", "push_hour", "segment", "budget", "category"})


def _check_campaign_field(name: str, value: Any) -> Any:
    """Validate one campaign field with the simulator's own rules (the other fields at their defaults)."""
    if isinstance(value, str) and len(value) > 40:
        raise ValueError(f"{name} has {len(value)} characters, far longer than any valid {name}")
    try:
        CampaignAction(**{name: value})
    except ActionError as e:
        raise ValueError(str(e)) from None
    return value


class ActionSpec(BaseModel):
    """A campaign as a suggestion carries it; validated with ``simulator.market.validate_action``.

    Attributes:
        discount: fraction off list price in [0, 0.5].
        push_hour: hour of the day the push is sent, 0-23.
        segment: ``"all"`` or a CRM segment.
        budget: money for pushes, [0, 10000].
        category: ``"all"`` or a product category the discount applies to.
        products: free-text SKUs or notes for the reviewer (not sent to the market).
    """

    model_config = _STRICT

    discount: float
    push_hour: int
    segment: str
    budget: float
    category: str = "all"
    products: list[str] = Field(default_factory=list, max_length=MAX_PRODUCTS)

    @field_validator("discount", "push_hour", "segment", "budget", "category")
    @classmethod
    def _campaign_rules(cls, value: Any, info: Any) -> Any:
        return _check_campaign_field(info.field_name, value)

    @field_validator("products")
    @classmethod
    def _short_products(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            if len(item) > MAX_PRODUCT_CHARS:
                raise ValueError(f"products[{i}] has {len(item)} characters (max {MAX_PRODUCT_CHARS})")
        return value

    def to_campaign(self) -> CampaignAction:
        """The simulator's :class:`CampaignAction` (``products`` is for people, not the market)."""
        return CampaignAction(
            discount=self.discount,
            push_hour=self.push_hour,
            segment=self.segment,
            budget=self.budget,
            category=self.category,
        )


class Interval(BaseModel):
    """A predicted value with its uncertainty: ``low <= estimate <= high``, all finite."""

    model_config = _STRICT

    estimate: float
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Interval:
        if not self.low <= self.estimate <= self.high:
            raise ValueError(f"need low <= estimate <= high, got {self.low} / {self.estimate} / {self.high}")
        return self


_OPE_TYPES: dict[str, tuple[type, ...]] = {
    "estimator": (str,),
    "estimate": (int, float),
    "low": (int, float),
    "high": (int, float),
    "trusted": (bool,),
    "ess": (int, float),
    "ess_share": (int, float),
    "behaviour": (int, float),
}
_OPE_REQUIRED = ("estimator", "estimate", "low", "high", "trusted")


def _check_ope(ope: dict[str, Any]) -> dict[str, Any]:
    """The OPE summary: known keys, right types, finite numbers, low <= estimate <= high."""
    unknown = sorted(set(ope) - set(_OPE_TYPES))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}")
    missing = [k for k in _OPE_REQUIRED if k not in ope]
    if missing:
        raise ValueError(f"missing key(s) {missing}")
    for key, value in ope.items():
        types = _OPE_TYPES[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ValueError(f"{key}={value!r:.60} has the wrong type")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key}={value!r} is not finite")
    if len(ope["estimator"]) > MAX_TEXT:
        raise ValueError(f"estimator name is longer than {MAX_TEXT} characters")
    if not ope["low"] <= ope["estimate"] <= ope["high"]:
        raise ValueError("need low <= estimate <= high")
    return ope


class Evidence(BaseModel):
    """What the proposer bases the suggestion on.

    Attributes:
        predicted: the simulator's predicted outcome intervals, keyed by ``OUTCOME_KEYS``.
        uplift: the simulator's predicted difference in shop-wide totals over the campaign's window
            against a baseline (``"no_campaign"``: doing nothing; ``"current"``: what the shop's
            marketer does now), keyed by baseline, then by ``UPLIFT_KEYS``; paired on the same markets.
        ope: off-policy estimate ``{"estimator", "estimate", "low", "high", "trusted", "ess"}``,
            with ``"behaviour"`` (the logged policy's value on the same scale) when known.
        policy: the policy that proposed the action.
        run_dir: the run directory the evidence comes from.
    """

    model_config = _STRICT

    predicted: dict[str, Interval] = Field(default_factory=dict)
    uplift: dict[str, dict[str, Interval]] = Field(default_factory=dict)
    ope: dict[str, Any] | None = None
    policy: str | None = Field(default=None, max_length=MAX_TEXT)
    run_dir: str | None = Field(default=None, max_length=MAX_TEXT)

    @field_validator("predicted")
    @classmethod
    def _outcome_keys(cls, value: dict[str, Interval]) -> dict[str, Interval]:
        unknown = sorted(set(value) - set(OUTCOME_KEYS))
        if unknown:
            raise ValueError(f"unknown outcome key(s) {[k[:40] for k in unknown[:3]]}")
        return value

    @field_validator("ope")
    @classmethod
    def _ope(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _check_ope(value)

    @property
    def empty(self) -> bool:
        """No prediction and no off-policy estimate."""
        return not self.predicted and self.ope is None


class SuggestionIn(BaseModel):
    """A suggestion as submitted (by an agent or a person), before review."""

    model_config = _STRICT

    action: ActionSpec
    reasoning: str = Field(min_length=1, max_length=MAX_REASONING)
    confidence: float = Field(ge=0.0, le=1.0)
    risk: Risk
    evidence: Evidence = Field(default_factory=Evidence)
    expires_in_hours: float = Field(default=72.0, gt=0.0, le=MAX_EXPIRES_HOURS)

    @field_validator("reasoning")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reasoning is blank")
        return value


def classify_risk(action: ActionSpec, evidence: Evidence, confidence: float) -> Risk:
    """Our own risk tier for ``action``, whatever the proposer claimed.

    The first rule that matches wins:

    ======  ===========================================================================
    tier    when
    ======  ===========================================================================
    high    ``discount >= 0.2``
    high    ``budget >= 60`` and ``segment == "all"``
    high    the OPE estimate is untrusted (``evidence.ope["trusted"]`` is false)
    high    the predicted profit interval's ``low < 0``
    medium  ``discount >= 0.1``
    medium  ``budget >= 60``
    medium  ``confidence < 0.5``
    medium  no evidence (no predicted outcome and no OPE estimate)
    low     otherwise
    ======  ===========================================================================

    >>> a = ActionSpec(discount=0.3, push_hour=20, segment="loyal", budget=20.0)
    >>> classify_risk(a, Evidence(), 0.9)
    'high'
    """
    profit = evidence.predicted.get("profit")
    if (
        action.discount >= 0.2
        or (action.budget >= 60 and action.segment == "all")
        or (evidence.ope is not None and not evidence.ope.get("trusted", False))
        or (profit is not None and profit.low < 0)
    ):
        return "high"
    if action.discount >= 0.1 or action.budget >= 60 or confidence < 0.5 or evidence.empty:
        return "medium"
    return "low"


def effective_risk(claimed: Risk, ours: Risk) -> Risk:
    """The higher of the proposer's claim and our classification.

    >>> effective_risk("low", "high"), effective_risk("high", "medium")
    ('high', 'high')
    """
    return max(claimed, ours, key=RISKS.index)


def _describe(error: Mapping[str, Any]) -> str:
    """One line for one pydantic error: the field path, what is wrong, and how to fix it."""
    loc = [str(p) for p in error.get("loc", ())]
    path = ".".join(p if not p.isdigit() else f"[{p}]" for p in loc).replace(".[", "[") or "suggestion"
    kind = error.get("type", "")
    if kind == "missing":
        problem = "field required"
    elif kind == "extra_forbidden":
        problem = "unknown field; remove it"
    elif kind == "value_error":
        problem = str(error.get("ctx", {}).get("error", error.get("msg", "")))
    else:
        problem = str(error.get("msg", "invalid")).lower()
        if "input" in error and kind not in {"string_too_long", "too_long"}:
            problem += f" (got {error['input']!r:.60})"
    if kind == "extra_forbidden":
        return f"{path}: {problem}"
    named = [p for p in loc if not p.isdigit()]
    if kind == "value_error":  # our validators explain themselves; add a fix only for the field itself
        fix = _FIXES.get(named[-1], "") if named and named[-1] not in _CAMPAIGN_FIELDS else ""
    else:
        fix = next((_FIXES[p] for p in reversed(named) if p in _FIXES), "")
    return f"{path}: {problem}; {fix}" if fix else f"{path}: {problem}"


def suggestion_error(error: ValidationError, prefix: tuple[str, ...] = ()) -> SuggestionError:
    """Turn pydantic's :class:`ValidationError` into one :class:`SuggestionError` line."""
    errors = error.errors()
    if not errors:
        return SuggestionError("invalid suggestion")
    line = _describe({**errors[0], "loc": (*prefix, *errors[0]["loc"])})
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    line = line.replace("\n", " ")
    return SuggestionError(line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + "...")


def parse_suggestion(data: Mapping[str, Any]) -> SuggestionIn:
    """Validate untrusted ``data`` into a :class:`SuggestionIn`; :class:`SuggestionError` if malformed."""
    if not isinstance(data, Mapping):
        raise SuggestionError(f"a suggestion must be a JSON object, got {type(data).__name__}")
    try:
        return SuggestionIn.model_validate(dict(data))
    except ValidationError as e:
        raise suggestion_error(e) from None


def parse_action(data: Mapping[str, Any]) -> ActionSpec:
    """Validate a (modified) campaign; :class:`SuggestionError` names ``action.<field>`` and the fix."""
    if not isinstance(data, Mapping):
        raise SuggestionError(f"action must be a JSON object, got {type(data).__name__}")
    try:
        return ActionSpec.model_validate(dict(data))
    except ValidationError as e:
        raise suggestion_error(e, prefix=("action",)) from None

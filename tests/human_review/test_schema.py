"""Suggestion validation (one clear line per error) and our own risk classification."""

from __future__ import annotations

from typing import Any

import pytest

from transferlab.human_review.schema import (
    ActionSpec,
    Evidence,
    SuggestionError,
    classify_risk,
    effective_risk,
    parse_action,
    parse_suggestion,
)
from transferlab.simulator.vocabulary import CampaignAction


def valid() -> dict[str, Any]:
    return {
        "action": {
            "discount": 0.05,
            "push_hour": 20,
            "segment": "loyal",
            "budget": 30.0,
            "products": ["SKU-1"],
        },
        "reasoning": "<script>alert(1)</script> stays text",
        "confidence": 0.8,
        "risk": "low",
        "evidence": {"predicted": {"profit": {"estimate": 5.0, "low": 1.0, "high": 9.0}}, "policy": "cql"},
    }


def test_a_valid_suggestion_parses_and_keeps_reasoning_verbatim() -> None:
    s = parse_suggestion(valid())
    assert s.reasoning == "<script>alert(1)</script> stays text"
    assert s.expires_in_hours == 72
    assert s.action.to_campaign() == CampaignAction(discount=0.05, push_hour=20, segment="loyal", budget=30.0)
    assert s.evidence.predicted["profit"].low == 1.0


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("action", "discount"), 0.7, "action.discount: discount=0.7 is outside [0, 0.5]"),
        (("action", "discount"), "0.1", "action.discount: input should be a valid number"),
        (("action", "push_hour"), 24, "action.push_hour: push_hour=24 is outside 0-23"),
        (("action", "push_hour"), 20.0, "action.push_hour: input should be a valid integer"),
        (("action", "segment"), "vip", "action.segment: unknown segment 'vip'; use one of all, bargain"),
        (("action", "category"), "food", "action.category: unknown category 'food'"),
        (("action", "budget"), -1.0, "action.budget: budget=-1.0 is outside [0, 10000]"),
        (("action", "products"), ["x" * 65], "action.products: products[0] has 65 characters (max 64)"),
        (
            ("confidence",),
            1.5,
            "confidence: input should be less than or equal to 1 (got 1.5); give a number in [0, 1]",
        ),
        (("confidence",), float("nan"), "confidence: input should be a finite number"),
        (("confidence",), True, "confidence: input should be a valid number"),
        (("risk",), "none", "risk: input should be 'low', 'medium' or 'high'"),
        (("reasoning",), "", "reasoning: string should have at least 1 character"),
        (("reasoning",), "   ", "reasoning: reasoning is blank"),
        (("reasoning",), "x" * 4001, "reasoning: string should have at most 4000 characters"),
        (("expires_in_hours",), 0, "expires_in_hours: input should be greater than 0"),
        (
            ("evidence", "predicted"),
            {"gmv": {"estimate": 1.0, "low": 2.0, "high": 3.0}},
            "need low <= estimate",
        ),
        (
            ("evidence", "predicted"),
            {"likes": {"estimate": 1.0, "low": 0.0, "high": 3.0}},
            "unknown outcome key",
        ),
        (
            ("evidence", "ope"),
            {"estimator": "dr"},
            "evidence.ope: missing key(s) ['estimate', 'low', 'high', 'trusted']",
        ),
        (
            ("evidence", "ope"),
            {"estimator": "dr", "estimate": 1, "low": 0, "high": 2, "trusted": "yes"},
            "trusted",
        ),
        (("evidence", "zzz"), 1, "evidence.zzz: unknown field; remove it"),
        (("zzz",), 1, "zzz: unknown field; remove it"),
    ],
)
def test_errors_name_the_field_and_the_fix(path: tuple[str, ...], value: Any, message: str) -> None:
    data = valid()
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(SuggestionError) as info:
        parse_suggestion(data)
    text = str(info.value)
    assert text.startswith(message) or message in text, text
    assert "\n" not in text


def test_missing_fields_are_named_with_the_count_of_other_problems() -> None:
    with pytest.raises(
        SuggestionError, match=r"^action: field required; give an object .* \(and 1 more problem\)$"
    ):
        parse_suggestion({"reasoning": "x", "confidence": 0.5})
    with pytest.raises(SuggestionError, match="must be a JSON object"):
        parse_suggestion([1, 2])  # type: ignore[arg-type]


def test_suggestion_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_suggestion({})


def test_parse_action_prefixes_the_path() -> None:
    with pytest.raises(SuggestionError, match=r"^action\.discount: discount=0\.6"):
        parse_action({"discount": 0.6, "push_hour": 9, "segment": "all", "budget": 10.0})
    assert parse_action({"discount": 0.1, "push_hour": 9, "segment": "all", "budget": 10.0}).category == "all"


def spec(discount: float = 0.05, budget: float = 30.0, segment: str = "loyal") -> ActionSpec:
    return ActionSpec(discount=discount, push_hour=20, segment=segment, budget=budget)


GOOD = Evidence.model_validate({"predicted": {"profit": {"estimate": 5.0, "low": 1.0, "high": 9.0}}})
OPE_UNTRUSTED = Evidence.model_validate(
    {"ope": {"estimator": "ips", "estimate": 1.0, "low": -1.0, "high": 3.0, "trusted": False, "ess": 3.0}}
)
LOSS = Evidence.model_validate({"predicted": {"profit": {"estimate": 5.0, "low": -1.0, "high": 9.0}}})


@pytest.mark.parametrize(
    ("action", "evidence", "confidence", "expected"),
    [
        (spec(), GOOD, 0.9, "low"),
        (spec(discount=0.2), GOOD, 0.9, "high"),
        (spec(discount=0.19), GOOD, 0.9, "medium"),
        (spec(discount=0.1), GOOD, 0.9, "medium"),
        (spec(discount=0.09), GOOD, 0.9, "low"),
        (spec(budget=60.0, segment="all"), GOOD, 0.9, "high"),
        (spec(budget=60.0, segment="loyal"), GOOD, 0.9, "medium"),
        (spec(budget=59.0, segment="all"), GOOD, 0.9, "low"),
        (spec(), OPE_UNTRUSTED, 0.9, "high"),
        (spec(), LOSS, 0.9, "high"),
        (spec(), GOOD, 0.49, "medium"),
        (spec(), GOOD, 0.5, "low"),
        (spec(), Evidence(), 0.9, "medium"),
        (spec(), Evidence(policy="cql", run_dir="runs/x"), 0.9, "medium"),
    ],
)
def test_classify_risk_follows_the_table(
    action: ActionSpec, evidence: Evidence, confidence: float, expected: str
) -> None:
    assert classify_risk(action, evidence, confidence) == expected


def test_effective_risk_is_the_higher() -> None:
    assert effective_risk("low", "high") == "high"
    assert effective_risk("high", "low") == "high"
    assert effective_risk("medium", "low") == "medium"
    assert effective_risk("low", "low") == "low"

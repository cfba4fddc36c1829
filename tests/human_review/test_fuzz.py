"""Fuzzing submit: every malformed suggestion is refused with SuggestionError and nothing is stored."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transferlab.human_review.schema import parse_suggestion
from transferlab.human_review.service import SuggestionError
from transferlab.human_review.store import ReviewStore


def base() -> dict[str, Any]:
    return {
        "action": {
            "discount": 0.05,
            "push_hour": 20,
            "segment": "loyal",
            "budget": 30.0,
            "category": "all",
            "products": ["A"],
        },
        "reasoning": "small reminder",
        "confidence": 0.8,
        "risk": "low",
        "evidence": {
            "predicted": {"profit": {"estimate": 5.0, "low": 1.0, "high": 9.0}},
            "ope": {"estimator": "dr", "estimate": 1.0, "low": 0.5, "high": 1.5, "trusted": True, "ess": 9.0},
            "policy": "cql",
            "run_dir": "runs/a",
        },
        "expires_in_hours": 24.0,
    }


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_any = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
not_number = st.one_of(st.none(), st.text(max_size=10), st.lists(st.integers(), max_size=2), st.booleans())
not_text = st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.text(max_size=3), max_size=2))
out_of = {
    "discount": st.one_of(
        st.floats(min_value=0.5, exclude_min=True), st.floats(max_value=0, exclude_max=True)
    ),
    "push_hour": st.one_of(st.integers(min_value=24), st.integers(max_value=-1)),
    "budget": st.one_of(
        st.floats(min_value=10_000, exclude_min=True), st.floats(max_value=0, exclude_max=True)
    ),
    "confidence": st.one_of(
        st.floats(min_value=1, exclude_min=True), st.floats(max_value=0, exclude_max=True)
    ),
    "expires_in_hours": st.one_of(st.floats(max_value=0), st.floats(min_value=720, exclude_min=True)),
}
PATHS_NUMBER = [
    ("action", "discount"),
    ("action", "budget"),
    ("confidence",),
    ("expires_in_hours",),
    ("evidence", "predicted", "profit", "estimate"),
    ("evidence", "ope", "ess"),
]
PATHS_TEXT = [
    ("action", "segment"),
    ("action", "category"),
    ("reasoning",),
    ("risk",),
    ("evidence", "policy"),
]
REQUIRED = [
    ("action",),
    ("reasoning",),
    ("confidence",),
    ("risk",),
    ("action", "discount"),
    ("action", "push_hour"),
    ("action", "segment"),
    ("action", "budget"),
    ("evidence", "predicted", "profit", "low"),
    ("evidence", "ope", "trusted"),
]
HUGE = [
    (("reasoning",), 4001),
    (("action", "segment"), 5000),
    (("evidence", "policy"), 501),
    (("evidence", "run_dir"), 10_000),
    (("action", "products", 0), 65),
]


def put(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def drop(data: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    node = data
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return data


@st.composite
def malformed(draw: st.DrawFn) -> Any:
    """A suggestion that is wrong in one way (or several), never a valid one."""
    data = base()
    kind = draw(st.sampled_from(["json", "missing", "unknown", "type", "range", "huge", "interval", "top"]))
    if kind == "json":
        return draw(st.dictionaries(st.text(max_size=12), json_any, max_size=6))
    if kind == "top":
        return draw(st.one_of(st.lists(json_any, max_size=3), st.text(max_size=10), st.integers(), st.none()))
    if kind == "missing":
        return drop(data, draw(st.sampled_from(REQUIRED)))
    if kind == "unknown":
        where = draw(st.sampled_from([(), ("action",), ("evidence",), ("evidence", "ope")]))
        node = data
        for key in where:
            node = node[key]
        key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in node))
        node[key] = draw(json_any)
        return data
    if kind == "type":
        which = draw(st.sampled_from(["number", "text", "hour", "products", "evidence", "action"]))
        if which == "number":
            return put(data, draw(st.sampled_from(PATHS_NUMBER)), draw(not_number))
        if which == "text":
            return put(data, draw(st.sampled_from(PATHS_TEXT)), draw(not_text))
        if which == "hour":
            return put(data, ("action", "push_hour"), draw(st.one_of(not_number, st.floats())))
        if which == "products":
            return put(
                data,
                ("action", "products"),
                draw(st.one_of(st.text(max_size=5), st.lists(st.integers(), min_size=1))),
            )
        if which == "evidence":
            return put(
                data, ("evidence",), draw(st.one_of(st.text(max_size=5), st.integers(), st.lists(st.none())))
            )
        return put(data, ("action",), draw(st.one_of(st.none(), st.text(max_size=5), st.integers())))
    if kind == "range":
        field = draw(st.sampled_from(sorted(out_of)))
        path = ("action", field) if field in {"discount", "push_hour", "budget"} else (field,)
        return put(data, path, draw(out_of[field]))
    if kind == "huge":
        huge_path, size = draw(st.sampled_from(HUGE))
        return put(data, huge_path, "x" * draw(st.integers(min_value=size, max_value=size + 50_000)))
    low = draw(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9))
    estimate = draw(st.floats(max_value=low, exclude_max=True, allow_nan=False, min_value=-1e12))
    return put(data, ("evidence", "predicted", "profit"), {"estimate": estimate, "low": low, "high": low + 1})


def test_the_base_suggestion_is_valid() -> None:
    assert parse_suggestion(base()).confidence == 0.8


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=malformed())
def test_malformed_suggestions_are_refused_and_nothing_is_stored(
    data: Any, team: Any, store: ReviewStore, count_rows: Callable[[ReviewStore], dict[str, int]]
) -> None:
    before = count_rows(store)
    with pytest.raises(SuggestionError) as info:
        team.svc.submit(team.reviewer, copy.deepcopy(data))
    message = str(info.value)
    assert message and "\n" not in message and len(message) < 1000
    assert count_rows(store) == before


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(value: float) -> None:
    for path in PATHS_NUMBER:
        with pytest.raises(SuggestionError):
            parse_suggestion(put(base(), path, value))

"""The review app's view logic: rows, diffs, evidence, safe CSV export, predicted vs real."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from transferlab.human_review import views
from transferlab.human_review.service import AuditRow

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def test_action_diff_lists_only_changed_fields_in_order() -> None:
    old = {"discount": 0.1, "push_hour": 20, "segment": "loyal", "budget": 30.0, "products": []}
    new = {**old, "budget": 40.0, "segment": "all", "products": ["sku-1"]}
    assert views.action_diff(old, new) == [
        {"field": "segment", "before": "loyal", "after": "all"},
        {"field": "budget", "before": 30.0, "after": 40.0},
        {"field": "products", "before": [], "after": ["sku-1"]},
    ]
    assert views.action_diff(old, dict(old)) == []


@pytest.mark.parametrize("bad", ["=1+1", "+1", "-1+2", "@SUM(A1)", "\tx", "\rx", '=HYPERLINK("x")'])
def test_safe_cell_neutralises_formulas(bad: str) -> None:
    assert views.safe_cell(bad) == "'" + bad


def test_safe_cell_leaves_plain_text_and_numbers() -> None:
    assert views.safe_cell("approved") == "approved"
    assert views.safe_cell(-3) == -3
    assert views.safe_cell("") == ""


def _audit(reason: str, actor: str = "rita") -> AuditRow:
    return AuditRow(
        1, 7, actor, T0, "pending", "rejected", {"state": "pending"}, {"state": "rejected"}, reason
    )


def test_audit_csv_escapes_every_formula_cell_and_round_trips() -> None:
    rows = [_audit("=cmd|' /C calc'!A0", actor="@evil"), _audit("fine, with a comma")]
    parsed = list(csv.reader(io.StringIO(views.audit_csv(rows).decode("utf-8"))))
    assert parsed[0] == ["id", "suggestion", "actor", "at", "from", "to", "reason", "before", "after"]
    assert parsed[1][2] == "'@evil" and parsed[1][6] == "'=cmd|' /C calc'!A0"
    assert parsed[2][6] == "fine, with a comma"
    for row in parsed[1:]:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row)


def test_queue_filters_map_all_to_none_and_refuse_unknown() -> None:
    assert views.queue_filters("all", "high", "expiry") == {"state": None, "risk": "high", "sort": "expiry"}
    with pytest.raises(ValueError, match="unknown risk filter"):
        views.queue_filters("pending", "huge", "risk")


def test_parse_id() -> None:
    assert [views.parse_id(x) for x in ("7", ["3"], None, "x", "-1", "")] == [7, 3, None, None, None, None]


def test_pages_and_decisions_by_role() -> None:
    assert views.pages_for("viewer") == ["queue", "suggestion", "executed", "audit", "results"]
    assert not views.can_decide("viewer")
    assert all(views.can_decide(r) for r in ("reviewer", "approver", "admin"))


def test_rows_from_the_real_service(
    team: Any, clock: Any, make_suggestion: Callable[..., dict[str, Any]]
) -> None:
    svc = team.svc
    low = svc.submit(team.reviewer2, make_suggestion())
    high = svc.submit(team.reviewer2, make_suggestion(discount=0.3))
    mine = svc.submit(team.reviewer, make_suggestion())
    items = svc.list(team.viewer, **views.queue_filters("pending", "all", "risk"))
    rows = views.queue_rows(items, clock.now + timedelta(hours=2))
    assert [r["id"] for r in rows] == [high, low, mine]  # high risk first
    assert rows[0]["hours left"] == 70.0
    assert rows[1]["action"] == "5% off all, push 20h, segment loyal, budget 30"
    assert views.batch_candidates(items, team.reviewer.name) == [low]  # not high risk, not own

    svc.decide(team.reviewer, low, "modify", action={**svc.get(team.admin, low).action, "budget": 40.0})
    claim = svc.claim(team.admin, "w")
    assert claim is not None
    svc.complete(claim, {"key": claim.idempotency_key, "campaign_id": 9, "day": 4, "action": claim.action})
    executed = views.executed_rows([svc.get(team.viewer, low)])
    assert executed[0]["campaign"] == 9 and executed[0]["outcome"] == "matures later"
    svc.record_feedback(low, {"profit": 25.0, "orders": 3.0}, source="market")
    view = svc.get(team.viewer, low)
    results = views.results_rows([view])
    assert results == [
        {
            "id": low,
            "metric": "profit",
            "predicted": 12.0,
            "low": 3.0,
            "high": 20.0,
            "real": 25.0,
            "error": 13.0,
            "inside interval": False,
        }
    ]
    assert views.results_summary(results) == [
        {"metric": "profit", "n": 1, "mean abs error": 13.0, "coverage": 0.0}
    ]
    assert views.evidence_rows(view.evidence) == [
        {"metric": "profit", "estimate": 12.0, "low": 3.0, "high": 20.0}
    ]
    assert views.ope_summary(view.evidence) == {
        "estimator": "dr",
        "estimate": 1.0,
        "low": 0.5,
        "high": 1.5,
        "covered": True,
        "ess": 80.0,
        "ess_share": None,
        "behaviour": None,
    }
    assert views.ope_summary({}) is None
    audit = views.audit_rows(svc.audit(team.viewer, low))
    assert [a["to"] for a in audit] == ["pending", "modified", "executing", "executed", "feedback_received"]
    assert views.current_user(svc, "rita") == team.reviewer
    assert views.current_user(svc, "nobody") is None and views.current_user(svc, None) is None


def test_audit_rows_and_csv_show_control_characters_escaped() -> None:
    forged = "ok\n2025-03-01T09:00:00+00:00  ada: pending -> approved\x1b[8m"
    rows = views.audit_rows([_audit(forged, actor="worker:w1\rada")])
    assert rows[0]["reason"] == "ok\\n2025-03-01T09:00:00+00:00  ada: pending -> approved\\x1b[8m"
    assert rows[0]["actor"] == "worker:w1\\rada"
    lines = views.audit_csv([_audit(forged)]).decode("utf-8").splitlines()
    assert len(lines) == 2 and "\x1b" not in lines[1]  # header and one row, whatever the reason holds


EVIDENCE = {
    "predicted": {
        "satisfaction": {"estimate": 0.9, "low": 0.82, "high": 0.97},
        "profit": {"estimate": 99.11, "low": 65.85, "high": 142.23},
    },
    "uplift": {"current": {"profit": {"estimate": -3.0, "low": -12.5, "high": 4.0}}},
    "ope": {
        "estimator": "sndr",
        "estimate": 4.29,
        "low": 1.82,
        "high": 9.6,
        "trusted": False,
        "ess": 4.4,
        "ess_share": 0.0122,
        "behaviour": 3.9,
    },
}


def test_evidence_table_puts_profit_first_with_units_and_both_uplifts() -> None:
    assert views.evidence_table(EVIDENCE) == [
        {
            "outcome": "profit ($)",
            "predicted for this campaign": "99.1 [65.8, 142.2]",
            "vs doing nothing": "—",
            "vs what the shop does now": "-3.00 [-12.5, +4.00]",
        },
        {
            "outcome": "satisfaction (0-1)",
            "predicted for this campaign": "0.90 [0.82, 0.97]",
            "vs doing nothing": "—",
            "vs what the shop does now": "—",
        },
    ]
    assert views.evidence_table({}) == []


def test_ope_words_say_the_verdict_the_behaviour_value_and_a_rounded_ess() -> None:
    words = views.ope_words(EVIDENCE)
    assert words is not None
    assert words.startswith("Off-policy estimate (SNDR) of the policy's 30-day return: 4.29 [1.82, 9.60]")
    assert "against 3.90 for what the shop does now" in words
    assert "NOT trusted (effective sample size about 4, 1% of the logged days)" in words
    trusted = {**EVIDENCE, "ope": {**EVIDENCE["ope"], "trusted": True, "ess": 165.6, "ess_share": 0.46}}
    assert "Coverage: trusted (effective sample size about 166, 46% of the logged days)" in str(
        views.ope_words(trusted)
    )
    assert views.ope_words({"ope": None}) is None


def test_the_exact_line_spans_every_value_of_its_metric() -> None:
    import doctest

    from transferlab.human_review import views as views_module

    rows = [
        {"metric": "profit", "predicted": 9.5, "low": 2.0, "high": 15.0, "real": 16.0},
        {"metric": "profit", "predicted": -1.0, "low": -4.0, "high": 2.5, "real": 0.0},
        {"metric": "orders", "predicted": 3.0, "low": 3.0, "high": 3.0, "real": 3.0},
    ]
    line = views_module.exact_line(rows)
    assert line == [
        {"metric": "profit", "exact": -4.0},
        {"metric": "profit", "exact": 16.0},
        {"metric": "orders", "exact": 3.0},
        {"metric": "orders", "exact": 3.0},
    ]
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for test in finder.find(
        views_module.exact_line, "exact_line", globs={"exact_line": views_module.exact_line}
    ):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0

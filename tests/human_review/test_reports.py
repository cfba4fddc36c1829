"""Ops analysis reports to rate: the store and service, queueing real episodes, agreement."""

from __future__ import annotations

from typing import Any

import pytest

from transferlab.human_review.reports import (
    human_rewards,
    queue_ops_reports,
    rated_reports,
    report_text,
    rubric_vs_human,
)
from transferlab.human_review.service import NotFound, PermissionDenied, ReviewError, report_subject
from transferlab.simulator.ops import seed_of
from transferlab.simulator.ops.grader import human_report_reward

QUESTION = "Find why sales of shoes fell in the last 30 days."


def _add(team: Any, rubric: float | None, text: str = "a stock-out", source: str = "expert") -> int:
    return int(team.svc.add_report(team.approver, "ops-0001", QUESTION, text, rubric, source))


def test_add_report_and_read_it_back(team: Any) -> None:
    rid = _add(team, 7.5, text="  Shoes fell because of a stock-out: 0 units for 9 days.  ")
    report = team.svc.report(team.viewer, rid)
    assert (report.task_id, report.question, report.rubric_score, report.source) == (
        "ops-0001",
        QUESTION,
        7.5,
        "expert",
    )
    assert report.text == "Shoes fell because of a stock-out: 0 units for 9 days."
    assert report.created_by == "alma" and report.created_at.tzinfo is not None
    assert report.subject == report_subject(rid) == f"report-{rid}"
    ungraded = _add(team, None, source="policy:grpo")
    assert team.svc.report(team.admin, ungraded).rubric_score is None
    assert [r.id for r in team.svc.reports(team.viewer)] == [rid, ungraded]


@pytest.mark.parametrize(
    ("text", "rubric", "source", "message"),
    [
        ("   ", 5.0, "expert", "report text is empty"),
        ("ok", 10.5, "expert", "from 0 to 10"),
        ("ok", -1, "expert", "from 0 to 10"),
        ("ok", True, "expert", "from 0 to 10"),
        ("ok", 5.0, "", "source"),
    ],
)
def test_add_report_validation(
    team: Any, count_rows: Any, text: str, rubric: Any, source: str, message: str
) -> None:
    with pytest.raises(ReviewError, match=message):
        team.svc.add_report(team.reviewer, "ops-0001", QUESTION, text, rubric, source)
    assert count_rows(team.svc.store)["reports"] == 0


def test_report_roles_and_missing_ids(team: Any) -> None:
    with pytest.raises(PermissionDenied, match="adding reports needs the reviewer role"):
        team.svc.add_report(team.viewer, "ops-0001", QUESTION, "a stock-out", 5.0, "expert")
    with pytest.raises(NotFound, match="no report 42"):
        team.svc.report(team.viewer, 42)


def test_reports_unrated_by_a_reviewer(team: Any, make_suggestion: Any) -> None:
    a, b, c = (_add(team, s) for s in (1.0, 5.0, 9.0))
    team.svc.rate(team.reviewer, report_subject(a), 3)
    team.svc.rate(team.reviewer2, report_subject(b), 6)
    suggestion = [team.svc.submit(team.reviewer2, make_suggestion()) for _ in range(c)][-1]
    assert suggestion == c
    team.svc.rate(team.reviewer, f"suggestion-{c}", 6)  # another subject: c stays unrated
    assert [r.id for r in team.svc.reports(team.reviewer, unrated_by=team.reviewer)] == [b, c]
    assert [r.id for r in team.svc.reports(team.reviewer, unrated_by=team.reviewer2)] == [a, c]
    assert [r.id for r in team.svc.reports(team.viewer, unrated_by=team.viewer)] == [a, b, c]


def test_rubric_vs_human_matches_a_hand_computed_spearman(team: Any) -> None:
    a, b, c = (_add(team, s) for s in (2.0, 5.0, 9.0))
    unrated = _add(team, 4.0)
    ungraded = _add(team, None)
    assert rubric_vs_human(team.svc, team.admin) is None  # nothing rated yet
    team.svc.rate(team.reviewer, report_subject(a), 3)
    assert rubric_vs_human(team.svc, team.admin) is None  # one rated report is not enough
    team.svc.rate(team.reviewer, report_subject(b), 8)
    team.svc.rate(team.reviewer2, report_subject(b), 6)  # mean 7
    team.svc.rate(team.reviewer, report_subject(c), 6)
    team.svc.rate(team.reviewer, report_subject(ungraded), 10)  # no rubric score: not paired
    with pytest.raises(NotFound, match="there is no report report-999"):
        team.svc.rate(team.reviewer, "report-999", 1)  # no such report: refused, nothing stored
    # rubric (2, 5, 9) ranks (1, 2, 3); human (3, 7, 6) ranks (1, 3, 2): d^2 sums to 2,
    # rho = 1 - 6 * 2 / (3 * (9 - 1)) = 0.5; |diff| = (1, 2, 3), mean 2.
    agreement = rubric_vs_human(team.svc, team.viewer)
    assert agreement is not None
    assert agreement.n == 3
    assert agreement.spearman == pytest.approx(0.5)
    assert agreement.mean_abs_diff == pytest.approx(2.0)
    assert [(r.report.id, r.human, r.n_ratings) for r in rated_reports(team.svc, team.viewer)] == [
        (a, 3.0, 1),
        (b, 7.0, 2),
        (c, 6.0, 1),
    ]
    assert unrated not in {r.report.id for r in rated_reports(team.svc, team.viewer)}
    rewards = human_rewards(team.svc, team.viewer)
    assert ("report-999", 0.1) not in rewards
    assert human_report_reward(rewards, report_subject(b)) == pytest.approx(
        human_report_reward([("x", 0.7)], "x")
    )


def test_queue_ops_reports_stores_real_rubric_scores(team: Any) -> None:
    from transferlab.simulator.ops import rubric_score, scenario

    ids = queue_ops_reports(team.svc, team.reviewer, n_tasks=2, seed=0)
    reports = [team.svc.report(team.viewer, i) for i in ids]
    assert {r.source for r in reports} == {"expert", "random"}
    assert len({r.task_id for r in reports}) == 2
    for r in reports:
        task = scenario(seed_of(r.task_id)).task
        assert task.split == "validation" and r.question == task.question
        if r.source == "expert":  # 10 with what its episode retrieved; the same text alone cites nothing
            assert r.rubric_score == 10.0 and rubric_score(task, r.text).total < 8.0
    expert = [r.rubric_score or 0.0 for r in reports if r.source == "expert"]
    random = [r.rubric_score or 0.0 for r in reports if r.source == "random"]
    assert len(expert) == 2 and random
    assert min(expert) > max(random)


def test_queue_ops_reports_refuses_bad_arguments(team: Any) -> None:
    with pytest.raises(ReviewError, match="unknown agents"):
        queue_ops_reports(team.svc, team.reviewer, n_tasks=1, agents=("oracle",))
    with pytest.raises(ReviewError, match="at least 1"):
        queue_ops_reports(team.svc, team.reviewer, n_tasks=0)
    with pytest.raises(PermissionDenied):
        queue_ops_reports(team.svc, team.viewer, n_tasks=1)


def test_report_text_takes_only_final_reports() -> None:
    assert report_text('{"action": "generate_report", "text": "late deliveries"}') == "late deliveries"
    assert report_text('{"action": "generate_report", "text": ""}') is None
    assert report_text('{"action": "query_sales", "days": 30}') is None
    assert report_text("not json") is None


def test_page_views_hide_the_rubric_and_keep_own_ratings(team: Any, make_suggestion: Any) -> None:
    from transferlab.human_review import views

    a, b = _add(team, 9.5), _add(team, 1.0, text="late deliveries")
    card = views.report_card(team.svc.report(team.viewer, a))
    assert card == {"heading": f"Report #{a} (ops-0001)", "question": QUESTION, "text": "a stock-out"}
    team.svc.rate(team.reviewer, report_subject(a), 8, "right cause")
    team.svc.rate(team.reviewer2, report_subject(b), 2)
    assert team.svc.submit(team.reviewer2, make_suggestion()) == 1
    team.svc.rate(team.reviewer, "suggestion-1", 5)
    rows = views.own_rating_rows(team.svc.ratings(team.viewer), team.svc.reports(team.viewer), "rita")
    assert [(r["report"], r["score"], r["comment"]) for r in rows] == [(a, 8.0, "right cause")]
    assert views.pages_for("viewer") == ["queue", "suggestion", "executed", "audit", "results"]
    assert views.pages_for("reviewer")[-1] == "reports"

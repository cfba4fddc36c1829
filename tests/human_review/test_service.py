"""ReviewService on SQLite and PostgreSQL: state machine, permissions, audit, expiry, exactly-once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from transferlab.human_review.auth import MIN_PASSWORD_LENGTH
from transferlab.human_review.service import (
    MAX_FAILED_SIGN_INS,
    TRANSITIONS,
    AuthError,
    InvalidTransition,
    NotFound,
    PermissionDenied,
    ReviewError,
    ReviewService,
    SignInThrottled,
    SuggestionError,
    check_transition,
)
from transferlab.human_review.store import AuditEntry, RatingRow, ReviewStore
from transferlab.simulator.vocabulary import CampaignAction

Make = Callable[..., dict[str, Any]]


# ---------------------------------------------------------------------------------------------------
# users
# ---------------------------------------------------------------------------------------------------


def test_first_user_must_be_admin_and_later_users_need_an_admin(store: ReviewStore) -> None:
    svc = ReviewService(store)
    with pytest.raises(PermissionDenied, match="the first user must be an admin"):
        svc.add_user(None, "eve", "password1", "reviewer")
    admin = svc.add_user(None, "ada", "password1", "admin")
    with pytest.raises(PermissionDenied, match="needs an admin actor"):
        svc.add_user(None, "eve", "password1", "admin")
    rita = svc.add_user(admin, "rita", "password1", "reviewer")
    with pytest.raises(PermissionDenied, match="rita is a reviewer; adding users needs the admin role"):
        svc.add_user(rita, "eve", "password1", "viewer")
    with pytest.raises(ReviewError, match="user 'rita' exists already"):
        svc.add_user(admin, "rita", "password1", "viewer")
    with pytest.raises(ReviewError, match="unknown role"):
        svc.add_user(admin, "eve", "password1", "boss")  # type: ignore[arg-type]


def test_authenticate(store: ReviewStore) -> None:
    svc = ReviewService(store)
    admin = svc.add_user(None, "ada", "right-password", "admin")
    assert svc.authenticate("ada", "right-password") == admin
    for name, password in [("ada", "wrong"), ("nobody", "right-password")]:
        with pytest.raises(AuthError, match=r"^unknown user or wrong password"):
            svc.authenticate(name, password)


def test_user_lookup_and_clock(store: ReviewStore) -> None:
    svc = ReviewService(store)
    admin = svc.add_user(None, "ada", "pass-word-a", "admin")
    svc.add_user(admin, "bob", "pass-word-b", "reviewer")
    bob = svc.user("bob")
    assert bob is not None and (bob.name, bob.role) == ("bob", "reviewer")
    svc.set_role(admin, "bob", "approver")
    assert svc.user("bob").role == "approver"  # type: ignore[union-attr]
    assert svc.user("nobody") is None
    assert svc.now().tzinfo is not None


def test_roles_are_reread_from_the_store(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    svc.set_role(team.admin, "rita", "viewer")
    with pytest.raises(PermissionDenied, match="rita is a viewer"):
        svc.submit(team.reviewer, make_suggestion())  # the stale User still says reviewer
    ghost = type(team.reviewer)(id=999, name="ghost", role="admin", created_at=team.reviewer.created_at)
    with pytest.raises(AuthError, match="unknown user 'ghost'"):
        svc.list(ghost)


# ---------------------------------------------------------------------------------------------------
# submit, list, risk
# ---------------------------------------------------------------------------------------------------


def test_submit_stores_risk_recomputed_and_reasoning_as_given(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = svc.submit(team.reviewer, make_suggestion(discount=0.3, risk="low"))
    view = svc.get(team.viewer, sid)
    assert (view.state, view.claimed_risk, view.risk) == ("pending", "low", "high")
    assert view.reasoning == "loyal customers answer small reminders <b>well</b>"
    assert view.idempotency_key == f"{svc.store.store_id}:suggestion-{sid}"
    assert view.executions == 0 and view.original_action is None
    assert (view.expires_at - view.created_at).total_seconds() == 72 * 3600
    assert view.created_at.tzinfo is not None
    assert view.to_dict()["created_at"].endswith("+00:00")
    assert svc.get(team.viewer, svc.submit(team.reviewer, make_suggestion(risk="high"))).risk == "high"


def test_viewer_cannot_submit_and_malformed_is_refused(team: Any, make_suggestion: Make) -> None:
    with pytest.raises(PermissionDenied, match="vic is a viewer; submitting suggestions needs the reviewer"):
        team.svc.submit(team.viewer, make_suggestion())
    with pytest.raises(SuggestionError, match=r"action.discount"):
        team.svc.submit(team.reviewer, make_suggestion(discount=0.9))
    assert team.svc.list(team.viewer) == []


def test_list_filters_and_sorts(team: Any, clock: Any, make_suggestion: Make) -> None:
    svc, r = team.svc, team.reviewer
    low = svc.submit(r, make_suggestion(expires_in_hours=10))
    clock.advance(minutes=1)
    high = svc.submit(r, make_suggestion(discount=0.25, expires_in_hours=50))
    clock.advance(minutes=1)
    medium = svc.submit(r, make_suggestion(discount=0.1, expires_in_hours=5))
    assert [v.id for v in svc.list(team.viewer)] == [high, medium, low]
    assert [v.id for v in svc.list(team.viewer, sort="expiry")] == [medium, low, high]
    assert [v.id for v in svc.list(team.viewer, sort="created")] == [low, high, medium]
    assert [v.id for v in svc.list(team.viewer, risk="medium")] == [medium]
    svc.decide(team.reviewer2, low, "approve")
    assert [v.id for v in svc.list(team.viewer, state="approved")] == [low]
    assert svc.pending_count(team.viewer) == 2
    with pytest.raises(ReviewError, match="unknown state 'done'"):
        svc.list(team.viewer, state="done")
    with pytest.raises(NotFound, match="no suggestion 12345"):
        svc.get(team.viewer, 12345)


# ---------------------------------------------------------------------------------------------------
# decisions and permissions
# ---------------------------------------------------------------------------------------------------


def test_approve_reject_happy_paths(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    a = svc.submit(team.reviewer, make_suggestion())
    b = svc.submit(team.reviewer, make_suggestion())
    view = svc.decide(team.reviewer2, a, "approve", reason="fine")
    assert (view.state, view.decided_by, view.reason) == ("approved", "rob", "fine")
    view = svc.decide(team.reviewer2, b, "reject", reason="  too early in the season ")
    assert (view.state, view.reason) == ("rejected", "too early in the season")


def test_permissions(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    high = svc.submit(team.reviewer, make_suggestion(discount=0.3))
    with pytest.raises(PermissionDenied, match="vic is a viewer; deciding"):
        svc.decide(team.viewer, high, "reject", reason="no")
    with pytest.raises(PermissionDenied, match="rob is a reviewer; approving high risk needs the approver"):
        svc.decide(team.reviewer2, high, "approve")
    own = svc.submit(team.approver, make_suggestion(discount=0.3))
    with pytest.raises(PermissionDenied, match=r"alma submitted suggestion .*; someone else must approve it"):
        svc.decide(team.approver, own, "approve")
    with pytest.raises(PermissionDenied, match="alma submitted"):
        svc.decide(team.approver, own, "modify", action={**make_suggestion()["action"], "discount": 0.2})
    assert svc.decide(team.approver, high, "approve").state == "approved"
    assert svc.decide(team.approver2, own, "approve").state == "approved"
    assert (
        svc.decide(team.admin, svc.submit(team.reviewer, make_suggestion(discount=0.3)), "approve").decided_by
        == "ada"
    )


def test_reject_needs_a_reason(team: Any, make_suggestion: Make) -> None:
    sid = team.svc.submit(team.reviewer, make_suggestion())
    for reason in (None, "", "   "):
        with pytest.raises(ReviewError, match="a rejection reason is required"):
            team.svc.decide(team.reviewer2, sid, "reject", reason=reason)
    assert team.svc.get(team.viewer, sid).state == "pending"


def test_modify_keeps_both_versions_and_reclassifies(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = svc.submit(team.reviewer, make_suggestion())
    original = svc.get(team.viewer, sid).action
    riskier = {**original, "discount": 0.3}
    with pytest.raises(PermissionDenied, match="rob is a reviewer; approving high risk needs the approver"):
        svc.decide(team.reviewer2, sid, "modify", action=riskier)
    with pytest.raises(SuggestionError, match=r"^action\.discount: discount=0\.6"):
        svc.decide(team.approver, sid, "modify", action={**original, "discount": 0.6})
    with pytest.raises(ReviewError, match="equals the original"):
        svc.decide(team.approver, sid, "modify", action=original)
    view = svc.decide(team.approver, sid, "modify", action=riskier, reason="deeper cut for the clearance")
    assert (view.state, view.risk, view.original_action, view.action) == (
        "modified",
        "high",
        original,
        riskier,
    )
    safer = svc.submit(team.reviewer, make_suggestion(discount=0.15))
    view = svc.decide(team.reviewer2, safer, "modify", action={**original, "discount": 0.02})
    assert (view.state, view.risk) == ("modified", "low")


def test_every_refused_transition(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = svc.submit(team.reviewer, make_suggestion())
    svc.decide(team.reviewer2, sid, "reject", reason="no")
    for decision, kwargs in [("approve", {}), ("reject", {"reason": "x"}), ("modify", {"action": {}})]:
        if decision == "modify":
            kwargs = {"action": {**make_suggestion()["action"], "discount": 0.01}}
        with pytest.raises(
            InvalidTransition, match=r"is rejected and cannot become .*rejected is final.*pending"
        ):
            svc.decide(team.reviewer2, sid, decision, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidTransition, match="is rejected and cannot become feedback_received"):
        svc.record_feedback(sid, {"profit": 1.0}, "market")
    # the whole table: anything not listed is refused with a message naming the allowed targets
    states = list(TRANSITIONS)
    for current in states:
        for target in states:
            if target in TRANSITIONS[current]:
                check_transition(1, current, target)
            else:
                with pytest.raises(
                    InvalidTransition, match=f"suggestion 1 is {current} and cannot become {target}"
                ):
                    check_transition(1, current, target)


def test_unknown_decision_and_stray_action(team: Any, make_suggestion: Make) -> None:
    sid = team.svc.submit(team.reviewer, make_suggestion())
    with pytest.raises(ReviewError, match="unknown decision 'escalate'"):
        team.svc.decide(team.reviewer2, sid, "escalate")
    with pytest.raises(ReviewError, match="use decision='modify'"):
        team.svc.decide(team.reviewer2, sid, "approve", action={"discount": 0.1})
    with pytest.raises(ReviewError, match="modify needs the changed action"):
        team.svc.decide(team.reviewer2, sid, "modify")


def test_batch_approval_refuses_high_risk_and_reports_why(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    ok = svc.submit(team.reviewer, make_suggestion())
    high = svc.submit(team.reviewer, make_suggestion(discount=0.3))
    own = svc.submit(team.approver, make_suggestion())
    done = svc.submit(team.reviewer, make_suggestion())
    svc.decide(team.reviewer2, done, "reject", reason="no")
    result = svc.approve_batch(team.approver, [ok, high, own, done, 9999, ok])
    assert result[ok] == "approved"
    assert result[high].startswith("refused: high risk")
    assert result[own].startswith("refused: alma submitted")
    assert result[done].startswith("refused: suggestion") and "rejected" in result[done]
    assert result[9999] == "refused: not found"
    assert svc.get(team.viewer, high).state == "pending"
    with pytest.raises(PermissionDenied):
        svc.approve_batch(team.viewer, [high])


# ---------------------------------------------------------------------------------------------------
# audit
# ---------------------------------------------------------------------------------------------------


def test_audit_appends_one_row_per_transition_and_rows_never_change(
    team: Any, store: ReviewStore, make_suggestion: Make
) -> None:
    svc = team.svc
    sid = svc.submit(team.reviewer, make_suggestion())
    svc.decide(
        team.approver, sid, "modify", action={**make_suggestion()["action"], "discount": 0.08}, reason="r"
    )
    claim = svc.claim(team.admin, "w1")
    assert claim is not None
    svc.complete(claim, {"campaign_id": 3})
    svc.record_feedback(sid, {"profit": 4.5, "gmv": 100}, "market")
    rows = svc.audit(team.viewer, sid)
    assert [(r.from_state, r.to_state) for r in rows] == [
        (None, "pending"),
        ("pending", "modified"),
        ("modified", "executing"),
        ("executing", "executed"),
        ("executed", "feedback_received"),
    ]
    assert [r.actor for r in rows] == ["rita", "alma", "worker:w1", "worker:w1", "market"]
    modified = rows[1]
    assert modified.before is not None and modified.before["action"]["discount"] == 0.05
    assert modified.after["action"]["discount"] == 0.08 and modified.reason == "r"
    assert all(r.at.tzinfo is not None for r in rows)
    first = [r.to_dict() for r in rows]
    # later activity only appends
    other = svc.submit(team.reviewer, make_suggestion())
    assert [r.to_dict() for r in svc.audit(team.viewer, sid)] == first
    assert len(svc.audit(team.viewer)) == 6 and svc.audit(team.viewer)[-1].suggestion_id == other
    # and the database refuses to change or delete them
    for statement in (sa.update(AuditEntry).values(reason="edited"), sa.delete(AuditEntry)):
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as connection:
            connection.execute(statement)
    with pytest.raises(ValueError, match="append-only"), store.session() as s:
        s.scalars(sa.select(AuditEntry)).first().reason = "edited"  # type: ignore[union-attr]
    assert [r.to_dict() for r in svc.audit(team.viewer, sid)] == first


# ---------------------------------------------------------------------------------------------------
# expiry
# ---------------------------------------------------------------------------------------------------


def test_expiry(team: Any, clock: Any, make_suggestion: Make) -> None:
    svc = team.svc
    soon = svc.submit(team.reviewer, make_suggestion(expires_in_hours=1))
    later = svc.submit(team.reviewer, make_suggestion(expires_in_hours=5))
    decided = svc.submit(team.reviewer, make_suggestion(expires_in_hours=1))
    svc.decide(team.reviewer2, decided, "approve")
    assert svc.expire_due() == 0
    clock.advance(hours=1)
    with pytest.raises(InvalidTransition, match="expired at"):
        svc.decide(team.reviewer2, soon, "approve")
    assert svc.expire_due() == 1
    assert [svc.get(team.viewer, i).state for i in (soon, later, decided)] == [
        "expired",
        "pending",
        "approved",
    ]
    assert svc.audit(team.viewer, soon)[-1].actor == "system"
    assert svc.expire_due() == 0


# ---------------------------------------------------------------------------------------------------
# exactly-once execution
# ---------------------------------------------------------------------------------------------------


def approved(team: Any, make_suggestion: Make, **kwargs: Any) -> int:
    sid = int(team.svc.submit(team.reviewer, make_suggestion(**kwargs)))
    team.svc.decide(team.approver, sid, "approve")
    return sid


def test_two_claims_only_one_gets_it(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = approved(team, make_suggestion)
    first = svc.claim(team.admin, "w1")
    assert first is not None and first.suggestion_id == sid and first.attempt == 1
    assert CampaignAction.from_dict(first.action).discount == 0.05
    assert first.idempotency_key == f"{svc.store.store_id}:suggestion-{sid}"
    assert svc.claim(team.admin, "w2") is None
    view = svc.get(team.viewer, sid)
    assert (view.state, view.worker, view.attempt) == ("executing", "w1", 1)


def test_concurrent_claims_hand_each_suggestion_to_one_worker(
    team: Any, store: ReviewStore, clock: Any, make_suggestion: Make
) -> None:
    ids = {approved(team, make_suggestion) for _ in range(8)}
    won: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def work(name: str) -> None:
        own = ReviewStore(store.url)  # its own engine and connections, like another process
        svc = ReviewService(own, clock=clock)
        try:
            while (claim := svc.claim(team.admin, name)) is not None:
                won.setdefault(name, []).append(claim.suggestion_id)
        except BaseException as e:
            errors.append(e)
        finally:
            own.dispose()

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    claimed = [sid for sids in won.values() for sid in sids]
    assert sorted(claimed) == sorted(ids)  # every one claimed, none twice


def test_expired_lease_is_taken_over_and_the_old_claim_is_refused(
    team: Any, clock: Any, make_suggestion: Make
) -> None:
    svc = team.svc
    sid = approved(team, make_suggestion)
    old = svc.claim(team.admin, "w1", lease_seconds=30)
    assert old is not None
    clock.advance(seconds=29)
    assert svc.claim(team.admin, "w2") is None  # the lease still holds
    clock.advance(seconds=2)
    new = svc.claim(team.admin, "w2", lease_seconds=30)
    assert new is not None
    assert (new.suggestion_id, new.attempt, new.idempotency_key) == (sid, 2, old.idempotency_key)
    with pytest.raises(InvalidTransition, match=r"claim lost: .* now held by worker w2 \(attempt 2\)"):
        svc.complete(old, {"campaign_id": 1})
    with pytest.raises(InvalidTransition, match="claim lost"):
        svc.fail(old, "boom")
    svc.complete(new, {"campaign_id": 1})
    view = svc.get(team.viewer, sid)
    assert (view.state, view.executions, view.result) == ("executed", 1, {"campaign_id": 1})
    assert svc.audit(team.viewer, sid)[3].reason.startswith("lease of worker w1 (attempt 1) ran out")


def test_complete_twice_is_refused_and_executions_stay_one(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = approved(team, make_suggestion)
    claim = svc.claim(team.admin, "w1")
    assert claim is not None
    svc.complete(claim, {"campaign_id": 9})
    with pytest.raises(InvalidTransition, match=r"is executed, not executing; .* do not launch again"):
        svc.complete(claim, {"campaign_id": 9})
    assert svc.get(team.viewer, sid).executions == 1
    assert svc.claim(team.admin, "w1") is None


def test_fail_and_bad_results(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = approved(team, make_suggestion)
    claim = svc.claim(team.admin, "w1")
    assert claim is not None
    with pytest.raises(ReviewError, match="not JSON-able"):
        svc.complete(claim, {"x": float("nan")})
    svc.fail(claim, "market closed")
    view = svc.get(team.viewer, sid)
    assert (view.state, view.reason, view.executions) == ("failed", "market closed", 0)


def test_worker_rechecks_the_deciders_role(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    high = approved(team, make_suggestion, discount=0.3)
    low = approved(team, make_suggestion)
    svc.set_role(team.admin, "alma", "reviewer")  # may no longer approve high risk
    claim = svc.claim(team.admin, "w1")
    assert claim is not None and claim.suggestion_id == low
    view = svc.get(team.viewer, high)
    assert view.state == "failed" and "alma is now a reviewer; high risk needs the approver" in (
        view.reason or ""
    )


def test_feedback(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    sid = approved(team, make_suggestion)
    with pytest.raises(InvalidTransition, match="is approved and cannot become feedback_received"):
        svc.record_feedback(sid, {"profit": 1.0}, "market")
    claim = svc.claim(team.admin, "w1")
    assert claim is not None
    svc.complete(claim, {"campaign_id": 1})
    with pytest.raises(ReviewError, match="outcome key 'likes' is unknown"):
        svc.record_feedback(sid, {"likes": 1.0}, "market")
    svc.record_feedback(sid, {"profit": 1.5, "orders": 3}, "market")
    view = svc.get(team.viewer, sid)
    assert (view.state, view.outcome) == ("feedback_received", {"profit": 1.5, "orders": 3.0})
    with pytest.raises(InvalidTransition, match="feedback_received is final"):
        svc.record_feedback(sid, {"profit": 1.5}, "market")


# ---------------------------------------------------------------------------------------------------
# ratings
# ---------------------------------------------------------------------------------------------------


def test_ratings_keep_subject_score_rater_and_time(team: Any, clock: Any) -> None:
    svc = team.svc
    report = svc.add_report(team.admin, "ops-0001", "why did sales fall?", "a stock-out", 6.0, "expert")
    rid = svc.rate(team.reviewer, f"report-{report}", 7.5, "clear")
    rows = svc.ratings(team.viewer)
    assert [(r.id, r.subject, r.score, r.rater, r.comment, r.at) for r in rows] == [
        (rid, f"report-{report}", 7.5, "rita", "clear", clock.now)
    ]
    with pytest.raises(NotFound, match="there is no report report-99"):
        svc.rate(team.reviewer, "report-99", 5)
    with pytest.raises(NotFound, match="there is no suggestion suggestion-99"):
        svc.rate(team.reviewer, "suggestion-99", 5)
    with pytest.raises(ReviewError, match="cannot rate 'report:2025-03-01'"):
        svc.rate(team.reviewer, "report:2025-03-01", 5)
    for bad in (-0.1, 10.5, float("nan"), True):
        with pytest.raises(ReviewError, match="must be a number from 0 to 10"):
            svc.rate(team.reviewer, "report", bad)
    with pytest.raises(PermissionDenied):
        svc.rate(team.viewer, "report", 5)


def _report(team: Any) -> int:
    """Report 1, added by the admin (so both reviewers may rate it)."""
    svc = team.svc
    return int(svc.add_report(team.admin, "ops-0001", "why did sales fall?", "a stock-out", 6.0, "expert"))


def test_a_new_rating_replaces_the_old_one_and_the_change_is_audited(team: Any, clock: Any) -> None:
    svc = team.svc
    assert _report(team) == 1
    first = svc.rate(team.reviewer, "report-1", 4, "too vague")
    clock.advance(minutes=5)
    again = svc.rate(team.reviewer, "report-1", 8.5, "names the stock-out")
    other = svc.rate(team.reviewer2, "report-1", 6)
    assert again == first and other != first
    rows = svc.ratings(team.viewer, "report-1")
    assert [(r.rater, r.score, r.comment, r.at) for r in rows] == [
        ("rita", 8.5, "names the stock-out", clock.now),
        ("rob", 6.0, "", clock.now),
    ]
    (change,) = svc.rating_changes(team.viewer, "report-1")
    assert (change.rater, change.old_score, change.new_score) == ("rita", 4.0, 8.5)
    assert (change.old_comment, change.new_comment, change.at) == (
        "too vague",
        "names the stock-out",
        clock.now,
    )
    with team.svc.store.session() as s, pytest.raises(DBAPIError, match="append-only"):
        s.execute(sa.text("UPDATE rating_changes SET new_score = 0"))


def test_the_database_allows_one_rating_per_rater_and_subject(team: Any) -> None:
    assert _report(team) == 1
    team.svc.rate(team.reviewer, "report-1", 4)
    with pytest.raises(sa.exc.IntegrityError), team.svc.store.session() as s:
        s.add(RatingRow(subject="report-1", score=5.0, rater="rita", comment="", at=team.svc.now()))


def test_nobody_rates_their_own_report_or_suggestion(
    team: Any, make_suggestion: Make, count_rows: Any
) -> None:
    svc = team.svc
    rid = svc.add_report(team.reviewer, "ops-0001", "why did sales fall?", "a stock-out", 6.0, "expert")
    sid = svc.submit(team.reviewer, make_suggestion())
    for subject in (f"report-{rid}", f"suggestion-{sid}"):
        with pytest.raises(PermissionDenied, match=f"rita added {subject}; someone else must rate it"):
            svc.rate(team.reviewer, subject, 9)
    assert count_rows(svc.store)["ratings"] == 0
    assert [r.id for r in svc.reports(team.reviewer, unrated_by=team.reviewer)] == []  # not offered
    assert [r.id for r in svc.reports(team.reviewer2, unrated_by=team.reviewer2)] == [rid]
    svc.rate(team.reviewer2, f"report-{rid}", 7)  # anyone else may


def test_failed_sign_ins_are_throttled_per_name_and_reset_by_success(store: ReviewStore, clock: Any) -> None:
    svc = ReviewService(store, clock=clock)
    svc.add_user(None, "ada", "right-password", "admin")
    for _ in range(MAX_FAILED_SIGN_INS - 1):
        with pytest.raises(AuthError, match="wrong password"):
            svc.authenticate("ada", "wrong-password")
    assert svc.authenticate("ada", "right-password").name == "ada"  # a success resets the count
    for _ in range(MAX_FAILED_SIGN_INS):
        with pytest.raises(AuthError, match="wrong password"):
            svc.authenticate("ada", "wrong-password")
    other = ReviewService(ReviewStore(store.url), clock=clock)  # another process sees the same count
    with pytest.raises(SignInThrottled, match=r"too many failed sign-ins for 'ada': try again in 15 minute"):
        other.authenticate("ada", "right-password")  # even the right password waits out the cool-down
    clock.advance(minutes=14)
    with pytest.raises(SignInThrottled, match="try again in 1 minute"):
        svc.authenticate("ada", "right-password")
    clock.advance(minutes=1)
    assert svc.authenticate("ada", "right-password").name == "ada"
    other.store.dispose()


def test_failures_outside_the_window_do_not_add_up(store: ReviewStore, clock: Any) -> None:
    svc = ReviewService(store, clock=clock)
    svc.add_user(None, "ada", "right-password", "admin")
    for _ in range(2 * MAX_FAILED_SIGN_INS):
        with pytest.raises(AuthError) as refused:
            svc.authenticate("ada", "wrong-password")
        assert not isinstance(refused.value, SignInThrottled)
        clock.advance(minutes=4)  # at most 4 failures in any 15 minutes
    for _ in range(MAX_FAILED_SIGN_INS):  # unknown names are counted too (no hint that they are unknown)
        with pytest.raises(AuthError, match="unknown user or wrong password"):
            svc.authenticate("nobody", "x")
    with pytest.raises(SignInThrottled, match="'nobody'"):
        svc.authenticate("nobody", "x")
    assert svc.authenticate("ada", "right-password").name == "ada"  # per name


def test_passwords_have_a_minimum_length(store: ReviewStore, count_rows: Any) -> None:
    svc = ReviewService(store)
    for short in ("", "x", "a" * (MIN_PASSWORD_LENGTH - 1)):
        with pytest.raises(ReviewError, match=f"give at least {MIN_PASSWORD_LENGTH}"):
            svc.add_user(None, "ada", short, "admin")
    with pytest.raises(ReviewError, match="control characters"):
        svc.add_user(None, "ada\nworker:forged", "long-enough", "admin")
    assert count_rows(store)["users"] == 0
    assert svc.add_user(None, "ada", "a" * MIN_PASSWORD_LENGTH, "admin").name == "ada"


def test_only_approvers_and_admins_may_claim(team: Any, make_suggestion: Make) -> None:
    svc = team.svc
    approved(team, make_suggestion)
    for user in (team.viewer, team.reviewer):
        with pytest.raises(PermissionDenied, match=r"running the worker .* needs the approver role"):
            svc.claim(user, "w1")
        with pytest.raises(PermissionDenied, match="needs the approver role"):
            svc.require_executor(user)
    for bad in ("", "w 1", "w1\n2025-03-01 ada: pending -> approved", "w:1", "x" * 65, "\x1b[31mw"):
        with pytest.raises(ReviewError, match=r"worker id .* is not allowed: use 1 to 64 letters"):
            svc.claim(team.approver, bad)
    assert svc.list(team.viewer, state="approved")  # nothing was claimed by the refusals
    claim = svc.claim(team.approver, "w-1@host.42")
    assert claim is not None
    audit = svc.audit(team.viewer, claim.suggestion_id)[-1]
    assert audit.actor == "worker:w-1@host.42" and audit.reason == "claimed (worker runs as alma)"


def test_store_ids_are_random_per_store_and_kept(store: ReviewStore, tmp_path: Any) -> None:
    again = ReviewStore(store.url)
    other = ReviewStore(f"sqlite:///{tmp_path / 'other.db'}")
    assert len(store.store_id) == 16 and again.store_id == store.store_id != other.store_id
    again.dispose()
    other.dispose()


@pytest.mark.parametrize("name", ["service", "service_common", "service_ratings"])
def test_service_doctests_hold(name: str) -> None:
    import doctest
    import importlib

    module = importlib.import_module(f"transferlab.human_review.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def _service_imports(name: str) -> set[str]:
    """The ``service*`` modules of human_review that module ``name`` imports."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(f"transferlab.human_review.{name}")
    assert spec is not None and spec.origin is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "transferlab.human_review":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.removeprefix("transferlab.human_review."))
        elif isinstance(node, ast.Import):
            found |= {alias.name.removeprefix("transferlab.human_review.") for alias in node.names}
    return {m for m in found if m.startswith("service")}


CONCERNS = ["service_accounts", "service_decisions", "service_execution", "service_ratings"]


def test_the_facade_imports_the_concerns_and_they_import_only_the_shared_module() -> None:
    assert _service_imports("service") == {*CONCERNS, "service_common"}
    assert _service_imports("service_common") == set()
    for name in CONCERNS:
        assert _service_imports(name) == {"service_common"}, name

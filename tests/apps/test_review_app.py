"""AppTests of the review app: every page for every role, decisions through the real service.

Each test runs the app's entry script (sign-in, ``st.navigation``) on a temporary SQLite database that
the real :class:`ReviewService` seeded; ``.run()`` follows every interaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from transferlab.apps import REVIEW_APP
from transferlab.human_review import auth
from transferlab.human_review.service import ReviewService, User
from transferlab.human_review.store import ReviewStore

ROLES = ("viewer", "reviewer", "approver", "admin")
PAGES = {
    "queue": "Review queue",
    "suggestion": "Suggestion",
    "executed": "Executed",
    "audit": "Audit log",
    "results": "Predicted vs real",
    "experiments": "Experiments",
}
USER_OF = {"viewer": "vic", "reviewer": "rita", "approver": "alma", "admin": "ada"}
XSS = "<script>alert(1)</script> and **not bold**"
DECISION_KEYS = ("approve_", "reject_", "modify_", "batch_approve")


def suggestion(
    discount: float = 0.05, reasoning: str = "small reminder to loyal customers"
) -> dict[str, Any]:
    """A valid suggestion; low risk with the defaults, high with ``discount >= 0.2``."""
    return {
        "action": {"discount": discount, "push_hour": 20, "segment": "loyal", "budget": 30.0},
        "reasoning": reasoning,
        "confidence": 0.9,
        "risk": "low",
        "evidence": {
            "predicted": {
                "profit": {"estimate": 12.0, "low": 3.0, "high": 20.0},
                "orders": {"estimate": 40.0, "low": 30.0, "high": 55.0},
            },
            "ope": {
                "estimator": "dr",
                "estimate": 1.0,
                "low": 0.5,
                "high": 1.5,
                "trusted": True,
                "ess": 80.0,
            },
            "policy": "cql",
        },
    }


@dataclass
class Seeded:
    svc: ReviewService
    users: dict[str, User]
    low: int  # low risk, reasoning with a script tag
    high: int  # high risk
    other: int  # low risk, executed and with feedback (for the executed and results pages)


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seeded]:
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 64)  # cheap hashes: sign-in runs on every test
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)
    url = f"sqlite:///{tmp_path / 'review.db'}"
    monkeypatch.setenv("TRANSFERLAB_REVIEW_DB", url)
    svc = ReviewService(ReviewStore(url))
    ada = svc.add_user(None, "ada", "pass-word-ada", "admin")
    users = {"ada": ada}
    for name, role in [("vic", "viewer"), ("rita", "reviewer"), ("alma", "approver"), ("sam", "reviewer")]:
        users[name] = svc.add_user(ada, name, f"pass-word-{name}", role)  # type: ignore[arg-type]
    sam = users["sam"]
    other = svc.submit(sam, suggestion())
    svc.decide(users["alma"], other, "approve")
    claim = svc.claim(users["alma"], "w1")
    assert claim is not None
    svc.complete(claim, {"key": claim.idempotency_key, "campaign_id": 3, "day": 1, "action": claim.action})
    svc.record_feedback(other, {"profit": 15.0, "orders": 60.0}, source="market")
    low = svc.submit(sam, suggestion(reasoning=XSS))
    high = svc.submit(sam, suggestion(discount=0.3))
    yield Seeded(svc, users, low, high, other)


def open_app(user: str | None, page: str | None = None, sid: int | None = None) -> AppTest:
    """The app run once, signed in as ``user`` (only the name in the session, as the app keeps it)."""
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30)
    if user is not None:
        at.session_state["user"] = user
    at.run()
    if page is not None:
        if sid is not None:
            at.query_params["id"] = str(sid)
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> list[str]:
    return [str(t.value) for t in at.text]


def errors(at: AppTest) -> list[str]:
    return [str(e.value) for e in at.error]


def decision_buttons(at: AppTest) -> list[str]:
    return [b.key for b in at.button if b.key and b.key.startswith(DECISION_KEYS)]


def test_sign_in_with_password_then_wrong_password(seeded: Seeded) -> None:
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30).run()
    at.text_input(key="sign_in_name").input("rita")
    at.text_input(key="sign_in_password").input("wrong")
    at.button[0].click().run()
    assert "unknown user or wrong password" in " ".join(errors(at))
    assert "user" not in at.session_state
    at.text_input(key="sign_in_password").input("pass-word-rita")
    at.button[0].click().run()
    assert not at.exception
    assert at.session_state["user"] == "rita"
    assert [m.value for m in at.metric][:1] == ["2"]  # the queue is the default page: 2 pending


def test_repeated_failed_sign_ins_are_throttled_across_sessions(seeded: Seeded) -> None:
    from transferlab.human_review.service import MAX_FAILED_SIGN_INS

    for _ in range(MAX_FAILED_SIGN_INS):  # each a fresh browser session: the count lives in the store
        at = AppTest.from_file(str(REVIEW_APP), default_timeout=30).run()
        at.text_input(key="sign_in_name").input("rita")
        at.text_input(key="sign_in_password").input("wrong-guess")
        at.button[0].click().run()
        assert "unknown user or wrong password" in " ".join(errors(at))
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30).run()
    at.text_input(key="sign_in_name").input("rita")
    at.text_input(key="sign_in_password").input("pass-word-rita")
    at.button[0].click().run()
    assert "too many failed sign-ins for 'rita': try again in 15 minute(s)" in " ".join(errors(at))
    assert "user" not in at.session_state
    assert seeded.svc.authenticate("sam", "pass-word-sam").name == "sam"  # other names are not affected


@pytest.mark.parametrize("role", ROLES)
def test_every_page_renders_for_every_role(seeded: Seeded, role: str) -> None:
    for page, title in PAGES.items():
        at = open_app(USER_OF[role], page, sid=seeded.low)
        assert not at.exception, (role, page, at.exception)
        assert [t.value for t in at.title] == [title], (role, page)
        if page == "suggestion":
            assert bool(decision_buttons(at)) is (role != "viewer"), (role, decision_buttons(at))
        if page == "queue":
            assert ("batch_approve" in decision_buttons(at)) is (role != "viewer")


def test_no_page_logs_a_streamlit_deprecation(seeded: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    # e.g. use_container_width, which Streamlit logs as deprecated on every render (width="stretch")
    streamlit_log = logging.getLogger("streamlit")  # it does not propagate to the root logger
    streamlit_log.addHandler(caplog.handler)
    try:
        for page in PAGES:
            at = open_app("ada", page, sid=seeded.low)
            assert not at.exception, (page, at.exception)
    finally:
        streamlit_log.removeHandler(caplog.handler)
    text = [r.getMessage() for r in caplog.records]
    deprecations = [m for m in text if "deprecat" in m.lower() or "will be removed" in m]
    assert not deprecations, deprecations


def test_viewer_sees_no_decision_buttons(seeded: Seeded) -> None:
    for page in ("queue", "suggestion"):
        at = open_app("vic", page, sid=seeded.low)
        assert decision_buttons(at) == []


def test_reviewer_approves_a_low_risk_suggestion(seeded: Seeded) -> None:
    at = open_app("rita", "suggestion", sid=seeded.low)
    at.button(key=f"approve_{seeded.low}").click().run()
    assert not at.exception and not errors(at)
    assert seeded.svc.get(seeded.users["ada"], seeded.low).state == "approved"
    assert seeded.svc.get(seeded.users["ada"], seeded.low).decided_by == "rita"
    assert any(f"#{seeded.low}: approved" in h.value for h in at.subheader)


def test_a_stale_second_approval_shows_the_services_refusal(seeded: Seeded) -> None:
    """A double click or a second tab: the page was rendered pending, someone decided meanwhile."""
    at = open_app("rita", "suggestion", sid=seeded.low)
    seeded.svc.decide(seeded.users["alma"], seeded.low, "approve")  # the first click / the other tab
    at.button(key=f"approve_{seeded.low}").click().run()
    assert "cannot become approved" in " ".join(errors(at))
    approvals = [r for r in seeded.svc.audit(seeded.users["ada"], seeded.low) if r.to_state == "approved"]
    assert [r.actor for r in approvals] == ["alma"]
    assert decision_buttons(at.run()) == []  # the next rerun reads the store: decided, no buttons


def test_reviewer_approving_high_risk_sees_the_refusal(seeded: Seeded) -> None:
    at = open_app("rita", "suggestion", sid=seeded.high)
    at.button(key=f"approve_{seeded.high}").click().run()
    assert "needs the approver role" in " ".join(errors(at))
    assert seeded.svc.get(seeded.users["ada"], seeded.high).state == "pending"


def test_reject_without_reason_is_refused_then_with_reason_works(seeded: Seeded) -> None:
    at = open_app("rita", "suggestion", sid=seeded.high)
    at.button(key=f"reject_{seeded.high}").click().run()
    assert "rejection reason is required" in " ".join(errors(at))
    assert seeded.svc.get(seeded.users["ada"], seeded.high).state == "pending"
    at.text_input(key=f"reason_{seeded.high}").input("discount far too deep").run()
    at.button(key=f"reject_{seeded.high}").click().run()
    view = seeded.svc.get(seeded.users["ada"], seeded.high)
    assert (view.state, view.reason) == ("rejected", "discount far too deep")


def test_modify_shows_the_diff_and_records_both_versions(seeded: Seeded) -> None:
    at = open_app("rita", "suggestion", sid=seeded.low)
    assert at.button(key=f"modify_{seeded.low}").disabled  # no change yet: nothing to approve
    at.number_input(key=f"m_budget_{seeded.low}").set_value(40.0).run()
    diff = at.table[0].value
    assert list(diff["field"]) == ["budget"]
    assert (diff["before"][0], diff["after"][0]) == ("30.0", "40.0")
    at.button(key=f"modify_{seeded.low}").click().run()
    assert not errors(at)
    view = seeded.svc.get(seeded.users["ada"], seeded.low)
    assert view.state == "modified"
    assert (view.original_action or {})["budget"] == 30.0 and view.action["budget"] == 40.0


def test_reasoning_is_literal_text_never_markdown_or_html(seeded: Seeded) -> None:
    at = open_app("vic", "suggestion", sid=seeded.low)
    assert XSS in texts(at)
    assert not any("<script>" in str(m.value) for m in at.markdown)


def test_batch_approval_on_the_queue(seeded: Seeded) -> None:
    at = open_app("rita", "queue")
    [option] = at.multiselect(key="batch_pick").options  # high risk is not offered
    assert option.startswith(f"#{seeded.low} (low risk): 5% off") and "segment loyal" in option
    assert at.metric[0].value == "2"
    at.multiselect(key="batch_pick").select(seeded.low).run()
    shown_first = at.dataframe[1].value.iloc[0]  # what is about to be approved, with its evidence
    assert (shown_first["id"], shown_first["predicted profit ($)"]) == (seeded.low, "12.0 [3.00, 20.0]")
    at.button(key="batch_approve").click().run()
    assert f"#{seeded.low} approved" in [s.value for s in at.success]
    assert seeded.svc.get(seeded.users["ada"], seeded.low).state == "approved"
    # the page refreshed after the decision: the count and the picker as the store has them now
    assert at.metric[0].value == "1"
    assert at.multiselect(key="batch_pick").options == []
    assert seeded.low not in list(at.dataframe[0].value["id"])


def test_queue_filters_and_open_suggestion(seeded: Seeded) -> None:
    at = open_app("vic", "queue")
    at.selectbox(key="queue_risk").select("high").run()
    frame = at.dataframe[0].value
    assert list(frame["id"]) == [seeded.high]
    at.selectbox(key="queue_state").select("all").run()
    at.selectbox(key="queue_risk").select("all").run()
    assert sorted(at.dataframe[0].value["id"]) == [seeded.other, seeded.low, seeded.high]
    at.selectbox(key="queue_pick").select(seeded.high).run()
    at.button(key="queue_open").click().run()
    assert not at.exception
    assert any(f"#{seeded.high}: pending" in h.value for h in at.subheader)


def test_executed_results_and_audit_pages_show_the_store(seeded: Seeded) -> None:
    at = open_app("vic", "executed")
    row = at.dataframe[0].value.iloc[0]
    assert (row["id"], row["state"], row["campaign"]) == (seeded.other, "feedback_received", 3)
    at = open_app("vic", "results")
    frame = at.dataframe[1].value
    assert set(frame["metric"]) == {"profit", "orders"}
    assert frame.set_index("metric")["real"].to_dict()["profit"] == 15.0
    at = open_app("vic", "audit")
    audit = at.dataframe[0].value
    assert len(audit) == len(seeded.svc.audit(seeded.users["ada"]))
    assert at.get("download_button")


UPLIFT = {
    "no_campaign": {"profit": {"estimate": 9.5, "low": 2.0, "high": 15.0}},
    "current": {"profit": {"estimate": -1.25, "low": -4.0, "high": 2.5}},
}


def test_the_suggestion_page_shows_a_numeric_evidence_table(seeded: Seeded) -> None:
    data = suggestion()
    data["evidence"]["uplift"] = UPLIFT
    data["evidence"]["ope"] |= {"behaviour": 0.8, "ess_share": 0.4, "ess": 80.4}
    sid = seeded.svc.submit(seeded.users["sam"], data)
    at = open_app("rita", "suggestion", sid=sid)
    table = at.dataframe[0].value.set_index("outcome")
    assert list(table.index) == ["profit ($)", "orders (orders)"]  # profit first, units named
    assert table.loc["profit ($)"].to_dict() == {
        "predicted for this campaign": "12.0 [3.00, 20.0]",
        "vs doing nothing": "+9.50 [+2.00, +15.0]",
        "vs what the shop does now": "-1.25 [-4.00, +2.50]",
    }
    assert table.loc["orders (orders)", "vs doing nothing"] == "—"
    [ope] = [s.value for s in at.success if "Off-policy estimate" in s.value]
    assert "against 0.80 for what the shop does now" in ope and "effective sample size about 80, 40%" in ope
    assert not any("None" in t for t in texts(at) + [c.value for c in at.caption])
    assert any("expires" in t for t in texts(at))  # pending: its expiry is shown


def test_no_decision_on_your_own_suggestion_and_why(seeded: Seeded) -> None:
    at = open_app("sam", "suggestion", sid=seeded.low)
    assert decision_buttons(at) == []
    assert any("You proposed this suggestion" in i.value for i in at.info)


def test_an_executed_suggestion_shows_its_outcome_and_no_expiry(seeded: Seeded) -> None:
    at = open_app("vic", "suggestion", sid=seeded.other)
    outcome = at.dataframe[0].value.set_index("outcome")
    assert outcome.loc["profit ($)"].to_dict() == {
        "actual": "15.0",
        "predicted": "12.0 [3.00, 20.0]",
        "inside the interval": "yes",
    }
    assert outcome.loc["orders (orders)", "inside the interval"] == "no"  # 60 outside [30, 55]
    assert not any("expires" in t for t in texts(at))

"""AppTests of the review app's "Rate reports" page: reviewers rate ops reports 0-10; viewers do not."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from transferlab.apps import REVIEW_APP
from transferlab.human_review import auth, views
from transferlab.human_review.service import ReviewService, User, report_subject
from transferlab.human_review.store import ReviewStore

QUESTION = "Find why sales of shoes fell in the last 30 days."
REPORT = "Shoes fell because of a stock-out: <b>0 units</b> for 9 days."


@dataclass
class Seeded:
    svc: ReviewService
    users: dict[str, User]
    first: int
    second: int


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seeded]:
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 64)  # cheap hashes: sign-in runs on every test
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)
    url = f"sqlite:///{tmp_path / 'review.db'}"
    monkeypatch.setenv("TRANSFERLAB_REVIEW_DB", url)
    svc = ReviewService(ReviewStore(url))
    ada = svc.add_user(None, "ada", "pass-word-ada", "admin")
    users = {"ada": ada}
    for name, role in [("vic", "viewer"), ("rita", "reviewer"), ("rob", "reviewer")]:
        users[name] = svc.add_user(ada, name, f"pass-word-{name}", role)  # type: ignore[arg-type]
    first = svc.add_report(ada, "ops-0001", QUESTION, REPORT, 9.5, "expert")
    second = svc.add_report(
        ada, "ops-0002", QUESTION, "Sales fell because of late deliveries.", 0.0, "random"
    )
    yield Seeded(svc, users, first, second)


def open_page(user: str) -> AppTest:
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30)
    at.session_state["user"] = user
    at.run()
    at.switch_page("pages/reports.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_reviewer_sees_unrated_reports_without_their_rubric_score(seeded: Seeded) -> None:
    seeded.svc.rate(
        seeded.users["rob"], report_subject(seeded.second), 2
    )  # rob's rating hides nothing from rita
    at = open_page("rita")
    assert [t.value for t in at.title] == ["Rate reports"]
    assert [h.value for h in at.subheader][:2] == [
        f"Report #{seeded.first} (ops-0001)",
        f"Report #{seeded.second} (ops-0002)",
    ]
    shown = [str(t.value) for t in at.text]
    assert QUESTION in shown and REPORT in shown  # literal text, never HTML
    assert not any("9.5" in str(m.value) for m in [*at.markdown, *at.text, *at.caption])


def test_rating_through_the_page_stores_it(seeded: Seeded) -> None:
    at = open_page("rita")
    at.slider(key=f"score_{seeded.first}").set_value(8)
    at.text_area(key=f"comment_{seeded.first}").input("names the stock-out with numbers")
    at.button(key=f"rate_{seeded.first}").click().run()
    assert not at.exception and not at.error
    assert [s.value for s in at.success] == [views.rating_confirmation(seeded.first, 8)]
    ratings = seeded.svc.ratings(seeded.users["ada"], report_subject(seeded.first))
    assert [(r.score, r.rater, r.comment) for r in ratings] == [
        (8.0, "rita", "names the stock-out with numbers")
    ]
    assert f"rate_{seeded.first}" not in [b.key for b in at.button]  # rated: no longer offered
    assert f"rate_{seeded.second}" in [b.key for b in at.button]
    mine = at.dataframe[0].value
    assert (list(mine["report"]), list(mine["score"])) == ([seeded.first], [8.0])


def test_nothing_left_to_rate(seeded: Seeded) -> None:
    for rid in (seeded.first, seeded.second):
        seeded.svc.rate(seeded.users["rita"], report_subject(rid), 5)
    at = open_page("rita")
    assert "Nothing left to rate" in " ".join(str(i.value) for i in at.info)
    assert len(at.dataframe[0].value) == 2


def test_a_viewer_does_not_get_the_page(seeded: Seeded) -> None:
    assert "reports" not in views.pages_for("viewer")
    assert "reports" in views.pages_for("reviewer")
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30)
    at.session_state["user"] = "vic"
    at.run()
    with pytest.raises(ValueError, match="Could not find a navigation page"):  # not registered for vic
        at.switch_page("pages/reports.py")

"""Ratings and reports: people's 0-10 scores of subjects (analysis reports, suggestions), the
append-only record of replaced ratings, and the analysis reports put in front of reviewers to rate.

Each public function is one call of :class:`~transferlab.human_review.service.ReviewService`, which
documents the contract; the functions take its
:class:`~transferlab.human_review.service_common.ServiceContext`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import String, literal, select
from sqlalchemy import cast as cast_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from transferlab.human_review.schema import ReviewError
from transferlab.human_review.service_common import (
    NotFound,
    PermissionDenied,
    ServiceContext,
    User,
    free_text,
    jsonable_times,
    require,
)
from transferlab.human_review.store import RatingChangeRow, RatingRow, ReportRow, SuggestionRow

__all__ = [
    "MAX_REPORT",
    "Rating",
    "RatingChange",
    "Report",
    "add_report",
    "rate",
    "rating_changes",
    "ratings",
    "report",
    "report_subject",
    "reports",
]

MAX_REPORT = 20_000


@dataclass(frozen=True)
class Rating:
    """A person's 0-10 score for a subject (a report, a suggestion): a future reward signal."""

    id: int
    subject: str
    score: float
    rater: str
    comment: str
    at: datetime


@dataclass(frozen=True)
class RatingChange:
    """A rating its rater replaced: the old and the new score and comment, and when."""

    id: int
    subject: str
    rater: str
    old_score: float
    new_score: float
    old_comment: str
    new_comment: str
    at: datetime


@dataclass(frozen=True)
class Report:
    """An ops analysis report to rate: the task's question, the report, and its rubric score (0-10).

    ``source`` says who wrote it (``expert``, ``random``, ``policy:<name>``); reviewers rate it with
    ``ReviewService.rate(actor, report_subject(id), score)``.
    """

    id: int
    task_id: str
    question: str
    text: str
    rubric_score: float | None
    source: str
    created_at: datetime
    created_by: str

    @property
    def subject(self) -> str:
        """The ratings subject of this report: ``report-<id>``."""
        return report_subject(self.id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (times as ISO 8601 strings)."""
        return jsonable_times(asdict(self))


def report_subject(report_id: int) -> str:
    """The subject a report's ratings are stored under: ``report-<id>``.

    >>> report_subject(7)
    'report-7'
    """
    return f"report-{report_id}"


def _rubric(score: float | None) -> float | None:
    """A validated rubric score: None, or a number from 0 to 10."""
    if score is None:
        return None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 10:
        raise ReviewError(f"rubric_score={score!r:.40} must be a number from 0 to 10, or None when ungraded")
    return float(score)


def _report_id(subject: str) -> int | None:
    """The report id of a ``report-<id>`` subject, else None.

    >>> _report_id("report-7"), _report_id("suggestion-7")
    (7, None)
    """
    head, _, tail = subject.partition("-")
    return int(tail) if head == "report" and tail.isdigit() else None


def _suggestion_id(subject: str) -> int | None:
    """The suggestion id of a ``suggestion-<id>`` subject, else None."""
    head, _, tail = subject.partition("-")
    return int(tail) if head == "suggestion" and tail.isdigit() else None


def rate(ctx: ServiceContext, actor: User, subject: str, score: float, comment: str) -> int:
    """:meth:`ReviewService.rate`: store (or replace) ``actor``'s 0-10 rating of ``subject`` (an
    existing ``report-<id>`` or ``suggestion-<id>``); its id."""
    what = cast(str, free_text(subject, "subject", required=True, limit=200))
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 10:
        raise ReviewError(f"score={score!r:.40} must be a number from 0 to 10")
    note = free_text(comment, "comment") or ""
    for attempt in range(2):  # a concurrent first rating may insert the row first: replace it then
        try:
            with ctx.store.session() as s:
                user = require(s, actor, "reviewer", "rating")
                if _subject_author(s, what) == user.name:
                    raise PermissionDenied(f"{user.name} added {what}; someone else must rate it")
                return _upsert_rating(ctx, s, user.name, what, float(score), note)
        except IntegrityError:
            if attempt:
                raise ReviewError(f"{what} was rated meanwhile; try again") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _subject_author(s: Session, subject: str) -> str:
    """Who added the report or submitted the suggestion ``subject`` names.

    :class:`ReviewError` when ``subject`` is neither ``report-<id>`` nor ``suggestion-<id>``;
    :class:`NotFound` when no such report or suggestion exists (nothing is rated then).
    """
    report_id, suggestion_id = _report_id(subject), _suggestion_id(subject)
    if report_id is not None:
        author = s.scalar(select(ReportRow.created_by).where(ReportRow.id == report_id))
    elif suggestion_id is not None:
        author = s.scalar(select(SuggestionRow.submitted_by).where(SuggestionRow.id == suggestion_id))
    else:
        raise ReviewError(
            f"cannot rate {subject!r}: rate report-<id> (see `review reports list`) or suggestion-<id> "
            "(see `review list`)"
        )
    if author is None:
        kind = "report" if report_id is not None else "suggestion"
        listing = "review reports list" if report_id is not None else "review list"
        raise NotFound(f"there is no {kind} {subject}: `{listing}` shows what can be rated")
    return str(author)


def _upsert_rating(
    ctx: ServiceContext, s: Session, rater: str, subject: str, score: float, comment: str
) -> int:
    """Insert the rating, or replace ``rater``'s earlier one and record the change."""
    query = select(RatingRow).where(RatingRow.rater == rater, RatingRow.subject == subject)
    if ctx.store.dialect == "postgresql":
        query = query.with_for_update()
    now = ctx.now()
    row = s.scalars(query).first()
    if row is None:
        row = RatingRow(subject=subject, score=score, rater=rater, comment=comment, at=now)
        s.add(row)
    else:
        s.add(
            RatingChangeRow(
                subject=subject,
                rater=rater,
                old_score=row.score,
                new_score=score,
                old_comment=row.comment,
                new_comment=comment,
                at=now,
            )
        )
        row.score, row.comment, row.at = score, comment, now
    s.flush()
    return row.id


def rating_changes(ctx: ServiceContext, actor: User, subject: str | None) -> list[RatingChange]:
    """:meth:`ReviewService.rating_changes`: every replaced rating (of ``subject``), oldest first."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "reading rating changes")
        query = select(RatingChangeRow).order_by(RatingChangeRow.id)
        if subject is not None:
            query = query.where(RatingChangeRow.subject == subject)
        return [
            RatingChange(
                c.id, c.subject, c.rater, c.old_score, c.new_score, c.old_comment, c.new_comment, c.at
            )
            for c in s.scalars(query)
        ]


def ratings(ctx: ServiceContext, actor: User, subject: str | None) -> list[Rating]:
    """:meth:`ReviewService.ratings`: every rating (of ``subject``), oldest first."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "reading ratings")
        query = select(RatingRow).order_by(RatingRow.id)
        if subject is not None:
            query = query.where(RatingRow.subject == subject)
        return [Rating(r.id, r.subject, r.score, r.rater, r.comment, r.at) for r in s.scalars(query)]


def _report(row: ReportRow) -> Report:
    return Report(
        row.id,
        row.task_id,
        row.question,
        row.text,
        row.rubric_score,
        row.source,
        row.created_at,
        row.created_by,
    )


def add_report(
    ctx: ServiceContext,
    actor: User,
    task_id: str,
    question: str,
    text: str,
    rubric_score: float | None,
    source: str,
) -> int:
    """:meth:`ReviewService.add_report`: put an analysis report in front of reviewers; its id."""
    task = cast(str, free_text(task_id, "task_id", required=True, limit=64))
    asked = cast(str, free_text(question, "question (the task text)", required=True))
    body = free_text(text, "report text", limit=MAX_REPORT)
    if body is None:
        raise ReviewError("report text is empty: give the report's full text to rate")
    score = _rubric(rubric_score)
    who = cast(
        str, free_text(source, "source (e.g. expert, random, policy:<name>)", required=True, limit=160)
    )
    with ctx.store.session() as s:
        user = require(s, actor, "reviewer", "adding reports")
        row = ReportRow(
            task_id=task,
            question=asked,
            text=body,
            rubric_score=score,
            source=who,
            created_at=ctx.now(),
            created_by=user.name,
        )
        s.add(row)
        s.flush()
        return row.id


def reports(ctx: ServiceContext, actor: User, unrated_by: User | None) -> list[Report]:
    """:meth:`ReviewService.reports`: every report, oldest first (those ``unrated_by`` may rate)."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "reading reports")
        query = select(ReportRow).order_by(ReportRow.id)
        if unrated_by is not None:
            rated = select(RatingRow.subject).where(RatingRow.rater == unrated_by.name)
            query = query.where((literal("report-") + cast_(ReportRow.id, String)).not_in(rated))
            query = query.where(ReportRow.created_by != unrated_by.name)
        return [_report(r) for r in s.scalars(query)]


def report(ctx: ServiceContext, actor: User, report_id: int) -> Report:
    """:meth:`ReviewService.report`: one report; :class:`NotFound` when there is none with that id."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "reading reports")
        row = s.get(ReportRow, report_id)
        if row is None:
            raise NotFound(f"no report {report_id}; list them with `transferlab review reports list`")
        return _report(row)

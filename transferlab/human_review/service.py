"""The review service: users, suggestions, decisions, exactly-once execution, feedback and ratings.

Every public method is one database transaction, and every permission is checked here (the app only
hides what a role cannot do; hiding is not authorisation). The state machine is :data:`TRANSITIONS`;
each transition writes one append-only audit row with the suggestion before and after.

    >>> from transferlab.human_review.store import ReviewStore
    >>> svc = ReviewService(ReviewStore("sqlite://"))
    >>> admin = svc.add_user(None, "ada", "pw-ada-0001", "admin")
    >>> bob = svc.add_user(admin, "bob", "pw-bob-0001", "reviewer")
    >>> sid = svc.submit(bob, {"action": {"discount": 0.05, "push_hour": 20, "segment": "loyal",
    ...     "budget": 30.0}, "reasoning": "small reminder", "confidence": 0.9, "risk": "low"})
    >>> svc.get(admin, sid).risk        # no evidence: we call it medium whatever the claim
    'medium'
    >>> svc.decide(admin, sid, "approve").state
    'approved'
    >>> claim = svc.claim(admin, "w1")
    >>> svc.complete(claim, {"campaign_id": 7})
    >>> svc.get(bob, sid).state, svc.get(bob, sid).executions
    ('executed', 1)
"""

from __future__ import annotations

import builtins
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast, get_args

from sqlalchemy import String, and_, func, literal, or_, select, update
from sqlalchemy import cast as cast_
from sqlalchemy import delete as sa_delete
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from transferlab.human_review.auth import (
    EXECUTOR_ROLE,
    ROLES,
    Role,
    hash_password,
    password_problem,
    role_allows,
    verify_password,
)
from transferlab.human_review.schema import (
    RISKS,
    Evidence,
    ReviewError,
    Risk,
    SuggestionError,
    SuggestionIn,
    classify_risk,
    effective_risk,
    parse_action,
    parse_suggestion,
)
from transferlab.human_review.store import (
    AuditEntry,
    ExecutionRow,
    FeedbackRow,
    RatingChangeRow,
    RatingRow,
    ReportRow,
    ReviewStore,
    SignInFailureRow,
    SuggestionRow,
    UserRow,
    utcnow,
)
from transferlab.human_review.text import check_worker_id, shown
from transferlab.simulator.market import OUTCOME_KEYS

__all__ = [
    "STATES",
    "TRANSITIONS",
    "AuditRow",
    "AuthError",
    "Claim",
    "InvalidTransition",
    "NotFound",
    "PermissionDenied",
    "Rating",
    "RatingChange",
    "Report",
    "ReviewError",
    "ReviewService",
    "SignInThrottled",
    "SuggestionError",
    "SuggestionView",
    "User",
    "report_subject",
]


class AuthError(ReviewError):
    """Unknown user or wrong password."""


class SignInThrottled(AuthError):
    """Too many failed sign-ins for one user name: refused until the cool-down ends."""


class PermissionDenied(ReviewError):
    """The actor's role does not allow this (or it is self-approval, or high risk in a batch)."""


class NotFound(ReviewError):
    """No suggestion (or user) with that id."""


class InvalidTransition(ReviewError):
    """The suggestion is not in a state this action applies to (or it changed meanwhile)."""


State = Literal[
    "pending",
    "approved",
    "modified",
    "rejected",
    "expired",
    "executing",
    "executed",
    "failed",
    "feedback_received",
]
STATES: tuple[str, ...] = get_args(State)

#: The state machine: every allowed transition, and nothing else. ``approved|modified -> failed``
#: happens when the decider no longer holds a role allowed to approve the risk at execution time.
TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"approved", "modified", "rejected", "expired"}),
    "approved": frozenset({"executing", "failed"}),
    "modified": frozenset({"executing", "failed"}),
    "executing": frozenset({"executing", "executed", "failed"}),
    "executed": frozenset({"feedback_received"}),
    "rejected": frozenset(),
    "expired": frozenset(),
    "failed": frozenset(),
    "feedback_received": frozenset(),
}
_READY = ("approved", "modified")
_APPROVER_FOR: dict[str, Role] = {"low": "reviewer", "medium": "reviewer", "high": "approver"}
MAX_TEXT = 4000
MAX_REPORT = 20_000
#: Sign-in throttling: this many failures for one name within the window start a cool-down.
MAX_FAILED_SIGN_INS = 5
SIGN_IN_WINDOW = timedelta(minutes=15)
SIGN_IN_COOLDOWN = timedelta(minutes=15)


@dataclass(frozen=True)
class User:
    """A signed-in user as the service hands it out (its role is re-read from the store on every call)."""

    id: int
    name: str
    role: Role
    created_at: datetime


@dataclass(frozen=True)
class SuggestionView:
    """A suggestion as people and workers see it.

    ``action`` is the one to execute (the modified one when ``state`` went through ``modified``),
    ``original_action`` the proposer's when modified; ``risk`` is the effective risk (the higher of
    ``claimed_risk`` and ours); ``executions`` counts market launches recorded.
    """

    id: int
    state: str
    action: dict[str, Any]
    original_action: dict[str, Any] | None
    reasoning: str
    confidence: float
    claimed_risk: str
    risk: str
    evidence: dict[str, Any]
    submitted_by: str
    decided_by: str | None
    reason: str | None
    created_at: datetime
    expires_at: datetime
    executions: int
    result: dict[str, Any] | None
    outcome: dict[str, Any] | None
    idempotency_key: str
    decided_at: datetime | None = None
    worker: str | None = None
    attempt: int = 0
    lease_until: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (times as ISO 8601 strings)."""
        return _jsonable_times(asdict(self))


@dataclass(frozen=True)
class Claim:
    """A worker's lease on one suggestion: execute ``action`` under ``idempotency_key``, then complete.

    ``action`` is the campaign only (``CampaignAction.from_dict(claim.action)`` works).
    """

    suggestion_id: int
    action: dict[str, Any]
    idempotency_key: str
    worker: str
    attempt: int
    lease_until: datetime


@dataclass(frozen=True)
class AuditRow:
    """One transition: who moved which suggestion from what to what, when and why."""

    id: int
    suggestion_id: int
    actor: str
    at: datetime
    from_state: str | None
    to_state: str
    before: dict[str, Any] | None
    after: dict[str, Any]
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (times as ISO 8601 strings)."""
        return _jsonable_times(asdict(self))


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
        return _jsonable_times(asdict(self))


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


def _jsonable_times(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in data.items()}


def idempotency_key(store_id: str, suggestion_id: int) -> str:
    """The key a suggestion is launched under, on every attempt: ``<store id>:suggestion-<id>``.

    The store id is random per store, so two stores (or a store rebuilt from scratch) never share a key.

    >>> idempotency_key("3f2a9c0d1e4b5a6f", 7)
    '3f2a9c0d1e4b5a6f:suggestion-7'
    """
    return f"{store_id}:suggestion-{suggestion_id}"


def _report_id(subject: str) -> int | None:
    """The report id of a ``report-<id>`` subject, else None."""
    head, _, tail = subject.partition("-")
    return int(tail) if head == "report" and tail.isdigit() else None


def _suggestion_id(subject: str) -> int | None:
    """The suggestion id of a ``suggestion-<id>`` subject, else None."""
    head, _, tail = subject.partition("-")
    return int(tail) if head == "suggestion" and tail.isdigit() else None


def check_transition(suggestion_id: int, current: str, target: str) -> None:
    """Raise :class:`InvalidTransition` unless :data:`TRANSITIONS` allows ``current -> target``."""
    if target in TRANSITIONS.get(current, frozenset()):
        return
    allowed = sorted(TRANSITIONS.get(current, frozenset()))
    nxt = f"from {current} it can only become {', '.join(allowed)}" if allowed else f"{current} is final"
    hint = (
        "; only pending suggestions can be decided" if target in {"approved", "modified", "rejected"} else ""
    )
    raise InvalidTransition(
        f"suggestion {suggestion_id} is {current} and cannot become {target} ({nxt}){hint}"
    )


def _snapshot(row: SuggestionRow) -> dict[str, Any]:
    """The audited part of a suggestion (JSON-able)."""
    return {
        "state": row.state,
        "action": row.action,
        "original_action": row.original_action,
        "risk": row.risk,
        "decided_by": row.decided_by,
        "reason": row.reason,
        "worker": row.worker,
        "attempt": row.attempt,
        "lease_until": row.lease_until.isoformat() if row.lease_until else None,
        "result": row.result,
        "outcome": row.outcome,
        "version": row.version,
    }


def _text(value: str | None, what: str, *, required: bool = False, limit: int = MAX_TEXT) -> str | None:
    """Validated free text: stripped; ``None`` when empty (unless required)."""
    if value is not None and not isinstance(value, str):
        raise ReviewError(f"{what} must be text, got {type(value).__name__}")
    text = (value or "").strip()
    if required and not text:
        raise ReviewError(f"{what} is required: say why in a sentence")
    if len(text) > limit:
        raise ReviewError(f"{what} has {len(text)} characters; shorten it to at most {limit}")
    return text or None


def _json_payload(data: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON-able copy of ``data`` (finite numbers only)."""
    if not isinstance(data, Mapping):
        raise ReviewError(f"{what} must be a JSON object, got {type(data).__name__}")
    try:
        return cast(dict[str, Any], json.loads(json.dumps(dict(data), allow_nan=False)))
    except (TypeError, ValueError) as e:
        raise ReviewError(
            f"{what} is not JSON-able ({e}); give plain numbers, strings, lists, dicts"
        ) from None


def _outcome(outcome: Mapping[str, float]) -> dict[str, float]:
    """A validated outcome vector: known keys, finite numbers."""
    if not isinstance(outcome, Mapping) or not outcome:
        raise ReviewError(f"outcome must be a non-empty object with keys from {', '.join(OUTCOME_KEYS)}")
    clean: dict[str, float] = {}
    for key, value in outcome.items():
        if key not in OUTCOME_KEYS:
            raise ReviewError(f"outcome key {key!r:.60} is unknown; use keys from {', '.join(OUTCOME_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ReviewError(f"outcome[{key!r}]={value!r:.60} must be a finite number")
        clean[key] = float(value)
    return clean


class ReviewService:
    """Review logic over a :class:`ReviewStore`; ``clock`` returns timezone-aware UTC (tests fake it)."""

    def __init__(self, store: ReviewStore, clock: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self._clock = clock or utcnow

    # ------------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the clock returned a naive datetime; return timezone-aware UTC")
        return now

    @staticmethod
    def _user_row(s: Session, actor: User) -> UserRow:
        """The actor as stored now (its role may have changed since sign-in)."""
        row = s.scalar(select(UserRow).where(UserRow.name == getattr(actor, "name", None)))
        if row is None or row.id != actor.id:
            raise AuthError(f"unknown user {getattr(actor, 'name', actor)!r}; sign in again")
        return row

    def _require(self, s: Session, actor: User, needed: Role, doing: str) -> UserRow:
        row = self._user_row(s, actor)
        if not role_allows(row.role, needed):
            raise PermissionDenied(
                f"{row.name} is a {row.role}; {doing} needs the {needed} role or higher (ask an admin)"
            )
        return row

    @staticmethod
    def _suggestion(s: Session, suggestion_id: int) -> SuggestionRow:
        row = s.get(SuggestionRow, suggestion_id)
        if row is None:
            raise NotFound(f"no suggestion {suggestion_id}; list the queue for valid ids")
        return row

    def _move(
        self,
        s: Session,
        row: SuggestionRow,
        target: str,
        actor: str,
        why: str | None,
        *,
        where: Sequence[ColumnElement[bool]] = (),
        strict: bool = True,
        **values: Any,
    ) -> bool:
        """Transition ``row`` to ``target`` with a conditional UPDATE and append the audit row.

        The UPDATE matches only the state and version that were read (plus ``where``), so a concurrent
        change makes it match no row: then :class:`InvalidTransition` (``strict``) or ``False``.
        """
        check_transition(row.id, row.state, target)
        before = _snapshot(row)
        stmt = (
            update(SuggestionRow)
            .where(SuggestionRow.id == row.id, SuggestionRow.state == row.state)
            .where(SuggestionRow.version == row.version, *where)
            .values(state=target, version=row.version + 1, **values)
            .execution_options(synchronize_session=False)
        )
        if cast(CursorResult[Any], s.execute(stmt)).rowcount != 1:
            if strict:
                raise InvalidTransition(f"suggestion {row.id} changed meanwhile; reload it and try again")
            return False
        s.refresh(row)
        s.add(
            AuditEntry(
                suggestion_id=row.id,
                actor=actor,
                at=self._now(),
                from_state=before["state"],
                to_state=target,
                before=before,
                after=_snapshot(row),
                reason=why,
            )
        )
        return True

    def _view(self, row: SuggestionRow, executions: int) -> SuggestionView:
        return SuggestionView(
            id=row.id,
            state=row.state,
            action=row.action,
            original_action=row.original_action,
            reasoning=row.reasoning,
            confidence=row.confidence,
            claimed_risk=row.claimed_risk,
            risk=row.risk,
            evidence=row.evidence,
            submitted_by=row.submitted_by,
            decided_by=row.decided_by,
            reason=row.reason,
            created_at=row.created_at,
            expires_at=row.expires_at,
            executions=executions,
            result=row.result,
            outcome=row.outcome,
            idempotency_key=idempotency_key(self.store.store_id, row.id),
            decided_at=row.decided_at,
            worker=row.worker,
            attempt=row.attempt,
            lease_until=row.lease_until,
        )

    @staticmethod
    def _execution_counts(s: Session, ids: Sequence[int]) -> dict[int, int]:
        if not ids:
            return {}
        rows = s.execute(
            select(ExecutionRow.suggestion_id, func.count())
            .where(ExecutionRow.suggestion_id.in_(ids))
            .group_by(ExecutionRow.suggestion_id)
        ).all()
        return {int(sid): int(n) for sid, n in rows}

    def _views(self, s: Session, rows: Sequence[SuggestionRow]) -> builtins.list[SuggestionView]:
        counts = self._execution_counts(s, [r.id for r in rows])
        return [self._view(r, counts.get(r.id, 0)) for r in rows]

    # ------------------------------------------------------------------------------------------------
    # users
    # ------------------------------------------------------------------------------------------------

    def add_user(self, actor: User | None, name: str, password: str, role: Role) -> User:
        """Create a user. The first user of an empty store needs no actor and must be an admin;
        after that only an admin may add users."""
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > 64:
            raise ReviewError("user name must be 1 to 64 characters")
        if shown(name) != name:
            raise ReviewError(f"user name {shown(name)!r} has control characters; use plain printable text")
        if role not in ROLES:
            raise ReviewError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        problem = password_problem(password)
        if problem is not None:
            raise ReviewError(problem)
        name = name.strip()
        password_hash = hash_password(password)  # slow on purpose: outside the transaction
        with self.store.session() as s:
            if s.scalar(select(func.count()).select_from(UserRow)) == 0:
                if role != "admin":
                    raise PermissionDenied("the first user must be an admin: add it with role 'admin'")
            elif actor is None:
                raise PermissionDenied("adding a user needs an admin actor; sign in as an admin")
            else:
                self._require(s, actor, "admin", "adding users")
            if s.scalar(select(UserRow.id).where(UserRow.name == name)) is not None:
                raise ReviewError(f"user {name!r} exists already; pick another name")
            row = UserRow(name=name, role=role, password_hash=password_hash, created_at=self._now())
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                raise ReviewError(f"user {name!r} exists already; pick another name") from None
            return User(id=row.id, name=row.name, role=role, created_at=row.created_at)

    def set_role(self, actor: User, name: str, role: Role) -> User:
        """Change a user's role (admin only); takes effect on that user's next call."""
        if role not in ROLES:
            raise ReviewError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        with self.store.session() as s:
            self._require(s, actor, "admin", "changing roles")
            row = s.scalar(select(UserRow).where(UserRow.name == name))
            if row is None:
                raise NotFound(f"no user {name!r}")
            row.role = role
            return User(id=row.id, name=row.name, role=role, created_at=row.created_at)

    def user(self, name: str) -> User | None:
        """The account ``name`` as stored now (its current role), or None. Not a sign-in: every other
        method still re-reads and checks the actor's role."""
        with self.store.session() as s:
            row = s.scalar(select(UserRow).where(UserRow.name == name))
            if row is None:
                return None
            return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)

    def now(self) -> datetime:
        """The service's clock (timezone-aware UTC)."""
        return self._now()

    def authenticate(self, name: str, password: str) -> User:
        """The user with that name and password; :class:`AuthError` otherwise (same message for both).

        After :data:`MAX_FAILED_SIGN_INS` failures for one name within :data:`SIGN_IN_WINDOW`, every
        sign-in of that name is refused (:class:`SignInThrottled`) for :data:`SIGN_IN_COOLDOWN`; the
        count lives in the store, so it holds across processes. A successful sign-in resets it.
        """
        key = (name or "").strip()[:64] if isinstance(name, str) else ""
        with self.store.session() as s:
            self._refuse_throttled(s, key)
            row = s.scalar(select(UserRow).where(UserRow.name == key))
        stored = row.password_hash if row is not None else _dummy_hash()
        ok = isinstance(password, str) and verify_password(password, stored) and row is not None
        if not ok or row is None:
            self._sign_in_failed(key)
            raise AuthError("unknown user or wrong password; check both and try again")
        with self.store.session() as s:
            self._refuse_throttled(s, key)  # a cool-down that began meanwhile holds for this one too
            s.execute(sa_delete(SignInFailureRow).where(SignInFailureRow.name == key))
        return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)

    def _refuse_throttled(self, s: Session, name: str) -> None:
        """:class:`SignInThrottled` while ``name`` is in a cool-down."""
        row = s.get(SignInFailureRow, name)
        now = self._now()
        if row is not None and row.locked_until is not None and row.locked_until > now:
            minutes = max(1, math.ceil((row.locked_until - now).total_seconds() / 60))
            raise SignInThrottled(
                f"too many failed sign-ins for {shown(name)!r}: try again in {minutes} minute(s), at "
                f"{row.locked_until.strftime('%H:%M')} UTC (or ask an admin to check the account)"
            )

    def _sign_in_failed(self, name: str) -> None:
        """Count one failed sign-in of ``name``; the :data:`MAX_FAILED_SIGN_INS`-th starts a cool-down."""
        for attempt in range(2):  # a concurrent first failure may insert the row first: count again
            try:
                with self.store.session() as s:
                    self._count_failure(s, name)
                return
            except IntegrityError:
                if attempt:
                    raise

    def _count_failure(self, s: Session, name: str) -> None:
        now = self._now()
        query = select(SignInFailureRow).where(SignInFailureRow.name == name)
        if self.store.dialect == "postgresql":
            query = query.with_for_update()
        row = s.scalars(query).first()
        if row is None:
            row = SignInFailureRow(name=name, failures=0, window_start=now, locked_until=None)
            s.add(row)
        elif row.window_start <= now - SIGN_IN_WINDOW or (row.locked_until and row.locked_until <= now):
            row.failures, row.window_start, row.locked_until = 0, now, None
        row.failures += 1
        if row.failures >= MAX_FAILED_SIGN_INS:
            row.locked_until = now + SIGN_IN_COOLDOWN
        s.flush()

    # ------------------------------------------------------------------------------------------------
    # suggestions and decisions
    # ------------------------------------------------------------------------------------------------

    def submit(self, actor: User, data: Mapping[str, Any] | SuggestionIn) -> int:
        """A new pending suggestion (reviewer or higher): its id; :class:`SuggestionError` if malformed."""
        with self.store.session() as s:
            user = self._require(s, actor, "reviewer", "submitting suggestions")
            raw = data.model_dump() if isinstance(data, SuggestionIn) else data
            sug = parse_suggestion(raw)  # re-validated even when given a model
            ours = classify_risk(sug.action, sug.evidence, sug.confidence)
            risk = effective_risk(sug.risk, ours)
            now = self._now()
            row = SuggestionRow(
                state="pending",
                action=sug.action.model_dump(),
                original_action=None,
                reasoning=sug.reasoning,
                confidence=sug.confidence,
                claimed_risk=sug.risk,
                risk=risk,
                risk_rank=RISKS.index(risk),
                evidence=sug.evidence.model_dump(),
                submitted_by=user.name,
                created_at=now,
                expires_at=now + timedelta(hours=sug.expires_in_hours),
                attempt=0,
                version=0,
            )
            s.add(row)
            s.flush()
            s.add(
                AuditEntry(
                    suggestion_id=row.id,
                    actor=user.name,
                    at=now,
                    from_state=None,
                    to_state="pending",
                    before=None,
                    after=_snapshot(row),
                    reason=f"risk claimed {sug.risk}, ours {ours}: {risk}",
                )
            )
            return row.id

    def list(
        self,
        actor: User,
        *,
        state: str | None = None,
        risk: Risk | None = None,
        sort: Literal["risk", "expiry", "created"] = "risk",
    ) -> builtins.list[SuggestionView]:
        """Suggestions, filtered; ``sort``: risk (high first, then soonest expiry), expiry (soonest
        first) or created (oldest first)."""
        if state is not None and state not in STATES:
            raise ReviewError(f"unknown state {state!r}; use one of {', '.join(STATES)}")
        if risk is not None and risk not in RISKS:
            raise ReviewError(f"unknown risk {risk!r}; use one of {', '.join(RISKS)}")
        orders = {
            "risk": (SuggestionRow.risk_rank.desc(), SuggestionRow.expires_at, SuggestionRow.id),
            "expiry": (SuggestionRow.expires_at, SuggestionRow.id),
            "created": (SuggestionRow.created_at, SuggestionRow.id),
        }
        if sort not in orders:
            raise ReviewError(f"unknown sort {sort!r}; use risk, expiry or created")
        with self.store.session() as s:
            self._require(s, actor, "viewer", "listing suggestions")
            query = select(SuggestionRow).order_by(*orders[sort])
            if state is not None:
                query = query.where(SuggestionRow.state == state)
            if risk is not None:
                query = query.where(SuggestionRow.risk == risk)
            return self._views(s, s.scalars(query).all())

    def get(self, actor: User, suggestion_id: int) -> SuggestionView:
        """One suggestion; :class:`NotFound` when there is none with that id."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "viewing suggestions")
            return self._views(s, [self._suggestion(s, suggestion_id)])[0]

    def pending_count(self, actor: User) -> int:
        """How many suggestions wait for a decision."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "viewing the queue")
            query = select(func.count()).select_from(SuggestionRow).where(SuggestionRow.state == "pending")
            return int(s.scalar(query) or 0)

    def _approval_refusal(self, user: UserRow, row: SuggestionRow, risk: str) -> str | None:
        """Why ``user`` may not approve ``row`` at ``risk`` (None when they may)."""
        if row.submitted_by == user.name:
            return f"{user.name} submitted suggestion {row.id}; someone else must approve it"
        needed = _APPROVER_FOR[risk]
        if not role_allows(user.role, needed):
            return f"{user.name} is a {user.role}; approving {risk} risk needs the {needed} role or higher"
        return None

    def _check_decidable(self, row: SuggestionRow, target: str, now: datetime) -> None:
        check_transition(row.id, row.state, target)
        if row.expires_at <= now:
            raise InvalidTransition(
                f"suggestion {row.id} expired at {row.expires_at.isoformat()}; it can no longer be decided"
            )

    def decide(
        self,
        actor: User,
        suggestion_id: int,
        decision: Literal["approve", "reject", "modify"],
        reason: str | None = None,
        action: Mapping[str, Any] | None = None,
    ) -> SuggestionView:
        """Approve, reject (``reason`` required) or modify (``action`` required) a pending suggestion.

        Nobody approves or modifies a suggestion they submitted; high risk (after re-classifying a
        modified action) needs an approver.
        """
        targets = {"approve": "approved", "reject": "rejected", "modify": "modified"}
        if decision not in targets:
            raise ReviewError(f"unknown decision {decision!r}; use approve, reject or modify")
        note = _text(
            reason, "a rejection reason" if decision == "reject" else "reason", required=decision == "reject"
        )
        new_action = None
        if decision == "modify":
            if action is None:
                raise ReviewError("modify needs the changed action; pass action={...}")
            new_action = parse_action(action)
        elif action is not None:
            raise ReviewError(f"{decision} takes no action; use decision='modify' to change it")
        with self.store.session() as s:
            user = self._require(s, actor, "reviewer", f"deciding ({decision})")
            row = self._suggestion(s, suggestion_id)
            now = self._now()
            self._check_decidable(row, targets[decision], now)
            values: dict[str, Any] = {"decided_by": user.name, "decided_at": now, "reason": note}
            if new_action is not None:
                if new_action.model_dump() == row.action:
                    raise ReviewError("the modified action equals the original; use decision='approve'")
                evidence = Evidence.model_validate(row.evidence)
                risk = effective_risk(
                    cast(Risk, row.claimed_risk), classify_risk(new_action, evidence, row.confidence)
                )
                values |= {
                    "action": new_action.model_dump(),
                    "original_action": row.action,
                    "risk": risk,
                    "risk_rank": RISKS.index(risk),
                }
            if decision != "reject":
                refusal = self._approval_refusal(user, row, values.get("risk", row.risk))
                if refusal:
                    raise PermissionDenied(refusal)
            self._move(s, row, targets[decision], user.name, note, **values)
            return self._views(s, [row])[0]

    def approve_batch(self, actor: User, ids: Sequence[int]) -> dict[int, str]:
        """Approve several pending suggestions at once; high risk is always refused here.

        Returns ``{id: "approved" | "refused: <why>"}``; the refused ones are left as they were.
        """
        results: dict[int, str] = {}
        with self.store.session() as s:
            user = self._require(s, actor, "reviewer", "batch approval")
            now = self._now()
            for sid in dict.fromkeys(ids):
                row = s.get(SuggestionRow, sid)
                if row is None:
                    results[sid] = "refused: not found"
                    continue
                if row.risk == "high":
                    results[sid] = "refused: high risk; an approver must approve it on its own"
                    continue
                refusal = self._approval_refusal(user, row, row.risk)
                if refusal is None:
                    try:
                        self._check_decidable(row, "approved", now)
                    except InvalidTransition as e:
                        refusal = str(e)
                if refusal is None:
                    values: dict[str, Any] = {
                        "decided_by": user.name,
                        "decided_at": now,
                        "reason": "batch approval",
                    }
                    moved = self._move(
                        s, row, "approved", user.name, "batch approval", strict=False, **values
                    )
                    refusal = None if moved else "it changed meanwhile; reload and retry"
                results[sid] = "approved" if refusal is None else f"refused: {refusal}"
        return results

    def expire_due(self) -> int:
        """Move every pending suggestion past its expiry to ``expired``; how many moved."""
        with self.store.session() as s:
            now = self._now()
            query = select(SuggestionRow).where(
                SuggestionRow.state == "pending", SuggestionRow.expires_at <= now
            )
            if self.store.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            moved = 0
            for row in s.scalars(query).all():
                why = f"not decided before {row.expires_at.isoformat()}"
                moved += self._move(s, row, "expired", "system", why, strict=False)
            return moved

    # ------------------------------------------------------------------------------------------------
    # execution (workers)
    # ------------------------------------------------------------------------------------------------

    @staticmethod
    def _execution_refusal(s: Session, row: SuggestionRow) -> str | None:
        """Why an approved suggestion must not reach the market now (the decider lost the right)."""
        decider = s.scalar(select(UserRow).where(UserRow.name == row.decided_by))
        needed = _APPROVER_FOR[row.risk]
        if decider is None:
            return f"the decider {row.decided_by!r} no longer exists; submit it again"
        if not role_allows(decider.role, needed):
            return (
                f"the decider {decider.name} is now a {decider.role}; {row.risk} risk needs the {needed} "
                "role or higher; submit it again"
            )
        return None

    def execution_refusal(self, suggestion_id: int) -> str | None:
        """Why ``suggestion_id`` must not reach the market now (its decider may no longer approve its
        risk, or it is gone), else None. Workers call it right before launching, for takeovers too."""
        with self.store.session() as s:
            row = s.get(SuggestionRow, suggestion_id)
            if row is None:
                return f"suggestion {suggestion_id} no longer exists"
            return self._execution_refusal(s, row)

    def require_executor(self, actor: User) -> User:
        """``actor`` as stored now, when its role may launch suggestions (:data:`EXECUTOR_ROLE` or
        higher); :class:`PermissionDenied` otherwise."""
        with self.store.session() as s:
            row = self._require(s, actor, EXECUTOR_ROLE, "running the worker (launching suggestions)")
            return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)

    def claim(self, actor: User, worker: str, lease_seconds: float = 60.0) -> Claim | None:
        """Take the next approved (or abandoned executing) suggestion for ``worker``, or ``None``.

        ``actor`` is the user the worker runs as: its role must allow executing
        (:data:`EXECUTOR_ROLE` or higher), checked on every claim. ``worker`` is restricted to
        :data:`~transferlab.human_review.text.WORKER_ID` (it goes into the audit trail).

        Exactly one worker wins a suggestion: a conditional UPDATE (row count 1 wins; on PostgreSQL the
        row is picked with ``FOR UPDATE SKIP LOCKED``). An ``executing`` suggestion whose lease ran out
        is taken over with ``attempt + 1`` and the same idempotency key. Before a first claim the
        decider's role is re-checked; if it no longer allows the risk, the suggestion goes to
        ``failed`` and nothing is handed out for it.
        """
        try:
            check_worker_id(worker)
        except ValueError as e:
            raise ReviewError(str(e)) from None
        if not (isinstance(lease_seconds, int | float) and 0 < lease_seconds <= 7 * 24 * 3600):
            raise ReviewError("lease_seconds must be in (0, 604800]")
        who = f"worker:{worker}"
        with self.store.session() as s:
            runner = self._require(s, actor, EXECUTOR_ROLE, "running the worker (launching suggestions)")
            now = self._now()
            claimable = or_(
                SuggestionRow.state.in_(_READY),
                and_(SuggestionRow.state == "executing", SuggestionRow.lease_until < now),
            )
            skipped: set[int] = set()
            while True:
                query = select(SuggestionRow).where(claimable).order_by(SuggestionRow.id).limit(1)
                if skipped:
                    query = query.where(SuggestionRow.id.not_in(skipped))
                if self.store.dialect == "postgresql":
                    query = query.with_for_update(skip_locked=True)
                row = s.scalars(query).first()
                if row is None:
                    return None
                skipped.add(row.id)
                if row.state in _READY:
                    refusal = self._execution_refusal(s, row)
                    if refusal is not None:
                        self._move(
                            s, row, "failed", who, refusal, strict=False, reason=refusal, lease_until=None
                        )
                        continue
                why = (
                    f"lease of worker {row.worker} (attempt {row.attempt}) ran out; taken over"
                    if row.state == "executing"
                    else "claimed"
                ) + f" (worker runs as {runner.name})"
                until = now + timedelta(seconds=lease_seconds)
                values = {"worker": worker, "attempt": row.attempt + 1, "lease_until": until}
                if self._move(s, row, "executing", who, why, where=[claimable], strict=False, **values):
                    campaign = parse_action(row.action).to_campaign().to_dict()
                    key = idempotency_key(self.store.store_id, row.id)
                    return Claim(row.id, campaign, key, worker, row.attempt, until)

    def _held(self, s: Session, claim: Claim) -> SuggestionRow:
        """The claimed row, if ``claim`` still holds it; :class:`InvalidTransition` otherwise."""
        row = self._suggestion(s, claim.suggestion_id)
        if row.state != "executing":
            raise InvalidTransition(
                f"suggestion {row.id} is {row.state}, not executing; this claim (worker {claim.worker}, "
                f"attempt {claim.attempt}) is finished; do not launch again"
            )
        if (row.worker, row.attempt) != (claim.worker, claim.attempt):
            raise InvalidTransition(
                f"claim lost: suggestion {row.id} is now held by worker {row.worker} (attempt {row.attempt}) "
                f"after this lease (worker {claim.worker}, attempt {claim.attempt}) ran out"
            )
        return row

    def complete(self, claim: Claim, result: Mapping[str, Any]) -> None:
        """Record the launch under the claim's key and mark the suggestion executed (one transaction).

        Refused (:class:`InvalidTransition`) when the claim no longer holds the suggestion or the key was
        executed already.
        """
        payload = _json_payload(result, "result")
        with self.store.session() as s:
            row = self._held(s, claim)
            held = [SuggestionRow.worker == claim.worker, SuggestionRow.attempt == claim.attempt]
            actor = f"worker:{claim.worker}"
            self._move(s, row, "executed", actor, None, where=held, result=payload, lease_until=None)
            s.add(
                ExecutionRow(
                    idempotency_key=claim.idempotency_key,
                    suggestion_id=row.id,
                    worker=claim.worker,
                    attempt=claim.attempt,
                    result=payload,
                    at=self._now(),
                )
            )
            try:
                s.flush()
            except IntegrityError:
                raise InvalidTransition(
                    f"key {claim.idempotency_key} was executed already; nothing recorded twice"
                ) from None

    def fail(self, claim: Claim, error: str) -> None:
        """Mark the claimed suggestion failed with ``error`` (only while the claim holds it)."""
        why = _text(error, "error", required=True)
        with self.store.session() as s:
            row = self._held(s, claim)
            held = [SuggestionRow.worker == claim.worker, SuggestionRow.attempt == claim.attempt]
            self._move(
                s, row, "failed", f"worker:{claim.worker}", why, where=held, reason=why, lease_until=None
            )

    def record_feedback(self, suggestion_id: int, outcome: Mapping[str, float], source: str) -> None:
        """The matured outcome of an executed suggestion: ``executed -> feedback_received``."""
        clean = _outcome(outcome)
        who = _text(source, "source", required=True, limit=160)
        with self.store.session() as s:
            row = self._suggestion(s, suggestion_id)
            self._move(s, row, "feedback_received", cast(str, who), None, outcome=clean)
            s.add(FeedbackRow(suggestion_id=row.id, outcome=clean, source=cast(str, who), at=self._now()))

    # ------------------------------------------------------------------------------------------------
    # ratings and audit
    # ------------------------------------------------------------------------------------------------

    def rate(self, actor: User, subject: str, score: float, comment: str = "") -> int:
        """Store a 0-10 rating of ``subject`` (a report, ``suggestion-<id>``, ...); its id.

        One rating per rater and subject: a second one replaces the first (same id), and the change
        (old and new score and comment) is kept in the append-only rating changes
        (:meth:`rating_changes`). Nobody rates a report they added or a suggestion they submitted.
        """
        what = cast(str, _text(subject, "subject", required=True, limit=200))
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 10:
            raise ReviewError(f"score={score!r:.40} must be a number from 0 to 10")
        note = _text(comment, "comment") or ""
        for attempt in range(2):  # a concurrent first rating may insert the row first: replace it then
            try:
                with self.store.session() as s:
                    user = self._require(s, actor, "reviewer", "rating")
                    self._refuse_own_subject(s, user, what)
                    return self._upsert_rating(s, user.name, what, float(score), note)
            except IntegrityError:
                if attempt:
                    raise ReviewError(f"{what} was rated meanwhile; try again") from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _refuse_own_subject(s: Session, user: UserRow, subject: str) -> None:
        """:class:`PermissionDenied` when ``subject`` is a report ``user`` added or a suggestion they
        submitted."""
        report_id, suggestion_id = _report_id(subject), _suggestion_id(subject)
        author = None
        if report_id is not None:
            author = s.scalar(select(ReportRow.created_by).where(ReportRow.id == report_id))
        elif suggestion_id is not None:
            author = s.scalar(select(SuggestionRow.submitted_by).where(SuggestionRow.id == suggestion_id))
        if author == user.name:
            raise PermissionDenied(f"{user.name} added {subject}; someone else must rate it")

    def _upsert_rating(self, s: Session, rater: str, subject: str, score: float, comment: str) -> int:
        """Insert the rating, or replace ``rater``'s earlier one and record the change."""
        query = select(RatingRow).where(RatingRow.rater == rater, RatingRow.subject == subject)
        if self.store.dialect == "postgresql":
            query = query.with_for_update()
        now = self._now()
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

    def rating_changes(self, actor: User, subject: str | None = None) -> builtins.list[RatingChange]:
        """Every replaced rating (of ``subject`` when given), oldest first."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "reading rating changes")
            query = select(RatingChangeRow).order_by(RatingChangeRow.id)
            if subject is not None:
                query = query.where(RatingChangeRow.subject == subject)
            return [
                RatingChange(
                    c.id, c.subject, c.rater, c.old_score, c.new_score, c.old_comment, c.new_comment, c.at
                )
                for c in s.scalars(query)
            ]

    def ratings(self, actor: User, subject: str | None = None) -> builtins.list[Rating]:
        """Every rating (of ``subject`` when given), oldest first."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "reading ratings")
            query = select(RatingRow).order_by(RatingRow.id)
            if subject is not None:
                query = query.where(RatingRow.subject == subject)
            return [Rating(r.id, r.subject, r.score, r.rater, r.comment, r.at) for r in s.scalars(query)]

    # ------------------------------------------------------------------------------------------------
    # analysis reports to rate
    # ------------------------------------------------------------------------------------------------

    @staticmethod
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
        self,
        actor: User,
        task_id: str,
        question: str,
        text: str,
        rubric_score: float | None,
        source: str,
    ) -> int:
        """Put an analysis report in front of reviewers; its id (rate it as ``report_subject(id)``).

        ``rubric_score`` is the rubric's 0-10 grade (None when ungraded); ``source`` who wrote it
        (``expert``, ``random``, ``policy:<name>``). Needs the role that submits suggestions.
        """
        task = cast(str, _text(task_id, "task_id", required=True, limit=64))
        asked = cast(str, _text(question, "question (the task text)", required=True))
        body = _text(text, "report text", limit=MAX_REPORT)
        if body is None:
            raise ReviewError("report text is empty: give the report's full text to rate")
        score = _rubric(rubric_score)
        who = cast(
            str, _text(source, "source (e.g. expert, random, policy:<name>)", required=True, limit=160)
        )
        with self.store.session() as s:
            user = self._require(s, actor, "reviewer", "adding reports")
            row = ReportRow(
                task_id=task,
                question=asked,
                text=body,
                rubric_score=score,
                source=who,
                created_at=self._now(),
                created_by=user.name,
            )
            s.add(row)
            s.flush()
            return row.id

    def reports(self, actor: User, unrated_by: User | None = None) -> builtins.list[Report]:
        """Every report, oldest first; with ``unrated_by``, only those that user may still rate (not
        rated yet, and not added by them)."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "reading reports")
            query = select(ReportRow).order_by(ReportRow.id)
            if unrated_by is not None:
                rated = select(RatingRow.subject).where(RatingRow.rater == unrated_by.name)
                query = query.where((literal("report-") + cast_(ReportRow.id, String)).not_in(rated))
                query = query.where(ReportRow.created_by != unrated_by.name)
            return [self._report(r) for r in s.scalars(query)]

    def report(self, actor: User, report_id: int) -> Report:
        """One report; :class:`NotFound` when there is none with that id."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "reading reports")
            row = s.get(ReportRow, report_id)
            if row is None:
                raise NotFound(f"no report {report_id}; list them with `transferlab review reports list`")
            return self._report(row)

    def audit(self, actor: User, suggestion_id: int | None = None) -> builtins.list[AuditRow]:
        """The audit trail (of one suggestion when given), oldest first."""
        with self.store.session() as s:
            self._require(s, actor, "viewer", "reading the audit trail")
            query = select(AuditEntry).order_by(AuditEntry.id)
            if suggestion_id is not None:
                self._suggestion(s, suggestion_id)
                query = query.where(AuditEntry.suggestion_id == suggestion_id)
            return [
                AuditRow(
                    e.id,
                    e.suggestion_id,
                    e.actor,
                    e.at,
                    e.from_state,
                    e.to_state,
                    e.before,
                    e.after,
                    e.reason,
                )
                for e in s.scalars(query)
            ]


@functools.cache
def _dummy_hash() -> str:
    """A hash to check unknown users against, so they take as long as known ones."""
    return hash_password("not a password: evens out the time an unknown user takes")

"""The review service: users, suggestions, decisions, exactly-once execution, feedback and ratings.

Every public method is one database transaction, and every permission is checked here (the app only
hides what a role cannot do; hiding is not authorisation). The state machine is :data:`TRANSITIONS`;
each transition writes one append-only audit row with the suggestion before and after.

:class:`ReviewService` is a thin facade over one module per concern: ``service_accounts`` (users,
roles, sign-in and its throttling), ``service_decisions`` (submit, queue, decide, batch approval,
expiry, audit), ``service_execution`` (claim, complete, fail, feedback: the exactly-once path) and
``service_ratings`` (ratings, reports); what they share is in ``service_common``.

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
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from transferlab.human_review import (
    service_accounts,
    service_decisions,
    service_execution,
    service_ratings,
)
from transferlab.human_review.auth import Role
from transferlab.human_review.schema import ReviewError, Risk, SuggestionError, SuggestionIn
from transferlab.human_review.service_accounts import MAX_FAILED_SIGN_INS as MAX_FAILED_SIGN_INS
from transferlab.human_review.service_accounts import SIGN_IN_COOLDOWN as SIGN_IN_COOLDOWN
from transferlab.human_review.service_accounts import SIGN_IN_WINDOW as SIGN_IN_WINDOW
from transferlab.human_review.service_accounts import SignInThrottled
from transferlab.human_review.service_common import MAX_TEXT as MAX_TEXT
from transferlab.human_review.service_common import (
    STATES,
    TRANSITIONS,
    AuthError,
    InvalidTransition,
    NotFound,
    PermissionDenied,
    ServiceContext,
    User,
)
from transferlab.human_review.service_common import State as State
from transferlab.human_review.service_common import check_transition as check_transition
from transferlab.human_review.service_common import idempotency_key as idempotency_key
from transferlab.human_review.service_decisions import AuditRow, SuggestionView
from transferlab.human_review.service_execution import Claim
from transferlab.human_review.service_ratings import MAX_REPORT as MAX_REPORT
from transferlab.human_review.service_ratings import Rating, RatingChange, Report, report_subject
from transferlab.human_review.store import ReviewStore, utcnow

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


class ReviewService:
    """Review logic over a :class:`ReviewStore`; ``clock`` returns timezone-aware UTC (tests fake it)."""

    def __init__(self, store: ReviewStore, clock: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self._clock = clock or utcnow
        self._ctx = ServiceContext(store, self._clock)

    def now(self) -> datetime:
        """The service's clock (timezone-aware UTC)."""
        return self._ctx.now()

    # ------------------------------------------------------------------------------------------------
    # users (service_accounts)
    # ------------------------------------------------------------------------------------------------

    def add_user(self, actor: User | None, name: str, password: str, role: Role) -> User:
        """Create a user. The first user of an empty store needs no actor and must be an admin;
        after that only an admin may add users."""
        return service_accounts.add_user(self._ctx, actor, name, password, role)

    def set_role(self, actor: User, name: str, role: Role) -> User:
        """Change a user's role (admin only); takes effect on that user's next call."""
        return service_accounts.set_role(self._ctx, actor, name, role)

    def list_users(self, actor: User) -> list[tuple[User, bool]]:
        """Every account with whether it is disabled, oldest first (admin only)."""
        return service_accounts.list_users(self._ctx, actor)

    def disable_user(self, actor: User, name: str) -> User:
        """Refuse every sign-in of ``name`` from now on, signed-in sessions included (admin only; not
        one's own account). ``set_password`` by an admin enables it again."""
        return service_accounts.disable_user(self._ctx, actor, name)

    def set_password(self, actor: User, name: str, password: str) -> User:
        """Set ``name``'s password: one's own, or anyone's as an admin (enabling a disabled account)."""
        return service_accounts.set_password(self._ctx, actor, name, password)

    def user(self, name: str) -> User | None:
        """The account ``name`` as stored now (its current role), or None. Not a sign-in: every other
        method still re-reads and checks the actor's role."""
        return service_accounts.user(self._ctx, name)

    def authenticate(self, name: str, password: str) -> User:
        """The user with that name and password; :class:`AuthError` otherwise (same message for both).

        After :data:`MAX_FAILED_SIGN_INS` failures for one name within :data:`SIGN_IN_WINDOW`, every
        sign-in of that name is refused (:class:`SignInThrottled`) for :data:`SIGN_IN_COOLDOWN`; the
        count lives in the store, so it holds across processes. A successful sign-in resets it.
        """
        return service_accounts.authenticate(self._ctx, name, password)

    # ------------------------------------------------------------------------------------------------
    # suggestions and decisions (service_decisions)
    # ------------------------------------------------------------------------------------------------

    def submit(self, actor: User, data: Mapping[str, Any] | SuggestionIn) -> int:
        """A new pending suggestion (reviewer or higher): its id; :class:`SuggestionError` if malformed."""
        return service_decisions.submit(self._ctx, actor, data)

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
        return service_decisions.list_suggestions(self._ctx, actor, state=state, risk=risk, sort=sort)

    def get(self, actor: User, suggestion_id: int) -> SuggestionView:
        """One suggestion; :class:`NotFound` when there is none with that id."""
        return service_decisions.get(self._ctx, actor, suggestion_id)

    def pending_count(self, actor: User) -> int:
        """How many suggestions wait for a decision."""
        return service_decisions.pending_count(self._ctx, actor)

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
        return service_decisions.decide(self._ctx, actor, suggestion_id, decision, reason, action)

    def approve_batch(self, actor: User, ids: Sequence[int]) -> dict[int, str]:
        """Approve several pending suggestions at once; high risk is always refused here.

        Returns ``{id: "approved" | "refused: <why>"}``; the refused ones are left as they were.
        """
        return service_decisions.approve_batch(self._ctx, actor, ids)

    def expire_due(self) -> int:
        """Move every pending suggestion past its expiry to ``expired``; how many moved."""
        return service_decisions.expire_due(self._ctx)

    def audit(self, actor: User, suggestion_id: int | None = None) -> builtins.list[AuditRow]:
        """The audit trail (of one suggestion when given), oldest first."""
        return service_decisions.audit(self._ctx, actor, suggestion_id)

    # ------------------------------------------------------------------------------------------------
    # execution by workers, and feedback (service_execution)
    # ------------------------------------------------------------------------------------------------

    def execution_refusal(self, suggestion_id: int) -> str | None:
        """Why ``suggestion_id`` must not reach the market now (its decider may no longer approve its
        risk, or it is gone), else None. Workers call it right before launching, for takeovers too."""
        return service_execution.execution_refusal(self._ctx, suggestion_id)

    def require_executor(self, actor: User) -> User:
        """``actor`` as stored now, when its role may launch suggestions (:data:`EXECUTOR_ROLE` or
        higher); :class:`PermissionDenied` otherwise."""
        return service_execution.require_executor(self._ctx, actor)

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
        return service_execution.claim(self._ctx, actor, worker, lease_seconds)

    def complete(self, claim: Claim, result: Mapping[str, Any]) -> None:
        """Record the launch under the claim's key and mark the suggestion executed (one transaction).

        Refused (:class:`InvalidTransition`) when the claim no longer holds the suggestion or the key was
        executed already.
        """
        service_execution.complete(self._ctx, claim, result)

    def fail(self, claim: Claim, error: str) -> None:
        """Mark the claimed suggestion failed with ``error`` (only while the claim holds it)."""
        service_execution.fail(self._ctx, claim, error)

    def record_feedback(self, suggestion_id: int, outcome: Mapping[str, float], source: str) -> None:
        """The matured outcome of an executed suggestion: ``executed -> feedback_received``."""
        service_execution.record_feedback(self._ctx, suggestion_id, outcome, source)

    # ------------------------------------------------------------------------------------------------
    # ratings and analysis reports to rate (service_ratings)
    # ------------------------------------------------------------------------------------------------

    def rate(self, actor: User, subject: str, score: float, comment: str = "") -> int:
        """Store a 0-10 rating of ``subject`` (a report, ``suggestion-<id>``, ...); its id.

        One rating per rater and subject: a second one replaces the first (same id), and the change
        (old and new score and comment) is kept in the append-only rating changes
        (:meth:`rating_changes`). Nobody rates a report they added or a suggestion they submitted.
        """
        return service_ratings.rate(self._ctx, actor, subject, score, comment)

    def rating_changes(self, actor: User, subject: str | None = None) -> builtins.list[RatingChange]:
        """Every replaced rating (of ``subject`` when given), oldest first."""
        return service_ratings.rating_changes(self._ctx, actor, subject)

    def ratings(self, actor: User, subject: str | None = None) -> builtins.list[Rating]:
        """Every rating (of ``subject`` when given), oldest first."""
        return service_ratings.ratings(self._ctx, actor, subject)

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
        return service_ratings.add_report(self._ctx, actor, task_id, question, text, rubric_score, source)

    def reports(self, actor: User, unrated_by: User | None = None) -> builtins.list[Report]:
        """Every report, oldest first; with ``unrated_by``, only those that user may still rate (not
        rated yet, and not added by them)."""
        return service_ratings.reports(self._ctx, actor, unrated_by)

    def report(self, actor: User, report_id: int) -> Report:
        """One report; :class:`NotFound` when there is none with that id."""
        return service_ratings.report(self._ctx, actor, report_id)

"""What every part of the review service shares: errors, the state machine, the signed-in user, the
store and clock (:class:`ServiceContext`), role checks, and the audited transition :func:`move`.

The concern modules (``service_accounts``, ``service_decisions``, ``service_execution``,
``service_ratings``) import this one and never each other; :mod:`~transferlab.human_review.service` is
the facade over them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast, get_args

from sqlalchemy import select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from transferlab.human_review.auth import Role, role_allows
from transferlab.human_review.schema import ReviewError
from transferlab.human_review.store import AuditEntry, ReviewStore, SuggestionRow, UserRow

__all__ = [
    "APPROVER_FOR",
    "MAX_TEXT",
    "STATES",
    "TRANSITIONS",
    "AuthError",
    "InvalidTransition",
    "NotFound",
    "PermissionDenied",
    "ServiceContext",
    "State",
    "User",
    "check_transition",
    "free_text",
    "idempotency_key",
    "jsonable_times",
    "move",
    "require",
    "snapshot",
    "suggestion_row",
    "user_row",
]


class AuthError(ReviewError):
    """Unknown user or wrong password."""


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
#: The least role that may approve each risk (checked when deciding and again before execution).
APPROVER_FOR: dict[str, Role] = {"low": "reviewer", "medium": "reviewer", "high": "approver"}
MAX_TEXT = 4000


@dataclass(frozen=True)
class User:
    """A signed-in user as the service hands it out (its role is re-read from the store on every call)."""

    id: int
    name: str
    role: Role
    created_at: datetime


@dataclass(frozen=True)
class ServiceContext:
    """The store and the clock every service call works with; ``clock`` returns timezone-aware UTC."""

    store: ReviewStore
    clock: Callable[[], datetime]

    def now(self) -> datetime:
        """The clock's time; :class:`ValueError` when the clock returns a naive datetime."""
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the clock returned a naive datetime; return timezone-aware UTC")
        return now


def jsonable_times(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its datetimes as ISO 8601 strings."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in data.items()}


def idempotency_key(store_id: str, suggestion_id: int) -> str:
    """The key a suggestion is launched under, on every attempt: ``<store id>:suggestion-<id>``.

    The store id is random per store, so two stores (or a store rebuilt from scratch) never share a key.

    >>> idempotency_key("3f2a9c0d1e4b5a6f", 7)
    '3f2a9c0d1e4b5a6f:suggestion-7'
    """
    return f"{store_id}:suggestion-{suggestion_id}"


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


def snapshot(row: SuggestionRow) -> dict[str, Any]:
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


def free_text(value: str | None, what: str, *, required: bool = False, limit: int = MAX_TEXT) -> str | None:
    """Validated free text: stripped; ``None`` when empty (unless required).

    >>> free_text("  a reason ", "reason")
    'a reason'
    >>> free_text("", "a rejection reason", required=True)
    Traceback (most recent call last):
    ...
    transferlab.human_review.schema.ReviewError: a rejection reason is required: say why in a sentence
    """
    if value is not None and not isinstance(value, str):
        raise ReviewError(f"{what} must be text, got {type(value).__name__}")
    text = (value or "").strip()
    if required and not text:
        raise ReviewError(f"{what} is required: say why in a sentence")
    if len(text) > limit:
        raise ReviewError(f"{what} has {len(text)} characters; shorten it to at most {limit}")
    return text or None


DISABLED_PREFIX = "!"
"""A disabled account's stored password hash starts with this (as in /etc/shadow): no password matches
it, and a new password (``users passwd``) enables the account again."""


def is_disabled(row: UserRow) -> bool:
    """Whether the stored account is disabled."""
    return row.password_hash.startswith(DISABLED_PREFIX)


def user_row(s: Session, actor: User) -> UserRow:
    """The actor as stored now (its role may have changed, or it may have been disabled, since sign-in)."""
    row = s.scalar(select(UserRow).where(UserRow.name == getattr(actor, "name", None)))
    if row is None or row.id != actor.id:
        raise AuthError(f"unknown user {getattr(actor, 'name', actor)!r}; sign in again")
    if is_disabled(row):
        raise AuthError(f"the account {row.name!r} is disabled; ask an admin")
    return row


def require(s: Session, actor: User, needed: Role, doing: str) -> UserRow:
    """The actor as stored now, when its role allows ``needed``; :class:`PermissionDenied` otherwise."""
    row = user_row(s, actor)
    if not role_allows(row.role, needed):
        raise PermissionDenied(
            f"{row.name} is a {row.role}; {doing} needs the {needed} role or higher (ask an admin)"
        )
    return row


def suggestion_row(s: Session, suggestion_id: int) -> SuggestionRow:
    """The stored suggestion; :class:`NotFound` when there is none with that id."""
    row = s.get(SuggestionRow, suggestion_id)
    if row is None:
        raise NotFound(f"no suggestion {suggestion_id}; list the queue for valid ids")
    return row


def move(
    ctx: ServiceContext,
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
    before = snapshot(row)
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
            at=ctx.now(),
            from_state=before["state"],
            to_state=target,
            before=before,
            after=snapshot(row),
            reason=why,
        )
    )
    return True

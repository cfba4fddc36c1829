"""Execution, the exactly-once path: workers claim approved suggestions under a lease, complete them
under the suggestion's idempotency key, or fail them; matured outcomes come back as feedback.

Exactly one worker wins a suggestion (a conditional UPDATE on state and version, see
:func:`~transferlab.human_review.service_common.move`); a launch is recorded once per key (the
executions table's unique key); the decider's right to approve the risk is re-checked before a first
claim (:func:`execution_refusal`). Each public function is one call of
:class:`~transferlab.human_review.service.ReviewService`, which documents the contract.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from transferlab.human_review.auth import EXECUTOR_ROLE, Role, role_allows
from transferlab.human_review.schema import ReviewError, parse_action
from transferlab.human_review.service_common import (
    APPROVER_FOR,
    InvalidTransition,
    ServiceContext,
    User,
    free_text,
    idempotency_key,
    move,
    require,
    suggestion_row,
)
from transferlab.human_review.store import ExecutionRow, FeedbackRow, SuggestionRow, UserRow
from transferlab.human_review.text import check_worker_id
from transferlab.simulator.vocabulary import OUTCOME_KEYS

__all__ = [
    "Claim",
    "claim",
    "complete",
    "execution_refusal",
    "fail",
    "record_feedback",
    "require_executor",
]

_READY = ("approved", "modified")
_MAX_LEASE_S = 7 * 24 * 3600


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


def _decider_refusal(s: Session, row: SuggestionRow) -> str | None:
    """Why an approved suggestion must not reach the market now (the decider lost the right)."""
    decider = s.scalar(select(UserRow).where(UserRow.name == row.decided_by))
    needed = APPROVER_FOR[row.risk]
    if decider is None:
        return f"the decider {row.decided_by!r} no longer exists; submit it again"
    if not role_allows(decider.role, needed):
        return (
            f"the decider {decider.name} is now a {decider.role}; {row.risk} risk needs the {needed} "
            "role or higher; submit it again"
        )
    return None


def execution_refusal(ctx: ServiceContext, suggestion_id: int) -> str | None:
    """:meth:`ReviewService.execution_refusal`: why ``suggestion_id`` must not be launched now."""
    with ctx.store.session() as s:
        row = s.get(SuggestionRow, suggestion_id)
        if row is None:
            return f"suggestion {suggestion_id} no longer exists"
        return _decider_refusal(s, row)


def require_executor(ctx: ServiceContext, actor: User) -> User:
    """:meth:`ReviewService.require_executor`: ``actor`` as stored now, if it may launch suggestions."""
    with ctx.store.session() as s:
        row = require(s, actor, EXECUTOR_ROLE, "running the worker (launching suggestions)")
        return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)


def _check_claim_args(worker: str, lease_seconds: float) -> None:
    """:class:`ReviewError` for a worker id outside ``WORKER_ID`` or a lease outside (0, 7 days]."""
    try:
        check_worker_id(worker)
    except ValueError as e:
        raise ReviewError(str(e)) from None
    if not (isinstance(lease_seconds, int | float) and 0 < lease_seconds <= _MAX_LEASE_S):
        raise ReviewError("lease_seconds must be in (0, 604800]")


def _next_claimable(
    ctx: ServiceContext, s: Session, claimable: ColumnElement[bool], skipped: set[int]
) -> SuggestionRow | None:
    """The lowest-id claimable suggestion not tried yet (locked, skipping locked ones, on PostgreSQL)."""
    query = select(SuggestionRow).where(claimable).order_by(SuggestionRow.id).limit(1)
    if skipped:
        query = query.where(SuggestionRow.id.not_in(skipped))
    if ctx.store.dialect == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return s.scalars(query).first()


def _take(
    ctx: ServiceContext,
    s: Session,
    row: SuggestionRow,
    worker: str,
    runner: str,
    until: datetime,
    claimable: ColumnElement[bool],
) -> Claim | None:
    """``row`` leased to ``worker`` until ``until``; None when its decider lost the right (it goes to
    ``failed``) or a concurrent worker won it."""
    who = f"worker:{worker}"
    if row.state in _READY:
        refusal = _decider_refusal(s, row)
        if refusal is not None:
            move(ctx, s, row, "failed", who, refusal, strict=False, reason=refusal, lease_until=None)
            return None
    why = (
        f"lease of worker {row.worker} (attempt {row.attempt}) ran out; taken over"
        if row.state == "executing"
        else "claimed"
    ) + f" (worker runs as {runner})"
    values = {"worker": worker, "attempt": row.attempt + 1, "lease_until": until}
    if not move(ctx, s, row, "executing", who, why, where=[claimable], strict=False, **values):
        return None
    campaign = parse_action(row.action).to_campaign().to_dict()
    key = idempotency_key(ctx.store.store_id, row.id)
    return Claim(row.id, campaign, key, worker, row.attempt, until)


def claim(ctx: ServiceContext, actor: User, worker: str, lease_seconds: float) -> Claim | None:
    """:meth:`ReviewService.claim`: the next claimable suggestion for ``worker``, or None.

    Rows are tried in id order until one is taken (:func:`_take`); each is tried once.
    """
    _check_claim_args(worker, lease_seconds)
    with ctx.store.session() as s:
        runner = require(s, actor, EXECUTOR_ROLE, "running the worker (launching suggestions)")
        now = ctx.now()
        claimable = or_(
            SuggestionRow.state.in_(_READY),
            and_(SuggestionRow.state == "executing", SuggestionRow.lease_until < now),
        )
        until = now + timedelta(seconds=lease_seconds)
        skipped: set[int] = set()
        while (row := _next_claimable(ctx, s, claimable, skipped)) is not None:
            skipped.add(row.id)
            taken = _take(ctx, s, row, worker, runner.name, until, claimable)
            if taken is not None:
                return taken
        return None


def _held(s: Session, claim: Claim) -> SuggestionRow:
    """The claimed row, if ``claim`` still holds it; :class:`InvalidTransition` otherwise."""
    row = suggestion_row(s, claim.suggestion_id)
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


def complete(ctx: ServiceContext, claim: Claim, result: Mapping[str, Any]) -> None:
    """:meth:`ReviewService.complete`: record the launch under the claim's key, mark it executed."""
    payload = _json_payload(result, "result")
    with ctx.store.session() as s:
        row = _held(s, claim)
        held = [SuggestionRow.worker == claim.worker, SuggestionRow.attempt == claim.attempt]
        actor = f"worker:{claim.worker}"
        move(ctx, s, row, "executed", actor, None, where=held, result=payload, lease_until=None)
        s.add(
            ExecutionRow(
                idempotency_key=claim.idempotency_key,
                suggestion_id=row.id,
                worker=claim.worker,
                attempt=claim.attempt,
                result=payload,
                at=ctx.now(),
            )
        )
        try:
            s.flush()
        except IntegrityError:
            raise InvalidTransition(
                f"key {claim.idempotency_key} was executed already; nothing recorded twice"
            ) from None


def fail(ctx: ServiceContext, claim: Claim, error: str) -> None:
    """:meth:`ReviewService.fail`: mark the claimed suggestion failed while the claim holds it."""
    why = free_text(error, "error", required=True)
    with ctx.store.session() as s:
        row = _held(s, claim)
        held = [SuggestionRow.worker == claim.worker, SuggestionRow.attempt == claim.attempt]
        move(ctx, s, row, "failed", f"worker:{claim.worker}", why, where=held, reason=why, lease_until=None)


def record_feedback(
    ctx: ServiceContext, suggestion_id: int, outcome: Mapping[str, float], source: str
) -> None:
    """:meth:`ReviewService.record_feedback`: ``executed -> feedback_received`` with the outcome."""
    clean = _outcome(outcome)
    who = free_text(source, "source", required=True, limit=160)
    with ctx.store.session() as s:
        row = suggestion_row(s, suggestion_id)
        move(ctx, s, row, "feedback_received", cast(str, who), None, outcome=clean)
        s.add(FeedbackRow(suggestion_id=row.id, outcome=clean, source=cast(str, who), at=ctx.now()))

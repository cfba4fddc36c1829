"""Decisions: submitting suggestions, reading the queue, approving, rejecting, modifying, expiring,
and the audit trail of every transition.

Each public function is one call of :class:`~transferlab.human_review.service.ReviewService`, which
documents the contract; the functions take its
:class:`~transferlab.human_review.service_common.ServiceContext`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from transferlab.human_review.auth import role_allows
from transferlab.human_review.schema import (
    RISKS,
    ActionSpec,
    Evidence,
    ReviewError,
    Risk,
    SuggestionIn,
    classify_risk,
    effective_risk,
    parse_action,
    parse_suggestion,
)
from transferlab.human_review.service_common import (
    APPROVER_FOR,
    STATES,
    InvalidTransition,
    PermissionDenied,
    ServiceContext,
    User,
    check_transition,
    free_text,
    idempotency_key,
    jsonable_times,
    move,
    require,
    snapshot,
    suggestion_row,
)
from transferlab.human_review.store import AuditEntry, ExecutionRow, SuggestionRow, UserRow

__all__ = [
    "AuditRow",
    "SuggestionView",
    "approve_batch",
    "audit",
    "decide",
    "expire_due",
    "get",
    "list_suggestions",
    "pending_count",
    "submit",
]

Sort = Literal["risk", "expiry", "created"]
Decision = Literal["approve", "reject", "modify"]


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
        return jsonable_times(asdict(self))


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
        return jsonable_times(asdict(self))


def _view(ctx: ServiceContext, row: SuggestionRow, executions: int) -> SuggestionView:
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
        idempotency_key=idempotency_key(ctx.store.store_id, row.id),
        decided_at=row.decided_at,
        worker=row.worker,
        attempt=row.attempt,
        lease_until=row.lease_until,
    )


def _execution_counts(s: Session, ids: Sequence[int]) -> dict[int, int]:
    if not ids:
        return {}
    rows = s.execute(
        select(ExecutionRow.suggestion_id, func.count())
        .where(ExecutionRow.suggestion_id.in_(ids))
        .group_by(ExecutionRow.suggestion_id)
    ).all()
    return {int(sid): int(n) for sid, n in rows}


def _views(ctx: ServiceContext, s: Session, rows: Sequence[SuggestionRow]) -> list[SuggestionView]:
    counts = _execution_counts(s, [r.id for r in rows])
    return [_view(ctx, r, counts.get(r.id, 0)) for r in rows]


def submit(ctx: ServiceContext, actor: User, data: Mapping[str, Any] | SuggestionIn) -> int:
    """:meth:`ReviewService.submit`: a new pending suggestion and its first audit row."""
    with ctx.store.session() as s:
        user = require(s, actor, "reviewer", "submitting suggestions")
        raw = data.model_dump() if isinstance(data, SuggestionIn) else data
        sug = parse_suggestion(raw)  # re-validated even when given a model
        ours = classify_risk(sug.action, sug.evidence, sug.confidence)
        risk = effective_risk(sug.risk, ours)
        now = ctx.now()
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
                after=snapshot(row),
                reason=f"risk claimed {sug.risk}, ours {ours}: {risk}",
            )
        )
        return row.id


def list_suggestions(
    ctx: ServiceContext, actor: User, *, state: str | None, risk: Risk | None, sort: Sort
) -> list[SuggestionView]:
    """:meth:`ReviewService.list`: suggestions, filtered and sorted."""
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
    with ctx.store.session() as s:
        require(s, actor, "viewer", "listing suggestions")
        query = select(SuggestionRow).order_by(*orders[sort])
        if state is not None:
            query = query.where(SuggestionRow.state == state)
        if risk is not None:
            query = query.where(SuggestionRow.risk == risk)
        return _views(ctx, s, s.scalars(query).all())


def get(ctx: ServiceContext, actor: User, suggestion_id: int) -> SuggestionView:
    """:meth:`ReviewService.get`: one suggestion."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "viewing suggestions")
        return _views(ctx, s, [suggestion_row(s, suggestion_id)])[0]


def pending_count(ctx: ServiceContext, actor: User) -> int:
    """:meth:`ReviewService.pending_count`: how many suggestions wait for a decision."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "viewing the queue")
        query = select(func.count()).select_from(SuggestionRow).where(SuggestionRow.state == "pending")
        return int(s.scalar(query) or 0)


def _approval_refusal(user: UserRow, row: SuggestionRow, risk: str) -> str | None:
    """Why ``user`` may not approve ``row`` at ``risk`` (None when they may)."""
    if row.submitted_by == user.name:
        return f"{user.name} submitted suggestion {row.id}; someone else must approve it"
    needed = APPROVER_FOR[risk]
    if not role_allows(user.role, needed):
        return f"{user.name} is a {user.role}; approving {risk} risk needs the {needed} role or higher"
    return None


def _check_decidable(row: SuggestionRow, target: str, now: datetime) -> None:
    check_transition(row.id, row.state, target)
    if row.expires_at <= now:
        raise InvalidTransition(
            f"suggestion {row.id} expired at {row.expires_at.isoformat()}; it can no longer be decided"
        )


def _decision_action(decision: Decision, action: Mapping[str, Any] | None) -> ActionSpec | None:
    """The changed action of a ``modify`` (None for the others, which must not carry one)."""
    if decision == "modify":
        if action is None:
            raise ReviewError("modify needs the changed action; pass action={...}")
        return parse_action(action)
    if action is not None:
        raise ReviewError(f"{decision} takes no action; use decision='modify' to change it")
    return None


def _modification(row: SuggestionRow, new_action: ActionSpec) -> dict[str, Any]:
    """The values a modify writes: the new action, the original kept, the risk re-classified."""
    if new_action.model_dump() == row.action:
        raise ReviewError("the modified action equals the original; use decision='approve'")
    evidence = Evidence.model_validate(row.evidence)
    risk = effective_risk(cast(Risk, row.claimed_risk), classify_risk(new_action, evidence, row.confidence))
    return {
        "action": new_action.model_dump(),
        "original_action": row.action,
        "risk": risk,
        "risk_rank": RISKS.index(risk),
    }


def decide(
    ctx: ServiceContext,
    actor: User,
    suggestion_id: int,
    decision: Decision,
    reason: str | None,
    action: Mapping[str, Any] | None,
) -> SuggestionView:
    """:meth:`ReviewService.decide`: approve, reject or modify a pending suggestion."""
    targets = {"approve": "approved", "reject": "rejected", "modify": "modified"}
    if decision not in targets:
        raise ReviewError(f"unknown decision {decision!r}; use approve, reject or modify")
    note = free_text(
        reason, "a rejection reason" if decision == "reject" else "reason", required=decision == "reject"
    )
    new_action = _decision_action(decision, action)
    with ctx.store.session() as s:
        user = require(s, actor, "reviewer", f"deciding ({decision})")
        row = suggestion_row(s, suggestion_id)
        now = ctx.now()
        _check_decidable(row, targets[decision], now)
        values: dict[str, Any] = {"decided_by": user.name, "decided_at": now, "reason": note}
        if new_action is not None:
            values |= _modification(row, new_action)
        if decision != "reject":
            refusal = _approval_refusal(user, row, values.get("risk", row.risk))
            if refusal:
                raise PermissionDenied(refusal)
        move(ctx, s, row, targets[decision], user.name, note, **values)
        return _views(ctx, s, [row])[0]


def _batch_refusal(
    s: Session, user: UserRow, sid: int, now: datetime
) -> tuple[SuggestionRow | None, str | None]:
    """The row of ``sid`` and why a batch may not approve it (None when it may)."""
    row = s.get(SuggestionRow, sid)
    if row is None:
        return None, "not found"
    if row.risk == "high":
        return row, "high risk; an approver must approve it on its own"
    refusal = _approval_refusal(user, row, row.risk)
    if refusal is None:
        try:
            _check_decidable(row, "approved", now)
        except InvalidTransition as e:
            refusal = str(e)
    return row, refusal


def approve_batch(ctx: ServiceContext, actor: User, ids: Sequence[int]) -> dict[int, str]:
    """:meth:`ReviewService.approve_batch`: approve several; high risk always refused."""
    results: dict[int, str] = {}
    with ctx.store.session() as s:
        user = require(s, actor, "reviewer", "batch approval")
        now = ctx.now()
        for sid in dict.fromkeys(ids):
            row, refusal = _batch_refusal(s, user, sid, now)
            if row is not None and refusal is None:
                values: dict[str, Any] = {
                    "decided_by": user.name,
                    "decided_at": now,
                    "reason": "batch approval",
                }
                moved = move(ctx, s, row, "approved", user.name, "batch approval", strict=False, **values)
                refusal = None if moved else "it changed meanwhile; reload and retry"
            results[sid] = "approved" if refusal is None else f"refused: {refusal}"
    return results


def expire_due(ctx: ServiceContext) -> int:
    """:meth:`ReviewService.expire_due`: expire every pending suggestion past its expiry."""
    with ctx.store.session() as s:
        now = ctx.now()
        query = select(SuggestionRow).where(SuggestionRow.state == "pending", SuggestionRow.expires_at <= now)
        if ctx.store.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)
        moved = 0
        for row in s.scalars(query).all():
            why = f"not decided before {row.expires_at.isoformat()}"
            moved += move(ctx, s, row, "expired", "system", why, strict=False)
        return moved


def audit(ctx: ServiceContext, actor: User, suggestion_id: int | None) -> list[AuditRow]:
    """:meth:`ReviewService.audit`: the audit trail (of one suggestion when given)."""
    with ctx.store.session() as s:
        require(s, actor, "viewer", "reading the audit trail")
        query = select(AuditEntry).order_by(AuditEntry.id)
        if suggestion_id is not None:
            suggestion_row(s, suggestion_id)
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

"""The worker: launches approved suggestions into the market exactly once, and brings results back.

One loop, top to bottom::

    expire overdue pending suggestions
    while a suggestion can be claimed (approved, modified, or executing with a lapsed lease):
        re-check that its decider may still approve its risk        -> else fail, launch nothing
        receipt = gateway.launch(action, "<store id>:suggestion-<id>")  # idempotent by key
        service.complete(claim, receipt)                             # execution row + executed
    for each matured market result of an executed suggestion:
        service.record_feedback(id, outcome, source="market")       # executed -> feedback_received

The worker runs as a user (``actor``) whose role may execute (approver or admin), checked before
the loop and on every claim; its ``worker_id`` is restricted to letters, digits and ``_ . @ -``.

Exactly once comes from the two keys working together: ``claim`` hands a suggestion to one worker at
a time (a lease), the gateway launches a key at most once, and ``complete`` records one execution per
key. A worker killed between launching and completing leaves the suggestion ``executing``; when its
lease runs out another worker claims it, launches the same key (getting the same campaign back, with
nothing new reaching the market) and completes it.

Once a launch may have reached the market the worker never marks the suggestion ``failed``: if
``complete`` is refused or errors, the suggestion stays ``executing`` for a recovering worker. The
one exception is a key the market holds for a *different* action (:class:`KeyConflict`, a restored
review database reusing a suggestion id): this suggestion never reached the market, so it fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from transferlab.human_review.gateway import KeyConflict, LaunchReceipt, MarketGateway
from transferlab.human_review.service import (
    Claim,
    InvalidTransition,
    NotFound,
    ReviewError,
    ReviewService,
    User,
)
from transferlab.human_review.store import ExecutionRow, SuggestionRow
from transferlab.human_review.text import check_worker_id, shown
from transferlab.simulator.vocabulary import CampaignAction

__all__ = ["WorkerStats", "run_worker"]

Log = Callable[[str], None]
AfterLaunch = Callable[[Claim, LaunchReceipt], None]


@dataclass
class WorkerStats:
    """What one :func:`run_worker` call did.

    Attributes:
        claimed: claims taken (including takeovers of lapsed leases).
        recovered: of those, takeovers of a suggestion another worker left ``executing``.
        executed: suggestions completed (launched and recorded).
        failed: suggestions marked ``failed`` (decider downgraded, invalid action, launch error).
        left_executing: launched but not completed (``complete`` refused or errored): left for recovery.
        feedback: matured outcomes recorded as feedback.
        expired: pending suggestions expired by this worker.
    """

    claimed: int = 0
    recovered: int = 0
    executed: int = 0
    failed: int = 0
    left_executing: int = 0
    feedback: int = 0
    expired: int = 0


def run_worker(
    service: ReviewService,
    gateway: MarketGateway,
    worker_id: str,
    *,
    actor: User,
    once: bool = False,
    lease_seconds: float = 60.0,
    poll_seconds: float = 1.0,
    max_items: int | None = None,
    log: Log | None = None,
    should_stop: Callable[[], bool] | None = None,
    after_launch: AfterLaunch | None = None,
) -> WorkerStats:
    """Execute approved suggestions and collect matured results until told to stop.

    Args:
        service: the review service (its store is shared with other workers and the app).
        gateway: the market the suggestions are launched into.
        worker_id: this worker's name in claims and audit rows (``worker:<id>``): 1-64 letters,
            digits or ``_ . @ -``.
        actor: the user the worker runs as; its role must allow executing (approver or higher).
        once: process everything claimable now, collect feedback, and return.
        lease_seconds: how long a claim is held before another worker may take it over.
        poll_seconds: sleep between rounds when there was nothing to claim.
        max_items: return after this many claims (None: no limit).
        log: receives one line per event (default: silent).
        should_stop: checked between rounds; return True to end the loop.
        after_launch: called after each launch, before ``complete`` (fault injection in tests).
    """
    try:
        check_worker_id(worker_id)
    except ValueError as exc:
        raise ReviewError(str(exc)) from None
    service.require_executor(actor)
    say: Log = log or (lambda _line: None)
    stats = WorkerStats()
    while True:
        stats.expired += service.expire_due()
        while max_items is None or stats.claimed < max_items:
            claim = service.claim(actor, worker_id, lease_seconds)
            if claim is None:
                break
            stats.claimed += 1
            stats.recovered += claim.attempt > 1
            _execute(service, gateway, claim, stats, say, after_launch)
        stats.feedback += collect_feedback(service, gateway, say)
        done = max_items is not None and stats.claimed >= max_items
        if once or done or (should_stop is not None and should_stop()):
            return stats
        time.sleep(poll_seconds)


def _execute(
    service: ReviewService,
    gateway: MarketGateway,
    claim: Claim,
    stats: WorkerStats,
    say: Log,
    after_launch: AfterLaunch | None,
) -> None:
    """Launch one claimed suggestion and complete it (or fail it while nothing reached the market)."""
    sid, key = claim.suggestion_id, claim.idempotency_key
    try:
        refusal = None if gateway.launches(key) else decider_refusal(service, sid)
        if refusal is None:
            action = CampaignAction.from_dict({k: v for k, v in claim.action.items() if k != "products"})
            receipt = gateway.launch(action, key)
    except KeyConflict as exc:  # the key holds another action: this one never reached the market
        _fail(service, claim, f"launch refused: {exc}", stats, say)
        return
    except Exception as exc:
        if _reached_market(gateway, key):  # it (may have) reached the market: complete it on recovery
            stats.left_executing += 1
            say(
                f"suggestion {sid}: launch raised ({shown(str(exc))}) but may have reached the market; "
                "left executing"
            )
        else:
            _fail(service, claim, f"launch failed: {type(exc).__name__}: {exc}", stats, say)
        return
    if refusal is not None:
        _fail(service, claim, refusal, stats, say)
        return
    if after_launch is not None:
        after_launch(claim, receipt)
    try:
        service.complete(claim, receipt.to_dict())
    except Exception as exc:
        stats.left_executing += 1
        say(
            f"suggestion {sid}: launched as {key} but not completed ({shown(str(exc))}); "
            "a recovering worker will"
        )
        return
    stats.executed += 1
    how = f" (attempt {claim.attempt}, recovered)" if claim.attempt > 1 else ""
    say(f"suggestion {sid}: executed as campaign {receipt.campaign_id} on day {receipt.day}{how}")


def _reached_market(gateway: MarketGateway, key: str) -> bool:
    """Whether ``key`` reached the market; True when that cannot be told (never fail a maybe-launch)."""
    try:
        return bool(gateway.launches(key))
    except Exception:
        return True


def _fail(service: ReviewService, claim: Claim, why: str, stats: WorkerStats, say: Log) -> None:
    try:
        service.fail(claim, why)
    except ReviewError as exc:  # the claim was lost meanwhile: the new holder decides
        say(f"suggestion {claim.suggestion_id}: could not mark failed ({shown(str(exc))})")
        return
    stats.failed += 1
    say(f"suggestion {claim.suggestion_id}: failed: {shown(why)}")


def decider_refusal(service: ReviewService, suggestion_id: int) -> str | None:
    """Why ``suggestion_id`` must not reach the market now (see ``ReviewService.execution_refusal``).

    ``ReviewService.claim`` checks this before a first claim; the worker checks again right before
    launching, also for takeovers of lapsed leases, which ``claim`` does not re-check.
    """
    return service.execution_refusal(suggestion_id)


def collect_feedback(service: ReviewService, gateway: MarketGateway, log: Log | None = None) -> int:
    """Record every matured market result of an ``executed`` suggestion as feedback; how many.

    Results are matched to suggestions by the keys this store recorded executions under, so a
    market shared with another review store never feeds its results into this one.
    """
    say: Log = log or (lambda _line: None)
    by_key = {result.key: result.outcome for result in gateway.results()}
    if not by_key:
        return 0
    with service.store.session() as s:
        rows = s.execute(
            select(SuggestionRow.id, ExecutionRow.idempotency_key)
            .join(ExecutionRow, ExecutionRow.suggestion_id == SuggestionRow.id)
            .where(ExecutionRow.idempotency_key.in_(by_key), SuggestionRow.state == "executed")
        ).all()
    by_id = {int(sid): by_key[key] for sid, key in rows}
    recorded = 0
    for sid in sorted(by_id):
        try:
            service.record_feedback(sid, by_id[sid], source="market")
        except (InvalidTransition, NotFound):  # another worker recorded it meanwhile
            continue
        recorded += 1
        say(f"suggestion {sid}: feedback recorded (profit {by_id[sid].get('profit', float('nan')):.2f})")
    return recorded

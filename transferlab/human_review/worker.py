"""The worker: launches approved suggestions into the market exactly once, and brings results back.

One loop, top to bottom::

    expire overdue pending suggestions
    while a suggestion can be claimed (approved, modified, or executing with a lapsed lease):
        re-check that its decider may still approve its risk        -> else fail, launch nothing
        receipt = gateway.launch(action, "suggestion-<id>")          # idempotent by key
        service.complete(claim, receipt)                             # execution row + executed
    for each matured market result of an executed suggestion:
        service.record_feedback(id, outcome, source="market")       # executed -> feedback_received

Exactly once comes from the two keys working together: ``claim`` hands a suggestion to one worker at
a time (a lease), the gateway launches a key at most once, and ``complete`` records one execution per
key. A worker killed between launching and completing leaves the suggestion ``executing``; when its
lease runs out another worker claims it, launches the same key (getting the same campaign back, with
nothing new reaching the market) and completes it.

Once a launch may have reached the market the worker never marks the suggestion ``failed``: if
``complete`` is refused or errors, the suggestion stays ``executing`` for a recovering worker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from transferlab.human_review.market import LaunchReceipt, MarketGateway
from transferlab.human_review.service import Claim, InvalidTransition, NotFound, ReviewError, ReviewService
from transferlab.human_review.store import SuggestionRow
from transferlab.simulator.market import CampaignAction

__all__ = ["WorkerStats", "run_worker"]

_KEY = re.compile(r"suggestion-(\d+)")

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
        worker_id: this worker's name in claims and audit rows (``worker:<id>``).
        once: process everything claimable now, collect feedback, and return.
        lease_seconds: how long a claim is held before another worker may take it over.
        poll_seconds: sleep between rounds when there was nothing to claim.
        max_items: return after this many claims (None: no limit).
        log: receives one line per event (default: silent).
        should_stop: checked between rounds; return True to end the loop.
        after_launch: called after each launch, before ``complete`` (fault injection in tests).
    """
    say: Log = log or (lambda _line: None)
    stats = WorkerStats()
    while True:
        stats.expired += service.expire_due()
        while max_items is None or stats.claimed < max_items:
            claim = service.claim(worker_id, lease_seconds)
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
    except Exception as exc:
        if _reached_market(gateway, key):  # it (may have) reached the market: complete it on recovery
            stats.left_executing += 1
            say(f"suggestion {sid}: launch raised ({exc}) but may have reached the market; left executing")
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
        say(f"suggestion {sid}: launched as {key} but not completed ({exc}); a recovering worker will")
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
        say(f"suggestion {claim.suggestion_id}: could not mark failed ({exc})")
        return
    stats.failed += 1
    say(f"suggestion {claim.suggestion_id}: failed: {why}")


def decider_refusal(service: ReviewService, suggestion_id: int) -> str | None:
    """Why ``suggestion_id`` must not reach the market now (see ``ReviewService.execution_refusal``).

    ``ReviewService.claim`` checks this before a first claim; the worker checks again right before
    launching, also for takeovers of lapsed leases, which ``claim`` does not re-check.
    """
    return service.execution_refusal(suggestion_id)


def collect_feedback(service: ReviewService, gateway: MarketGateway, log: Log | None = None) -> int:
    """Record every matured market result of an ``executed`` suggestion as feedback; how many."""
    say: Log = log or (lambda _line: None)
    by_id: dict[int, dict[str, float]] = {}
    for result in gateway.results():
        match = _KEY.fullmatch(result.key)
        if match:
            by_id[int(match.group(1))] = result.outcome
    if not by_id:
        return 0
    with service.store.session() as s:
        waiting = s.scalars(
            select(SuggestionRow.id).where(SuggestionRow.id.in_(by_id), SuggestionRow.state == "executed")
        ).all()
    recorded = 0
    for sid in waiting:
        try:
            service.record_feedback(sid, by_id[sid], source="market")
        except (InvalidTransition, NotFound):  # another worker recorded it meanwhile
            continue
        recorded += 1
        say(f"suggestion {sid}: feedback recorded (profit {by_id[sid].get('profit', float('nan')):.2f})")
    return recorded

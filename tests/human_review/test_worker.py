"""The worker against the real service, store (SQLite file and PostgreSQL) and market.

Crash recovery and concurrency run real worker processes (forked), each with its own store and
gateway on the shared database and market directory.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from transferlab.human_review.gateway import LaunchReceipt, MarketGateway
from transferlab.human_review.service import (
    Claim,
    InvalidTransition,
    PermissionDenied,
    ReviewError,
    ReviewService,
)
from transferlab.human_review.store import ReviewStore
from transferlab.human_review.worker import WorkerStats, run_worker
from transferlab.simulator.vocabulary import CampaignAction
from transferlab.simulator.world_config import WorldConfig

WORLD = WorldConfig(n_customers=120, seed=4, maturity_days=7)
LEASE_S = 30.0
Suggest = Callable[..., dict[str, Any]]


@pytest.fixture
def market(tmp_path: Path) -> MarketGateway:
    return MarketGateway.create(tmp_path / "market", WORLD, history_days=5)


def _approved(team: Any, make_suggestion: Suggest, n: int = 1, **kwargs: Any) -> list[int]:
    """``n`` suggestions submitted by a reviewer and approved by an approver."""
    ids = []
    for i in range(n):
        sid = team.svc.submit(team.reviewer, make_suggestion(budget=10.0 + i, **kwargs))
        team.svc.decide(team.approver, sid, "approve")
        ids.append(sid)
    return ids


def _launches_per_key(market: MarketGateway) -> dict[str, int]:
    counts: dict[str, int] = {}
    for receipt in market.launches():
        counts[receipt.key] = counts.get(receipt.key, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------- processes


def _worker_process(
    url: str, market_dir: str, worker_id: str, now: datetime, barrier_file: str | None, start: Any, out: Any
) -> None:
    """A worker in its own process; with ``barrier_file`` it hangs right after launching (to be killed)."""
    service = ReviewService(ReviewStore(url), clock=lambda: now)
    runner = service.user("ada")  # the team's admin: a role that may execute
    assert runner is not None

    def hang(claim: Claim, receipt: LaunchReceipt) -> None:
        assert barrier_file is not None
        Path(barrier_file).write_text(receipt.key)
        time.sleep(600)

    if start is not None:
        start.wait()
    stats = run_worker(
        service,
        MarketGateway(Path(market_dir)),
        worker_id,
        actor=runner,
        once=True,
        lease_seconds=LEASE_S,
        after_launch=hang if barrier_file else None,
    )
    if out is not None:
        out.put(asdict(stats))


def test_worker_killed_after_launch_is_recovered_once(
    team: Any, clock: Any, make_suggestion: Suggest, market: MarketGateway, tmp_path: Path
) -> None:
    (sid,) = _approved(team, make_suggestion)
    key = f"{team.svc.store.store_id}:suggestion-{sid}"
    history = len(market.world().campaigns)
    barrier = tmp_path / "launched"
    ctx = mp.get_context("fork")
    args = (team.svc.store.url, str(market.directory), "doomed", clock.now, str(barrier), None, None)
    proc = ctx.Process(target=_worker_process, args=args)
    proc.start()
    deadline = time.monotonic() + 60
    while not barrier.exists() and proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert barrier.read_text() == key  # launched, and now paused before complete
    os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL

    view = team.svc.get(team.viewer, sid)
    assert (view.state, view.worker, view.executions) == ("executing", "doomed", 0)
    assert len(market.launches(key)) == 1
    # while the dead worker's lease runs, nobody else may take the suggestion
    assert (
        run_worker(team.svc, market, "rescuer", actor=team.admin, once=True, lease_seconds=LEASE_S).claimed
        == 0
    )
    clock.advance(seconds=LEASE_S + 1)
    lines: list[str] = []
    stats = run_worker(
        team.svc, market, "rescuer", actor=team.admin, once=True, lease_seconds=LEASE_S, log=lines.append
    )
    assert (stats.claimed, stats.recovered, stats.executed) == (1, 1, 1)
    view = team.svc.get(team.viewer, sid)
    assert (view.state, view.executions, view.attempt, view.worker) == ("executed", 1, 2, "rescuer")
    assert market.launches(key) == [LaunchReceipt(**view.result)]
    assert _launches_per_key(market) == {key: 1}
    assert len(MarketGateway(market.directory).world().campaigns) == history + 1  # one campaign reached it
    assert any("recovered" in line for line in lines)
    takeover = [a for a in team.svc.audit(team.viewer, sid) if a.from_state == a.to_state == "executing"]
    assert len(takeover) == 1 and takeover[0].actor == "worker:rescuer"


def test_many_worker_processes_execute_each_suggestion_once(
    team: Any, clock: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    ids = _approved(team, make_suggestion, n=20)
    history = len(market.world().campaigns)
    ctx = mp.get_context("fork")
    n = 6
    start, out = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker_process,
            args=(team.svc.store.url, str(market.directory), f"w{i}", clock.now, None, start, out),
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    stats = [WorkerStats(**out.get(timeout=120)) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sum(s.claimed for s in stats) == sum(s.executed for s in stats) == 20
    assert sum(s.failed + s.left_executing + s.recovered for s in stats) == 0
    views = [team.svc.get(team.viewer, sid) for sid in ids]
    assert {v.state for v in views} == {"executed"}
    assert [v.executions for v in views] == [1] * 20
    assert _launches_per_key(market) == {f"{team.svc.store.store_id}:suggestion-{sid}": 1 for sid in ids}
    assert len(MarketGateway(market.directory).world().campaigns) == history + 20


def _approve_at_once(svc: ReviewService, deciders: list[Any], sid: int) -> list[str]:
    """Every decider approves ``sid`` at the same moment (one thread each); their outcomes."""
    start = threading.Barrier(len(deciders))
    outcomes: list[str] = []

    def decide(user: Any) -> None:
        start.wait()
        try:
            outcomes.append(svc.decide(user, sid, "approve").state)
        except InvalidTransition:
            outcomes.append("refused")

    threads = [threading.Thread(target=decide, args=(u,)) for u in deciders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return sorted(outcomes)


def test_simultaneous_approvals_give_one_approval_and_one_execution(
    team: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    for deciders in (
        [team.approver, team.approver2],
        [team.approver, team.approver],
    ):  # two people; a double click
        sid = team.svc.submit(team.reviewer, make_suggestion())
        assert _approve_at_once(team.svc, deciders, sid) == ["approved", "refused"]
        approvals = [a for a in team.svc.audit(team.viewer, sid) if a.to_state == "approved"]
        assert len(approvals) == 1
    stats = run_worker(team.svc, market, "w1", actor=team.admin, once=True)
    assert stats.executed == 2
    assert sorted(_launches_per_key(market).values()) == [1, 1]
    assert all(v.executions == 1 for v in team.svc.list(team.viewer, state="executed"))


def test_downgraded_approver_fails_the_suggestion_and_launches_nothing(
    team: Any, clock: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    high = _approved(team, make_suggestion, n=2, discount=0.3)  # 30% off: high risk, approver approved
    assert {team.svc.get(team.viewer, s).risk for s in high} == {"high"}
    ghost = team.svc.claim(team.admin, "ghost", LEASE_S)  # the first: claimed by a worker that dies at once
    assert ghost is not None and ghost.suggestion_id == high[0]
    team.svc.set_role(team.admin, team.approver.name, "reviewer")
    clock.advance(seconds=LEASE_S + 1)
    lines: list[str] = []
    stats = run_worker(team.svc, market, "w1", actor=team.admin, once=True, log=lines.append)
    # the takeover is failed by the worker's own check; the other one by claim() before handing it out
    assert (stats.claimed, stats.failed, stats.executed) == (1, 1, 0)
    for sid in high:  # the takeover (worker's check) and the first claim (the service's check)
        view = team.svc.get(team.viewer, sid)
        assert (view.state, view.executions) == ("failed", 0)
        assert view.reason is not None and "now a reviewer" in view.reason
    assert market.launches() == []
    assert sum("failed" in line for line in lines) >= 1


def test_matured_outcome_comes_back_as_feedback(
    team: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    (sid,) = _approved(team, make_suggestion)
    assert run_worker(team.svc, market, "w1", actor=team.admin, once=True).executed == 1
    assert market.advance(WORLD.maturity_days) == []
    assert run_worker(team.svc, market, "w1", actor=team.admin, once=True).feedback == 0
    assert team.svc.get(team.viewer, sid).state == "executed"
    (matured,) = market.advance(1)
    assert matured.key == f"{team.svc.store.store_id}:suggestion-{sid}"
    stats = run_worker(team.svc, market, "w1", actor=team.admin, once=True)
    assert stats.feedback == 1
    view = team.svc.get(team.viewer, sid)
    assert view.state == "feedback_received"
    assert view.outcome == matured.outcome
    assert run_worker(team.svc, market, "w1", actor=team.admin, once=True).feedback == 0  # recorded once


def test_a_known_key_with_another_action_fails_the_suggestion(
    team: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    """A restored database reuses suggestion ids: the market holds the key for another campaign."""
    (sid,) = _approved(team, make_suggestion)
    key = f"{team.svc.store.store_id}:suggestion-{sid}"
    old = market.launch(CampaignAction(discount=0.15, push_hour=9, segment="bargain", budget=12.0), key)
    journal = market.path.read_bytes()
    lines: list[str] = []
    stats = run_worker(team.svc, market, "w1", actor=team.admin, once=True, log=lines.append)
    assert (stats.claimed, stats.executed, stats.failed, stats.left_executing) == (1, 0, 1, 0)
    view = team.svc.get(team.viewer, sid)
    assert (view.state, view.executions, view.result) == ("failed", 0, None)
    assert view.reason is not None and "launched with another action" in view.reason
    assert market.path.read_bytes() == journal and market.launches() == [old]  # nothing new launched
    assert any("failed: launch refused" in line for line in lines)


def test_the_worker_runs_as_a_user_allowed_to_execute(
    team: Any, make_suggestion: Suggest, market: MarketGateway
) -> None:
    (sid,) = _approved(team, make_suggestion)
    for user in (team.viewer, team.reviewer):
        with pytest.raises(PermissionDenied, match="needs the approver role or higher"):
            run_worker(team.svc, market, "w1", actor=user, once=True)
    with pytest.raises(ReviewError, match="worker id 'w1\\\\nforged' is not allowed"):
        run_worker(team.svc, market, "w1\nforged", actor=team.admin, once=True)
    assert team.svc.get(team.viewer, sid).state == "approved" and market.launches() == []
    assert run_worker(team.svc, market, "w1", actor=team.approver, once=True).executed == 1


def test_two_stores_on_one_market_never_share_keys_or_results(
    team: Any, make_suggestion: Suggest, market: MarketGateway, tmp_path: Path
) -> None:
    """A second (or rebuilt) store numbers its suggestions from 1 too; its keys differ by store id."""
    (sid,) = _approved(team, make_suggestion)
    other = ReviewService(ReviewStore(f"sqlite:///{tmp_path / 'rebuilt.db'}"), clock=team.svc._clock)
    admin = other.add_user(None, "ada", "pass-word-ada", "admin")
    rita = other.add_user(admin, "rita", "pass-word-rita", "reviewer")
    other_sid = other.submit(rita, make_suggestion(discount=0.15, budget=12.0))
    other.decide(admin, other_sid, "approve")
    assert other_sid == sid  # the same id, in another store
    assert run_worker(team.svc, market, "w1", actor=team.admin, once=True).executed == 1
    assert run_worker(other, market, "w2", actor=admin, once=True).executed == 1
    mine, theirs = team.svc.get(team.viewer, sid), other.get(admin, other_sid)
    assert mine.result is not None and theirs.result is not None
    assert mine.result["campaign_id"] != theirs.result["campaign_id"]  # two campaigns, not one receipt
    assert len(market.launches()) == 2
    market.advance(WORLD.maturity_days + 1)
    assert run_worker(team.svc, market, "w1", actor=team.admin, once=True).feedback == 1
    assert run_worker(other, market, "w2", actor=admin, once=True).feedback == 1
    assert team.svc.get(team.viewer, sid).outcome != other.get(admin, other_sid).outcome
    other.store.dispose()

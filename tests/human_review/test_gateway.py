"""MarketGateway: idempotent launches (also across processes), deterministic replay, maturity, logs."""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
from pathlib import Path

import numpy as np
import pytest

from transferlab.human_review.gateway import (
    KeyConflict,
    LaunchReceipt,
    MarketError,
    MarketGateway,
    MaturedResult,
)
from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
from transferlab.simulator.vocabulary import OUTCOME_KEYS, CampaignAction
from transferlab.simulator.world_config import WorldConfig

WORLD = WorldConfig(n_customers=150, seed=3, maturity_days=7)
LOYAL = CampaignAction(discount=0.1, push_hour=20, segment="loyal", budget=5.0)
ALL = CampaignAction(discount=0.2, push_hour=10, segment="all", budget=3.0)


@pytest.fixture
def gateway(tmp_path: Path) -> MarketGateway:
    return MarketGateway.create(tmp_path / "market", WORLD, history_days=10)


def test_create_starts_after_the_history(gateway: MarketGateway) -> None:
    assert gateway.day() == 10
    assert gateway.world().day == 10
    assert gateway.world() is gateway.world()  # cached by the journal's hash
    assert gateway.launches() == []
    journal = json.loads(gateway.path.read_text())
    assert journal["history_days"] == 10 and journal["world"]["seed"] == 3


def test_same_key_twice_is_one_campaign(gateway: MarketGateway) -> None:
    history = len(gateway.world().campaigns)
    first = gateway.launch(LOYAL, "suggestion-1")
    before = gateway.path.read_bytes()
    with pytest.raises(KeyConflict, match="'suggestion-1' was launched with another action on day 10"):
        gateway.launch(ALL, "suggestion-1")  # a known key with another action: refused, nothing changes
    assert gateway.path.read_bytes() == before
    again = gateway.launch(LOYAL, "suggestion-1")  # a retry of the same launch: the same receipt
    assert again == first
    assert first == LaunchReceipt("suggestion-1", history, 10, LOYAL.to_dict())
    assert gateway.launches("suggestion-1") == [first]
    assert len(gateway.world().campaigns) == history + 1
    # a fresh gateway (another process) replays the journal to the same single campaign
    fresh = MarketGateway(gateway.directory)
    assert fresh.launch(LOYAL, "suggestion-1") == first
    assert len(fresh.world().campaigns) == history + 1


def test_several_launches_on_one_day(gateway: MarketGateway) -> None:
    a = gateway.launch(LOYAL, "suggestion-1")
    b = gateway.launch(ALL, "suggestion-2")
    assert (a.day, b.day) == (10, 10)
    assert b.campaign_id == a.campaign_id + 1  # type: ignore[operator]
    campaigns = gateway.world().campaigns
    assert [c.day for c in campaigns[-2:]] == [10, 10]
    gateway.advance()
    assert all(c.reached > 0 for c in gateway.world().campaigns[-2:])


def test_noop_action_has_no_campaign(gateway: MarketGateway) -> None:
    receipt = gateway.launch(CampaignAction(budget=0.0), "suggestion-9")
    assert receipt.campaign_id is None
    assert gateway.launches("suggestion-9") == [receipt]


def _launch_in_process(directory: str, key: str, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:
    gateway = MarketGateway(Path(directory))
    barrier.wait()
    shared = gateway.launch(LOYAL, "suggestion-shared")
    own = gateway.launch(ALL, key)
    out.put((shared.to_dict(), own.to_dict()))


def test_concurrent_processes_launch_a_key_once(gateway: MarketGateway) -> None:
    ctx = mp.get_context("fork")
    n = 4
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_launch_in_process, args=(str(gateway.directory), f"own-{i}", barrier, out))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    answers = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    shared = {json.dumps(a[0], sort_keys=True) for a in answers}
    assert len(shared) == 1  # every process got the same receipt
    assert len(gateway.launches("suggestion-shared")) == 1
    assert len(gateway.launches()) == n + 1
    ids = [r.campaign_id for r in gateway.launches()]
    assert len(set(ids)) == n + 1
    world = gateway.world()  # the replay agrees with the recorded campaign ids (or it raises)
    assert [world.campaigns[i].action.to_dict() for i in ids].count(LOYAL.to_dict()) == 1  # type: ignore[index]


def test_replay_is_deterministic(gateway: MarketGateway, tmp_path: Path) -> None:
    gateway.launch(LOYAL, "suggestion-1")
    gateway.advance(2)
    gateway.launch(ALL, "suggestion-2")
    gateway.advance(8)
    copy = tmp_path / "copy"
    shutil.copytree(gateway.directory, copy)
    a, b = MarketGateway(gateway.directory), MarketGateway(copy)
    wa, wb = a.world(), b.world()
    assert wa is not wb and wa.day == wb.day == 20
    assert wa.daily_frame().equals(wb.daily_frame())
    assert [c.outcome for c in wa.campaigns] == [c.outcome for c in wb.campaigns]
    # the gateway that moved its cached world along agrees with a replay from scratch
    assert gateway.world().daily_frame().equals(wa.daily_frame())
    assert gateway.results() == a.results() == b.results()
    assert a.advance(3) == b.advance(3)
    assert a.world().daily_frame().equals(b.world().daily_frame())


def test_advance_returns_results_after_maturity(gateway: MarketGateway) -> None:
    receipt = gateway.launch(LOYAL, "suggestion-1")
    assert gateway.advance(WORLD.maturity_days) == []  # matures at the close of day + maturity_days
    assert gateway.results() == []
    matured = gateway.advance(1)
    assert [type(r) for r in matured] == [MaturedResult]
    result = matured[0]
    assert (result.key, result.campaign_id) == ("suggestion-1", receipt.campaign_id)
    assert (result.day_launched, result.day_matured) == (10, 10 + WORLD.maturity_days)
    known = [k for k in OUTCOME_KEYS if k not in ("retention_30", "retention_60", "retention_90")]
    assert set(known) <= set(result.outcome) <= set(OUTCOME_KEYS)
    assert result.outcome["push_cost"] == pytest.approx(
        gateway.world().campaigns[-1].reached * WORLD.push_cost
    )
    assert all(np.isfinite(v) for v in result.outcome.values())
    assert gateway.results() == [result]
    assert gateway.advance(1) == []  # reported once by advance, kept by results()
    assert gateway.results() == [result]


def test_from_logs_continues_the_logged_world(tmp_path: Path) -> None:
    logs = generate_logs(LogSpec(days=12, world=WorldConfig(n_customers=120, seed=5)))
    logs_dir = write_logs(logs, tmp_path / "logs")
    gateway = MarketGateway.from_logs(tmp_path / "market", logs_dir)
    assert gateway.day() == 12
    world = gateway.world()
    assert world.day == 12
    assert np.allclose(world.daily_frame()["gmv"], logs.daily["gmv"])
    receipt = gateway.launch(LOYAL, "suggestion-1")
    assert receipt.day == 12
    assert receipt.campaign_id == int(logs.campaigns["launched"].sum())


def test_refuses_a_different_market_in_the_same_directory(gateway: MarketGateway, tmp_path: Path) -> None:
    same = MarketGateway.create(gateway.directory, WORLD, history_days=10)
    assert same.day() == 10
    with pytest.raises(ValueError, match="different market"):
        MarketGateway.create(gateway.directory, WORLD, history_days=11)
    with pytest.raises(FileNotFoundError, match=r"MarketGateway\.create"):
        MarketGateway(tmp_path / "nowhere")


def _garble(path: Path) -> dict[str, bytes]:
    """Damaged copies of a journal: truncated, garbled bytes, a missing field, a wrong type."""
    text = path.read_bytes()
    journal = json.loads(text)
    no_day = {k: v for k, v in journal.items() if k != "day"}
    bad_launch = {**journal, "launches": [{"key": 1, "day": 0, "action": {}, "campaign_id": None}]}
    return {
        "truncated": text[: len(text) // 2],
        "garbled": text[:40] + b"\xff\xfe\x00garbage" + text[60:],
        "empty": b"",
        "not an object": b"[1, 2]",
        "missing day": json.dumps(no_day).encode(),
        "bad launch": json.dumps(bad_launch).encode(),
    }


@pytest.mark.parametrize(
    "damage", ["truncated", "garbled", "empty", "not an object", "missing day", "bad launch"]
)
def test_a_corrupted_journal_is_refused_and_left_as_it_is(gateway: MarketGateway, damage: str) -> None:
    gateway.launch(LOYAL, "suggestion-1")
    broken = _garble(gateway.path)[damage]
    gateway.path.write_bytes(broken)
    fresh = MarketGateway(gateway.directory)
    for call in (
        lambda: fresh.launch(ALL, "suggestion-2"),
        fresh.launches,
        fresh.day,
        lambda: fresh.advance(1),
        fresh.results,
        lambda: MarketGateway.create(gateway.directory, WORLD, history_days=10),
    ):
        with pytest.raises(MarketError, match=f"the market journal {gateway.path} is corrupted"):
            call()
    assert gateway.path.read_bytes() == broken  # never rewritten
    assert [p.name for p in gateway.directory.iterdir() if p.name.endswith(".tmp")] == []


def test_market_doctests_hold() -> None:
    import doctest

    from transferlab.human_review import gateway as module

    assert doctest.testmod(module).failed == 0

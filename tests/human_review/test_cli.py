"""`transferlab review ...` driven as a user would (the commands the acceptance tests drive)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.human_review import cli as review_cli

runner = CliRunner()

SUGGESTION = {
    "action": {"discount": 0.05, "push_hour": 20, "segment": "loyal", "budget": 30.0},
    "reasoning": "loyal customers respond to small reminders",
    "confidence": 0.8,
    "risk": "low",
    "evidence": {"predicted": {"profit": {"estimate": 12.0, "low": 3.0, "high": 20.0}}},
}
PASSWORDS = {"ada": "pass-word-ada", "bob": "pass-word-bob", "cy": "pass-word-cy"}


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
    from transferlab.simulator.world_config import WorldConfig

    logs = generate_logs(LogSpec(days=30, world=WorldConfig(n_customers=100, seed=2)))
    return write_logs(logs, tmp_path_factory.mktemp("logs") / "logs")


class Review:
    """Runs `transferlab review ...` against one SQLite database as a named user."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"sqlite:///{root / 'review.db'}"

    def __call__(self, *args: str, user: str | None = None, password: str | None = None, **env: str) -> Any:
        argv = ["review", *args, "--db", self.url]
        if user is not None:
            argv += ["--user", user]
        pw = password if password is not None else PASSWORDS.get(user or "", "")
        environ = {"TRANSFERLAB_PASSWORD": pw, "TRANSFERLAB_NEW_PASSWORD": "", **env}
        return runner.invoke(app, argv, env=environ)

    def file(self, name: str, data: Any) -> str:
        path = self.root / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return str(path)


def _one_error_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


@pytest.fixture
def review(tmp_path: Path) -> Review:
    """A database with ada (admin), bob (reviewer) and cy (approver)."""
    r = Review(tmp_path)
    first = r("users", "add", "ada", "--role", "admin", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["ada"])
    assert first.exit_code == 0, first.output
    for name, role in (("bob", "reviewer"), ("cy", "approver")):
        added = r("users", "add", name, "--role", role, user="ada", TRANSFERLAB_NEW_PASSWORD=PASSWORDS[name])
        assert added.exit_code == 0, added.output
    return r


def test_users_add_first_admin_then_only_admins(tmp_path: Path) -> None:
    r = Review(tmp_path)
    first = r("users", "add", "zed", "--role", "reviewer", TRANSFERLAB_NEW_PASSWORD="password1")
    assert first.exit_code == 3 and "first user must be an admin" in _one_error_line(first)
    assert (
        r("users", "add", "ada", "--role", "admin", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["ada"]).exit_code == 0
    )
    no_login = r("users", "add", "bob", "--role", "reviewer", TRANSFERLAB_NEW_PASSWORD="pass-word-bob")
    assert no_login.exit_code == 3 and "admin" in _one_error_line(no_login)
    wrong = r("users", "add", "bob", "--role", "reviewer", user="ada", password="nope-nope")
    assert wrong.exit_code == 3 and "wrong password" in _one_error_line(wrong)
    ok = r("users", "add", "bob", "--role", "reviewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pass-word-bob")
    assert ok.exit_code == 0 and "added bob (reviewer)" in ok.stdout
    by_reviewer = r(
        "users", "add", "cy", "--role", "viewer", user="bob", TRANSFERLAB_NEW_PASSWORD="password1"
    )
    assert by_reviewer.exit_code == 3 and "admin" in _one_error_line(by_reviewer)
    missing = r("list", user="bob", password="")
    assert missing.exit_code == 2 and "TRANSFERLAB_PASSWORD" in _one_error_line(missing)
    bad_role = r("users", "add", "dan", "--role", "boss", user="ada", TRANSFERLAB_NEW_PASSWORD="password1")
    assert bad_role.exit_code == 2 and "unknown role" in _one_error_line(bad_role)


def test_users_add_never_copies_the_admins_password(tmp_path: Path) -> None:
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    r = Review(tmp_path)
    empty = r("users", "add", "ada", "--role", "admin", password=PASSWORDS["ada"])  # no NEW_PASSWORD
    line = _one_error_line(empty)
    assert empty.exit_code == 2 and "TRANSFERLAB_NEW_PASSWORD" in line and "terminal" in line
    assert (
        r("users", "add", "ada", "--role", "admin", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["ada"]).exit_code == 0
    )
    copied = r("users", "add", "bob", "--role", "reviewer", user="ada")  # only ada's password is set
    line = _one_error_line(copied)
    assert copied.exit_code == 2 and "no password for the new account bob" in line
    assert "TRANSFERLAB_NEW_PASSWORD" in line
    short = r("users", "add", "bob", "--role", "reviewer", user="ada", TRANSFERLAB_NEW_PASSWORD="seven77")
    assert short.exit_code == 2 and "at least 8" in _one_error_line(short)
    svc = ReviewService(ReviewStore(r.url))
    assert svc.user("bob") is None  # nothing was stored by the refusals
    with pytest.raises(Exception, match="unknown user or wrong password"):
        svc.authenticate("bob", PASSWORDS["ada"])


def test_submit_decide_execute_show(review: Review, logs_dir: Path) -> None:
    submitted = review("submit", review.file("s.json", SUGGESTION), user="bob")
    assert submitted.exit_code == 0, submitted.output
    sid = submitted.stdout.strip()
    assert sid.isdigit()

    listed = review("list", "--json", user="ada")
    rows = json.loads(listed.stdout)
    assert [(str(r["id"]), r["state"]) for r in rows] == [(sid, "pending")]
    table = review("list", user="ada")
    assert "1 pending" in table.stdout and "loyal" in table.stdout

    self_approval = review("decide", sid, "approve", user="bob")
    assert self_approval.exit_code == 3 and "someone else" in _one_error_line(self_approval)
    no_reason = review("decide", sid, "reject", user="cy")
    assert no_reason.exit_code == 2 and "reason" in _one_error_line(no_reason)
    approved = review("decide", sid, "approve", "--reason", "looks safe", user="cy")
    assert approved.exit_code == 0 and "approved" in approved.stdout
    again = review("decide", sid, "approve", user="ada")
    assert again.exit_code == 2 and "pending" in _one_error_line(again)

    no_market = review("worker", "--once", user="ada")
    assert no_market.exit_code == 2 and "review market init" in _one_error_line(no_market)
    market = review.root / "market"  # the default: next to the SQLite file
    init = runner.invoke(app, ["review", "market", "init", "--dir", str(market), "--logs", str(logs_dir)])
    assert init.exit_code == 0 and "day 30" in init.stdout
    worked = review("worker", "--once", user="ada")
    assert worked.exit_code == 0, worked.output
    assert "executed 1" in worked.stdout
    assert "executed 0" in review("worker", "--once", user="ada").stdout  # exactly once

    shown = json.loads(review("show", sid, "--json", user="bob").stdout)
    assert shown["state"] == "executed" and shown["executions"] == 1
    trail = [(a["from_state"], a["to_state"]) for a in shown["audit"]]
    assert trail == [
        (None, "pending"),
        ("pending", "approved"),
        ("approved", "executing"),
        ("executing", "executed"),
    ]
    assert shown["audit"][1]["actor"] == "cy" and shown["audit"][1]["reason"] == "looks safe"
    text = review("show", sid, user="bob")
    assert "executions 1" in text.stdout and "cy: pending -> approved" in text.stdout

    advanced = runner.invoke(app, ["review", "market", "advance", "--dir", str(market), "--days", "31"])
    assert advanced.exit_code == 0 and f"suggestion-{sid}" in advanced.stdout and "profit" in advanced.stdout
    assert "feedback 1" in review("worker", "--once", user="ada").stdout
    assert json.loads(review("show", sid, "--json", user="bob").stdout)["state"] == "feedback_received"


def test_modify_and_reject(review: Review) -> None:
    a = review("submit", review.file("a.json", SUGGESTION), user="bob").stdout.strip()
    b = review("submit", review.file("b.json", SUGGESTION), user="bob").stdout.strip()
    assert review("decide", b, "reject", "--reason", "not this week", user="cy").exit_code == 0
    no_action = review("decide", a, "modify", user="cy")
    assert no_action.exit_code == 2 and "--action" in _one_error_line(no_action)
    changed = {**SUGGESTION["action"], "discount": 0.3}  # type: ignore[dict-item]
    high = review("decide", a, "modify", "--action", review.file("m.json", changed), user="ada")
    assert high.exit_code == 0, high.output  # an admin may approve high risk
    shown = json.loads(review("show", a, "--json", user="bob").stdout)
    assert shown["state"] == "modified" and shown["risk"] == "high"
    assert shown["original_action"]["discount"] == 0.05 and shown["action"]["discount"] == 0.3
    assert json.loads(review("show", b, "--json", user="bob").stdout)["reason"] == "not this week"
    unknown = review("decide", a, "maybe", user="cy")
    assert unknown.exit_code == 2 and "approve, reject or modify" in _one_error_line(unknown)
    missing = review("show", "999", user="bob")
    assert missing.exit_code == 2 and "no suggestion 999" in _one_error_line(missing)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({**SUGGESTION, "confidence": 1.5}),
        json.dumps({**SUGGESTION, "action": {"discount": 0.7}}),
        json.dumps({**SUGGESTION, "surprise": 1}),
        json.dumps([1, 2]),
    ],
)
def test_malformed_suggestion_is_refused_and_nothing_stored(review: Review, content: str) -> None:
    result = review("submit", review.file("bad.json", content), user="bob")
    assert result.exit_code == 2 and result.stdout == ""
    _one_error_line(result)
    assert json.loads(review("list", "--json", user="bob").stdout) == []


def test_viewer_cannot_submit(review: Review) -> None:
    review("users", "add", "vi", "--role", "viewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pass-word-vi")
    result = review("submit", review.file("s.json", SUGGESTION), user="vi", password="pass-word-vi")
    assert result.exit_code == 3 and "reviewer" in _one_error_line(result)


def test_rate_stores_expert_ratings_as_rewards(review: Review) -> None:
    from transferlab.human_review.feedback import ratings_as_rewards
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    missing = review("rate", "report-1", "8", user="bob")
    assert missing.exit_code == 2 and "there is no report report-1" in _one_error_line(missing)
    svc = ReviewService(ReviewStore(review.url))
    ada = svc.authenticate("ada", "pass-word-ada")
    assert svc.add_report(ada, "ops-0001", "why did sales fall?", "a stock-out", 6.0, "expert") == 1
    first = review("rate", "report-1", "8", "--comment", "names the stock-out", user="bob")
    assert first.exit_code == 0, first.output
    assert first.stdout.strip() == "rating 1: report-1 scored 8/10 by bob"
    out_of_range = review("rate", "report-1", "11", user="bob")
    assert out_of_range.exit_code != 0 and "10" in _one_error_line(out_of_range)
    assert ratings_as_rewards(svc, ada) == [("report-1", 0.8)]


def test_propose_command_queues_ppo_suggestions(review: Review, logs_dir: Path) -> None:
    from transferlab.simulator.train import CampaignPolicy
    from transferlab.simulator.vocabulary import CATALOG

    policy = CampaignPolicy(hidden=8)
    policy.set_logit_prior(np.full(len(CATALOG), 1.0 / len(CATALOG)))
    path = policy.save(review.root / "policy.pt")
    result = review("propose", "--policy", str(path), "--logs", str(logs_dir), "--n", "2", user="bob")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("queued suggestion") == 2
    rows = json.loads(review("list", "--json", user="ada").stdout)
    assert len(rows) == 2 and all(r["evidence"]["policy"] == "ppo:ppo" for r in rows)
    bad = review("propose", "--policy", str(logs_dir), "--logs", str(logs_dir), user="bob")
    assert bad.exit_code == 2 and "neither a PPO policy" in _one_error_line(bad)


def test_market_advance_without_market_and_serve_without_app(
    review: Review, monkeypatch: pytest.MonkeyPatch
) -> None:
    advance = runner.invoke(
        app, ["review", "market", "advance", "--dir", str(review.root / "m"), "--days", "1"]
    )
    assert advance.exit_code == 2 and "review market init" in _one_error_line(advance)
    monkeypatch.setattr(review_cli, "review_app_path", lambda: review.root / "nowhere" / "review_app.py")
    served = review("serve", "--port", "8999")
    assert served.exit_code == 2 and "review app" in _one_error_line(served)
    line = review_cli.serve_command_line(8999)
    assert line[1:4] == ["-m", "streamlit", "run"]
    flags = dict(zip(line[5::2], line[6::2], strict=True))
    assert flags == {
        "--server.headless": "true",
        "--server.address": "127.0.0.1",  # loopback unless --address says otherwise
        "--server.port": "8999",
        "--browser.gatherUsageStats": "false",
        "--client.toolbarMode": "viewer",  # no Deploy button
    }
    assert (
        dict(zip(*[iter(review_cli.serve_command_line(1, "0.0.0.0")[5:])] * 2, strict=True))[
            "--server.address"
        ]
        == "0.0.0.0"
    )
    assert [review_cli.is_loopback(a) for a in ("127.0.0.1", "127.3.0.1", "::1", "localhost")] == [True] * 4
    assert not any(review_cli.is_loopback(a) for a in ("0.0.0.0", "10.0.0.2", "::", "example.org"))
    assert review_cli.default_market_dir("sqlite:////x/y/review.db") == Path("/x/y/market")
    assert review_cli.default_market_dir("postgresql+psycopg://h/db") is None


def test_reports_queue_list_rate_and_agreement(review: Review, tmp_path: Path) -> None:
    empty = review("reports", "agreement", user="bob")
    assert empty.exit_code == 0, empty.output
    assert "fewer than 2 reports are rated" in empty.stdout
    assert "transferlab review rate report-<id> SCORE" in empty.stdout
    queued = review("reports", "queue", "--tasks", "2", "--seed", "0", user="ada")
    assert queued.exit_code == 0, queued.output
    ids = [
        int(line.split()[2].rstrip(":")) for line in queued.stdout.splitlines() if line.startswith("queued")
    ]
    assert len(ids) >= 3 and "by expert" in queued.stdout and "by random" in queued.stdout
    listed = review("reports", "list", "--json", user="ada")
    assert listed.exit_code == 0, listed.output
    reports = json.loads(listed.stdout)
    assert [r["id"] for r in reports] == ids
    assert all(0.0 <= r["rubric_score"] <= 10.0 for r in reports)
    blind = review("reports", "list", "--json", user="bob")  # a reviewer sees them as the app does
    assert [(r["id"], r["rated_by_you"]) for r in json.loads(blind.stdout)] == [(i, False) for i in ids]
    assert all(
        set(r) == {"id", "task_id", "subject", "rated_by_you", "question", "text"}
        for r in json.loads(blind.stdout)
    )
    blind_table = review("reports", "list", user="bob").stdout
    assert "rubric" not in blind_table and "expert" not in blind_table and "random" not in blind_table
    own = review("rate", f"report-{reports[0]['id']}", "5", user="ada")  # ada queued it
    assert own.exit_code == 3 and "someone else must rate it" in _one_error_line(own)
    for report in reports:  # a human who agrees with the rubric, one point more generous
        score = str(min(10.0, report["rubric_score"] + 1.0))
        assert review("rate", f"report-{report['id']}", score, user="bob").exit_code == 0
    table = review("reports", "list", user="ada")
    assert f"{len(ids)} report(s), {len(ids)} rated" in table.stdout
    assert f"{len(ids)} report(s), {len(ids)} rated by you" in review("reports", "list", user="bob").stdout
    missing = review("rate", "report-999", "5", user="bob")
    assert missing.exit_code == 2 and "there is no report report-999" in _one_error_line(missing)
    agreement = review("reports", "agreement", "--out", str(tmp_path / "agreement.json"), user="ada")
    assert agreement.exit_code == 0, agreement.output
    saved = json.loads((tmp_path / "agreement.json").read_text())
    assert saved["n"] == len(ids) and saved["spearman"] > 0.9
    lines = agreement.stdout.splitlines()
    assert lines[0].startswith("spearman ") and float(lines[0].split()[1]) > 0.9
    assert lines[2] == f"n {len(ids)} rated report(s)"


def test_reports_queue_refusals(review: Review) -> None:
    review("users", "add", "vi", "--role", "viewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pass-word-vi")
    viewer = review("reports", "queue", "--tasks", "1", user="vi", password="pass-word-vi")
    assert viewer.exit_code == 3 and "reviewer" in _one_error_line(viewer)
    bad = review("reports", "queue", "--tasks", "0", user="bob")
    assert bad.exit_code == 2 and "--tasks" in _one_error_line(bad)
    no_password = review("reports", "list", user="bob", password="")
    assert no_password.exit_code == 2 and "TRANSFERLAB_PASSWORD" in _one_error_line(no_password)


# --------------------------------------------------------------------------------- storage failures


def _no_traceback(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    return _one_error_line(result)


def _checkpoint(db: Path) -> None:
    """Move everything into the main file (the WAL emptied), as a closed database would be."""
    import gc
    import sqlite3

    gc.collect()
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


@pytest.mark.parametrize("damage", ["header", "pages"])
def test_a_corrupted_database_gives_one_error_line_and_is_left_alone(review: Review, damage: str) -> None:
    assert review("submit", review.file("s.json", SUGGESTION), user="bob").exit_code == 0
    db = review.root / "review.db"
    _checkpoint(db)
    data = bytearray(db.read_bytes())
    page = 4096
    if damage == "header":
        data[:100] = b"\xa5" * 100
    else:  # every page but the first: the tables' b-trees are garbage
        data[page:] = bytes((i * 7 + 3) % 256 for i in range(len(data) - page))
    db.write_bytes(bytes(data))
    for args, user in ((("list",), "ada"), (("submit", review.file("t.json", SUGGESTION)), "bob")):
        line = _no_traceback(review(*args, user=user))
        assert "is corrupted" in line and "restore it from a backup" in line, line
    assert db.read_bytes() == bytes(data)  # nothing written into the damaged file


def test_a_corrupted_market_journal_gives_one_error_line(review: Review, logs_dir: Path) -> None:
    market = review.root / "market"
    init = runner.invoke(app, ["review", "market", "init", "--dir", str(market), "--logs", str(logs_dir)])
    assert init.exit_code == 0, init.output
    sid = review("submit", review.file("s.json", SUGGESTION), user="bob").stdout.strip()
    assert review("decide", sid, "approve", user="cy").exit_code == 0
    journal = market / "market.json"
    broken = journal.read_bytes()[:-200]  # cut off mid-way, as a torn copy would be
    journal.write_bytes(broken)
    advance = runner.invoke(app, ["review", "market", "advance", "--dir", str(market), "--days", "1"])
    line = _no_traceback(advance)
    assert f"the market journal {journal} is corrupted (not valid JSON" in line
    worker = review("worker", "--once", user="ada")
    assert "is corrupted" in _no_traceback(worker)
    assert journal.read_bytes() == broken
    shown = json.loads(review("show", sid, "--json", user="ada").stdout)
    assert shown["state"] in ("approved", "executing") and shown["executions"] == 0  # nothing recorded


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root and mount; CI runs as root), unmounted at the end."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` to the last block; the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_gives_one_error_line_and_changes_nothing(tiny_disk: Path, count_rows: Any) -> None:
    import sqlite3

    from transferlab.human_review.gateway import MarketGateway
    from transferlab.human_review.store import ReviewStore
    from transferlab.simulator.world_config import WorldConfig

    r = Review(tiny_disk)
    assert (
        r("users", "add", "ada", "--role", "admin", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["ada"]).exit_code == 0
    )
    added = r(
        "users", "add", "bob", "--role", "reviewer", user="ada", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["bob"]
    )
    assert added.exit_code == 0, added.output
    MarketGateway.create(tiny_disk / "market", WorldConfig(n_customers=50, seed=1))
    db, journal = tiny_disk / "review.db", tiny_disk / "market" / "market.json"
    _checkpoint(db)
    before = count_rows(ReviewStore(r.url))
    suggestion = SUGGESTION | {"reasoning": "x" * 3000}
    path = Path(r.file("s.json", suggestion))
    filler = _fill(tiny_disk)
    journal_before = journal.read_bytes()

    submitted = r("submit", str(path), user="bob")
    line = _no_traceback(submitted)
    assert "the disk holding the review database is full" in line and "nothing was changed" in line
    advanced = runner.invoke(app, ["review", "market", "advance", "--dir", str(journal.parent)])
    line = _no_traceback(advanced)
    assert "is full" in line and "free space" in line
    assert journal.read_bytes() == journal_before
    assert [p.name for p in journal.parent.iterdir() if p.name.endswith(".tmp")] == []

    filler.unlink()
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    connection.close()
    assert count_rows(ReviewStore(r.url)) == before  # the refused submit left no row behind
    assert r("submit", str(path), user="bob").exit_code == 0  # with space again it works


# ------------------------------------------------------------------------------ identity and audit


def test_the_worker_needs_a_role_that_may_execute_and_a_plain_id(review: Review, logs_dir: Path) -> None:
    market = review.root / "market"
    assert (
        runner.invoke(
            app, ["review", "market", "init", "--dir", str(market), "--logs", str(logs_dir)]
        ).exit_code
        == 0
    )
    sid = review("submit", review.file("s.json", SUGGESTION), user="bob").stdout.strip()
    assert review("decide", sid, "approve", user="cy").exit_code == 0
    as_reviewer = review("worker", "--once", user="bob")
    assert as_reviewer.exit_code == 3 and "needs the approver role" in _one_error_line(as_reviewer)
    forged = review("worker", "--once", "--worker-id", "w1\n2025-03-01 ada: pending -> approved", user="cy")
    assert forged.exit_code == 2 and "--worker-id: worker id" in _one_error_line(forged)
    assert json.loads(review("show", sid, "--json", user="ada").stdout)["state"] == "approved"
    worked = review("worker", "--once", user="cy")  # an approver may; the default id is a plain one
    assert worked.exit_code == 0 and "executed 1" in worked.stdout, worked.output
    audit = json.loads(review("show", sid, "--json", user="ada").stdout)["audit"]
    assert re.fullmatch(r"worker:cy\.[A-Za-z0-9_.@-]{1,61}", audit[-1]["actor"]), audit[-1]["actor"]


def test_show_escapes_free_text_so_audit_lines_cannot_be_forged(review: Review) -> None:
    sid = review("submit", review.file("s.json", SUGGESTION), user="bob").stdout.strip()
    reason = "no\n  2025-03-01T09:00:00+00:00  cy: pending -> approved (looks safe)\x1b[2K"
    assert review("decide", sid, "reject", "--reason", reason, user="cy").exit_code == 0
    out = review("show", sid, user="ada").stdout
    audit = out[out.index("audit:") :].splitlines()[1:]
    assert len(audit) == 2 and "\x1b" not in out  # submitted and rejected: two lines, no escape code
    forged = "no\\n  2025-03-01T09:00:00+00:00  cy: pending -> approved (looks safe)\\x1b[2K"
    assert audit[1].endswith(f"cy: pending -> rejected ({forged})")
    assert json.loads(review("show", sid, "--json", user="ada").stdout)["reason"] == reason  # stored as given


def test_users_add_asks_twice_on_a_terminal(tmp_path: Path) -> None:
    """``users add`` on a real pseudo-terminal: asked twice, a mismatch refused, a match stored."""
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    url = f"sqlite:///{tmp_path / 'review.db'}"

    def add(name: str, answers: list[str]) -> tuple[int, str]:
        # each prompt answered once shown: getpass turns echo off (flushing input) before that
        return _on_a_terminal(
            ["review", "users", "add", name, "--role", "admin", "--db", url], answers, b"password for"
        )

    code, out = add("ada", ["first-secret", "other-secret"])
    assert code == 2 and "password for ada:" in out and "the two passwords differ" in out
    code, out = add("ada", ["first-secret", "first-secret"])
    assert code == 0 and "added ada (admin)" in out, out
    assert "first-secret" not in out  # never echoed
    assert ReviewService(ReviewStore(url)).authenticate("ada", "first-secret").name == "ada"


def _on_a_terminal(argv: list[str], answers: list[str], prompt: bytes) -> tuple[int, str]:
    """``transferlab ARGV`` on a real pseudo-terminal, answering each ``prompt`` once it shows."""
    import pty
    import select
    import sys

    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI with the pty as its terminal
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFERLAB_")}
        os.execve(
            sys.executable, [sys.executable, "-c", "from transferlab.cli import main; main()", *argv], env
        )
    out, pending, answered = b"", list(answers), 0
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        assert ready, f"no output from the CLI; so far: {out!r}"
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if pending and out.count(prompt) > answered and out.rstrip().endswith(b":"):
            os.write(fd, pending.pop(0).encode() + b"\n")
            answered += 1
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_the_acting_users_password_is_asked_on_a_terminal(review: Review) -> None:
    argv = ["review", "list", "--db", review.url, "--user", "ada"]
    code, out = _on_a_terminal(argv, [PASSWORDS["ada"]], b"ada's password")
    assert code == 0 and "ada's password:" in out, out
    assert PASSWORDS["ada"] not in out  # never echoed
    code, out = _on_a_terminal(argv, ["wrong-password"], b"ada's password")
    assert code == 3 and "unknown user or wrong password" in out, out


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) with a socket listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("address", [None, "0.0.0.0"])
def test_serve_listens_on_loopback_unless_told_and_warns_then(tmp_path: Path, address: str | None) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    db = ["--db", f"sqlite:///{tmp_path / 'review.db'}"]
    argv = [sys.executable, "-c", "from transferlab.cli import main; main()", "review", "serve"]
    argv += ["--port", str(port), *db]
    argv += ["--address", address] if address else []
    missing = runner.invoke(app, ["review", "serve", "--port", str(port), *db])
    assert missing.exit_code == 2 and "users add" in _one_error_line(missing)  # nobody could sign in
    added = runner.invoke(
        app,
        ["review", "users", "add", "ada", "--role", "admin", *db],
        env={"TRANSFERLAB_NEW_PASSWORD": "password1"},
    )
    assert added.exit_code == 0, added.output
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stopped = False
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.3)
        listening = _listening(port)
        proc.send_signal(signal.SIGTERM)  # to `review serve` alone: it must stop Streamlit itself
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.3)
        stopped = not _listening(port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        proc.wait(timeout=60)
        log.close()
    out = (tmp_path / "serve.log").read_text()
    assert stopped, "the Streamlit server outlived `review serve` after SIGTERM"
    shown = "http://127.0.0.1:" if address is None else "http://0.0.0.0:"
    assert f"review app on {shown}{port}" in out
    if address is None:
        assert listening == {"0100007F"}, listening  # 127.0.0.1 only
        assert "warning:" not in out
    else:
        assert listening & {"00000000", "00000000000000000000000000000000"}, listening
        assert f"warning: the review app listens on {address}, so other machines can reach" in out


def test_cli_doctests_hold() -> None:
    import doctest

    from transferlab.human_review import cli as module

    assert doctest.testmod(module).failed == 0


def test_a_mistyped_database_is_an_error_not_a_new_empty_store(tmp_path: Path) -> None:
    r = Review(tmp_path)
    first = r("users", "add", "ada", "--role", "admin", TRANSFERLAB_NEW_PASSWORD=PASSWORDS["ada"])
    assert first.exit_code == 0
    typo = tmp_path / "reveiw.db"
    for args in (("list",), ("show", "1"), ("reports", "list")):
        res = CliRunner().invoke(app, ["review", *args, "--db", f"sqlite:///{typo}"])
        assert res.exit_code == 2 and "no review database at" in _one_error_line(res), args
        assert not typo.exists(), args
    assert review_cli.sqlite_file("sqlite://") is None and review_cli.sqlite_file("postgresql://h/d") is None


def test_users_list_disable_and_passwd(review: Review) -> None:
    listed = review("users", "list", user="ada")
    assert listed.exit_code == 0, listed.output
    rows = [line.split("\t")[:3] for line in listed.stdout.splitlines()]
    assert rows == [["ada", "admin", "active"], ["bob", "reviewer", "active"], ["cy", "approver", "active"]]
    assert "listing accounts needs the admin role" in _one_error_line(review("users", "list", user="bob"))

    assert review("users", "disable", "bob", user="ada").stdout.strip() == "disabled bob"
    assert "unknown user or wrong password" in _one_error_line(review("list", user="bob"))
    assert review("users", "list", user="ada").stdout.splitlines()[1].split("\t")[2] == "disabled"
    assert "cannot disable their own account" in _one_error_line(
        review("users", "disable", "ada", user="ada")
    )
    assert "no user 'zed'" in _one_error_line(review("users", "disable", "zed", user="ada"))

    # an admin's new password enables the account again; the old one no longer works
    reset = review("users", "passwd", "bob", user="ada", TRANSFERLAB_NEW_PASSWORD="new-pass-bob")
    assert reset.stdout.strip() == "password set for bob"
    assert review("list", user="bob", password="new-pass-bob").exit_code == 0
    assert review("list", user="bob").exit_code != 0
    # one's own password, yes; someone else's without being an admin, no
    own = review("users", "passwd", "cy", user="cy", TRANSFERLAB_NEW_PASSWORD="new-pass-cy")
    assert own.exit_code == 0, own.output
    other = review(
        "users", "passwd", "ada", user="cy", password="new-pass-cy", TRANSFERLAB_NEW_PASSWORD="x-pass-ada"
    )
    assert "changing another user's password needs the admin role" in _one_error_line(other)


def test_a_signed_in_account_that_is_disabled_is_refused_at_its_next_call(review: Review) -> None:
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.service_common import AuthError
    from transferlab.human_review.store import ReviewStore

    service = ReviewService(ReviewStore(review.url))
    ada, bob = service.authenticate("ada", PASSWORDS["ada"]), service.authenticate("bob", PASSWORDS["bob"])
    service.submit(bob, SUGGESTION)
    service.disable_user(ada, "bob")
    with pytest.raises(AuthError, match="disabled"):
        service.submit(bob, SUGGESTION)


def test_serve_on_a_busy_port_is_one_error_line_and_starts_nothing(tmp_path: Path) -> None:
    import socket

    db = ["--db", f"sqlite:///{tmp_path / 'review.db'}"]
    added = runner.invoke(
        app,
        ["review", "users", "add", "ada", "--role", "admin", *db],
        env={"TRANSFERLAB_NEW_PASSWORD": "password1"},
    )
    assert added.exit_code == 0, added.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = int(busy.getsockname()[1])
        out = runner.invoke(app, ["review", "serve", "--port", str(port), *db])
    assert out.exit_code == 2 and "review app on" not in out.output
    assert f"port {port} on 127.0.0.1 is in use" in _one_error_line(out) and "--port" in _one_error_line(out)

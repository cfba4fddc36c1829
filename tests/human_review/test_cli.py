"""`transferlab review ...` driven as a user would (the commands the acceptance tests drive)."""

from __future__ import annotations

import json
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
PASSWORDS = {"ada": "pw-ada", "bob": "pw-bob", "cy": "pw-cy"}


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
    assert r("users", "add", "ada", "--role", "admin", password="pw-ada").exit_code == 0
    for name, role in (("bob", "reviewer"), ("cy", "approver")):
        added = r("users", "add", name, "--role", role, user="ada", TRANSFERLAB_NEW_PASSWORD=PASSWORDS[name])
        assert added.exit_code == 0, added.output
    return r


def test_users_add_first_admin_then_only_admins(tmp_path: Path) -> None:
    r = Review(tmp_path)
    first = r("users", "add", "zed", "--role", "reviewer", password="pw")
    assert first.exit_code == 3 and "first user must be an admin" in _one_error_line(first)
    assert r("users", "add", "ada", "--role", "admin", password="pw-ada").exit_code == 0
    no_login = r("users", "add", "bob", "--role", "reviewer", password="pw-bob")
    assert no_login.exit_code == 3 and "admin" in _one_error_line(no_login)
    wrong = r("users", "add", "bob", "--role", "reviewer", user="ada", password="nope")
    assert wrong.exit_code == 3 and "wrong password" in _one_error_line(wrong)
    ok = r("users", "add", "bob", "--role", "reviewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pw-bob")
    assert ok.exit_code == 0 and "added bob (reviewer)" in ok.stdout
    by_reviewer = r("users", "add", "cy", "--role", "viewer", user="bob", TRANSFERLAB_NEW_PASSWORD="x")
    assert by_reviewer.exit_code == 3 and "admin" in _one_error_line(by_reviewer)
    missing = r("list", user="bob", password="")
    assert missing.exit_code == 2 and "TRANSFERLAB_PASSWORD" in _one_error_line(missing)
    bad_role = r("users", "add", "dan", "--role", "boss", user="ada", TRANSFERLAB_NEW_PASSWORD="x")
    assert bad_role.exit_code == 2 and "unknown role" in _one_error_line(bad_role)


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
    review("users", "add", "vi", "--role", "viewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pw-vi")
    result = review("submit", review.file("s.json", SUGGESTION), user="vi", password="pw-vi")
    assert result.exit_code == 3 and "reviewer" in _one_error_line(result)


def test_rate_stores_expert_ratings_as_rewards(review: Review) -> None:
    from transferlab.human_review.feedback import ratings_as_rewards
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    first = review("rate", "report-7", "8", "--comment", "names the stock-out", user="bob")
    assert first.exit_code == 0, first.output
    assert first.stdout.strip().isdigit()
    out_of_range = review("rate", "report-7", "11", user="bob")
    assert out_of_range.exit_code != 0 and "10" in _one_error_line(out_of_range)
    svc = ReviewService(ReviewStore(review.url))
    assert ratings_as_rewards(svc, svc.authenticate("ada", "pw-ada")) == [("report-7", 0.8)]


def test_propose_command_queues_ppo_suggestions(review: Review, logs_dir: Path) -> None:
    from transferlab.simulator.market import CATALOG
    from transferlab.simulator.train import CampaignPolicy

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
    assert line[1:4] == ["-m", "streamlit", "run"] and line[-4:] == [
        "--server.headless",
        "true",
        "--server.port",
        "8999",
    ]
    assert review_cli.default_market_dir("sqlite:////x/y/review.db") == Path("/x/y/market")
    assert review_cli.default_market_dir("postgresql+psycopg://h/db") is None


def test_reports_queue_list_rate_and_agreement(review: Review, tmp_path: Path) -> None:
    empty = review("reports", "agreement", user="bob")
    assert empty.exit_code == 0, empty.output
    assert "fewer than 2 reports are rated" in empty.stdout
    assert "transferlab review rate report-<id> SCORE" in empty.stdout
    queued = review("reports", "queue", "--tasks", "2", "--seed", "0", user="bob")
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
    for report in reports:  # a human who agrees with the rubric, one point more generous
        score = str(min(10.0, report["rubric_score"] + 1.0))
        assert review("rate", f"report-{report['id']}", score, user="bob").exit_code == 0
    table = review("reports", "list", user="ada")
    assert f"{len(ids)} report(s), {len(ids)} rated" in table.stdout
    agreement = review("reports", "agreement", "--out", str(tmp_path / "agreement.json"), user="ada")
    assert agreement.exit_code == 0, agreement.output
    saved = json.loads((tmp_path / "agreement.json").read_text())
    assert saved["n"] == len(ids) and saved["spearman"] > 0.9
    lines = agreement.stdout.splitlines()
    assert lines[0].startswith("spearman ") and float(lines[0].split()[1]) > 0.9
    assert lines[2] == f"n {len(ids)} rated report(s)"


def test_reports_queue_refusals(review: Review) -> None:
    review("users", "add", "vi", "--role", "viewer", user="ada", TRANSFERLAB_NEW_PASSWORD="pw-vi")
    viewer = review("reports", "queue", "--tasks", "1", user="vi", password="pw-vi")
    assert viewer.exit_code == 3 and "reviewer" in _one_error_line(viewer)
    bad = review("reports", "queue", "--tasks", "0", user="bob")
    assert bad.exit_code == 2 and "--tasks" in _one_error_line(bad)
    no_password = review("reports", "list", user="bob", password="")
    assert no_password.exit_code == 2 and "TRANSFERLAB_PASSWORD" in _one_error_line(no_password)

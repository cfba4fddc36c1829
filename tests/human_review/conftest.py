"""Fixtures for the human review tests: a store on SQLite and on a real PostgreSQL, a fake clock, users.

PostgreSQL: ``$TRANSFERLAB_TEST_PG_URL`` when set (``postgresql+psycopg://user@host:port/db``);
otherwise a throwaway cluster is started for the session from the installed server binaries (Debian's
``/usr/lib/postgresql/<v>/bin``), run as the ``postgres`` user when we are root, on a free port on
127.0.0.1 with trust auth, and removed at the end. Without a server the PostgreSQL tests skip, or fail
under ``TRANSFERLAB_REQUIRE_PG=1`` (CI). Each test gets its own schema, so tests never see each other.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from transferlab.human_review import auth
from transferlab.human_review.service import ReviewService, User
from transferlab.human_review.store import Base, ReviewStore

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _pg_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest installed version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("TRANSFERLAB_REQUIRE_PG") == "1":
        pytest.fail(f"{reason}, and TRANSFERLAB_REQUIRE_PG=1 requires PostgreSQL", pytrace=False)
    pytest.skip(
        f"{reason} (install postgresql or set TRANSFERLAB_TEST_PG_URL; TRANSFERLAB_REQUIRE_PG=1 fails)"
    )


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL for the session: the given one, or a throwaway cluster started here."""
    given = os.environ.get("TRANSFERLAB_TEST_PG_URL")
    if given:
        yield given
        return
    bindir = _pg_bindir()
    if bindir is None:
        _skip_or_fail("PostgreSQL server binaries (initdb, pg_ctl) not found")
        return
    root = Path(tempfile.mkdtemp(prefix="transferlab-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the cluster as the postgres user
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            _skip_or_fail("running as root and there is no 'postgres' user to run the cluster")
            return
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()

    def run(*cmd: str) -> None:
        proc = subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            log = (root / "log").read_text() if (root / "log").exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}\n{log[-2000:]}")

    options = (
        f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "start")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"could not start a throwaway PostgreSQL: {e}", pytrace=False)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReviewStore]:
    """A :class:`ReviewStore` on an empty database: a SQLite file, or a fresh schema on PostgreSQL."""
    if request.param == "sqlite":
        sqlite = ReviewStore(f"sqlite:///{tmp_path / 'review.db'}")
        yield sqlite
        sqlite.dispose()
        return
    base: str = request.getfixturevalue("pg_url")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    postgres = ReviewStore(f"{base}{sep}options=-csearch_path%3D{schema}")
    try:
        yield postgres
    finally:
        postgres.dispose()
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


@dataclass
class FakeClock:
    """A settable clock for the service: ``clock.advance(hours=2)``."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: Any) -> None:
        self.now = self.now + timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Team:
    """The service and one user of each role (plus a second reviewer and approver)."""

    svc: ReviewService
    admin: User
    viewer: User
    reviewer: User
    reviewer2: User
    approver: User
    approver2: User


@pytest.fixture
def team(store: ReviewStore, clock: FakeClock) -> Team:
    svc = ReviewService(store, clock=clock)
    admin = svc.add_user(None, "ada", "pass-word-ada", "admin")
    users = {
        name: svc.add_user(admin, name, f"pass-word-{name}", role)  # type: ignore[arg-type]
        for name, role in [
            ("vic", "viewer"),
            ("rita", "reviewer"),
            ("rob", "reviewer"),
            ("alma", "approver"),
            ("abe", "approver"),
        ]
    }
    return Team(svc, admin, users["vic"], users["rita"], users["rob"], users["alma"], users["abe"])


def _suggestion(
    discount: float = 0.05,
    budget: float = 30.0,
    segment: str = "loyal",
    risk: str = "low",
    confidence: float = 0.9,
    evidence: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """A valid suggestion dict; with the defaults it is low risk by our rules."""
    data: dict[str, Any] = {
        "action": {"discount": discount, "push_hour": 20, "segment": segment, "budget": budget},
        "reasoning": "loyal customers answer small reminders <b>well</b>",
        "confidence": confidence,
        "risk": risk,
    }
    if evidence:
        data["evidence"] = {
            "predicted": {"profit": {"estimate": 12.0, "low": 3.0, "high": 20.0}},
            "ope": {
                "estimator": "dr",
                "estimate": 1.0,
                "low": 0.5,
                "high": 1.5,
                "trusted": True,
                "ess": 80.0,
            },
            "policy": "cql",
        }
    data.update(extra)
    return data


@pytest.fixture
def make_suggestion() -> Callable[..., dict[str, Any]]:
    """``make_suggestion(discount=0.3)``: a valid suggestion dict (low risk with the defaults)."""
    return _suggestion


def _count_rows(store: ReviewStore) -> dict[str, int]:
    with store.session() as s:
        return {
            t.name: int(s.scalar(sa.select(sa.func.count()).select_from(t)) or 0)
            for t in Base.metadata.sorted_tables
        }


@pytest.fixture
def count_rows() -> Callable[[ReviewStore], dict[str, int]]:
    """``count_rows(store)``: rows per table (to prove that nothing was stored)."""
    return _count_rows


@pytest.fixture(autouse=True)
def _cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests add many users: hash with small argon2id work factors (test_auth checks the real ones)."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 64)
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)

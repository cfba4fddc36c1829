"""Where review state lives: SQLAlchemy 2 tables and :class:`ReviewStore` (SQLite or PostgreSQL).

All state is in the database, never in a UI session, so several processes (the Streamlit app, workers,
the CLI) can share one store. SQLite runs in WAL mode with a busy timeout and takes the write lock at
the start of each transaction (``BEGIN IMMEDIATE``), so concurrent writers queue instead of failing.
Audit rows are append-only, enforced by the database (triggers) and by the session.

    >>> store = ReviewStore("sqlite://")
    >>> with store.session() as s:
    ...     s.add(UserRow(name="ada", role="admin", password_hash="-"))
    >>> with store.session() as s:
    ...     s.scalar(select(UserRow.name))
    'ada'
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import platformdirs
from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from transferlab.platform.extras import require_extra

__all__ = [
    "AuditEntry",
    "Base",
    "ExecutionRow",
    "FeedbackRow",
    "RatingChangeRow",
    "RatingRow",
    "ReportRow",
    "ReviewStore",
    "SignInFailureRow",
    "StoreMetaRow",
    "SuggestionRow",
    "UserRow",
    "default_url",
    "select",
    "utcnow",
]

ENV_DB = "TRANSFERLAB_REVIEW_DB"
RATINGS_UNIQUE_INDEX = "uq_ratings_rater_subject"
STORE_ID_KEY = "store_id"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def default_url() -> str:
    """The review database: ``$TRANSFERLAB_REVIEW_DB`` (a URL or a file path), else a SQLite file
    ``review.db`` in the user data dir (``platformdirs.user_data_dir("transferlab")``)."""
    override = os.environ.get(ENV_DB, "").strip()
    if "://" in override:
        return override
    path = Path(override).expanduser() if override else Path(platformdirs.user_data_dir("transferlab"))
    if not override:
        path = path / "review.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a timezone-aware (UTC) time")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base of the review tables."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime(), dict[str, Any]: JSONType}


class UserRow(Base):
    """A person (or agent) who uses the review app."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SuggestionRow(Base):
    """One suggestion and where it is in the state machine (see ``service.TRANSITIONS``)."""

    __tablename__ = "suggestions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(24), index=True)
    action: Mapped[dict[str, Any]]  # the one to execute
    original_action: Mapped[dict[str, Any] | None]  # set when modified
    reasoning: Mapped[str] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float)
    claimed_risk: Mapped[str] = mapped_column(String(8))
    risk: Mapped[str] = mapped_column(String(8), index=True)
    risk_rank: Mapped[int] = mapped_column(Integer)  # 0 low, 1 medium, 2 high (for sorting)
    evidence: Mapped[dict[str, Any]]
    submitted_by: Mapped[str] = mapped_column(String(64))
    decided_by: Mapped[str | None] = mapped_column(String(64))
    decided_at: Mapped[datetime | None]
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
    result: Mapped[dict[str, Any] | None]
    outcome: Mapped[dict[str, Any] | None]
    lease_until: Mapped[datetime | None]
    worker: Mapped[str | None] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, default=0)


class AuditEntry(Base):
    """One state transition; rows are only ever inserted."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    suggestion_id: Mapped[int] = mapped_column(ForeignKey("suggestions.id"), index=True)
    actor: Mapped[str] = mapped_column(String(160))
    at: Mapped[datetime]
    from_state: Mapped[str | None] = mapped_column(String(24))
    to_state: Mapped[str] = mapped_column(String(24))
    before: Mapped[dict[str, Any] | None]
    after: Mapped[dict[str, Any]]
    reason: Mapped[str | None] = mapped_column(Text)


class ExecutionRow(Base):
    """A launch recorded as done; the unique key makes a second one impossible."""

    __tablename__ = "executions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(64), unique=True)
    suggestion_id: Mapped[int] = mapped_column(ForeignKey("suggestions.id"), index=True)
    worker: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    result: Mapped[dict[str, Any]]
    at: Mapped[datetime]


class FeedbackRow(Base):
    """A matured outcome that came back for an executed suggestion."""

    __tablename__ = "feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    suggestion_id: Mapped[int] = mapped_column(ForeignKey("suggestions.id"), index=True)
    outcome: Mapped[dict[str, Any]]
    source: Mapped[str] = mapped_column(String(160))
    at: Mapped[datetime]


class RatingRow(Base):
    """A 0-10 rating of a report or suggestion by a person (later a reward for the ops environment).

    One per rater and subject (a unique index): a new rating replaces the old one, and the change is
    kept in :class:`RatingChangeRow`.
    """

    __tablename__ = "ratings"
    __table_args__ = (Index(RATINGS_UNIQUE_INDEX, "rater", "subject", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subject: Mapped[str] = mapped_column(String(200), index=True)
    score: Mapped[float] = mapped_column(Float)
    rater: Mapped[str] = mapped_column(String(64))
    comment: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime]


class RatingChangeRow(Base):
    """A rating replaced by its rater's newer one: old and new score and comment (append-only)."""

    __tablename__ = "rating_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subject: Mapped[str] = mapped_column(String(200), index=True)
    rater: Mapped[str] = mapped_column(String(64))
    old_score: Mapped[float] = mapped_column(Float)
    new_score: Mapped[float] = mapped_column(Float)
    old_comment: Mapped[str] = mapped_column(Text, default="")
    new_comment: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime]


class SignInFailureRow(Base):
    """Failed sign-ins of one user name in the current window, and the end of its cool-down."""

    __tablename__ = "sign_in_failures"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    window_start: Mapped[datetime]
    locked_until: Mapped[datetime | None]


class StoreMetaRow(Base):
    """Facts about the store itself, e.g. its random id (``store_id``), written once."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))


class ReportRow(Base):
    """An ops analysis report put in front of reviewers to rate 0-10 (subject ``report-<id>``)."""

    __tablename__ = "reports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[str] = mapped_column(String(64), index=True)
    question: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    rubric_score: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(160))
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(64))


_APPEND_ONLY_TABLES = ("audit", "rating_changes")


def _sqlite_append_only(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
        "BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END"
        for op in ("UPDATE", "DELETE")
    ]


def _pg_append_only(table: str) -> str:
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{table}_append_only' "
        f"AND tgrelid = '{table}'::regclass) THEN CREATE TRIGGER {table}_append_only BEFORE UPDATE OR "
        f"DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION audit_append_only(); END IF; END $$"
    )


_SQLITE_APPEND_ONLY = [stmt for table in _APPEND_ONLY_TABLES for stmt in _sqlite_append_only(table)]
_PG_APPEND_ONLY = [
    "CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'audit rows are append-only'; END $$",
    *(_pg_append_only(table) for table in _APPEND_ONLY_TABLES),
]
_PG_SCHEMA_LOCK = 0x7E1AB  # advisory lock: processes starting together create the schema one at a time


def _refuse_audit_changes(session: Session, flush_context: Any, instances: Any) -> None:
    """Session guard: an audit row loaded from the database is never updated or deleted."""
    if any(isinstance(o, AuditEntry | RatingChangeRow) for o in (*session.dirty, *session.deleted)):
        raise ValueError("audit rows are append-only: add a new row instead of changing one")


def _store_id(connection: Connection) -> str:
    """The store's random id, created on first use (also for stores made before ids existed)."""
    found = connection.execute(select(StoreMetaRow.value).where(StoreMetaRow.key == STORE_ID_KEY)).scalar()
    if found is not None:
        return str(found)
    new = secrets.token_hex(8)
    connection.execute(insert(StoreMetaRow).values(key=STORE_ID_KEY, value=new))
    return new


def _one_rating_per_rater(connection: Connection) -> None:
    """The unique (rater, subject) index; a store made before it keeps each rater's newest rating
    of a subject and records every older one it replaces in ``rating_changes``."""
    names = {ix["name"] for ix in inspect(connection).get_indexes("ratings")}
    if RATINGS_UNIQUE_INDEX in names:
        return
    newest: dict[tuple[str, str], Any] = {}
    query = select(RatingRow.id, RatingRow.rater, RatingRow.subject, RatingRow.score, RatingRow.comment)
    for row in connection.execute(query.add_columns(RatingRow.at).order_by(RatingRow.id)).mappings().all():
        key = (row["rater"], row["subject"])
        old = newest.get(key)
        if old is not None:
            connection.execute(
                insert(RatingChangeRow).values(
                    subject=row["subject"],
                    rater=row["rater"],
                    old_score=old["score"],
                    new_score=row["score"],
                    old_comment=old["comment"],
                    new_comment=row["comment"],
                    at=row["at"],
                )
            )
            connection.execute(delete(RatingRow).where(RatingRow.id == old["id"]))
        newest[key] = row
    connection.exec_driver_sql(
        f"CREATE UNIQUE INDEX IF NOT EXISTS {RATINGS_UNIQUE_INDEX} ON ratings (rater, subject)"
    )


class ReviewStore:
    """The review database at ``url`` (SQLAlchemy URL; ``postgresql+psycopg://...`` or ``sqlite:///``).

    Creates the tables when missing. :meth:`session` is one transaction: committed when the block
    ends, rolled back on an exception.
    """

    def __init__(self, url: str | None = None, *, echo: bool = False) -> None:
        self.url = url or default_url()
        self.engine: Engine = self._create_engine(self.url, echo)
        self.store_id: str = self._create_schema()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self._sessions, "before_flush", _refuse_audit_changes)

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self.engine.dialect.name

    @staticmethod
    def _create_engine(url: str, echo: bool) -> Engine:
        if not url.startswith("sqlite"):
            if url.startswith("postgresql"):
                require_extra("psycopg", "pg", "a PostgreSQL review store")
            return create_engine(url, echo=echo, pool_pre_ping=True)
        memory = url in ("sqlite://", "sqlite:///:memory:")
        engine = create_engine(
            url,
            echo=echo,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            **({"poolclass": StaticPool} if memory else {}),
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (below)
            cursor = dbapi_connection.cursor()
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # take the write lock now: no upgrade deadlocks

        return engine

    def _create_schema(self) -> str:
        """Tables (when missing), the append-only triggers, the one-rating-per-rater index and the
        store's id, in one transaction; returns the store id."""
        postgres = self.dialect == "postgresql"
        with self.engine.begin() as connection:
            if postgres:
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})")
            Base.metadata.create_all(connection)
            for statement in _PG_APPEND_ONLY if postgres else _SQLITE_APPEND_ONLY:
                connection.exec_driver_sql(statement)
            _one_rating_per_rater(connection)
            return _store_id(connection)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: ``with store.session() as s: ...`` commits, or rolls back on an error."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        """Close every pooled connection (call before deleting the database)."""
        self.engine.dispose()

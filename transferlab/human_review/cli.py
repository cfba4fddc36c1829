"""`transferlab review ...`: the human review workflow on the command line.

Commands::

    transferlab review users add NAME --role ROLE [--user ADMIN]
    transferlab review submit FILE.json                              # prints the new id only
    transferlab review list [--json] [--state S] [--risk R] [--sort risk|expiry|created]
    transferlab review decide ID approve|reject|modify [--reason TEXT] [--action FILE.json]
    transferlab review show ID [--json]                              # state, executions, audit trail
    transferlab review rate SUBJECT SCORE [--comment TEXT]           # an expert's 0-10 rating of a report
    transferlab review reports queue [--tasks N] [--seed S]          # ops reports for reviewers to rate
    transferlab review reports list [--json]
    transferlab review reports agreement                             # rubric vs human ratings
    transferlab review worker --user NAME [--once] [--market DIR] [--lease-seconds S] [--worker-id ID]
    transferlab review propose --policy PATH --logs LOGS_DIR [--simulator SIM_DIR] [--n N] [--market DIR]
    transferlab review market init --dir DIR --logs LOGS_DIR
    transferlab review market advance --dir DIR --days N [--json]
    transferlab review serve [--port P] [--address A]                # the Streamlit review app

Every command that reads or changes the review database takes ``--db URL`` (default: a SQLite file
in the user data directory, or ``$TRANSFERLAB_REVIEW_DB``) and acts as ``--user NAME``, signed in
with the password in ``$TRANSFERLAB_PASSWORD`` (five failed sign-ins of a name within 15 minutes
refuse that name for 15 minutes). ``users add`` gives the new account the password in
``$TRANSFERLAB_NEW_PASSWORD``; without it, it asks twice on a terminal, or refuses (it never copies
the acting user's password); passwords have at least 8 characters. On an empty database the first
account (an admin) is created without ``--user``. The worker runs as a user whose role may execute
(approver or admin). ``market`` works on the market's journal, not the database, and ``serve``
leaves signing in to the app; it listens on 127.0.0.1 unless ``--address`` says otherwise.

The worker's default market is the folder ``market/`` next to the SQLite file (``--market`` is
required with other databases); make it with ``review market init``.

Exit codes: 0 done; 2 refused or bad input (a malformed suggestion, an invalid transition, a
missing file or password, a bad option), or storage trouble (a full disk, a corrupted database or
market journal); 3 not allowed (wrong user or password, too many failed sign-ins, a role too low,
self-approval and the other permission refusals). A refusal prints one ``error: ...`` line on
stderr and stores nothing; every command runs its changes as transactions and atomic file writes,
so a failure leaves the database and the journal as they were.

Only typer and the standard library are imported at module level; the service, SQLAlchemy, the
market and the policies are imported inside the commands.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import ipaddress
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from transferlab.platform.cli_kit import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, fail
from transferlab.platform.extras import require_extra
from transferlab.platform.io import atomic_write_json

if TYPE_CHECKING:
    from transferlab.human_review.service import ReviewService, User

EXIT_REFUSED = EXIT_BAD_INPUT
EXIT_DENIED = EXIT_UNAVAILABLE
ENV_PASSWORD = "TRANSFERLAB_PASSWORD"
ENV_NEW_PASSWORD = "TRANSFERLAB_NEW_PASSWORD"
ENV_REVIEW_DB = "TRANSFERLAB_REVIEW_DB"
DEFAULT_ADDRESS = "127.0.0.1"
_P = ParamSpec("_P")
_R = TypeVar("_R")

app = typer.Typer(
    name="review",
    help="Human review: suggestions, approval, exactly-once execution, delayed feedback.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
users_app = typer.Typer(name="users", help="Accounts and roles.", no_args_is_help=True, rich_markup_mode=None)
market_app = typer.Typer(
    name="market",
    help="The market suggestions are launched into.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
reports_app = typer.Typer(
    name="reports",
    help="Ops analysis reports for reviewers to rate 0-10, and the rubric's agreement with them.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(users_app, name="users")
app.add_typer(market_app, name="market")
app.add_typer(reports_app, name="reports")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Review database: a SQLite file's path, or a URL (sqlite:///PATH, postgresql+psycopg://...); "
        "default: "
        "$TRANSFERLAB_REVIEW_DB or review.db in the user data directory.",
        show_default=False,
    ),
]
UserOption = Annotated[
    str | None,
    typer.Option("--user", help="Act as this user (password in $TRANSFERLAB_PASSWORD).", show_default=False),
]


def _url(db: str | None) -> str:
    """The database URL of ``--db``: a URL as given, a plain path as that SQLite file, else the default.

    >>> _url("sqlite:///a.db"), _url("/srv/review.db")
    ('sqlite:///a.db', 'sqlite:////srv/review.db')
    """
    from transferlab.human_review.store import default_url

    if db and "://" not in db:
        return f"sqlite:///{Path(db).expanduser().absolute()}"
    return db or default_url()


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def storage_problem(exc: BaseException, what: str = "the review database") -> str:
    """One line for a storage failure: a full disk, a corrupted database, or another database error.

    >>> storage_problem(OSError(errno.ENOSPC, "No space left on device"), "the market journal")[:60]
    'the disk holding the market journal is full ([Errno 28] No s'
    """
    text = _first_line(exc)
    low = text.lower()
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if full or "disk is full" in low or "no space left" in low:
        return f"the disk holding {what} is full ({text}): free space and run the command again; " + (
            "nothing was changed"
        )
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return (
            f"{what} is corrupted ({text}): restore it from a backup (for SQLite, `sqlite3 FILE .recover` "
            "may save its rows); it was left as it is"
        )
    if isinstance(exc, OSError):
        return f"cannot use {what}: {text}"
    return f"{what} failed ({text}); nothing was changed"


def sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:///PATH`` URL names (None for other databases and in-memory SQLite).

    >>> sqlite_file("sqlite:///tmp/review.db"), sqlite_file("sqlite://"), sqlite_file("postgresql://h/db")
    (PosixPath('tmp/review.db'), None, None)
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _require_database(url: str, fix: str) -> None:
    """Fail (one line, exit 2) when ``url`` names a SQLite file that does not exist; ``fix`` leads
    into the command that makes one."""
    path = sqlite_file(url)
    if path is not None and not path.exists():
        fail(f"there is no review database at {path}: {fix} `transferlab review users add NAME --role admin`")


def _service(db: str | None, create: bool = False) -> ReviewService:
    """The review service on ``--db``; only ``create`` (``users add``) may start a new SQLite file."""
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    url = _url(db)
    if not create:
        _require_database(url, "check --db (or $TRANSFERLAB_REVIEW_DB), or start one with")
    try:
        return ReviewService(ReviewStore(url))
    except Exception as exc:  # a bad URL, an unreachable server, a missing driver, a damaged file
        problem = storage_problem(exc, f"the review database {url}")
        if "is full" in problem or "is corrupted" in problem:
            fail(problem)
        fail(f"cannot open the review database {url}: {_first_line(exc)}")


@contextmanager
def _refusals() -> Iterator[None]:
    """Turn review, market and storage errors into one line and an exit code (3 for sign-in and
    permission refusals, else 2)."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    from transferlab.human_review.gateway import MarketError
    from transferlab.human_review.propose import ProposeError
    from transferlab.human_review.service import AuthError, PermissionDenied, ReviewError

    try:
        yield
    except (AuthError, PermissionDenied) as exc:
        fail(str(exc), EXIT_DENIED)
    except (ReviewError, ProposeError, MarketError) as exc:
        fail(str(exc))
    except (SQLAlchemyError, sqlite3.DatabaseError) as exc:
        fail(storage_problem(exc))
    except OSError as exc:
        where = f"{exc.filename}" if exc.filename else "a file"
        fail(storage_problem(exc, where))


def _guarded(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a command under :func:`_refusals`: whatever fails, one ``error:`` line, no traceback."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _refusals():
            return command(*args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover  (fail() exits)

    return run


def _password(env: str = ENV_PASSWORD, who: str = "the --user") -> str:
    """``$env``, else asked on a terminal, else a refusal naming the variable (never an argument)."""
    password = os.environ.get(env, "")
    if not password and sys.stdin.isatty():
        import getpass

        password = getpass.getpass(f"{who}'s password: ")
    if not password:
        fail(f"set {env} to {who}'s password, or run this on a terminal to be asked for it")
    return password


def _sign_in(service: ReviewService, user: str | None) -> User:
    if not user:
        fail("name the acting user with --user NAME (its password in $TRANSFERLAB_PASSWORD)")
    password = _password(who=user)
    with _refusals():
        return service.authenticate(user, password)
    raise AssertionError("unreachable")  # pragma: no cover  (fail() exits)


def _new_password(name: str) -> str:
    """The new account's password: ``$TRANSFERLAB_NEW_PASSWORD``, else asked twice on a terminal,
    else a refusal saying how to give one (the acting user's password is never copied)."""
    import getpass

    from transferlab.human_review.auth import MIN_PASSWORD_LENGTH, password_problem

    password = os.environ.get(ENV_NEW_PASSWORD, "")
    if not password:
        if not sys.stdin.isatty():
            fail(
                f"no password for the new account {name}: set {ENV_NEW_PASSWORD} (at least "
                f"{MIN_PASSWORD_LENGTH} characters) or run this on a terminal to be asked for it"
            )
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass(f"password for {name} again: ") != password:
            fail("the two passwords differ; run the command again")
    problem = password_problem(password)
    if problem is not None:
        fail(f"{problem} (for {name})")
    return password


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"{what} {path} does not exist")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {what} {path}: {exc}")
    except json.JSONDecodeError as exc:
        fail(f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")


# ---------------------------------------------------------------------------------------------- users


@users_app.command("add")
@_guarded
def users_add_command(
    name: Annotated[str, typer.Argument(help="The new account's name.")],
    role: Annotated[str, typer.Option("--role", help="viewer, reviewer, approver or admin.")],
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Add an account; its password from $TRANSFERLAB_NEW_PASSWORD, else asked on a terminal.

    The first account of an empty database needs no --user and must be an admin; after that an admin
    adds accounts. Passwords have at least 8 characters.
    """
    service = _service(db, create=True)
    actor = _sign_in(service, user) if user else None
    new_password = _new_password(name)
    with _refusals():
        created = service.add_user(actor, name, new_password, role)  # type: ignore[arg-type]
    print(f"added {created.name} ({created.role})")


@users_app.command("list")
@_guarded
def users_list_command(db: DbOption = None, user: UserOption = None) -> None:
    """Every account: name, role, created, and whether it is disabled (admin only)."""
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        rows = service.list_users(actor)
    for account, disabled in rows:
        state = "disabled" if disabled else "active"
        print(f"{account.name}\t{account.role}\t{state}\t{account.created_at:%Y-%m-%d %H:%M}")


@users_app.command("disable")
@_guarded
def users_disable_command(
    name: Annotated[str, typer.Argument(help="The account to disable.")],
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Refuse every sign-in of an account from now on (admin only); `users passwd` enables it again."""
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        disabled = service.disable_user(actor, name)
    print(f"disabled {disabled.name}")


@users_app.command("passwd")
@_guarded
def users_passwd_command(
    name: Annotated[str, typer.Argument(help="The account whose password to set.")],
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Set a password: your own, or anyone's as an admin (which enables a disabled account). The new
    one from $TRANSFERLAB_NEW_PASSWORD, else asked twice on a terminal."""
    service = _service(db)
    actor = _sign_in(service, user)
    new_password = _new_password(name)
    with _refusals():
        changed = service.set_password(actor, name, new_password)
    print(f"password set for {changed.name}")


# ----------------------------------------------------------------------------------- suggestions


@app.command("submit")
@_guarded
def submit_command(
    file: Annotated[
        Path, typer.Argument(help="A suggestion as JSON (action, reasoning, confidence, risk, ...).")
    ],
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Queue a suggestion; prints its id only."""
    data = _read_json(file, "suggestion file")
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        print(service.submit(actor, data))


@app.command("list")
@_guarded
def list_command(
    db: DbOption = None,
    user: UserOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of suggestions.")] = False,
    state: Annotated[str | None, typer.Option("--state", help="Only this state.", show_default=False)] = None,
    risk: Annotated[str | None, typer.Option("--risk", help="Only this risk.", show_default=False)] = None,
    sort: Annotated[str, typer.Option("--sort", help="risk, expiry or created.")] = "risk",
) -> None:
    """The queue: highest risk first, then soonest expiry."""
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        views = service.list(actor, state=state, risk=risk, sort=sort)  # type: ignore[arg-type]
        pending = service.pending_count(actor)
    if as_json:
        print(json.dumps([v.to_dict() for v in views]))
        return
    print(f"{pending} pending, {len(views)} listed")
    if views:
        print(f"{'id':>5}  {'state':<17} {'risk':<6} {'conf':>5}  {'expires (UTC)':<16}  action")
    for v in views:
        a = v.action
        action = (
            f"{a['discount']:.0%} off {a['category']}, {a['push_hour']}:00, {a['segment']}, "
            f"budget {a['budget']:g}"
        )
        print(
            f"{v.id:>5}  {v.state:<17} {v.risk:<6} {v.confidence:>5.2f}  "
            f"{v.expires_at.strftime('%Y-%m-%d %H:%M'):<16}  {action}"
        )


@app.command("decide")
@_guarded
def decide_command(
    suggestion_id: Annotated[int, typer.Argument(metavar="ID", help="The suggestion's id.")],
    decision: Annotated[str, typer.Argument(metavar="approve|reject|modify", help="The decision.")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (required to reject).", show_default=False)
    ] = None,
    action: Annotated[
        Path | None,
        typer.Option("--action", help="The changed action as JSON (required to modify).", show_default=False),
    ] = None,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Approve, reject (with --reason) or modify (with --action FILE.json) a pending suggestion."""
    if decision not in ("approve", "reject", "modify"):
        fail(f"unknown decision {decision!r}; use approve, reject or modify")
    if decision == "modify" and action is None:
        fail("modify needs the changed action: --action FILE.json")
    changed = _read_json(action, "action file") if action is not None else None
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        view = service.decide(actor, suggestion_id, decision, reason=reason, action=changed)  # type: ignore[arg-type]
    print(f"suggestion {view.id}: {view.state} (risk {view.risk})")


@app.command("show")
@_guarded
def show_command(
    suggestion_id: Annotated[int, typer.Argument(metavar="ID", help="The suggestion's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """One suggestion with its state, executions (market launches) and audit trail.

    Free text (reasoning, reasons, actors) is shown with control characters escaped (``\\n``,
    ``\\x1b``), so it cannot forge audit lines.
    """
    from transferlab.human_review.text import shown

    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        view = service.get(actor, suggestion_id)
        audit = service.audit(actor, suggestion_id)
    data = view.to_dict() | {"audit": [row.to_dict() for row in audit]}
    if as_json:
        print(json.dumps(data))
        return
    print(
        f"suggestion {view.id}: {view.state}, risk {view.risk} (claimed {view.claimed_risk}), "
        f"confidence {view.confidence:.2f}, executions {view.executions}"
    )
    print(f"action: {json.dumps(view.action)}")
    if view.original_action is not None:
        print(f"original action: {json.dumps(view.original_action)}")
    print(f"reasoning: {shown(view.reasoning)}")
    if view.outcome is not None:
        print(f"outcome: {json.dumps(view.outcome)}")
    print("audit:")
    for row in audit:
        why = f" ({shown(row.reason)})" if row.reason else ""
        print(f"  {row.at.isoformat()}  {shown(row.actor)}: {row.from_state or '-'} -> {row.to_state}{why}")


@app.command("rate")
@_guarded
def rate_command(
    subject: Annotated[
        str, typer.Argument(help="What is rated, e.g. report-<id> (see `review reports list`).")
    ],
    score: Annotated[float, typer.Argument(help="The expert's rating, 0 (useless) to 10 (perfect).")],
    comment: Annotated[str, typer.Option("--comment", help="Why this score.")] = "",
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Rate an assistant's analysis report 0-10; prints what was recorded, with the rating's id.

    Ratings are kept as rewards (score / 10) for the ops tool environment, whose reward is an
    expert's rating of the agent's final report.
    """
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        rating_id = service.rate(actor, subject, score, comment)
    print(f"rating {rating_id}: {subject} scored {score:g}/10 by {actor.name}")


# ------------------------------------------------------------------------------------------- reports


@reports_app.command("queue")
@_guarded
def reports_queue_command(
    tasks: Annotated[int, typer.Option("--tasks", help="How many held-out ops tasks to run.")] = 6,
    seed: Annotated[
        int, typer.Option("--seed", help="First scenario seed; also seeds the random agent.")
    ] = 0,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Run the expert and a random agent on ops tasks and queue their reports for rating."""
    from transferlab.human_review.reports import queue_ops_reports

    if tasks < 1:
        fail(f"--tasks must be at least 1, got {tasks}")
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        ids = queue_ops_reports(service, actor, n_tasks=tasks, seed=seed)
        reports = [service.report(actor, i) for i in ids]
    for r in reports:
        print(f"queued report {r.id}: {r.task_id} by {r.source}")
    print(
        f"{len(reports)} report(s) queued; rate them on the app's 'Rate reports' page "
        "or with `transferlab review rate report-<id> SCORE`"
    )


@reports_app.command("list")
@_guarded
def reports_list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of reports.")] = False,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """The reports. An admin sees each one's source, rubric score and ratings so far; everyone else
    sees them blind, as the app shows them (id, task, whether you rated it): no anchoring."""
    from transferlab.human_review.auth import role_allows
    from transferlab.human_review.reports import rated_reports

    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        reports = service.reports(actor)
        if not role_allows(actor.role, "admin"):
            todo = {r.id for r in service.reports(actor, unrated_by=actor)}
            _print_blind(reports, todo, as_json)
            return
        rated = {r.report.id: r for r in rated_reports(service, actor)}
    if as_json:
        print(json.dumps([r.to_dict() for r in reports]))
        return
    print(f"{len(reports)} report(s), {len(rated)} rated")
    if reports:
        print(f"{'id':>5}  {'task':<9} {'source':<12} {'rubric':>6}  {'human':>5}  {'n':>3}  subject")
    for r in reports:
        rubric = f"{r.rubric_score:.1f}" if r.rubric_score is not None else "-"
        mean = f"{rated[r.id].human:.1f}" if r.id in rated else "-"
        n = rated[r.id].n_ratings if r.id in rated else 0
        print(f"{r.id:>5}  {r.task_id:<9} {r.source:<12} {rubric:>6}  {mean:>5}  {n:>3}  {r.subject}")


def _print_blind(reports: list[Any], todo: set[int], as_json: bool) -> None:
    """A reviewer's list: what each report asks and says, never who wrote it or how it scored."""
    rows = [
        {"id": r.id, "task_id": r.task_id, "subject": r.subject, "rated_by_you": r.id not in todo}
        | ({"question": r.question, "text": r.text} if as_json else {})
        for r in reports
    ]
    if as_json:
        print(json.dumps(rows))
        return
    print(f"{len(rows)} report(s), {len(rows) - len(todo)} rated by you")
    if rows:
        print(f"{'id':>5}  {'task':<9} {'rated by you':<12}  subject")
    for row in rows:
        rated = "yes" if row["rated_by_you"] else "no"
        print(f"{row['id']:>5}  {row['task_id']:<9} {rated:<12}  {row['subject']}")


@reports_app.command("agreement")
@_guarded
def reports_agreement_command(
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Also write the agreement as JSON (what `transferlab compare` reads)."),
    ] = None,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """How well the rubric agrees with the reviewers' ratings (Spearman, mean |difference|, n)."""
    from transferlab.human_review.reports import rubric_vs_human

    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        agreement = rubric_vs_human(service, actor)
    if out is not None and agreement is not None:
        atomic_write_json(out, dataclasses.asdict(agreement))
    if agreement is None:
        print(
            "fewer than 2 reports are rated: rate them on the app's 'Rate reports' page or with "
            "`transferlab review rate report-<id> SCORE` (ids from `transferlab review reports list`)"
        )
        return
    print(f"spearman {agreement.spearman:.3f}")
    print(f"mean |rubric - human| {agreement.mean_abs_diff:.2f} (0-10 scale)")
    print(f"n {agreement.n} rated report(s)")


# -------------------------------------------------------------------------------------------- worker


def default_market_dir(url: str) -> Path | None:
    """``market/`` next to a SQLite file; None for other databases (and in-memory SQLite)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url in (prefix, f"{prefix}:memory:"):
        return None
    return Path(url[len(prefix) :]).parent / "market"


def _gateway(market: Path | None, url: str) -> Any:
    from transferlab.human_review.gateway import JOURNAL, MarketGateway

    directory = market or default_market_dir(url)
    if directory is None:
        fail(f"--db {url} is not a SQLite file: give the market directory with --market DIR")
    if not (directory / JOURNAL).is_file():
        fail(
            f"no market in {directory}: create it with "
            f"`transferlab review market init --dir {directory} --logs LOGS_DIR`"
        )
    return MarketGateway(directory)


@app.command("worker")
@_guarded
def worker_command(
    once: Annotated[bool, typer.Option("--once", help="Execute what is claimable now, then exit.")] = False,
    market: Annotated[
        Path | None,
        typer.Option(
            "--market",
            help="Market directory (default: market/ next to the SQLite file).",
            show_default=False,
        ),
    ] = None,
    lease_seconds: Annotated[
        float,
        typer.Option("--lease-seconds", help="How long a claim is held before another worker may take it."),
    ] = 60.0,
    worker_id: Annotated[
        str | None, typer.Option("--worker-id", help="Name in claims and audit rows.", show_default=False)
    ] = None,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Execute approved suggestions exactly once and record matured results as feedback.

    Runs as --user, whose role must allow executing (approver or admin).
    """
    import socket

    from transferlab.human_review.text import check_worker_id, worker_id_from
    from transferlab.human_review.worker import run_worker

    if lease_seconds <= 0:
        fail(f"--lease-seconds must be positive, got {lease_seconds}")
    if worker_id is not None:
        try:
            check_worker_id(worker_id)
        except ValueError as exc:
            fail(f"--worker-id: {exc}")
    url = _url(db)
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        service.require_executor(actor)
    gateway = _gateway(market, url)
    name = worker_id or worker_id_from(actor.name, f"{socket.gethostname()}-{os.getpid()}")
    try:
        with _refusals():
            stats = run_worker(
                service, gateway, name, actor=actor, once=once, lease_seconds=lease_seconds, log=print
            )
    except KeyboardInterrupt:
        print("worker stopped", file=sys.stderr)
        return
    print(
        f"worker {name}: executed {stats.executed}, failed {stats.failed}, recovered {stats.recovered}, "
        f"feedback {stats.feedback}, expired {stats.expired}"
    )


# ------------------------------------------------------------------------------------------- propose


@app.command("propose")
@_guarded
def propose_command(
    policy: Annotated[
        Path, typer.Option("--policy", help="A PPO policy.pt (sim train) or an offline learners/<name>/ dir.")
    ],
    logs: Annotated[Path, typer.Option("--logs", help="The log directory the policy was trained on.")],
    simulator: Annotated[
        Path | None,
        typer.Option(
            "--simulator", help="A learned simulator dir, for predicted outcomes.", show_default=False
        ),
    ] = None,
    n: Annotated[int, typer.Option("--n", help="How many suggestions (the policy's top choices).")] = 3,
    market: Annotated[
        Path | None,
        typer.Option(
            "--market",
            help="Market directory whose present is the state (default: end of logs).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    user: UserOption = None,
) -> None:
    """Queue suggestions from a trained policy at the current market state, with evidence."""
    from transferlab.human_review.propose import propose

    if n < 1:
        fail(f"--n must be at least 1, got {n}")
    for option, path in (
        ("--policy", policy),
        ("--logs", logs),
        ("--simulator", simulator),
        ("--market", market),
    ):
        if path is not None and not path.exists():
            fail(f"{option} {path} does not exist")
    service = _service(db)
    actor = _sign_in(service, user)
    with _refusals():
        ids = propose(service, actor, policy, logs, simulator_dir=simulator, n=n, market_dir=market)
        views = [service.get(actor, i) for i in ids]
    for v in views:
        print(f"queued suggestion {v.id}: risk {v.risk}, confidence {v.confidence:.2f}")


# -------------------------------------------------------------------------------------------- market


@market_app.command("init")
@_guarded
def market_init_command(
    directory: Annotated[Path, typer.Option("--dir", help="The market directory to create.")],
    logs: Annotated[Path, typer.Option("--logs", help="Log directory whose world the market continues.")],
) -> None:
    """Create a market that continues the world of a log directory after its logged history."""
    from transferlab.human_review.gateway import MarketError, MarketGateway

    try:
        gateway = MarketGateway.from_logs(directory, logs)
    except MarketError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(storage_problem(exc, f"the market in {directory}"))
    except ValueError as exc:
        fail(_first_line(exc))
    print(f"market in {directory}: day {gateway.day()}")


@market_app.command("advance")
@_guarded
def market_advance_command(
    directory: Annotated[Path, typer.Option("--dir", help="The market directory.")],
    days: Annotated[int, typer.Option("--days", help="Days to move the world's clock on.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the matured results as JSON.")] = False,
) -> None:
    """Move the market's clock on; prints the results that matured meanwhile."""
    from transferlab.human_review.gateway import JOURNAL, MarketGateway

    if days < 1:
        fail(f"--days must be at least 1, got {days}")
    if not (directory / JOURNAL).is_file():
        fail(
            f"no market in {directory}: create it with `transferlab review market init --dir {directory} ...`"
        )
    with _refusals():
        gateway = MarketGateway(directory)
        matured = gateway.advance(days)
    if as_json:
        print(json.dumps({"day": gateway.day(), "matured": [r.to_dict() for r in matured]}))
        return
    print(f"market day {gateway.day()}: {len(matured)} result(s) matured")
    for r in matured:
        profit, gmv = r.outcome.get("profit", float("nan")), r.outcome.get("gmv", float("nan"))
        print(
            f"  {r.key}: campaign {r.campaign_id} launched day {r.day_launched}, "
            f"matured day {r.day_matured}: profit {profit:.2f}, gmv {gmv:.2f}"
        )


# --------------------------------------------------------------------------------------------- serve


def review_app_path() -> Path:
    """Where the Streamlit review app lives (``transferlab/apps/review_app.py``)."""
    import transferlab

    return Path(transferlab.__file__).parent / "apps" / "review_app.py"


def serve_command_line(port: int, address: str = DEFAULT_ADDRESS) -> list[str]:
    """The ``streamlit run`` command line of the review app: on ``address``, usage statistics off, and
    the toolbar a viewer's (no Deploy button or developer options)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(review_app_path()),
        "--server.headless",
        "true",
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def is_loopback(address: str) -> bool:
    """Whether ``address`` only accepts connections from this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip()).is_loopback
    except ValueError:
        return False


@app.command("serve")
@_guarded
def serve_command(
    port: Annotated[int, typer.Option("--port", help="Port of the app.")] = 8501,
    address: Annotated[
        str,
        typer.Option(
            "--address", help="Address to listen on; anything but loopback makes the app reachable by others."
        ),
    ] = DEFAULT_ADDRESS,
    db: DbOption = None,
) -> None:
    """Open the Streamlit review app on the database (people sign in in the app)."""
    require_extra("streamlit", "app", "the review app")
    path = review_app_path()
    if not path.is_file():
        fail(f"the review app {path} is not installed yet; update transferlab (it ships transferlab/apps/)")
    if not address.strip():
        fail("--address is empty: give an address to listen on, e.g. 127.0.0.1")
    if not is_loopback(address):
        print(
            f"warning: the review app listens on {address}, so other machines can reach its sign-in page; "
            "keep it on 127.0.0.1 (the default) unless a TLS proxy and a firewall stand in front of it",
            file=sys.stderr,
        )
    url = _url(db)
    _require_database(url, "nobody could sign in; add the first account (same --db) with")
    if not port_free(address, port):
        fail(
            f"port {port} on {address} is in use (another app, or this one already running): "
            "pick a free one with --port"
        )
    env = os.environ | {ENV_REVIEW_DB: url}
    print(f"review app on {listen_url(address, port)} (database {url})", file=sys.stderr)
    raise typer.Exit(_run_forwarding_signals(serve_command_line(port, address), env))


def port_free(address: str, port: int) -> bool:
    """Whether a server could listen on ``address:port`` now (checked by binding it for a moment)."""
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def listen_url(address: str, port: int) -> str:
    """The address the app listens on, as a URL (IPv6 in brackets; all interfaces said in words).

    >>> listen_url("127.0.0.1", 8501), listen_url("::1", 1), listen_url("0.0.0.0", 2)
    ('http://127.0.0.1:8501', 'http://[::1]:1', 'http://0.0.0.0:2 (every interface of this machine)')
    """
    host = f"[{address}]" if ":" in address else address
    every = address in ("0.0.0.0", "::")
    return f"http://{host}:{port}" + (" (every interface of this machine)" if every else "")


def _run_forwarding_signals(argv: list[str], env: dict[str, str]) -> int:
    """Run ``argv`` and hand it SIGTERM and SIGINT, so stopping us stops it (no orphan server).

    Returns its exit code; 0 when it stopped because we passed a signal on.
    """
    import signal
    import subprocess

    child = subprocess.Popen(argv, env=env)
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # we are leaving for another reason: do not leave it behind
            child.terminate()
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return 0 if forwarded else code

"""Accounts: adding users, changing roles, and signing in (with sign-in throttling kept in the store).

Each function is one call of :class:`~transferlab.human_review.service.ReviewService`, which documents
the contract; the functions take its :class:`~transferlab.human_review.service_common.ServiceContext`.
"""

from __future__ import annotations

import functools
import math
from datetime import timedelta
from typing import cast

from sqlalchemy import delete as sa_delete
from sqlalchemy import func, select
from sqlalchemy import update as sa_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from transferlab.human_review.auth import (
    ROLES,
    Role,
    hash_password,
    needs_rehash,
    password_problem,
    verify_password,
)
from transferlab.human_review.schema import ReviewError
from transferlab.human_review.service_common import (
    DISABLED_PREFIX,
    AuthError,
    NotFound,
    PermissionDenied,
    ServiceContext,
    User,
    is_disabled,
    require,
)
from transferlab.human_review.store import SignInFailureRow, UserRow
from transferlab.human_review.text import shown

__all__ = [
    "MAX_FAILED_SIGN_INS",
    "SIGN_IN_COOLDOWN",
    "SIGN_IN_WINDOW",
    "SignInThrottled",
    "add_user",
    "authenticate",
    "disable_user",
    "list_users",
    "set_password",
    "set_role",
    "user",
]

#: Sign-in throttling: this many failures for one name within the window start a cool-down.
MAX_FAILED_SIGN_INS = 5
SIGN_IN_WINDOW = timedelta(minutes=15)
SIGN_IN_COOLDOWN = timedelta(minutes=15)


class SignInThrottled(AuthError):
    """Too many failed sign-ins for one user name: refused until the cool-down ends."""


def _check_new_user(name: str, password: str, role: Role) -> None:
    """:class:`ReviewError` when the name, role or password of a new user is not acceptable."""
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 64:
        raise ReviewError("user name must be 1 to 64 characters")
    if shown(name) != name:
        raise ReviewError(f"user name {shown(name)!r} has control characters; use plain printable text")
    if role not in ROLES:
        raise ReviewError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    problem = password_problem(password)
    if problem is not None:
        raise ReviewError(problem)


def add_user(ctx: ServiceContext, actor: User | None, name: str, password: str, role: Role) -> User:
    """:meth:`ReviewService.add_user`: the first user of an empty store is an admin; then admins add."""
    _check_new_user(name, password, role)
    name = name.strip()
    password_hash = hash_password(password)  # slow on purpose: outside the transaction
    with ctx.store.session() as s:
        if s.scalar(select(func.count()).select_from(UserRow)) == 0:
            if role != "admin":
                raise PermissionDenied("the first user must be an admin: add it with role 'admin'")
        elif actor is None:
            raise PermissionDenied("adding a user needs an admin actor; sign in as an admin")
        else:
            require(s, actor, "admin", "adding users")
        if s.scalar(select(UserRow.id).where(UserRow.name == name)) is not None:
            raise ReviewError(f"user {name!r} exists already; pick another name")
        row = UserRow(name=name, role=role, password_hash=password_hash, created_at=ctx.now())
        s.add(row)
        try:
            s.flush()
        except IntegrityError:
            raise ReviewError(f"user {name!r} exists already; pick another name") from None
        return User(id=row.id, name=row.name, role=role, created_at=row.created_at)


def set_role(ctx: ServiceContext, actor: User, name: str, role: Role) -> User:
    """:meth:`ReviewService.set_role`: change a user's role (admin only)."""
    if role not in ROLES:
        raise ReviewError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    with ctx.store.session() as s:
        require(s, actor, "admin", "changing roles")
        row = s.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            raise NotFound(f"no user {name!r}")
        row.role = role
        return User(id=row.id, name=row.name, role=role, created_at=row.created_at)


def _user_of(row: UserRow) -> User:
    return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)


def _named(s: Session, name: str) -> UserRow:
    row = s.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        raise NotFound(f"no user {shown(name)!r}; `transferlab review users list` shows the accounts")
    return row


def list_users(ctx: ServiceContext, actor: User) -> list[tuple[User, bool]]:
    """:meth:`ReviewService.list_users`: every account and whether it is disabled (admin only)."""
    with ctx.store.session() as s:
        require(s, actor, "admin", "listing accounts")
        rows = s.scalars(select(UserRow).order_by(UserRow.id)).all()
        return [(_user_of(row), is_disabled(row)) for row in rows]


def disable_user(ctx: ServiceContext, actor: User, name: str) -> User:
    """:meth:`ReviewService.disable_user`: no sign-in for ``name`` any more (admin only, not oneself)."""
    with ctx.store.session() as s:
        me = require(s, actor, "admin", "disabling accounts")
        row = _named(s, name)
        if row.id == me.id:
            raise ReviewError("an admin cannot disable their own account; ask another admin")
        if not is_disabled(row):
            row.password_hash = DISABLED_PREFIX + row.password_hash
        return _user_of(row)


def set_password(ctx: ServiceContext, actor: User, name: str, password: str) -> User:
    """:meth:`ReviewService.set_password`: one's own password, or anyone's as an admin (which also
    enables a disabled account)."""
    problem = password_problem(password)
    if problem is not None:
        raise ReviewError(problem)
    password_hash = hash_password(password)  # slow on purpose: outside the transaction
    with ctx.store.session() as s:
        me = require(s, actor, "viewer", "changing a password")
        row = _named(s, name)
        if row.id != me.id:
            require(s, actor, "admin", "changing another user's password")
        row.password_hash = password_hash
        return _user_of(row)


def user(ctx: ServiceContext, name: str) -> User | None:
    """:meth:`ReviewService.user`: the account ``name`` as stored now, or None."""
    with ctx.store.session() as s:
        row = s.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            return None
        return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)


def authenticate(ctx: ServiceContext, name: str, password: str) -> User:
    """:meth:`ReviewService.authenticate`: the user with that name and password, throttled per name."""
    key = (name or "").strip()[:64] if isinstance(name, str) else ""
    with ctx.store.session() as s:
        _refuse_throttled(ctx, s, key)
        row = s.scalar(select(UserRow).where(UserRow.name == key))
    stored = row.password_hash if row is not None else _dummy_hash()
    ok = isinstance(password, str) and verify_password(password, stored) and row is not None
    if not ok or row is None:
        _sign_in_failed(ctx, key)
        raise AuthError("unknown user or wrong password; check both and try again")
    with ctx.store.session() as s:
        _refuse_throttled(ctx, s, key)  # a cool-down that began meanwhile holds for this one too
        s.execute(sa_delete(SignInFailureRow).where(SignInFailureRow.name == key))
    if needs_rehash(stored):
        _upgrade_hash(ctx, row.id, stored, password)
    return User(id=row.id, name=row.name, role=cast(Role, row.role), created_at=row.created_at)


def _upgrade_hash(ctx: ServiceContext, user_id: int, stored: str, password: str) -> None:
    """Replace an outdated hash (a legacy scheme or old work factors) by the current one, now that the
    password is known; only if it is still the stored one (a password changed meanwhile wins)."""
    fresh = hash_password(password)  # slow on purpose: outside the transaction
    with ctx.store.session() as s:
        s.execute(
            sa_update(UserRow)
            .where(UserRow.id == user_id, UserRow.password_hash == stored)
            .values(password_hash=fresh)
        )


def _refuse_throttled(ctx: ServiceContext, s: Session, name: str) -> None:
    """:class:`SignInThrottled` while ``name`` is in a cool-down."""
    row = s.get(SignInFailureRow, name)
    now = ctx.now()
    if row is not None and row.locked_until is not None and row.locked_until > now:
        minutes = max(1, math.ceil((row.locked_until - now).total_seconds() / 60))
        raise SignInThrottled(
            f"too many failed sign-ins for {shown(name)!r}: try again in {minutes} minute(s), at "
            f"{row.locked_until.strftime('%H:%M')} UTC (or ask an admin to check the account)"
        )


def _sign_in_failed(ctx: ServiceContext, name: str) -> None:
    """Count one failed sign-in of ``name``; the :data:`MAX_FAILED_SIGN_INS`-th starts a cool-down."""
    for attempt in range(2):  # a concurrent first failure may insert the row first: count again
        try:
            with ctx.store.session() as s:
                _count_failure(ctx, s, name)
            return
        except IntegrityError:
            if attempt:
                raise


def _count_failure(ctx: ServiceContext, s: Session, name: str) -> None:
    """Add one failure to ``name``'s count in ``s`` (a new window when the last one ran out)."""
    now = ctx.now()
    query = select(SignInFailureRow).where(SignInFailureRow.name == name)
    if ctx.store.dialect == "postgresql":
        query = query.with_for_update()
    row = s.scalars(query).first()
    if row is None:
        row = SignInFailureRow(name=name, failures=0, window_start=now, locked_until=None)
        s.add(row)
    elif row.window_start <= now - SIGN_IN_WINDOW or (row.locked_until and row.locked_until <= now):
        row.failures, row.window_start, row.locked_until = 0, now, None
    row.failures += 1
    if row.failures >= MAX_FAILED_SIGN_INS:
        row.locked_until = now + SIGN_IN_COOLDOWN
    s.flush()


@functools.cache
def _dummy_hash() -> str:
    """A hash to check unknown users against, so they take as long as known ones."""
    return hash_password("not a password: evens out the time an unknown user takes")

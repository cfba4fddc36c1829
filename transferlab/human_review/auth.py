"""Roles and password hashing (stdlib ``hashlib.scrypt``, random salt, constant-time check).

>>> stored = hash_password("correct horse")
>>> stored.startswith("scrypt$"), verify_password("correct horse", stored), verify_password("x", stored)
(True, True, False)
>>> role_allows("approver", "reviewer"), role_allows("viewer", "reviewer")
(True, False)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Literal, get_args

Role = Literal["viewer", "reviewer", "approver", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
"""Roles from least to most privileged; each role may do everything the roles before it may."""

#: The least role a worker must sign in as to launch approved suggestions into the market.
EXECUTOR_ROLE: Role = "approver"
#: The shortest password an account may get.
MIN_PASSWORD_LENGTH = 8

#: scrypt work factors: n=2**14, r=8, p=1 uses 16 MiB and about 50 ms, OWASP's minimum recommendation.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
_DKLEN = 32
_SALT_BYTES = 16


def role_rank(role: str) -> int:
    """Position of ``role`` in :data:`ROLES`; ``ValueError`` naming the valid roles when unknown."""
    try:
        return ROLES.index(role)
    except ValueError:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)}") from None


def role_allows(role: str, needed: str) -> bool:
    """Whether ``role`` is at least ``needed``."""
    return role_rank(role) >= role_rank(needed)


def password_problem(password: object) -> str | None:
    """Why ``password`` may not be an account's password (None when it may).

    >>> password_problem("short"), password_problem("long enough")
    ('the password has 5 characters; give at least 8', None)
    """
    if not isinstance(password, str) or not password:
        return f"the password is empty; give at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"the password has {len(password)} characters; give at least {MIN_PASSWORD_LENGTH}"
    return None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, *, n: int | None = None, r: int | None = None, p: int | None = None) -> str:
    """``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (base64): everything :func:`verify_password` needs.

    The work factors default to :data:`SCRYPT_N`, :data:`SCRYPT_R`, :data:`SCRYPT_P` (read at call time).
    """
    if not isinstance(password, str) or not password:
        raise ValueError("password must be a non-empty string")
    n, r, p = n or SCRYPT_N, r or SCRYPT_R, p or SCRYPT_P
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=_DKLEN)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (from :func:`hash_password`); compared in constant time.

    A malformed ``stored`` string is simply no match.
    """
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        actual = hashlib.scrypt(
            password.encode("utf-8"),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=2**26,
            dklen=len(expected),
        )
    except (ValueError, TypeError, AttributeError):
        return False
    return hmac.compare_digest(actual, expected)

"""Roles and password hashing: argon2id with OWASP's parameters (argon2-cffi), older scrypt records
verified and upgraded at the next sign-in.

>>> stored = hash_password("correct horse")
>>> stored.startswith("$argon2id$"), verify_password("correct horse", stored), verify_password("x", stored)
(True, True, False)
>>> needs_rehash(stored), needs_rehash("scrypt$16384$8$1$c2FsdA$ZGlnZXN0")
(False, True)
>>> role_allows("approver", "reviewer"), role_allows("viewer", "reviewer")
(True, False)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Literal, get_args

from argon2 import PasswordHasher, Type
from argon2.exceptions import Argon2Error

Role = Literal["viewer", "reviewer", "approver", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
"""Roles from least to most privileged; each role may do everything the roles before it may."""

#: The least role a worker must sign in as to launch approved suggestions into the market.
EXECUTOR_ROLE: Role = "approver"
#: The shortest password an account may get.
MIN_PASSWORD_LENGTH = 8

#: argon2id work factors, OWASP's Password Storage Cheat Sheet recommendation: 19 MiB of memory,
#: 2 iterations, 1 lane (about 35 ms here). Read at call time; a stored hash carries its own.
ARGON2_MEMORY_KIB = 19 * 1024
ARGON2_TIME_COST = 2
ARGON2_PARALLELISM = 1
#: The largest scrypt work factor a legacy record may name (2**17 needs 128 MiB: allowed).
MAX_SCRYPT_N = 2**20


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


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _hasher() -> PasswordHasher:
    return PasswordHasher(
        time_cost=ARGON2_TIME_COST,
        memory_cost=ARGON2_MEMORY_KIB,
        parallelism=ARGON2_PARALLELISM,
        type=Type.ID,
    )


def hash_password(password: str) -> str:
    """An argon2id record (PHC string: ``$argon2id$v=19$m=...,t=...,p=...$<salt>$<hash>``) with a
    random salt and the current work factors: everything :func:`verify_password` needs."""
    if not isinstance(password, str) or not password:
        raise ValueError("password must be a non-empty string")
    return _hasher().hash(password)


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored``: an argon2id record, or a legacy ``scrypt$n$r$p$salt$hash``
    one (compared in constant time). A malformed ``stored`` string is simply no match."""
    if not isinstance(password, str) or not isinstance(stored, str):
        return False
    if stored.startswith("$argon2"):
        try:
            return bool(_hasher().verify(stored, password))
        except Argon2Error:
            return False
    return _verify_scrypt(password, stored)


def _verify_scrypt(password: str, stored: str) -> bool:
    """A legacy scrypt record, with the memory its own work factors need (up to :data:`MAX_SCRYPT_N`)."""
    try:
        scheme, n_text, r_text, p_text, salt, digest = stored.split("$")
        n, r, p = int(n_text), int(r_text), int(p_text)
        if scheme != "scrypt" or not 1 < n <= MAX_SCRYPT_N or not 0 < r <= 32 or not 0 < p <= 16:
            return False
        expected = _unb64(digest)
        actual = hashlib.scrypt(
            password.encode("utf-8"),
            salt=_unb64(salt),
            n=n,
            r=r,
            p=p,
            maxmem=129 * r * n * p + 2**20,  # scrypt needs 128 r n bytes (and 128 r p); room for both
            dklen=len(expected),
        )
    except (ValueError, TypeError, AttributeError, MemoryError):
        return False
    return hmac.compare_digest(actual, expected)


def needs_rehash(stored: str) -> bool:
    """Whether ``stored`` should be replaced at the next sign-in: a legacy scheme, or argon2id with
    other work factors than the current ones."""
    if not isinstance(stored, str) or not stored.startswith("$argon2id$"):
        return True
    try:
        return bool(_hasher().check_needs_rehash(stored))
    except (Argon2Error, ValueError):
        return True

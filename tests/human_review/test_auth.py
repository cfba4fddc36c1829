"""Password hashing and roles."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from transferlab.human_review import auth
from transferlab.human_review.auth import (
    ROLES,
    hash_password,
    needs_rehash,
    role_allows,
    role_rank,
    verify_password,
)
from transferlab.human_review.service_common import AuthError


def _scrypt_record(password: str, n: int, r: int = 8, p: int = 1) -> str:
    """A record as the previous release wrote it (scrypt$n$r$p$salt$hash, urlsafe base64)."""
    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=2**28, dklen=32)
    b64 = lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("=")  # noqa: E731
    return f"scrypt${n}${r}${p}${b64(salt)}${b64(digest)}"


def test_hash_is_argon2id_with_owasps_parameters_and_a_random_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 19 * 1024)  # the real work factors (conftest lowers them)
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 2)
    a, b = hash_password("s3cret"), hash_password("s3cret")
    assert a.startswith("$argon2id$v=19$m=19456,t=2,p=1$") and a != b
    assert verify_password("s3cret", a) and verify_password("s3cret", b)
    assert not needs_rehash(a)
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 3)  # stronger factors later: the old record is outdated
    assert needs_rehash(a) and verify_password("s3cret", a)


@pytest.mark.parametrize("n", [2**14, 2**17])
def test_legacy_scrypt_records_verify_at_any_stored_work_factor(n: int) -> None:
    stored = _scrypt_record("s3cret", n)
    assert verify_password("s3cret", stored) and not verify_password("s3cret!", stored)
    assert needs_rehash(stored)


def test_verify_rejects_wrong_passwords_and_malformed_hashes() -> None:
    stored = hash_password("s3cret")
    assert not verify_password("s3cret ", stored)
    assert not verify_password("", stored)
    bad = ["", "s3cret", "bcrypt$1$2$3$aa$bb", "scrypt$x$8$1$aa$bb", "scrypt$1048577$8$1$aa$bb"]
    for record in [*bad, stored.rsplit("$", 1)[0], "$argon2id$v=19$m=64,t=1,p=1$broken"]:
        assert not verify_password("s3cret", record)


def test_a_legacy_record_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        used.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert verify_password("pw", _scrypt_record("pw", 2**8))
    assert len(used) == 1


def test_empty_password_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        hash_password("")


def test_roles_are_ordered() -> None:
    assert ROLES == ("viewer", "reviewer", "approver", "admin")
    assert [role_rank(r) for r in ROLES] == [0, 1, 2, 3]
    assert role_allows("admin", "approver") and role_allows("reviewer", "reviewer")
    assert not role_allows("reviewer", "approver")
    with pytest.raises(ValueError, match="unknown role 'boss'; use one of viewer, reviewer"):
        role_rank("boss")


def test_auth_doctests_hold() -> None:
    import doctest

    from transferlab.human_review import auth as module

    assert doctest.testmod(module).failed == 0


def test_a_legacy_record_is_upgraded_at_the_next_sign_in(team: Any) -> None:
    from sqlalchemy import select, update

    from transferlab.human_review.store import UserRow

    store = team.svc._ctx.store
    legacy = _scrypt_record("pass-word-rita", 2**14)
    with store.session() as s:
        s.execute(update(UserRow).where(UserRow.name == "rita").values(password_hash=legacy))

    def stored() -> str:
        with store.session() as s:
            return str(s.scalar(select(UserRow.password_hash).where(UserRow.name == "rita")))

    with pytest.raises(AuthError):
        team.svc.authenticate("rita", "wrong password")
    assert stored() == legacy  # a failed sign-in changes nothing
    assert team.svc.authenticate("rita", "pass-word-rita").name == "rita"
    upgraded = stored()
    assert upgraded.startswith("$argon2id$") and verify_password("pass-word-rita", upgraded)
    assert team.svc.authenticate("rita", "pass-word-rita").name == "rita" and stored() == upgraded

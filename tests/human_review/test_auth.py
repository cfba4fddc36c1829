"""Password hashing and roles."""

from __future__ import annotations

import pytest

from transferlab.human_review import auth
from transferlab.human_review.auth import ROLES, hash_password, role_allows, role_rank, verify_password


def test_hash_records_scheme_params_and_a_random_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "SCRYPT_N", 2**14)  # the real work factor (conftest lowers it for speed)
    a, b = hash_password("s3cret"), hash_password("s3cret")
    scheme, n, r, p, salt, _digest = a.split("$")
    assert (scheme, n, r, p) == ("scrypt", "16384", "8", "1")
    assert a != b and salt != b.split("$")[4]
    assert verify_password("s3cret", a) and verify_password("s3cret", b)


def test_verify_rejects_wrong_passwords_and_malformed_hashes() -> None:
    stored = hash_password("s3cret")
    assert not verify_password("s3cret ", stored)
    assert not verify_password("", stored)
    for bad in ["", "s3cret", "bcrypt$1$2$3$aa$bb", "scrypt$x$8$1$aa$bb", stored.rsplit("$", 1)[0]]:
        assert not verify_password("s3cret", bad)


def test_verify_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        used.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert verify_password("pw", hash_password("pw"))
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

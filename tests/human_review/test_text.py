"""Free text in the audit trail is shown on one line with controls escaped; worker ids are restricted."""

from __future__ import annotations

import doctest
import re

import pytest

from transferlab.human_review import text
from transferlab.human_review.text import check_worker_id, shown, worker_id_from


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("looks safe", "looks safe"),
        (
            "ok\n2025-03-01T09:00:00+00:00  ada: pending -> approved",
            "ok\\n2025-03-01T09:00:00+00:00  ada: pending -> approved",
        ),
        ("a\r\nb\tc", "a\\r\\nb\\tc"),
        ("\x1b[2K\x1b[1Gforged", "\\x1b[2K\\x1b[1Gforged"),
        ("\x9b31m", "\\x9b31m"),  # the 8-bit CSI
        ("abc\u202edcba", "abc\\u202edcba"),  # a right-to-left override
        ("one\u2028two\u2029", "one\\u2028two\\u2029"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("C:\\runs\\n", "C:\\\\runs\\\\n"),  # a typed backslash-n stays distinguishable from a newline
        ("déjà vu 数据", "déjà vu 数据"),
        (None, ""),
    ],
)
def test_shown_escapes_what_could_forge_a_line(raw: str | None, expected: str) -> None:
    out = shown(raw)
    assert out == expected
    assert all(c.isprintable() for c in out)


def test_worker_ids() -> None:
    for good in ("w1", "ada@host.example-1", "A_b.c@d-e", "x" * 64):
        assert check_worker_id(good) == good
    for bad in ("", "x" * 65, "w 1", "w1\nada", "w:1", "w\x1b", "wörker", 7):
        with pytest.raises(ValueError, match=re.escape("use 1 to 64 letters, digits or _ . @ -")):
            check_worker_id(bad)
    assert check_worker_id(worker_id_from("ada lovelace", "host:1", "\n42")) == "ada_lovelace.host_1._42"
    assert len(worker_id_from("x" * 100)) == 64


def test_doctests() -> None:
    assert doctest.testmod(text).failed == 0

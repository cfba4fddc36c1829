"""Free text as the audit trail shows it, and the names that may appear in it unescaped.

Reasons, comments, error messages and actor names are stored as given; every display of the audit
trail (the CLI's ``review show``, the app's pages, the CSV export) passes them through
:func:`shown`, so a newline, a carriage return, an ANSI escape or a bidi override cannot forge a line
or recolour the terminal. Worker ids are restricted instead (:func:`check_worker_id`).

    >>> shown("ok\\n2025-03-01  ada: pending -> approved")
    'ok\\\\n2025-03-01  ada: pending -> approved'
    >>> shown("\\x1b[31mred\\x1b[0m"), shown("C:\\\\runs")
    ('\\\\x1b[31mred\\\\x1b[0m', 'C:\\\\\\\\runs')
    >>> check_worker_id("w1@host.42")
    'w1@host.42'
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["WORKER_ID", "check_worker_id", "shown", "worker_id_from"]

#: What a worker id may be: it is written into claims and audit rows as ``worker:<id>``.
WORKER_ID = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if char.isprintable() and unicodedata.category(char) not in ("Cf", "Zl", "Zp"):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str | None) -> str:
    """``text`` on one line with every control, format and line-separator character escaped
    (``\\n``, ``\\x1b``, ``\\u202e``, ...) and backslashes doubled, so the result is unambiguous."""
    if not text:
        return ""
    return "".join(_escape(c) for c in str(text))


def check_worker_id(worker: object) -> str:
    """``worker`` when it is 1-64 of ``A-Z a-z 0-9 _ . @ -``; ``ValueError`` naming the rule otherwise."""
    if isinstance(worker, str) and WORKER_ID.fullmatch(worker):
        return worker
    got = shown(str(worker))[:80]
    raise ValueError(
        f"worker id '{got}' is not allowed: use 1 to 64 letters, digits or _ . @ - (e.g. w1@host)"
    )


def worker_id_from(*parts: str) -> str:
    """A valid worker id made of ``parts`` joined by ``.``, other characters replaced by ``_``.

    >>> worker_id_from("ada lovelace", "host:1", "42")
    'ada_lovelace.host_1.42'
    """
    text = re.sub(r"[^A-Za-z0-9_.@-]", "_", ".".join(parts))[:64]
    return text or "worker"

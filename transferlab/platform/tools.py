"""JSON tool calls, the action format both domains' tool environments share.

The format is the one the project's founding design note uses for its coding agent, e.g.
``{"action": "read_file", "path": "tests/test_calculator.py"}``.

An agent acts with one JSON object, ``{"action": "<tool>", "<arg>": "<string>", ...}``. Each
environment declares its tools as ``{name: (required args, optional args)}``; :func:`parse_tool_call`
validates a call against them, and a bad call is a :class:`ToolError` whose message tells the agent what
to do instead (the environments show it as an observation, never crash).

>>> spec = {"read_file": (("path",), ()), "run_tests": ((), ("target",))}
>>> parse_tool_call('{"action": "read_file", "path": "a.py"}', spec)
ToolCall(action='read_file', args={'path': 'a.py'})
>>> try:
...     parse_tool_call('{"action": "read_file"}', spec)
... except ToolError as e:
...     print(e)
read_file needs 'path'
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CHARSET = frozenset(string.printable)
"""The characters of text observations (gymnasium ``Text`` spaces of the tool environments)."""
MAX_TEXT = 32_768
"""The longest text observation."""


def to_charset(text: str, limit: int = MAX_TEXT) -> str:
    """Observation text within the declared space: printable ASCII, truncated with a marker."""
    clean = "".join(ch if ch in CHARSET else "?" for ch in text)
    if len(clean) > limit:
        marker = "\n...[truncated]"
        clean = clean[: limit - len(marker)] + marker
    return clean


ToolSpec = Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
"""Each tool's (required, optional) argument names."""


class ToolError(ValueError):
    """A tool call the environment refuses; the message tells the agent what to do instead."""


@dataclass(frozen=True)
class ToolCall:
    """A parsed, validated tool call."""

    action: str
    args: dict[str, Any]

    def key(self) -> str:
        """Canonical form, for spotting the same call twice."""
        return json.dumps({"action": self.action, **self.args}, sort_keys=True, ensure_ascii=False)


def parse_tool_call(text: str, tools: ToolSpec, example: str = '{"action": "<tool>", ...}') -> ToolCall:
    """Parse one JSON tool call against ``tools``; raise :class:`ToolError` naming what is wrong.

    Every argument must be a string; ``example`` is shown when the text is not a JSON object.
    """
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        raise ToolError(f"the action must be one JSON object, e.g. {example}") from None
    if not isinstance(data, dict):
        raise ToolError('the action must be a JSON object with an "action" key')
    name = data.get("action")
    if not isinstance(name, str) or name not in tools:
        raise ToolError(f"unknown action {name!r}; available: {', '.join(tools)}")
    required, optional = tools[name]
    missing = [a for a in required if a not in data]
    if missing:
        raise ToolError(f"{name} needs {', '.join(repr(m) for m in missing)}")
    extra = sorted(set(data) - {"action", *required, *optional})
    if extra:
        raise ToolError(f"{name} does not take {', '.join(repr(e) for e in extra)}")
    args = {k: data[k] for k in (*required, *optional) if k in data}
    for key, value in args.items():
        if not isinstance(value, str):
            raise ToolError(f"{name}: {key!r} must be a string")
    return ToolCall(name, args)


__all__ = ["CHARSET", "MAX_TEXT", "ToolCall", "ToolError", "ToolSpec", "parse_tool_call", "to_charset"]

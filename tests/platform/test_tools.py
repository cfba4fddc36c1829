"""The shared JSON tool-call parser: every refusal names what is wrong."""

from __future__ import annotations

import doctest

import pytest

import transferlab.platform.tools as tools_module
from transferlab.platform.tools import ToolCall, ToolError, parse_tool_call

SPEC = {"read_file": (("path",), ()), "run_tests": ((), ("target",))}


def test_valid_calls() -> None:
    assert parse_tool_call('{"action": "run_tests"}', SPEC) == ToolCall("run_tests", {})
    call = parse_tool_call('{"action": "run_tests", "target": "tests/x.py"}', SPEC)
    assert call.args == {"target": "tests/x.py"}
    assert call.key() == parse_tool_call('{"target": "tests/x.py", "action": "run_tests"}', SPEC).key()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "one JSON object, e.g. EX"),
        ("[1, 2]", 'a JSON object with an "action" key'),
        ('{"action": "rm"}', "unknown action 'rm'; available: read_file, run_tests"),
        ('{"action": 3}', "unknown action 3"),
        ('{"action": "read_file"}', "read_file needs 'path'"),
        ('{"action": "read_file", "path": "a", "mode": "w"}', "read_file does not take 'mode'"),
        ('{"action": "read_file", "path": 7}', "read_file: 'path' must be a string"),
    ],
)
def test_refusals(text: str, message: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_tool_call(text, SPEC, "EX")
    assert message in str(info.value)


def test_doctests() -> None:
    assert doctest.testmod(tools_module).failed == 0

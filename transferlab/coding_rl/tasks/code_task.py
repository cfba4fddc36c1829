"""The code task format: a description, a signature and input/expected test cases.

A task file is one JSON object, the founding design note's task format with optional fields added::

    {
      "task_description": "Implement quick sort",
      "function_signature": "def quick_sort(arr: List[int]) -> List[int]:",
      "test_cases": [{"input": [3, 1, 4, 1, 5], "expected": [1, 1, 3, 4, 5]},
                     {"args": [[1, 2], 2], "expected": 1}],
      "hidden_test_cases": [...],        # optional, never shown to the policy
      "entry_point": "quick_sort",       # optional, else taken from the signature
      "time_limit_s": 2.0,               # optional, wall time for all tests together
      "float_tolerance": 1e-6,           # optional, for float comparisons
      "efficiency_budget_s": 1.0         # optional, the run time that earns the efficiency bonus
    }

``input`` is the single argument; ``args`` is the list of positional arguments. Values are plain JSON;
a tuple is written ``{"__tuple__": [...]}``, a dict with non-string keys ``{"__dict__": [[k, v], ...]}``
and inf/nan ``{"__float__": "inf"}``, so types survive a round trip. A case may name another
function of the module with ``call``, and may require an exception with ``raises`` (its class name)
instead of ``expected``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_SIGNATURE_NAME = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.MULTILINE)


class TaskError(ValueError):
    """A task file or task object is malformed; the message names the problem and the fix."""


_TUPLE, _DICT, _FLOAT = "__tuple__", "__dict__", "__float__"
_TAGS = (_TUPLE, _DICT, _FLOAT)


def to_json_value(value: Any) -> Any:
    """Plain Python data as JSON that keeps its types: tuples, non-str dict keys, inf/nan are tagged.

    >>> to_json_value((1, [2.0, {"a": (3,)}]))
    {'__tuple__': [1, [2.0, {'a': {'__tuple__': [3]}}]]}
    """
    if isinstance(value, tuple):
        return {_TUPLE: [to_json_value(v) for v in value]}
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        plain = all(isinstance(k, str) for k in value) and not (
            len(value) == 1 and next(iter(value)) in _TAGS
        )
        if plain:
            return {k: to_json_value(v) for k, v in value.items()}
        return {_DICT: [[to_json_value(k), to_json_value(v)] for k, v in value.items()]}
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT: repr(value)}
    return value


def from_json_value(data: Any) -> Any:
    """Inverse of to_json_value; untagged JSON passes through unchanged."""
    if isinstance(data, list):
        return [from_json_value(v) for v in data]
    if isinstance(data, dict):
        if len(data) == 1:
            ((tag, inner),) = data.items()
            if tag == _TUPLE and isinstance(inner, list):
                return tuple(from_json_value(v) for v in inner)
            if tag == _DICT and isinstance(inner, list):
                return {_hashable(from_json_value(k)): from_json_value(v) for k, v in inner}
            if tag == _FLOAT and inner in ("nan", "inf", "-inf"):
                return float(inner)
        return {k: from_json_value(v) for k, v in data.items()}
    return data


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict):
        raise ValueError("a dict key cannot be a list or a dict")
    return key


class TestCase(BaseModel):
    """One test: the call's arguments and the value the function must return."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    input: Any = Field(default=None, description="The single argument (use `args` for several).")
    args: list[Any] | None = Field(default=None, description="Positional arguments of the call.")
    expected: Any = Field(default=None, description="The exact value the function must return.")
    call: str | None = Field(
        default=None, description="Function to call; defaults to the task's entry point."
    )
    raises: str | None = Field(
        default=None, description="Name of the exception the call must raise (then `expected` is unused)."
    )
    has_input: bool = Field(default=False, exclude=True, description="Internal: `input` was given.")

    @model_validator(mode="before")
    @classmethod
    def _one_of_input_or_args(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError('a test case must be an object like {"input": X, "expected": Y}')
        if "expected" not in data and "raises" not in data:
            raise ValueError(
                'a test case needs "expected", the value the function must return '
                '(or "raises", the name of the exception it must raise)'
            )
        for key in ("call", "raises"):
            if key in data and not (isinstance(data[key], str) and data[key].isidentifier()):
                raise ValueError(f'"{key}" must be a Python identifier, got {data[key]!r}')
        has_input, has_args = "input" in data, "args" in data
        if has_input == has_args:
            raise ValueError('a test case needs exactly one of "input" (single argument) or "args" (a list)')
        decoded = {
            k: from_json_value(v) if k in ("input", "args", "expected") else v for k, v in data.items()
        }
        return {**decoded, "has_input": has_input}

    def to_json_dict(self) -> dict[str, Any]:
        """The case in the task file format (`input` kept even when it is null)."""
        key = "input" if self.has_input else "args"
        value = self.input if self.has_input else list(self.args or [])
        data: dict[str, Any] = {key: to_json_value(value)}
        if self.raises is None:
            data["expected"] = to_json_value(self.expected)
        else:
            data["raises"] = self.raises
        if self.call is not None:
            data["call"] = self.call
        return json.loads(json.dumps(data))

    def call_args(self) -> list[Any]:
        """The positional arguments the candidate is called with."""
        return [self.input] if self.has_input else list(self.args or [])


class CodeTask(BaseModel):
    """A function-writing task graded by running its test cases in the sandbox."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(default="", description="A stable id; defaults to the entry point.")
    task_description: str = Field(min_length=1, description="What the function must do.")
    function_signature: str = Field(
        min_length=1, description="`def name(args) -> type:` shown to the policy."
    )
    test_cases: list[TestCase] = Field(min_length=1, description="Developer tests, shown to the policy.")
    hidden_test_cases: list[TestCase] = Field(default_factory=list, description="Tests never shown.")
    entry_point: str = Field(default="", description="Function to call; defaults to the signature's name.")
    time_limit_s: float = Field(default=2.0, gt=0, le=300, description="Wall-time limit for all tests.")
    float_tolerance: float = Field(default=1e-6, ge=0, description="Relative and absolute float tolerance.")
    efficiency_budget_s: float = Field(
        default=1.0, gt=0, description="Runtime at or under which a run earns the efficiency bonus."
    )
    prompt: str = Field(default="", description="Optional full prompt (e.g. HumanEval's), else built.")
    provenance: dict[str, Any] = Field(default_factory=dict, description="Where the task came from.")

    @model_validator(mode="after")
    def _fill_entry_point(self) -> CodeTask:
        if not self.entry_point:
            match = _SIGNATURE_NAME.search(self.function_signature)
            if match is None:
                raise ValueError(
                    f"cannot find a function name in function_signature {self.function_signature!r}; "
                    'write it as "def name(arg): ..." or set "entry_point"'
                )
            self.entry_point = match.group(1)
        if not self.entry_point.isidentifier():
            raise ValueError(f"entry_point {self.entry_point!r} is not a Python identifier")
        if not self.task_id:
            self.task_id = self.entry_point
        return self

    @property
    def all_tests(self) -> list[tuple[TestCase, bool]]:
        """Developer tests then hidden tests, each with its `hidden` flag."""
        return [(t, False) for t in self.test_cases] + [(t, True) for t in self.hidden_test_cases]

    def to_json_dict(self) -> dict[str, Any]:
        """The task as the JSON task format (tuples become lists)."""
        data = json.loads(
            self.model_dump_json(exclude_defaults=True, exclude={"test_cases", "hidden_test_cases"})
        )
        data["test_cases"] = [t.to_json_dict() for t in self.test_cases]
        if self.hidden_test_cases:
            data["hidden_test_cases"] = [t.to_json_dict() for t in self.hidden_test_cases]
        return data


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid task {source}:"]
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        msg = item["msg"].removeprefix("Value error, ")
        lines.append(f"  - {where}: {msg}")
    lines.append(
        "  fix: see the task format in docs/guide/sandbox.md (Task format) or "
        "transferlab/coding_rl/tasks/code_task.py"
    )
    return "\n".join(lines)


def task_from_dict(data: Any, source: str = "<dict>") -> CodeTask:
    """Validate a parsed task; raises TaskError naming every problem."""
    if not isinstance(data, dict):
        raise TaskError(
            f"invalid task {source}: the top level must be a JSON object, got {type(data).__name__}"
        )
    try:
        return CodeTask.model_validate(data)
    except ValidationError as err:
        raise TaskError(_format_validation_error(err, source)) from None


def load_task(path: str | Path) -> CodeTask:
    """Load and validate a task JSON file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise TaskError(f"cannot read task file {p}: {err.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise TaskError(f"task file {p} is not UTF-8 (byte {err.start}); save it as UTF-8") from None
    except json.JSONDecodeError as err:
        raise TaskError(
            f"task file {p} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None
    return task_from_dict(data, str(p))

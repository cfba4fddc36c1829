"""The JSON code-task format: validation, defaults and the error messages a task author sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from transferlab.coding_rl.tasks.code_task import CodeTask, TaskError, TestCase, load_task, task_from_dict

PYDANTIC_NOISE = ("For further information visit", "errors.pydantic.dev", "validation error for", "Traceback")


def _task(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "task_description": "Implement quick sort",
        "function_signature": "def quick_sort(arr: List[int]) -> List[int]:",
        "test_cases": [{"input": [3, 1, 2], "expected": [1, 2, 3]}],
    }
    data.update(overrides)
    return data


def _error(data: Any, source: str = "task.json") -> str:
    with pytest.raises(TaskError) as info:
        task_from_dict(data, source)
    message = str(info.value)
    for noise in PYDANTIC_NOISE:
        assert noise not in message
    return message


def _write(tmp_path: Path, content: str | bytes, name: str = "task.json") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- entry point and ids


@pytest.mark.parametrize(
    ("signature", "entry_point"),
    [
        ("def quick_sort(arr: List[int]) -> List[int]:", "quick_sort"),
        ("async def fetch(url):", "fetch"),
        ("  def _private_2(x):", "_private_2"),
        ("def add(\n    a: int,\n    b: int,\n) -> int:", "add"),
        ("from typing import List\n\ndef helper_free(xs: List[int]) -> int:", "helper_free"),
    ],
)
def test_entry_point_from_signature(signature: str, entry_point: str) -> None:
    task = task_from_dict(_task(function_signature=signature))
    assert task.entry_point == entry_point
    assert task.task_id == entry_point  # task_id defaults to the entry point


def test_explicit_entry_point_and_task_id_win() -> None:
    task = task_from_dict(_task(entry_point="sort_it", task_id="seed/quick-sort"))
    assert (task.entry_point, task.task_id) == ("sort_it", "seed/quick-sort")
    assert task_from_dict(_task(task_id="x")).entry_point == "quick_sort"


def test_signature_without_a_function_name_names_the_fix() -> None:
    message = _error(_task(function_signature="quick_sort(arr)"))
    assert "function_signature" in message
    assert "def name(arg)" in message and "entry_point" in message


def test_entry_point_must_be_an_identifier() -> None:
    assert "not a Python identifier" in _error(_task(entry_point="1sort"))


def test_defaults() -> None:
    task = task_from_dict(_task())
    assert task.hidden_test_cases == []
    assert task.time_limit_s == 2.0
    assert task.float_tolerance == 1e-6
    assert task.efficiency_budget_s == 1.0
    assert (task.prompt, task.provenance) == ("", {})


# --------------------------------------------------------------------------- test cases


def test_call_args() -> None:
    assert TestCase.model_validate({"input": [1, 2], "expected": 3}).call_args() == [[1, 2]]
    assert TestCase.model_validate({"args": [[1, 2], 3], "expected": 3}).call_args() == [[1, 2], 3]
    assert TestCase.model_validate({"args": [], "expected": 0}).call_args() == []
    assert TestCase.model_validate({"input": None, "expected": 0}).call_args() == [None]
    case = TestCase.model_validate({"args": [1, (2, 3)], "expected": (4, 5)})
    assert case.call_args() == [1, (2, 3)] and isinstance(case.expected, tuple)
    assert case.call_args() is not case.call_args()  # a fresh list each call


def test_expected_may_be_falsy_or_none() -> None:
    expecteds: list[Any] = [None, 0, False, "", []]
    for expected in expecteds:
        assert TestCase.model_validate({"input": 1, "expected": expected}).expected == expected


@pytest.mark.parametrize(
    "case",
    [
        {"input": 1, "args": [1], "expected": 2},
        {"expected": 2},
    ],
)
def test_exactly_one_of_input_or_args(case: dict[str, Any]) -> None:
    message = _error(_task(test_cases=[case]))
    assert "test_cases.0" in message
    assert 'exactly one of "input" (single argument) or "args" (a list)' in message
    assert "fix:" in message


def test_missing_expected() -> None:
    message = _error(_task(test_cases=[{"input": 1, "expected": 1}, {"input": 1}]))
    assert "test_cases.1" in message and '"expected"' in message
    assert "test_cases.0" not in message


def test_test_case_not_an_object() -> None:
    message = _error(_task(test_cases=[[1, 2]]))
    assert "test_cases.0" in message and '{"input": X, "expected": Y}' in message


def test_no_test_cases() -> None:
    assert "test_cases" in _error(_task(test_cases=[]))


def test_unknown_field_is_named() -> None:
    message = _error(_task(tests=[]))
    assert "tests" in message and "not permitted" in message


def test_hidden_test_cases_are_validated_too() -> None:
    assert "hidden_test_cases.0" in _error(_task(hidden_test_cases=[{"input": 1}]))


def test_all_tests_order_and_hidden_flags() -> None:
    task = task_from_dict(
        _task(
            test_cases=[{"input": 1, "expected": 1}, {"input": 2, "expected": 2}],
            hidden_test_cases=[{"args": [3], "expected": 3}],
        )
    )
    assert [(case.call_args(), hidden) for case, hidden in task.all_tests] == [
        ([1], False),
        ([2], False),
        ([3], True),
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("time_limit_s", 0), ("time_limit_s", 301), ("float_tolerance", -1)]
)
def test_numeric_bounds(field: str, value: float) -> None:
    assert field in _error(_task(**{field: value}))


# --------------------------------------------------------------------------- top level and missing fields


@pytest.mark.parametrize("data", [[1, 2], "task", 3, None])
def test_top_level_not_an_object(data: Any) -> None:
    message = _error(data)
    assert "top level must be a JSON object" in message
    assert type(data).__name__ in message


def test_missing_fields_are_all_named_with_a_fix() -> None:
    message = _error({}, "empty.json")
    assert message.startswith("invalid task empty.json:")
    for field in ("task_description", "function_signature", "test_cases"):
        assert f"{field}: Field required" in message
    assert "fix: see the task format" in message


def test_empty_description() -> None:
    assert "task_description" in _error(_task(task_description=""))


# --------------------------------------------------------------------------- files


def test_load_task_file(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(_task(float_tolerance=1e-3)))
    task = load_task(path)
    assert isinstance(task, CodeTask)
    assert task.entry_point == "quick_sort" and task.float_tolerance == 1e-3
    assert load_task(str(path)).task_id == "quick_sort"


def test_bad_json_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"task_description": "x",\n  "function_signature": }')
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "not valid JSON" in message and "line 2" in message and str(path) in message


def test_non_utf8_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"task_description": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(TaskError, match=r"not UTF-8 \(byte \d+\); save it as UTF-8"):
        load_task(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="cannot read task file"):
        load_task(tmp_path / "nope.json")


def test_file_top_level_not_an_object(tmp_path: Path) -> None:
    path = _write(tmp_path, "[1, 2, 3]")
    with pytest.raises(TaskError, match="top level must be a JSON object, got list"):
        load_task(path)


def test_file_with_missing_fields_names_them(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"task_description": "x"}))
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path) in message
    assert "function_signature: Field required" in message and "test_cases: Field required" in message
    assert "task_description" not in message.split("\n", 1)[1]
    assert "For further information visit" not in message


def test_task_error_is_a_value_error() -> None:
    assert issubclass(TaskError, ValueError)


# --------------------------------------------------------------------------- JSON round trip


def test_to_json_dict_round_trips_and_keeps_tuples(tmp_path: Path) -> None:
    task = task_from_dict(
        _task(
            test_cases=[{"args": [(1, 2), 3], "expected": (4, 5)}],
            hidden_test_cases=[{"input": "a", "expected": "a"}],
        )
    )
    data = task.to_json_dict()
    assert data["test_cases"] == [{"args": [{"__tuple__": [1, 2]}, 3], "expected": {"__tuple__": [4, 5]}}]
    assert "has_input" not in json.dumps(data)
    again = load_task(_write(tmp_path, json.dumps(data)))
    assert again.task_id == task.task_id
    assert [(c.call_args(), h) for c, h in again.all_tests] == [([(1, 2), 3], False), (["a"], True)]
    assert type(again.test_cases[0].expected) is tuple


def test_to_json_dict_keeps_input_none() -> None:
    task = task_from_dict(_task(test_cases=[{"input": None, "expected": 0}]))
    assert task_from_dict(task.to_json_dict()).test_cases[0].call_args() == [None]

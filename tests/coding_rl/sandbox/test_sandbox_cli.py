"""`transferlab sandbox ...` through the real CLI and real backends (forkserver needs root, as here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from transferlab.cli import app
from transferlab.coding_rl.sandbox.cli import DEFAULT_DOCKER_IMAGE, Backend
from transferlab.coding_rl.sandbox.config import BACKENDS, SandboxConfig
from transferlab.coding_rl.tasks.seed_tasks import SEED_DIR

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the forkserver backend needs root"
)

QUICK_SORT = SEED_DIR / "quick_sort.json"
BUGGY = SEED_DIR / "quick_sort_buggy.py"
FIXED = SEED_DIR / "quick_sort_fixed.py"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/transferlab-test-docker.sock"}

runner = CliRunner()


def grade(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, ["sandbox", "grade", *map(str, args)], env=env)


def one_json_object(result: Result) -> dict[str, Any]:
    """stdout must be exactly one JSON object."""
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def assert_bad_input(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    for needle in needles:
        assert needle in result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_backend_choices_match_the_config() -> None:
    assert tuple(b.value for b in Backend) == BACKENDS
    assert SandboxConfig().docker_image == DEFAULT_DOCKER_IMAGE


# --------------------------------------------------------------------------- grade: verdicts


@needs_root
def test_grade_json_buggy_quick_sort() -> None:
    result = grade(QUICK_SORT, BUGGY, "--json")
    assert result.exit_code == 0, result.output
    data = one_json_object(result)
    assert {"status", "passed", "total", "pass_rate", "executed", "reward", "runtime_s", "tests"} <= set(data)
    assert data["status"] == "failed"
    assert (data["passed"], data["total"]) == (3, 5)
    assert data["pass_rate"] == pytest.approx(0.6)
    assert data["executed"] is True
    assert data["reward"] == 8.0
    assert data["reward_components"] == {"executes": 1.0, "pass_rate": 6.0, "efficient": 1.0}
    assert data["backend"] == "forkserver"
    assert [t["status"] for t in data["tests"]] == ["failed", "passed", "passed", "failed", "passed"]


@needs_root
def test_grade_json_fixed_quick_sort() -> None:
    result = grade(QUICK_SORT, FIXED, "--json")
    assert result.exit_code == 0, result.output
    data = one_json_object(result)
    assert data["status"] == "passed"
    assert (data["passed"], data["total"]) == (5, 5)
    assert data["reward"] == 12.0


def test_grade_with_the_subprocess_backend() -> None:
    buggy = grade(QUICK_SORT, BUGGY, "--json", "--backend", "subprocess")
    fixed = grade(QUICK_SORT, FIXED, "--json", "--backend", "subprocess")
    assert (buggy.exit_code, fixed.exit_code) == (0, 0), buggy.output + fixed.output
    b, f = one_json_object(buggy), one_json_object(fixed)
    assert (b["status"], b["passed"], b["total"], b["reward"]) == ("failed", 3, 5, 8.0)
    assert (f["status"], f["passed"], f["total"], f["reward"]) == ("passed", 5, 5, 12.0)
    assert b["backend"] == f["backend"] == "subprocess"


NASTY = (
    "import sys\n\n"
    "def quick_sort(xs):\n"
    "    sys.stdout.buffer.write(b'\\xed\\xa0\\x80\\x1b[2J\\x00\\x07' * 300 + b'\\n')\n"
    "    sys.stdout.flush()\n"
    "    raise ValueError('lone \\udcff surrogate, escape \\x1b[31m, bell \\x07, \\ud800')\n"
)


@pytest.mark.parametrize("backend", ["subprocess", pytest.param("forkserver", marks=needs_root)])
def test_grade_json_is_valid_whatever_text_the_candidate_makes(backend: str, tmp_path: Path) -> None:
    solution = tmp_path / "nasty.py"
    solution.write_text(NASTY, encoding="utf-8")
    result = grade(QUICK_SORT, solution, "--json", "--backend", backend)
    assert result.exit_code == 0, result.output
    data = one_json_object(result)
    assert (data["status"], data["passed"]) == ("failed", 0)
    assert result.stdout.isascii()
    text = data["message"] + data["output"] + "".join(t["message"] for t in data["tests"])
    text.encode("utf-8")  # no lone surrogate survives
    assert "\x1b" not in text and "\x07" not in text and "ValueError: lone" in text


@needs_root
def test_grade_table_output() -> None:
    result = grade(QUICK_SORT, BUGGY)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        "failed",
        "3/5",
        "60.0%",
        "8.0",
        "executes 1.0 + pass_rate 6.0 + efficient 1.0",
        "expected [1, 1, 3, 4, 5], got [1, 3, 4, 5]",
    ):
        assert text in out


@needs_root
def test_grade_table_shows_only_pass_fail_for_hidden_tests(tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(
        json.dumps(
            {
                "task_description": "return the number 7",
                "function_signature": "def seven(x):",
                "test_cases": [{"input": 1, "expected": 7}, {"input": 2, "expected": 7}],
                "hidden_test_cases": [{"input": 3, "expected": 424242}],
            }
        ),
        encoding="utf-8",
    )
    solution = tmp_path / "solution.py"
    solution.write_text("def seven(x):\n    return 7 if x == 1 else 31337\n", encoding="utf-8")
    result = grade(task, solution)
    assert result.exit_code == 0, result.output
    assert "expected 7, got 31337" in result.stdout  # a developer test's message is shown
    assert "hidden" in result.stdout
    assert "424242" not in result.stdout  # a hidden test shows only pass/fail
    data = one_json_object(grade(task, solution, "--json"))
    assert (data["status"], data["passed"], data["total"]) == ("failed", 1, 3)
    assert data["tests"][2] == {"index": 2, "hidden": True, "status": "failed", "message": ""}


# --------------------------------------------------------------------------- grade: bad input


def test_grade_bad_json_task(tmp_path: Path) -> None:
    task = tmp_path / "broken.json"
    task.write_text('{"task_description": "x", ', encoding="utf-8")
    assert_bad_input(grade(task, FIXED, "--json"), "broken.json", "not valid JSON")


def test_grade_task_without_test_cases(tmp_path: Path) -> None:
    task = tmp_path / "no_tests.json"
    task.write_text(
        json.dumps({"task_description": "x", "function_signature": "def f(x):"}), encoding="utf-8"
    )
    assert_bad_input(grade(task, FIXED, "--json"), "no_tests.json", "test_cases", "Field required")


def test_grade_task_with_test_cases_of_the_wrong_type(tmp_path: Path) -> None:
    task = tmp_path / "string_tests.json"
    task.write_text(
        json.dumps(
            {"task_description": "x", "function_signature": "def f(x):", "test_cases": "assert f(1) == 2"}
        ),
        encoding="utf-8",
    )
    assert_bad_input(grade(task, FIXED, "--json"), "string_tests.json", "test_cases", "valid list")


def test_grade_task_whose_inputs_cannot_be_encoded(tmp_path: Path) -> None:
    deep: Any = 0
    for _ in range(250):
        deep = [deep]
    task = tmp_path / "too_deep.json"
    task.write_text(
        json.dumps(
            {
                "task_description": "x",
                "function_signature": "def quick_sort(arr):",
                "test_cases": [{"input": deep, "expected": 1}],
            }
        ),
        encoding="utf-8",
    )
    assert_bad_input(
        grade(task, FIXED, "--json", "--backend", "subprocess"), "too_deep.json", "cannot be sent"
    )


def test_grade_missing_task_file(tmp_path: Path) -> None:
    assert_bad_input(grade(tmp_path / "nope.json", FIXED), "nope.json", "cannot read task file")


def test_grade_non_utf8_solution(tmp_path: Path) -> None:
    solution = tmp_path / "latin1.py"
    solution.write_bytes("def quick_sort(arr):\n    return sorted(arr)  # café\n".encode("latin-1"))
    assert_bad_input(grade(QUICK_SORT, solution, "--json"), "latin1.py", "not UTF-8", "save it as UTF-8")


def test_grade_missing_solution_file(tmp_path: Path) -> None:
    assert_bad_input(grade(QUICK_SORT, tmp_path / "missing.py", "--json"), "missing.py", "does not exist")


def test_grade_solution_is_a_directory(tmp_path: Path) -> None:
    assert_bad_input(grade(QUICK_SORT, tmp_path, "--json"), str(tmp_path), "is a directory")


def test_grade_invalid_workers() -> None:
    assert_bad_input(grade(QUICK_SORT, FIXED, "--workers", "0"), "workers", ">= 1")


def test_grade_unknown_backend() -> None:
    result = grade(QUICK_SORT, FIXED, "--backend", "nope")
    assert result.exit_code == 2
    assert "nope" in result.stderr
    assert "Traceback" not in result.output


def test_grade_bad_input_through_the_installed_script(tmp_path: Path) -> None:
    """The real script (its own process, real stderr): one line, exit code 2, no traceback."""
    script = shutil.which("transferlab", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the transferlab script is not installed (pip install -e .)")
    solution = tmp_path / "bad.py"
    solution.write_bytes(b"def quick_sort(arr):\n    return arr  # \xff\xfe\n")
    proc = subprocess.run(
        [script, "sandbox", "grade", str(QUICK_SORT), str(solution), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "bad.py" in proc.stderr and "not UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- grade: unavailable backend


def test_grade_unavailable_backend_exits_3() -> None:
    """No Docker engine answers at DOCKER_HOST: exit 3 with the backend's own message."""
    result = grade(QUICK_SORT, FIXED, "--json", "--backend", "docker", env=NO_ENGINE)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "Docker engine" in result.stderr
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- build-image


def test_build_image_without_docker_or_debootstrap(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sandbox", "build-image"], env={"PATH": str(tmp_path)})
    assert result.exit_code == 3
    assert "docker is not installed" in result.stderr
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- humaneval


@needs_root
def test_humaneval_canonical_solutions_pass() -> None:
    result = runner.invoke(app, ["sandbox", "humaneval", "--limit", "20", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "HumanEval: 20 problems" in result.stdout
    assert "canonical solutions: 20/20 pass" in result.stdout


@needs_root
def test_humaneval_all_canonical_solutions_pass() -> None:
    # HumanEval/95 passes a dict with int keys: the wire format carries any plain hashable key.
    result = runner.invoke(app, ["sandbox", "humaneval"])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    assert "canonical solutions: 159/159 pass" in result.stdout

"""`transferlab coding tasks ...` through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from transferlab.cli import app
from transferlab.coding_rl.tasks.repo_task import save_repo_task
from transferlab.coding_rl.tasks.seed_repos import quick_sort_task
from transferlab.coding_rl.tasks.validate import CHECKS

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["coding", "tasks", *map(str, args)])


def one_json_object(result: Result) -> dict[str, Any]:
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def assert_bad_input(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stderr.startswith("error: ")
    for needle in needles:
        assert needle in result.stderr
    assert "Traceback" not in result.output


def test_build_help() -> None:
    result = invoke("build", "--help")
    assert result.exit_code == 0, result.output
    for option in ("--out", "--seed", "--per-operator", "--held-out-fraction", "--workers"):
        assert option in result.stdout


def test_coding_help_lists_tasks() -> None:
    result = runner.invoke(app, ["coding", "--help"])
    assert result.exit_code == 0
    assert "tasks" in result.stdout


def test_validate_json_on_a_saved_task(tmp_path: Path) -> None:
    path = save_repo_task(quick_sort_task(), tmp_path)
    result = invoke("validate", path, "--json")
    assert result.exit_code == 0, result.output
    data = one_json_object(result)
    assert data["ok"] is True
    assert data["counts"] == {"tasks": 1, "valid": 1, "invalid": 0}
    [task] = data["tasks"]
    assert task["task_id"] == "seed-quick_sort"
    assert task["ok"] is True
    assert list(task["checks"]) == list(CHECKS)
    assert all(check["ok"] is True for check in task["checks"].values())


def test_validate_corpus_root_with_a_bad_task(tmp_path: Path) -> None:
    save_repo_task(quick_sort_task(), tmp_path)
    broken = quick_sort_task()
    broken.meta.task_id = "seed-quick_sort_broken"
    broken.reference_source = broken.buggy_source  # the "reference" fails the tests
    save_repo_task(broken, tmp_path)
    result = invoke("validate", tmp_path, "--json")
    assert result.exit_code == 1, result.output
    data = one_json_object(result)
    assert data["ok"] is False
    by_id = {t["task_id"]: t for t in data["tasks"]}
    assert by_id["seed-quick_sort"]["ok"] is True
    bad = by_id["seed-quick_sort_broken"]
    assert bad["ok"] is False
    assert bad["checks"]["reference_passes_all"]["ok"] is False
    assert bad["checks"]["buggy_fails_dev"]["ok"] is True

    text = invoke("validate", tmp_path)
    assert text.exit_code == 1
    assert "FAIL  seed-quick_sort_broken" in text.stdout
    assert "reference_passes_all" in text.stdout
    assert "1/2 tasks valid" in text.stdout


def test_validate_bad_paths(tmp_path: Path) -> None:
    assert_bad_input(invoke("validate", tmp_path / "nope"), "does not exist")
    assert_bad_input(invoke("validate", tmp_path), "is not a repository task")
    (tmp_path / "file.txt").write_text("x")
    assert_bad_input(invoke("validate", tmp_path / "file.txt"), "is a file")
    path = save_repo_task(quick_sort_task(), tmp_path / "corpus")
    (path / "tests" / "hidden.json").unlink()
    assert_bad_input(invoke("validate", path, "--json"), "hidden.json")


def test_help_stays_light() -> None:
    """`transferlab --help` must not import the task, sandbox or pydantic modules."""
    code = (
        "import sys; from transferlab.cli import app; "
        "heavy = [m for m in ('pydantic', 'rich', 'transferlab.coding_rl.tasks.corpus', "
        "'transferlab.coding_rl.tasks.mutations') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

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


# ------------------------------------------------------------------------------------------- audit


def test_audit_json_on_a_small_generation() -> None:
    result = invoke("audit", "--n-functions", "30", "--seed", "2", "--json")
    assert result.exit_code == 0, result.output
    data = one_json_object(result)
    assert data["ok"] is True and data["failures"] == []
    procedural, toy = data["families"]
    assert (procedural["family"], toy["family"]) == ("procedural", "toy-repos")
    assert procedural["settings"] == {
        "n_functions": 30,
        "seed": 2,
        "validation_fraction": 0.2,
        "test_fraction": 0.2,
    }
    for family in (procedural, toy):
        assert set(family["splits"]) == {"train", "validation", "test"}
        for split, figures in family["splits"].items():
            assert figures["tasks"] > 0 or (family is toy and split == "validation")
            assert figures["wrong_patches"] == figures["uncaught_mutants"] == 0
            if split != "train":
                assert figures["shared_templates"] == figures["shared_edits"] == 0
                assert figures["shared_expert_edits"] == 0


def test_audit_text_prints_a_table_per_family() -> None:
    result = invoke("audit", "--n-functions", "20", "--seed", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("procedural (n_functions 20, seed 1,")
    assert any(line.startswith("toy-repos (seed 1, operations ['add', 'max', 'min',") for line in lines)
    assert sum(line.startswith("| test |") for line in lines) == 2
    assert lines[-1] == "ok: every must-be-0 figure is 0"


def test_audit_defaults_are_the_agent_learn_preset_s(monkeypatch: Any) -> None:
    from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS
    from transferlab.coding_rl.tasks import audit

    seen: dict[str, Any] = {}
    real = audit.audit_procedural

    def small(**settings: Any) -> audit.FamilyAudit:
        seen.update(settings)
        return real(20, 0)

    monkeypatch.setattr(audit, "audit_procedural", small)
    result = invoke("audit", "--json")
    assert result.exit_code == 0, result.output
    cpu = AGENT_LEARN_PRESETS["cpu"]
    assert seen == {
        "n_functions": cpu.n_functions,
        "seed": cpu.task_seed,
        "validation_fraction": cpu.validation_fraction,
        "test_fraction": cpu.test_fraction,
    }


def test_audit_exits_1_when_a_must_be_zero_figure_is_not(monkeypatch: Any) -> None:
    from dataclasses import replace

    from transferlab.coding_rl.tasks import audit

    real = audit.audit_procedural

    def leaky(**settings: Any) -> audit.FamilyAudit:
        good = real(20, 0)
        splits = dict(good.splits, test=replace(good.splits["test"], shared_edits=2, wrong_patches=1))
        return replace(good, splits=splits)

    monkeypatch.setattr(audit, "audit_procedural", leaky)
    result = invoke("audit", "--json")
    assert result.exit_code == 1, result.output
    data = one_json_object(result)
    assert data["ok"] is False
    assert data["failures"] == ["procedural test: shared_edits = 2", "procedural test: wrong_patches = 1"]
    assert data["families"][0]["ok"] is False and data["families"][1]["ok"] is True
    text = invoke("audit")
    assert text.exit_code == 1
    assert "FAILED:" in text.stdout and "procedural test: shared_edits = 2" in text.stdout


def test_audit_bad_settings_name_the_fix() -> None:
    assert_bad_input(invoke("audit", "--n-functions", "1"), "n_functions must be in 3..")
    assert_bad_input(
        invoke("audit", "--n-functions", "20", "--validation-fraction", "0.5", "--test-fraction", "0.5"),
        "validation_fraction + test_fraction must be below 0.8",
    )

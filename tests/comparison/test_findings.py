"""README's findings table: generated from the committed results, and a test that they agree."""

from __future__ import annotations

import doctest
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.comparison import findings as findings_module
from transferlab.comparison.findings import CLAIMS, END, START, findings_rows, replace_block

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_the_readme_table_is_the_one_the_results_make() -> None:
    out = runner.invoke(app, ["results", "findings", "--check", str(ROOT / "README.md")])
    assert out.exit_code == 0, out.output


def test_rows_restate_each_claim_as_a_t_interval_over_its_seeds() -> None:
    rows = {r["claim"]: r for r in findings_rows(ROOT / "docs" / "results")}
    assert len(rows) == len(CLAIMS)
    # the transfer result: per-seed differences -35.0, -11.7, -5.8 points; committed as [-34.7, -2.8]
    end = rows["Transfer: coding-pretrained vs scratch, after ops GRPO"]
    assert end["difference, points [95% CI]"] == "-17.5 [-55.8, +20.8]"
    assert end["verdict"] == "no detectable change" and end["as committed"] == "-17.5 [-34.7, -2.8]"


def test_a_changed_result_fails_the_check(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", results)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\n{END}\n\nmore\n")
    wrote = runner.invoke(app, ["results", "findings", "--results-dir", str(results), "--write", str(readme)])
    assert wrote.exit_code == 0 and readme.read_text().endswith("\n\nmore\n")
    path = results / "transfer" / "result.json"
    data = json.loads(path.read_text())
    data["arms"]["transfer"]["per_seed"][0] += 0.1
    path.write_text(json.dumps(data))
    check = runner.invoke(app, ["results", "findings", "--results-dir", str(results), "--check", str(readme)])
    assert check.exit_code == 1 and "differs from the results" in check.output


def test_missing_markers_and_results_are_one_error_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no <!-- findings:start -->"):
        replace_block("no markers here", "x")
    out = runner.invoke(app, ["results", "findings", "--results-dir", str(tmp_path)])
    assert out.exit_code == 2 and "error: no " in out.output and "coding_agent_learn" in out.output


def test_module_doctests_hold() -> None:
    result = doctest.testmod(findings_module)
    assert result.attempted > 0 and result.failed == 0

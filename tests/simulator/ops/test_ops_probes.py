"""The probe suite: agents that skip the analysis fail the rubric, honest ones pass, on every split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.simulator.ops.probes import ProbeResult, held, probe_table, probes, run_probes

runner = CliRunner()


@pytest.fixture(scope="module")
def validation() -> list[ProbeResult]:
    return run_probes("validation", 10)  # two scenarios of every family


def test_every_degenerate_probe_fails_and_every_honest_one_passes(validation: list[ProbeResult]) -> None:
    by_name = {r.name: r for r in validation}
    assert set(by_name) == {p.name for p in probes()}
    for r in validation:
        if r.kind == "degenerate":
            assert r.success == 0.0 and r.held, r
        if r.kind == "honest":
            assert r.success == 1.0 and r.held, r
    # the spray and the expert's report sent without its queries score nothing at all
    assert by_name["spray: stock_out"].mean_score == 0.0
    assert by_name["expert report, no queries"].mean_score < 1.0
    assert by_name["expert"].mean_score == 10.0


def test_one_cause_always_passes_at_most_its_family_share(validation: list[ProbeResult]) -> None:
    chance = [r for r in validation if r.kind == "chance"]
    assert len(chance) == 5 and all(r.held is None for r in chance)
    assert all(r.success <= 0.2 for r in chance)  # each family is a fifth of the split


def test_limits_and_table() -> None:
    assert held("degenerate", 0.05) and not held("degenerate", 0.06)
    assert held("honest", 0.95) and not held("honest", 0.94)
    assert held("chance", 0.2) is None
    row = ProbeResult("spray: x", "degenerate", "test", 5, 0.4, 6.0, False)
    assert "| spray: x | degenerate | 40.0% | 6.00 | <= 0.05 | **no** |" in probe_table([row])


def test_the_command_prints_the_table_writes_a_result_and_refuses_a_full_out(tmp_path: Path) -> None:
    out = tmp_path / "probes"
    result = runner.invoke(app, ["ops", "probes", "--split", "test", "--tasks", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "| expert | honest | 100.0% |" in result.stdout
    saved = json.loads((out / "result.json").read_text())
    assert saved["scored_split"] == "test" and saved["held"] is True and saved["tasks"] == 5
    assert saved["provenance"]["command"].startswith("transferlab ops probes --split test --tasks 5")
    assert {"git_commit", "git_dirty", "packages", "wall_s"} <= set(saved["provenance"])
    assert "written from result.json" in (out / "README.md").read_text()
    again = runner.invoke(app, ["ops", "probes", "--split", "test", "--tasks", "5", "--out", str(out)])
    assert again.exit_code == 2 and "error: --out" in again.output and "not empty" in again.output
    rows = runner.invoke(app, ["ops", "probes", "--split", "test", "--tasks", "5", "--json"])
    assert rows.exit_code == 0 and {r["probe"] for r in json.loads(rows.stdout)} == {p.name for p in probes()}


def test_module_doctests_hold() -> None:
    import doctest

    from transferlab.simulator.ops import grader, probes, scenarios

    for module in (grader, probes, scenarios):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__

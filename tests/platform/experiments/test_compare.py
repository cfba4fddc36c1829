"""`transferlab compare` end to end on the `test` preset: the table, result.json and the report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.platform.cli import app
from transferlab.platform.experiments.compare import (
    FAMILIES,
    LAYERS,
    PROPERTIES,
    QUESTION_FAMILIES,
    QUESTIONS,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("compare") / "run"
    t0 = time.perf_counter()
    result = runner.invoke(app, ["compare", "--preset", "test", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.stdout, time.perf_counter() - t0


def test_cli_prints_the_measured_table(run: tuple[Path, str, float]) -> None:
    out, stdout, seconds = run
    for name in PROPERTIES.values():
        assert name in stdout
    for family in FAMILIES:
        assert family in stdout
    assert "report:" in stdout and str(out / "report.md") in stdout
    assert seconds < 90


def test_result_json_has_every_cell_with_how_it_was_measured(run: tuple[Path, str, float]) -> None:
    out, _, _ = run
    data = json.loads((out / "result.json").read_text())
    assert set(data["table"]) == set(PROPERTIES)
    for row in data["table"].values():
        assert set(row) == set(FAMILIES)
        assert all(cell["how"] for cell in row.values())
    assert set(data["questions"]) == set(QUESTION_FAMILIES)
    assert all(set(q) == set(QUESTIONS) for q in data["questions"].values())
    assert all(set(d) == set(LAYERS) for d in data["diagnosis"].values())
    table = data["table"]
    assert table["determinism"]["coding"]["value"] == 0.0
    assert table["determinism"]["ops_analysis"]["value"] == 0.0
    assert table["determinism"]["market"]["value"] > 0
    assert table["reward_delay"]["market"]["unit"] == "days"
    assert table["parallel"]["market"]["value"] == pytest.approx(1 / 86400)
    assert table["tool_use"]["coding"]["value"] == pytest.approx(13.9)
    assert data["questions"]["coding"]["trustworthy"]["value"] == 1.0
    assert data["questions"]["ops_analysis"]["trustworthy"]["value"] < 8.0
    assert data["table"]["tool_use"]["ops_analysis"]["value"] is None


def test_report_is_written(run: tuple[Path, str, float]) -> None:
    out, _, _ = run
    md = (out / "report.md").read_text()
    assert "domain table" in md and "How each number was measured" in md
    assert (out / "report.html").is_file() and (out / "figures" / "throughput.png").is_file()
    assert json.loads((out / "config.json").read_text())["replays"] == 3


def test_unknown_preset_is_refused() -> None:
    result = runner.invoke(app, ["compare", "--preset", "huge"])
    assert result.exit_code == 2 and "test, quick, full" in result.output

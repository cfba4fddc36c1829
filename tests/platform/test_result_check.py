"""`transferlab results check`: the committed results pass; each kind of bad file is named."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.platform import result_check
from transferlab.platform.result_check import check_results, failures

ROOT = Path(__file__).resolve().parents[2] / "docs" / "results"
runner = CliRunner()


def test_every_committed_result_passes() -> None:
    findings = check_results(ROOT)
    assert failures(findings) == [], failures(findings)
    out = runner.invoke(app, ["results", "check", str(ROOT)])
    assert out.exit_code == 0, out.output
    assert "results checked: 0 failing" in out.output


def _write(root: Path, name: str, data: object) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "result.json").write_text(data if isinstance(data, str) else json.dumps(data))


def test_bad_files_are_named_and_fail(tmp_path: Path) -> None:
    base = {"command": "transferlab x", "scored_split": "test", "tuned_on": "validation"}
    _write(tmp_path, "broken", "{not json")
    _write(tmp_path, "no_split", {"experiment": "simulator-fidelity", "command": "c"})
    _write(tmp_path, "fidelity", {**base, "experiment": "simulator-fidelity", "tau_before": 1.7,
                                  "tau_after": 0.5, "tau_ceiling": 0.9})  # fmt: skip
    _write(tmp_path, "arms", {**base, "experiment": "ops-learn", "arms": {}, "seeds": [0], "settings": {},
                              "comparisons": []})  # fmt: skip
    prov = {"git_commit": "abc", "command": "another command"}
    _write(tmp_path, "origin", {**base, "experiment": "ops-probes", "held": True, "provenance": prov,
                                "probes": [{"probe": "p", "success": 0.0}]})  # fmt: skip
    _write(tmp_path, "old", {**base, "experiment": "ops-probes", "held": True,
                             "probes": [{"probe": "p", "success": 0.0}]})  # fmt: skip
    by_dir = {}
    for f in check_results(tmp_path):
        by_dir.setdefault(Path(f.path).parent.name, []).append(f)
    assert "not readable JSON" in by_dir["broken"][0].message
    assert "names no scored_split, tuned_on" in by_dir["no_split"][0].message
    assert any("tau_before must be a rank correlation" in f.message for f in by_dir["fidelity"])
    assert "not in the shared result schema (arms" in by_dir["arms"][0].message
    assert "provenance must name the git commit and the result's command" in by_dir["origin"][0].message
    assert [f.level for f in by_dir["old"]] == ["legacy"]
    assert len(failures(by_dir["old"])) == 0 and len(failures(by_dir["old"], strict=True)) == 1
    out = runner.invoke(app, ["results", "check", str(tmp_path)])
    assert out.exit_code == 1 and "6 results checked: 5 failing" in out.output
    missing = runner.invoke(app, ["results", "check", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "error:" in missing.output and "is not a folder" in missing.output


def test_module_doctests_hold() -> None:
    result = doctest.testmod(result_check)
    assert result.attempted > 0 and result.failed == 0

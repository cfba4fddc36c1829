"""The offline comparison and exploration sweep, on the quick preset (real learners, real world)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.offline.experiments import ComparisonConfig, preset


def test_report_command_quick_preset(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["offline", "report", "--out", str(out), "--preset", "quick", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    cfg = preset("quick")
    main = summary["main"]
    assert set(main["policies"]) == {*cfg.learners, "marketer", "no_campaign"}
    for name in cfg.learners:
        entry = main["policies"][name]
        assert set(entry["ope"]) == {"dm", "ips", "snips", "dr", "sndr", "switch_dr", "fqe"}
        assert isinstance(entry["coverage"]["trusted"], bool)
    sel = main["selection"]
    # selection never picks an estimate the coverage check refused, and regret is measured in the world
    assert sel["chosen"] not in sel["refused"]
    assert sel["regret"] >= 0.0
    # one sweep row per (epsilon, learner); wider exploration tries more of the catalog
    sweep = summary["sweep"]
    assert [(r["epsilon"], r["policy"]) for r in sweep] == [
        (e, n) for e in cfg.sweep_epsilons for n in cfg.sweep_learners
    ]
    tried = {r["epsilon"]: r["catalog tried"] for r in sweep}
    assert tried[max(tried)] > tried[min(tried)]
    for name in ("result.json", "report.md", "report.html", "figures/values.png", "figures/sweep_gain.png"):
        assert (out / name).is_file(), name
    text = (out / "report.md").read_text()
    assert "Exploration sweep" in text and "Coverage of each learned policy" in text


def test_unknown_preset_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["offline", "report", "--out", str(tmp_path), "--preset", "huge"])
    assert result.exit_code == 2
    assert "unknown preset 'huge'" in result.output


def test_full_preset_is_the_documented_default() -> None:
    assert preset("full") == ComparisonConfig()

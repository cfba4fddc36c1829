"""The offline comparison and exploration sweep, on the quick preset (real learners, real world)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.offline.experiments import ComparisonConfig, preset


def test_report_command_quick_preset(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["offline", "report", "--out", str(out), "--preset", "smoke", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    cfg = preset("smoke")
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
    # every policy against the behaviour policy and doing nothing, over the preset's training seeds
    assert summary["seeds"] == cfg.seeds and set(summary["selected_by_seed"]) == {str(s) for s in cfg.seeds}
    paired = {(c["name"], c["cluster"]): c for c in summary["comparisons"]}
    for name in (*cfg.learners, "selected"):
        for base in ("marketer", "no_campaign"):
            c = paired[(f"{name} - {base}", "seed")]
            assert c["n_clusters"] == len(cfg.seeds) and c["ci"][0] <= c["estimate"] <= c["ci"][1]
    assert "Against what the shop does now" in text and summary["command"].startswith("transferlab offline")


def test_unknown_preset_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["offline", "report", "--out", str(tmp_path), "--preset", "huge"])
    assert result.exit_code == 2
    assert "--preset 'huge' is not a preset: use one of smoke, cpu" in result.output


def test_cpu_preset_is_the_documented_default_and_old_names_still_work() -> None:
    assert preset("cpu") == ComparisonConfig() == preset("full")
    assert preset("quick") == preset("smoke")
    with pytest.raises(ValueError, match="use one of smoke, cpu"):
        preset("fast")


def _evaluation(returns: dict[str, list[float]], chosen: str) -> object:
    import numpy as np

    from transferlab.offline.evaluate import OfflineEvalConfig, OfflineEvaluation, PolicyRow, Selection
    from transferlab.platform.stats import Interval

    iv = Interval(0.0, 0.0, 0.0, 0.95, 2)
    rows = [PolicyRow(k, iv, iv, iv, None, None, np.asarray(v)) for k, v in returns.items()]
    selection = Selection(chosen, "sndr", {}, {}, chosen, 0.0)
    return OfflineEvaluation(rows, "marketer", iv, selection, OfflineEvalConfig(), 10, 2)


def test_paired_comparisons_hand_computed() -> None:
    from transferlab.offline.experiments import paired_comparisons

    # the same two world futures in both seeds; x beats the marketer by 1 in seed 0 and ties in seed 1,
    # and the selection chose x in seed 0 and the marketer in seed 1
    base = {"marketer": [1.0, 2.0], "no_campaign": [2.0, 3.0]}
    evs = {
        0: _evaluation({"x": [2.0, 3.0], **base}, chosen="x"),
        1: _evaluation({"x": [1.0, 2.0], **base}, chosen="marketer"),
    }
    got = {(c.name, c.cluster): c for c in paired_comparisons(evs)}  # type: ignore[arg-type]
    assert got[("x - marketer", "seed")].estimate == pytest.approx(0.5)
    assert got[("x - marketer", "seed")].n_clusters == 2
    assert got[("x - marketer", "seed+episode")].n_clusters == 4
    assert got[("x - no_campaign", "seed")].estimate == pytest.approx(-0.5)
    assert got[("selected - marketer", "seed")].estimate == pytest.approx(0.5)
    assert got[("selected - no_campaign", "seed")].estimate == pytest.approx(-0.5)
    # both baselines returned the same in every seed (shared futures): counted once, futures as units
    assert ("no_campaign - marketer", "seed") not in got
    once = got[("no_campaign - marketer", "episode")]
    assert once.estimate == pytest.approx(1.0) and once.ci == (1.0, 1.0) and once.n_clusters == 2
    assert ("marketer - marketer", "seed") not in got


def test_each_learner_is_also_compared_at_a_bonferroni_level() -> None:
    from types import SimpleNamespace

    from transferlab.offline.experiments import paired_comparisons

    base = {"marketer": [1.0, 2.0, 0.0], "no_campaign": [2.0, 3.0, 1.0]}
    evs = {
        s: _evaluation({"x": [2.0 + s, 3.0, 1.0], "y": [1.0, 2.0 - s, 1.0], **base}, chosen="x")
        for s in (0, 1, 2)
    }
    for ev in evs.values():  # x and y are learned policies (they have an OPE estimate)
        for row in ev.rows:  # type: ignore[attr-defined]
            if row.name in ("x", "y"):
                object.__setattr__(row, "ope", SimpleNamespace(estimates={}))
    got = {(c.name, c.cluster): c for c in paired_comparisons(evs)}  # type: ignore[arg-type]
    plain = got[("x - marketer", "seed")]
    corrected = got[("x - marketer (Bonferroni over 2 learners)", "seed")]
    assert (
        corrected.estimate == plain.estimate and corrected.ci[0] < plain.ci[0] < plain.ci[1] < corrected.ci[1]
    )
    assert ("no_campaign - marketer (Bonferroni over 2 learners)", "seed") not in got

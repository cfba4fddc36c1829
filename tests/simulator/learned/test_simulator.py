"""Saving and loading a learned simulator, and `transferlab sim fit` (exit codes, outputs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.platform.config import load_config
from transferlab.simulator.learned import LearnedSimulator, SimFitConfig, SimulatorError
from transferlab.simulator.vocabulary import CATALOG

runner = CliRunner()


def _episode(sim: LearnedSimulator, seed: int) -> tuple[np.ndarray, np.ndarray]:
    market = sim.market(n_envs=3, n_customers=300, seed=seed)
    actions = np.random.default_rng(seed).integers(0, len(CATALOG), (15, 3))
    out = np.stack([market.step(a) for a in actions])
    return out, market.campaign_outcomes().outcomes


def test_save_load_round_trip_gives_the_same_simulation(sim: LearnedSimulator, tmp_path: Path) -> None:
    path = sim.save(tmp_path / "sim")
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "fit_report.json",
        "fit_report.md",
        "params.npz",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    loaded = LearnedSimulator.load(path)
    assert loaded.config == sim.config and load_config(path / "config.json") == sim.config
    for key, value in sim.params.to_arrays().items():
        np.testing.assert_array_equal(getattr(loaded.params, key), value, err_msg=key)
    for a, b in zip(_episode(sim, 4), _episode(loaded, 4), strict=True):
        np.testing.assert_array_equal(a, b)
    report = json.loads((path / "fit_report.json").read_text())
    assert report["purchase"]["heldout_log_loss"] == pytest.approx(sim.report["purchase"]["heldout_log_loss"])
    assert "held-out log loss" in (path / "fit_report.md").read_text()


def test_a_two_channel_simulator_round_trips_and_an_older_one_loads_as_one_channel(
    sim_two_channel: LearnedSimulator, sim: LearnedSimulator, tmp_path: Path
) -> None:
    loaded = LearnedSimulator.load(sim_two_channel.save(tmp_path / "two"))
    assert int(loaded.params.offer_channel) == 1 and loaded.config.offer_form == "noisy_or"
    for a, b in zip(_episode(sim_two_channel, 5), _episode(loaded, 5), strict=True):
        np.testing.assert_array_equal(a, b)
    # a simulator saved before the field existed: its params.npz has no offer_channel
    old = sim.save(tmp_path / "old")
    arrays = {k: v for k, v in np.load(old / "params.npz").items() if k != "offer_channel"}
    np.savez(old / "params.npz", **arrays)
    assert int(LearnedSimulator.load(old).params.offer_channel) == 0


def test_save_refuses_a_non_empty_directory_and_load_explains_a_bad_one(
    sim: LearnedSimulator, tmp_path: Path
) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(SimulatorError, match="not empty"):
        sim.save(tmp_path / "busy")
    with pytest.raises(SimulatorError, match="transferlab sim fit"):
        LearnedSimulator.load(tmp_path / "busy")


def test_cli_fit_writes_the_simulator(logs_dir: Path, tmp_path: Path) -> None:
    config = SimFitConfig(negative_rate=0.05).save(tmp_path / "cfg.json")
    out = tmp_path / "sim"
    result = runner.invoke(
        app,
        ["sim", "fit", str(logs_dir), "--out", str(out), "--config", str(config), "--seed", "3", "--json"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["out"] == str(out) and summary["purchase"]["heldout_auc"] > 0.6
    loaded = LearnedSimulator.load(out)
    assert loaded.config.seed == 3 and loaded.config.negative_rate == 0.05
    assert loaded.market(n_envs=2, n_customers=100, seed=0).step(np.array([0, 1])).shape == (2, 12)


def test_cli_fit_bad_input_exits_2(logs_dir: Path, tmp_path: Path) -> None:
    cases: dict[str, list[str]] = {}
    cases["missing logs"] = [str(tmp_path / "nope")]
    broken = Path(shutil.copytree(logs_dir, tmp_path / "broken"))
    daily = pd.read_parquet(broken / "daily.parquet")
    daily.drop(columns=["competitor_shoes"]).to_parquet(broken / "daily.parquet")
    cases["missing column"] = [str(broken)]
    empty = Path(shutil.copytree(logs_dir, tmp_path / "empty"))
    events = pd.read_parquet(empty / "events.parquet")
    events.iloc[:0].to_parquet(empty / "events.parquet")
    cases["no events"] = [str(empty)]
    (tmp_path / "bad.json").write_text('{"negative_rate": 2}')
    cases["bad config"] = [str(logs_dir), "--config", str(tmp_path / "bad.json")]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "f").write_text("")
    cases["busy out"] = [str(logs_dir), "--out", str(tmp_path / "taken")]
    expected = {
        "missing logs": "not a log directory",
        "missing column": "competitor_shoes",
        "no events": "no purchases",
    }
    for name, args in cases.items():
        if "--out" not in args:
            args = [*args, "--out", str(tmp_path / f"out-{name.replace(' ', '-')}")]
        result = runner.invoke(app, ["sim", "fit", *args])
        assert result.exit_code == 2, (name, result.output)
        assert "error:" in result.output and "Traceback" not in result.output, name
        assert expected.get(name, "error:") in result.output, (name, result.output)

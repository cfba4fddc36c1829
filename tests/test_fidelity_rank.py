"""scripts/fidelity_rank.py: the quick probe gives the figures `sim fidelity` gives, before and after."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from transferlab.simulator.fidelity_report import run_fidelity
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
from transferlab.simulator.world_config import WorldConfig

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fidelity_rank.py"


def probe(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def tau(text: str, label: str) -> float:
    found = re.search(rf"Kendall tau \({label}\) (-?[0-9.]+)", text)
    assert found, text
    return float(found.group(1))


@pytest.mark.slow
@pytest.mark.timeout(900)  # minutes of simulation, and `make test` runs it beside other test processes
def test_the_probe_reproduces_the_fidelity_command_before_and_after_calibration(tmp_path: Path) -> None:
    logs = generate_logs(LogSpec(days=60, world=WorldConfig(n_customers=200, seed=5)))
    write_logs(logs, tmp_path / "logs")
    sim = LearnedSimulator.fit(logs)
    sim.save(tmp_path / "sim")
    summary = run_fidelity(
        sim, logs, tmp_path / "fid", episodes=2, deploy_episodes=2, seed=0, calibration_episodes=12
    )

    probe("world", str(tmp_path), "--episodes", "2")
    assert (tmp_path / "world_panel_2_0.npz").is_file()
    out = probe(
        "rank",
        str(tmp_path),
        str(tmp_path / "sim"),
        "--episodes",
        "2",
        "--calibrate",
        "1",
        "--deploy-episodes",
        "2",
        "--calibration-episodes",
        "12",
        "--save",
        str(tmp_path / "calibrated"),
    )
    assert tau(out, "before calibration") == pytest.approx(summary["tau_before"], abs=5e-4)
    assert tau(out, "after calibration") == pytest.approx(summary["tau_after"], abs=5e-4)
    assert (tmp_path / "deployment_2_0.json").is_file()
    shifts = LearnedSimulator.load(tmp_path / "calibrated").report["calibration"][-1]["shifts"]
    fidelity_shifts = LearnedSimulator.load(tmp_path / "fid" / "calibrated_sim").report["calibration"][-1]
    assert shifts == fidelity_shifts["shifts"]

    # two copies of one simulator: each ranks as before, and so does the mean of their returns
    twice = probe("rank", str(tmp_path), str(tmp_path / "sim"), str(tmp_path / "sim"), "--episodes", "2")
    each = re.findall(r"Kendall tau \(before calibration\) (-?[0-9.]+)", twice)
    assert [float(t) for t in each] == [pytest.approx(summary["tau_before"], abs=5e-4)] * 2
    assert tau(twice, "mean of 2 simulators' returns, before calibration") == pytest.approx(
        summary["tau_before"], abs=5e-4
    )


def test_rank_without_the_world_panel_says_how_to_make_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "rank", str(tmp_path), str(tmp_path / "sim")],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "fidelity_rank.py world" in done.stderr and "world_panel_256_0.npz does not exist" in done.stderr


def test_a_save_directory_that_is_taken_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "params.npz").write_text("x")
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "rank",
            str(tmp_path),
            str(tmp_path / "sim"),
            "--calibrate",
            "1",
            "--save",
            str(tmp_path / "taken"),
        ],
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode != 0 and "--save" in done.stderr and "already exists and is not empty" in done.stderr
    )
    assert (tmp_path / "taken" / "params.npz").read_text() == "x"

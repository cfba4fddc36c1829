"""The fidelity protocol end to end on a second world, with averaged calibration fits.

Apart from tests/simulator/test_calibration.py (whose command test runs the protocol on world seed 11
with one fit) so that the two long runs can go to different test processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import LogSpec, generate_logs
from transferlab.simulator.world_config import WorldConfig

SHORT = EpisodeConfig.build(horizon=14, warmup_days=3, settle_days=7)


@pytest.mark.slow
@pytest.mark.timeout(900)  # minutes of simulation, and `make test` runs it beside other test processes
def test_the_protocol_runs_on_a_second_world_with_two_fits_and_lowers_its_cost(tmp_path: Path) -> None:
    """The whole fidelity protocol on a second world (seed 12; the calibration tests' world is seed 11,
    through the command), small and short, with two averaged calibration fits."""
    world_seed, fits = 12, 2
    from transferlab.simulator.fidelity_report import run_fidelity

    world_logs = generate_logs(LogSpec(days=120, world=WorldConfig(n_customers=600, seed=world_seed)))
    summary = run_fidelity(
        LearnedSimulator.fit(world_logs),
        world_logs,
        tmp_path,
        episodes=4,
        deploy_episodes=8,
        episode=SHORT,
        fits=fits,
        calibration_episodes=16,
    )
    assert summary["calibration_method"] == "policies" and summary["world_episodes_evaluation"] == 8
    assert summary["provenance"]["command"] == summary["command"] and summary["provenance"]["wall_s"] > 0
    assert summary["calibration_fits"] == fits
    last = LearnedSimulator.load(tmp_path / "calibrated_sim").report["calibration"][-1]
    assert len(last.get("fits", [None])) == fits
    text = (tmp_path / "report.md").read_text()
    assert ("the first fit's cost by iteration" in text) == (fits > 1)
    assert ("fit seed 3000" in text) == (fits > 1)  # a column per averaged fit: seeds 2000, 3000
    for key in ("tau_before", "tau_after", "tau_ceiling"):
        assert -1.0 <= summary[key] <= 1.0, key
    costs = LearnedSimulator.load(tmp_path / "calibrated_sim").report["calibration"][-1]["costs"]
    assert costs[-1] < 0.5 * costs[0]  # the deployed policies' residuals, before and after the fit
    assert json.loads((tmp_path / "result.json").read_text())["tau_after"] == summary["tau_after"]

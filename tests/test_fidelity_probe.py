"""scripts/fidelity_probe.py: lifts over no campaign, by hand on a built panel result."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from transferlab.simulator.fidelity import PanelResult
from transferlab.simulator.vocabulary import DAY_KEYS

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fidelity_probe.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("fidelity_probe", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(orders: dict[str, float], returns: dict[str, list[float]]) -> PanelResult:
    def vec(n: float) -> np.ndarray:
        out = np.zeros(len(DAY_KEYS))
        out[DAY_KEYS.index("orders")] = n
        return out

    return PanelResult(
        values={},
        outcomes={k: vec(v) for k, v in orders.items()},
        daily={},
        returns={k: np.asarray(v) for k, v in returns.items()},
    )


def test_lifts_are_differences_from_the_first_policy() -> None:
    mod = _module()
    world = _result({"none": 260.0, "a": 310.0}, {"none": [44.0, 46.0], "a": [47.0, 47.0]})
    sim = _result({"none": 330.0, "a": 350.0}, {"none": [50.0, 50.0], "a": [46.0, 48.0]})
    none, a = mod.lift_rows(world, sim, ["none", "a"])
    assert none["world_lift_orders"] == 0.0 and none["sim_lift_return"] == 0.0
    assert a["world_lift_orders"] == 50.0 and a["sim_lift_orders"] == 20.0
    assert a["world_lift_return"] == pytest.approx(2.0) and a["sim_lift_return"] == pytest.approx(-3.0)
    assert a["sim_return_se"] == pytest.approx(1.0)  # std 1.414 / sqrt(2)


def test_the_probe_panel_starts_with_no_campaign_and_holds_evaluation_policies() -> None:
    mod = _module()
    panel = mod.probe_panel()
    assert list(panel) == ["none", *mod.PROBED]

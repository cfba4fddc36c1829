"""The cross-domain settings table: read from the results, differences explained, nothing typed."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

from transferlab.comparison import settings as settings_module
from transferlab.comparison.settings import SETTINGS, WHY, settings_row, settings_table


def _result(root: Path, folder: str, settings: dict[str, object]) -> None:
    arm = {"held_out_success": {"estimate": 0.5, "ci": [0.4, 0.6]}, "n_episodes": 10}
    body = {"experiment": folder, "command": "x", "seeds": [0], "settings": settings}
    (root / folder).mkdir(parents=True)
    (root / folder / "result.json").write_text(json.dumps({**body, "arms": {"sft": arm}, "comparisons": []}))


def _settings(layers: int, temperature: float) -> dict[str, object]:
    rl = {"steps": 32, "tasks_per_step": 4, "group_size": 8, "temperature": temperature, "kl_coef": 0.05}
    return {"policy": {"n_layer": layers, "d_model": 128}, "sft": {"steps": 100}, "sft_tasks": 40, "rl": rl,
            "rft": {"demo_anchor": 0}}  # fmt: skip


def test_rows_come_from_the_results_and_say_why_only_where_they_differ(tmp_path: Path) -> None:
    _result(tmp_path, "coding_agent_learn", _settings(3, 1.0))
    _result(tmp_path, "ops_learn_rft", _settings(2, 1.0))
    rows = {r["setting"]: r for r in settings_table(tmp_path)}
    assert list(rows) == list(SETTINGS)
    assert rows["policy"]["coding"] == "3 layers x 128" and rows["policy"]["ops"] == "2 layers x 128"
    assert rows["policy"]["why they differ"] == WHY["policy"]
    assert rows["temperature"]["why they differ"] == "same" and rows["RL episodes"]["ops"] == "1024"
    assert rows["advantage"]["coding"] == "episode"  # a result saved before the option existed


def test_a_missing_result_is_named_not_invented(tmp_path: Path) -> None:
    _result(tmp_path, "ops_learn_rft", _settings(2, 0.7))
    rows = settings_table(tmp_path)
    assert all(r["coding"] == "not found" for r in rows)


def test_rft_data_of_old_and_new_results() -> None:
    assert settings_row({"rft": {"keep_demos": True}})["RFT data"] == "every demonstration + own successes"
    assert settings_row({"rft": {"demo_anchor": 16}})["RFT data"] == "own successes + 16 demonstrations"
    assert settings_row({"model_path": "models/smollm2"})["policy"] == "models/smollm2"


def test_module_doctests_hold() -> None:
    result = doctest.testmod(settings_module)
    assert result.attempted > 0 and result.failed == 0

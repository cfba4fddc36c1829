"""The experiment commands' shared option handling: a resumed run keeps its saved settings, and settings
named on the command line that differ from them are refused instead of silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.agent_rl.rl import RLConfig
from transferlab.cli import app
from transferlab.coding_rl.experiments.cli import Preset, config_differences
from transferlab.coding_rl.experiments.presets import LEARN_PRESETS
from transferlab.comparison.ops_learn import OPS_LEARN_PRESETS
from transferlab.platform.config import BaseConfig
from transferlab.platform.runstore import RunStore


def test_config_differences_name_each_nested_setting_with_both_values() -> None:
    saved = LEARN_PRESETS["smoke"]
    given = saved.model_copy(update={"seeds": [4], "rl": saved.rl.model_copy(update={"lr": 0.5})})
    assert config_differences(saved, given) == [
        f"rl.lr (saved {saved.rl.lr}, given 0.5)",
        f"seeds (saved {saved.seeds}, given [4])",
    ]
    assert config_differences(saved, saved) == []
    many = RLConfig(lr=0.5, steps=2, group_size=3, epochs=4, kl_coef=0.5, seed=9)
    listed = config_differences(RLConfig(), many, limit=2)
    assert len(listed) == 3 and listed[-1] == "4 more"


@pytest.mark.parametrize(
    ("command", "experiment", "config", "given", "named"),
    [
        (
            ["coding", "experiment", "learn"],
            "coding-learn",
            LEARN_PRESETS["smoke"],
            ["--preset", "cpu"],
            "curve_every (saved 1, given 10)",
        ),
        (
            ["ops", "experiment", "learn"],
            "ops-learn",
            OPS_LEARN_PRESETS["smoke"],
            ["--preset", "smoke", "--seeds", "7"],
            "in seeds (saved [0], given [7]): drop those options",  # the one difference
        ),
    ],
)
def test_resume_with_other_settings_is_one_error_and_leaves_the_run_alone(
    tmp_path: Path, command: list[str], experiment: str, config: BaseConfig, given: list[str], named: str
) -> None:
    run = RunStore(tmp_path).create_run(experiment, config)
    run.release()
    before = {p.name: p.stat().st_mtime_ns for p in run.dir.iterdir()}
    res = CliRunner().invoke(app, [*command, "--resume", str(run.dir), *given])
    assert res.exit_code == 2, res.output
    assert (
        res.output.count("error:") == 1
        and f"--resume {run.dir} continues with the settings it saved" in res.output
    )
    assert named in res.output and "leave out --resume" in res.output
    assert {
        p.name: p.stat().st_mtime_ns for p in run.dir.iterdir()
    } == before  # not opened, not marked resumed


def test_resume_without_settings_gives_the_saved_config(tmp_path: Path) -> None:
    from transferlab.coding_rl.experiments.cli import _config
    from transferlab.comparison.ops_learn import OpsLearnConfig

    saved = OPS_LEARN_PRESETS["smoke"].model_copy(update={"seeds": [3, 5]})
    run = RunStore(tmp_path).create_run("ops-learn", saved)
    run.release()
    assert _config(OpsLearnConfig, OPS_LEARN_PRESETS, None, None, run.dir) == saved  # not the cpu preset
    assert _config(OpsLearnConfig, OPS_LEARN_PRESETS, Preset.cpu, None, None) == OPS_LEARN_PRESETS["cpu"]


@pytest.mark.parametrize("group", [["coding", "experiment", "agent-learn"], ["ops", "experiment", "learn"],
                                   ["ops", "experiment", "transfer"]])  # fmt: skip
def test_an_experiment_without_preset_config_or_resume_starts_nothing(
    tmp_path: Path, group: list[str]
) -> None:
    out = CliRunner().invoke(app, [*group, "--runs-root", str(tmp_path)])
    assert out.exit_code == 2 and out.output.count("error:") == 1
    assert "--preset smoke" in out.output and "hours" in out.output
    assert not any(tmp_path.iterdir())  # no run directory was made

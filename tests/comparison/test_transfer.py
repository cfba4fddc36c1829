"""The transfer experiment: habit measures by hand, the summary's arithmetic, the test preset end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transferlab.comparison import transfer as tr
from transferlab.platform.trajectory import StepRecord, Trajectory

torch.set_num_threads(1)


def _episode(*steps: tuple[dict, str]) -> Trajectory:
    return Trajectory(
        [
            StepRecord(
                episode_id="e",
                step=k,
                task_id="t",
                domain="coding",
                action_text=json.dumps(action),
                action_ids=[1],
                observation_text=obs,
                observation_ids=[],
                reward=0.0,
            )
            for k, (action, obs) in enumerate(steps)
        ]
    )


READ = ({"action": "read_file", "path": "src/calc.py"}, "=== src/calc.py ===\ndef f(x): ...")
EDIT = ({"action": "edit_file", "path": "src/calc.py", "old": "-", "new": "+"}, "wrote src/calc.py")
TEST = ({"action": "run_tests", "target": "all"}, "3 passed")
SUBMIT = ({"action": "submit"}, "submitted: passed")


def test_coding_habits_by_hand() -> None:
    assert tr.coding_habits(_episode(READ, EDIT, TEST, SUBMIT)) == {
        "read_before_write": True,
        "test_after_modify": True,
    }
    assert tr.coding_habits(_episode(EDIT, SUBMIT)) == {
        "read_before_write": False,
        "test_after_modify": False,
    }
    # tested before the last change only: not "test after modify"
    assert tr.coding_habits(_episode(READ, EDIT, TEST, EDIT, SUBMIT))["test_after_modify"] is False
    # no change at all: neither habit (nothing was written)
    assert tr.coding_habits(_episode(READ, TEST, SUBMIT)) == {
        "read_before_write": False,
        "test_after_modify": False,
    }
    assert tr.habit_shares([_episode(READ, EDIT, TEST, SUBMIT), _episode(EDIT, SUBMIT)]) == {
        "read_before_write": 0.5,
        "test_after_modify": 0.5,
    }


def test_habits_when_writing_count_only_the_episodes_that_changed_a_file() -> None:
    episodes = [_episode(READ, EDIT, TEST, SUBMIT), _episode(READ, TEST, SUBMIT), _episode(EDIT, SUBMIT)]
    assert tr.wrote(episodes[0]) and not tr.wrote(episodes[1])
    # of all three: 1/3 each; of the two that wrote: 1/2 each; two of three wrote
    assert tr.habits_when_writing(episodes) == {
        "wrote": pytest.approx(2 / 3),
        "read_before_write": 0.5,
        "test_after_modify": 0.5,
    }
    assert tr.habits_when_writing([episodes[1]]) == {"wrote": 0.0}


def _point(stage: str, episodes: float, per_episode: list[float]) -> dict:
    habits = {"query_before_concluding": per_episode, "check_before_reporting": [0.0] * len(per_episode)}
    return {
        "stage": stage,
        "step": 0,
        "episodes": episodes,
        "success": sum(per_episode) / len(per_episode),
        "rubric": 5.0,
        "habits": {k: sum(v) / len(v) for k, v in habits.items()},
        "per_episode": per_episode,
        "habit_episodes": habits,
    }


def test_summary_counts_episodes_to_threshold_by_hand() -> None:
    config = tr.TransferConfig(seeds=[0], threshold=0.5)
    fast = [
        _point("start", 0, [0, 0]),
        _point("sft", 0, [0, 0]),
        _point("rl", 8, [1, 1]),
        _point("rl", 16, [1, 1]),
    ]
    slow = [
        _point("start", 0, [0, 0]),
        _point("sft", 0, [0, 0]),
        _point("rl", 8, [0, 0]),
        _point("rl", 16, [1, 0]),
    ]
    results = {
        "coding-seed0": {
            "held_out": [1.0, 0.0],
            "habits": {"read_before_write": 1.0, "test_after_modify": 0.5},
        },
        "transfer-seed0": {"curve": fast},
        "scratch-seed0": {"curve": slow},
    }
    results["transfer-seed0"]["seconds"] = 1800.0
    summary = tr.summarise(config, results, 1.0, flat={"transfer-seed0": 0.25})
    # GRPO's gain is end minus after-SFT, paired by episode: transfer 1 - 0, scratch 0.5 - 0
    assert summary["arms"]["transfer"]["rl_gain"]["estimate"] == pytest.approx(1.0)
    assert summary["arms"]["scratch"]["rl_gain"]["estimate"] == pytest.approx(0.5)
    assert summary["arms"]["transfer"]["ops_cpu_hours"] == pytest.approx(0.5)
    assert summary["arms"]["transfer"]["rubric_gain_per_seed"] == [0.0]  # _point's rubric is always 5
    assert summary["arms"]["transfer"]["nonflat_group_share"] == pytest.approx(0.75)
    assert "nonflat_group_share" not in summary["arms"]["scratch"]
    assert summary["arms"]["transfer"]["episodes_to_threshold"] == [4.0]  # 0 at 0 episodes, 1 at 8
    assert summary["arms"]["scratch"]["episodes_to_threshold"] == [16.0]
    assert summary["arms"]["transfer"]["stages"]["first_rl"]["success"]["estimate"] == 1.0
    assert summary["arms"]["scratch"]["stages"]["end"]["habits"]["query_before_concluding"]["estimate"] == 0.5
    assert summary["transfer_minus_scratch"]["estimate"] == pytest.approx(0.5)
    assert summary["coding"]["habits"] == {"read_before_write": 1.0, "test_after_modify": 0.5}


def test_result_compares_the_arms_per_seed_and_scenario_by_hand() -> None:
    """Two seeds, two scenarios x 2 episodes: the per-scenario means, the arms and transfer - scratch."""
    ops = tr.transfer_test_config().ops.model_copy(update={"eval_episodes": 2})
    config = tr.TransferConfig(seeds=[0, 1], ops=ops)
    results = {}
    for s in (0, 1):
        results[f"coding-seed{s}"] = {
            "held_out": [1.0, 0.0],
            "habits": {"read_before_write": 0.5, "test_after_modify": 0.5},
            "habits_when_writing": {"wrote": 0.5, "read_before_write": 1.0, "test_after_modify": 1.0},
        }
        results[f"transfer-seed{s}"] = {
            "curve": [_point("sft", 0, [1, 1, 0, 0]), _point("rl", 8, [1, 1, 1, 0])]
        }
        results[f"scratch-seed{s}"] = {
            "curve": [_point("sft", 0, [1, 0, 0, 0]), _point("rl", 8, [1, 0, 0, 0])]
        }
    result = tr.build_result(config, results, "transferlab ops experiment transfer --preset smoke")
    assert set(result.arms) == {"transfer", "scratch", "transfer_sft", "scratch_sft"}
    assert result.arms["transfer"].held_out_success.estimate == pytest.approx(0.75)
    assert result.arms["scratch_sft"].held_out_success.estimate == pytest.approx(0.25)
    assert result.arms["transfer"].n_episodes == 8
    by_name = {(c.name, c.cluster): c for c in result.comparisons}
    end = by_name[("transfer - scratch", "seed")]
    assert end.estimate == pytest.approx(0.5) and end.n_clusters == 2
    assert by_name[("transfer - scratch", "seed+task")].n_clusters == 4
    assert by_name[("transfer - scratch after sft", "seed")].estimate == pytest.approx(0.25)
    source = result.settings["source"]
    assert source["held_out_success"] == 0.5 and source["habits_when_writing"]["read_before_write"] == 1.0


def test_flat_group_share_reads_the_trainers_metric(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "metrics.parquet"
    rows = [
        {"step": 0, "key": "ops/train/frac_reward_zero_std", "value": 0.5, "wall_time": 0.0},
        {"step": 1, "key": "ops/train/frac_reward_zero_std", "value": 0.0, "wall_time": 0.0},
        {"step": 1, "key": "ops/train/loss", "value": 9.0, "wall_time": 0.0},
    ]
    pd.DataFrame(rows).to_parquet(path)
    assert tr.flat_group_share(path) == pytest.approx(0.25)
    assert tr.flat_group_share(tmp_path / "missing.parquet") is None


def test_transfer_test_preset_end_to_end(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from transferlab.cli import app

    config = tr.transfer_test_config().model_copy(update={"seeds": [0, 1]})
    path = tmp_path / "two-seeds.json"
    path.write_text(json.dumps(config.model_dump(mode="json")))
    # a second process's share of the seeds (through the command, with a config file): it computes
    # seed 1 and leaves the summary to the first
    args = ["ops", "experiment", "transfer", "--config", str(path), "--only-seeds", "1"]
    out = CliRunner().invoke(app, [*args, "--runs-root", str(tmp_path / "runs")])
    assert out.exit_code == 0, out.output
    (first,) = (tmp_path / "runs" / "transfer").iterdir()
    assert tr.TransferConfig.from_file(first / "config.json") == config  # the file's settings, saved
    assert (first / "arms" / "scratch-seed1" / "result.json").exists()
    assert not (first / "arms" / "coding-seed0").exists()
    summary = tr.run_transfer(
        config, tmp_path / "runs", report_dir=tmp_path / "report", resume=first, only_seeds=[0]
    )
    run = Path(summary["run_dir"])
    assert run == first and summary["arms"]["scratch"]["ops_cpu_hours"] > 0
    assert 0.0 <= summary["arms"]["scratch"]["nonflat_group_share"] <= 1.0
    for arm in ("coding-seed0", "transfer-seed0", "scratch-seed0"):
        assert (run / "arms" / arm / "result.json").exists()
    # both ops arms: same architecture and tokenizer; A starts from the coding policy, B from scratch
    a = json.loads((run / "arms" / "transfer-seed0" / "result.json").read_text())
    b = json.loads((run / "arms" / "scratch-seed0" / "result.json").read_text())
    assert (
        [p["stage"] for p in a["curve"]] == [p["stage"] for p in b["curve"]] == ["start", "sft", "rl", "rl"]
    )
    for arm in tr.ARMS:
        assert set(summary["arms"][arm]["stages"]) == set(tr.STAGES)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "query_before_concluding" in md and "episodes to reach" in md
    assert (tmp_path / "report" / "report.html").exists()
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["arms"].keys() == set(tr.ARMS)
    assert (tmp_path / "report" / "figures" / "success_curves.png").exists()
    from transferlab.platform.results import read_result

    result = read_result(tmp_path / "report" / "result.json")
    assert result.experiment == "transfer" and result.seeds == [0, 1]
    saved, report = first / "config.json", tmp_path / "report"
    assert result.command == f"transferlab ops experiment transfer --config {saved} --report-dir {report}"
    # the settings are no preset's: the command names the run's saved copy
    assert {c.cluster for c in result.comparisons} == {"seed", "seed+task"}
    assert "MDE" in md and "changed a file in" in md


def test_resuming_a_transfer_run_another_process_owns_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from transferlab.platform.runstore import RunStore

    run = RunStore(tmp_path).create_run("transfer", tr.transfer_test_config())
    run.release()
    hold = "import sys, time\nfrom transferlab.platform.runstore import Run\nRun(sys.argv[1]).acquire()\n"
    hold += "print('holding', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", hold, str(run.dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        with pytest.raises(SystemExit) as exit_info:
            tr.main(["--preset", "smoke", "--resume", str(run.dir), "--runs-root", str(tmp_path)])
    finally:
        proc.kill()
        proc.wait()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: run ") and f"in use by pid {proc.pid}" in err[0]
    with pytest.raises(SystemExit) as exit_info:
        tr.main(["--preset", "smoke", "--resume", str(tmp_path)])
    assert exit_info.value.code == 2 and "not a run directory" in capsys.readouterr().err


def test_cpu_preset_ops_budget_is_the_ops_learn_recipe() -> None:
    """Both arms train on ops exactly as `transferlab ops experiment learn --preset cpu` does."""
    from transferlab.comparison.ops_learn import OpsLearnConfig

    ops, recipe = tr.TransferConfig().ops, OpsLearnConfig()
    assert (ops.train_tasks, ops.sft_tasks, ops.held_out_tasks) == (200, 40, 60)
    assert ops.practice == "undemonstrated" and ops.compact_reports is recipe.compact_reports is True
    assert ops.sft == recipe.sft and ops.policy == recipe.policy
    assert ops.rl == recipe.rl.model_copy(update={"checkpoint_every": 0})
    assert (ops.eval_every, ops.eval_episodes, ops.eval_temperature) == (16, 2, 0.7)


def test_the_result_command_names_the_preset_the_model_or_the_saved_config() -> None:
    run = Path("runs/transfer/r1")
    cpu = tr.TransferConfig()
    assert tr.transfer_command(cpu, Path("out"), run) == (
        "transferlab ops experiment transfer --preset cpu --report-dir out"
    )
    with_model = cpu.model_copy(update={"model_path": "models/m"})
    assert tr.transfer_command(with_model, None, run) == (
        "transferlab ops experiment transfer --model models/m --preset cpu"
    )
    changed = with_model.model_copy(update={"threshold": 0.5})  # the model is in the saved config too
    assert tr.transfer_command(changed, Path("out"), run) == (
        f"transferlab ops experiment transfer --config {run / 'config.json'} --report-dir out"
    )


def test_resuming_with_other_settings_is_one_error_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transferlab.platform.runstore import RunStore

    run = RunStore(tmp_path).create_run("transfer", tr.transfer_test_config())
    run.release()
    before = sorted(p.name for p in run.dir.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        tr.main(["--preset", "cpu", "--resume", str(run.dir), "--runs-root", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "continues with the settings it saved" in err[0]
    assert "coding.demo_tasks (saved 2, given 38)" in err[0] and "39 more" in err[0]
    assert sorted(p.name for p in run.dir.iterdir()) == before

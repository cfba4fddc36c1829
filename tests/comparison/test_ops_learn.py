"""ops-learn: the result by hand, the report diagnosis on the expert's episode, the config rules, and the
smoke preset end to end through `transferlab ops experiment learn` with --resume."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.comparison.ops_learn import (
    OPS_LEARN_PRESETS,
    OpsLearnConfig,
    build_result,
    curve_series,
    per_task,
    report_diagnosis,
)
from transferlab.comparison.ops_training import OpsEval, make_ops_sft_data, ops_tasks, rubric_of
from transferlab.platform.config import ConfigError
from transferlab.platform.results import read_result


def diag(episodes: int, reported: int, wins: int) -> dict[str, int]:
    return {
        "episodes": episodes,
        "actions": 4 * episodes,
        "actions_ok": 3 * episodes,
        "reported": reported,
        "cause_named": reported,
        "false_blame": reported - wins,
        "evidence_half": wins,
        "success": wins,
    }


def hand_results(held: dict[str, list[list[float]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for arm, per_seed in held.items():
        for s, values in enumerate(per_seed):
            row: dict[str, Any] = {
                "held_out": values,
                "rubric": [8.0 * v for v in values],
                "habits": {"query_before_concluding": 1.0, "check_before_reporting": 0.5},
                "diagnosis": diag(len(values), len(values), int(sum(values))),
                "seconds": 30.0,
            }
            if arm in ("rl", "rft_rl"):
                curve = [{"step": 1, "episodes": 4, "success": 0.5, "rubric": 4.0}]
                curve.append(
                    {"step": 2, "episodes": 8, "success": sum(values) / 2, "rubric": 4.0 * sum(values)}
                )
                row.update(training_episodes=8, train_success=[0.5, 0.5], curve=curve)
            if arm == "rft":
                row.update(training_episodes=8, train_success=[0.25, 0.5], data_size=5)
            out[f"{arm}-seed{s}"] = row
    return out


def test_result_by_hand() -> None:
    config = OpsLearnConfig(seeds=[0, 1], arms=["sft", "rl", "rft"])
    held = {"sft": [[0.0, 0.0], [0.0, 1.0]], "rl": [[1.0, 1.0], [1.0, 1.0]], "rft": [[1.0, 0.0], [1.0, 1.0]]}
    result = build_result(config, hand_results(held), "transferlab ops experiment learn", 200, 2)
    assert result.arms["sft"].held_out_success.estimate == pytest.approx(0.25)
    assert result.arms["rl"].held_out_success.estimate == pytest.approx(1.0)
    assert result.arms["rl"].n_episodes == 2 * 2 * config.eval_episodes
    c = result.comparison("rl - sft")
    assert c.estimate == pytest.approx(0.75) and (c.cluster, c.n_clusters) == ("seed", 2)
    assert {(x.cluster, x.n_clusters) for x in result.comparisons} == {("seed", 2), ("seed+task", 4)}
    assert result.comparison("rft - sft").estimate == pytest.approx(0.75 - 0.25)
    assert result.comparison("rl - rft").estimate == pytest.approx(1.0 - 0.75)
    assert (result.arms["rft"].model_extra or {})["data_size"] == [5, 5]
    sft = result.arms["sft"].model_extra
    assert sft is not None
    assert sft["rubric"]["estimate"] == pytest.approx(2.0) and sft["rubric_per_seed"] == [0.0, 4.0]
    assert sft["diagnosis"]["format"] == pytest.approx(0.75)
    assert sft["diagnosis"]["false_blame_share"] == pytest.approx(3 / 4)  # 4 reports, 1 win
    assert result.settings["tasks"] == {"train": 200, "held_out": 2, "rl": 200 - config.sft_tasks}
    series = curve_series(result)
    # episodes 0 = the SFT policy's mean over seeds, then each curve point's mean over seeds
    assert next(iter(series["success"].values())).y == [0.25, 0.5, 1.0]
    assert next(iter(series["rubric"].values())).x == [0, 4, 8]


def test_rl_after_rft_is_compared_with_both_of_its_stages_and_its_curve_starts_at_rft() -> None:
    config = OpsLearnConfig(seeds=[0, 1], arms=["sft", "rft", "rft_rl"])
    held = {
        "sft": [[0.0, 0.0], [0.0, 1.0]],
        "rft": [[1.0, 0.0], [1.0, 0.0]],
        "rft_rl": [[1.0, 1.0], [1.0, 0.0]],
    }
    result = build_result(config, hand_results(held), "x", 200, 2)
    assert [c.name for c in result.comparisons if c.cluster == "seed"] == [
        "rft - sft",
        "rft_rl - sft",
        "rft_rl - rft",
    ]
    assert result.comparison("rft_rl - sft").estimate == pytest.approx(0.75 - 0.25)
    assert result.comparison("rft_rl - rft").estimate == pytest.approx(0.75 - 0.5)
    [curve] = curve_series(result)["success"].values()
    # SFT at 0 episodes, RFT after its 8, then RL's points after 4 and 8 more
    assert (curve.x, curve.y) == ([0, 8, 12, 16], [0.25, 0.5, 0.5, 0.75])


def test_a_run_that_did_not_improve_says_pipeline_ran() -> None:
    held = {"sft": [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], "rl": [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]}
    result = build_result(OpsLearnConfig(seeds=[0, 1, 2]), hand_results(held), "x", 200, 2)
    assert [c.name for c in result.comparisons] == ["rl - sft", "rl - sft"]  # only the arms that ran
    sentence = result.comparison("rl - sft").sentence()
    assert "pipeline ran" in sentence and "improved" not in sentence


def test_per_task_means_consecutive_episodes() -> None:
    assert per_task([1.0, 0.0, 1.0, 1.0], 2) == [0.5, 1.0]


def test_report_diagnosis_of_the_expert_episode() -> None:
    from transferlab.comparison.ops_training import shared_tokenizer

    train, _ = ops_tasks(1, 1)
    tokenizer = shared_tokenizer(train, 400)
    [traj] = make_ops_sft_data(tokenizer, train)
    score = rubric_of(traj)
    ev = OpsEval(
        task_ids=[train[0].task_id],
        rubric=[score],
        success=[float(score >= 8)],
        habits={},
        trajectories=[traj],
    )
    d = report_diagnosis(train, ev)
    assert d["episodes"] == 1 and d["actions"] == len(traj.steps) == d["actions_ok"]
    assert (d["reported"], d["cause_named"], d["false_blame"]) == (1, 1, 0)
    assert d["success"] == int(score >= 8) == 1  # the expert's report passes the rubric


def test_config_rules_name_the_fix() -> None:
    with pytest.raises(ConfigError, match=re.escape("sft_tasks (40) must be below train_tasks (40)")):
        OpsLearnConfig(train_tasks=40, sft_tasks=40)
    rl = OPS_LEARN_PRESETS["cpu"].rl.model_copy(update={"env_factory": None})
    with pytest.raises(ConfigError, match=re.escape("rl.env_factory")):
        OpsLearnConfig(rl=rl)
    with pytest.raises(ConfigError, match=re.escape("arms must hold 'sft' once")):
        OpsLearnConfig(arms=["rl", "rft"])
    with pytest.raises(ConfigError, match=re.escape("arm 'rft_rl' trains from the RFT policy: add 'rft'")):
        OpsLearnConfig(arms=["sft", "rft_rl"])
    with pytest.raises(
        ConfigError, match=re.escape("rft.rounds x rft.samples_per_task = 12 does not divide")
    ):
        OpsLearnConfig(arms=["sft", "rft"], rft={"rounds": 3, "samples_per_task": 4})  # 1024 RL episodes
    OpsLearnConfig(rft={"rounds": 3, "samples_per_task": 4})  # no RFT arm (a run saved before it): no rule
    with pytest.raises(ConfigError, match=re.escape("arms must hold 'sft' once")):
        OpsLearnConfig(arms=["sft", "sft_forced"])  # a control and nothing trained
    every = ["sft", "sft_forced", "rl", "rft", "rft_rl"]
    assert OPS_LEARN_PRESETS["cpu"].arms == every == OPS_LEARN_PRESETS["smoke"].arms


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["ops", "experiment", *args])


def test_smoke_preset_writes_a_valid_result_and_resume_keeps_finished_arms(tmp_path: Path) -> None:
    runs, report = tmp_path / "runs", tmp_path / "report"
    out = _invoke("learn", "--preset", "smoke", "--runs-root", str(runs), "--report-dir", str(report))
    assert out.exit_code == 0, out.output
    [run_dir] = (runs / "ops-learn").iterdir()
    result = read_result(run_dir / "result.json")
    assert read_result(report) == result
    assert result.experiment == "ops-learn" and result.seeds == [0]
    assert result.command.startswith("transferlab ops experiment learn --preset smoke")
    smoke = OPS_LEARN_PRESETS["smoke"]
    for arm in result.arms.values():
        assert arm.n_episodes == smoke.held_out_tasks * smoke.eval_episodes
    rl = result.arms["rl"].model_extra
    assert rl is not None
    assert [p["step"] for p in rl["curve"][0]] == list(range(1, smoke.rl.steps + 1))  # curve_every=1
    assert rl["training_episodes"] == [smoke.rl.steps * smoke.rl.tasks_per_step * smoke.rl.group_size]
    rft = result.arms["rft"].model_extra
    assert rft is not None and rft["training_episodes"] == rl["training_episodes"]  # the same budget
    assert len(rft["train_success"][0]) == smoke.rft.rounds
    assert (run_dir / "arms" / "rft-seed0" / "policy" / "config.json").is_file()  # saved for later use
    markdown = (report / "report.md").read_text().replace("\\", "")
    for name in ("rl - sft", "rft - sft", "rl - rft", "rft_rl - sft", "rft_rl - rft", "rft - sft_forced"):
        line = result.comparison(name).sentence()
        assert line in markdown and line in out.output
    # the forced-report control: the same SFT policy, every episode at the step limit opens a report
    forced = result.arms["sft_forced"].model_extra
    assert forced is not None and "success_given_report" in forced["diagnosis"]
    assert forced["diagnosis"]["reported"] >= (result.arms["sft"].model_extra or {})["diagnosis"]["reported"]
    assert result.model_extra is not None and result.model_extra["scored_split"] == "validation"
    prov = result.model_extra["provenance"]  # where the result came from, written with it
    assert prov["command"] == result.command and prov["wall_s"] > 0 and "torch" in prov["packages"]
    assert {"git_commit", "git_dirty", "machine", "torch_threads"} <= set(prov)
    assert (report / "figures" / "curve_success.png").is_file()

    sft_result = run_dir / "arms" / "sft-seed0" / "result.json"
    before = (sft_result.stat().st_mtime_ns, sft_result.read_text())
    (run_dir / "arms" / "rl-seed0" / "result.json").unlink()
    again = _invoke("learn", "--resume", str(run_dir), "--runs-root", str(runs))
    assert again.exit_code == 0, again.output
    assert (sft_result.stat().st_mtime_ns, sft_result.read_text()) == before
    assert read_result(run_dir / "result.json").arms["sft"] == result.arms["sft"]
    resumed = read_result(run_dir / "result.json").arms["rl"]
    assert resumed.held_out_success == result.arms["rl"].held_out_success  # from the final checkpoint
    assert (resumed.model_extra or {})["curve"] == rl["curve"]  # the points already measured are kept


def test_bad_inputs_are_one_error_line(tmp_path: Path) -> None:
    bad = OPS_LEARN_PRESETS["smoke"].model_dump(mode="json")
    bad["sft_tasks"] = 9
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    out = _invoke("learn", "--config", str(path), "--runs-root", str(tmp_path))
    assert out.exit_code == 2 and "error:" in out.output and "sft_tasks (9) must be below" in out.output
    out = _invoke("transfer", "--preset", "smoke", "--only-seeds", "7", "--runs-root", str(tmp_path))
    assert out.exit_code == 2 and "--only-seeds 7" in out.output
    bad = {"seeds": [0], "threshold": 2.0}
    path.write_text(json.dumps(bad))
    out = _invoke("transfer", "--config", str(path), "--runs-root", str(tmp_path))
    assert out.exit_code == 2 and "error:" in out.output and "threshold" in out.output
    assert not (tmp_path / "ops-learn").exists() and not (tmp_path / "transfer").exists()


def test_rft_policy_fine_tunes_a_copy_on_rl_episodes_and_names_a_budget_that_does_not_divide(
    tmp_path: Path,
) -> None:
    import torch

    from transferlab.agent_rl.rft import RFTSettings
    from transferlab.agent_rl.sft import SFTConfig
    from transferlab.agent_rl.start import open_experiment
    from transferlab.comparison.ops_learn import EXPERIMENT, Setup

    smoke = OPS_LEARN_PRESETS["smoke"]  # 2 steps x 2 tasks x G=2 = 8 RL episodes
    exp, config, _ = open_experiment(EXPERIMENT, smoke, tmp_path, None, None, shared=True)
    try:
        setup = Setup(exp, config, None)
        sft = setup.sft_policy(0)
        before = {k: v.clone() for k, v in sft.state_dict().items()}
        rft = RFTSettings(rounds=2, samples_per_task=2, sft=SFTConfig(steps=2, batch_size=2))
        # without an anchor the data is the policy's own successes only: none at this size, no update
        own, stats = setup.rft_policy(0, rft)
        assert [s.round for s in stats] == [0, 1]
        assert stats[-1].data_size == sum(s.new_trajectories for s in stats)
        if stats[-1].data_size == 0:
            assert all(torch.equal(v, own.state_dict()[k]) for k, v in before.items())
        # an anchor of 1 demonstration: it is in every round's data, successes are added to it
        model, stats = setup.rft_policy(0, rft.model_copy(update={"demo_anchor": 1}))
        assert stats[-1].data_size == 1 + sum(s.new_trajectories for s in stats)
        assert all(torch.equal(v, sft.state_dict()[k]) for k, v in before.items())  # SFT untouched
        assert any(not torch.equal(v, model.state_dict()[k]) for k, v in before.items())
        with pytest.raises(ValueError, match=r"as many episodes as RL \(8 = .* = 6 does not divide it"):
            setup.rft_policy(0, rft.model_copy(update={"rounds": 3}))
    finally:
        exp.run.release()


def test_a_run_of_sft_and_rft_only_reports_without_an_rl_curve(tmp_path: Path) -> None:
    config = OPS_LEARN_PRESETS["smoke"].model_copy(update={"arms": ["sft", "rft"]}).model_dump(mode="json")
    path, report = tmp_path / "config.json", tmp_path / "report"
    path.write_text(json.dumps(config))
    out = _invoke(
        "learn", "--config", str(path), "--runs-root", str(tmp_path / "runs"), "--report-dir", str(report)
    )
    assert out.exit_code == 0, out.output
    result = read_result(report)
    assert set(result.arms) == {"sft", "rft"}
    assert {c.name for c in result.comparisons} == {"rft - sft"}
    assert not (report / "figures" / "curve_success.png").exists()
    assert (
        "RL: GRPO" in (report / "report.md").read_text() and "(not run)" in (report / "report.md").read_text()
    )


def test_rl_after_rft_remakes_an_unsaved_rft_policy_bit_for_bit(tmp_path: Path) -> None:
    """A run from before the RFT policy was saved, resumed with the rft_rl arm, trains GRPO from the
    policy the rft arm scored: expert iteration re-made from the saved SFT policy is the same."""
    import torch

    from transferlab.agent_rl.policies.model import load_policy

    runs = tmp_path / "runs"
    out = _invoke("learn", "--preset", "smoke", "--runs-root", str(runs))
    assert out.exit_code == 0, out.output
    [run_dir] = (runs / "ops-learn").iterdir()
    first = read_result(run_dir / "result.json")
    saved = run_dir / "arms" / "rft-seed0" / "policy"
    before = load_policy(saved, device="cpu", dtype="float32")[0].state_dict()
    for path in (saved, run_dir / "arms" / "rft_rl-seed0"):
        shutil.rmtree(path)
    again = _invoke("learn", "--resume", str(run_dir), "--runs-root", str(runs))
    assert again.exit_code == 0, again.output
    after = load_policy(saved, device="cpu", dtype="float32")[0].state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    resumed = read_result(run_dir / "result.json")
    assert resumed.arms["rft"] == first.arms["rft"]  # kept, not re-run
    assert resumed.arms["rft_rl"].held_out_success == first.arms["rft_rl"].held_out_success

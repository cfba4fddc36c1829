"""agent-learn: the result by hand, the budget rule, and the smoke preset end to end with --resume."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transferlab.agent_rl.rft import RFTSettings, rft_tasks
from transferlab.agent_rl.rl import RLConfig
from transferlab.cli import app
from transferlab.coding_rl.experiments.agent_learn import (
    AgentLearnConfig,
    build_result,
    layers,
    rft_tasks_per_round,
    rl_episodes,
    seconds_per_seed,
    task_splits,
    undemonstrated,
)
from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS
from transferlab.platform.config import ConfigError
from transferlab.platform.metrics import read_metrics
from transferlab.platform.results import read_result


def diag(actions: int, valid: int, episodes: int, edits: int, wins: int) -> dict[str, Any]:
    return {
        "actions": actions,
        "valid_actions": valid,
        "episodes": episodes,
        "first_edit_ok": edits,
        "successes": wins,
        "endings": {"submit": wins, "steps": episodes - wins},
    }


def hand_results(held: dict[str, list[list[float]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for arm, per_seed in held.items():
        for s, values in enumerate(per_seed):
            row: dict[str, Any] = {
                "held_out": values,
                "diagnosis": diag(10, 8, 2, 1, int(sum(values))),
                "seconds": 60.0 * (s + 1),
            }
            if arm != "sft":
                row.update(training_episodes=64, train_success=[0.5])
            if arm == "rft":
                row.update(tasks_per_round=8, data_size=12)
            out[f"{arm}-seed{s}"] = row
    return out


def test_result_by_hand_comparisons_layers_and_wall_time() -> None:
    config = AgentLearnConfig(seeds=[0, 1])
    held = {
        "sft": [[0.0, 0.0], [0.0, 1.0]],
        "rl": [[1.0, 1.0], [1.0, 1.0]],
        "rft": [[1.0, 0.0], [0.0, 0.0]],
    }
    result = build_result(config, hand_results(held), "transferlab coding experiment agent-learn", 40, 2)
    assert set(result.arms) == {"sft", "rl", "rft"}
    assert result.arms["rl"].held_out_success.estimate == pytest.approx(1.0)
    assert result.arms["sft"].n_episodes == 2 * 2 * config.eval_episodes
    rl_sft = result.comparison("rl - sft")
    assert rl_sft.estimate == pytest.approx(0.75) and (rl_sft.cluster, rl_sft.n_clusters) == ("seed", 2)
    names = {(c.name, c.cluster, c.n_clusters) for c in result.comparisons}
    for name in ("rl - sft", "rl - rft", "rft - sft"):
        assert (name, "seed", 2) in names and (name, "seed+task", 4) in names
    rft_sft = next(c for c in result.comparisons if c.name == "rft - sft" and c.cluster == "seed+task")
    assert rft_sft.estimate == pytest.approx(0.0) and rft_sft.ci[0] < 0 < rft_sft.ci[1]
    # a (seed, task) interval holds the trained policies fixed: it carries no verdict
    assert "conditional on these trained policies" in rft_sft.sentence()
    assert "improved" not in rft_sft.sentence() and "pipeline ran" not in rft_sft.sentence()
    extra = result.arms["rl"].model_extra
    assert extra is not None
    assert extra["diagnosis"]["format"] == pytest.approx(0.8)
    assert extra["diagnosis"]["single_step"] == pytest.approx(0.5)
    assert extra["diagnosis"]["sequence"] == pytest.approx(4 / 4)
    assert seconds_per_seed(result) == [180.0, 360.0]
    assert result.settings["tasks"] == {"train": 40, "held_out": 2, "rl": 40}  # RL practises on all 40
    practised = build_result(config, hand_results(held), "x", 40, 2, n_practice=30)
    assert practised.settings["tasks"]["rl"] == 30
    # the split scored and the split the settings were tuned on sit next to the other keys
    assert result.model_extra == {"scored_split": "validation", "tuned_on": "validation"}
    on_test = build_result(config.model_copy(update={"eval_split": "test"}), hand_results(held), "x", 40, 2)
    assert on_test.model_extra == {"scored_split": "test", "tuned_on": "validation"}
    assert on_test.model_dump(mode="json")["scored_split"] == "test"  # written to result.json
    assert result.settings["budget"]["rl_episodes"] == result.settings["budget"]["rft_episodes"]


def test_layers_pool_counts_over_seeds() -> None:
    pooled = layers([diag(10, 5, 4, 1, 0), diag(30, 30, 4, 3, 2)])
    assert pooled["format"] == pytest.approx(35 / 40)
    assert pooled["single_step"] == pytest.approx(4 / 8)
    assert pooled["sequence"] == pytest.approx(2 / 8)
    assert pooled["endings"] == {"steps": 6, "submit": 2}


def test_rft_budget_equals_rl_budget_in_every_preset() -> None:
    for name, config in AGENT_LEARN_PRESETS.items():
        per_round = config.rft.rounds * config.rft.samples_per_task
        assert per_round * rft_tasks_per_round(config) == rl_episodes(config), name


def test_a_budget_rft_cannot_match_is_refused_naming_the_fix() -> None:
    rl = RLConfig(mode="agent", steps=3, tasks_per_step=1, group_size=2, max_steps=7, max_context=512)
    with pytest.raises(ConfigError, match=re.escape("rft.rounds or rft.samples_per_task")):
        AgentLearnConfig(rl=rl, rft=RFTSettings(rounds=4, samples_per_task=1))
    with pytest.raises(ConfigError, match=re.escape("rl.mode must be 'agent'")):
        AgentLearnConfig(
            rl=rl.model_copy(update={"mode": "code"}), rft=RFTSettings(rounds=3, samples_per_task=2)
        )
    with pytest.raises(ConfigError, match=re.escape("set rl.max_steps >= 7")):
        AgentLearnConfig(
            rl=rl.model_copy(update={"max_steps": 3}), rft=RFTSettings(rounds=3, samples_per_task=2)
        )
    rft = RFTSettings(rounds=3, samples_per_task=2)
    with pytest.raises(ConfigError, match=re.escape("set workflow='lines' or recovery_every=0")):
        AgentLearnConfig(rl=rl, rft=rft, workflow="short", recovery_every=3)
    with pytest.raises(ConfigError, match=re.escape("set rl.max_steps >= 5")):  # a recovery is 5 calls
        AgentLearnConfig(
            rl=rl.model_copy(update={"max_steps": 4}), rft=rft, workflow="lines", recovery_every=3
        )


def test_the_split_settings_name_the_fix() -> None:
    rl = RLConfig(mode="agent", steps=3, tasks_per_step=1, group_size=2, max_steps=7, max_context=512)
    rft = RFTSettings(rounds=3, samples_per_task=2)
    assert AgentLearnConfig(rl=rl, rft=rft).eval_split == "validation"  # pilots score validation
    with pytest.raises(ConfigError, match=re.escape("set validation_fraction and test_fraction")):
        AgentLearnConfig.from_dict({"held_out_fraction": 0.2})  # an old config: one clear error
    with pytest.raises(ConfigError, match=re.escape("validation_fraction + test_fraction must be below 0.8")):
        AgentLearnConfig(rl=rl, rft=rft, validation_fraction=0.4, test_fraction=0.4)
    with pytest.raises(ConfigError, match="eval_split"):
        AgentLearnConfig(rl=rl, rft=rft, eval_split="held-out")


def test_undemonstrated_tasks_share_no_module_with_the_demonstrated_ones() -> None:
    from types import SimpleNamespace

    def task(path: str) -> Any:
        return SimpleNamespace(meta=SimpleNamespace(source_path=path))

    train = [task(p) for p in ["src/a.py", "src/a.py", "src/b.py", "src/b.py", "src/c.py", "src/d.py"]]
    # the first 3 tasks show a and b; b's second task is cut off from RL too, as it shares b's file
    assert [t.meta.source_path for t in undemonstrated(train, 3)] == ["src/c.py", "src/d.py"]
    assert undemonstrated(train, 6) == []


def test_undemonstrated_rl_tasks_need_demo_tasks() -> None:
    rl = RLConfig(mode="agent", steps=3, tasks_per_step=1, group_size=2, max_steps=7, max_context=512)
    rft = RFTSettings(rounds=3, samples_per_task=2)
    with pytest.raises(ConfigError, match=re.escape("set demo_tasks below the number of training tasks")):
        AgentLearnConfig(rl=rl, rft=rft, rl_tasks="undemonstrated")
    assert AgentLearnConfig(rl=rl, rft=rft, rl_tasks="undemonstrated", demo_tasks=4).demo_tasks == 4


def test_rft_tasks_cycle_a_seeded_shuffle() -> None:
    train: list[Any] = [f"t{i}" for i in range(5)]
    drawn: list[Any] = rft_tasks(train, 12, seed=1)
    assert len(drawn) == 12 and sorted(drawn[:5]) == train and drawn[5:10] == drawn[:5]
    assert rft_tasks(train, 12, seed=1) == drawn


def test_bad_config_file_is_one_error_line(tmp_path: Path) -> None:
    bad = AGENT_LEARN_PRESETS["smoke"].model_dump(mode="json")
    bad["rft"]["rounds"] = 3  # 8 episodes of RL; 3 x 2 does not divide them
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    result = CliRunner().invoke(
        app, ["coding", "experiment", "agent-learn", "--config", str(path), "--runs-root", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "error:" in result.output and "rft.rounds or rft.samples_per_task" in result.output


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["coding", "experiment", "agent-learn", *args])


def test_smoke_preset_writes_a_valid_result_and_resume_keeps_finished_arms(tmp_path: Path) -> None:
    runs, report = tmp_path / "runs", tmp_path / "report"
    out = _invoke("--preset", "smoke", "--runs-root", str(runs), "--report-dir", str(report))
    assert out.exit_code == 0, out.output
    [run_dir] = (runs / "coding-agent-learn").iterdir()
    result = read_result(run_dir / "result.json")
    assert read_result(report) == result
    assert result.experiment == "coding-agent-learn" and result.seeds == [0]
    assert result.command.startswith("transferlab coding experiment agent-learn --preset smoke")
    assert set(result.arms) == {"sft", "rl", "rft"}
    n_held = result.settings["tasks"]["held_out"]
    for arm in result.arms.values():
        assert arm.n_episodes == n_held  # smoke: 1 seed x 1 episode per held-out task
    rl, rft = result.arms["rl"].model_extra, result.arms["rft"].model_extra
    assert rl is not None and rft is not None
    assert rl["training_episodes"] == rft["training_episodes"] == [rl_episodes(AGENT_LEARN_PRESETS["smoke"])]
    assert {(c.name, c.cluster) for c in result.comparisons} == {
        (name, cluster) for name in ("rl - sft", "rl - rft", "rft - sft") for cluster in ("seed", "seed+task")
    }
    for c in result.comparisons:
        assert c.n_clusters == (1 if c.cluster == "seed" else n_held) and c.mde >= 0
    markdown = (report / "report.md").read_text().replace("\\", "")  # Markdown escapes
    for c in result.comparisons:
        if c.cluster == "seed":
            assert c.sentence() in markdown and c.sentence() in out.output
    for name, arm in result.arms.items():
        h = arm.held_out_success
        assert f"| {name} | {h.estimate:.3f} [{h.ci[0]:.3f}, {h.ci[1]:.3f}] | {arm.n_episodes} |" in markdown
    assert f"RL {rl['training_episodes'][0]}, RFT {rft['training_episodes'][0]}" in markdown
    sft_arm = json.loads((run_dir / "arms" / "sft-seed0" / "result.json").read_text())
    assert sft_arm["demonstrations"] == 3 and sft_arm["recovery_demonstrations"] == 1  # recovery_every=2
    assert result.settings["tasks"]["rl"] == 3  # the undemonstrated modules' tasks
    extra = result.model_extra or {}
    assert (extra["scored_split"], extra["tuned_on"]) == ("validation", "validation")
    assert extra["provenance"]["command"] == result.command  # written with the result
    assert n_held == len(task_splits(AGENT_LEARN_PRESETS["smoke"]).validation)
    sft_metrics = read_metrics(run_dir / "arms" / "sft-seed0" / "metrics.parquet")
    copy_steps = sorted(sft_metrics[sft_metrics.key == "sft/copy_accuracy"].step)
    assert copy_steps == sorted(sft_metrics[sft_metrics.key == "sft/loss"].step) == [0, 1, 2]  # copy_weight

    # resume: the finished arms are kept (not recomputed), the missing one is computed again
    kept = {arm: (run_dir / "arms" / f"{arm}-seed0" / "result.json") for arm in ("sft", "rl")}
    before = {arm: (p.stat().st_mtime_ns, p.read_text()) for arm, p in kept.items()}
    (run_dir / "arms" / "rft-seed0" / "result.json").unlink()
    assert (run_dir / "arms" / "rft-seed0" / "rounds" / "rounds.pt").is_file()  # every round saved
    again = _invoke("--resume", str(run_dir), "--runs-root", str(runs))
    assert again.exit_code == 0, again.output
    assert {arm: (p.stat().st_mtime_ns, p.read_text()) for arm, p in kept.items()} == before
    assert (run_dir / "arms" / "rft-seed0" / "result.json").is_file()
    resumed = read_result(run_dir / "result.json")
    assert resumed.arms["sft"] == result.arms["sft"] and resumed.arms["rl"] == result.arms["rl"]
    # the RFT arm continued after its saved rounds (all of them): the same policy, the same scores
    assert resumed.arms["rft"].held_out_success == result.arms["rft"].held_out_success

    # the held-out values are evaluate_agent's episodes: the saved SFT policy scores the same there
    from transferlab.agent_rl.policies.model import load_policy
    from transferlab.coding_rl.experiments.common import evaluate_agent, opened_sandbox

    smoke = AGENT_LEARN_PRESETS["smoke"]
    held_tasks = task_splits(smoke).of(smoke.eval_split)
    model, tokenizer = load_policy(run_dir / "arms" / "sft-seed0" / "policy", device="cpu", dtype="float32")
    with opened_sandbox() as sandbox:
        direct = evaluate_agent(
            model,
            tokenizer,
            held_tasks,
            sandbox,
            episodes_per_task=smoke.eval_episodes,
            temperature=smoke.eval_temperature or smoke.rl.temperature,
            max_new_tokens=smoke.rl.max_new_tokens,
            max_context=smoke.rl.max_context,
            max_steps=smoke.rl.max_steps,
        )
    saved = json.loads((run_dir / "arms" / "sft-seed0" / "result.json").read_text())
    assert saved["held_out"] == direct


@pytest.mark.slow
def test_jobs_split_the_seeds_over_processes_and_give_one_process_s_result(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    out = _invoke("--preset", "smoke", "--seeds", "1,2", "--jobs", "2", "--runs-root", str(runs))
    assert out.exit_code == 0, out.output
    [shared] = (runs / "coding-agent-learn").iterdir()
    result = read_result(shared / "result.json")
    assert result.seeds == [1, 2] and json.loads((shared / "meta.json").read_text())["status"] == "finished"
    alone = _invoke("--preset", "smoke", "--seeds", "2", "--runs-root", str(tmp_path / "alone"))
    assert alone.exit_code == 0, alone.output
    [single] = (tmp_path / "alone" / "coding-agent-learn").iterdir()
    for arm in ("sft", "rl", "rft"):
        a = json.loads((shared / "arms" / f"{arm}-seed2" / "result.json").read_text())
        b = json.loads((single / "arms" / f"{arm}-seed2" / "result.json").read_text())
        assert a["held_out"] == b["held_out"] and a["diagnosis"] == b["diagnosis"], arm


SIGTERM_SCRIPT = '''
import os, sys, time
from pathlib import Path
from rich.console import Console
from transferlab.coding_rl.experiments.agent_learn import seeds_in_processes
from transferlab.platform.config import BaseConfig
from transferlab.platform.harness import Experiment


class Seeds(BaseConfig):
    seeds: list[int] = [0, 1]
    """Two seeds, one per process."""


def job(config, run_dir, runs_root, seeds):
    Path(runs_root, f"pid-{seeds[0]}").write_text(str(os.getpid()))
    time.sleep(300)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    exp, config = Experiment.open("sigterm-check", Seeds(), root, None, Console(quiet=True), True)
    with exp.run, exp.progress:
        bar = exp.progress.add_task("seeds", total=2)
        seeds_in_processes(exp, config, root, 2, bar, job=job, arms=("a",))
'''


def _gone(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` has ended (and been reaped) within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_sigterm_to_the_parent_stops_the_seed_processes(tmp_path: Path) -> None:
    """`kill PID` of a --jobs run ends its seed processes too (they sleep 300 s if left running)."""
    script = tmp_path / "jobs.py"
    script.write_text(SIGTERM_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    try:
        pid_files = [tmp_path / "pid-0", tmp_path / "pid-1"]
        deadline = time.monotonic() + 120
        while not all(f.exists() for f in pid_files) and time.monotonic() < deadline:
            assert parent.poll() is None, "the parent ended before its seed processes started"
            time.sleep(0.2)
        children = [int(f.read_text()) for f in pid_files]
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 128 + signal.SIGTERM
        assert all(_gone(pid, within_s=30) for pid in children)
    finally:
        parent.kill()
        for f in tmp_path.glob("pid-*"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(f.read_text()), signal.SIGKILL)


def test_rft_demo_anchor_is_a_fixed_seeded_draw_and_keep_demos_is_refused() -> None:
    import doctest

    from transferlab.agent_rl.rft import RFTSettings, demo_anchor
    from transferlab.coding_rl.experiments import agent_learn

    demos = list(range(100))
    picked = demo_anchor(demos, 8, seed=3)
    assert len(picked) == 8 and picked == sorted(picked) and picked == demo_anchor(demos, 8, seed=3)
    assert picked != demo_anchor(demos, 8, seed=4)
    assert RFTSettings().demo_anchor == 0  # the policy's own successes only, by default
    with pytest.raises(ValueError, match=r"keep_demos was replaced by rft\.demo_anchor"):
        RFTSettings.model_validate({"keep_demos": True})
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(agent_learn.demo_anchor, "demo_anchor", globs={"demo_anchor": demo_anchor}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0

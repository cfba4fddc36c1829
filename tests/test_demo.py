"""`transferlab demo`: the seed tasks graded in a real sandbox and recorded as a run."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.demo import SECTIONS, DemoConfig, DemoContext, DemoResult, DemoSection, run_demo
from transferlab.platform.config import load_config
from transferlab.platform.metrics import read_metrics
from transferlab.platform.runstore import RunStore

pytestmark = pytest.mark.timeout(1200)  # the demo fixture runs every section, training included

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the forkserver backend needs root"
)
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/transferlab-test-docker.sock"}


SMALL = {
    "customers": 1000,
    "sim_train_episodes": 128 * 16,
    "offline_steps": 400,
    "compare_preset": "smoke",
}
"""Every section, smaller than `transferlab demo` runs it (the same code; a year of logs all the same)."""


def quiet_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, force_terminal=False), buf


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, str]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("the forkserver backend needs root")
    console, buf = quiet_console()
    config = DemoConfig(runs_root=tmp_path_factory.mktemp("runs"), **SMALL)
    result = run_demo(console=console, config=config)
    return result, buf.getvalue()


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_writes_a_run_directory(demo_run: tuple[DemoResult, str]) -> None:
    result, _ = demo_run
    run_dir = result.run_dir
    assert run_dir.parent.name == "demo"
    for name in (
        "config.json",
        "meta.json",
        "metrics.parquet",
        "artifacts/grades.json",
        "artifacts/summary.json",
    ):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"
    config = load_config(run_dir / "config.json")
    assert isinstance(config, DemoConfig)
    assert config.backend == "forkserver"
    assert config.runs_root == run_dir.parent.parent


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_metrics(demo_run: tuple[DemoResult, str]) -> None:
    result, _ = demo_run
    metrics = read_metrics(result.run_dir / "metrics.parquet")
    rewards = metrics[metrics["key"] == "sandbox/reward"]
    assert list(rewards["step"]) == [0, 1, 2, 3, 4, 5]  # one step per seed solution
    assert {8.0, 12.0} <= set(rewards["value"])
    assert list(rewards["value"])[:2] == [8.0, 12.0]  # quick sort: buggy, fixed
    pass_rates = metrics[metrics["key"] == "sandbox/pass_rate"]
    assert list(pass_rates["value"])[:2] == [pytest.approx(0.6), 1.0]
    advantage = metrics[metrics["key"] == "sandbox/design_note_advantage"]
    assert list(advantage["value"]) == [0.5]


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_grades_artifact(demo_run: tuple[DemoResult, str]) -> None:
    result, _ = demo_run
    grades: list[dict[str, Any]] = json.loads((result.run_dir / "artifacts/grades.json").read_text())
    assert len(grades) == 6
    by_file = {g["solution_file"]: g["grade"] for g in grades}
    assert (by_file["quick_sort_buggy.py"]["status"], by_file["quick_sort_buggy.py"]["reward"]) == (
        "failed",
        8.0,
    )
    assert (by_file["quick_sort_fixed.py"]["status"], by_file["quick_sort_fixed.py"]["reward"]) == (
        "passed",
        12.0,
    )
    assert by_file["binary_search_fixed.py"]["status"] == "passed"
    assert by_file["binary_search_buggy.py"]["status"] == "timeout"  # low = mid loops forever
    for grade in by_file.values():
        assert {"status", "passed", "total", "reward", "reward_components", "tests"} <= set(grade)


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_summary_and_output(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    assert result.ok
    summary = result.summaries["coding: seed tasks in the sandbox"]
    assert summary["backend"] == "forkserver" and summary["fallback"] is None
    assert (summary["design_note_reward"], summary["design_note_advantage"]) == (8.0, 0.5)
    saved = json.loads((result.run_dir / "artifacts/summary.json").read_text())
    assert saved == result.summaries
    assert "coding: seed tasks in the sandbox" in output
    assert "reward 8.0" in output and "expected reward of 7.5" in output and "+0.5" in output
    assert str(result.run_dir) in output
    for label in ("quick sort, fixed", "binary search, fixed"):
        assert label in output


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_trains_a_policy(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    training = result.summaries["coding: a tiny policy trained with SFT then GRPO"]
    assert training["held_out_success_untrained"] == 0.0  # random weights write no valid code
    assert training["held_out_success_sft"] > training["held_out_success_untrained"]
    assert training["held_out_success_sft_grpo"] > training["held_out_success_untrained"]
    assert "held-out success" in output and ("improved held-out" in output or "pipeline ran" in output)
    arms = Path(training["run_dir"]) / "arms"
    assert "sft/loss" in set(read_metrics(arms / "sft-seed0" / "metrics.parquet")["key"])
    keys = set(read_metrics(arms / "grpo-seed0" / "metrics.parquet")["key"])
    assert {"rollout/success_rate", "loss/policy", "kl/ref", "train/frac_reward_zero_std"} <= keys
    assert (arms / "grpo-seed0" / "checkpoint.pt").is_file()


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_trains_a_campaign_policy_in_the_learned_simulator(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    section = result.summaries["ecommerce: logs, a simulator learned from them, a policy trained in it"]
    assert section["campaigns_logged"] > 50 and section["heldout_auc"] > 0.6
    for where in ("value_in_sim", "value_in_world"):
        assert set(section[where]) >= {"trained", "marketer", "no_campaign"}
    assert "value in sim" in output and "value in world" in output and "sim-to-real gap" in output
    out = Path(section["dir"])
    for name in ("logs/campaigns.parquet", "simulator/params.npz", "train/policy.pt", "train/result.json"):
        assert (out / name).is_file(), name
    keys = set(read_metrics(result.run_dir / "metrics.parquet")["key"])
    assert {"demo/world/trained/value", "demo/sim/marketer/value"} <= keys


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_trains_offline_learners_and_values_them(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    section = result.summaries["ecommerce: offline RL from the logs, judged by OPE and in the world"]
    assert section["rows"] == 360  # a year of logs: 12 whole 30-day episodes
    assert set(section["world"]) == {"discrete_cql", "discrete_bc", "marketer", "no_campaign"}
    # doing nothing is a selection candidate too
    assert set(section["ope_sndr"]) == {"discrete_cql", "discrete_bc", "no_campaign"}
    # the table shows OPE with intervals, coverage and the world value next to the marketer's
    assert "sndr" in output and "ESS" in output and "trusted" in output and "marketer" in output
    assert "selected by the sndr lower bound" in output
    # an untrusted estimate is never selected
    for name, trusted in section["trusted"].items():
        if not trusted:
            assert section["selected"] != name
            assert f"UNTRUSTWORTHY {name}" in output
    out = Path(section["dir"])
    for name in ("config.json", "result.json", "report.md", "learners/discrete_cql/model.d3"):
        assert (out / name).is_file(), name
    keys = set(read_metrics(result.run_dir / "metrics.parquet")["key"])
    assert {"demo/offline/discrete_cql/world", "demo/offline/marketer/world"} <= keys


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_queues_suggestions_for_review(demo_run: tuple[DemoResult, str]) -> None:
    from transferlab.human_review.service import ReviewService
    from transferlab.human_review.store import ReviewStore

    result, output = demo_run
    section = result.summaries["review: suggestions from the trained policies, queued for people"]
    assert set(section["queued"]) == {"ppo", "discrete_cql"}
    ids = [i for queued in section["queued"].values() for i in queued]
    assert len(ids) == section["pending"] == 6 and sum(section["risk"].values()) == 6
    assert f"review queue: {section['pending']} pending" in output
    assert f"\n  transferlab review serve --db {section['db']}\n" in output  # sign-in happens in the app
    assert (Path(section["market"]) / "market.json").is_file()
    service = ReviewService(ReviewStore(section["db"]))
    admin = service.authenticate("admin", "demo-admin")
    views = {v.id: v for v in service.list(admin, state="pending")}
    assert sorted(views) == sorted(ids)
    for sid in ids:
        assert {"orders", "gmv", "profit"} <= set(views[sid].evidence["predicted"])
    assert all(views[sid].evidence["ope"] is not None for sid in section["queued"]["discrete_cql"])
    assert service.authenticate("reviewer", "demo-reviewer").role == "reviewer"


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_ends_with_the_comparison_and_both_paths(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    section = result.summaries["compare: coding vs ecommerce, measured (transferlab compare)"]
    report = Path(section["report"])
    assert report.is_file() and report.parent == result.run_dir / "artifacts" / "compare"
    assert section["ops_scores"]["expert"] > section["ops_scores"]["random"]
    assert "环境确定性 determinism" in output
    tail = output[output.rindex("next") :]
    assert f"comparison report: {report}" in tail and "review app: transferlab review serve --db " in tail
    review = result.summaries["review: suggestions from the trained policies, queued for people"]
    assert len(review["reports"]) == 4 and "Rate reports" in output


@pytest.mark.slow  # the demo fixture runs every section
def test_demo_runs_the_agents(demo_run: tuple[DemoResult, str]) -> None:
    result, output = demo_run
    agents = result.summaries["coding: scripted agents in CodeRepair-v0"]
    assert agents["held_out"] > 0 and agents["tasks"]["survived"] >= 10
    assert agents["expert"]["success_rate"] == 1.0
    assert agents["naive"]["mean_return"] < agents["expert"]["mean_return"]
    assert agents["random"]["success_rate"] == 0.0
    assert (
        agents["seed_calculator_returns"]["naive"] < 0 < agents["seed_calculator_returns"]["expert"] == 35.5
    )
    assert (result.run_dir / "trajectories.parquet").is_file()
    assert "scripted agents on" in output


def test_demo_command_falls_back_to_subprocess(tmp_path: Path) -> None:
    """--backend docker with no Docker engine answering: the demo says so and uses subprocess."""
    result = CliRunner().invoke(
        app, ["demo", "--backend", "docker", "--runs-root", str(tmp_path), "--only", "1"], env=NO_ENGINE
    )
    assert result.exit_code == 0, result.output
    assert "falling back to --backend subprocess" in result.stdout
    [info] = RunStore(tmp_path).list_runs("demo")
    assert info.status == "finished"
    summary = json.loads((info.dir / "artifacts/summary.json").read_text())
    section = summary["coding: seed tasks in the sandbox"]
    assert section["backend"] == "subprocess"
    assert "docker backend is unavailable" in section["fallback"]
    rewards = read_metrics(info.dir / "metrics.parquet").query("key == 'sandbox/reward'")["value"]
    assert {8.0, 12.0} <= set(rewards)


def test_sections_are_pluggable(tmp_path: Path) -> None:
    seen: list[str] = []

    def extra(ctx: DemoContext) -> dict[str, Any]:
        seen.append(ctx.config.backend)
        ctx.run.logger.log(0, {"extra/value": 1.5})
        ctx.console.print("extra section ran")
        return {"value": 1.5, "ok": False}

    console, buf = quiet_console()
    result = run_demo("subprocess", tmp_path, console=console, sections=[DemoSection("extra", extra)])
    assert seen == ["subprocess"]
    assert result.summaries == {"extra": {"value": 1.5, "ok": False}}
    assert not result.ok
    assert "1. extra" in buf.getvalue() and "extra section ran" in buf.getvalue()
    metrics = read_metrics(result.run_dir / "metrics.parquet")
    assert list(metrics["key"]) == ["extra/value"]


def test_a_failing_section_marks_the_run_failed(tmp_path: Path) -> None:
    def broken(ctx: DemoContext) -> dict[str, Any]:
        raise RuntimeError("section exploded")

    console, _ = quiet_console()
    with pytest.raises(RuntimeError, match="section exploded"):
        run_demo("subprocess", tmp_path, console=console, sections=[DemoSection("broken", broken)])
    [info] = RunStore(tmp_path).list_runs("demo")
    assert info.status == "failed"
    assert "section exploded" in info.meta["error"]


def test_the_default_sections() -> None:
    assert [s.title for s in SECTIONS] == [
        "coding: seed tasks in the sandbox",
        "coding: scripted agents in CodeRepair-v0",
        "coding: a tiny policy trained with SFT then GRPO",
        "ecommerce: logs, a simulator learned from them, a policy trained in it",
        "ecommerce: offline RL from the logs, judged by OPE and in the world",
        "review: suggestions from the trained policies, queued for people",
        "compare: coding vs ecommerce, measured (transferlab compare)",
    ]


def test_demo_rejects_an_unknown_backend(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--backend", "nope", "--runs-root", str(tmp_path)])
    assert result.exit_code == 2
    assert not any(tmp_path.iterdir())

"""`transferlab compare` end to end on the `test` preset: the table, result.json and the report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.comparison.compare import (
    FAMILIES,
    LAYERS,
    PROPERTIES,
    QUESTION_FAMILIES,
    QUESTIONS,
)

runner = CliRunner()


def _iv(estimate: float, low: float, high: float) -> dict[str, float]:
    return {"estimate": estimate, "low": low, "high": high, "level": 0.95, "n": 54}


def _stage(success: float, query: float) -> dict[str, object]:
    habits = {"query_before_concluding": _iv(query, 0, 1), "check_before_reporting": _iv(0.5, 0, 1)}
    return {"success": _iv(success, 0.1, 0.5), "rubric": 4.0, "habits": habits}


def transfer_summary() -> dict[str, object]:
    """A hand-made transfer summary: scratch arm SFT 0.3 -> end 0.4, gain +0.1 over 0.5 CPU-hours."""
    arm = {
        "stages": {"sft": _stage(0.3, 0.6), "end": _stage(0.4, 0.8)},
        "episodes_to_threshold": [0.0, 32.0, None],
        "rl_gain": _iv(0.1, -0.05, 0.25),
        "ops_cpu_hours": 0.5,
        "nonflat_group_share": 0.7,
    }
    return {
        "threshold": 0.3,
        "arms": {"transfer": arm, "scratch": arm},
        "transfer_minus_scratch": _iv(0, -1, 1),
    }


def ops_learn_result(path: Path) -> None:
    """A hand-made ops-learn result: SFT 0/4 and 1/4 per seed, RL 4/4 and 3/4; RL takes 1800 s a seed."""
    from transferlab.comparison.ops_learn import OpsLearnConfig, build_result
    from transferlab.platform.results import write_result

    rows: dict[str, dict[str, object]] = {}
    for arm, per_seed in {
        "sft": [[0.0] * 4, [0.0, 0.0, 0.0, 1.0]],
        "rl": [[1.0] * 4, [1.0, 1.0, 1.0, 0.0]],
    }.items():
        for s, values in enumerate(per_seed):
            rows[f"{arm}-seed{s}"] = {
                "held_out": values,
                "rubric": values,
                "habits": {"query_before_concluding": 1.0},
                "diagnosis": dict.fromkeys(
                    (
                        "episodes",
                        "actions",
                        "actions_ok",
                        "reported",
                        "cause_named",
                        "false_blame",
                        "evidence_half",
                    ),
                    4,
                ),
                "seconds": 1800.0,
                "training_episodes": 8,
                "train_success": [0.5],
                "curve": [{"step": 1, "episodes": 8, "success": 0.5, "rubric": 4.0}],
            }
    write_result(
        path,
        build_result(
            OpsLearnConfig(seeds=[0, 1], arms=["sft", "rl"]), rows, "transferlab ops experiment learn", 9, 4
        ),
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("compare") / "run"
    summary = out.parent / "summary.json"
    summary.write_text(json.dumps(transfer_summary()))
    humans = out.parent / "agreement.json"
    humans.write_text(json.dumps({"spearman": 0.75, "mean_abs_diff": 1.5, "n": 8}))
    ops_learn_result(out.parent / "ops_learn")
    t0 = time.perf_counter()
    result = runner.invoke(
        app,
        [
            "compare",
            "--preset",
            "smoke",
            "--out",
            str(out),
            "--ops-result",
            str(summary),
            "--ops-learn-result",
            str(out.parent / "ops_learn" / "result.json"),
            "--human-agreement",
            str(humans),
        ],
    )
    assert result.exit_code == 0, result.output
    return out, result.stdout, time.perf_counter() - t0


def test_cli_prints_the_measured_table(run: tuple[Path, str, float]) -> None:
    out, stdout, seconds = run
    for name in PROPERTIES.values():
        assert name in stdout
    for family in FAMILIES:
        assert family in stdout
    assert "report:" in stdout and str(out / "report.md") in stdout
    assert seconds < 90


def test_result_json_has_every_cell_with_how_it_was_measured(run: tuple[Path, str, float]) -> None:
    out, _, _ = run
    data = json.loads((out / "result.json").read_text())
    assert set(data["table"]) == set(PROPERTIES)
    for row in data["table"].values():
        assert set(row) == set(FAMILIES)
        assert all(cell["how"] for cell in row.values())
    assert set(data["questions"]) == set(QUESTION_FAMILIES)
    assert all(set(q) == set(QUESTIONS) for q in data["questions"].values())
    assert all(set(d) == set(LAYERS) for d in data["diagnosis"].values())
    table = data["table"]
    assert table["determinism"]["coding"]["value"] == 0.0
    assert table["determinism"]["ops_analysis"]["value"] == 0.0
    assert table["determinism"]["market"]["value"] > 0
    assert table["reward_delay"]["market"]["unit"] == "days"
    assert table["parallel"]["market"]["value"] == pytest.approx(1 / 86400)
    # multi-turn in both domains; single-step code RL in its own row
    assert table["tool_use"]["coding"]["value"] == pytest.approx(
        5.1, abs=0.05
    )  # committed coding_agent_learn
    assert table["single_step_rl"]["coding"]["value"] == pytest.approx(
        13.9, abs=0.05
    )  # committed coding_learn
    assert table["single_step_rl"]["ops_analysis"]["value"] is None
    assert data["questions"]["coding"]["trustworthy"]["value"] == 1.0
    trust = data["questions"]["ops_analysis"]["trustworthy"]  # the probe suite: best degenerate success
    assert trust["value"] <= 0.05 and trust["held"] is True
    # the ops RL numbers come from the ops-learn result (RL 7/8 - SFT 1/8 = 75 points over 0.5 CPU-h),
    # the non-flat groups from the transfer summary's scratch arm
    assert table["tool_use"]["ops_analysis"]["value"] == pytest.approx(75.0)
    assert data["questions"]["ops_analysis"]["worth_cost"]["value"] == pytest.approx(150.0)
    assert data["diagnosis"]["ops_analysis"]["basic"]["value"] == pytest.approx(1 / 8)
    assert data["questions"]["ops_analysis"]["explore"]["value"] == pytest.approx(0.7)
    assert [row["arm"] for row in data["transfer"]] == ["transfer", "scratch"]
    objectivity = table["objectivity"]["ops_analysis"]
    assert objectivity["human"]["n"] == 8 and "Spearman 0.75" in objectivity["how"]
    assert data["transfer"][0]["episodes to 30%"] == "0, 32, never"
    assert data["transfer"][0]["query_before_concluding (SFT -> end)"] == "0.60 -> 0.80"
    assert data["provenance"]["command"] == data["command"] and "git_commit" in data["provenance"]


def test_result_json_is_in_the_shared_schema_with_matched_comparisons(run: tuple[Path, str, float]) -> None:
    from transferlab.platform.results import read_result

    out, _, _ = run
    result = read_result(out / "result.json")
    assert result.experiment == "compare"
    assert result.command.startswith("transferlab compare --preset smoke --out ")
    ops = {c.cluster: c for c in result.comparisons if c.name == "ops multi-turn: rl - sft"}
    # the hand-made ops-learn result: RL 7/8 - SFT 1/8 over the same two seeds
    assert ops["seed"].estimate == pytest.approx(0.75) and ops["seed"].n_clusters == 2
    assert result.arms["ops multi-turn: rl"].held_out_success.estimate == pytest.approx(7 / 8)
    coding = result.comparison("coding multi-turn: rl - sft")  # the committed agent-learn run
    assert coding.cluster == "seed" and coding.estimate == pytest.approx(0.051, abs=0.0005)
    assert {c.name for c in result.comparisons} >= {
        "coding multi-turn: rl - rft",
        "coding multi-turn: rft - sft",
        "coding single-step: grpo - sft",
        "ops multi-turn, RFT first: rft - sft",  # the committed RFT run
    }
    md = (out / "report.md").read_text()
    assert "RL against its baselines, side by side" in md and "ops multi-turn: rl - sft" in md


def test_report_is_written(run: tuple[Path, str, float]) -> None:
    out, _, _ = run
    md = (out / "report.md").read_text()
    assert "domain table" in md and "How each number was measured" in md
    assert "The transfer experiment" in md and "0, 32, never" in md
    assert (out / "report.html").is_file() and (out / "figures" / "throughput.png").is_file()
    assert "The settings of the two domains' multi-turn experiments" in md
    rows = {r["setting"]: r for r in json.loads((out / "result.json").read_text())["domain_settings"]}
    assert rows["RL episodes"]["coding"] == rows["RL episodes"]["ops"] == "1024"  # the committed runs
    assert rows["advantage"]["why they differ"].startswith("ops: per-turn credit")
    assert json.loads((out / "config.json").read_text())["replays"] == 3


def test_ops_learning_without_a_transfer_summary_is_not_measured(tmp_path: Path) -> None:
    from transferlab.comparison.compare import CompareConfig, _ops_learned

    absent = str(tmp_path / "absent.json")
    learned = _ops_learned(CompareConfig(ops_result=absent, ops_learn_result=absent))
    assert not learned["gain"].measured and "transfer" in learned["gain"].how


def test_the_transfer_section_takes_the_seed_clustered_figures_when_result_json_is_beside_it(
    tmp_path: Path,
) -> None:
    """Pooled intervals (labelled so) from the summary alone; the result's clustered ones next to it."""
    from transferlab.comparison.compare import CompareConfig, CompareResult, measure_transfer
    from transferlab.platform.results import write_result

    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(transfer_summary()))
    config = CompareConfig(ops_result=str(summary))
    pooled = CompareResult(config)
    measure_transfer(config, pooled, lambda _: None)
    assert (
        "not clustered by seed" in pooled.transfer_source and "+0.00 [-1.00, +1.00]" in pooled.transfer_source
    )
    assert pooled.transfer[0]["end success"] == "0.40 [0.10, 0.50]"

    from transferlab.comparison import transfer as tr

    ops = tr.transfer_test_config().ops.model_copy(update={"eval_episodes": 1})
    results: dict[str, dict[str, object]] = {}
    for s in (0, 1):
        point = {"habits": {"query_before_concluding": 0.5}, "rubric": 3.0}
        results[f"coding-seed{s}"] = {"held_out": [1.0], "habits": {"read_before_write": 1.0}}
        for arm, sft, end in (("transfer", [0, 0], [1, 0]), ("scratch", [1, 0], [1, 1])):
            results[f"{arm}-seed{s}"] = {
                "curve": [
                    {**point, "stage": "sft", "success": sum(sft) / 2, "per_episode": sft},
                    {**point, "stage": "rl", "success": sum(end) / 2, "per_episode": end},
                ]
            }
    write_result(tmp_path, tr.build_result(tr.TransferConfig(seeds=[0, 1], ops=ops), results, "cmd"))
    clustered = CompareResult(config)
    measure_transfer(config, clustered, lambda _: None)
    rows = {r["arm"]: r for r in clustered.transfer}
    assert rows["transfer"]["end success"].startswith("0.50 [")  # 1 of 2 scenarios in each seed
    assert rows["scratch"]["SFT success"].startswith("0.50 [") and rows["scratch"]["end success"].startswith(
        "1.00"
    )
    assert "clustered by seed" in clustered.transfer_source
    text = clustered.transfer_source.replace("\u2212", "-")
    # both seeds lose exactly 50 points: a t-interval over the 2 seeds of zero width
    assert "transfer - scratch: worse: -50.0 points [-50.0, -50.0]" in text
    assert "95% t-interval over 2 seeds" in clustered.transfer_source


def test_a_pooled_ops_result_takes_its_gain_and_the_first_run_of_the_preset_its_time(tmp_path: Path) -> None:
    """The seven-seed pool keeps no timings: worth = its gain over the first run's RL hours per seed."""
    import shutil

    from transferlab.comparison.compare import OPS_LEARN, CompareConfig, _from_ops_learn

    committed = Path(__file__).parents[2] / "docs" / "results" / OPS_LEARN
    (tmp_path / OPS_LEARN).parent.mkdir(parents=True)
    shutil.copy(committed, tmp_path / OPS_LEARN)
    ops_learn_result(tmp_path / "ops_learn")  # RL 1800 s a seed
    learned = _from_ops_learn(CompareConfig(results_dir=str(tmp_path)))
    gain = json.loads(committed.read_text())["comparisons"][0]["estimate"] * 100
    assert learned["gain"].value == pytest.approx(gain) and "7 seeds" in learned["gain"].how
    assert learned["worth"].value == pytest.approx(gain / 0.5)  # 1800 s = 0.5 CPU-hours
    assert "time from " + str(tmp_path / "ops_learn" / "result.json") in learned["worth"].how


def test_a_file_that_is_not_a_transfer_summary_is_refused(tmp_path: Path) -> None:
    from transferlab.comparison.compare import CompareConfig, _ops_learned

    (tmp_path / "x.json").write_text(json.dumps({"gain": 3}))
    with pytest.raises(ValueError, match="not a transfer summary"):
        _ops_learned(CompareConfig(ops_result=str(tmp_path / "x.json"), ops_learn_result=str(tmp_path / "y")))


def test_a_missing_json_option_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", "--human-agreement", str(tmp_path / "none.json")])
    assert (
        result.exit_code == 2 and "--human-agreement" in result.output and "does not exist" in result.output
    )


def test_without_ratings_the_report_says_how_to_collect_them() -> None:
    from transferlab.comparison.compare import with_humans
    from transferlab.platform.measures import Measure

    plain = with_humans(Measure(0.9, "Spearman", "rubric vs a second grader"), None)
    assert plain.value == 0.9 and "Rate reports" in plain.how and "human" not in plain.extra


def test_unknown_preset_is_refused() -> None:
    result = runner.invoke(app, ["compare", "--preset", "huge"])
    assert result.exit_code == 2 and "use one of smoke, quick, cpu" in result.output


def test_committed_results_are_found_outside_the_repository_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transferlab.comparison.compare import missing_results, results_root

    repo_results = Path(__file__).resolve().parents[2] / "docs" / "results"
    monkeypatch.chdir(tmp_path)  # no docs/results here
    assert results_root("docs/results") == repo_results
    assert missing_results(results_root("docs/results")) == []
    # an explicit folder is taken as given, and every file it lacks is named
    empty = tmp_path / "empty"
    empty.mkdir()
    assert results_root(empty) == empty
    missing = missing_results(empty)
    assert str(empty / "coding_agent_learn" / "result.json") in missing and len(missing) == 8


def test_a_results_dir_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", "--preset", "smoke", "--results-dir", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "is not a folder" in result.output

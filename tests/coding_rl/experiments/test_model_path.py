"""``--model PATH`` / ``model_path``: the experiments start from a local Hugging Face model.

Fast: a path holding no model is one ``error:`` line and exit 2 before any run directory exists; a
preset's ``max_context`` beyond the model's limit is clipped with a warning. Slow: the smoke presets
run end to end from a saved tiny policy (our tokenizer) and from a random-weight Qwen2 checkpoint
with its own ChatML tokenizer, and the report names the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transferlab.agent_rl.policies.model import TinyPolicyConfig, save_policy
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.start import fit_context, load_start_model, model_record
from transferlab.cli import app
from transferlab.coding_rl.experiments.common import toy_tokenizer
from transferlab.coding_rl.tasks.toy import toy_repo_tasks, toy_tasks


def saved_tiny(directory: Path, max_positions: int = 512) -> Path:
    """A tiny policy on the toy tokenizer, saved like any Hugging Face checkpoint."""
    ops = ("add", "sub")
    train, held = toy_tasks(0.25, 0, ops)
    repo_train, repo_held = toy_repo_tasks(0.25, 0, ops)
    tokenizer = toy_tokenizer(train + held, repo_train + repo_held)
    policy = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=max_positions, seed=7)
    return save_policy(policy.create(tokenizer), tokenizer, directory)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return saved_tiny(tmp_path_factory.mktemp("tiny") / "policy", max_positions=256)


@pytest.mark.parametrize("which", ["learn", "dense-sparse", "ablations"])
def test_a_path_without_a_model_is_one_error_line_and_no_run(tmp_path: Path, which: str) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        ["coding", "experiment", which, "--preset", "smoke", "--model", str(tmp_path / "nope")],
        catch_exceptions=False,
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot load a policy from"), result.output
    assert "fix:" in lines[0]
    assert not runs.exists()


def test_a_bad_model_path_on_the_transfer_command_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transferlab.comparison import transfer as tr

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        tr.main(["--preset", "smoke", "--model", str(empty), "--runs-root", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot load a policy from") and "config.json" in err[0]
    assert not (tmp_path / "runs").exists()


def test_max_context_beyond_the_models_limit_is_clipped_with_a_warning(tiny_dir: Path) -> None:
    start = load_start_model(str(tiny_dir))
    assert start is not None and start.context_limit == 256
    lines: list[str] = []
    agent = RLConfig(mode="agent", max_context=512, max_new_tokens=16)
    clipped = fit_context(agent, start, lines.append)
    assert clipped.max_context == 256 and agent.max_context == 512
    assert (
        len(lines) == 1 and lines[0].startswith("warning: max_context 512") and "clipped to 256" in lines[0]
    )
    assert fit_context(agent.model_copy(update={"max_context": 200}), start, lines.append).max_context == 200
    assert fit_context(RLConfig(max_context=512), start, lines.append).max_context == 512  # single-step
    assert fit_context(agent, None, lines.append) is agent  # the tiny policy: nothing to clip
    assert len(lines) == 1


def test_each_arm_gets_its_own_copy_and_the_summary_names_the_model(tiny_dir: Path) -> None:
    start = load_start_model(str(tiny_dir))
    assert start is not None and load_start_model(None) is None
    a, b = start.fresh(), start.fresh()
    next(a.parameters()).data.add_(1.0)
    first = next(start.model.parameters())
    assert not next(a.parameters()).data.equal(first.data) and next(b.parameters()).data.equal(first.data)
    record = model_record(TinyPolicyConfig(), start)
    assert record["path"] == str(tiny_dir) and record["parameters"] == start.parameters > 0
    assert model_record(TinyPolicyConfig(), None)["path"] is None


def _learn(runs: Path, model: Path, *extra: str) -> tuple[int, str]:
    args = [
        "coding",
        "experiment",
        "learn",
        "--preset",
        "smoke",
        "--runs-root",
        str(runs),
        "--model",
        str(model),
    ]
    result = CliRunner().invoke(app, [*args, *extra])
    return result.exit_code, result.output


@pytest.mark.slow
def test_learn_smoke_from_a_saved_policy_names_it_and_resumes(tmp_path: Path, tiny_dir: Path) -> None:
    code, output = _learn(tmp_path / "runs", tiny_dir, "--report-dir", str(tmp_path / "report"))
    assert code == 0, output
    [run_dir] = (tmp_path / "runs" / "coding-learn").iterdir()
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    assert summary["model"]["path"] == str(tiny_dir) and summary["model"]["context_limit"] == 256
    assert json.loads((run_dir / "config.json").read_text())["model_path"] == str(tiny_dir)
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"policy: `{tiny_dir}` (" in report and "trained from scratch" not in report
    arms = {p.name for p in (run_dir / "arms").iterdir()}
    before = {a: (run_dir / "arms" / a / "result.json").stat().st_mtime_ns for a in arms}
    again = CliRunner().invoke(
        app,
        ["coding", "experiment", "learn", "--runs-root", str(tmp_path / "runs"), "--resume", str(run_dir)],
    )
    assert again.exit_code == 0, again.output
    assert {a: (run_dir / "arms" / a / "result.json").stat().st_mtime_ns for a in arms} == before


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transferlab.agent_rl.policies.families import init_checkpoint
    from transferlab.coding_rl.tokenizer_corpus import default_texts

    return init_checkpoint(
        "qwen2", tmp_path_factory.mktemp("qwen2") / "ckpt", size="tiny", texts=default_texts()
    )


@pytest.mark.slow
def test_learn_smoke_from_a_random_qwen2_checkpoint(tmp_path: Path, qwen2_dir: Path) -> None:
    code, output = _learn(tmp_path / "runs", qwen2_dir, "--report-dir", str(tmp_path / "report"))
    assert code == 0, output
    [run_dir] = (tmp_path / "runs" / "coding-learn").iterdir()
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    assert summary["model"]["path"] == str(qwen2_dir) and summary["model"]["parameters"] > 0
    assert not (run_dir / "tokenizer").exists()
    for stage in ("untrained", "sft", "grpo", "ppo"):
        for key in ("sampled", "greedy"):
            iv = summary["stages"][stage][key]
            assert 0.0 <= iv["low"] <= iv["estimate"] <= iv["high"] <= 1.0, (stage, key, iv)
    assert f"policy: `{qwen2_dir}` (" in (tmp_path / "report" / "report.md").read_text()
    # the SFT policy was saved with the model's own tokenizer (ChatML), not one trained here
    from transformers import AutoTokenizer

    sft = AutoTokenizer.from_pretrained(run_dir / "arms" / "sft-seed0" / "policy")
    assert sft.get_vocab() == AutoTokenizer.from_pretrained(qwen2_dir).get_vocab()
    assert "<|im_start|>" in sft.chat_template


@pytest.mark.slow
def test_ablations_smoke_from_a_random_qwen2_checkpoint(tmp_path: Path, qwen2_dir: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "coding", "experiment", "ablations", "--preset", "smoke",
            "--runs-root", str(tmp_path / "runs"), "--model", str(qwen2_dir),
            "--report-dir", str(tmp_path / "report"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [run_dir] = (tmp_path / "runs" / "coding-ablations").iterdir()
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    assert summary["model"]["path"] == str(qwen2_dir)
    for arm, row in summary["arms"].items():
        assert 0.0 <= row["held_out"]["estimate"] <= 1.0, arm
    assert f"policy: `{qwen2_dir}` (" in (tmp_path / "report" / "report.md").read_text()

"""`transferlab coding model init`, `coding train sft|grpo|ppo` and `coding eval` through the real CLI.

Every model here is written by ``model init`` (random weights, a tokenizer with its family's chat
template; nothing is downloaded), trained for a few steps against the real sandbox, evaluated, and
reloaded with ``AutoModelForCausalLM`` / ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner, Result

from transferlab.cli import app

runner = CliRunner()

SFT_CONFIG = {"steps": 20, "batch_size": 4, "lr": 1e-2}
RL_CONFIG = {
    "steps": 1,
    "tasks_per_step": 4,
    "group_size": 4,
    "max_new_tokens": 12,
    "zero_std": 1.0,
    "max_context": 256,
    "max_steps": 3,
    "rollout_workers": 1,
    "checkpoint_every": 1,
}


def coding(*args: str | Path) -> Result:
    return runner.invoke(app, ["coding", *map(str, args)])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def assert_bad_input(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("... ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in result.output


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def weights(directory: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    return {n: p.detach().clone() for n, p in model.state_dict().items()}


def assert_reloads_changed(before: Path, after: Path) -> None:
    """``after`` loads as a standard HF checkpoint with the chat template, and its weights moved."""
    from transformers import AutoTokenizer

    tok_before = AutoTokenizer.from_pretrained(before, local_files_only=True)
    tok_after = AutoTokenizer.from_pretrained(after, local_files_only=True)
    assert tok_after.chat_template and tok_after.chat_template == tok_before.chat_template
    old, new = weights(before), weights(after)
    assert old.keys() == new.keys()
    assert any(not torch.equal(old[k], new[k]) for k in old)


def last_metric(run_dir: Path, key: str) -> float:
    from transferlab.platform.metrics import read_metrics

    frame = read_metrics(run_dir / "metrics.parquet")
    return float(frame[frame["key"] == key].sort_values("step")["value"].iloc[-1])


def train(algo: str, model: Path, out: Path, tmp: Path, *extra: str | Path) -> Result:
    config = write_json(tmp / f"{algo}.json", SFT_CONFIG if algo == "sft" else RL_CONFIG)
    return coding(
        "train", algo, "--model", model, "--tasks", "toy", "--out", out, "--config", config,
        "--device", "cpu", "--runs-root", tmp / "runs", *extra,
    )  # fmt: skip


def evaluate(model: Path, *extra: str) -> dict[str, Any]:
    result = ok(
        coding("eval", "--model", model, "--tasks", "toy", "--samples", "1", "--device", "cpu", *extra)
    )
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny"
    ok(coding("model", "init", "--family", "tiny", "--size", "tiny", "--out", out))
    return out


# ------------------------------------------------------------------------------------ end to end


def test_sft_then_grpo_then_eval_on_the_tiny_policy(tiny: Path, tmp_path: Path) -> None:
    sft = ok(train("sft", tiny, tmp_path / "sft", tmp_path))
    assert "sft: 20 steps on toy" in sft.stdout and "peak memory" in sft.stdout
    assert_reloads_changed(tiny, tmp_path / "sft")
    [run_dir] = (tmp_path / "runs" / "coding-train-sft").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"] == str(tiny.resolve()) and config["sft"]["steps"] == 20
    assert (run_dir / "metrics.parquet").is_file()
    summary = json.loads((run_dir / "artifacts" / "summary.json").read_text())
    assert summary["steps"] == 20 and summary["tokens_per_s"] > 0 and summary["peak_memory_gib"] > 0

    grpo = ok(train("grpo", tmp_path / "sft", tmp_path / "grpo", tmp_path, "--rollout-backend", "inline"))
    assert "grpo: 1 steps" in grpo.stdout and "sampled tokens/s" in grpo.stdout
    assert_reloads_changed(tmp_path / "sft", tmp_path / "grpo")
    [rl_dir] = (tmp_path / "runs" / "coding-train-grpo").iterdir()
    rl = json.loads((rl_dir / "config.json").read_text())["rl"]
    assert rl["algo"] == "grpo" and rl["mode"] == "code" and rl["device"] == "cpu"
    assert last_metric(rl_dir, "train/grad_norm") > 0  # the policy gradient moved the weights

    data = evaluate(tmp_path / "grpo", "--json")
    assert {
        "success_rate",
        "n",
        "ci_low",
        "ci_high",
        "tasks",
        "split",
        "model",
        "samples",
        "per_task",
    } <= set(data)
    assert data["split"] == "held-out" and data["tasks"] == "toy"
    assert data["n"] == len(data["per_task"]) == 15
    assert data["ci_low"] <= data["success_rate"] <= data["ci_high"]
    human = ok(
        coding("eval", "--model", tmp_path / "grpo", "--tasks", "toy", "--samples", "1", "--device", "cpu")
    )
    assert human.stdout.startswith("success ") and len(human.stdout.splitlines()) == 1


# ------------------------------------------------------------------------------------- bad input


def test_a_path_that_is_not_a_model(tmp_path: Path) -> None:
    assert_bad_input(train("sft", tmp_path / "nothing", tmp_path / "out", tmp_path), "does not exist")
    (tmp_path / "empty").mkdir()
    assert_bad_input(coding("eval", "--model", tmp_path / "empty", "--tasks", "toy"), "no config.json")


def test_a_model_without_a_chat_template(tiny: Path, tmp_path: Path) -> None:
    from transferlab.agent_rl.policies.model import load_policy, save_policy

    model, tok = load_policy(tiny)
    tok.chat_template = None
    save_policy(model, tok, tmp_path / "plain")
    for path in tmp_path.joinpath("plain").glob("*.jinja"):
        path.unlink()
    assert_bad_input(train("sft", tmp_path / "plain", tmp_path / "out", tmp_path), "chat template")


def test_an_unknown_task_family_and_a_missing_split(tiny: Path, tmp_path: Path) -> None:
    assert_bad_input(coding("eval", "--model", tiny, "--tasks", "toys"), "toy, toy-repos, procedural, seed")
    assert_bad_input(coding("eval", "--model", tiny, "--tasks", "toy", "--split", "test"), "--split 'test'")
    assert_bad_input(
        coding("eval", "--model", tiny, "--tasks", "seed"), "no 'held-out' tasks", "--split train"
    )


def test_cuda_without_cuda(tiny: Path, tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_bad_input(
        coding(
            "train", "sft", "--model", tiny, "--tasks", "toy", "--out", tmp_path / "o", "--device", "cuda"
        ),
        "CUDA",
    )


def test_a_config_file_with_unknown_fields(tiny: Path, tmp_path: Path) -> None:
    config = write_json(tmp_path / "bad.json", {"steps": 2, "learning_rate": 0.1})
    result = coding(
        "train", "grpo", "--model", tiny, "--tasks", "toy", "--out", tmp_path / "o", "--config", config
    )
    assert_bad_input(result, "learning_rate")


def test_merge_needs_lora(tiny: Path, tmp_path: Path) -> None:
    assert_bad_input(train("sft", tiny, tmp_path / "o", tmp_path, "--merge"), "--lora-r")


def test_prompts_longer_than_the_context_are_reported_not_cut(tiny: Path, tmp_path: Path) -> None:
    from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy

    _, tok = load_policy(tiny)
    short = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=24).create(tok)
    save_policy(short, tok, tmp_path / "short")
    result = train("grpo", tmp_path / "short", tmp_path / "o", tmp_path, "--rollout-backend", "inline")
    assert_bad_input(result, "do not fit the model's context of 24 tokens", "toy/")
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------- families, PPO, LoRA (slow)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "llama", "gpt2"])
def test_each_hf_family_trains_sft_and_grpo_and_evaluates(family: str, tmp_path: Path) -> None:
    base = tmp_path / family
    init = ok(coding("model", "init", "--family", family, "--size", "tiny", "--out", base))
    assert f"wrote {base}: family {family}, size tiny" in init.stdout
    ok(train("sft", base, tmp_path / "sft", tmp_path))
    assert_reloads_changed(base, tmp_path / "sft")
    ok(train("grpo", tmp_path / "sft", tmp_path / "grpo", tmp_path, "--rollout-backend", "local"))
    assert_reloads_changed(tmp_path / "sft", tmp_path / "grpo")
    data = evaluate(tmp_path / "grpo", "--json")
    assert data["n"] == 15 and 0.0 <= data["success_rate"] <= 1.0


@pytest.mark.slow
def test_ppo_on_agent_tasks(tiny: Path, tmp_path: Path) -> None:
    config = write_json(tmp_path / "ppo.json", {**RL_CONFIG, "max_new_tokens": 16})
    result = ok(
        coding(
            "train", "ppo", "--model", tiny, "--tasks", "toy-repos", "--out", tmp_path / "ppo",
            "--config", config, "--device", "cpu", "--runs-root", tmp_path / "runs",
            "--rollout-backend", "inline",
        )
    )  # fmt: skip
    assert "ppo: 1 steps on toy-repos" in result.stdout
    assert_reloads_changed(tiny, tmp_path / "ppo")
    [run_dir] = (tmp_path / "runs" / "coding-train-ppo").iterdir()
    assert json.loads((run_dir / "config.json").read_text())["rl"]["mode"] == "agent"


@pytest.mark.slow
def test_lora_adapters_and_merged(tiny: Path, tmp_path: Path) -> None:
    from peft import PeftConfig

    ok(train("sft", tiny, tmp_path / "adapters", tmp_path, "--lora-r", "4"))
    adapters = tmp_path / "adapters"
    assert (adapters / "adapter_config.json").is_file() and not (adapters / "config.json").exists()
    assert PeftConfig.from_pretrained(str(adapters)).base_model_name_or_path == str(tiny.resolve())
    # an adapter directory is a --model: its base is loaded from the recorded path and merged
    data = evaluate(adapters, "--json")
    assert data["n"] == 15
    ok(
        train(
            "grpo",
            adapters,
            tmp_path / "merged",
            tmp_path,
            "--lora-r",
            "4",
            "--merge",
            "--rollout-backend",
            "inline",
        )
    )
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    assert_reloads_changed(tiny, tmp_path / "merged")


def test_resume_refuses_settings_it_would_ignore(tmp_path: Path) -> None:
    from transferlab.agent_rl.sft import SFTConfig
    from transferlab.coding_rl.train_run import TrainRunConfig
    from transferlab.platform.runstore import RunStore

    saved = TrainRunConfig(
        algo="sft", model=str(tmp_path / "m"), tasks="toy", out=str(tmp_path / "o"), sft=SFTConfig()
    )
    run = RunStore(tmp_path / "runs").create_run("coding-train-sft", saved)
    run.release()
    before = (run.dir / "meta.json").read_text()
    assert_bad_input(
        coding("train", "sft", "--resume", run.dir, "--lr", "0.1"), "--lr would be ignored", "drop it"
    )
    assert_bad_input(
        coding("train", "sft", "--resume", run.dir, "--steps", "5", "--config", tmp_path / "c.json"),
        "--config, --steps would be ignored",
        "drop them",
    )
    assert (run.dir / "meta.json").read_text() == before  # refused before the run is touched


def test_resume_goes_on_with_the_device_and_dtype_given(tmp_path: Path) -> None:
    from transferlab.agent_rl.rl import RLConfig
    from transferlab.coding_rl.train_run import TrainOptions, TrainRunConfig, _moved

    saved = TrainRunConfig(
        algo="grpo", model="m", tasks="toy", out="o", device="cuda", dtype="bfloat16", rl=RLConfig()
    )

    def opts(device: str | None, dtype: str | None) -> TrainOptions:
        return TrainOptions(
            "grpo",
            None,
            None,
            None,
            "train",
            None,
            device,
            dtype,
            None,
            False,
            None,
            None,
            None,
            tmp_path,
            tmp_path,
        )

    assert _moved(saved, opts(None, None)) == saved  # not given: the run goes on as it began
    assert _moved(saved, opts("cuda", None)) == saved
    moved = _moved(saved, opts("cpu", "float32"))
    assert (moved.device, moved.dtype) == ("cpu", "float32")
    assert moved.rl is not None and (moved.rl.device, moved.rl.dtype) == ("cpu", "float32")
    assert moved.rl.model_dump(exclude={"device", "dtype"}) == RLConfig().model_dump(
        exclude={"device", "dtype"}
    )

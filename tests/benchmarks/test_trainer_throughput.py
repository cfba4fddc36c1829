"""Smoke test of benchmarks/trainer_throughput.py at its smallest size: one step per trainer, tiny batch.

The run itself (TRL's import and trainer set-up, tokenizer training, the sandbox) takes about 20 s, so the
tests that need it are marked slow; the helpers are tested fast.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trainer_throughput.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trainer_throughput", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _load()


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    pytest.importorskip("trl")
    config = bench.BenchConfig(
        steps=1, qwen2_steps=1, rounds=1, sft_steps=[0], tasks_per_step=2, group_size=2, max_new_tokens=4
    )
    return dict(bench.run(config, log=lambda _: None))


@pytest.mark.slow
def test_both_trainers_ran_one_timed_step_on_the_same_batch_shape(result: dict[str, Any]) -> None:
    assert [(s["arch"], s["sft_steps"]) for s in result["scenarios"]] == [("tiny", 0), ("qwen2", 0)]
    for scenario in result["scenarios"]:
        assert [(r["trainer"], r["steps"], r["episodes"]) for r in scenario["runs"]] == [
            ("ours", 1, 4),
            ("trl", 1, 4),
        ]
        for name in ("ours", "trl"):
            rates = scenario[name]
            for key in (
                "tokens_per_s",
                "episodes_per_s",
                "step_s",
                "generation_s_per_step",
                "reward_s_per_step",
            ):
                assert rates[key] > 0, (name, key)
            assert 1 <= rates["mean_completion_tokens"] <= rates["max_completion_tokens"] <= 4
        assert all(v > 0 for v in scenario["ratio_ours_over_trl"].values())


@pytest.mark.slow
def test_the_qwen2_policy_is_a_10_to_30m_parameter_qwen2_with_grouped_query_attention(
    result: dict[str, Any],
) -> None:
    policy = result["scenarios"][1]["policy"]
    assert policy["model_class"] == "Qwen2ForCausalLM"
    assert 10_000_000 <= policy["parameters"] <= 30_000_000
    assert policy["num_key_value_heads"] < policy["num_attention_heads"]
    assert policy["tie_word_embeddings"] and policy["vocab_size"] == 300


@pytest.mark.slow
def test_every_matched_setting_is_equal(result: dict[str, Any]) -> None:
    settings = result["scenarios"][0]["settings"]
    names = {s["setting"] for s in settings}
    assert {
        "G (num_generations)",
        "completions per step",
        "temperature",
        "KL coefficient (beta)",
        "lr",
    } <= names
    assert [s for s in settings if s["ours"] != s["trl"]] == []
    by_name = {s["setting"]: s["ours"] for s in settings}
    assert by_name["completions per step"] == "4" and by_name["max_new_tokens / max_completion_length"] == "4"


@pytest.mark.slow
def test_results_are_written_as_markdown_and_json(result: dict[str, Any], tmp_path: Path) -> None:
    bench.write_results(result, tmp_path / "out", "cmd --steps 1")
    text = (tmp_path / "out.md").read_text()
    assert "`cmd --steps 1`" in text and "2-core shared VM" in text and "| tokens/s |" in text
    assert "## Qwen2 (12.7M parameters), untrained" in text and "policy `qwen2`" in text
    assert json.loads((tmp_path / "out.json").read_text())["command"] == "cmd --steps 1"


def test_trl_completions_are_decoded_like_generate() -> None:
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["return x + 1\n"] * 5, vocab_size=300)
    body = tokenizer.encode("    return x + 1", add_special_tokens=False)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ended = bench.sample_from_ids(tokenizer, [*body, stop], {stop})
    cut = bench.sample_from_ids(tokenizer, body, {stop})
    assert (ended.text, ended.finished, ended.completion_ids[-1]) == ("    return x + 1", True, stop)
    assert (cut.text, cut.finished, cut.stop_reason) == ("    return x + 1", False, "length")


def test_flags_cover_every_config_field() -> None:
    config, out = bench.parse_args(["--steps", "3", "--sft-steps", "5", "0", "--out", "x/y"])
    assert (config.steps, config.sft_steps, out) == (3, [5, 0], Path("x/y"))
    assert config.archs == ["tiny", "qwen2"]  # make bench races both
    config, _ = bench.parse_args(["--archs", "qwen2", "--qwen2-steps", "2", "--qwen2-kv-heads", "3"])
    assert (config.archs, config.qwen2_steps, config.qwen2_kv_heads) == (["qwen2"], 2, 3)


def test_a_qwen2_shape_without_grouped_query_attention_is_refused() -> None:
    with pytest.raises(ValueError, match="qwen2_kv_heads=6 must be fewer than qwen2_heads=6"):
        bench.BenchConfig(qwen2_kv_heads=6)
    with pytest.raises(ValueError, match="qwen2_hidden=380 is not a multiple of qwen2_heads=6"):
        bench.BenchConfig(qwen2_hidden=380)


def test_a_qwen2_size_outside_10_to_30m_parameters_is_refused() -> None:
    tokenizer = bench.bench_tokenizer()
    with pytest.raises(ValueError, match="outside 10,000,000-30,000,000; fix: change --qwen2-hidden"):
        bench.qwen2_policy(bench.BenchConfig(qwen2_layers=2), tokenizer)

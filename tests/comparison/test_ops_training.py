"""OpsAnalysis-v0 trained with the coding trainer: masks, held-out evaluation, habits, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transferlab.agent_rl.policies.model import load_policy
from transferlab.agent_rl.policies.tokenizer import IM_END
from transferlab.agent_rl.sft import scripted_demonstration
from transferlab.comparison import ops_training as ot
from transferlab.platform.agent_env import ToolEnv
from transferlab.platform.metrics import read_metrics
from transferlab.platform.trajectory import to_tensors
from transferlab.simulator.ops.env import NaiveAgent

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tasks() -> tuple[list, list]:
    return ot.ops_tasks(2, 2)


@pytest.fixture(scope="module")
def tokenizer(tasks: tuple[list, list]):
    return ot.shared_tokenizer(tasks[0], vocab_size=400, operations=["add", "sub"])


def _masked_ids_match_actions(trajs: list, tokenizer) -> None:
    batch = to_tensors(trajs, pad_id=tokenizer.pad_token_id)
    for row, traj in enumerate(trajs):
        masked = batch["input_ids"][row][batch["loss_mask"][row].bool()].tolist()
        assert masked == [i for s in traj.steps for i in s.action_ids]


def test_sft_data_masks_only_the_policys_tool_calls(tasks, tokenizer) -> None:
    demos = ot.make_ops_sft_data(tokenizer, tasks[0])
    assert len(demos) == len(tasks[0])
    end = tokenizer.convert_tokens_to_ids(IM_END)
    for demo in demos:
        assert {s.domain for s in demo.steps} == {"ecommerce"}
        assert json.loads(demo.steps[-1].action_text)["action"] == "generate_report"
        assert all(s.action_ids[-1] == end for s in demo.steps)
        assert "score 10.0/10" in demo.steps[-1].observation_text
    _masked_ids_match_actions(demos, tokenizer)
    batch = to_tensors(demos, pad_id=tokenizer.pad_token_id)
    # prompt and tool results are never in the loss: the masked text is exactly the tool calls
    text = tokenizer.decode(batch["input_ids"][0][batch["loss_mask"][0].bool()].tolist())
    assert "Task:" not in text and "orders_change_pct:" not in text


def test_policy_rollouts_use_the_coding_schema_and_masks(tasks, tokenizer) -> None:
    config = ot.ops_test_config()
    model = config.policy.create(tokenizer)
    ev = ot.evaluate_ops(model, tokenizer, tasks[1], config.rl, episodes_per_task=1)
    assert len(ev.trajectories) == 2
    for traj in ev.trajectories:
        assert {s.domain for s in traj.steps} == {"ecommerce"}
        assert all(
            s.action_logprobs is not None and len(s.action_logprobs) == len(s.action_ids) for s in traj.steps
        )
    _masked_ids_match_actions(ev.trajectories, tokenizer)
    assert ev.success == [0.0, 0.0] and set(ev.task_ids) == {t.task_id for t in tasks[1]}


def test_the_env_factory_builds_the_ops_tool_env(tasks) -> None:
    env = ot.make_ops_env(tasks[0], rewards="sparse", max_steps=3)
    assert isinstance(env, ToolEnv) and env.domain == "ecommerce" and env.max_steps == 3
    assert env.rewards.end_only
    _, info = env.reset(seed=0, options={"task": tasks[0][1]})
    assert info["task_id"] == tasks[0][1].task_id


def test_habits_by_hand_expert_both_naive_neither(tasks, tokenizer) -> None:
    expert = ot.make_ops_sft_data(tokenizer, tasks[0][:1])[0]
    assert ot.ops_habits(expert) == {"query_before_concluding": True, "check_before_reporting": True}
    assert ot.rubric_of(expert) == 10.0
    task = tasks[0][0]
    agent = NaiveAgent()
    agent.reset(task.category)
    naive = scripted_demonstration(ot.make_ops_env([task]), task, [agent.act("")], tokenizer)
    assert ot.ops_habits(naive) == {"query_before_concluding": False, "check_before_reporting": False}
    # a query, then a report blaming a cause whose evidence was never checked: queried, not checked
    steps = ot.expert_actions(task)
    report = json.dumps({"action": "generate_report", "text": "Cause: a competitor price cut."})
    partial = scripted_demonstration(ot.make_ops_env([task]), task, [steps[0], report], tokenizer)
    assert ot.ops_habits(partial) == {"query_before_concluding": True, "check_before_reporting": False}


def test_train_ops_test_preset_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasks, tokenizer
) -> None:
    evaluated: list[str] = []
    real = ot.evaluate_ops

    def spy(model, tok, eval_tasks, *args, **kwargs):
        evaluated.extend(t.split for t in eval_tasks)
        return real(model, tok, eval_tasks, *args, **kwargs)

    monkeypatch.setattr(ot, "evaluate_ops", spy)
    config = ot.ops_test_config()
    init = ot.fresh_policy(config, tokenizer, tmp_path / "init")
    res = ot.train_ops(config, tmp_path / "run", init_from=init)
    # evaluation sees the eval split only (validation by default): before, after SFT, each GRPO step
    assert evaluated and set(evaluated) == {"validation"}
    assert [p["stage"] for p in res.curve] == ["start", "sft", "rl", "rl"]
    assert [p["episodes"] for p in res.curve] == [0.0, 0.0, 4.0, 8.0]
    assert len(res.train_success) == config.rl.steps
    before, _ = load_policy(init)
    changed = [
        n
        for (n, p), (_, q) in zip(res.model.named_parameters(), before.named_parameters(), strict=True)
        if not torch.equal(p, q)
    ]
    assert changed
    run = tmp_path / "run"
    assert (run / "policy" / "config.json").exists() and (run / "config.json").exists()
    saved = json.loads((run / "result.json").read_text())
    assert saved["curve"][-1]["stage"] == "rl"
    keys = set(read_metrics(run / "metrics.parquet")["key"])
    assert {"ops/sft/loss", "ops/rollout/success_rate", "ops/heldout/success_rate"} <= keys
    assert all(k.startswith("ops/") for k in keys)


def test_train_ops_refuses_a_coding_env() -> None:
    config = ot.ops_test_config()
    bad = config.model_copy(update={"rl": config.rl.model_copy(update={"env_factory": None})})
    with pytest.raises(ValueError, match="env_factory"):
        ot.train_ops(bad, "unused")


def test_undemonstrated_practice_trains_rl_only_on_scenarios_sft_never_showed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer
) -> None:
    seen: dict[str, list[str]] = {}
    real_rl, real_data = ot.train_rl, ot.make_ops_sft_data

    def data_spy(tok, tasks, *args, **kwargs):
        seen["sft"] = [t.task_id for t in tasks]
        seen["compact"] = [kwargs.get("compact_reports")]
        return real_data(tok, tasks, *args, **kwargs)

    def rl_spy(model, tok, tasks, *args, **kwargs):
        seen["rl"] = [t.task_id for t in tasks]
        return real_rl(model, tok, tasks, *args, **kwargs)

    monkeypatch.setattr(ot, "make_ops_sft_data", data_spy)
    monkeypatch.setattr(ot, "train_rl", rl_spy)
    config = ot.ops_test_config().model_copy(
        update={"train_tasks": 4, "sft_tasks": 2, "practice": "undemonstrated", "compact_reports": True}
    )
    config = ot.OpsTrainingConfig.model_validate(config.model_dump())
    init = ot.fresh_policy(config, tokenizer, tmp_path / "init")
    ot.train_ops(config, tmp_path / "run", init_from=init)
    train, _ = ot.ops_tasks(4, 2)
    assert seen["sft"] == [t.task_id for t in train[:2]]
    assert seen["rl"] == [t.task_id for t in train[2:]]
    assert seen["compact"] == [True]


def test_undemonstrated_practice_needs_a_scenario_sft_did_not_show() -> None:
    with pytest.raises(ValueError, match="raise train_tasks or use practice='all'"):
        ot.OpsTrainingConfig(train_tasks=40, sft_tasks=40, practice="undemonstrated")


def test_the_shared_tokenizer_sees_training_text_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from transferlab.agent_rl.policies import tokenizer as tok
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_solution, toy_tasks

    seen: list[str] = []
    monkeypatch.setattr(tok, "train_tokenizer", lambda texts, **kw: seen.extend(texts))
    ot.shared_tokenizer(ot.ops_tasks(1, 1)[0], 400)
    ops = tuple(sorted(OPERATIONS))
    train, held = toy_tasks(0.25, 0, ops)
    text = {f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in train}
    held_only = {f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in held} - text
    assert held_only and not held_only & set(seen)
    assert text <= set(seen)

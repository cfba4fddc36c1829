"""Demonstrations as trajectories (single-step and scripted multi-turn); SFT on the policy's tokens only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.adapters import LoraOptions
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.tokenizer import IM_END, encode_chat, observation_ids
from transferlab.agent_rl.sft import (
    SFTConfig,
    copy_batch,
    copy_loss,
    ordinary_token_ids,
    scripted_demonstration,
    train_sft,
)
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.single_step import code_demonstration, code_prompt_ids
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.toy import (
    call,
    toy_repo_plan,
    toy_repo_tasks,
    toy_solution,
    toy_tasks,
)
from transferlab.platform.metrics import MemoryLogger
from transferlab.platform.trajectory import Trajectory

TINY = {"n_layer": 1, "d_model": 32, "n_head": 2, "seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def repo_task() -> RepoTask:
    return toy_repo_tasks()[0][0]


def play(
    sandbox: SandboxBackend, task: RepoTask, plan: list[str], tok: Any, rewards: str = "dense"
) -> Trajectory:
    env = CodeRepairEnv([task], rewards=rewards, sandbox=sandbox)
    try:
        return scripted_demonstration(env, task, plan, tok)
    finally:
        env.close()


@pytest.fixture(scope="module")
def scripted(sandbox: SandboxBackend, repo_task: RepoTask, tok: Any) -> Trajectory:
    return play(sandbox, repo_task, toy_repo_plan(repo_task), tok)


def test_code_demonstration_masks_exactly_the_body_and_im_end(tok: Any) -> None:
    task = toy_tasks()[0][0]
    body = toy_solution(task)
    demo = code_demonstration(tok, task, body)
    [step] = demo.steps
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert step.prompt_ids == code_prompt_ids(tok, task)  # what the rollouts feed the policy
    assert step.action_ids == [*tok.encode(body, add_special_tokens=False), im_end]
    assert step.observation_ids == [] and step.terminated
    ids, mask = demo.token_ids(), demo.loss_mask()
    n_prompt = len(step.prompt_ids)
    assert mask == [0] * n_prompt + [1] * len(step.action_ids)
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == body + IM_END
    assert demo.episode_id != code_demonstration(tok, task, body, index=1).episode_id
    assert demo.episode_id == code_demonstration(tok, task, body).episode_id


def test_scripted_plan_solves_the_toy_repo_with_the_dense_rewards(
    scripted: Trajectory, repo_task: RepoTask, tok: Any
) -> None:
    last = scripted.steps[-1]
    assert [s.action_text for s in scripted.steps] == toy_repo_plan(repo_task)
    assert last.terminated and not last.truncated and last.info["success"] is True
    assert [s.reward_components for s in scripted.steps] == [
        {"read_file_success": 0.5},
        {"write_file_success": 0.5, "read_before_write": 1.0},
        {"test_after_modify": 1.5, "test_pass": 3.0, "all_tests_pass": 5.0},
        {"task_complete": 20.0},
    ]
    assert [s.reward for s in scripted.steps] == [0.5, 1.5, 9.5, 20.0]
    assert scripted.total_reward == 31.5
    # ids as the rollouts build them: the intro as a user turn, each observation as a tool turn
    first = scripted.steps[0]
    assert first.prompt_text.startswith(f"Issue: {repo_task.meta.issue}")
    assert first.prompt_ids == encode_chat(tok, [{"role": "user", "content": first.prompt_text}])
    for s in scripted.steps:
        assert s.observation_ids == observation_ids(tok, s.observation_text, role="tool", ended=True)
        assert s.action_ids[-1] == tok.convert_tokens_to_ids(IM_END)
    mask = scripted.loss_mask()
    assert sum(mask) == sum(len(s.action_ids) for s in scripted.steps)
    for start, end in scripted.action_spans():
        assert all(mask[start:end])


def test_sparse_rewards_pay_only_at_the_end(sandbox: SandboxBackend, repo_task: RepoTask, tok: Any) -> None:
    demo = play(sandbox, repo_task, toy_repo_plan(repo_task), tok, rewards="sparse")
    assert [s.reward for s in demo.steps] == [0.0, 0.0, 0.0, 20.0]


def test_a_plan_stops_at_the_submit(sandbox: SandboxBackend, repo_task: RepoTask, tok: Any) -> None:
    path = repo_task.meta.source_path
    demo = play(sandbox, repo_task, [call("submit"), call("read_file", path=path)], tok)
    [step] = demo.steps
    assert step.terminated and step.info["success"] is False
    assert step.reward_components == {"task_failed": 0.0}


def test_sft_lowers_the_loss_and_logs_it(tok: Any) -> None:
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train]
    model = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
    logger = MemoryLogger()
    losses = train_sft(model, tok, demos, SFTConfig(steps=30, batch_size=8, lr=1e-2), logger)
    assert len(losses) == 30
    assert losses[-1] < 0.25 * losses[0]
    assert logger.series("sft/loss").tolist() == pytest.approx(losses)
    assert len(logger.series("sft/grad_norm")) == 30
    assert not model.training
    with pytest.raises(ValueError, match="no demonstrations"):
        train_sft(model, tok, [], SFTConfig(steps=1))


def _one_step(tok: Any, demo: Trajectory) -> tuple[float, dict[str, torch.Tensor]]:
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    [loss] = train_sft(model, tok, [demo], SFTConfig(steps=1, batch_size=1))
    return loss, {n: p.detach().clone() for n, p in model.named_parameters()}


def _with_last_step(demo: Trajectory, **changes: Any) -> Trajectory:
    steps = [*demo.steps[:-1], dataclasses.replace(demo.steps[-1], **changes)]
    return Trajectory(steps).validate()


def test_sft_gradient_comes_from_action_tokens_only(scripted: Trajectory, tok: Any) -> None:
    """The verifier's final output is only ever a target, never an input to an action: replacing it
    (every id changed; same length, so the kernels see the same shapes) must leave the loss and the
    updated weights bit-identical."""
    last = scripted.steps[-1]
    other_obs = [(i + 1) % len(tok) for i in last.observation_ids]
    loss, weights = _one_step(tok, scripted)
    same_loss, same_weights = _one_step(tok, _with_last_step(scripted, observation_ids=other_obs))
    assert same_loss == loss
    assert all(torch.equal(weights[n], same_weights[n]) for n in weights)
    # while changing the target of an action token does change both
    other_action = [*last.action_ids[:-2], (last.action_ids[-2] + 1) % len(tok), last.action_ids[-1]]
    moved_loss, moved = _one_step(tok, _with_last_step(scripted, action_ids=other_action))
    assert moved_loss != loss
    assert any(not torch.equal(weights[n], moved[n]) for n in weights)


def test_a_demonstrated_mistake_is_context_not_a_target(
    sandbox: SandboxBackend, repo_task: RepoTask, tok: Any
) -> None:
    plan = toy_repo_plan(repo_task)
    env = CodeRepairEnv([repo_task], sandbox=sandbox)
    try:
        demo = scripted_demonstration(env, repo_task, plan, tok, mistakes={len(plan) - 1})
    finally:
        env.close()
    assert [s.info["imitate"] for s in demo.steps] == [True] * (len(plan) - 1) + [False]
    # the mistake's tokens are never targets: changing one leaves the loss and the update bit-identical
    last = demo.steps[-1]
    other_action = [*last.action_ids[:-2], (last.action_ids[-2] + 1) % len(tok), last.action_ids[-1]]
    loss, weights = _one_step(tok, demo)
    same_loss, same = _one_step(tok, _with_last_step(demo, action_ids=other_action))
    assert same_loss == loss and all(torch.equal(weights[n], same[n]) for n in weights)
    imitated = _with_last_step(demo, info={**last.info, "imitate": True})
    assert _one_step(tok, imitated)[0] != loss


def test_sft_on_scripted_demos_learns_the_plan(scripted: Trajectory, tok: Any) -> None:
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    losses = train_sft(model, tok, [scripted], SFTConfig(steps=15, batch_size=1, lr=1e-2))
    assert losses[-1] < 0.5 * losses[0]


def test_sft_with_lora_trains_only_the_adapters(tok: Any) -> None:
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train[:4]]
    model = LoraOptions(r=4).apply(TinyPolicyConfig(max_positions=128, **TINY).create(tok))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_sft(model, tok, demos, SFTConfig(steps=2, batch_size=4))
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all(".lora_" in n for n in changed)


def test_lr_factor_warmup_then_cosine_by_hand() -> None:
    from transferlab.agent_rl.sft import SFTConfig, lr_factor

    cfg = SFTConfig(steps=11, warmup_steps=2, schedule="cosine", lr_min_ratio=0.1)
    assert lr_factor(0, cfg) == pytest.approx(0.5)
    assert lr_factor(1, cfg) == pytest.approx(1.0)
    assert lr_factor(2, cfg) == pytest.approx(1.0)  # first step after warm-up: full lr
    # halfway through the 8 decay steps (2..10): cos(pi/2) = 0 -> 0.1 + 0.9 * 0.5
    assert lr_factor(6, cfg) == pytest.approx(0.55)
    assert lr_factor(10, cfg) == pytest.approx(0.1)
    constant = SFTConfig(steps=11, warmup_steps=4)
    assert [lr_factor(s, constant) for s in (0, 3, 4, 10)] == pytest.approx([0.25, 1.0, 1.0, 1.0])


def test_copy_batch_repeats_ordinary_tokens_and_is_seeded(tok: Any) -> None:
    vocab = ordinary_token_ids(tok)
    assert not set(vocab.tolist()) & set(tok.all_special_ids)
    ids = copy_batch(vocab, 3, 5, torch.Generator().manual_seed(1))
    assert ids.shape == (3, 10)
    assert torch.equal(ids[:, :5], ids[:, 5:])
    assert set(ids.flatten().tolist()) <= set(vocab.tolist())
    assert torch.equal(ids, copy_batch(vocab, 3, 5, torch.Generator().manual_seed(1)))


def test_copy_loss_by_hand() -> None:
    ids = torch.tensor([[1, 2, 1, 2]])
    logits = torch.zeros(1, 4, 3)
    logits[0, 1, 1] = 10.0  # position 1 predicts token 2 (ids[2] = 1): right
    logits[0, 2, 0] = 10.0  # position 2 predicts token 3 (ids[3] = 2): wrong
    loss, acc = copy_loss(logits, ids, 2)
    right = -torch.log_softmax(torch.tensor([0.0, 10.0, 0.0]), 0)[1]
    wrong = -torch.log_softmax(torch.tensor([10.0, 0.0, 0.0]), 0)[2]
    assert loss.item() == pytest.approx(float(right + wrong) / 2, rel=1e-5)
    assert acc == 0.5


def test_sft_with_a_copy_term_learns_the_demos_and_to_copy(tok: Any) -> None:
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train]
    model = TinyPolicyConfig(n_layer=2, d_model=64, n_head=2, max_positions=128, seed=0).create(tok)
    logger = MemoryLogger()
    config = SFTConfig(steps=300, batch_size=4, lr=3e-3, copy_weight=1.0, copy_length=8, copy_batch_size=16)
    losses = train_sft(model, tok, demos, config, logger)
    assert logger.series("sft/loss").tolist() == pytest.approx(losses)  # the demonstrations' loss alone
    assert losses[-1] < 0.25 * losses[0]
    accuracy = logger.series("sft/copy_accuracy").tolist()
    assert len(accuracy) == len(logger.series("sft/copy_loss")) == 300
    assert sum(accuracy[:10]) / 10 < 0.2 and sum(accuracy[-10:]) / 10 > 0.9
    plain = MemoryLogger()
    train_sft(model, tok, demos, SFTConfig(steps=1), plain)
    assert len(plain.series("sft/copy_loss")) == 0  # copy_weight 0: no copy term
    with pytest.raises(ValueError, match="set copy_length <= 64"):
        train_sft(model, tok, demos, SFTConfig(steps=1, copy_weight=1.0, copy_length=65))

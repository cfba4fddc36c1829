"""The RL loop: GRPO and PPO steps through the real sandbox, LoRA, masking, exact resume, every backend."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.adapters import LoraOptions, trainable_state
from transferlab.agent_rl.policies.devices import DeviceError, place_model
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.rl import (
    CHECKPOINT_FILE,
    RLConfig,
    _complete_groups,
    build_batch,
    draw_task_indices,
    episode_context,
    flat_groups,
    gigpo_token_advantages,
    load_checkpoint,
    rollout_metrics,
    save_checkpoint,
    step_seed,
)
from transferlab.agent_rl.sft import SFTConfig, train_sft
from transferlab.coding_rl.single_step import code_demonstration
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.toy import toy_repo_tasks, toy_solution, toy_tasks
from transferlab.coding_rl.training import train_rl
from transferlab.platform.metrics import MemoryLogger, MultiLogger, ParquetLogger, read_metrics, wide_metrics
from transferlab.platform.trajectory import StepRecord, Trajectory

TINY = {"n_layer": 1, "d_model": 32, "n_head": 2, "seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tasks() -> list[CodeTask]:
    return toy_tasks()[0]


@pytest.fixture(scope="module")
def sft_state(tok: Any, tasks: list[CodeTask]) -> dict[str, torch.Tensor]:
    """Weights of a tiny policy taught the toy solutions a little: its samples get mixed rewards, so
    GRPO groups have a spread and PPO has something to learn (an untrained policy scores 0 on all)."""
    model = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in tasks]
    train_sft(model, tok, demos, SFTConfig(steps=40, batch_size=16, lr=1e-2))
    return {n: t.clone() for n, t in model.state_dict().items()}


@pytest.fixture
def policy(tok: Any, sft_state: dict[str, torch.Tensor]) -> Any:
    return new_policy(tok, sft_state)


def new_policy(tok: Any, state: dict[str, torch.Tensor]) -> Any:
    model = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
    model.load_state_dict(state)
    return model


def rl_config(**changes: Any) -> RLConfig:
    base: dict[str, Any] = {
        "steps": 1,
        "tasks_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 12,
        "rollout_backend": "inline",
        "checkpoint_every": 1,
    }
    return RLConfig(**{**base, **changes})


def changed_parameters(before: dict[str, torch.Tensor], model: Any) -> set[str]:
    return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}


# ------------------------------------------------------------------------------------------- updates


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean"])
def test_loss_aggregation_changes_the_update_but_not_the_rollouts(
    tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path, loss_agg: str
) -> None:
    """Per-episode averaging weighs a long episode like a short one: same rollouts, another step."""
    results = {}
    for agg in ("token_mean", loss_agg):
        model = new_policy(tok, sft_state)
        result = train_rl(model, tok, tasks, rl_config(loss_agg=agg), tmp_path / agg)
        results[agg] = (result.history[0]["rollout/return"], trainable_state(result.model))
    (ret_a, state_a), (ret_b, state_b) = results["token_mean"], results[loss_agg]
    assert ret_a == ret_b  # same seed, same weights: the same episodes
    same = all(torch.equal(state_a[n], state_b[n]) for n in state_a)
    assert same == (loss_agg == "token_mean")


def test_grpo_step_changes_the_policy_and_logs_a_finite_kl(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    logger = MemoryLogger()
    result = train_rl(policy, tok, tasks, rl_config(kl_coef=0.1, epochs=2), tmp_path, logger)
    [metrics] = result.history
    assert changed_parameters(before, result.model) == set(before)  # full fine-tuning: every tensor moves
    assert result.value_head is None and "loss/value" not in metrics
    assert "train/skipped_update" not in metrics and metrics["train/frac_reward_zero_std"] < 1.0
    assert math.isfinite(metrics["kl/ref"]) and metrics["kl/ref"] > 0  # the 2nd epoch has left the reference
    assert metrics["rollout/episodes"] == 8 and metrics["rollout/lost_episodes"] == 0
    assert metrics["train/grad_norm"] > 0 and math.isfinite(metrics["loss/policy"])
    for key in ("rollout/success_rate", "rollout/return", "reward/pass_rate", "time/step_s", "train/entropy"):
        assert key in metrics
    assert set(logger.keys()) == set(metrics)
    assert (tmp_path / "policy-base" / "config.json").exists() and (tmp_path / CHECKPOINT_FILE).exists()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_tempered_loss_changes_the_step_only_when_the_temperature_is_not_one(
    tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path, temperature: float
) -> None:
    """'sampling' takes the loss's log-probs at the sampling temperature: same episodes (the rollout is
    unchanged), the same step as 'one' at T=1, another step below it; the first pass's ratio is 1."""
    results = {}
    for mode in ("one", "sampling"):
        model = new_policy(tok, sft_state)
        config = rl_config(temperature=temperature, loss_temperature=mode, kl_coef=0.1)
        result = train_rl(model, tok, tasks, config, tmp_path / mode)
        [metrics] = result.history
        assert metrics["kl/ref"] == pytest.approx(0.0, abs=1e-6)  # one epoch: still the reference
        results[mode] = (metrics["rollout/return"], trainable_state(result.model))
    (ret_a, state_a), (ret_b, state_b) = results["one"], results["sampling"]
    assert ret_a == ret_b
    same = all(torch.equal(state_a[n], state_b[n]) for n in state_a)
    assert same == (temperature == 1.0)


def test_ppo_step_trains_a_value_head_and_the_policy(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    result = train_rl(policy, tok, tasks, rl_config(algo="ppo"), tmp_path)
    [metrics] = result.history
    assert result.value_head is not None
    assert float(result.value_head.linear.weight.detach().abs().sum()) > 0  # it started at exactly zero
    assert metrics["loss/value"] > 0 and math.isfinite(metrics["loss/total"])
    assert changed_parameters(before, result.model)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_with_lora_only_the_adapters_change(
    policy: Any,
    tok: Any,
    tasks: list[CodeTask],
    sft_state: dict[str, torch.Tensor],
    tmp_path: Path,
    algo: str,
) -> None:
    result = train_rl(policy, tok, tasks, rl_config(algo=algo, lora=LoraOptions(r=4)), tmp_path)
    assert "train/skipped_update" not in result.history[0]
    adapters = {n: p for n, p in result.model.named_parameters() if ".lora_" in n}
    assert set(adapters) == set(trainable_state(result.model))
    assert any(".lora_B." in n and float(p.abs().sum()) > 0 for n, p in adapters.items())  # B starts at 0
    base = {n: p for n, p in result.model.named_parameters() if ".lora_" not in n}
    for name, p in base.items():
        original = name.removeprefix("base_model.model.").replace(".base_layer", "")
        assert torch.equal(p.detach(), sft_state[original]), name


def test_mask_observations_false_trains_on_every_token(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    """The masking ablation runs end to end (its loss covers the prompt, see the build_batch test)."""
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    result = train_rl(policy, tok, tasks, rl_config(mask_observations=False), tmp_path)
    assert math.isfinite(result.history[0]["loss/total"])
    assert changed_parameters(before, result.model)


# --------------------------------------------------------------------------------- batches and draws


def _step(
    k: int, prompt: list[int], action: list[int], obs: list[int], reward: float, last: bool, **info: Any
) -> StepRecord:
    return StepRecord(
        episode_id=f"ep{len(prompt)}",
        step=k,
        task_id="t",
        domain="coding",
        action_text="a",
        action_ids=action,
        action_logprobs=[-0.5 - i for i in range(len(action))],
        observation_text="o",
        observation_ids=obs,
        reward=reward,
        terminated=last,
        info=info,
        prompt_ids=prompt,
    )


def test_build_batch_masks_the_policy_tokens_unless_asked_not_to() -> None:
    one = Trajectory([_step(0, [1, 2, 3], [4, 5], [], 2.0, True, group=0)])
    two = Trajectory(
        [_step(0, [1, 2], [6], [7, 8], 0.5, False), _step(1, [], [9, 10], [11], 1.0, True, group=1)]
    )
    batch = build_batch([one, two], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 0, 0, 0], [1, 2, 6, 7, 8, 9, 10, 11]]
    assert batch.loss_mask.int().tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 1, 1, 0]]
    assert batch.old_logprobs.tolist() == [[0, 0, 0, -0.5, -1.5, 0, 0, 0], [0, 0, -0.5, 0, 0, -0.5, -1.5, 0]]
    assert batch.token_rewards.tolist() == [[0, 0, 0, 0, 2.0, 0, 0, 0], [0, 0, 0.5, 0, 0, 0, 1.0, 0]]
    assert batch.groups.tolist() == [0, 1] and batch.returns.tolist() == [2.0, 1.5]

    ablation = build_batch([one, two], pad_id=0, mask_observations=False)
    assert ablation.loss_mask.int().tolist() == [[0, 1, 1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1]]
    assert torch.equal(ablation.input_ids, batch.input_ids)


def test_gigpo_adds_each_turns_step_advantage_to_its_tokens() -> None:
    # A: prompt [1, 2], action [3] (reward 0), obs [4], action [5] (reward 10) -> return 10
    # B: prompt [1, 2], action [9] (reward 0), obs [4], action [5] (reward 0)  -> return 0
    # episode level (G=2): mean 5, std sqrt(50) -> +-1/sqrt(2).
    # step level, gamma 0.5: returns-to-go A [5, 10], B [0, 0]; turn 0 shares the prompt -> +-1/sqrt(2);
    # turn 1 acted from [1, 2, 3, 4] (A) and [1, 2, 9, 4] (B): alone, 0.
    a = Trajectory([_step(0, [1, 2], [3], [4], 0.0, False), _step(1, [], [5], [], 10.0, True, group=0)])
    b = Trajectory([_step(0, [1, 2], [9], [4], 0.0, False), _step(1, [], [5], [], 0.0, True, group=0)])
    batch = build_batch([a, b], pad_id=0)
    config = RLConfig(mode="agent", group_size=2, advantage="gigpo", step_gamma=0.5, step_weight=1.0)
    r = 1 / math.sqrt(2)
    tok, metrics = gigpo_token_advantages(batch, torch.tensor([r, -r]), config)
    assert tok[:, 2].tolist() == pytest.approx([2 * r, -2 * r])  # first action: episode + step
    assert tok[:, 4].tolist() == pytest.approx([r, -r])  # second action: the episode's alone
    assert metrics["train/step_shared_share"] == 0.5 and metrics["train/step_groups"] == 1.0
    assert metrics["train/step_signal_share"] == 0.5
    half = RLConfig(mode="agent", group_size=2, advantage="gigpo", step_gamma=0.5, step_weight=0.5)
    tok_half, _ = gigpo_token_advantages(batch, torch.tensor([r, -r]), half)
    assert tok_half[:, 2].tolist() == pytest.approx([1.5 * r, -1.5 * r])


def test_gigpo_is_refused_outside_agent_grpo() -> None:
    with pytest.raises(ValueError, match="advantage='gigpo' needs algo='grpo' and mode='agent'"):
        RLConfig(mode="code", advantage="gigpo")
    with pytest.raises(ValueError, match="use advantage='episode' otherwise"):
        RLConfig(mode="agent", algo="ppo", advantage="gigpo")


def draw_tasks(tasks: list[Any], config: RLConfig, step: int) -> list[Any]:
    """The tasks a uniform draw picks (no record of flat tasks)."""
    return [tasks[i] for i in draw_task_indices(len(tasks), config, step, {})]


def test_draw_tasks_and_step_seed_depend_on_seed_and_step_only(tasks: list[CodeTask]) -> None:
    config = rl_config(tasks_per_step=5, seed=3)
    draws = [draw_tasks(tasks, config, step) for step in range(4)]
    assert all(len(d) == 5 and all(t in tasks for t in d) for d in draws)
    assert draws == [draw_tasks(tasks, config, step) for step in range(4)]
    assert len({tuple(t.task_id for t in d) for d in draws}) == 4
    other_fields = config.model_copy(update={"lr": 0.5, "algo": "ppo", "group_size": 2, "steps": 99})
    assert [draw_tasks(tasks, other_fields, s) for s in range(4)] == draws
    assert [step_seed(other_fields, s) for s in range(4)] == [step_seed(config, s) for s in range(4)]
    other_seed = config.model_copy(update={"seed": 4})
    assert [draw_tasks(tasks, other_seed, s) for s in range(4)] != draws
    seeds = {step_seed(c, s) for c in (config, other_seed) for s in range(50)}
    assert len(seeds) == 100


def _episode(reward: float, success: bool | None, group: int, components: dict[str, float]) -> Trajectory:
    step = _step(0, [1], [2, 3], [], reward, True, group=group, success=success)
    step.reward_components = components
    return Trajectory([step])


def test_informative_sampling_skips_tasks_last_seen_flat_and_uniform_ignores_the_record() -> None:
    uniform = rl_config(tasks_per_step=6, seed=1)
    informative = uniform.model_copy(update={"task_sampling": "informative", "flat_task_weight": 0.0})
    flat = {0: True, 1: True, 2: False}  # 0 and 1: last group flat; 2: mixed; 3, 4: never seen
    for step in range(20):
        assert draw_task_indices(5, uniform, step, flat) == draw_task_indices(5, uniform, step, {})
        assert not {0, 1} & set(draw_task_indices(5, informative, step, flat))
    # nothing seen flat yet: the informative draw is the uniform one
    assert draw_task_indices(5, informative, 3, {2: False}) == draw_task_indices(5, uniform, 3, {})
    # every task flat with weight 0: drawn uniformly rather than not at all
    assert len(draw_task_indices(2, informative, 0, {0: True, 1: True})) == 6
    # a small weight: flat tasks are drawn, but far less often (weight 0.1 vs 1: expect ~2/3.2 of draws)
    light = informative.model_copy(update={"flat_task_weight": 0.1, "tasks_per_step": 1000})
    draws = draw_task_indices(5, light, 0, flat)
    share = sum(i in (0, 1) for i in draws) / len(draws)
    assert 0.03 < share < 0.09  # 0.2 / 3.2 = 0.0625


def test_flat_groups_records_equal_returns_per_drawn_task_and_skips_lost_groups() -> None:
    ep = [_episode(r, None, 0, {}) for r in (1.0, 1.0, 0.0, 2.0, 5.0, 5.0)]
    assert flat_groups(ep, [7, 3, 9], 2) == {7: True, 3: False, 9: True}
    assert flat_groups([ep[0], None, ep[2], ep[3]], [7, 3], 2) == {3: False}
    # a task drawn twice in one step: the later group is its record
    assert flat_groups(ep[:4], [4, 4], 2) == {4: False}


def test_the_checkpoint_carries_the_flat_task_record(policy: Any, tmp_path: Path) -> None:
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    save_checkpoint(tmp_path / "c.pt", 5, policy, None, optimizer, {3: True, 8: False})
    record: dict[int, bool] = {}
    assert load_checkpoint(tmp_path / "c.pt", policy, None, optimizer, record) == 5
    assert record == {3: True, 8: False}


def test_complete_groups_drop_a_group_with_a_lost_episode() -> None:
    a, b, c, d = (_episode(float(i), None, i // 2, {}) for i in range(4))
    assert _complete_groups([a, b, c, d], 2) == [a, b, c, d]
    assert _complete_groups([a, b, None, d], 2) == [a, b]
    assert _complete_groups([None, b, c, None], 2) == []


def test_rollout_metrics_average_over_episodes() -> None:
    trajs = [
        _episode(12.0, True, 0, {"executes": 1.0, "pass_rate": 10.0}),
        _episode(1.0, False, 0, {"executes": 1.0, "pass_rate": 0.0}),
    ]
    metrics = rollout_metrics(trajs, lost=2)
    assert metrics == {
        "rollout/success_rate": 0.5,
        "rollout/return": 6.5,
        "rollout/steps": 1.0,
        "rollout/episodes": 2.0,
        "rollout/lost_episodes": 2.0,
        "rollout/action_tokens": 4.0,
        "reward/executes": 1.0,
        "reward/pass_rate": 5.0,
    }
    assert rollout_metrics([], lost=4) == {"rollout/lost_episodes": 4.0}


# ----------------------------------------------------------------------------------- resume, checks


@pytest.mark.parametrize(
    "changes",
    [
        {"algo": "grpo", "kl_coef": 0.05},
        {"algo": "ppo", "lora": LoraOptions(r=4)},
        {"algo": "grpo", "task_sampling": "informative", "flat_task_weight": 0.0},
    ],
    ids=["grpo-kl", "ppo-lora", "grpo-informative"],
)
def test_a_killed_run_resumed_from_its_checkpoint_ends_exactly_like_an_uninterrupted_one(
    tok: Any,
    tasks: list[CodeTask],
    sft_state: dict[str, torch.Tensor],
    tmp_path: Path,
    changes: dict[str, Any],
) -> None:
    config = rl_config(steps=4, **changes)
    straight = train_rl(new_policy(tok, sft_state), tok, tasks, config, tmp_path / "a")

    metrics_file = tmp_path / "b" / "metrics.parquet"
    logger = ParquetLogger(metrics_file)
    first = train_rl(new_policy(tok, sft_state), tok, tasks, config, tmp_path / "b", logger, stop_after=2)
    logger.log(
        2, {"rollout/return": -999.0}
    )  # step 2 got logged, then the process died before its checkpoint
    logger.flush()
    del logger
    logger = ParquetLogger(metrics_file)  # a new process: fresh model, fresh logger on the same file
    second = train_rl(new_policy(tok, sft_state), tok, tasks, config, tmp_path / "b", logger, resume=True)
    logger.close()

    assert (first.start_step, len(first.history), second.start_step, len(second.history)) == (0, 2, 2, 2)
    want, got = trainable_state(straight.model), trainable_state(second.model)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[n], got[n]) for n in want)
    fresh = new_policy(tok, sft_state)
    untrained = trainable_state(changes["lora"].apply(fresh) if "lora" in changes else fresh)
    assert any(not torch.equal(want[n], untrained[n]) for n in want)  # it did train
    if straight.value_head is not None:
        want_head, got_head = straight.value_head.state_dict(), second.value_head.state_dict()
        assert all(torch.equal(want_head[n], got_head[n]) for n in want_head)
    rows = read_metrics(metrics_file)
    assert not rows.duplicated(["step", "key"]).any()
    assert sorted(rows["step"].unique()) == [0, 1, 2, 3]
    wide = wide_metrics(metrics_file)
    for key in ("rollout/return", "rollout/action_tokens", "loss/total", "train/grad_norm"):
        assert wide[key].tolist() == [h[key] for h in straight.history], key


def test_resuming_before_the_first_checkpoint_drops_the_killed_attempts_rows(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    memory = MemoryLogger()
    memory.log(4, {"sft/loss": 1.0})  # an earlier phase, below step_offset: kept
    memory.log(5, {"rollout/return": -999.0})  # the killed attempt's first step, never checkpointed
    config = rl_config(steps=2, checkpoint_every=0)
    train_rl(policy, tok, tasks, config, tmp_path, MultiLogger(memory), resume=True, step_offset=5)
    rows = memory.to_frame()
    assert not rows.duplicated(["step", "key"]).any()
    assert sorted(rows["step"].unique()) == [4, 5, 6] and -999.0 not in rows["value"].tolist()


def test_resuming_a_grpo_run_as_ppo_is_refused(
    policy: Any, tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    train_rl(policy, tok, tasks, rl_config(), tmp_path)
    with pytest.raises(ValueError, match="no value head; it was written by a GRPO run"):
        train_rl(new_policy(tok, sft_state), tok, tasks, rl_config(algo="ppo"), tmp_path, resume=True)


def test_checkpoint_every_zero_still_checkpoints_at_the_end(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    train_rl(policy, tok, tasks, rl_config(checkpoint_every=0), tmp_path)
    assert (tmp_path / CHECKPOINT_FILE).exists()


def test_on_step_metrics_are_logged_and_bad_settings_refused(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    logger = MemoryLogger()
    seen: list[int] = []

    def evaluate(step: int, model: Any) -> dict[str, float]:
        seen.append(step)
        return {"eval/score": 10.0 + step}

    config = rl_config(steps=2, algo="ppo")
    train_rl(policy, tok, tasks, config, tmp_path, logger, on_step=evaluate, step_offset=100)
    assert seen == [0, 1]
    assert logger.series("eval/score").to_dict() == {100: 10.0, 101: 11.0}
    with pytest.raises(ValueError, match="group_size >= 2"):
        train_rl(policy, tok, tasks, rl_config(group_size=1), tmp_path)
    with pytest.raises(ValueError, match="no tasks"):
        train_rl(policy, tok, [], rl_config(), tmp_path)


def test_a_step_whose_every_chunk_fails_in_its_worker_is_an_error(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    """A worker error in every chunk (here: a repository task handed to code mode) is a bad setting,
    not a straggler: the run stops with the worker's error instead of training on nothing."""
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    poison = toy_repo_tasks()[0][0]
    with pytest.raises(ValueError, match="failed inside its worker"):
        train_rl(policy, tok, [poison], rl_config(steps=2), tmp_path)
    assert changed_parameters(before, policy) == set()


def test_a_context_too_small_for_the_prompt_is_an_error(tok: Any, tmp_path: Path) -> None:
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    config = rl_config(mode="agent", group_size=2, max_new_tokens=8, max_context=64, max_steps=2)
    with pytest.raises(ValueError, match="max_context"):
        train_rl(model, tok, toy_repo_tasks()[0][:2], config, tmp_path)


# ---------------------------------------------------------------------------------- agents, backends


def test_agent_mode_runs_a_grpo_step_on_multi_turn_episodes(tok: Any, tmp_path: Path) -> None:
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    config = rl_config(mode="agent", group_size=2, max_new_tokens=8, max_context=1024, max_steps=2)
    [metrics] = train_rl(model, tok, toy_repo_tasks()[0][:2], config, tmp_path).history
    assert metrics["rollout/episodes"] == 4 and metrics["rollout/lost_episodes"] == 0
    assert metrics["rollout/steps"] == 2.0  # every episode ran to the step limit: two turns each
    assert metrics["rollout/success_rate"] == 0.0
    assert "train/frac_reward_zero_std" in metrics
    assert metrics["rollout/action_tokens"] <= 4 * 2 * 8


@pytest.mark.slow
def test_local_workers_follow_the_learner_and_lose_only_the_failing_chunk(
    tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """Two spawned worker processes with LoRA. Steps 0 and 1 draw good tasks: the workers, loading the
    saved base and receiving the trained adapters each step, sample exactly what the inline worker
    (the learner's own model; same single-threaded CPU ops) samples, so both runs train alike.
    Step 2 draws one task that makes its worker raise: only that group's chunk is lost (inline runs a
    step as one chunk, so there the whole step would fail; it is compared on steps 0 and 1 only)."""
    poison = toy_repo_tasks()[0][0]
    pool = [tasks[0], tasks[1], poison]

    def fits(seed: int) -> bool:
        draws = [draw_tasks(pool, rl_config(seed=seed), step) for step in range(3)]
        return poison not in draws[0] + draws[1] and draws[2].count(poison) == 1

    def run(backend: str, steps: int) -> tuple[list[dict[str, float]], list[dict[str, torch.Tensor]]]:
        states: list[dict[str, torch.Tensor]] = []

        def keep(step: int, model: Any) -> None:
            states.append(trainable_state(model))

        config = rl_config(
            steps=steps, seed=seed, lora=LoraOptions(r=4), rollout_backend=backend, rollout_workers=2
        )
        result = train_rl(new_policy(tok, sft_state), tok, pool, config, tmp_path / backend, on_step=keep)
        return result.history, states

    seed = next(s for s in range(1000) if fits(s))
    local, local_states = run("local", 3)
    inline, inline_states = run("inline", 2)

    step0, step1, step2 = local
    assert step0["rollout/lost_episodes"] == step1["rollout/lost_episodes"] == 0
    assert step0["rollout/episodes"] == step1["rollout/episodes"] == 8
    assert "loss/total" in step0 and "loss/total" in step1  # the adapters moved before step 1 sampled
    assert step2["rollout/lost_episodes"] == 4 and step2["rollout/episodes"] == 4
    for key in ("rollout/return", "rollout/action_tokens"):  # the very same tokens were sampled
        assert [h[key] for h in local[:2]] == [h[key] for h in inline[:2]], key
    # the sampling-time log-probs come from another model instance (the saved base plus the adapters
    # in a spawned process), equal to float rounding only: the losses and weights agree to ~1e-6
    for key in ("loss/total", "train/grad_norm"):
        assert [h[key] for h in local[:2]] == pytest.approx([h[key] for h in inline[:2]], rel=1e-4), key
    for want, got in zip(inline_states[:2], local_states[:2], strict=True):
        assert all(torch.allclose(want[n], got[n], rtol=1e-4, atol=1e-6) for n in want)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_workers_run_a_training_step(
    ray_cluster: None, policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    config = rl_config(rollout_backend="ray", rollout_workers=1)
    [metrics] = train_rl(policy, tok, tasks, config, tmp_path).history
    assert metrics["rollout/lost_episodes"] == 0 and metrics["rollout/episodes"] == 8
    assert "loss/total" in metrics and changed_parameters(before, policy)


# --------------------------------------------------------------------------------- devices and dtypes


def test_bfloat16_training_keeps_bfloat16_weights_that_change(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path
) -> None:
    """dtype='bfloat16' on the CPU: the learner, its frozen reference and the value head run in place;
    the weights stay bfloat16 and move, the value head stays float32, every metric is finite."""
    before = {n: p.detach().float().clone() for n, p in policy.named_parameters()}
    config = rl_config(algo="ppo", dtype="bfloat16", device="cpu", kl_coef=0.1)
    result = train_rl(policy, tok, tasks, config, tmp_path)
    [metrics] = result.history
    assert result.model is policy  # moved and cast in place
    assert {p.dtype for p in policy.parameters()} == {torch.bfloat16}
    assert policy.model.rotary_emb.inv_freq.dtype == torch.float32  # as from_pretrained leaves it
    assert result.value_head.linear.weight.dtype == torch.float32
    moved = {n for n, p in policy.named_parameters() if not torch.equal(before[n], p.detach().float())}
    assert moved == set(before)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["kl/ref"] >= 0 and metrics["loss/value"] > 0
    state = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)
    assert {t.device.type for t in state["model"].values()} == {"cpu"}


@pytest.mark.slow
def test_bfloat16_local_workers_sample_what_the_inline_learner_samples(
    tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """A spawned worker loads the saved float32 base in bfloat16 and receives the bfloat16 weights each
    step: its tensors are the learner's, so it samples the very same tokens as the learner itself."""
    runs = {}
    for backend in ("inline", "local"):
        config = rl_config(
            steps=2, dtype="bfloat16", device="cpu", rollout_backend=backend, rollout_workers=1
        )
        model = new_policy(tok, sft_state)
        runs[backend] = train_rl(model, tok, tasks, config, tmp_path / backend)
    inline, local = runs["inline"].history, runs["local"].history
    for key in ("rollout/return", "rollout/action_tokens", "loss/total"):
        assert [h[key] for h in local] == [h[key] for h in inline], key
    assert all(h["rollout/lost_episodes"] == 0 and math.isfinite(h["loss/total"]) for h in local)
    assert {p.dtype for p in runs["local"].model.parameters()} == {torch.bfloat16}


def checkpointing_layers(model: Any) -> int:
    return sum(bool(getattr(m, "gradient_checkpointing", False)) for m in model.modules())


@pytest.mark.parametrize("lora", [None, LoraOptions(r=4)], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_step(
    tok: Any, tasks: list[CodeTask], sft_state: dict[str, torch.Tensor], tmp_path: Path, lora: Any
) -> None:
    results = {}
    for checkpointing in (False, True):
        config = rl_config(gradient_checkpointing=checkpointing, lora=lora, device="cpu", dtype="float32")
        model = new_policy(tok, sft_state)
        results[checkpointing] = train_rl(model, tok, tasks, config, tmp_path / str(checkpointing))
    off, on = results[False], results[True]
    assert checkpointing_layers(on.model) and not checkpointing_layers(off.model)
    assert on.history[0]["rollout/return"] == off.history[0]["rollout/return"]  # generation unchanged
    for key in ("loss/total", "train/grad_norm"):
        assert on.history[0][key] == pytest.approx(off.history[0][key], abs=1e-5), key
    want, got = trainable_state(off.model), trainable_state(on.model)
    assert all(torch.allclose(want[n], got[n], atol=1e-6) for n in want)


def test_cuda_without_cuda_is_refused_before_anything_is_written(
    policy: Any, tok: Any, tasks: list[CodeTask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"--device cuda asked for CUDA.*use --device cpu"):
        train_rl(policy, tok, tasks, rl_config(device="cuda"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_episodes_stop_at_the_models_own_context_limit(tok: Any) -> None:
    model = TinyPolicyConfig(max_positions=256, **TINY).create(tok)
    assert episode_context(rl_config(mode="agent", max_context=1024), model) == 256
    assert episode_context(rl_config(mode="agent", max_context=200), model) == 200
    assert episode_context(rl_config(max_context=1024), model) == 1024  # code mode: generate caps


def test_sft_in_bfloat16_trains_and_gradient_checkpointing_changes_nothing(
    tok: Any, tasks: list[CodeTask]
) -> None:
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in tasks]
    losses = {}
    for checkpointing in (False, True):
        model = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
        config = SFTConfig(steps=3, batch_size=4, gradient_checkpointing=checkpointing)
        losses[checkpointing] = train_sft(model, tok, demos, config)
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)
    model = place_model(TinyPolicyConfig(max_positions=128, **TINY).create(tok), "cpu", torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    bf16 = train_sft(model, tok, demos, SFTConfig(steps=3, batch_size=4))
    assert all(math.isfinite(x) for x in bf16) and bf16[-1] < bf16[0]
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert changed_parameters(before, model) == set(before)


def test_a_config_without_an_env_factory_is_refused(tok: Any, tmp_path: Path) -> None:
    from transferlab.agent_rl.rl import train_rl as bare_train_rl

    policy = TinyPolicyConfig(max_positions=128, n_layer=1, d_model=32, n_head=2).create(tok)
    with pytest.raises(ValueError, match=r"RLConfig\.env_factory is None: name the env"):
        bare_train_rl(policy, tok, toy_tasks()[0][:2], RLConfig(group_size=2), tmp_path)

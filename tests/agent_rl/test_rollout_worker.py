"""A rollout worker turns chunks into graded trajectories with the exact sampled ids, on one-turn envs
(single-step code tasks) and multi-turn ones (CodeRepair-v0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.adapters import LoraOptions, trainable_state
from transferlab.agent_rl.policies.devices import place_model
from transferlab.agent_rl.policies.generation import SamplingConfig, generate
from transferlab.agent_rl.policies.model import TinyPolicyConfig, save_policy
from transferlab.agent_rl.policies.tokenizer import IM_END
from transferlab.agent_rl.rollout_worker import (
    Chunk,
    RolloutWorker,
    WorkerSpec,
    episode_id,
    episode_success,
)
from transferlab.agent_rl.sft import SFTConfig, train_sft
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import candidate_source, code_demonstration, code_prompt_ids
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.toy import toy_repo_tasks, toy_solution, toy_tasks
from transferlab.coding_rl.training import CODE_REPAIR_ENV, CODE_TASK_ENV
from transferlab.platform.trajectory import Trajectory, to_tensors

TINY = {"n_layer": 1, "d_model": 32, "n_head": 2, "seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tasks() -> list[CodeTask]:
    return toy_tasks()[0]


@pytest.fixture(scope="module")
def model(tok: Any, tasks: list[CodeTask]) -> Any:
    """A tiny policy taught the toy solutions a little, so its samples pass some tests and fail others."""
    model = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in tasks]
    train_sft(model, tok, demos, SFTConfig(steps=40, batch_size=16, lr=1e-2))
    return model


def worker(
    model: Any, tok: Any, sandbox: SandboxBackend, env: str = CODE_TASK_ENV, **spec: Any
) -> RolloutWorker:
    spec = WorkerSpec(policy_dir="unused", threads=0, env_factory=env, **spec)
    return RolloutWorker(model, tok, spec, env_kwargs={"sandbox": sandbox})


def test_code_chunk_gives_one_graded_trajectory_per_task_with_the_sampled_ids(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask]
) -> None:
    chosen = [tasks[0], tasks[0], tasks[0], tasks[1], tasks[1], tasks[1]]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=11)
    chunk = Chunk(tasks=chosen, groups=[4, 4, 4, 5, 5, 5], sampling=sampling, first_row=12)
    trajs = worker(model, tok, sandbox).run(chunk)

    assert len(trajs) == len(chosen)
    prompts = [code_prompt_ids(tok, t) for t in chosen]
    expected = generate(model, tok, prompts, sampling.model_copy(update={"seed": 11 + 12}))
    grades = Verifier(sandbox).grade_many(
        [(t, candidate_source(t, s.text)) for t, s in zip(chosen, expected, strict=True)]
    )
    for i, (traj, task, sample, grade) in enumerate(zip(trajs, chosen, expected, grades, strict=True)):
        [step] = traj.steps
        assert step.task_id == task.task_id and step.prompt_ids == prompts[i]
        assert step.action_ids == sample.completion_ids and step.action_logprobs == sample.logprobs
        assert step.action_text == sample.text
        assert step.reward == grade.reward and step.reward_components == grade.reward_components
        assert step.observation_text == grade.status and step.observation_ids == []
        assert step.info == {"success": grade.status == "passed", "group": 4 + i // 3, "row": 12 + i}
        assert episode_success(traj) is (grade.status == "passed")
        assert step.terminated and step.episode_id == episode_id(task.task_id, 11, 12 + i)
        assert step.timings["policy_s"] > 0 and step.timings["sandbox_s"] > 0
    assert len({t.episode_id for t in trajs}) == len(trajs)
    assert len({tuple(t.steps[0].action_ids) for t in trajs}) > 1  # one row, one seed
    assert len({t.total_reward for t in trajs}) > 1  # some samples do better than others
    # what the learner packs: the loss and the sampling log-probs sit on the sampled ids only
    packed = to_tensors(trajs, pad_id=tok.pad_token_id)
    for i, traj in enumerate(trajs):
        n_prompt, n_action = len(prompts[i]), len(traj.steps[0].action_ids)
        assert packed["loss_mask"][i].tolist()[: n_prompt + n_action] == [0] * n_prompt + [1] * n_action
        assert packed["input_ids"][i, n_prompt : n_prompt + n_action].tolist() == traj.steps[0].action_ids


def test_the_same_chunk_gives_the_same_episodes(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask]
) -> None:
    chunk = Chunk(tasks=tasks[:2], groups=[0, 1], sampling=SamplingConfig(max_new_tokens=8, seed=3))
    w = worker(model, tok, sandbox)
    a, b = w.run(chunk), w.run(chunk)
    assert [t.steps[0].action_ids for t in a] == [t.steps[0].action_ids for t in b]
    later = Chunk(tasks=tasks[:2], groups=[0, 1], sampling=chunk.sampling, first_row=2)
    assert [t.steps[0].action_ids for t in w.run(later)] != [t.steps[0].action_ids for t in a]


def test_greedy_solutions_are_graded_as_successes(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask]
) -> None:
    chunk = Chunk(
        tasks=tasks,
        groups=list(range(len(tasks))),
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=12),
    )
    trajs = worker(model, tok, sandbox).run(chunk)
    solved = [t for t in trajs if episode_success(t)]
    assert solved  # the SFT'd policy's argmax solves some training tasks
    im_end = tok.convert_tokens_to_ids(IM_END)
    for t in solved:
        [step] = t.steps
        assert step.reward == 12.0 and step.observation_text == "passed"
        assert step.action_ids[-1] == im_end


def test_set_weights_makes_the_worker_sample_like_the_learner(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask]
) -> None:
    fresh = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
    w = worker(fresh, tok, sandbox)
    chunk = Chunk(tasks=tasks[:3], groups=[0, 1, 2], sampling=SamplingConfig(max_new_tokens=8))
    before = [t.steps[0].action_ids for t in w.run(chunk)]
    w.set_weights(trainable_state(model))
    after = [t.steps[0].action_ids for t in w.run(chunk)]
    learner = [t.steps[0].action_ids for t in worker(model, tok, sandbox).run(chunk)]
    assert after == learner != before


def test_a_spec_builds_the_worker_from_the_saved_policy_with_its_lora(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask], tmp_path: Path
) -> None:
    save_policy(model, tok, tmp_path / "policy")
    lora = LoraOptions(r=4)
    built = WorkerSpec(policy_dir=str(tmp_path / "policy"), lora=lora, threads=0, env_factory=CODE_TASK_ENV)()
    try:
        assert any(".lora_A." in n for n, _ in built.model.named_parameters())
        copy = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
        copy.load_state_dict(model.state_dict())
        learner = worker(lora.apply(copy), tok, sandbox)  # the learner's weights under the same adapters
        chunk = Chunk(tasks=tasks[:3], groups=[0, 1, 2], sampling=SamplingConfig(max_new_tokens=8))
        assert [t.steps[0].action_ids for t in built.run(chunk)] == [
            t.steps[0].action_ids for t in learner.run(chunk)
        ]  # same base, same seeded adapters
        with torch.no_grad():  # the learner trains its adapters; the worker follows through set_weights
            for name, p in learner.model.named_parameters():
                if ".lora_B." in name:
                    p.normal_(std=0.3)
        built.set_weights(trainable_state(learner.model))
        got, want = built.run(chunk), learner.run(chunk)
        base = worker(model, tok, sandbox).run(chunk)
        assert [t.steps[0].action_ids for t in got] != [t.steps[0].action_ids for t in base]
        assert [t.steps[0].action_ids for t in got] == [t.steps[0].action_ids for t in want]
        assert [t.total_reward for t in got] == [t.total_reward for t in want]
    finally:
        built.close()


def test_a_spec_builds_the_worker_on_its_device_in_its_dtype(
    model: Any, tok: Any, sandbox: SandboxBackend, tasks: list[CodeTask], tmp_path: Path
) -> None:
    """dtype='bfloat16' loads the saved float32 policy in bfloat16 (the learner's cast); the float32
    weights it is sent land converted, and it samples what the learner cast in place samples."""
    save_policy(model, tok, tmp_path / "policy")
    built = WorkerSpec(
        policy_dir=str(tmp_path / "policy"),
        threads=0,
        device="cpu",
        dtype="bfloat16",
        env_factory=CODE_TASK_ENV,
    )()
    try:
        assert {p.dtype for p in built.model.parameters()} == {torch.bfloat16}
        assert {p.device.type for p in built.model.parameters()} == {"cpu"}
        learner = TinyPolicyConfig(max_positions=128, **TINY).create(tok)
        built.set_weights(trainable_state(learner))  # float32 CPU tensors into the bfloat16 worker
        assert all(
            torch.equal(b, a.detach().to(torch.bfloat16))
            for a, b in zip(learner.parameters(), built.model.parameters(), strict=True)
        )
        place_model(learner, "cpu", torch.bfloat16)
        chunk = Chunk(tasks=tasks[:3], groups=[0, 1, 2], sampling=SamplingConfig(max_new_tokens=8))
        got = [t.steps[0] for t in built.run(chunk)]
        want = [t.steps[0] for t in worker(learner, tok, sandbox).run(chunk)]
        assert [s.action_ids for s in got] == [s.action_ids for s in want]
        assert [s.action_logprobs for s in got] == [s.action_logprobs for s in want]
    finally:
        built.close()


def test_a_worker_without_an_env_factory_says_so(model: Any, tok: Any, tasks: list[CodeTask]) -> None:
    chunk = Chunk(tasks=tasks[:1], groups=[0], sampling=SamplingConfig())
    bare = RolloutWorker(model, tok, WorkerSpec(policy_dir="unused", threads=0))
    with pytest.raises(ValueError, match=r"WorkerSpec\.env_factory is None: name the env the episodes play"):
        bare.run(chunk)


def test_agent_chunk_runs_multi_turn_episodes(tok: Any, sandbox: SandboxBackend) -> None:
    repo = toy_repo_tasks()[0][:2]
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    w = worker(model, tok, sandbox, CODE_REPAIR_ENV, max_steps=3)
    sampling = SamplingConfig(max_new_tokens=8, seed=5)
    chunk = Chunk(tasks=repo, groups=[7, 8], sampling=sampling, first_row=4, max_context=1024)
    trajs = w.run(chunk)
    assert [t.task_id for t in trajs] == [t.task_id for t in repo]
    for i, traj in enumerate(trajs):
        assert isinstance(traj, Trajectory)
        assert len(traj.steps) == 3  # an untrained policy never submits: cut by the env's step limit
        assert traj.truncated and traj.steps[-1].info["cut"] == "steps"
        assert traj.steps[-1].info["group"] == 7 + i and traj.steps[-1].info["row"] == 4 + i
        assert traj.steps[0].prompt_text.startswith(f"Issue: {repo[i].meta.issue}")
        for step in traj.steps:
            assert 1 <= len(step.action_ids) <= 8 and len(step.action_logprobs or []) == len(step.action_ids)
            assert step.observation_ids  # the tool's answer, fed back as ids
        assert not episode_success(traj)
    # the episodes are seeded by the chunk's seed plus its first row, as in code mode
    again = w.run(chunk)
    assert [[s.action_ids for s in t.steps] for t in again] == [
        [s.action_ids for s in t.steps] for t in trajs
    ]


def test_agent_episodes_past_the_wall_bound_are_cut(tok: Any, sandbox: SandboxBackend) -> None:
    repo = toy_repo_tasks()[0][:2]
    model = TinyPolicyConfig(max_positions=1024, **TINY).create(tok)
    chunk = Chunk(
        tasks=repo,
        groups=[0, 1],
        sampling=SamplingConfig(max_new_tokens=8),
        max_context=1024,
        episode_timeout_s=1e-6,
    )
    trajs = worker(model, tok, sandbox, CODE_REPAIR_ENV, max_steps=5).run(chunk)
    for i, traj in enumerate(trajs):
        [step] = traj.steps  # cut after its first turn
        assert step.truncated and not step.terminated
        assert step.info["cut"] == "timeout" and step.info["group"] == i

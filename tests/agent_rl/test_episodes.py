"""Multi-turn policy rollouts on CodeRepair-v0 and any tool env: exact ids, masks, determinism, cuts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from transferlab.agent_rl import episodes as agent_rollout
from transferlab.agent_rl.episodes import policy_episodes
from transferlab.agent_rl.policies.generation import Sample, SamplingConfig
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.tokenizer import encode_chat, train_tokenizer
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
from transferlab.coding_rl.tokenizer_corpus import corpus_texts
from transferlab.platform.agent_env import RewardTable, ToolEnv, finish_step
from transferlab.platform.trajectory import Domain, Trajectory, to_tensors

torch.set_num_threads(1)

MAX_NEW = 16
SAMPLING = SamplingConfig(max_new_tokens=MAX_NEW, seed=7)


@pytest.fixture(scope="module")
def tasks() -> list[RepoTask]:
    return seed_repo_tasks()


@pytest.fixture(scope="module")
def tokenizer(tasks: list[RepoTask]) -> Any:
    return train_tokenizer(corpus_texts(tasks), vocab_size=2048, seed=0)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    return TinyPolicyConfig(n_layer=1, d_model=32, max_positions=1024).create(tokenizer)


@pytest.fixture(scope="module")
def envs(tasks: list[RepoTask], sandbox: SandboxBackend) -> Iterator[list[CodeRepairEnv]]:
    made = [CodeRepairEnv(tasks=tasks, max_steps=3, sandbox=sandbox) for _ in tasks]
    yield made
    for env in made:
        env.close()


class Recorder:
    """Wraps `generate`, keeping the prompt ids of every call."""

    def __init__(self) -> None:
        self.calls: list[list[list[int]]] = []
        self._real = agent_rollout.generate

    def __call__(self, model: Any, tok: Any, prompts: Sequence[Sequence[int]], cfg: Any) -> list[Sample]:
        self.calls.append([list(p) for p in prompts])
        return self._real(model, tok, prompts, cfg)


@pytest.fixture(scope="module")
def run(
    model: Any, tokenizer: Any, envs: list[CodeRepairEnv], tasks: list[RepoTask]
) -> tuple[list[Trajectory], Recorder]:
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agent_rollout, "generate", recorder)
        trajs = policy_episodes(model, tokenizer, envs, tasks, SAMPLING, max_context=1024)
    return trajs, recorder


def test_trajectories_validate_and_pack(
    run: tuple[list[Trajectory], Recorder], tasks: list[RepoTask]
) -> None:
    trajs, _ = run
    assert [t.task_id for t in trajs] == [t.task_id for t in tasks]
    assert len({t.episode_id for t in trajs}) == len(trajs)
    for traj in trajs:
        traj.validate()
        assert 1 <= len(traj) <= 3 and traj.steps[-1].done
        assert all(0 < len(s.action_ids) <= MAX_NEW for s in traj.steps)
    batch = to_tensors(trajs)
    assert batch["input_ids"].shape[0] == 3
    assert int(batch["loss_mask"].sum()) == sum(len(s.action_ids) for t in trajs for s in t.steps)


def test_ids_are_exactly_what_the_policy_saw(
    run: tuple[list[Trajectory], Recorder], tokenizer: Any, envs: list[CodeRepairEnv]
) -> None:
    trajs, recorder = run
    assert len(recorder.calls) == max(len(t) for t in trajs)  # one generate call per turn
    for turn, prompts in enumerate(recorder.calls):
        running = [t for t in trajs if len(t) > turn]  # still-running episodes, in input order
        assert len(prompts) == len(running)
        for traj, seen in zip(running, prompts, strict=True):
            rebuilt = list(traj.steps[0].prompt_ids)
            for step in traj.steps[:turn]:
                rebuilt += step.action_ids + step.observation_ids
            assert seen == rebuilt
    for traj in trajs:
        # the prompt is the env's intro as a chat user turn, with the chat-template tokens
        assert traj.prompt_ids == encode_chat(tokenizer, [{"role": "user", "content": traj.prompt_text}])
        assert traj.prompt_text.startswith("Issue:")
        last_turn = len(traj) - 1
        seen = recorder.calls[last_turn][[t for t in trajs if len(t) > last_turn].index(traj)]
        last = traj.steps[-1]
        assert traj.token_ids() == seen + last.action_ids + last.observation_ids


def test_loss_mask_covers_exactly_the_sampled_ids(run: tuple[list[Trajectory], Recorder]) -> None:
    trajs, _ = run
    for traj in trajs:
        ids, mask = traj.token_ids(), traj.loss_mask()
        assert len(ids) == len(mask)
        sampled = [i for i, m in zip(ids, mask, strict=True) if m]
        assert sampled == [tok for s in traj.steps for tok in s.action_ids]
        for (start, end), step in zip(traj.action_spans(), traj.steps, strict=True):
            assert ids[start:end] == step.action_ids and all(mask[start:end])
            assert step.action_logprobs is not None and len(step.action_logprobs) == len(step.action_ids)
        assert sum(mask) == sum(len(s.action_ids) for s in traj.steps)


def test_untrained_policy_gets_tool_errors_not_crashes(run: tuple[list[Trajectory], Recorder]) -> None:
    trajs, _ = run
    for traj in trajs:
        for step in traj.steps:
            assert step.info["tool_ok"] is False
            assert step.reward_components["tool_error"] == -1.0
            assert step.observation_text.startswith("tool error")
            assert set(step.timings) >= {"policy_s", "env_s", "sandbox_s"}
        # three garbage calls hit the env's step limit
        assert len(traj) == 3 and traj.truncated and traj.steps[-1].info["cut"] == "steps"


def test_same_seed_same_actions(
    run: tuple[list[Trajectory], Recorder],
    model: Any,
    tokenizer: Any,
    envs: list[CodeRepairEnv],
    tasks: list[RepoTask],
) -> None:
    first, _ = run
    again = policy_episodes(model, tokenizer, envs, tasks, SAMPLING, max_context=1024)

    def actions(trajs: list[Trajectory]) -> list[list[list[int]]]:
        return [[s.action_ids for s in t.steps] for t in trajs]

    assert actions(again) == actions(first)
    assert [t.token_ids() for t in again] == [t.token_ids() for t in first]


def test_tiny_max_context_cuts_episodes(
    model: Any, tokenizer: Any, envs: list[CodeRepairEnv], tasks: list[RepoTask]
) -> None:
    first = policy_episodes(model, tokenizer, envs, tasks, SAMPLING, max_context=1024)
    longest = max(first, key=lambda t: len(t.prompt_ids))
    longest_prompt = len(longest.prompt_ids)
    same = [task for task in tasks if task.task_id == longest.task_id] * len(envs)
    trajs = policy_episodes(model, tokenizer, envs, same, SAMPLING, max_context=longest_prompt + MAX_NEW)
    for traj in trajs:
        traj.validate()
        assert len(traj) == 1 and traj.truncated and not traj.terminated
        assert traj.steps[-1].info["cut"] == "context"
        assert traj.steps[-1].reward_components["task_failed"] == 0.0  # the dense table's task_failed
        assert traj.steps[-1].info["events"]["task_failed"] == 1
    with pytest.raises(ValueError, match="max_context"):
        policy_episodes(model, tokenizer, envs, tasks, SAMPLING, max_context=longest_prompt)


def test_timeout_cuts_episodes(
    model: Any, tokenizer: Any, envs: list[CodeRepairEnv], tasks: list[RepoTask]
) -> None:
    trajs = policy_episodes(model, tokenizer, envs, tasks, SAMPLING, max_context=1024, episode_timeout_s=0.0)
    assert all(len(t) == 1 and t.truncated and t.steps[-1].info["cut"] == "timeout" for t in trajs)


def test_rejects_mismatched_or_shared_envs(
    model: Any, tokenizer: Any, envs: list[CodeRepairEnv], tasks: list[RepoTask]
) -> None:
    with pytest.raises(ValueError, match="one env per task"):
        policy_episodes(model, tokenizer, envs[:2], tasks, SAMPLING, max_context=1024)
    with pytest.raises(ValueError, match="twice"):
        policy_episodes(model, tokenizer, [envs[0]] * 3, tasks, SAMPLING, max_context=1024)


# ----------------------------------------------------------------- any tool env, through the protocol

ECHO_TABLE = RewardTable(weights={"said": 1.0, "task_failed": -1.0}, final=("task_failed",))


@dataclass(frozen=True)
class _Prompt:
    task_id: str
    domain: Domain = "ecommerce"
    split: str = "train"
    provenance: dict[str, Any] = field(default_factory=dict)


class EchoEnv:
    """A two-step tool env written only against the contract: it echoes the action's length."""

    domain: Domain = "ecommerce"
    rewards = ECHO_TABLE

    def __init__(self) -> None:
        self.max_steps = 2
        self.last_timings: dict[str, float] = {}
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        self.steps = 0
        return f"say something about {(options or {})['task'].task_id}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        info: dict[str, Any] = {"tool": "say", "tool_ok": True, "success": None}
        self.last_timings = {"env_s": 0.0}
        return finish_step(
            f"{len(action)} chars",
            {"said": 1},
            info,
            terminated=False,
            step=self.steps,
            max_steps=self.max_steps,
            table=ECHO_TABLE,
            ending="an end",
        )

    def render(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def test_policy_episodes_run_any_tool_env(model: Any, tokenizer: Any) -> None:
    envs = [EchoEnv(), EchoEnv()]
    assert all(isinstance(e, ToolEnv) for e in envs)
    trajs = policy_episodes(model, tokenizer, envs, [_Prompt("a"), _Prompt("b")], SAMPLING, max_context=1024)
    assert [t.task_id for t in trajs] == ["a", "b"]
    for traj in trajs:
        assert [s.domain for s in traj.steps] == ["ecommerce", "ecommerce"]
        assert [s.reward for s in traj.steps] == [1.0, 0.0]  # the step limit's -1 on the second step
        assert traj.steps[-1].truncated and traj.steps[-1].info["cut"] == "steps"
        assert traj.steps[0].prompt_text.startswith("say something about")
        assert traj.steps[0].observation_text.endswith(" chars")


class SeenEnv(EchoEnv):
    """The echo env, keeping every action it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[str] = []

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.actions.append(action)
        return super().step(action)


def test_a_final_prefix_opens_only_the_last_allowed_step(model: Any, tokenizer: Any) -> None:
    envs = [SeenEnv(), SeenEnv()]
    prefix = '{"action": "generate_report", "text": "'
    trajs = policy_episodes(
        model, tokenizer, envs, [_Prompt("a"), _Prompt("b")], SAMPLING, max_context=1024, final_prefix=prefix
    )
    n_prefix = len(tokenizer.encode(prefix, add_special_tokens=False))
    for env, traj in zip(envs, trajs, strict=True):
        first, last = traj.steps
        assert not first.action_text.startswith(prefix) and first.action_logprobs is not None
        assert "forced_prefix_tokens" not in first.info
        # the env got the prefix and the policy's continuation; the record says what was forced
        assert env.actions[1] == last.action_text and last.action_text.startswith(prefix)
        assert last.info["forced_prefix_tokens"] == n_prefix and last.action_logprobs is None
        assert len(last.action_ids) > n_prefix
    # without room for the prefix in the context, the last step runs unforced
    for task, traj in zip("ab", trajs, strict=True):
        first = traj.steps[0]
        used = len(first.prompt_ids) + len(first.action_ids) + len(first.observation_ids)
        [tight] = policy_episodes(
            model, tokenizer, [SeenEnv()], [_Prompt(task)], SAMPLING, max_context=used + MAX_NEW,
            final_prefix=prefix,
        )  # fmt: skip
        assert len(tight.steps) == 2 and "forced_prefix_tokens" not in tight.steps[1].info

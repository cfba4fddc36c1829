"""Multi-turn policy rollouts on any tool environment: many episodes in lockstep, exact ids.

:func:`policy_episodes` runs one episode per ``(env, task)`` pair: a
:class:`~transferlab.platform.agent_env.ToolEnv` (``CodeRepair-v0``, ``OpsAnalysis-v0``) and a
:class:`~transferlab.platform.agent_env.Task` it plays. Each turn it

1. batches the full context ids of every still-running episode and calls
   :func:`~transferlab.agent_rl.policies.generation.generate` **once** for the batch;
2. steps each env with its sample's text in a thread pool (the sandbox does the heavy work in other
   processes, so the threads mostly wait);
3. records one :class:`~transferlab.platform.trajectory.StepRecord` per episode and appends the exact
   sampled ids and the observation's ids to that episode's context.

**Ids.** The prompt is ``encode_chat(tok, [{"role": "user", "content": intro}])`` (ending with
the template's generation prompt, from the tokenizer's own chat template); a step's ``action_ids``
are the sampled ids themselves (including a sampled end-of-turn token such as ``<|im_end|>``) and its
``observation_ids`` are ``observation_ids(tok, obs, ended=...)``, ``ended`` meaning the sampled ids end
with the template's end-of-turn token (a turn cut by length or a stop string is closed first),
i.e. exactly the ids appended to the context after the action. Nothing is re-tokenised, so
``Trajectory.token_ids()`` is the context the policy saw at its last turn plus its last action and
observation.

**Cuts.** An episode whose next context would leave fewer than ``sampling.max_new_tokens`` positions
below ``max_context`` is stopped after the step that grew it (``truncated=True``,
``info["cut"] = "context"``); one whose wall time since its reset passed ``episode_timeout_s`` is
stopped the same way with ``info["cut"] = "timeout"``; the env's own step limit gives
``info["cut"] = "steps"``. Every cut pays a terminal reward: the env pays the step limit's
``task_failed`` itself, and a context or timeout cut adds
:func:`~transferlab.platform.agent_env.cut_penalty` (the same ``task_failed``, weighed by the env's own
``rewards`` table, sparse tables included) to the last step's ``reward`` and ``reward_components``;
the last step's ``info["events"]`` then holds ``task_failed: 1`` as a step-limit step's does, so an
episode that runs out of context or time never earns more than one that runs out of steps. Masking
such episodes (DeepSWE-style) is the trainer's job. The last
observation of a context-cut episode is still recorded, so its ``token_ids()`` may run past
``max_context``; the policy never saw that context.

**Determinism.** At turn ``t`` the batch is sampled with seed ``sampling.seed + t * len(envs)``; row
``r`` of the batch (the ``r``-th still-running episode in input order) therefore uses
``sampling.seed + t * len(envs) + r``: unique per (turn, row), a function of the episode's index and
turn given the episodes that are still running, which is itself determined by the seed. Same seed
(and no timeout firing) gives the same episodes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from transferlab.agent_rl.policies.chat import ChatFormat
from transferlab.agent_rl.policies.generation import Sample, SamplingConfig, generate
from transferlab.agent_rl.policies.tokenizer import observation_ids, prompt_ids
from transferlab.platform.agent_env import FAILED, Task, ToolEnv, cut_penalty
from transferlab.platform.trajectory import StepRecord, Trajectory

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["one_turn_episodes", "policy_episode_id", "policy_episodes"]


def policy_episode_id(task_id: str, seed: int, index: int) -> str:
    """The episode id :func:`policy_episodes` gives episode ``index`` of a call with ``seed``."""
    return hashlib.sha1(f"{task_id}|{seed}|{index}|policy".encode()).hexdigest()[:16]


@dataclass
class _Episode:
    """Book-keeping of one running episode."""

    index: int
    env: ToolEnv
    task: Task
    episode_id: str
    intro: str = ""
    prompt: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    started: float = 0.0
    done: bool = False


@dataclass
class _StepResult:
    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    timings: dict[str, float]


def _reset(ep: _Episode, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
    ep.started = time.perf_counter()
    obs, _ = ep.env.reset(seed=seed + ep.index, options={"task": ep.task})
    ep.intro = obs
    ep.prompt = prompt_ids(tokenizer, obs)
    ep.context = list(ep.prompt)


def _closed(end_of_turn: tuple[int, ...], sample: Sample) -> bool:
    """Whether the sampled ids already end the assistant turn (a stop string or length cut does not)."""
    n = len(end_of_turn)
    return n == 0 or tuple(sample.completion_ids[-n:]) == end_of_turn


def _step(env: ToolEnv, action: str) -> _StepResult:
    obs, reward, term, trunc, info = env.step(action)
    return _StepResult(obs, reward, term, trunc, info, dict(env.last_timings))


def _cut_reason(
    ep: _Episode, res: _StepResult, next_len: int, room: int, max_context: int, timeout: float | None
) -> str | None:
    """Why the episode ends after this step without a submit, or None if it goes on."""
    if res.terminated:
        return None
    if res.truncated:
        return "steps"
    if next_len + room > max_context:
        return "context"
    if timeout is not None and time.perf_counter() - ep.started > timeout:
        return "timeout"
    return None


@dataclass(frozen=True)
class Forced:
    """Text an action is made to start with, and its token ids."""

    text: str
    ids: tuple[int, ...]


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    """``text``'s token ids, without special tokens."""
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def _forced(ep: _Episode, prefix: Forced | None, room: int, max_context: int) -> Forced | None:
    """``prefix`` when ``ep`` is at its env's last allowed step and the prefix fits, else None."""
    if prefix is None or len(ep.steps) != ep.env.max_steps - 1:
        return None
    return prefix if len(ep.context) + len(prefix.ids) + room <= max_context else None


def _record(
    ep: _Episode,
    sample: Sample,
    res: _StepResult,
    obs_ids: list[int],
    cut: str | None,
    policy_s: float,
    forced: Forced | None = None,
) -> StepRecord:
    k = len(ep.steps)
    reward = float(res.reward)
    components = {k_: float(v) for k_, v in res.info["components"].items()}
    events = {k_: float(v) for k_, v in res.info.get("events", {}).items()}
    if cut is not None and cut != "steps":  # the env paid the step limit; the rollout pays its own cuts
        extra, extra_components = cut_penalty(ep.env.rewards, cut)
        reward += extra
        for name, value in extra_components.items():
            components[name] = components.get(name, 0.0) + value
        events[FAILED] = events.get(FAILED, 0.0) + 1.0
    info: dict[str, Any] = {
        "tool": res.info.get("tool"),
        "tool_ok": res.info.get("tool_ok"),
        "success": res.info.get("success"),
        "stop_reason": sample.stop_reason,
        "events": events,
    }
    if cut is not None:
        info["cut"] = cut
        info["success"] = False
    if forced is not None:  # the action began with tokens the policy did not sample
        info["forced_prefix_tokens"] = len(forced.ids)
    return StepRecord(
        episode_id=ep.episode_id,
        step=k,
        task_id=ep.task.task_id,
        domain=ep.env.domain,
        action_text=(forced.text if forced else "") + sample.text,
        action_ids=[*(forced.ids if forced else ()), *sample.completion_ids],
        action_logprobs=None if forced else list(sample.logprobs),
        observation_text=res.obs,
        observation_ids=obs_ids,
        reward=reward,
        reward_components=components,
        terminated=bool(res.terminated),
        truncated=bool(res.truncated or cut is not None),
        info=info,
        timings={"policy_s": policy_s, **res.timings},
        prompt_text=ep.intro if k == 0 else "",
        prompt_ids=list(ep.prompt) if k == 0 else [],
    )


def policy_episodes(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    envs: Sequence[ToolEnv],
    tasks: Sequence[Task],
    sampling: SamplingConfig,
    max_context: int,
    episode_timeout_s: float | None = None,
    workers: int | None = None,
    final_prefix: str | None = None,
) -> list[Trajectory]:
    """Run one episode of the policy per ``(envs[i], tasks[i])``, in lockstep; see the module docstring.

    ``final_prefix`` (an evaluation control, never for training): the last step an env allows
    (``env.max_steps``) starts with this text, and the policy completes it; e.g. the opening of a
    report call forces every episode that reaches the step limit to end with a report. Such a step's
    ``action_logprobs`` is None (its first tokens were not sampled) and its ``info`` names how many
    tokens were forced; a step without room in the context for the prefix is not forced.

    ``envs`` must be distinct objects (each holds one episode's state); they are reset here and left
    open. Returns the episodes in input order, each validated. Raises ``ValueError`` when the lengths
    differ, an env repeats, or a task's first prompt plus ``sampling.max_new_tokens`` does not fit in
    ``max_context``. ``workers`` bounds the env thread pool (default: one thread per episode).
    """
    if len(envs) != len(tasks):
        raise ValueError(f"got {len(envs)} envs for {len(tasks)} tasks; pass one env per task")
    if len({id(e) for e in envs}) != len(envs):
        raise ValueError("the same env appears twice; each episode needs its own env")
    if episode_timeout_s is not None and episode_timeout_s < 0:
        raise ValueError(f"episode_timeout_s must be >= 0 or None, got {episode_timeout_s}")
    if not envs:
        return []
    room = sampling.max_new_tokens
    episodes = [
        _Episode(i, env, task, policy_episode_id(task.task_id, sampling.seed, i))
        for i, (env, task) in enumerate(zip(envs, tasks, strict=True))
    ]
    eot = ChatFormat.for_tokenizer(tokenizer).end_of_turn_ids
    prefix = Forced(final_prefix, encode_text(tokenizer, final_prefix)) if final_prefix else None
    with ThreadPoolExecutor(max_workers=workers or len(episodes)) as pool:
        list(pool.map(lambda ep: _reset(ep, tokenizer, sampling.seed), episodes))
        for ep in episodes:
            if len(ep.context) + room > max_context:
                raise ValueError(
                    f"task {ep.task.task_id!r}: the first prompt has {len(ep.context)} tokens, which with "
                    f"max_new_tokens={room} does not fit in max_context={max_context}; raise max_context"
                )
        turn = 0
        while running := [ep for ep in episodes if not ep.done]:
            cfg = sampling.model_copy(update={"seed": sampling.seed + turn * len(episodes)})
            t0 = time.perf_counter()
            forced = [_forced(ep, prefix, room, max_context) for ep in running]
            contexts = [ep.context + list(f.ids if f else ()) for ep, f in zip(running, forced, strict=True)]
            samples = generate(model, tokenizer, contexts, cfg)
            policy_s = (time.perf_counter() - t0) / len(running)
            actions = [(f.text if f else "") + s.text for s, f in zip(samples, forced, strict=True)]
            results = list(pool.map(_step, [ep.env for ep in running], actions))
            for ep, sample, res, f, context in zip(running, samples, results, forced, contexts, strict=True):
                obs_ids = observation_ids(tokenizer, res.obs, role="tool", ended=_closed(eot, sample))
                ep.context = context + list(sample.completion_ids) + obs_ids
                cut = _cut_reason(ep, res, len(ep.context), room, max_context, episode_timeout_s)
                ep.steps.append(_record(ep, sample, res, obs_ids, cut, policy_s, f))
                ep.done = res.terminated or res.truncated or cut is not None
            turn += 1
    return [Trajectory(ep.steps).validate() for ep in episodes]


def one_turn_episodes(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    envs: Sequence[ToolEnv],
    tasks: Sequence[Task],
    sampling: SamplingConfig,
    episode_ids: Sequence[str],
) -> list[Trajectory]:
    """One episode per ``(envs[i], tasks[i])`` of a one-turn env (``max_steps == 1``: single-step code
    tasks), all sampled in one batch: the prompt as for :func:`policy_episodes`, one action, the env's
    verdict. Row ``r`` samples with ``sampling.seed + r``. The final observation is kept as text only
    (no ids: no policy turn follows it). Each env is reset here and left open."""
    if not (len(envs) == len(tasks) == len(episode_ids)):
        raise ValueError(
            f"got {len(envs)} envs, {len(tasks)} tasks and {len(episode_ids)} ids; pass one each"
        )
    intros = [
        env.reset(seed=sampling.seed + i, options={"task": t})[0]
        for i, (env, t) in enumerate(zip(envs, tasks, strict=True))
    ]
    prompts = [prompt_ids(tokenizer, o) for o in intros]
    t0 = time.perf_counter()
    samples = generate(model, tokenizer, prompts, sampling)
    policy_s = (time.perf_counter() - t0) / max(len(envs), 1)
    with ThreadPoolExecutor(max_workers=max(len(envs), 1)) as pool:
        results = list(pool.map(_step, envs, [s.text for s in samples]))
    out = []
    for env, task, intro, prompt, sample, res, eid in zip(
        envs, tasks, intros, prompts, samples, results, episode_ids, strict=True
    ):
        step = StepRecord(
            episode_id=eid,
            step=0,
            task_id=task.task_id,
            domain=env.domain,
            action_text=sample.text,
            action_ids=list(sample.completion_ids),
            action_logprobs=list(sample.logprobs),
            observation_text=res.obs,
            observation_ids=[],
            reward=float(res.reward),
            reward_components={k: float(v) for k, v in res.info["components"].items()},
            terminated=bool(res.terminated),
            truncated=bool(res.truncated),
            info={"success": res.info.get("success")},
            timings={"policy_s": policy_s, **res.timings},
            prompt_text=intro,
            prompt_ids=prompt,
        )
        out.append(Trajectory([step]).validate())
    return out

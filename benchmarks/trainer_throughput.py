"""Trainer throughput: our GRPO step (``train_grpo``) against TRL's ``GRPOTrainer``, measured in one run.

Both trainers start from the same policy (one model built from config and seed, optionally SFT-ed as
in ``transferlab demo``, then deep-copied for each trainer), the same locally trained tokenizer, the same
toy-task prompts (TRL gets them as text decoded from ``code_prompt_ids``; the benchmark checks that TRL's
own tokenisation gives back exactly our ids, at start-up and on every step), and one reward callable: the
sandbox reward ``sandbox_reward(Verifier(...))`` wrapped by :class:`CountingReward`, which both trainers
call (TRL through a thin adapter that rebuilds each completion's text from its ids the way ``generate``
does). Settings are matched field by field (:func:`matched_settings`) and the run stops if any differ.

Each round builds both trainers afresh, runs one warm-up step and then ``--steps`` timed steps each
(the order alternates between rounds), and counts completion tokens (non-pad, the stop token included,
as both trainers mask them for the loss) and episodes (completions) as the reward function sees them.
Two policies by default (``--archs tiny qwen2``): the demo's tiny from-scratch Llama, and a realistic
architecture, ``AutoModelForCausalLM.from_config(Qwen2Config(...))`` (hidden 384, 8 layers, 6 heads with
2 key/value heads, MLP 1024, tied embeddings: about 12.7M parameters with our 300-token tokenizer, which
has the ChatML ``<|im_start|>``/``<|im_end|>`` tokens), built under a fixed seed.

It prints tokens/s, episodes/s, the time split (generation, sandbox reward, everything else: log-prob
recomputation, loss, backward, optimizer) and the ratio ours / TRL. No timing is asserted.

Usage: python benchmarks/trainer_throughput.py [--archs tiny qwen2] [--steps 10] [--qwen2-steps 5]
[--rounds 4] [--out OUT]
(every BenchConfig field is a flag; --out docs/results/trainer_throughput writes the .md and .json)
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import torch
from pydantic import Field, model_validator

from transferlab.agent_rl.policies.generation import Sample, SamplingConfig, stop_token_ids
from transferlab.agent_rl.policies.model import TinyPolicyConfig, count_parameters
from transferlab.agent_rl.policies.tokenizer import train_tokenizer
from transferlab.coding_rl.sandbox.backends import open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import (
    GRPOConfig,
    RewardFn,
    SFTConfig,
    code_prompt_ids,
    sandbox_reward,
    train_grpo,
    train_sft,
)
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.toy import toy_solution, toy_tasks
from transferlab.platform.config import BaseConfig

TrainerName = Literal["ours", "trl"]
Arch = Literal["tiny", "qwen2"]
QWEN2_PARAM_RANGE = (10_000_000, 30_000_000)
"""The Qwen2 policy's size: a realistic architecture that one CPU thread still trains in seconds a step."""


def adamw_defaults() -> dict[str, Any]:
    """``torch.optim.AdamW``'s defaults: ``train_grpo`` builds its optimizer with only ``lr`` given."""
    return dict(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]).defaults)


class BenchConfig(BaseConfig):
    """What the trainer benchmark runs (every field is a --flag)."""

    steps: int = Field(default=10, ge=1, description="Timed GRPO steps per trainer per round.")
    rounds: int = Field(default=4, ge=1, description="Rounds (fresh trainers, order alternating: ABBA...).")
    tasks_per_step: int = Field(default=8, ge=1, description="Distinct prompts per step.")
    group_size: int = Field(default=4, ge=2, description="Completions per prompt (G, num_generations).")
    max_new_tokens: int = Field(default=24, ge=1, description="Completion length limit for both.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature for both.")
    lr: float = Field(default=5e-4, gt=0, description="AdamW learning rate for both (as in the demo).")
    sft_steps: list[int] = Field(
        default=[200, 0],
        min_length=1,
        description="One comparison per value: SFT steps on the shared policy before copying it (200 = the "
        "demo's policy, short completions; 0 = untrained, completions near the token limit).",
    )
    archs: list[Arch] = Field(
        default=["tiny", "qwen2"],
        min_length=1,
        description="Policies to race: 'tiny' (the demo's from-scratch Llama) and/or 'qwen2' (a "
        "Qwen2Config of 10-30M parameters built with AutoModelForCausalLM.from_config).",
    )
    n_layer: int = Field(default=2, ge=1, description="Tiny policy layers (demo: 2).")
    d_model: int = Field(default=64, ge=8, description="Tiny policy width (demo: 64, 4 heads).")
    qwen2_sft_steps: list[int] = Field(
        default=[0],
        min_length=1,
        description="One Qwen2 comparison per value: SFT steps before copying (0 = untrained, completions "
        "near the token limit; SFT of the 13M-parameter model costs seconds per step on one thread).",
    )
    qwen2_steps: int = Field(
        default=5,
        ge=1,
        description="Timed GRPO steps per trainer per round for the Qwen2 policy (a step takes seconds).",
    )
    qwen2_hidden: int = Field(default=384, ge=64, description="Qwen2 hidden size.")
    qwen2_layers: int = Field(default=8, ge=1, description="Qwen2 decoder layers.")
    qwen2_heads: int = Field(default=6, ge=1, description="Qwen2 attention heads (head dim 64).")
    qwen2_kv_heads: int = Field(
        default=2, ge=1, description="Qwen2 key/value heads (grouped-query attention: fewer than heads)."
    )
    qwen2_intermediate: int = Field(default=1024, ge=8, description="Qwen2 MLP width (~2.7x hidden).")
    threads: int = Field(default=1, ge=1, description="torch.set_num_threads for both trainers.")
    backend: Literal["forkserver", "subprocess"] = Field(
        default="forkserver", description="Sandbox backend of the reward (subprocess if unavailable)."
    )
    seed: int = Field(default=0, ge=0, description="Seeds the model, SFT and each round's sampling.")

    @model_validator(mode="after")
    def _qwen2_shape(self) -> Self:
        if self.qwen2_hidden % self.qwen2_heads:
            raise ValueError(
                f"qwen2_hidden={self.qwen2_hidden} is not a multiple of qwen2_heads={self.qwen2_heads}; "
                "pick qwen2_hidden = qwen2_heads * head_dim"
            )
        if self.qwen2_heads % self.qwen2_kv_heads or self.qwen2_kv_heads >= self.qwen2_heads:
            raise ValueError(
                f"qwen2_kv_heads={self.qwen2_kv_heads} must be fewer than qwen2_heads={self.qwen2_heads} "
                "and divide it (grouped-query attention, as in Qwen2.5); e.g. 6 heads, 2 kv heads"
            )
        return self


# ----------------------------------------------------------------------------------- the shared reward


@dataclass
class RewardCall:
    """What one call of the reward function saw: one per training step."""

    tokens: int
    episodes: int
    seconds: float
    max_len: int
    cut: int
    reward_sum: float


@dataclass
class CountingReward:
    """The one reward both trainers call: ``reward_fn`` plus a record of what it graded."""

    reward_fn: RewardFn
    calls: list[RewardCall] = field(default_factory=list)

    def __call__(self, tasks: Sequence[CodeTask], samples: Sequence[Sample]) -> list[float]:
        t0 = time.perf_counter()
        rewards = self.reward_fn(tasks, samples)
        lengths = [len(s.completion_ids) for s in samples]
        self.calls.append(
            RewardCall(
                tokens=sum(lengths),
                episodes=len(samples),
                seconds=time.perf_counter() - t0,
                max_len=max(lengths),
                cut=sum(not s.finished for s in samples),
                reward_sum=float(sum(rewards)),
            )
        )
        return rewards


def sample_from_ids(tokenizer: Any, ids: Sequence[int], stops: set[int]) -> Sample:
    """A :class:`Sample` for TRL's completion ids, its text decoded exactly as ``generate`` decodes it."""
    ids = [int(i) for i in ids]
    stopped = bool(ids) and ids[-1] in stops
    text = tokenizer.decode(
        ids[:-1] if stopped else ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    reason: Literal["stop_token", "length"] = "stop_token" if stopped else "length"
    return Sample([], ids, [], [], str(text), stopped, reason)


def trl_reward(
    reward: CountingReward, tokenizer: Any, tasks_by_id: dict[str, CodeTask], stops: set[int]
) -> Callable[..., list[float | None]]:
    """``reward`` in TRL's ``reward_funcs`` signature; the task comes from the dataset's ``task_id``."""

    def sandbox_reward(
        prompts: list[str],
        completions: list[str],
        completion_ids: list[list[int]],
        task_id: list[str],
        **_: Any,
    ) -> list[float | None]:
        samples = [sample_from_ids(tokenizer, ids, stops) for ids in completion_ids]
        return list(reward([tasks_by_id[t] for t in task_id], samples))

    return sandbox_reward


# ------------------------------------------------------------------------------------------ the setup


@dataclass
class Setup:
    """Everything both trainers share."""

    config: BenchConfig
    tokenizer: Any
    arch: Arch
    policy: Any
    """The initial weights; each trainer gets a deep copy."""
    policy_info: dict[str, Any]
    """What the policy is (JSON-able): family, shape, parameter count, seed."""
    sft_steps: int
    tasks: list[CodeTask]
    prompt_text: dict[str, str]
    """Task id -> its prompt as text (``code_prompt_ids`` decoded), for TRL's dataset."""
    prompt_ids: dict[str, list[int]]
    """Prompt text -> our prompt ids (``code_prompt_ids``)."""
    reward: CountingReward
    stops: set[int]
    sandbox_backend: str


def bench_tokenizer() -> Any:
    """The demo's tokenizer: byte-level BPE (300 tokens, ChatML specials) trained on the toy tasks."""
    train, held = toy_tasks()
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in train + held] * 20
    return train_tokenizer(texts, vocab_size=300, seed=0)


def tiny_policy(config: BenchConfig, tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """The demo's from-scratch Llama (``TinyPolicyConfig``) and its description."""
    policy_config = TinyPolicyConfig(
        n_layer=config.n_layer, d_model=config.d_model, n_head=4, max_positions=128, seed=config.seed
    )
    model = policy_config.create(tokenizer)
    return model, policy_config.to_dict() | {"parameters": count_parameters(model)}


def qwen2_config(config: BenchConfig, tokenizer: Any) -> Any:
    """A ``Qwen2Config`` shaped like a small Qwen2.5 (GQA, SwiGLU, RMSNorm, rotary, tied embeddings)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.qwen2_hidden,
        intermediate_size=config.qwen2_intermediate,
        num_hidden_layers=config.qwen2_layers,
        num_attention_heads=config.qwen2_heads,
        num_key_value_heads=config.qwen2_kv_heads,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def qwen2_policy(config: BenchConfig, tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """``AutoModelForCausalLM.from_config`` on :func:`qwen2_config` under ``torch.manual_seed(seed)``.

    Raises ``ValueError`` when the parameter count falls outside :data:`QWEN2_PARAM_RANGE`.
    """
    from transformers import AutoModelForCausalLM

    hf_config = qwen2_config(config, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.generation_config, name, getattr(tokenizer, name))
    model.eval()
    parameters = count_parameters(model)
    low, high = QWEN2_PARAM_RANGE
    if not low <= parameters <= high:
        raise ValueError(
            f"error: the Qwen2 policy has {parameters:,} parameters, outside {low:,}-{high:,}; "
            "fix: change --qwen2-hidden, --qwen2-layers or --qwen2-intermediate (default 384, 8, 1024)"
        )
    info = {
        "architecture": "qwen2",
        "model_class": type(model).__name__,
        "hidden_size": hf_config.hidden_size,
        "num_hidden_layers": hf_config.num_hidden_layers,
        "num_attention_heads": hf_config.num_attention_heads,
        "num_key_value_heads": hf_config.num_key_value_heads,
        "intermediate_size": hf_config.intermediate_size,
        "vocab_size": hf_config.vocab_size,
        "tie_word_embeddings": hf_config.tie_word_embeddings,
        "max_position_embeddings": hf_config.max_position_embeddings,
        "attn_implementation": model.config._attn_implementation,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "parameters": parameters,
        "seed": config.seed,
    }
    return model, info


def build_setup(
    config: BenchConfig, arch: Arch, sft_steps: int, tokenizer: Any, verifier: Verifier, sandbox_backend: str
) -> Setup:
    """Policy (SFT-ed as in the demo) and prompts, as ``transferlab demo`` builds them."""
    train, _ = toy_tasks()
    policy, info = (tiny_policy if arch == "tiny" else qwen2_policy)(config, tokenizer)
    if arch == "qwen2":
        config = config.model_copy(update={"steps": config.qwen2_steps})
    if sft_steps:
        demos = [(t, toy_solution(t)) for t in train]
        train_sft(policy, tokenizer, demos, SFTConfig(steps=sft_steps, batch_size=16, seed=config.seed))
    prompt_text: dict[str, str] = {}
    prompt_ids: dict[str, list[int]] = {}
    for task in train:
        ids = code_prompt_ids(tokenizer, task)
        text = str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        if tokenizer(text=[text])["input_ids"][0] != ids:
            raise AssertionError(f"prompt of {task.task_id} does not round-trip through text: {text!r}")
        prompt_text[task.task_id], prompt_ids[text] = text, ids
    stops = stop_token_ids(tokenizer, SamplingConfig())
    reward = CountingReward(sandbox_reward(verifier))
    return Setup(
        config,
        tokenizer,
        arch,
        policy,
        info,
        sft_steps,
        train,
        prompt_text,
        prompt_ids,
        reward,
        stops,
        sandbox_backend,
    )


# ------------------------------------------------------------------------------------------ the runs


@dataclass
class TrainerRun:
    """One trainer's timed steps in one round."""

    trainer: TrainerName
    round: int
    steps: int
    wall_s: float
    tokens: int
    episodes: int
    generation_s: float
    reward_s: float
    max_len: int
    cut: int
    mean_reward: float
    threads: int

    @property
    def other_s(self) -> float:
        """Everything but generation and reward: log-probs, loss, backward, optimizer, overhead."""
        return self.wall_s - self.generation_s - self.reward_s


class StepClock:
    """A metrics logger for ``train_grpo`` that only notes when each step ended (and the threads)."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.threads: set[int] = set()

    def log(self, step: int, metrics: Any) -> None:
        self.ends.append(time.perf_counter())
        self.threads.add(torch.get_num_threads())

    def flush(self) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""


def _summarise(
    name: TrainerName, round_: int, clock: StepClock, calls: list[RewardCall], generation: list[float]
) -> TrainerRun:
    """Steps 1..N (step 0 is the warm-up): wall from the end of step 0 to the end of step N."""
    timed = calls[1:]
    if len(clock.ends) != len(calls) or len(generation) != len(calls):
        raise AssertionError(
            f"{name}: {len(clock.ends)} steps, {len(calls)} reward calls, {len(generation)} gens"
        )
    if len(clock.threads) != 1:
        raise AssertionError(f"{name}: torch thread count changed during the run: {clock.threads}")
    return TrainerRun(
        trainer=name,
        round=round_,
        steps=len(timed),
        wall_s=clock.ends[-1] - clock.ends[0],
        tokens=sum(c.tokens for c in timed),
        episodes=sum(c.episodes for c in timed),
        generation_s=sum(generation[1:]),
        reward_s=sum(c.seconds for c in timed),
        max_len=max(c.max_len for c in timed),
        cut=sum(c.cut for c in timed),
        mean_reward=sum(c.reward_sum for c in timed) / max(1, sum(c.episodes for c in timed)),
        threads=clock.threads.pop(),
    )


def our_config(config: BenchConfig, round_: int) -> GRPOConfig:
    """Our trainer's settings for a round."""
    return GRPOConfig(
        steps=config.steps + 1,
        tasks_per_step=config.tasks_per_step,
        group_size=config.group_size,
        epochs=1,
        lr=config.lr,
        kl_coef=0.0,
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed + round_,
    )


def run_ours(setup: Setup, round_: int) -> TrainerRun:
    """``train_grpo`` for 1 + ``steps`` steps on a copy of the initial policy."""
    setup.reward.calls.clear()
    model = copy.deepcopy(setup.policy)
    clock = StepClock()
    history = train_grpo(
        model, setup.tokenizer, setup.tasks, setup.reward, our_config(setup.config, round_), clock
    )
    return _summarise(
        "ours", round_, clock, list(setup.reward.calls), [h["time/generation_s"] for h in history]
    )


def trl_args(config: BenchConfig, round_: int, output_dir: str) -> Any:
    """TRL's ``GRPOConfig`` matching :func:`our_config` (CPU, fp32, no logging, saving or checkpointing)."""
    from trl import GRPOConfig as TRLGRPOConfig

    ours = our_config(config, round_)
    return TRLGRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16=True
        fp16=False,
        activation_checkpointing=False,  # TRL defaults to gradient checkpointing on; ours has none
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        max_steps=ours.steps,
        per_device_train_batch_size=ours.tasks_per_step * ours.group_size,
        gradient_accumulation_steps=1,
        num_generations=ours.group_size,
        num_iterations=ours.epochs,
        max_completion_length=ours.max_new_tokens,
        temperature=ours.temperature,
        top_p=1.0,
        top_k=0,
        beta=ours.kl_coef,
        epsilon=ours.clip_low,
        epsilon_high=ours.clip_high,
        scale_rewards="group" if ours.scale_by_std else "none",
        loss_type="dapo",  # token-level mean over the batch, as our grpo_loss's default "token_mean"
        learning_rate=ours.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=adamw_defaults()["weight_decay"],  # 0.01, which train_grpo gets; TRL's default is 0
        adam_beta1=adamw_defaults()["betas"][0],
        adam_beta2=adamw_defaults()["betas"][1],
        adam_epsilon=adamw_defaults()["eps"],
        max_grad_norm=ours.grad_clip,
        seed=ours.seed,
    )


def matched_settings(
    ours: GRPOConfig, args: Any, trainer: Any, stops: set[int]
) -> list[tuple[str, Any, Any]]:
    """(setting, ours, TRL) for every setting the comparison holds equal."""
    sampling = SamplingConfig()
    optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    group = optimizer.param_groups[0]
    return [
        ("completions per step", ours.tasks_per_step * ours.group_size, args.generation_batch_size),
        ("G (num_generations)", ours.group_size, args.num_generations),
        ("optimizer steps per batch", ours.epochs, args.num_iterations * args.steps_per_generation),
        ("max_new_tokens / max_completion_length", ours.max_new_tokens, args.max_completion_length),
        ("temperature", ours.temperature, args.temperature),
        ("top_p", sampling.top_p, args.top_p),
        ("top_k", sampling.top_k, args.top_k),
        ("stop token ids", sorted(stops), sorted(trainer.eos_token_ids)),
        ("KL coefficient (beta)", ours.kl_coef, args.beta),
        ("clip low (epsilon)", ours.clip_low, args.epsilon),
        ("clip high (epsilon_high)", ours.clip_high, args.epsilon_high),
        ("reward scaling", "group" if ours.scale_by_std else "none", args.scale_rewards),
        ("optimizer", "AdamW", type(optimizer).__name__),
        ("lr", ours.lr, group["lr"]),
        ("weight decay", adamw_defaults()["weight_decay"], group["weight_decay"]),
        ("betas", tuple(adamw_defaults()["betas"]), tuple(group["betas"])),
        ("adam eps", adamw_defaults()["eps"], group["eps"]),
        ("grad clip", ours.grad_clip, args.max_grad_norm),
        ("dtype", "float32", str(next(trainer.model.parameters()).dtype).removeprefix("torch.")),
        ("activation checkpointing", False, bool(args.activation_checkpointing)),
        ("device", "cpu", str(trainer.accelerator.device)),
    ]


@dataclass
class TRLProbe:
    """What the benchmark observes inside TRL's trainer."""

    generation_s: list[float] = field(default_factory=list)
    """Seconds in ``_generate_single_turn`` (``model.generate`` and EOS masking), one per step."""
    prompts_checked: int = 0
    """Prompts whose TRL token ids were checked equal to ``code_prompt_ids``."""


def build_trl_trainer(setup: Setup, round_: int, output_dir: str) -> tuple[Any, TRLProbe]:
    """A ``GRPOTrainer`` on a copy of the initial policy, with its prompt ids checked and generation timed."""
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    model = copy.deepcopy(setup.policy)
    model.generation_config.eos_token_id = sorted(setup.stops)  # stop where our generate stops
    tasks_by_id = {t.task_id: t for t in setup.tasks}
    dataset = Dataset.from_list(
        [{"prompt": setup.prompt_text[t.task_id], "task_id": t.task_id} for t in setup.tasks]
    )
    args = trl_args(setup.config, round_, output_dir)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_reward(setup.reward, setup.tokenizer, tasks_by_id, setup.stops),
        args=args,
        train_dataset=dataset,
        processing_class=setup.tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    tokenize, generate_single = trainer._tokenize_prompts, trainer._generate_single_turn
    probe = TRLProbe()

    def checked_tokenize(prompts: list[str]) -> Any:
        ids, images, fields = tokenize(prompts)
        if [list(map(int, i)) for i in ids] != [setup.prompt_ids[p] for p in prompts]:
            raise AssertionError("TRL tokenised a prompt to ids that differ from code_prompt_ids")
        probe.prompts_checked += len(prompts)
        return ids, images, fields

    def timed_generation(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = generate_single(*a, **kw)
        probe.generation_s.append(time.perf_counter() - t0)
        return out

    # instance attributes shadow the methods: checks and timing without subclassing TRL's trainer
    setattr(trainer, "_tokenize_prompts", checked_tokenize)  # noqa: B010
    setattr(trainer, "_generate_single_turn", timed_generation)  # noqa: B010
    return trainer, probe


def run_trl(setup: Setup, round_: int) -> tuple[TrainerRun, list[tuple[str, Any, Any]]]:
    """TRL's ``GRPOTrainer.train`` for 1 + ``steps`` steps on a copy of the initial policy.

    Also returns :func:`matched_settings` as the trained trainer holds them (its optimizer exists only
    once training has started); raises if any setting differs from ours.
    """
    from transformers import TrainerCallback

    clock = StepClock()

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.log(state.global_step, {})

    with tempfile.TemporaryDirectory(prefix="transferlab-trl-") as tmp:
        trainer, probe = build_trl_trainer(setup, round_, tmp)
        trainer.add_callback(Clock())
        setup.reward.calls.clear()
        trainer.train()
    settings = matched_settings(our_config(setup.config, round_), trainer.args, trainer, setup.stops)
    unequal = [s for s in settings if s[1] != s[2]]
    if unequal:
        raise AssertionError(f"settings differ between the trainers: {unequal}")
    calls = list(setup.reward.calls)
    if probe.prompts_checked != sum(c.episodes for c in calls):
        raise AssertionError(
            f"checked {probe.prompts_checked} TRL prompts for {len(calls)} steps' completions"
        )
    return _summarise("trl", round_, clock, calls, probe.generation_s), settings


# ------------------------------------------------------------------------------------------ reporting


def rates(runs: Sequence[TrainerRun]) -> dict[str, float]:
    """Totals over rounds: tokens/s, episodes/s and the time split per step."""
    wall = sum(r.wall_s for r in runs)
    steps = sum(r.steps for r in runs)
    episodes = sum(r.episodes for r in runs)
    return {
        "tokens_per_s": sum(r.tokens for r in runs) / wall,
        "episodes_per_s": episodes / wall,
        "tokens_per_s_without_sandbox": sum(r.tokens for r in runs) / (wall - sum(r.reward_s for r in runs)),
        "step_s": wall / steps,
        "generation_s_per_step": sum(r.generation_s for r in runs) / steps,
        "reward_s_per_step": sum(r.reward_s for r in runs) / steps,
        "other_s_per_step": sum(r.other_s for r in runs) / steps,
        "mean_completion_tokens": sum(r.tokens for r in runs) / episodes,
        "cut_at_limit": sum(r.cut for r in runs) / episodes,
        "max_completion_tokens": max(r.max_len for r in runs),
        "mean_reward": sum(r.mean_reward * r.episodes for r in runs) / episodes,
        "generation_tokens_per_s": sum(r.tokens for r in runs) / sum(r.generation_s for r in runs),
    }


def compare(setup: Setup, log: Callable[[str], None]) -> dict[str, Any]:
    """Both trainers, ``rounds`` times, alternating which goes first; one scenario's JSON-able result."""
    config = setup.config
    runs: list[TrainerRun] = []
    settings: list[tuple[str, Any, Any]] = []
    for round_ in range(config.rounds):
        order: list[TrainerName] = ["ours", "trl"] if round_ % 2 == 0 else ["trl", "ours"]
        for name in order:
            log(
                f"{setup.arch}, SFT {setup.sft_steps}, round {round_ + 1}/{config.rounds}: {name}, "
                f"{config.steps} steps"
            )
            if name == "ours":
                runs.append(run_ours(setup, round_))
            else:
                trl_run, settings = run_trl(setup, round_)
                runs.append(trl_run)
    ours_runs = [r for r in runs if r.trainer == "ours"]
    trl_runs = [r for r in runs if r.trainer == "trl"]
    ours, trl = rates(ours_runs), rates(trl_runs)
    per_round = [
        (a.tokens / a.wall_s) / (b.tokens / b.wall_s) for a, b in zip(ours_runs, trl_runs, strict=True)
    ]
    return {
        "arch": setup.arch,
        "policy": setup.policy_info,
        "sft_steps": setup.sft_steps,
        "steps": config.steps,
        "rounds": config.rounds,
        "ours": ours,
        "trl": trl,
        "ratio_ours_over_trl": {k: ours[k] / trl[k] for k in RATIO_KEYS},
        "tokens_per_s_ratio_per_round": per_round,
        "tokens_per_s_ratio_median_of_rounds": statistics.median(per_round),
        "settings": [{"setting": s, "ours": str(a), "trl": str(b)} for s, a, b in settings],
        "runs": [asdict(r) | {"other_s": r.other_s} for r in runs],
    }


def run(config: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One :func:`compare` per arch and SFT-steps value, on one sandbox; the result as a JSON-able dict."""
    torch.set_num_threads(config.threads)
    load_start = os.getloadavg()[0]
    sandbox, sandbox_config, fallback = open_backend(SandboxConfig(backend=config.backend, workers=1))
    tokenizer = bench_tokenizer()
    scenarios = []
    try:
        verifier = Verifier(sandbox, sandbox_config)
        for arch in config.archs:
            for sft_steps in config.sft_steps if arch == "tiny" else config.qwen2_sft_steps:
                setup = build_setup(config, arch, sft_steps, tokenizer, verifier, sandbox_config.backend)
                scenarios.append(compare(setup, log))
    finally:
        sandbox.close()
    return {
        "config": config.to_dict(),
        "prompts": len(setup.prompt_ids),
        "sandbox_backend": setup.sandbox_backend,
        "sandbox_fallback": fallback,
        "scenarios": scenarios,
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "versions": _versions(),
    }


def _versions() -> dict[str, str]:
    import transformers
    import trl

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }


RATIO_KEYS = ("tokens_per_s", "episodes_per_s", "tokens_per_s_without_sandbox", "generation_tokens_per_s")
ROWS = [
    ("tokens/s", "tokens_per_s", "{:.0f}"),
    ("episodes/s", "episodes_per_s", "{:.1f}"),
    ("tokens/s without the sandbox's time", "tokens_per_s_without_sandbox", "{:.0f}"),
    ("s / step", "step_s", "{:.3f}"),
    ("s / step: generation", "generation_s_per_step", "{:.3f}"),
    ("s / step: sandbox reward", "reward_s_per_step", "{:.3f}"),
    ("s / step: the rest (log-probs, loss, update)", "other_s_per_step", "{:.3f}"),
    ("generation tokens/s", "generation_tokens_per_s", "{:.0f}"),
    ("mean completion tokens", "mean_completion_tokens", "{:.1f}"),
    ("share cut at the token limit", "cut_at_limit", "{:.0%}"),
    ("longest completion (tokens)", "max_completion_tokens", "{:.0f}"),
    ("mean reward", "mean_reward", "{:.2f}"),
]


def scenario_title(scenario: dict[str, Any]) -> str:
    n, policy = scenario["sft_steps"], scenario["policy"]
    arch = (
        f"Qwen2 ({policy['parameters'] / 1e6:.1f}M parameters)"
        if scenario["arch"] == "qwen2"
        else f"tiny {policy['architecture']} ({policy['parameters'] / 1e6:.2f}M parameters)"
    )
    demo = " (the demo policy)" if n == 200 and scenario["arch"] == "tiny" else ""
    return f"{arch}, {f'after SFT {n} steps{demo}' if n else 'untrained'}"


def table_rows(scenario: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, ours, TRL, ours / TRL) rows for one scenario's table."""
    out = []
    for label, key, fmt in ROWS:
        a, b = scenario["ours"][key], scenario["trl"][key]
        ratio = f"{a / b:.2f}x" if key in RATIO_KEYS else ""
        out.append((label, fmt.format(a), fmt.format(b), ratio))
    return out


def per_round_line(scenario: dict[str, Any]) -> str:
    rounds = ", ".join(f"{x:.2f}x" for x in scenario["tokens_per_s_ratio_per_round"])
    return (
        f"tokens/s ratio per round: {rounds} (median {scenario['tokens_per_s_ratio_median_of_rounds']:.2f}x)"
    )


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for scenario in result["scenarios"]:
        table = Table(title=f"GRPO step, ours vs TRL: {scenario_title(scenario)}", title_justify="left")
        for column in ("metric", "ours", "TRL", "ours / TRL"):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for row in table_rows(scenario):
            table.add_row(*row)
        console.print(table)
        console.print(per_round_line(scenario), highlight=False)


def policy_lines(result: dict[str, Any]) -> list[str]:
    """One settings line per policy raced (from the scenarios, first occurrence of each arch)."""
    lines, seen = [], set()
    for scenario in result["scenarios"]:
        policy = scenario["policy"]
        if scenario["arch"] in seen:
            continue
        seen.add(scenario["arch"])
        if scenario["arch"] == "qwen2":
            lines.append(
                f"- policy `qwen2`: `AutoModelForCausalLM.from_config(Qwen2Config(...))` -> "
                f"{policy['model_class']}, hidden {policy['hidden_size']}, {policy['num_hidden_layers']} "
                f"layers, {policy['num_attention_heads']} heads with {policy['num_key_value_heads']} "
                f"key/value heads (grouped-query attention), MLP {policy['intermediate_size']}, tied "
                f"embeddings, vocabulary {policy['vocab_size']}, {policy['attn_implementation']} attention, "
                f"{policy['dtype']}, **{policy['parameters']:,} parameters**, weights from "
                f"`torch.manual_seed({policy['seed']})`;"
            )
        else:
            lines.append(
                f"- policy `tiny`: from-scratch {policy['architecture']} (`TinyPolicyConfig`: "
                f"{policy['n_layer']} layers, width {policy['d_model']}, {policy['n_head']} heads, "
                f"{policy['parameters']:,} parameters, seed {policy['seed']});"
            )
    return lines


def render_markdown(result: dict[str, Any], command: str) -> str:
    """The results page: tables, settings, command, machine and date."""
    cfg, versions = result["config"], result["versions"]
    load = result["load_average_1min"]
    lines = [
        "# Trainer throughput: our GRPO step vs TRL's GRPOTrainer",
        "",
        f"`{command}`, {datetime.date.today().isoformat()}, 2-core shared VM ({os.cpu_count()} CPUs, "
        f"no GPU), torch {versions['torch']}, transformers {versions['transformers']}, "
        f"trl {versions['trl']}; 1-minute load average {load['start']:.1f} at the start and "
        f"{load['end']:.1f} at the end (other jobs share the cores). Raw numbers: `trainer_throughput.json`.",
        "",
        f"Totals over {cfg['rounds']} round(s) of 1 warm-up + N timed steps per trainer (N = "
        f"{cfg['steps']} for the tiny policy, {cfg['qwen2_steps']} for Qwen2; each section says; fresh "
        "trainers each round from the same initial weights, order alternating). Tokens are completion "
        "tokens (non-pad, stop token included: what both trainers' loss masks count), episodes are "
        "completions; both are counted by the shared reward function. A step's time is split into "
        "generation, the sandbox reward, and the rest (log-prob recomputation, loss, backward, optimizer, "
        "the trainer's own overhead).",
    ]
    for scenario in result["scenarios"]:
        lines += [
            "",
            f"## {scenario_title(scenario)}",
            "",
            "| metric | ours | TRL | ours / TRL |",
            "|---|---:|---:|---:|",
            *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in table_rows(scenario)),
            "",
            f"{scenario['rounds']} rounds of 1 warm-up + {scenario['steps']} timed steps per trainer; "
            + per_round_line(scenario)
            + ".",
        ]
    settings = result["scenarios"][-1]["settings"]
    lines += [
        "",
        "## Settings",
        "",
        *policy_lines(result),
        "- each policy is SFT-ed as in `transferlab demo` for the steps its section names (if any), then "
        "deep-copied for each trainer; tokenizer trained locally (byte-level BPE, 300 tokens, ChatML "
        "`<|im_start|>`/`<|im_end|>` specials), the same for every policy;",
        f"- prompts: the {result['prompts']} toy train tasks' `code_prompt_ids`, given to TRL as decoded "
        "text; TRL's tokenisation checked equal to our ids at start-up and on every step;",
        f"- reward: `sandbox_reward(Verifier(...))` on the {result['sandbox_backend']} sandbox (1 worker), "
        "one callable for both (TRL through an adapter that decodes each completion as `generate` does);",
        f"- torch threads: {cfg['threads']} for both (the sandbox worker has the other core).",
        "",
        "Checked equal in every round (the run stops otherwise):",
        "",
        "| setting | ours | TRL |",
        "|---|---|---|",
        *(f"| {s['setting']} | {s['ours']} | {s['trl']} |" for s in settings),
        "",
        *TRL_NOTES,
    ]
    return "\n".join(lines)


TRL_NOTES = [
    "## How TRL is set up, and what each trainer computes",
    "",
    "- TRL defaults overridden to match ours: `bf16=False` (TRL turns bf16 on by default, on CPU too), "
    "`activation_checkpointing=False` (TRL turns gradient checkpointing on by default; transformers 5 "
    "renamed the flag), constant learning rate (default: linear decay from 1e-6), `weight_decay=0.01` "
    "(torch AdamW's default, which `train_grpo` gets; TRL's default is 0), `optim=adamw_torch`; "
    "`use_cpu=True`, `report_to=none`, no saving, no logging, `disable_tqdm`, its printer callback removed.",
    "- Stop tokens: TRL stops on the tokenizer's eos and the model's `generation_config.eos_token_id`. "
    "Our chat turn ends with `<|im_end|>`, which is not the tokenizer's eos, so TRL's copy of the model "
    "gets `eos_token_id=[<|eos|>, <|im_end|>]` (otherwise every TRL completion runs to the limit).",
    "- Prompts: TRL re-tokenises plain-text prompts with `tokenizer(text=...)`; our tokenizer adds no "
    "special tokens, so the decoded `code_prompt_ids` round-trip exactly (checked on every step).",
    "- Completions: TRL cuts each completion after the first stop token and its loss mask includes that "
    "token, as ours does, so both count the same tokens. TRL hands reward functions text decoded with "
    "`skip_special_tokens=True`; the adapter decodes the ids itself, as `generate` does.",
    "- Per step, each trainer runs one teacher-forced forward and backward pass: with one optimizer pass "
    "per batch TRL skips its old-log-prob pass (uses the detached current log-probs), and ours reuses the "
    "log-probs recorded while sampling. TRL runs each of the `completions per step` rows whole (prompt + "
    "completion, `logits_to_keep` for the completion positions) and also computes per-token entropies. "
    "Ours (`policies/prefix.py`, called by `train_grpo`) runs each group's prompt once with the KV cache "
    "on and gradients flowing, shares its keys and values with the group's G completions "
    "(`Cache.reorder_cache`, an `index_select`), then runs the completions against them: the same "
    "log-probs and gradients up to float rounding (tested), with the prompt tokens computed G times "
    "fewer. Generation is the same work on both sides: every row's prompt is prefilled, then one token "
    "per step with the KV cache for all rows until every row has stopped (ours: `generate`, TRL: "
    "`model.generate` with its default dynamic cache).",
    "- Both policies are float32 on the CPU with sdpa attention and no gradient checkpointing on either "
    "side; the Qwen2 model is the same object type (`Qwen2ForCausalLM`) for both, deep-copied.",
    "- Loss: TRL's `dapo` and our `token_mean` both average over all completion tokens of the batch. "
    "Groups whose rewards are all equal get advantage 0 in TRL and weight 0 in ours (`zero_std=drop`): "
    "no gradient either way. Training signal is not compared here, only speed.",
    "",
]


def write_results(result: dict[str, Any], out: Path, command: str) -> None:
    from transferlab.platform.io import atomic_write_json, atomic_write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out.with_suffix(".json"), result | {"command": command})
    atomic_write_text(out.with_suffix(".md"), render_markdown(result, command))


def parse_args(argv: Sequence[str] | None = None) -> tuple[BenchConfig, Path | None]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    for name, info in BenchConfig.model_fields.items():
        flag, default = f"--{name.replace('_', '-')}", info.default
        if isinstance(default, list):
            p.add_argument(flag, type=type(default[0]), nargs="+", default=default, help=info.description)
        else:
            p.add_argument(flag, type=type(default), default=default, help=info.description)
    p.add_argument(
        "--out", type=Path, help="write OUT.md and OUT.json (e.g. docs/results/trainer_throughput)"
    )
    args = vars(p.parse_args(argv))
    out = args.pop("out")
    return BenchConfig.build(**args), out


def main(argv: Sequence[str] | None = None) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)
    config, out = parse_args(argv)
    result = run(config, log=lambda line: print(line, file=sys.stderr, flush=True))
    print_tables(result)
    if out is not None:
        args = list(argv) if argv is not None else sys.argv[1:]
        command = shlex.join([".venv/bin/python", "benchmarks/trainer_throughput.py", *args])
        write_results(result, out, command)
        print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train a tool-use policy on `transferlab/OpsAnalysis-v0` with the coding trainer, unchanged.

The pipeline is the coding agent's (:mod:`transferlab.coding_rl.experiments.agent`), pointed at the ops
environment:

1. **SFT** on the scripted expert's episodes of training tasks (:func:`make_ops_sft_data`): each one is
   played through the environment and recorded by
   :func:`~transferlab.agent_rl.sft.scripted_demonstration`, so prompt, action and
   observation ids are exactly what a rollout would record and the loss mask covers the policy's tool
   calls only.
2. **GRPO, multi-turn** with :func:`~transferlab.agent_rl.rl.train_rl` in agent mode. The
   only difference from coding is ``RLConfig.env_factory`` = :data:`OPS_ENV_FACTORY`, which makes the
   rollout workers play OpsAnalysis-v0 (like CodeRepair-v0 a
   :class:`~transferlab.platform.agent_env.ToolEnv`) instead of CodeRepair-v0. Dense rewards by
   default.
3. **Held-out evaluation** on held-out scenarios only: the rubric score (0-10) of each episode's
   report (0 without a report) and success = rubric >= 8, before training, after SFT and every
   ``eval_every`` GRPO steps (the per-step held-out curve).

**Tokenizer.** :func:`shared_tokenizer` trains one byte-level BPE on the coding texts (the toy tasks
and CodeRepair-v0 corpus, as :func:`~transferlab.coding_rl.experiments.common.toy_tokenizer`) plus
the ops texts (the expert's episodes on training scenarios: questions, tool calls, tool results,
reports). Being byte-level it encodes any string; training it on both domains gives both domains
short token sequences and lets a coding policy be fine-tuned on ops with the same vocabulary.

Metrics are logged under ``ops/`` (``ops/sft/loss``, ``ops/rollout/success_rate``,
``ops/heldout/success_rate``, ``ops/heldout/rubric``, ...).

    python -m transferlab.comparison.ops_training --preset cpu --run-dir runs/ops-training
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import torch
from pydantic import Field, model_validator

from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy
from transferlab.agent_rl.rl import RLConfig, train_rl
from transferlab.agent_rl.sft import SFTConfig, scripted_demonstration, train_sft
from transferlab.platform.config import BaseConfig, EvalSplit, eval_split_field
from transferlab.platform.metrics import MetricsLogger, ParquetLogger
from transferlab.platform.trajectory import Trajectory
from transferlab.simulator.ops.data_platform import EVIDENCE_SOURCE
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, run_episode
from transferlab.simulator.ops.grader import checked_before_report, named_causes
from transferlab.simulator.ops.scenarios import OpsTask, scenario, task_seeds

OPS_ENV_FACTORY = "transferlab.comparison.ops_training:make_ops_env"
"""``RLConfig.env_factory`` value that makes the coding trainer roll out OpsAnalysis-v0 episodes."""

SUCCESS_SCORE = 8.0
"""A held-out episode succeeds when its report scores at least this on the rubric (0-10)."""

_SCORE = re.compile(r"report received; score (\d+(?:\.\d+)?)/10")


# ------------------------------------------------------------------------------------------ config


def _ops_rl() -> RLConfig:
    """GRPO defaults on ops. With three families, lr 3e-4 without KL took held-out success from 0.28
    after SFT to 0.11 in 20 steps (seed 0), and lr 3e-5 with KL 0.1 held it at 0.28. With five families
    and no penalty for never reporting, both lr 3e-5 / KL 0.1 and lr 1e-4 / KL 0.05 lowered the held-out
    rubric (1.03 -> 0.24 and 0.44): the policy learned to query until the step limit; the dense table
    now charges task_failed -4. Completions up to 224 tokens: the expert's reports reach 191."""
    return RLConfig(
        mode="agent",
        env_factory=OPS_ENV_FACTORY,
        rewards="dense",
        steps=20,
        tasks_per_step=4,
        group_size=4,
        lr=1e-4,
        kl_coef=0.05,
        max_new_tokens=224,
        max_context=1536,
        max_steps=8,
        checkpoint_every=0,
        rollout_backend="inline",
        rollout_workers=1,
    )


class OpsTrainingConfig(BaseConfig):
    """SFT + multi-turn GRPO on OpsAnalysis-v0 with the coding trainer (the CPU preset is the default)."""

    seed: int = Field(default=0, ge=0, description="Seeds the policy's init, SFT batches and RL samples.")
    train_tasks: int = Field(default=40, ge=1, description="Training scenarios (train split).")
    held_out_tasks: int = Field(default=9, ge=1, description="Scenarios scored, from eval_split.")
    eval_split: EvalSplit = eval_split_field()
    sft_tasks: int = Field(
        default=40, ge=1, description="Training scenarios with an expert demonstration (SFT examples)."
    )
    policy: TinyPolicyConfig = Field(
        default_factory=lambda: TinyPolicyConfig(n_layer=2, d_model=128, n_head=4, max_positions=1536),
        description="The tiny policy when training from scratch (its seed is replaced by ``seed``).",
    )
    vocab_size: int = Field(default=768, ge=300, description="Shared coding + ops BPE vocabulary size.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=250, batch_size=8, lr=3e-3),
        description="SFT on the expert's episodes (its seed is replaced by ``seed``).",
    )
    rl: RLConfig = Field(
        default_factory=_ops_rl,
        description="GRPO settings; env_factory must stay OPS_ENV_FACTORY (its seed is replaced).",
    )
    eval_every: int = Field(default=5, ge=0, description="GRPO steps between held-out evaluations; 0 = end.")
    eval_episodes: int = Field(default=2, ge=1, description="Held-out episodes per held-out task.")
    eval_temperature: float = Field(
        default=1.0, ge=0, description="Sampling temperature of held-out episodes (0 = greedy)."
    )
    eval_start: bool = Field(default=True, description="Also evaluate before any ops training.")
    compact_reports: bool = Field(
        default=False,
        description="The demonstrated reports name the drop and each cause with its numbers and rule "
        "nothing out (about 200 characters instead of 400; the same rubric score).",
    )
    practice: Literal["all", "undemonstrated"] = Field(
        default="all",
        description="GRPO practises on every training scenario ('all') or only on those SFT never "
        "showed ('undemonstrated', the ops-learn recipe; needs sft_tasks < train_tasks).",
    )

    @model_validator(mode="after")
    def _check_practice(self) -> Self:
        if self.practice == "undemonstrated" and self.sft_tasks >= self.train_tasks:
            raise ValueError(
                f"practice='undemonstrated' needs sft_tasks ({self.sft_tasks}) below train_tasks "
                f"({self.train_tasks}): raise train_tasks or use practice='all'"
            )
        return self


def ops_test_config(seed: int = 0) -> OpsTrainingConfig:
    """The test preset: the whole pipeline in well under a minute (its numbers mean nothing)."""
    return OpsTrainingConfig(
        seed=seed,
        train_tasks=3,
        held_out_tasks=2,
        sft_tasks=3,
        policy=TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=1024),
        vocab_size=400,
        sft=SFTConfig(steps=4, batch_size=2, lr=3e-3),
        rl=_ops_rl().model_copy(
            update={
                "steps": 2,
                "tasks_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 24,
                "max_context": 768,
            }
        ),
        eval_every=1,
        eval_episodes=1,
    )


PRESETS: dict[str, Any] = {"cpu": OpsTrainingConfig, "smoke": ops_test_config, "test": ops_test_config}
"""``test`` is ``smoke``'s earlier name."""


# ----------------------------------------------------------------------------------- env and tasks


def make_ops_env(tasks: Sequence[OpsTask], rewards: str = "dense", max_steps: int = 8) -> OpsAnalysisEnv:
    """The env factory named by :data:`OPS_ENV_FACTORY` (called once per episode by the workers).

    OpsAnalysis-v0 is a :class:`~transferlab.platform.agent_env.ToolEnv`: ``reset(seed=,
    options={"task": task})`` plays ``task``, so the coding rollout code runs it as it is.
    """
    return OpsAnalysisEnv(n_tasks=1, reward_mode=rewards, max_steps=max_steps)


def ops_tasks(
    n_train: int, n_held_out: int, eval_split: str = "validation"
) -> tuple[list[OpsTask], list[OpsTask]]:
    """The first ``n_train`` training scenarios and the first ``n_held_out`` of ``eval_split``
    (validation or test; about a second each to build)."""
    if eval_split == "train":
        raise ValueError("eval_split must be 'validation' or 'test': training scenarios are not held out")
    train = [scenario(s).task for s in task_seeds("train", n_train)]
    held = [scenario(s).task for s in task_seeds(eval_split, n_held_out)]
    return train, held


def expert_actions(task: OpsTask, max_steps: int = 8, compact: bool = False) -> list[str]:
    """The scripted expert's tool calls on ``task`` (the env is deterministic, so they replay exactly);
    ``compact``: its report names the drop and each cause with its numbers, nothing ruled out."""
    env = OpsAnalysisEnv(n_tasks=1, max_steps=max_steps)
    agent = ExpertAgent(compact=compact)
    return list(run_episode(env, agent, options={"task_id": task.task_id})["actions"])


def make_ops_sft_data(
    tokenizer: Any,
    tasks: Sequence[OpsTask],
    max_steps: int = 8,
    rewards: str = "dense",
    compact_reports: bool = False,
) -> list[Trajectory]:
    """One expert demonstration per task, recorded exactly as a rollout of the policy would be."""
    demos = []
    for task in tasks:
        env = make_ops_env([task], rewards=rewards, max_steps=max_steps)
        actions = expert_actions(task, max_steps, compact=compact_reports)
        demos.append(scripted_demonstration(env, task, actions, tokenizer))
    return demos


def ops_texts(tasks: Sequence[OpsTask], max_steps: int = 8) -> list[str]:
    """The ops side of the tokenizer corpus: the expert's episodes (observations and tool calls)."""
    texts = []
    for task in tasks:
        env = OpsAnalysisEnv(n_tasks=1, max_steps=max_steps)
        ep = run_episode(env, ExpertAgent(), options={"task_id": task.task_id})
        texts += [*ep["observations"], *ep["actions"]]
    return texts


def shared_tokenizer(
    ops_train: Sequence[OpsTask], vocab_size: int = 768, operations: Sequence[str] = ()
) -> Any:
    """One byte-level BPE over coding texts (toy tasks, CodeRepair-v0 corpus) and ops texts, all from
    the training splits: no held-out task's text shapes the vocabulary both transfer arms use."""
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_repo_tasks, toy_solution, toy_tasks
    from transferlab.coding_rl.tokenizer_corpus import corpus_texts

    ops = tuple(operations) or tuple(sorted(OPERATIONS))
    code_train, _ = toy_tasks(0.25, 0, ops)
    repo_train, _ = toy_repo_tasks(0.25, 0, ops)
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in code_train]
    texts = texts * 10 + list(corpus_texts(repo_train)) * 3
    texts += ops_texts(ops_train) * 3
    return train_tokenizer(texts, vocab_size=vocab_size, seed=0)


# ------------------------------------------------------------------------------------------ habits


def _tool(action_text: str) -> str | None:
    try:
        call = json.loads(action_text)
    except (json.JSONDecodeError, TypeError):
        return None
    return str(call.get("action")) if isinstance(call, dict) else None


def ops_habits(traj: Trajectory) -> dict[str, bool]:
    """The ops workflow habits of one episode, from its actions and observations only.

    * ``query_before_concluding``: the episode ends with ``generate_report`` and some earlier tool
      call succeeded (the analogue of coding's *read before write*);
    * ``check_before_reporting``: it reports, and every cause the report names was first checked in
      that cause's evidence source (the analogue of *test after modify*; the env's
      ``check_before_report`` event, recomputed here so it does not depend on the reward table).
    """
    queried: set[str] = set()
    for step in traj.steps:
        tool = _tool(step.action_text)
        if tool == "generate_report":
            text = str(json.loads(step.action_text).get("text", ""))
            return {
                "query_before_concluding": bool(queried),
                "check_before_reporting": bool(queried)
                and checked_before_report(named_causes(text), queried, EVIDENCE_SOURCE),
            }
        if tool is not None and not step.observation_text.startswith("tool error"):
            queried.add(tool)
    return {"query_before_concluding": False, "check_before_reporting": False}


def rubric_of(traj: Trajectory) -> float:
    """The rubric score (0-10) of the episode's report, 0 when it never reported."""
    match = _SCORE.search(traj.steps[-1].observation_text)
    return float(match.group(1)) if match else 0.0


# -------------------------------------------------------------------------------------- evaluation


REPORT_PREFIX = '{"action": "generate_report", "text": "'
"""How a report call opens, as the expert's demonstrations write it (``json.dumps`` of the call)."""


@dataclass
class OpsEval:
    """Held-out episodes of one policy: per-episode rubric, success and habits."""

    task_ids: list[str]
    rubric: list[float]
    success: list[float]
    habits: dict[str, list[float]]
    trajectories: list[Trajectory] = field(repr=False, default_factory=list)

    def summary(self) -> dict[str, float]:
        n = max(len(self.success), 1)
        out = {"heldout/success_rate": sum(self.success) / n, "heldout/rubric": sum(self.rubric) / n}
        out.update({f"habit/{k}": sum(v) / n for k, v in self.habits.items()})
        return out


def evaluate_ops(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[OpsTask],
    rl: RLConfig,
    *,
    episodes_per_task: int = 2,
    temperature: float = 1.0,
    seed: int = 12_345,
    force_report: bool = False,
) -> OpsEval:
    """Play ``episodes_per_task`` episodes of each task with the policy; score reports on the rubric.

    ``force_report``: the forced-report control; the last step an episode is allowed starts with
    :data:`REPORT_PREFIX`, so every episode that reaches the step limit ends with the policy's report.
    """
    from transferlab.agent_rl.episodes import policy_episodes
    from transferlab.agent_rl.policies.generation import SamplingConfig

    flat = [t for t in tasks for _ in range(episodes_per_task)]
    envs = [make_ops_env(flat, rewards=rl.rewards, max_steps=rl.max_steps) for _ in flat]
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=rl.max_new_tokens, seed=seed)
    was_training = model.training
    model.eval()
    prefix = REPORT_PREFIX if force_report else None
    trajs = policy_episodes(model, tokenizer, envs, flat, sampling, rl.max_context, final_prefix=prefix)
    model.train(was_training)
    rubric = [rubric_of(t) for t in trajs]
    habits: dict[str, list[float]] = {"query_before_concluding": [], "check_before_reporting": []}
    for t in trajs:
        for k, v in ops_habits(t).items():
            habits[k].append(float(v))
    return OpsEval(
        task_ids=[t.task_id for t in flat],
        rubric=rubric,
        success=[float(r >= SUCCESS_SCORE) for r in rubric],
        habits=habits,
        trajectories=trajs,
    )


# ------------------------------------------------------------------------------------------- train


class PrefixLogger:
    """A :class:`~transferlab.platform.metrics.MetricsLogger` that namespaces keys (``ops/...``)."""

    def __init__(self, inner: MetricsLogger, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.inner.log(step, {f"{self.prefix}{k}": v for k, v in metrics.items()})

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


@dataclass
class OpsTrainingResult:
    """What :func:`train_ops` returns; :meth:`to_dict` is what ``result.json`` holds."""

    model: Any
    tokenizer: Any
    curve: list[dict[str, Any]]
    """Held-out points: stage (start / sft / rl), GRPO step, GRPO episodes so far, success, rubric,
    habits, and the per-episode successes (for intervals)."""
    train_success: list[float]
    episodes: list[float]
    sft_loss: list[float]
    seconds: float

    @property
    def before(self) -> dict[str, Any]:
        return self.curve[0]

    @property
    def after(self) -> dict[str, Any]:
        return self.curve[-1]

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("model", "tokenizer")}
        return json.loads(json.dumps(d))


def _point(stage: str, step: int, episodes: float, ev: OpsEval) -> dict[str, Any]:
    s = ev.summary()
    return {
        "stage": stage,
        "step": step,
        "episodes": episodes,
        "success": s["heldout/success_rate"],
        "rubric": s["heldout/rubric"],
        "habits": {k: s[f"habit/{k}"] for k in ev.habits},
        "per_episode": ev.success,
        "habit_episodes": ev.habits,
    }


def _initial(config: OpsTrainingConfig, train: list[OpsTask], init_from: Path | None) -> tuple[Any, Any]:
    if init_from is not None:
        model, tokenizer = load_policy(init_from)
        return model, tokenizer
    tokenizer = shared_tokenizer(train[: config.sft_tasks], config.vocab_size)
    return config.policy.model_copy(update={"seed": config.seed}).create(tokenizer), tokenizer


def train_ops(
    config: OpsTrainingConfig,
    run_dir: str | Path,
    init_from: str | Path | None = None,
    logger: MetricsLogger | None = None,
) -> OpsTrainingResult:
    """SFT on expert episodes, then multi-turn GRPO on OpsAnalysis-v0; held-out curve along the way.

    ``init_from`` is a policy directory (:func:`~transferlab.agent_rl.policies.model.save_policy`),
    e.g. a coding policy to fine-tune; its tokenizer is kept. Without it a fresh policy of
    ``config.policy`` is built on :func:`shared_tokenizer`. ``run_dir`` receives ``config.json``,
    ``metrics.parquet`` (unless a ``logger`` is given), ``rl/`` (the trainer's files), ``policy/``
    and ``result.json``.
    """
    if config.rl.env_factory != OPS_ENV_FACTORY or config.rl.mode != "agent":
        raise ValueError(f"rl.mode must be 'agent' and rl.env_factory {OPS_ENV_FACTORY!r} for ops training")
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config.save(run_dir / "config.json")
    own_logger = logger is None
    base: MetricsLogger = logger if logger is not None else ParquetLogger(run_dir / "metrics.parquet")
    log = PrefixLogger(base, "ops/")
    torch.manual_seed(config.seed)
    train, held = ops_tasks(config.train_tasks, config.held_out_tasks, config.eval_split)
    model, tokenizer = _initial(config, train, Path(init_from) if init_from is not None else None)
    rl = config.rl.model_copy(update={"seed": config.seed})

    def evaluate(m: Any) -> OpsEval:
        return evaluate_ops(
            m,
            tokenizer,
            held,
            rl,
            episodes_per_task=config.eval_episodes,
            temperature=config.eval_temperature,
        )

    curve: list[dict[str, Any]] = []
    if config.eval_start:
        curve.append(_point("start", -1, 0.0, evaluate(model)))
    demos = make_ops_sft_data(
        tokenizer, train[: config.sft_tasks], rl.max_steps, rl.rewards, compact_reports=config.compact_reports
    )
    sft_loss = train_sft(model, tokenizer, demos, config.sft.model_copy(update={"seed": config.seed}), log)
    sft_eval = evaluate(model)
    curve.append(_point("sft", -1, 0.0, sft_eval))
    log.log(config.sft.steps, sft_eval.summary())
    episodes_per_step = float(rl.tasks_per_step * rl.group_size)

    def on_step(step: int, m: Any) -> dict[str, float]:
        last = step + 1 == rl.steps
        if not last and (config.eval_every == 0 or (step + 1) % config.eval_every):
            return {}
        ev = evaluate(m)
        curve.append(_point("rl", step, (step + 1) * episodes_per_step, ev))
        return ev.summary()

    practice = train[config.sft_tasks :] if config.practice == "undemonstrated" else train
    result = train_rl(
        model, tokenizer, practice, rl, run_dir / "rl", log, on_step=on_step, step_offset=config.sft.steps + 1
    )
    save_policy(result.model, tokenizer, run_dir / "policy")
    if own_logger:
        base.close()
    out = OpsTrainingResult(
        model=result.model,
        tokenizer=tokenizer,
        curve=curve,
        train_success=[h.get("rollout/success_rate", float("nan")) for h in result.history],
        episodes=[h.get("rollout/episodes", 0.0) for h in result.history],
        sft_loss=sft_loss,
        seconds=time.perf_counter() - t0,
    )
    (run_dir / "result.json").write_text(json.dumps(out.to_dict(), indent=1))
    return out


def fresh_policy(config: OpsTrainingConfig, tokenizer: Any, directory: str | Path) -> Path:
    """Save an untrained policy of ``config.policy`` (seeded) to ``directory`` (an ``init_from``)."""
    model = config.policy.model_copy(update={"seed": config.seed}).create(tokenizer)
    save_policy(model, tokenizer, Path(directory))
    return Path(directory)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m transferlab.comparison.ops_training --preset cpu --run-dir DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/ops-training"))
    parser.add_argument("--init-from", type=Path, default=None, help="A policy directory to fine-tune.")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = PRESETS[args.preset]().model_copy(update={"seed": args.seed})
    res = train_ops(copy.deepcopy(config), args.run_dir, args.init_from)
    for p in res.curve:
        print(
            f"{p['stage']:>5} step {p['step']:>3}: "
            f"held-out success {p['success']:.2f}, rubric {p['rubric']:.2f}"
        )
    print(f"{res.seconds:.0f} s; run directory {args.run_dir}")


if __name__ == "__main__":
    main()

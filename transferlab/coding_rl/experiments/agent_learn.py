"""Agent RL on code against its two baselines: SFT, and rejection-sampling fine-tuning (RFT).

The question: on held-out multi-turn ``CodeRepair-v0`` tasks, does SFT + RL beat SFT,
and does it beat fine-tuning on the policy's own verified successes given the same verifier and the
same number of episodes? Per seed:

1. **SFT.** A tiny policy (or, with ``model_path``, a copy of that local Hugging Face model) is
   fine-tuned on expert demonstrations (:func:`~transferlab.coding_rl.agents.expert_plan`: read the
   tests, search, read the source, edit the bug, run the failing test, run all tests, submit) of
   procedurally generated training repositories
   (:func:`~transferlab.coding_rl.tasks.procedural.procedural_splits`: train / validation / test share
   no function template and no bug edit up to constants and argument names). A tiny policy may learn
   to copy alongside
   (``sft.copy_weight``: a copy term on random sequences in every SFT step).
2. **RL** (arm ``rl``): a copy of the SFT policy trained with :func:`~transferlab.agent_rl.rl.
   train_rl` in agent mode (GRPO by default; the dense or sparse reward table of ``rl.rewards``).
   **RFT** (arm ``rft``): another copy trained with :func:`~transferlab.agent_rl.rft.
   expert_iteration` in agent mode — sample episodes, keep those whose submit the
   same sandbox verifier passed, fine-tune on them (with the demonstrations) — on exactly as many
   training episodes as RL: ``rounds x samples_per_task x tasks per round = steps x tasks_per_step x
   group_size`` (the tasks per round are a seeded draw of the training tasks; both counts are in
   result.json).
3. **Held-out evaluation** of the three policies on the ``eval_split`` tasks (``validation`` for
   pilots and tuning, ``test`` for a committed result; result.json records ``scored_split`` and
   ``tuned_on``), the same episodes per task
   and the same sampling seed for each (the episodes of
   :func:`~transferlab.coding_rl.experiments.common.evaluate_agent`), keeping one value per
   (seed, task).

``result.json`` (:mod:`transferlab.platform.results`) holds each arm's held-out success with a 95%
interval clustered by seed, and the comparisons ``rl - sft``, ``rl - rft`` and ``rft - sft`` paired
on the same seeds and tasks, clustered by seed (primary) and by (seed, task), each with its number of
clusters and minimum detectable effect. The report is written from it, with each arm's three-layer
diagnosis of its held-out episodes (format, single step, sequence: :func:`diagnose`) and the wall
time of each seed.
"""

from __future__ import annotations

import copy
import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import torch
from pydantic import Field, model_validator
from rich.console import Console

from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy
from transferlab.agent_rl.rft import (
    RFTSettings,
    demo_anchor,
    expert_iteration_config,
    rft_round_tasks,
    rft_tasks,
)
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig
from transferlab.agent_rl.start import (
    ModelChoice,
    StartModel,
    fit_context,
    model_record,
    open_experiment,
    policy_line,
)
from transferlab.coding_rl.experiments.common import opened_sandbox, toy_tokenizer
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.repo_task import RepoTask, TaskSplits
from transferlab.platform.config import EvalSplit, eval_split_field
from transferlab.platform.harness import Experiment, experiment_command, seeds_in_processes
from transferlab.platform.held_out import (
    HeldOut,
    compare,
    comparison_rows,
    held_out,
    held_out_interval,
    mean,
    seed_estimate,
    write_results,
)
from transferlab.platform.reports import Report, plot_bars
from transferlab.platform.results import Arm, Cluster, Comparison, Result
from transferlab.platform.trajectory import Trajectory

EXPERIMENT = "coding-agent-learn"
ARMS = ("sft", "rl", "rft")
EVAL_SEED = 12_345
"""The held-out sampling seed, the one :func:`~transferlab.coding_rl.experiments.common.evaluate_agent`
uses: every arm is scored on the same futures."""
EDIT_TOOLS = ("edit_file", "write_file")
EXPERT_STEPS = {"full": 7, "direct": 5, "short": 4, "lines": 4}
"""Tool calls of each expert workflow's demonstrations (:data:`~transferlab.coding_rl.agents.PLANS`)."""


class AgentLearnConfig(ModelChoice):
    """Settings of the agent-learn experiment (the field defaults are the ``cpu`` preset's)."""

    seeds: list[int] = Field(
        default=[0, 1, 2, 3, 4],
        min_length=1,
        description="One SFT / RL / RFT pipeline per seed; five, fixed before the run (a headline result).",
    )
    n_functions: int = Field(
        default=120,
        ge=2,
        description="Generated functions of the procedural repositories (train + held out).",
    )
    task_seed: int = Field(default=0, ge=0, description="Seed of the procedural generation and its split.")
    validation_fraction: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Share of the grammar's functions (whole templates) in the validation split.",
    )
    test_fraction: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Share of the grammar's functions (whole templates) in the test split.",
    )
    eval_split: EvalSplit = eval_split_field()
    workflow: Literal["full", "direct", "short", "lines"] = Field(
        default="full",
        description="The expert's demonstrations: 'full' (read the tests, search, read the source, edit, "
        "run the failing test, run all, submit), 'direct' (search, read the source, edit, run all, "
        "submit; each call follows from the last observation), 'short' (read the source the issue's "
        "file list names, edit, run all, submit) or 'lines' (like short, but the edit names the line "
        "and only the piece of it that changes).",
    )
    recovery_every: int = Field(
        default=0,
        ge=0,
        description="With workflow 'lines': every k-th demonstration first tries another task's edit, "
        "gets the tool error, then makes the right one (0 = none).",
    )
    demo_variants: int = Field(
        default=0,
        ge=0,
        description="Extra demonstrations per training task on renamed copies (fresh module and function "
        "names, never a validation or test one), so the policy must copy names from what it reads.",
    )
    vocab_size: int = Field(
        default=512, ge=300, description="Tiny policy: BPE vocabulary trained on the training tasks' texts."
    )
    split: Literal["identifiers", "spaces", "words", "word_pieces", "code_pieces"] = Field(
        default="identifiers",
        description="Tiny policy: how the tokenizer splits text. identifiers: a name is one piece (GPT-2 "
        "style); spaces: whitespace is a token of its own, so a name has the same tokens wherever it "
        "appears; words: also split names at underscores, so an unseen name is spelt from seen words; "
        "word_pieces: like words, but each later word keeps its underscore (report, _ops); code_pieces: "
        "also keeps the space before a word or operator (return, ' a', ' *'), so a quoted code line has "
        "the file's pieces.",
    )
    demo_tasks: int | None = Field(
        default=None, ge=1, description="Training tasks with an expert demonstration; None = every one."
    )
    rl_tasks: Literal["all", "undemonstrated"] = Field(
        default="all",
        description="The tasks RL and RFT train on: 'all' training tasks, or 'undemonstrated' ones (the "
        "training modules none of the first demo_tasks tasks is in), so both practise on functions SFT "
        "never showed, as the held-out tasks are, and not on ones it solves nearly always.",
    )
    policy: TinyPolicyConfig = Field(
        default_factory=lambda: TinyPolicyConfig(n_layer=2, d_model=128, n_head=4, max_positions=1536),
        description="The tiny policy (its seed is replaced by each run's seed).",
    )
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=300, batch_size=8, lr=3e-3), description="SFT on the demos."
    )
    rl: RLConfig = Field(
        default_factory=lambda: RLConfig(
            mode="agent",
            steps=40,
            tasks_per_step=8,
            group_size=4,
            lr=5e-4,
            max_new_tokens=64,
            max_context=1536,
            max_steps=8,
            checkpoint_every=10,
        ),
        description="The RL arm (its temperature, context and step limits are RFT's and the held-out "
        "evaluation's too).",
    )
    rft: RFTSettings = Field(
        default_factory=lambda: RFTSettings(rounds=4, samples_per_task=4), description="The RFT arm."
    )
    eval_episodes: int = Field(default=2, ge=1, description="Held-out episodes per task (every arm).")
    eval_temperature: float | None = Field(
        default=None,
        gt=0,
        description="Sampling temperature of the held-out episodes (every arm); None = rl.temperature. "
        "RL and RFT both sample their training episodes at rl.temperature.",
    )
    torch_threads: int = Field(
        default=2,
        ge=1,
        description="torch.set_num_threads of this process (SFT, the RL and RFT updates, held-out "
        "episodes); results are reproducible for a fixed count.",
    )
    backend: str = Field(default="forkserver", description="Sandbox backend.")

    @model_validator(mode="before")
    @classmethod
    def _no_held_out_fraction(cls, data: Any) -> Any:
        if isinstance(data, dict) and "held_out_fraction" in data:
            raise ValueError(
                "held_out_fraction was replaced (the procedural tasks split three ways, by template): set "
                "validation_fraction and test_fraction (their shares) and eval_split (the split scored)"
            )
        return data

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.validation_fraction + self.test_fraction >= 0.8:
            raise ValueError(
                f"validation_fraction + test_fraction must be below 0.8 (training keeps the rest), got "
                f"{self.validation_fraction} + {self.test_fraction}: lower one of them"
            )
        if self.rl.mode != "agent":
            raise ValueError(f"rl.mode must be 'agent' for agent-learn, got {self.rl.mode!r}")
        rft_round_tasks(self.rl, self.rft)
        if self.recovery_every and self.workflow != "lines":
            raise ValueError(
                f"recovery_every needs workflow 'lines' (its demonstrations are line edits), got "
                f"{self.workflow!r}: set workflow='lines' or recovery_every=0"
            )
        if self.rl_tasks == "undemonstrated" and self.demo_tasks is None:
            raise ValueError(
                "rl_tasks 'undemonstrated' needs demo_tasks (the tasks with a demonstration; the rest "
                "are RL's): set demo_tasks below the number of training tasks, or rl_tasks='all'"
            )
        need = EXPERT_STEPS[self.workflow] + (1 if self.recovery_every else 0)
        if self.rl.max_steps < need:
            raise ValueError(
                f"rl.max_steps {self.rl.max_steps} is shorter than the expert's {need}-call "
                f"{self.workflow!r} demonstrations: set rl.max_steps >= {need}"
            )
        if self.model_path is None and self.policy.max_positions < self.rl.max_context:
            raise ValueError(
                f"policy.max_positions {self.policy.max_positions} is shorter than rl.max_context "
                f"{self.rl.max_context}: raise policy.max_positions or lower rl.max_context"
            )
        return self


def rl_episodes(config: AgentLearnConfig) -> int:
    """Training episodes of the RL arm: steps x tasks per step x group size."""
    return config.rl.total_episodes


def rft_tasks_per_round(config: AgentLearnConfig) -> int:
    """Tasks the RFT arm samples each round so that its episodes equal RL's."""
    return rft_round_tasks(config.rl, config.rft)


def undemonstrated(train: Sequence[RepoTask], n_demo: int) -> list[RepoTask]:
    """The training tasks in no module of the first ``n_demo`` (those with demonstrations)."""
    shown = {t.meta.source_path for t in train[:n_demo]}
    return [t for t in train[n_demo:] if t.meta.source_path not in shown]


def recovery_demo(task: RepoTask, decoys: Sequence[RepoTask], rng: random.Random) -> list[str] | None:
    """A :func:`~transferlab.coding_rl.agents.recovery_plan` for ``task`` with a decoy drawn from
    ``decoys`` (up to 10 draws until one's edit fails on ``task``); None if none does."""
    from transferlab.coding_rl.agents import recovery_plan

    for _ in range(10):
        plan = recovery_plan(task, rng.choice(list(decoys)))
        if plan is not None:
            return plan
    return None


# ------------------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class Diagnosis:
    """The three layers of a set of episodes (design note 004's: format -> single step -> sequence).

    * ``format``: the share of all actions that parsed as a valid tool call and ran (step info
      ``tool_ok``);
    * ``single_step``: the share of episodes whose *first* ``edit_file`` / ``write_file`` call changed
      the file (the environment's ``write_file_success`` event); an episode with no edit call, or whose
      first edit failed to parse, named a missing file or text, or changed nothing, fails this layer;
    * ``sequence``: the share of episodes whose submit passed the verifier (success).
    """

    actions: int
    valid_actions: int
    episodes: int
    first_edit_ok: int
    successes: int
    endings: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": self.actions,
            "valid_actions": self.valid_actions,
            "episodes": self.episodes,
            "first_edit_ok": self.first_edit_ok,
            "successes": self.successes,
            "endings": dict(self.endings),
        }


def _first_edit_ok(traj: Trajectory) -> bool:
    for rec in traj.steps:
        if rec.info.get("tool") in EDIT_TOOLS:
            return bool(rec.info.get("events", {}).get("write_file_success"))
    return False


def _ending(traj: Trajectory) -> str:
    """How the episode ended: 'submit', or the cut ('steps', 'context', 'timeout')."""
    last = traj.steps[-1]
    cut = last.info.get("cut")
    if cut is not None:
        return str(cut)
    if last.info.get("tool") == "submit" and last.terminated:
        return "submit"
    return "steps" if last.truncated else "other"


def diagnose(trajs: Sequence[Trajectory]) -> Diagnosis:
    """Count the three layers over ``trajs`` (see :class:`Diagnosis`)."""
    steps = [rec for t in trajs for rec in t.steps]
    return Diagnosis(
        actions=len(steps),
        valid_actions=sum(bool(rec.info.get("tool_ok")) for rec in steps),
        episodes=len(trajs),
        first_edit_ok=sum(_first_edit_ok(t) for t in trajs),
        successes=sum(bool(t.steps[-1].info.get("success")) for t in trajs),
        endings=dict(sorted(Counter(_ending(t) for t in trajs).items())),
    )


def layers(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled layer shares over saved :meth:`Diagnosis.to_dict` rows (one per seed)."""
    actions = sum(r["actions"] for r in rows)
    episodes = sum(r["episodes"] for r in rows)
    endings: Counter[str] = Counter()
    for r in rows:
        endings.update(r["endings"])
    return {
        "format": sum(r["valid_actions"] for r in rows) / actions if actions else 0.0,
        "single_step": sum(r["first_edit_ok"] for r in rows) / episodes if episodes else 0.0,
        "sequence": sum(r["successes"] for r in rows) / episodes if episodes else 0.0,
        "actions": actions,
        "episodes": episodes,
        "endings": dict(sorted(endings.items())),
    }


# ----------------------------------------------------------------------------------------- setup


def task_splits(config: AgentLearnConfig) -> TaskSplits:
    """The run's procedural tasks in train / validation / test (``n_functions``, ``task_seed`` and the
    two fractions of ``config``)."""
    from transferlab.coding_rl.tasks.procedural import procedural_splits

    return procedural_splits(
        config.n_functions,
        config.task_seed,
        validation_fraction=config.validation_fraction,
        test_fraction=config.test_fraction,
    )


class Setup:
    """Tasks, tokenizer, sandbox and demonstrations of a run; the per-seed arms."""

    def __init__(
        self, exp: Experiment, config: AgentLearnConfig, sandbox: SandboxBackend, start: StartModel | None
    ) -> None:
        self.exp, self.config, self.sandbox, self.start = exp, config, sandbox, start
        self.splits = task_splits(config)
        self.train = self.splits.train
        self.held = self.splits.of(config.eval_split)
        """The tasks the arms are scored on (``eval_split``)."""
        if not self.train or not self.held:
            raise ValueError(
                f"n_functions={config.n_functions} gave {len(self.train)} training and {len(self.held)} "
                f"{config.eval_split} tasks; raise n_functions"
            )
        self.practice = list(self.train)
        """The tasks RL and RFT train on (``rl_tasks``)."""
        if config.rl_tasks == "undemonstrated":
            assert config.demo_tasks is not None  # the config's check
            self.practice = undemonstrated(self.train, config.demo_tasks)
            if not self.practice:
                raise ValueError(
                    f"demo_tasks={config.demo_tasks} leaves no undemonstrated training module for RL "
                    f"(of {len(self.train)} training tasks): lower demo_tasks"
                )
        if start is not None:
            self.tokenizer = start.tokenizer
        else:  # trained on the training split's texts only
            self.tokenizer = toy_tokenizer([], self.train, vocab_size=config.vocab_size, split=config.split)
        self._demos: list[Trajectory] | None = None

    def demo_tasks(self) -> list[RepoTask]:
        """The first ``demo_tasks`` training tasks, then ``demo_variants`` renamed copies of each."""
        from transferlab.coding_rl.tasks.procedural import renamed, task_names

        cfg = self.config
        chosen = self.train[: cfg.demo_tasks] if cfg.demo_tasks is not None else list(self.train)
        rng = random.Random(f"agent-learn-demos:{cfg.task_seed}")
        avoid = task_names(self.splits.validation + self.splits.test)
        return chosen + [renamed(t, rng, avoid) for _ in range(cfg.demo_variants) for t in chosen]

    def demos(self) -> list[Trajectory]:
        """Expert demonstrations (the ``workflow`` plan) of :meth:`demo_tasks` (made once per run)."""
        if self._demos is None:
            from transferlab.agent_rl.sft import scripted_demonstration
            from transferlab.coding_rl.agents import PLANS
            from transferlab.coding_rl.env.code_repair import CodeRepairEnv

            cfg = self.config
            tasks = self.demo_tasks()
            plan = PLANS[cfg.workflow]
            plans = [plan(t) for t in tasks]
            mistakes: list[set[int]] = [set() for _ in tasks]
            if cfg.recovery_every:
                rng = random.Random(f"agent-learn-recoveries:{cfg.task_seed}")
                for i in range(1, len(tasks), cfg.recovery_every):
                    recovery = recovery_demo(tasks[i], self.train, rng)
                    if recovery is not None:
                        plans[i], mistakes[i] = recovery, {1}  # call 1 is the failed edit
            env = CodeRepairEnv(tasks, sandbox=self.sandbox, max_steps=cfg.rl.max_steps)
            self._demos = [
                scripted_demonstration(env, t, p, self.tokenizer, m)
                for t, p, m in zip(tasks, plans, mistakes, strict=True)
            ]
            env.close()
        return self._demos

    def episodes(self, model: Any) -> list[Trajectory]:
        """``eval_episodes`` held-out episodes per task, as :func:`common.evaluate_agent` runs them."""
        from transferlab.agent_rl.episodes import policy_episodes
        from transferlab.agent_rl.policies.generation import SamplingConfig
        from transferlab.coding_rl.env.code_repair import CodeRepairEnv

        rl = self.config.rl
        flat = [t for t in self.held for _ in range(self.config.eval_episodes)]
        envs = [CodeRepairEnv(list(self.held), max_steps=rl.max_steps, sandbox=self.sandbox) for _ in flat]
        sampling = SamplingConfig(
            temperature=self.config.eval_temperature or rl.temperature,
            max_new_tokens=rl.max_new_tokens,
            seed=EVAL_SEED,
        )
        return policy_episodes(model, self.tokenizer, envs, flat, sampling, rl.max_context)

    def evaluate(self, model: Any) -> dict[str, Any]:
        """Per held-out task its success rate, and the diagnosis of the same episodes."""
        trajs = self.episodes(model)
        n = self.config.eval_episodes
        wins = [bool(t.steps[-1].info.get("success")) for t in trajs]
        return {
            "held_out": [sum(wins[i * n : (i + 1) * n]) / n for i in range(len(self.held))],
            "diagnosis": diagnose(trajs).to_dict(),
        }

    def sft_policy(self, seed: int) -> Any:
        """The seed's SFT policy: trained once and saved in ``arms/sft-seed<seed>/policy``."""
        from transferlab.agent_rl.sft import train_sft

        directory = self.exp.arm_dir(f"sft-seed{seed}") / "policy"
        if (directory / "config.json").exists():
            return load_policy(directory, device="cpu", dtype="float32")[0]
        cfg = self.config
        if self.start is not None:
            model = self.start.fresh()
        else:
            model = cfg.policy.model_copy(update={"seed": seed}).create(self.tokenizer)
        with self.exp.arm_logger(f"sft-seed{seed}") as logger:
            train_sft(model, self.tokenizer, self.demos(), cfg.sft.model_copy(update={"seed": seed}), logger)
        save_policy(model, self.tokenizer, directory)
        return model

    def sft_arm(self, seed: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        model = self.sft_policy(seed)
        return {
            **self.evaluate(model),
            "demonstrations": len(self.demos()),
            "recovery_demonstrations": sum(
                any(r.info.get("imitate") is False for r in d.steps) for d in self.demos()
            ),
            "seconds": time.perf_counter() - t0,
        }

    def rl_arm(self, seed: int, sft_model: Any) -> dict[str, Any]:
        """A copy of the SFT policy trained with ``train_rl`` (resumes from its checkpoint)."""
        from transferlab.coding_rl.training import train_rl

        arm = f"rl-seed{seed}"
        cfg = self.config
        rl = cfg.rl.model_copy(update={"seed": seed, "sandbox_backend": cfg.backend})
        t0 = time.perf_counter()
        with self.exp.arm_logger(arm, resume=True) as logger:
            result = train_rl(
                copy.deepcopy(sft_model),
                self.tokenizer,
                self.practice,
                rl,
                self.exp.arm_dir(arm),
                logger,
                resume=True,
            )
        history = _history(self.exp.run.dir / "arms" / arm / "metrics.parquet")
        episodes = history.get("rollout/episodes", [])
        return {
            **self.evaluate(result.model),
            "training_episodes": int(sum(episodes)) if episodes else rl_episodes(cfg),
            "train_success": history.get("rollout/success_rate", []),
            "seconds": time.perf_counter() - t0,
        }

    def rft_arm(self, seed: int, sft_model: Any) -> dict[str, Any]:
        """A copy of the SFT policy trained by expert iteration on RL's number of episodes."""
        from transferlab.agent_rl.rollout_worker import RolloutWorker, WorkerSpec
        from transferlab.coding_rl.training import CODE_REPAIR_ENV, expert_iteration

        cfg, rl, rft = self.config, self.config.rl, self.config.rft
        t0 = time.perf_counter()
        model = copy.deepcopy(sft_model)
        tasks = rft_tasks(self.practice, rft_tasks_per_round(cfg), seed)
        ei = expert_iteration_config(rft, rl, seed)
        spec = WorkerSpec(
            policy_dir="",
            rewards=rl.rewards,
            max_steps=rl.max_steps,
            threads=0,
            env_factory=CODE_REPAIR_ENV,
            env_options={"sandbox_backend": cfg.backend},
        )
        worker = RolloutWorker(model, self.tokenizer, spec, env_kwargs={"sandbox": self.sandbox})
        demos = demo_anchor(self.demos(), rft.demo_anchor, seed) if rft.demo_anchor else []
        with self.exp.arm_logger(f"rft-seed{seed}", resume=True) as logger:
            stats = expert_iteration(
                model,
                self.tokenizer,
                tasks,
                demos,
                ei,
                worker,
                logger,
                self.exp.arm_dir(f"rft-seed{seed}") / "rounds",
            )
        return {
            **self.evaluate(model),
            "training_episodes": rft.rounds * rft.samples_per_task * len(tasks),
            "tasks_per_round": len(tasks),
            "train_success": [s.success_rate for s in stats],
            "new_trajectories": [s.new_trajectories for s in stats],
            "data_size": stats[-1].data_size,
            "seconds": time.perf_counter() - t0,
        }


def _history(path: Path) -> dict[str, list[float]]:
    """Per metric key, its values by step (from an arm's metrics.parquet)."""
    from transferlab.platform.metrics import read_metrics

    df = read_metrics(path, missing_ok=True)
    out: dict[str, list[float]] = {}
    for key, group in df.groupby("key"):
        out[str(key)] = group.sort_values("step")["value"].astype(float).tolist()
    return out


# ------------------------------------------------------------------------------------------- run

Results = dict[str, dict[str, Any]]


def run_agent_learn(
    config: AgentLearnConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Per seed: SFT, then RL and RFT from it, all scored on the held-out tasks; result, summary,
    report. A resumed run keeps its finished arms (the RL arm resumes from its checkpoint).

    ``jobs > 1`` runs the seeds in that many processes at once (each with ``torch_threads``
    threads), sharing the run: a seed's arms depend only on the config and the seed, so the result is
    the one a single process would write.
    """
    from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    exp, config, start = open_experiment(EXPERIMENT, config, runs_root, resume, console, shared=jobs > 1)
    command = experiment_command(
        "transferlab coding experiment agent-learn",
        config,
        AGENT_LEARN_PRESETS,
        exp.run.dir,
        runs_root,
        report_dir,
    )
    config = config.model_copy(
        update={"rl": fit_context(config.rl, start, lambda line: exp.console.print(line, highlight=False))}
    )
    torch.set_num_threads(config.torch_threads)
    results: Results = {}
    with exp.run, opened_sandbox(config.backend) as sandbox, exp.progress:
        bar = exp.progress.add_task("agent-learn", total=len(config.seeds) * len(ARMS))
        if jobs > 1:
            seeds_in_processes(exp, config, runs_root, jobs, bar, job=_seed_job, arms=ARMS)
        setup = Setup(exp, config, sandbox, start)
        for seed in config.seeds:
            results.update(_seed_arms(exp, setup, seed, bar))
        result = build_result(
            config, results, command, len(setup.train), len(setup.held), len(setup.practice)
        )
        summary = summarise(result, exp.elapsed_s())
        summary["run_dir"] = str(exp.run.dir)
        summary["model"] = model_record(config.policy, start)
        exp.run.write_artifact_json("summary.json", summary)
        write_results(exp, result, report_dir)
        exp.write_report(build_report(config, result, exp, start), report_dir)
    return summary


def _seed_arms(exp: Experiment, setup: Setup, seed: int, bar: Any | None) -> Results:
    """The seed's SFT, RL and RFT arms (each computed unless saved), advancing ``bar``."""
    out: Results = {}
    computes: dict[str, Callable[[], dict[str, Any]]] = {
        "sft": functools.partial(setup.sft_arm, seed),
        "rl": lambda: setup.rl_arm(seed, setup.sft_policy(seed)),
        "rft": lambda: setup.rft_arm(seed, setup.sft_policy(seed)),
    }
    for arm, compute in computes.items():
        if bar is not None:
            exp.progress.update(bar, description=f"{arm.upper()} seed {seed}")
        out[f"{arm}-seed{seed}"] = exp.arm(f"{arm}-seed{seed}", compute)
        if bar is not None:
            exp.progress.advance(bar)
    return out


def _seed_job(config: AgentLearnConfig, run_dir: str, runs_root: str, seeds: list[int]) -> None:
    """One process of ``jobs``: computes ``seeds``' arms of the shared run at ``run_dir``."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    quiet = Console(quiet=True)
    exp, config, start = open_experiment(EXPERIMENT, config, Path(runs_root), Path(run_dir), quiet, True)
    try:
        config = config.model_copy(update={"rl": fit_context(config.rl, start, lambda _: None)})
        torch.set_num_threads(config.torch_threads)
        with opened_sandbox(config.backend) as sandbox:
            setup = Setup(exp, config, sandbox, start)
            for seed in seeds:
                _seed_arms(exp, setup, seed, None)
    finally:
        exp.run.release()


def build_result(
    config: AgentLearnConfig,
    results: Results,
    command: str,
    n_train: int,
    n_held: int,
    n_practice: int | None = None,
) -> Result:
    """Each arm's held-out success, diagnosis, training episodes and seconds per seed; the comparisons
    ``rl - sft``, ``rl - rft``, ``rft - sft`` clustered by seed and by (seed, task); ``scored_split``
    (``config.eval_split``, the split of the ``n_held`` tasks) and ``tuned_on`` (always validation)."""
    data: dict[str, HeldOut] = {arm: held_out(results, arm, config.seeds, "held_out") for arm in ARMS}
    arms: dict[str, Arm] = {}
    for arm, d in data.items():
        rows = [results[f"{arm}-seed{s}"] for s in config.seeds]
        entry: dict[str, Any] = {
            "held_out_success": seed_estimate(d),
            "n_episodes": len(d.values) * config.eval_episodes,
            "per_seed": [mean(r["held_out"]) for r in rows],
            "diagnosis": layers([r["diagnosis"] for r in rows]),
            "seconds_per_seed": [float(r["seconds"]) for r in rows],
        }
        if arm != "sft":
            entry["training_episodes"] = [int(r["training_episodes"]) for r in rows]
            entry["train_success"] = [r["train_success"] for r in rows]
        if arm == "rft":
            entry["tasks_per_round"] = rows[0]["tasks_per_round"]
            entry["data_size"] = [int(r["data_size"]) for r in rows]
        arms[arm] = Arm.model_validate(entry)
    clusters: tuple[Cluster, ...] = ("seed", "seed+task")
    comparisons: list[Comparison] = [
        *compare("rl - sft", data["sft"], data["rl"], clusters),
        *compare("rl - rft", data["rft"], data["rl"], clusters),
        *compare("rft - sft", data["sft"], data["rft"], clusters),
    ]
    settings = config.model_dump(mode="json")
    settings["tasks"] = {
        "train": n_train,
        "held_out": n_held,
        "rl": n_train if n_practice is None else n_practice,
    }
    settings["budget"] = {
        "rl_episodes": rl_episodes(config),
        "rft_episodes": config.rft.rounds * config.rft.samples_per_task * rft_tasks_per_round(config),
    }
    return Result(
        experiment=EXPERIMENT,
        command=command,
        seeds=list(config.seeds),
        settings=settings,
        arms=arms,
        comparisons=comparisons,
        scored_split=config.eval_split,
        tuned_on="validation",
    )


def summarise(result: Result, seconds: float) -> dict[str, Any]:
    """summary.json: the result, the seconds, and the primary (seed-clustered) verdict lines."""
    dumped = result.model_dump(mode="json")
    verdicts = {c.name: c.sentence() for c in result.comparisons if c.cluster == "seed"}
    return {"seconds": seconds, "result": dumped, "verdicts": verdicts}


def seconds_per_seed(result: Result) -> list[float]:
    """Wall time of each seed: its SFT, RL and RFT arms (training and held-out evaluation)."""
    per_arm = [(result.arms[a].model_extra or {})["seconds_per_seed"] for a in ARMS]
    return [sum(v) for v in zip(*per_arm, strict=True)]


def _pct(x: float) -> str:
    return f"{x:.0%}"


def build_report(
    config: AgentLearnConfig, result: Result, exp: Experiment, start: StartModel | None
) -> Report:
    """The Markdown/HTML report, every figure from ``result``."""
    extras = {arm: row.model_extra or {} for arm, row in result.arms.items()}
    report = Report("Agent RL vs SFT vs rejection-sampling fine-tuning on CodeRepair-v0")
    report.paragraph(
        "Held-out success (episodes whose submit passed the verifier, on repositories whose functions "
        f"and modules never occur in training): SFT {held_out_interval(result, 'sft').format('.2f')}, "
        f"SFT + RL {held_out_interval(result, 'rl').format('.2f')}, SFT + RFT "
        f"{held_out_interval(result, 'rft').format('.2f')} (95% intervals clustered by seed)."
    )
    report.bullets([c.sentence() + "." for c in result.comparisons if c.cluster == "seed"])
    budget = result.settings["budget"]
    report.paragraph(
        f"Same budget: RL trained on {budget['rl_episodes']} episodes per seed ({config.rl.steps} steps x "
        f"{config.rl.tasks_per_step} tasks x G={config.rl.group_size}), RFT on {budget['rft_episodes']} "
        f"({config.rft.rounds} rounds x {config.rft.samples_per_task} samples x "
        f"{extras['rft']['tasks_per_round']} tasks); episodes actually run per seed: RL "
        f"{', '.join(map(str, extras['rl']['training_episodes']))}, RFT "
        f"{', '.join(map(str, extras['rft']['training_episodes']))}. Same verifier (every developer and "
        "hidden test), same starting SFT policy, same held-out episodes."
    )
    report.table(
        [
            {
                "arm": arm,
                "held-out success": held_out_interval(result, arm),
                "held-out episodes": result.arms[arm].n_episodes,
                "training episodes / seed": ", ".join(map(str, extras[arm].get("training_episodes", ["—"]))),
                "format": _pct(extras[arm]["diagnosis"]["format"]),
                "single step": _pct(extras[arm]["diagnosis"]["single_step"]),
                "sequence": _pct(extras[arm]["diagnosis"]["sequence"]),
            }
            for arm in result.arms
        ]
    )
    report.heading("Comparisons")
    report.paragraph(
        "Differences on held-out success, paired on the same seeds and tasks; 95% two-stage bootstrap "
        "intervals clustered by seed (primary) and by (seed, task); MDE = the smallest true difference "
        "the interval's width would detect with 80% power (too small with few seeds, like the "
        "intervals). A difference whose interval includes zero is reported as 'pipeline ran', never "
        "as an improvement. Every figure here is in result.json next to this report."
    )
    report.table(comparison_rows(result))
    report.heading("Where the episodes fail (three layers)")
    report.paragraph(
        "Over each arm's held-out episodes, pooled over seeds. Format: the share of actions that parse "
        "as a valid tool call with valid arguments and run (step info `tool_ok`). Single step: the share "
        "of episodes whose first `edit_file` / `write_file` call changed the file (the environment's "
        "`write_file_success` event; an episode without an edit, or whose first edit did not parse, "
        "named a missing file or text, or changed nothing, fails this layer). Sequence: the share of "
        "episodes whose submit passed the verifier. Endings: how the episodes ended (submit, step limit, "
        "context limit, timeout)."
    )
    report.table(
        [
            {
                "arm": arm,
                "actions": extras[arm]["diagnosis"]["actions"],
                "format": _pct(extras[arm]["diagnosis"]["format"]),
                "episodes": extras[arm]["diagnosis"]["episodes"],
                "single step": _pct(extras[arm]["diagnosis"]["single_step"]),
                "sequence": _pct(extras[arm]["diagnosis"]["sequence"]),
                "endings": ", ".join(f"{k} {v}" for k, v in extras[arm]["diagnosis"]["endings"].items()),
            }
            for arm in result.arms
        ]
    )
    report.heading("Wall time per seed")
    per_seed = seconds_per_seed(result)
    report.table(
        [
            {
                "seed": seed,
                **{f"{arm} (min)": f"{extras[arm]['seconds_per_seed'][i] / 60:.1f}" for arm in ARMS},
                "total (min)": f"{per_seed[i] / 60:.1f}",
            }
            for i, seed in enumerate(result.seeds)
        ]
    )
    report.figure(
        plot_bars({a: held_out_interval(result, a) for a in result.arms}, ylabel="held-out success"),
        "held_out",
        "Held-out success per arm, 95% bootstrap intervals clustered by seed.",
    )
    _settings(report, config, result, exp, start)
    return report


def _settings(
    report: Report, config: AgentLearnConfig, result: Result, exp: Experiment, start: StartModel | None
) -> None:
    rl, tasks = config.rl, result.settings["tasks"]
    report.heading("Settings")
    report.bullets(
        [
            f"tasks: procedural repositories from {config.n_functions} functions (generation seed "
            f"{config.task_seed}): {tasks['train']} training tasks, scored on {tasks['held_out']} "
            f"{config.eval_split} tasks (validation {config.validation_fraction:.0%} and test "
            f"{config.test_fraction:.0%} of the grammar's functions, by template; no bug edit shared with "
            f"training; settings tuned on validation); {config.workflow!r} expert "
            f"demonstrations for {config.demo_tasks if config.demo_tasks is not None else 'every'} training "
            f"task(s), plus {config.demo_variants} renamed cop{'y' if config.demo_variants == 1 else 'ies'} "
            "of each",
            f"RL and RFT practise on {tasks.get('rl', tasks['train'])} tasks ("
            + ("every training task" if config.rl_tasks == "all" else "the undemonstrated training modules")
            + ")",
            f"{policy_line(config.policy, start)}; SFT {config.sft.steps} steps x {config.sft.batch_size}",
            f"RL: {rl.algo.upper()}, {rl.rewards} rewards, {rl.steps} steps x {rl.tasks_per_step} tasks x "
            f"G={rl.group_size}, lr {rl.lr}; rollouts on {rl.rollout_backend} workers x {rl.rollout_workers}",
            f"RFT: {config.rft.rounds} rounds x {config.rft.samples_per_task} samples per task, fine-tuning "
            f"{config.rft.sft.steps} steps x {config.rft.sft.batch_size} per round (lr {config.rft.sft.lr}), "
            f"on the policy's own verified successes"
            + (
                f" plus a fixed anchor of {config.rft.demo_anchor} demonstrations"
                if config.rft.demo_anchor
                else ""
            )
            + " (kept successes per round in the arm's new_trajectories)",
            f"episodes: up to {rl.max_steps} tool calls, {rl.max_new_tokens} tokens per call, context "
            f"{rl.max_context} tokens, temperature {rl.temperature} in training (RL and RFT) and "
            f"{config.eval_temperature or rl.temperature} on the held-out tasks",
            f"seeds: {', '.join(map(str, config.seeds))}; held-out: {config.eval_episodes} episodes per task",
            f"wall time per seed: {', '.join(f'{s / 60:.1f}' for s in seconds_per_seed(result))} min on this "
            "machine",
            f"run directory: {exp.run.dir}",
        ]
    )
    report.code(result.command)

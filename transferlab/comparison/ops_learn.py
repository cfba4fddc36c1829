"""Does multi-turn agent RL learn on ops? SFT vs SFT + GRPO on held-out ``OpsAnalysis-v0`` scenarios.

The ops half of the project's question, built like the coding half
(:mod:`transferlab.coding_rl.experiments.agent_learn`). Per seed:

1. **SFT** (arm ``sft``): a tiny policy (or, with ``model_path``, a copy of that local Hugging Face
   model) fine-tuned on the scripted expert's episodes of the first ``sft_tasks`` training scenarios
   (:func:`~transferlab.comparison.ops_training.make_ops_sft_data`: query the sources, check each
   cause, report).
2. **RL** (arm ``rl``): a copy of the SFT policy trained with
   :func:`~transferlab.agent_rl.rl.train_rl` in agent mode on the *other* training
   scenarios (none of them demonstrated), the env factory pointing the rollout workers at
   OpsAnalysis-v0; held-out success and rubric every ``curve_every`` steps (the learning curve).
3. **RFT** (arm ``rft``): another copy trained by rejection-sampling fine-tuning (expert iteration,
   :func:`~transferlab.agent_rl.rft.expert_iteration`) on the same practice
   scenarios and RL's number of episodes: each round samples at RL's temperature, keeps the episodes
   whose report passes the rubric, and fine-tunes on every distinct one kept so far (the policy's own
   successes; ``rft.demo_anchor`` demonstrations beside them, 0 by default).
4. **RFT then RL** (arm ``rft_rl``): the seed's RFT policy trained further by the RL arm's GRPO
   (the same settings and episodes), the recipe of an expert-iteration warm start before RL.
   ``arms`` picks which of ``rl``, ``rft`` and ``rft_rl`` a run computes.
5. **Held-out evaluation** of every policy on the held-out scenarios (a disjoint split of scenario
   seeds), the same episodes per scenario and the same sampling seed for all, one value per
   (seed, scenario): success = the report scores >= 8 on the rubric (0-10).

``result.json`` (:mod:`transferlab.platform.results`) holds each arm's held-out success with a 95%
interval clustered by seed, its rubric, habits and a diagnosis of its reports (reported at all, a
true cause named, an absent cause blamed, half the evidence cited), and the comparisons of
:data:`COMPARISONS` (of the arms that ran) paired on the same seeds and scenarios,
clustered by seed (primary) and by (seed, scenario), each with its number of clusters and minimum
detectable effect. The report is written from it.

    transferlab ops experiment learn --preset cpu --jobs 2 --report-dir docs/results/ops_learn
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import time
from collections.abc import Callable, Sequence
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
from transferlab.comparison.ops_training import (
    OPS_ENV_FACTORY,
    SUCCESS_SCORE,
    OpsEval,
    evaluate_ops,
    make_ops_sft_data,
    ops_tasks,
    shared_tokenizer,
)
from transferlab.platform.config import EvalSplit, eval_split_field
from transferlab.platform.harness import Experiment, seeds_in_processes
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
from transferlab.platform.io import atomic_write_json
from transferlab.platform.reports import Curve, Report, plot_bars, plot_curves
from transferlab.platform.results import Arm, Cluster, Comparison, Result
from transferlab.platform.trajectory import Trajectory
from transferlab.simulator.ops.grader import Retrieved, rubric_score
from transferlab.simulator.ops.scenarios import OpsTask

EXPERIMENT = "ops-learn"
ARMS = ("sft", "sft_forced", "rl", "rft", "rft_rl")
"""Every arm the experiment knows, in the order a seed computes them; ``OpsLearnConfig.arms`` picks
those a run computes."""
COMPARISONS = {
    "rl - sft": ("sft", "rl"),
    "rl - sft_forced": ("sft_forced", "rl"),
    "rft - sft_forced": ("sft_forced", "rft"),
    "rft_rl - sft_forced": ("sft_forced", "rft_rl"),
    "rft - sft": ("sft", "rft"),
    "rl - rft": ("rft", "rl"),
    "rft_rl - sft": ("sft", "rft_rl"),
    "rft_rl - rft": ("rft", "rft_rl"),
}
"""Each comparison's (a, b): ``b - a``, made when both arms ran."""
ArmName = Literal["sft", "sft_forced", "rl", "rft", "rft_rl"]
EVAL_SEED = 12_345
"""The held-out sampling seed: both arms are scored on the same futures."""


def _ops_learn_rl() -> RLConfig:
    return RLConfig(
        mode="agent",
        env_factory=OPS_ENV_FACTORY,
        rewards="sparse",
        steps=32,
        tasks_per_step=8,
        group_size=4,
        advantage="gigpo",
        lr=1e-4,
        kl_coef=0.1,
        loss_agg="seq_mean_token_mean",
        temperature=0.7,
        loss_temperature="sampling",
        max_new_tokens=224,
        max_context=1536,
        max_steps=8,
        checkpoint_every=5,
        rollout_backend="inline",
        rollout_workers=1,
    )


class OpsLearnConfig(ModelChoice):
    """Settings of the ops-learn experiment (the field defaults are the ``cpu`` preset's)."""

    seeds: list[int] = Field(
        default=[0, 1, 2, 3, 4],
        min_length=1,
        description="One SFT / RL pipeline per seed; five, fixed before the run (a headline result).",
    )
    train_tasks: int = Field(
        default=200,
        ge=2,
        description="Training scenarios: the first sft_tasks are demonstrated, RL practises on the rest.",
    )
    sft_tasks: int = Field(default=40, ge=1, description="Training scenarios with an expert demonstration.")
    compact_reports: bool = Field(
        default=True,
        description="The expert's demonstrated reports name the drop and each cause with its numbers and "
        "rule nothing out (about 200 characters instead of 400; the same rubric score).",
    )
    held_out_tasks: int = Field(default=60, ge=1, description="Scenarios scored, from eval_split.")
    eval_split: EvalSplit = eval_split_field()
    vocab_size: int = Field(default=768, ge=300, description="Tiny policy: the shared coding + ops BPE size.")
    policy: TinyPolicyConfig = Field(
        default_factory=lambda: TinyPolicyConfig(n_layer=2, d_model=128, n_head=4, max_positions=1536),
        description="The tiny policy (its seed is replaced by each seed); ignored with model_path.",
    )
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(
            steps=400, batch_size=8, lr=3e-3, schedule="cosine", context_weight=0.5, copy_weight=0.5
        ),
        description="SFT on the expert's episodes (its seed is replaced by each seed).",
    )
    rl: RLConfig = Field(
        default_factory=_ops_learn_rl,
        description="GRPO on the undemonstrated training scenarios; env_factory must stay OPS_ENV_FACTORY.",
    )
    rft: RFTSettings = Field(
        default_factory=RFTSettings,
        description="Rejection-sampling fine-tuning (expert iteration) on RL's number of episodes: rounds "
        "of sampling the practice scenarios, keeping episodes whose report passes the rubric, fine-tuning "
        "on those (plus rft.demo_anchor demonstrations, 0 by default).",
    )
    arms: list[ArmName] = Field(
        default=["sft", "rl"],
        min_length=2,
        description="The arms to compute: 'sft' and at least one of 'rl' (GRPO), 'rft' (expert iteration) "
        "and 'rft_rl' (GRPO from the RFT policy; needs 'rft'); 'sft_forced' adds the forced-report control "
        "(the SFT policy whose last allowed step opens a report). The default is what a run saved before "
        "the rft arm existed computed; the presets compute all five.",
    )
    curve_every: int = Field(
        default=16, ge=0, description="RL steps between held-out points of the learning curve; 0 = none."
    )
    eval_episodes: int = Field(default=2, ge=1, description="Held-out episodes per scenario (both arms).")
    eval_temperature: float = Field(default=0.7, gt=0, description="Sampling temperature on held-out.")
    torch_threads: int = Field(default=1, ge=1, description="torch threads per process.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.sft_tasks >= self.train_tasks:
            raise ValueError(
                f"sft_tasks ({self.sft_tasks}) must be below train_tasks ({self.train_tasks}): RL practises "
                "on the training scenarios SFT never showed; raise train_tasks or lower sft_tasks"
            )
        trained = {"rl", "rft", "rft_rl"} & set(self.arms)
        if "sft" not in self.arms or len(set(self.arms)) != len(self.arms) or not trained:
            raise ValueError(
                f"arms must hold 'sft' once and 'rl', 'rft' and/or 'rft_rl' once each (and 'sft_forced' "
                f"if wanted), got {self.arms}"
            )
        if "rft_rl" in self.arms and "rft" not in self.arms:
            raise ValueError(f"arm 'rft_rl' trains from the RFT policy: add 'rft' to arms, got {self.arms}")
        if "rft" in self.arms:
            rft_round_tasks(self.rl, self.rft)
        if self.rl.mode != "agent" or self.rl.env_factory != OPS_ENV_FACTORY:
            raise ValueError(f"rl.mode must be 'agent' and rl.env_factory {OPS_ENV_FACTORY!r}")
        return self


def ops_learn_smoke() -> OpsLearnConfig:
    """The whole pipeline in a few minutes (its numbers mean nothing)."""
    return OpsLearnConfig(
        seeds=[0],
        train_tasks=4,
        sft_tasks=2,
        held_out_tasks=2,
        vocab_size=400,
        policy=TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=1024),
        sft=SFTConfig(steps=4, batch_size=2, lr=3e-3),
        rl=_ops_learn_rl().model_copy(
            update={
                "steps": 2,
                "tasks_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 24,
                "max_context": 768,
            }
        ),
        rft=RFTSettings(rounds=2, samples_per_task=2, sft=SFTConfig(steps=2, batch_size=2, lr=1e-3)),
        arms=["sft", "sft_forced", "rl", "rft", "rft_rl"],
        curve_every=1,
        eval_episodes=1,
    )


OPS_LEARN_PRESETS: dict[str, OpsLearnConfig] = {
    # cpu: 1024 RL episodes per seed, as many as coding's agent-learn. Sparse rewards (2 x rubric at
    # the end, -5 without a report) sampled at T=0.7. Compact demonstrated reports (about 200
    # characters): with the expert's 400-character reports a quarter of the SFT policy's held-out
    # episodes broke the report twice and ran out of calls (docs/pilots/ops_learn.md); compact ones
    # took seed 0's SFT from 0.225 to 0.383. GiGPO step credit at lr 1e-4, KL 0.1 and the loss at the
    # sampling temperature: from that start 0.458, where the episode advantage at lr 5e-5, KL 0.05
    # (the earlier preset) fell to 0.258 by blaming absent causes twice as often.
    "cpu": OpsLearnConfig(arms=["sft", "sft_forced", "rl", "rft", "rft_rl"]),
    "smoke": ops_learn_smoke(),
}


# ----------------------------------------------------------------------------------------- scoring


def report_diagnosis(tasks: Sequence[OpsTask], ev: OpsEval) -> dict[str, Any]:
    """Counts over the episodes: actions that ran, reports, a true cause named, an absent cause blamed,
    at least half the evidence cited (a rubric of >= 2 of 4 for evidence)."""
    out = {"episodes": 0, "actions": 0, "actions_ok": 0, "reported": 0, "cause_named": 0}
    out.update({"false_blame": 0, "evidence_half": 0, "success": 0})
    for task, traj in zip(tasks, ev.trajectories, strict=True):
        out["episodes"] += 1
        out["actions"] += len(traj.steps)
        out["actions_ok"] += sum(bool(s.info.get("tool_ok")) for s in traj.steps)
        try:
            call = json.loads(traj.steps[-1].action_text)
        except (json.JSONDecodeError, TypeError):
            call = None
        if (
            not isinstance(call, dict)
            or call.get("action") != "generate_report"
            or not traj.steps[-1].info.get("tool_ok")
        ):
            continue
        score = rubric_score(task, str(call.get("text", "")), retrieved_of(traj))
        out["reported"] += 1
        out["cause_named"] += bool(score.named)
        out["false_blame"] += bool(score.blamed_absent)
        out["evidence_half"] += score.components["evidence_cited"] >= 2.0
        out["success"] += score.total >= SUCCESS_SCORE
    return out


def retrieved_of(traj: Trajectory) -> Retrieved:
    """What an episode retrieved: its prompt and every observation before the last (the report's)."""
    return Retrieved.from_texts([traj.steps[0].prompt_text, *(s.observation_text for s in traj.steps[:-1])])


def per_task(values: Sequence[float], n: int) -> list[float]:
    """Means of consecutive runs of ``n`` values (one per task, episodes grouped by task)."""
    return [sum(values[i : i + n]) / n for i in range(0, len(values), n)]


def _pooled(diagnoses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Seeds' diagnoses summed, with the shares a report shows."""
    total = {k: sum(d[k] for d in diagnoses) for k in diagnoses[0]}
    eps = max(total["episodes"], 1)
    shares = {
        f"{k}_share": total[k] / eps for k in ("reported", "cause_named", "false_blame", "evidence_half")
    }
    # success = reported x success given a report: which of the two a gain comes from
    if "success" in total:  # diagnoses saved before success was counted have no such share
        shares["success_given_report"] = total["success"] / max(total["reported"], 1)
    return {**total, "format": total["actions_ok"] / max(total["actions"], 1), **shares}


# ----------------------------------------------------------------------------------------- arms


class Setup:
    """What every seed of one run shares: the scenarios, the tokenizer, the demonstrations."""

    def __init__(self, exp: Experiment, config: OpsLearnConfig, start: StartModel | None) -> None:
        self.exp, self.config, self.start = exp, config, start
        self.train, self.held = ops_tasks(config.train_tasks, config.held_out_tasks, config.eval_split)
        self.practice = self.train[config.sft_tasks :]
        if start is not None:
            self.tokenizer = start.tokenizer
        else:
            self.tokenizer = shared_tokenizer(self.train[: config.sft_tasks], config.vocab_size)

    @functools.cached_property
    def demos(self) -> list[Any]:
        rl = self.config.rl
        return make_ops_sft_data(
            self.tokenizer,
            self.train[: self.config.sft_tasks],
            rl.max_steps,
            rl.rewards,
            compact_reports=self.config.compact_reports,
        )

    def evaluate(self, model: Any, force_report: bool = False) -> OpsEval:
        cfg = self.config
        return evaluate_ops(
            model,
            self.tokenizer,
            self.held,
            cfg.rl,
            episodes_per_task=cfg.eval_episodes,
            temperature=cfg.eval_temperature,
            seed=EVAL_SEED,
            force_report=force_report,
        )

    def scores(self, model: Any, force_report: bool = False) -> dict[str, Any]:
        """Held-out success and rubric per scenario, habit shares and the report diagnosis."""
        n = self.config.eval_episodes
        ev = self.evaluate(model, force_report)
        flat = [t for t in self.held for _ in range(n)]
        return {
            "held_out": per_task(ev.success, n),
            "rubric": per_task(ev.rubric, n),
            "habits": {k: mean(v) for k, v in ev.habits.items()},
            "diagnosis": report_diagnosis(flat, ev),
        }

    def saved_policy(self, arm: str, make: Callable[[], Any]) -> Any:
        """The policy saved in ``arms/<arm>/policy``, or ``make()``'s, saved there first."""
        directory = self.exp.arm_dir(arm) / "policy"
        if (directory / "config.json").exists():
            return load_policy(directory, device="cpu", dtype="float32")[0]
        model = make()
        save_policy(model, self.tokenizer, directory)
        return model

    def sft_policy(self, seed: int) -> Any:
        """The seed's SFT policy: trained once and saved in ``arms/sft-seed<seed>/policy``."""
        return self.saved_policy(f"sft-seed{seed}", functools.partial(self._train_sft, seed))

    def _train_sft(self, seed: int) -> Any:
        from transferlab.agent_rl.sft import train_sft

        cfg = self.config
        if self.start is not None:
            model = self.start.fresh()
        else:
            model = cfg.policy.model_copy(update={"seed": seed}).create(self.tokenizer)
        torch.manual_seed(seed)
        with self.exp.arm_logger(f"sft-seed{seed}") as logger:
            train_sft(model, self.tokenizer, self.demos, cfg.sft.model_copy(update={"seed": seed}), logger)
        return model

    def sft_arm(self, seed: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        model = self.sft_policy(seed)
        return {**self.scores(model), "demonstrations": len(self.demos), "seconds": time.perf_counter() - t0}

    def sft_forced_arm(self, seed: int) -> dict[str, Any]:
        """The forced-report control: the seed's SFT policy, untrained further, scored with its last
        allowed step opening a report (the cheapest explanation of a gain that only adds reports)."""
        t0 = time.perf_counter()
        scores = self.scores(self.sft_policy(seed), force_report=True)
        return {**scores, "seconds": time.perf_counter() - t0}

    def rl_arm(self, seed: int) -> dict[str, Any]:
        """A copy of the SFT policy trained with ``train_rl`` (:meth:`grpo_arm`)."""
        return self.grpo_arm(f"rl-seed{seed}", seed, self.sft_policy(seed))

    def rft_rl_arm(self, seed: int) -> dict[str, Any]:
        """The seed's RFT policy (saved by the ``rft`` arm, or re-made by :meth:`rft_policy` when a run
        from before the policy was saved is resumed) trained further like the RL arm."""
        start = self.saved_policy(
            f"rft-seed{seed}", lambda: self.rft_policy(seed, self.config.rft, self.rft_rounds(seed))[0]
        )
        return self.grpo_arm(f"rft_rl-seed{seed}", seed, start)

    def grpo_arm(self, arm: str, seed: int, start: Any) -> dict[str, Any]:
        """A copy of ``start`` trained with ``train_rl`` on the practice scenarios, scored on held-out;
        resumes from its checkpoint, keeping the curve points already measured (``curve.json``)."""
        from transferlab.agent_rl.rl import train_rl

        cfg = self.config
        rl = cfg.rl.model_copy(update={"seed": seed})
        curve_path = self.exp.arm_dir(arm) / "curve.json"
        curve: list[dict[str, Any]] = json.loads(curve_path.read_text()) if curve_path.exists() else []
        episodes_per_step = rl.tasks_per_step * rl.group_size
        t0 = time.perf_counter()

        def on_step(step: int, model: Any) -> dict[str, float]:
            if not cfg.curve_every or (step + 1) % cfg.curve_every or step + 1 == rl.steps:
                return {}
            s = self.scores(model)
            point: dict[str, Any] = {"step": step + 1, "episodes": (step + 1) * episodes_per_step}
            point.update(success=mean(s["held_out"]), rubric=mean(s["rubric"]))
            curve[:] = [p for p in curve if p["step"] < step + 1] + [point]
            atomic_write_json(curve_path, curve)
            return {"heldout/success_rate": point["success"], "heldout/rubric": point["rubric"]}

        with self.exp.arm_logger(arm, resume=True) as logger:
            result = train_rl(
                copy.deepcopy(start),
                self.tokenizer,
                self.practice,
                rl,
                self.exp.arm_dir(arm),
                logger,
                resume=True,
                on_step=on_step,
            )
        out = self.scores(result.model)
        end: dict[str, Any] = {"step": rl.steps, "episodes": rl.steps * episodes_per_step}
        end.update(success=mean(out["held_out"]), rubric=mean(out["rubric"]))
        train_success = [h.get("rollout/success_rate", float("nan")) for h in result.history]
        return {
            **out,
            "curve": [p for p in curve if p["step"] < rl.steps] + [end],
            "training_episodes": rl.steps * episodes_per_step,
            "train_success": train_success,
            "seconds": time.perf_counter() - t0,
        }

    def rft_rounds(self, seed: int) -> Path:
        """Where the ``rft`` arm of ``seed`` saves its finished expert-iteration rounds."""
        return self.exp.arm_dir(f"rft-seed{seed}") / "rounds"

    def rft_policy(self, seed: int, rft: RFTSettings, rounds: Path | None = None) -> tuple[Any, list[Any]]:
        """A copy of the seed's SFT policy trained by expert iteration (rejection-sampling fine-tuning)
        on RL's number of episodes over the practice scenarios: each round samples at RL's temperature,
        keeps the episodes whose report the rubric passed, fine-tunes on those (and the anchor).
        ``rounds``: the directory that saves each finished round (a resumed arm continues from it)."""
        from transferlab.agent_rl.rft import expert_iteration
        from transferlab.agent_rl.rollout_worker import RolloutWorker, WorkerSpec

        rl = self.config.rl
        tasks = rft_tasks(self.practice, rft_round_tasks(rl, rft), seed)
        model = copy.deepcopy(self.sft_policy(seed))
        config = expert_iteration_config(rft, rl, seed)
        spec = WorkerSpec(
            policy_dir="", rewards=rl.rewards, max_steps=rl.max_steps, threads=0, env_factory=rl.env_factory
        )
        worker = RolloutWorker(model, self.tokenizer, spec)
        demos = demo_anchor(self.demos, rft.demo_anchor, seed) if rft.demo_anchor else []
        with self.exp.arm_logger(f"rft-seed{seed}", resume=rounds is not None) as logger:
            stats = expert_iteration(model, self.tokenizer, tasks, demos, config, worker, logger, rounds)
        return model, stats

    def rft_arm(self, seed: int) -> dict[str, Any]:
        """The RFT arm: :meth:`rft_policy` with the config's settings, scored on held-out; the policy is
        saved in ``arms/rft-seed<seed>/policy`` (a start for GRPO after RFT, or for inspection)."""
        t0 = time.perf_counter()
        model, stats = self.rft_policy(seed, self.config.rft, self.rft_rounds(seed))
        save_policy(model, self.tokenizer, self.exp.arm_dir(f"rft-seed{seed}") / "policy")
        return {
            **self.scores(model),
            "training_episodes": self.config.rl.total_episodes,
            "train_success": [s.success_rate for s in stats],
            "new_trajectories": [s.new_trajectories for s in stats],
            "data_size": stats[-1].data_size,
            "seconds": time.perf_counter() - t0,
        }


# ------------------------------------------------------------------------------------------- run

Results = dict[str, dict[str, Any]]


def run_ops_learn(
    config: OpsLearnConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Per seed: SFT, then the other arms of ``config.arms`` from it, all scored on the held-out
    scenarios; result, summary, report.

    A resumed run keeps its finished arms (the RL arm resumes from its checkpoint). ``jobs > 1`` runs
    the seeds in that many processes at once; the result is the one a single process would write.
    """
    from transferlab.platform.harness import experiment_command

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    exp, config, start = open_experiment(EXPERIMENT, config, runs_root, resume, console, shared=jobs > 1)
    command = experiment_command(
        "transferlab ops experiment learn", config, OPS_LEARN_PRESETS, exp.run.dir, runs_root, report_dir
    )
    config = config.model_copy(
        update={"rl": fit_context(config.rl, start, lambda line: exp.console.print(line, highlight=False))}
    )
    torch.set_num_threads(config.torch_threads)
    results: Results = {}
    with exp.run, exp.progress:
        bar = exp.progress.add_task("ops-learn", total=len(config.seeds) * len(config.arms))
        if jobs > 1:
            seeds_in_processes(exp, config, runs_root, jobs, bar, job=_seed_job, arms=config.arms)
        setup = Setup(exp, config, start)
        for seed in config.seeds:
            results.update(_seed_arms(exp, setup, seed, bar))
        result = build_result(config, results, command, len(setup.train), len(setup.held))
        dumped = result.model_dump(mode="json")
        summary = {
            "seconds": exp.elapsed_s(),
            "result": dumped,
            "verdicts": {c.name: c.sentence() for c in result.comparisons if c.cluster == "seed"},
            "run_dir": str(exp.run.dir),
            "model": model_record(config.policy, start),
        }
        exp.run.write_artifact_json("summary.json", summary)
        write_results(exp, result, report_dir)
        exp.write_report(build_report(config, result, exp, start), report_dir)
    return summary


def _seed_arms(exp: Experiment, setup: Setup, seed: int, bar: Any | None) -> Results:
    """The seed's arms of ``config.arms`` (each computed unless saved), advancing ``bar``."""
    computes: dict[str, Callable[[], dict[str, Any]]] = {
        "sft": functools.partial(setup.sft_arm, seed),
        "sft_forced": functools.partial(setup.sft_forced_arm, seed),
        "rl": functools.partial(setup.rl_arm, seed),
        "rft": functools.partial(setup.rft_arm, seed),
        "rft_rl": functools.partial(setup.rft_rl_arm, seed),
    }
    out: Results = {}
    for arm in (a for a in ARMS if a in setup.config.arms):
        compute = computes[arm]
        if bar is not None:
            exp.progress.update(bar, description=f"{arm.upper()} seed {seed}")
        out[f"{arm}-seed{seed}"] = exp.arm(f"{arm}-seed{seed}", compute)
        if bar is not None:
            exp.progress.advance(bar)
    return out


def _seed_job(config: OpsLearnConfig, run_dir: str, runs_root: str, seeds: list[int]) -> None:
    """One process of ``jobs``: computes ``seeds``' arms of the shared run at ``run_dir``."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    exp, config, start = open_experiment(
        EXPERIMENT, config, Path(runs_root), Path(run_dir), Console(quiet=True), True
    )
    try:
        config = config.model_copy(update={"rl": fit_context(config.rl, start, lambda _: None)})
        torch.set_num_threads(config.torch_threads)
        setup = Setup(exp, config, start)
        for seed in seeds:
            _seed_arms(exp, setup, seed, None)
    finally:
        exp.run.release()


def build_result(config: OpsLearnConfig, results: Results, command: str, n_train: int, n_held: int) -> Result:
    """Each arm's held-out success, rubric, habits, diagnosis and seconds per seed; the comparisons of
    :data:`COMPARISONS` (those whose arms ran) clustered by seed and by (seed, scenario)."""
    data: dict[str, HeldOut] = {
        arm: held_out(results, arm, config.seeds, "held_out") for arm in ARMS if arm in config.arms
    }
    arms: dict[str, Arm] = {}
    for arm, d in data.items():
        rows = [results[f"{arm}-seed{s}"] for s in config.seeds]
        rubric = held_out(results, arm, config.seeds, "rubric")
        entry: dict[str, Any] = {
            "held_out_success": seed_estimate(d),
            "n_episodes": len(d.values) * config.eval_episodes,
            "per_seed": [mean(r["held_out"]) for r in rows],
            "rubric": seed_estimate(rubric).model_dump(),
            "rubric_per_seed": [mean(r["rubric"]) for r in rows],
            "habits": {k: mean([r["habits"][k] for r in rows]) for k in rows[0]["habits"]},
            "diagnosis": _pooled([r["diagnosis"] for r in rows]),
            "seconds_per_seed": [float(r["seconds"]) for r in rows],
        }
        if arm in ("rl", "rft_rl"):
            entry["training_episodes"] = [int(r["training_episodes"]) for r in rows]
            entry["train_success"] = [r["train_success"] for r in rows]
            entry["curve"] = [r["curve"] for r in rows]
        if arm == "rft":
            entry["training_episodes"] = [int(r["training_episodes"]) for r in rows]
            entry["train_success"] = [r["train_success"] for r in rows]
            entry["data_size"] = [int(r["data_size"]) for r in rows]
        arms[arm] = Arm.model_validate(entry)
    clusters: tuple[Cluster, ...] = ("seed", "seed+task")
    comparisons: list[Comparison] = []
    for name, (a, b) in COMPARISONS.items():
        if a in data and b in data:
            comparisons += compare(name, data[a], data[b], clusters)
    settings = config.model_dump(mode="json")
    settings["tasks"] = {"train": n_train, "held_out": n_held, "rl": n_train - config.sft_tasks}
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


# ---------------------------------------------------------------------------------------- report


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _given(diagnosis: dict[str, Any]) -> str:
    """Success given a report (``-`` in a result saved before the share was kept)."""
    share = diagnosis.get("success_given_report")
    return "-" if share is None else _pct(share)


CURVE_STARTS = {"rl": ("sft",), "rft_rl": ("sft", "rft")}
"""Each GRPO arm's stages before RL: its curve starts at the SFT point (0 episodes), then each stage's
point after that stage's training episodes, then RL's points after all of them."""


def curve_series(result: Result) -> dict[str, dict[str, Curve]]:
    """Mean held-out success and rubric over seeds against training episodes since SFT, per GRPO arm
    that ran: the SFT point, the RFT point for the arm that starts from it, then RL's points."""
    out: dict[str, dict[str, Curve]] = {"success": {}, "rubric": {}}
    for arm, stages in CURVE_STARTS.items():
        if arm not in result.arms:
            continue
        extras = [result.arms[stage].model_extra or {} for stage in stages]
        offsets = list(itertools.accumulate((max(e["training_episodes"]) for e in extras[1:]), initial=0))
        curves = (result.arms[arm].model_extra or {})["curve"]
        steps = sorted({p["episodes"] for c in curves for p in c})
        for key, per_seed in (("success", "per_seed"), ("rubric", "rubric_per_seed")):
            ys = [mean(e[per_seed]) for e in extras]
            ys += [mean([p[key] for c in curves for p in c if p["episodes"] == e]) for e in steps]
            xs = [*offsets, *(offsets[-1] + e for e in steps)]
            out[key][f"{ARM_LABELS[arm]} (mean over seeds)"] = Curve(xs, ys)
    return out


ARM_LABELS = {
    "sft": "SFT",
    "sft_forced": "SFT, report forced at the step limit",
    "rl": "SFT + RL (GRPO)",
    "rft": "SFT + RFT",
    "rft_rl": "SFT + RFT + RL (GRPO)",
}


def build_report(config: OpsLearnConfig, result: Result, exp: Experiment, start: StartModel | None) -> Report:
    """The Markdown/HTML report, every figure from ``result``."""
    extras = {arm: row.model_extra or {} for arm, row in result.arms.items()}
    report = Report("Agent RL vs SFT on OpsAnalysis-v0")
    success = ", ".join(f"{ARM_LABELS[a]} {held_out_interval(result, a).format('.2f')}" for a in extras)
    rubric = ", ".join(f"{ARM_LABELS[a]} {e['rubric']['estimate']:.2f}" for a, e in extras.items())
    report.paragraph(
        f"Held-out success (the report scores >= {SUCCESS_SCORE:g}/10 on the rubric, on scenarios of the "
        f"held-out split): {success} (95% intervals clustered by seed). Rubric: {rubric}."
    )
    report.bullets([c.sentence() + "." for c in result.comparisons if c.cluster == "seed"])
    report.table(
        [
            {
                "arm": arm,
                "held-out success": held_out_interval(result, arm),
                "rubric (0-10)": f"{e['rubric']['estimate']:.2f} [{e['rubric']['ci'][0]:.2f}, "
                f"{e['rubric']['ci'][1]:.2f}]",
                "held-out episodes": result.arms[arm].n_episodes,
                "query before concluding": _pct(e["habits"]["query_before_concluding"]),
                "check before reporting": _pct(e["habits"]["check_before_reporting"]),
            }
            for arm, e in extras.items()
        ]
    )
    report.heading("Comparisons")
    report.paragraph(
        "Differences on held-out success, paired on the same seeds and scenarios; 95% two-stage bootstrap "
        "intervals clustered by seed (primary) and by (seed, scenario); MDE = the smallest true difference "
        "the interval's width would detect with 80% power. A difference whose interval includes zero is "
        "reported as 'pipeline ran', never as an improvement."
    )
    report.table(comparison_rows(result))
    report.heading("Where the reports fail")
    report.paragraph(
        "Over each arm's held-out episodes, pooled over seeds. Format: the share of actions that ran as a "
        "tool call. Reported: episodes that ended with a report; cause named: a true cause blamed; false "
        "blame: a cause that is not behind the drop blamed (-3 each on the rubric); evidence: at least half "
        "the supporting numbers cited; success given a report: success is reports x this, so a gain that "
        "only adds reports leaves it flat."
    )
    report.table(
        [
            {
                "arm": arm,
                "episodes": e["diagnosis"]["episodes"],
                "format": _pct(e["diagnosis"]["format"]),
                "reported": _pct(e["diagnosis"]["reported_share"]),
                "cause named": _pct(e["diagnosis"]["cause_named_share"]),
                "false blame": _pct(e["diagnosis"]["false_blame_share"]),
                "evidence >= half": _pct(e["diagnosis"]["evidence_half_share"]),
                "success given a report": _given(e["diagnosis"]),
            }
            for arm, e in extras.items()
        ]
    )
    if "rl" in extras or "rft_rl" in extras:
        series = curve_series(result)
        report.figure(
            plot_curves(series["success"], xlabel="training episodes since SFT", ylabel="held-out success"),
            "curve_success",
            "Held-out success during training (mean over seeds; 0 = the SFT policy; for RL after RFT, "
            "the RFT policy after its episodes, then RL's points).",
        )
        report.figure(
            plot_curves(
                series["rubric"], xlabel="training episodes since SFT", ylabel="held-out rubric (0-10)"
            ),
            "curve_rubric",
            "Held-out rubric score during training (mean over seeds).",
        )
    report.figure(
        plot_bars({a: held_out_interval(result, a) for a in result.arms}, ylabel="held-out success"),
        "held_out",
        "Held-out success per arm, 95% bootstrap intervals clustered by seed.",
    )
    rl, rft, tasks = config.rl, config.rft, result.settings["tasks"]
    per_seed = [
        sum(seconds) for seconds in zip(*(e["seconds_per_seed"] for e in extras.values()), strict=True)
    ]
    episodes = rl.total_episodes
    report.heading("Settings")
    report.bullets(
        [
            f"scenarios: {tasks['train']} training (expert demonstrations for the first "
            f"{config.sft_tasks}; RL and RFT practise on the other {tasks['rl']}) and {tasks['held_out']} "
            "held-out",
            f"{policy_line(config.policy, start)}; SFT {config.sft.steps} steps x {config.sft.batch_size}"
            f" on {'compact' if config.compact_reports else 'full'} expert reports",
            f"RL: {rl.algo.upper()} ({rl.advantage} advantage), {rl.rewards} rewards, {rl.steps} steps x "
            f"{rl.tasks_per_step} scenarios x G={rl.group_size}, lr {rl.lr}, KL {rl.kl_coef}, temperature "
            f"{rl.temperature} (loss at {'it' if rl.loss_temperature == 'sampling' else 'T=1'})"
            + ("" if "rl" in extras or "rft_rl" in extras else " (not run)")
            + ("; the rft_rl arm runs it from the RFT policy" if "rft_rl" in extras else ""),
            f"RFT: the same {episodes} episodes as {rft.rounds} rounds x {rft.samples_per_task} samples of "
            f"{episodes // (rft.rounds * rft.samples_per_task)} scenarios at temperature {rl.temperature}; "
            f"each round fine-tunes {rft.sft.steps} steps x {rft.sft.batch_size} at lr {rft.sft.lr} on "
            f"{f'a fixed anchor of {rft.demo_anchor} demonstrations plus ' if rft.demo_anchor else ''}"
            "every distinct passing episode so far (the policy's own; kept per round in new_trajectories)"
            + ("" if "rft" in extras else " (not run)"),
            f"episodes: up to {rl.max_steps} tool calls, {rl.max_new_tokens} tokens per call, context "
            f"{rl.max_context} tokens; held-out at temperature {config.eval_temperature}",
            f"seeds: {', '.join(map(str, config.seeds))}; held-out: {config.eval_episodes} episodes per "
            "scenario",
            f"wall time per seed: {', '.join(f'{s / 60:.1f}' for s in per_seed)} min on this machine",
            f"run directory: {exp.run.dir}",
        ]
    )
    report.code(result.command)
    return report

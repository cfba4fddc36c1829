"""What ``transferlab coding train|eval|model init`` do (the typer commands are in :mod:`.train_cli`).

* :func:`run_train`: resolve ``--tasks`` and ``--model``, check every prompt (or demonstration) fits
  the model's context, record a run directory (:class:`TrainRunConfig` as its config.json, metrics,
  progress on stderr, ``summary.json``), train with SFT, GRPO or PPO, and write ``--out`` as a
  standard Hugging Face checkpoint (or LoRA adapters / the merged model);
* :func:`run_eval`: the verifier's verdict per episode, a 95% interval clustered by task;
* :func:`tiny_checkpoint`: our tiny policy with the toy tokenizer, as a checkpoint directory.

Bad input ends the command through :func:`~transferlab.platform.cli_kit.fail` (one ``error:`` line,
exit code 2; 3 when no sandbox backend can run).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import typer
from pydantic import Field

from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig
from transferlab.platform.cli_kit import EXIT_UNAVAILABLE, echo_progress, fail
from transferlab.platform.config import BaseConfig

if TYPE_CHECKING:
    from transferlab.coding_rl.task_families import TaskSet
    from transferlab.platform.runstore import Run
    from transferlab.platform.trajectory import Trajectory

Algo = Literal["sft", "grpo", "ppo"]


class TrainRunConfig(BaseConfig):
    """Everything one ``transferlab coding train`` run used (its run directory's config.json)."""

    algo: Algo = Field(description="sft, grpo or ppo.")
    model: str = Field(description="The --model directory the run started from (absolute path).")
    tasks: str = Field(description="--tasks: toy, toy-repos, seed, procedural or a corpus directory.")
    split: Literal["train", "held-out"] = Field(default="train", description="--split trained on.")
    out: str = Field(description="Where the trained checkpoint (or the LoRA adapters) is written.")
    device: str = Field(default="auto", description="--device: auto, cpu, cuda or cuda:N.")
    dtype: str = Field(default="auto", description="--dtype: auto, float32, bfloat16 or float16.")
    lora_r: int | None = Field(default=None, ge=1, description="LoRA rank; None trains every weight.")
    merge: bool = Field(default=False, description="Write the LoRA-merged full model instead of adapters.")
    sft: SFTConfig | None = Field(default=None, description="The SFT settings of an sft run.")
    rl: RLConfig | None = Field(default=None, description="The RL settings of a grpo/ppo run.")

    def trainer_config(self) -> Any:
        """The SFTConfig (sft) or RLConfig (grpo/ppo) of the run."""
        trainer = self.sft if self.algo == "sft" else self.rl
        if trainer is None:
            raise ValueError(
                f"a {self.algo} run's config needs its {'sft' if self.algo == 'sft' else 'rl'} settings"
            )
        return trainer


# ----------------------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    """A policy ready to train or evaluate, and the local base directory LoRA adapters would name."""

    model: Any
    tokenizer: Any
    base_dir: Path | None
    """The --model directory when it is a full model; None when it was an adapter merged in memory."""
    device: torch.device


def _quiet() -> None:
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("transferlab").setLevel(logging.WARNING)


def _device(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    from transferlab.agent_rl.policies.devices import DeviceError, resolve_device, resolve_dtype

    try:
        where = resolve_device(device)
        return where, resolve_dtype(dtype, where)
    except DeviceError as exc:
        fail(_one_line(exc))


def _adapter_base(path: Path) -> Path:
    """The local base-model directory an adapter directory's ``adapter_config.json`` records."""
    try:
        recorded = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"--model {path}: cannot read adapter_config.json ({exc})")
    base = recorded.get("base_model_name_or_path") if isinstance(recorded, dict) else None
    if not base or not (Path(str(base)) / "config.json").is_file():
        fail(
            f"--model {path} holds LoRA adapters whose base model {base!r} is not a local model "
            "directory; fix: set base_model_name_or_path in its adapter_config.json to the base "
            "model's local directory (nothing is downloaded)"
        )
    return Path(str(base))


def load_model(path: Path, device: str, dtype: str) -> Loaded:
    """``--model``: a full model directory or a LoRA adapter directory (merged into its base)."""
    from transferlab.agent_rl.policies.chat import ChatFormat, ChatTemplateError
    from transferlab.agent_rl.policies.model import PolicyNotFoundError, load_policy

    where, precision = _device(device, dtype)
    path = path.expanduser()
    adapter = (path / "adapter_config.json").is_file()
    model: Any
    tokenizer: Any
    try:
        if adapter:
            from peft import PeftModel
            from transformers import AutoTokenizer

            model, _ = load_policy(_adapter_base(path), where, precision)
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
                tokenizer.pad_token = tokenizer.eos_token
        else:
            model, tokenizer = load_policy(path, where, precision)
    except PolicyNotFoundError as exc:
        fail(_one_line(exc))
    except (OSError, ValueError) as exc:
        fail(f"cannot load --model {path}: {exc}")
    try:
        ChatFormat.for_tokenizer(tokenizer)
    except ChatTemplateError as exc:
        fail(f"--model {path}: {exc}")
    return Loaded(model, tokenizer, None if adapter else path.resolve(), where)


def _tasks(spec: str, split: str) -> TaskSet:
    from transferlab.coding_rl.task_families import TaskFamilyError, resolve_tasks

    try:
        return resolve_tasks(spec, split)
    except TaskFamilyError as exc:
        fail(_one_line(exc))


# ------------------------------------------------------------------------------------- context limits


def _too_long(lengths: Mapping[str, int], limit: int | None, room: int, what: str) -> None:
    """Stop (exit 2) naming the tasks whose ``length + room`` exceeds the model's context ``limit``."""
    if limit is None:
        return
    over = sorted(task for task, n in lengths.items() if n + room > limit)
    if not over:
        return
    shown = ", ".join(over[:8]) + (f" and {len(over) - 8} more" if len(over) > 8 else "")
    longest = max(lengths[t] for t in over)
    fail(
        f"{len(over)} of {len(lengths)} {what} do not fit the model's context of {limit} tokens "
        f"(longest {longest} + {room} to generate): {shown}; nothing is cut: use a model with a longer "
        "context, lower max_new_tokens, or leave those tasks out"
    )


def _prompt_lengths(tokenizer: Any, taskset: TaskSet, max_steps: int) -> dict[str, int]:
    """Each task's first prompt in tokens (for agent tasks, the environment's intro as a user turn)."""
    from transferlab.agent_rl.policies.tokenizer import encode_chat
    from transferlab.coding_rl.single_step import code_prompt_ids

    if taskset.mode == "code":
        return {t.task_id: len(code_prompt_ids(tokenizer, t)) for t in taskset.tasks}
    from transferlab.coding_rl.env.code_repair import CodeRepairEnv

    with _sandbox() as sandbox:
        env = CodeRepairEnv(taskset.tasks, sandbox=sandbox, max_steps=max_steps)
        try:
            lengths = {}
            for task in taskset.tasks:
                intro, _ = env.reset(seed=0, options={"task": task})
                messages = [{"role": "user", "content": intro}]
                lengths[task.task_id] = len(encode_chat(tokenizer, messages, add_generation_prompt=True))
        finally:
            env.close()
    return lengths


def _sandbox(backend: str = "forkserver") -> Any:
    from transferlab.coding_rl.experiments.common import opened_sandbox
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable

    try:
        return opened_sandbox(backend)
    except SandboxUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


def _fit_context(rl: RLConfig, limit: int | None) -> RLConfig:
    """Agent episodes stop at ``max_context``; it cannot be more than the model takes."""
    if limit is None or rl.max_context <= limit:
        return rl
    echo_progress(f"max_context lowered from {rl.max_context} to the model's context limit {limit}")
    return rl.model_copy(update={"max_context": limit})


# ------------------------------------------------------------------------------------------ progress


class _Progress:
    """A metrics logger that prints one ``... algo step i/n: ...`` line on stderr every ``every`` steps."""

    KEYS = (
        ("rollout/success_rate", "success"),
        ("rollout/return", "return"),
        ("sft/loss", "loss"),
        ("loss/total", "loss"),
        ("time/step_s", "s"),
    )

    def __init__(self, algo: str, steps: int, every: int = 1) -> None:
        self.algo, self.steps, self.every = algo, steps, max(1, every)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        if (step + 1) % self.every and step + 1 != self.steps:
            return
        parts = [f"{label} {metrics[key]:.3g}" for key, label in self.KEYS if key in metrics]
        echo_progress(f"{self.algo} step {step + 1}/{self.steps}: " + ", ".join(parts))

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def _peak_memory(device: torch.device) -> tuple[float, str]:
    """Peak memory in GiB: CUDA's max allocated on a GPU, else this process's max resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30, "GPU max allocated"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "process max RSS"


# -------------------------------------------------------------------------------------------- train


def _one_line(exc: BaseException) -> str:
    """A multi-line message (a ConfigError lists its problems) as the one ``error:`` line."""
    return " ".join(str(exc).split())


def _read_trainer_config(algo: Algo, path: Path | None) -> Any:
    from transferlab.agent_rl.rl import RLConfig
    from transferlab.agent_rl.sft import SFTConfig
    from transferlab.platform.config import ConfigError

    cls: type[BaseConfig] = SFTConfig if algo == "sft" else RLConfig
    if path is None:
        return cls()
    if not path.is_file():
        fail(f"--config {path} does not exist; give a JSON or YAML file of {cls.__name__} fields")
    try:
        return cls.from_file(path)
    except (ConfigError, ValueError, OSError) as exc:
        fail(f"--config {_one_line(exc)}")


@dataclass
class TrainOptions:
    """The command line of one ``train`` call (None = not given)."""

    algo: Algo
    model: Path | None
    tasks: str | None
    out: Path | None
    split: str
    config: Path | None
    device: str | None
    dtype: str | None
    lora_r: int | None
    merge: bool
    steps: int | None
    lr: float | None
    seed: int | None
    runs_root: Path
    resume: Path | None
    rollout_backend: str | None = None
    rollout_workers: int | None = None
    ray_address: str | None = None
    gradient_checkpointing: bool = False


def build_run_config(opts: TrainOptions, mode: str) -> TrainRunConfig:
    """The run's config: the --config file (or the trainer's defaults) with the flags applied."""
    from transferlab.agent_rl.policies.adapters import LoraOptions
    from transferlab.platform.config import ConfigError

    assert opts.model is not None and opts.tasks is not None and opts.out is not None
    base = _read_trainer_config(opts.algo, opts.config)
    given = {
        "steps": opts.steps,
        "lr": opts.lr,
        "seed": opts.seed,
        "gradient_checkpointing": opts.gradient_checkpointing or None,
    }
    updates: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if opts.algo != "sft":
        lora = base.lora
        if opts.lora_r is not None:
            lora = (lora or LoraOptions()).model_copy(update={"r": opts.lora_r})
        rl_given = {
            "algo": opts.algo,
            "mode": mode,
            "device": opts.device or "auto",
            "dtype": opts.dtype or "auto",
            "lora": lora.to_dict() if lora is not None else None,
            "rollout_backend": opts.rollout_backend,
            "rollout_workers": opts.rollout_workers,
            "ray_address": opts.ray_address,
        }
        updates.update({k: v for k, v in rl_given.items() if v is not None or k == "lora"})
    try:
        trainer = type(base).from_dict({**base.to_dict(), **updates})
    except ConfigError as exc:
        fail(_one_line(exc))
    lora_r = opts.lora_r if opts.algo == "sft" else (trainer.lora.r if trainer.lora is not None else None)
    if opts.merge and lora_r is None:
        fail("--merge merges LoRA adapters into the model: pass --lora-r N too (or drop --merge)")
    return TrainRunConfig(
        algo=opts.algo,
        model=str(opts.model.expanduser().resolve()),
        tasks=opts.tasks,
        split="held-out" if opts.split == "held-out" else "train",
        out=str(opts.out.expanduser().resolve()),
        device=opts.device or "auto",
        dtype=opts.dtype or "auto",
        lora_r=lora_r,
        merge=opts.merge,
        sft=trainer if opts.algo == "sft" else None,
        rl=trainer if opts.algo != "sft" else None,
    )


def _resumed_config(opts: TrainOptions) -> tuple[TrainRunConfig, Run]:
    """The saved config of the ``--resume`` run directory (its other options must agree or be absent)."""
    from transferlab.platform.config import ConfigError
    from transferlab.platform.runstore import Run

    assert opts.resume is not None
    if not (opts.resume / "meta.json").is_file():
        fail(f"--resume {opts.resume} is not a run directory (no meta.json): pass the run's directory")
    run = Run(opts.resume)
    try:
        cfg = run.load_config(TrainRunConfig)
    except (ConfigError, OSError) as exc:
        fail(f"--resume {opts.resume} was not written by `transferlab coding train`: {exc}")
    if cfg.algo != opts.algo:
        fail(f"--resume {opts.resume} is a {cfg.algo} run: resume it with `coding train {cfg.algo}`")
    given = {"--model": opts.model, "--out": opts.out}
    for flag, value in given.items():
        saved = cfg.model if flag == "--model" else cfg.out
        if value is not None and str(value.expanduser().resolve()) != saved:
            fail(f"--resume {opts.resume} was started with {flag} {saved}; drop {flag} or start a new run")
    if opts.tasks is not None and opts.tasks != cfg.tasks:
        fail(f"--resume {opts.resume} was started with --tasks {cfg.tasks}; drop --tasks or start a new run")
    ignored = [flag for flag, value in _setting_flags(opts).items() if value is not None]
    if ignored:
        fail(
            f"--resume {opts.resume} continues with the settings it saved ({opts.resume / 'config.json'}); "
            f"{', '.join(ignored)} would be ignored: drop {'it' if len(ignored) == 1 else 'them'}, or start "
            "a new run without --resume"
        )
    return _moved(cfg, opts), run


def _moved(cfg: TrainRunConfig, opts: TrainOptions) -> TrainRunConfig:
    """``cfg`` on the ``--device`` / ``--dtype`` given with ``--resume`` (a run may go on elsewhere)."""
    given = {k: v for k, v in (("device", opts.device), ("dtype", opts.dtype)) if v is not None}
    moved = {k: v for k, v in given.items() if v != getattr(cfg, k)}
    if not moved:
        return cfg
    echo_progress(
        "resuming with "
        + ", ".join(f"--{k} {v} (the run started with {getattr(cfg, k)})" for k, v in moved.items())
    )
    from transferlab.platform.config import ConfigError

    update: dict[str, Any] = dict(moved)
    if cfg.rl is not None:
        try:
            update["rl"] = type(cfg.rl).from_dict({**cfg.rl.to_dict(), **moved})
        except ConfigError as exc:
            fail(_one_line(exc))
    return cfg.model_copy(update=update)


def _setting_flags(opts: TrainOptions) -> dict[str, object]:
    """The options that shape a new run's config (None or False: not given); a resumed run keeps its own."""
    return {
        "--config": opts.config,
        "--steps": opts.steps,
        "--lr": opts.lr,
        "--seed": opts.seed,
        "--lora-r": opts.lora_r,
        "--merge": opts.merge or None,
        "--gradient-checkpointing": opts.gradient_checkpointing or None,
        "--rollout-backend": opts.rollout_backend,
        "--rollout-workers": opts.rollout_workers,
        "--ray-address": opts.ray_address,
    }


def _demos(taskset: TaskSet, tokenizer: Any) -> list[Trajectory]:
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable

    echo_progress(f"recording {len(taskset.tasks)} demonstrations on {taskset.name} ({taskset.split})")
    if taskset.mode == "code":
        return taskset.demonstrations(tokenizer)
    try:
        with _sandbox() as sandbox:
            return taskset.demonstrations(tokenizer, sandbox)
    except SandboxUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


def _demo_length(demo: Trajectory) -> int:
    return sum(len(s.prompt_ids) + len(s.action_ids) + len(s.observation_ids) for s in demo.steps)


@dataclass
class Trained:
    """What a trainer hands back to the command: the model to save and the summary's numbers."""

    model: Any
    steps: int
    final: dict[str, float]
    tokens: float
    seconds: float


def _train_sft(
    cfg: TrainRunConfig, loaded: Loaded, demos: list[Trajectory], run: Run, resumed: bool
) -> Trained:
    from transferlab.agent_rl.policies.adapters import LoraOptions
    from transferlab.agent_rl.sft import train_sft
    from transferlab.platform.metrics import MultiLogger, drop_logged_after

    sft: SFTConfig = cfg.trainer_config()
    model = loaded.model
    if cfg.lora_r is not None:
        model = LoraOptions(r=cfg.lora_r, seed=sft.seed).apply(model)
    if resumed:  # SFT keeps no mid-run checkpoint: a resumed run trains its steps again
        drop_logged_after(run.logger, -1)
    logger = MultiLogger(run.logger, _Progress("sft", sft.steps, every=max(1, sft.steps // 10)))
    t0 = time.perf_counter()
    losses = train_sft(model, loaded.tokenizer, demos, sft, logger)
    seconds = time.perf_counter() - t0
    mean_tokens = sum(_demo_length(d) for d in demos) / len(demos)
    return Trained(
        model=model,
        steps=sft.steps,
        final={"loss": losses[-1]},
        tokens=sft.steps * sft.batch_size * mean_tokens,
        seconds=seconds,
    )


def _train_rl(cfg: TrainRunConfig, loaded: Loaded, taskset: TaskSet, run: Run, resumed: bool) -> Trained:
    from transferlab.coding_rl.training import train_rl
    from transferlab.platform.metrics import MultiLogger

    rl: RLConfig = cfg.trainer_config()
    logger = MultiLogger(run.logger, _Progress(cfg.algo, rl.steps))
    t0 = time.perf_counter()
    try:
        result = train_rl(loaded.model, loaded.tokenizer, taskset.tasks, rl, run.dir, logger, resume=resumed)
    except ValueError as exc:
        fail(_one_line(exc))
    seconds = time.perf_counter() - t0
    history = result.history
    last = history[-1] if history else {}
    final = {
        key: float(last[name])
        for name, key in (("rollout/success_rate", "train success"), ("loss/total", "loss"))
        if name in last and math.isfinite(last[name])
    }
    return Trained(
        model=result.model,
        steps=rl.steps,
        final=final,
        tokens=sum(h.get("rollout/action_tokens", 0.0) for h in history),
        seconds=seconds,
    )


def _replace_dir(write: Any, out: Path) -> None:
    """``write(tmp)`` into a sibling directory, then swap it in for ``out`` (no half-written ``out``)."""
    import os
    import shutil

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def save_output(trained_model: Any, tokenizer: Any, cfg: TrainRunConfig, base_dir: Path) -> str:
    """Write ``cfg.out``: the full model, the LoRA adapters (naming ``base_dir``), or the merged model."""
    from transferlab.agent_rl.policies.model import save_policy

    out = Path(cfg.out)
    if cfg.lora_r is None:
        _replace_dir(lambda d: save_policy(trained_model, tokenizer, d), out)
        return "full model"
    if cfg.merge:
        merged = trained_model.merge_and_unload()
        _replace_dir(lambda d: save_policy(merged, tokenizer, d), out)
        return f"LoRA r={cfg.lora_r} merged into the full model"
    for peft_config in trained_model.peft_config.values():
        peft_config.base_model_name_or_path = str(base_dir.resolve())

    def write(d: Path) -> None:
        trained_model.save_pretrained(d)
        tokenizer.save_pretrained(d)

    _replace_dir(write, out)
    return f"LoRA r={cfg.lora_r} adapters (peft; base {base_dir.resolve()})"


def run_train(opts: TrainOptions) -> None:
    """The ``train`` commands: resolve everything, check it, train, save, summarise."""
    from transferlab.agent_rl.policies.devices import context_limit
    from transferlab.agent_rl.policies.model import save_policy
    from transferlab.platform.runstore import RunInUseError, RunStore

    _quiet()
    run: Run | None = None
    if opts.resume is not None:
        cfg, run = _resumed_config(opts)
    else:
        missing = [
            f for f, v in (("--model", opts.model), ("--tasks", opts.tasks), ("--out", opts.out)) if v is None
        ]
        if missing:
            fail(
                f"missing {', '.join(missing)}: train needs --model, --tasks and --out (or --resume RUN_DIR)"
            )
    spec_tasks = cfg.tasks if run is not None else opts.tasks
    split = cfg.split if run is not None else opts.split
    assert spec_tasks is not None
    taskset = _tasks(spec_tasks, split)
    if run is None:
        cfg = build_run_config(opts, taskset.mode)
    loaded = load_model(Path(cfg.model), cfg.device, cfg.dtype)
    limit = context_limit(loaded.model)
    demos: list[Trajectory] = []
    if cfg.algo == "sft":
        demos = _demos(taskset, loaded.tokenizer)
        lengths = {d.steps[0].task_id: _demo_length(d) for d in demos}
        _too_long(lengths, limit, 0, "demonstrations")
    else:
        rl = _fit_context(cfg.trainer_config(), limit)
        cfg = cfg.model_copy(update={"rl": rl})
        _too_long(
            _prompt_lengths(loaded.tokenizer, taskset, rl.max_steps), limit, rl.max_new_tokens, "prompts"
        )
    try:
        if run is None:
            run = RunStore(opts.runs_root).create_run(f"coding-train-{cfg.algo}", cfg)
            resumed = False
        else:
            run.acquire()
            resumed = True
            run.update_meta(resumed_on={"device": cfg.device, "dtype": cfg.dtype})
    except (RunInUseError, ValueError, OSError) as exc:
        fail(_one_line(exc))
    with run:
        base_dir = loaded.base_dir
        if base_dir is None:  # an adapter merged in memory: LoRA adapters need a base on disk
            base_dir = run.dir / "policy-base"
            if not (base_dir / "config.json").is_file():
                save_policy(loaded.model, loaded.tokenizer, base_dir)
        if cfg.algo == "sft":
            trained = _train_sft(cfg, loaded, demos, run, resumed)
        else:
            trained = _train_rl(cfg, loaded, taskset, run, resumed)
        saved = save_output(trained.model, loaded.tokenizer, cfg, base_dir)
        peak, peak_what = _peak_memory(loaded.device)
        summary = {
            "algo": cfg.algo,
            "steps": trained.steps,
            **{k.replace(" ", "_"): v for k, v in trained.final.items()},
            "tokens_per_s": trained.tokens / max(trained.seconds, 1e-9),
            "train_seconds": trained.seconds,
            "peak_memory_gib": peak,
            "peak_memory_kind": peak_what,
            "device": str(loaded.device),
            "out": cfg.out,
            "saved": saved,
            "run_dir": str(run.dir),
        }
        run.write_artifact_json("summary.json", summary)
    finals = ", ".join(f"final {k} {v:.3f}" for k, v in trained.final.items())
    tokens_what = "trained tokens/s" if cfg.algo == "sft" else "sampled tokens/s"
    typer.echo(
        f"{cfg.algo}: {trained.steps} steps on {taskset.name} ({taskset.split}, {len(taskset.tasks)} tasks), "
        f"{finals}; {summary['tokens_per_s']:.0f} {tokens_what}; peak memory {peak:.2f} GiB ({peak_what}) "
        f"on {loaded.device}"
    )
    typer.echo(f"model: {cfg.out} ({saved})")
    typer.echo(f"run directory: {run.dir}")


# --------------------------------------------------------------------------------------------- eval


def _cluster_ci(per_task: Mapping[str, float], samples: int) -> tuple[float, float, float]:
    """Success rate over episodes and its 95% interval, clustered by task (two-stage bootstrap)."""
    from transferlab.platform.stats import clustered_bootstrap_ci

    values: list[float] = []
    clusters: list[str] = []
    for task_id, share in per_task.items():
        wins = round(share * samples)
        values += [1.0] * wins + [0.0] * (samples - wins)
        clusters += [task_id] * samples
    interval = clustered_bootstrap_ci(values, clusters, seed=0)
    return interval.estimate, interval.low, interval.high


def run_eval(
    model_path: Path,
    tasks: str,
    split: str,
    samples: int,
    device: str,
    dtype: str,
    seed: int,
    max_new_tokens: int | None,
    max_steps: int,
) -> dict[str, Any]:
    """Evaluate ``--model`` on the tasks: the verifier's verdict per episode, clustered 95% interval."""
    from transferlab.agent_rl.policies.devices import context_limit
    from transferlab.coding_rl.experiments.common import evaluate_agent, evaluate_code
    from transferlab.coding_rl.sandbox.verifier import Verifier
    from transferlab.platform.held_out import mean

    _quiet()
    taskset = _tasks(tasks, split)
    loaded = load_model(model_path, device, dtype)
    limit = context_limit(loaded.model)
    room = max_new_tokens if max_new_tokens is not None else (24 if taskset.mode == "code" else 48)
    _too_long(_prompt_lengths(loaded.tokenizer, taskset, max_steps), limit, room, "prompts")
    extra: dict[str, Any] = {}
    t0 = time.perf_counter()
    with _sandbox() as sandbox:
        if taskset.mode == "code":
            scores = evaluate_code(
                loaded.model,
                loaded.tokenizer,
                taskset.tasks,
                Verifier(sandbox),
                samples=samples,
                max_new_tokens=room,
                seed=seed,
            )
            shares = scores.sampled
            extra["greedy_success_rate"] = mean(scores.greedy)
        else:
            context = min(1024, limit) if limit is not None else 1024
            shares = evaluate_agent(
                loaded.model,
                loaded.tokenizer,
                taskset.tasks,
                sandbox,
                episodes_per_task=samples,
                max_new_tokens=room,
                max_context=context,
                max_steps=max_steps,
                seed=seed,
            )
            extra["max_context"] = context
    per_task = dict(zip(taskset.task_ids, shares, strict=True))
    rate, low, high = _cluster_ci(per_task, samples)
    peak, peak_what = _peak_memory(loaded.device)
    return {
        "model": str(model_path),
        "tasks": taskset.name,
        "split": taskset.split,
        "mode": taskset.mode,
        "samples": samples,
        "n": len(per_task) * samples,
        "n_tasks": len(per_task),
        "success_rate": rate,
        "ci_low": low,
        "ci_high": high,
        **extra,
        "max_new_tokens": room,
        "device": str(loaded.device),
        "seconds": time.perf_counter() - t0,
        "peak_memory_gib": peak,
        "peak_memory_kind": peak_what,
        "per_task": per_task,
    }


# ------------------------------------------------------------------------------------------- model init

TINY_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 2, "d_model": 64, "n_head": 4},
    "small": {"n_layer": 4, "d_model": 128, "n_head": 4},
    "0.5b": {"n_layer": 24, "d_model": 1280, "n_head": 20},
}
"""The tiny family's sizes: about 0.1M, 1.1M and 0.47B parameters (with the 1024-token toy tokenizer)."""


def tiny_checkpoint(out: Path, size: str, seed: int) -> Path:
    """Our tiny policy with the toy tokenizer (trained here on every built-in task family's text)."""
    from transferlab.agent_rl.policies.model import TinyPolicyConfig, save_policy
    from transferlab.coding_rl.experiments.common import toy_tokenizer
    from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_repo_tasks, toy_tasks

    ops = tuple(sorted(OPERATIONS))
    code_train, _ = toy_tasks(0.25, 0, ops)
    repo_train, _ = toy_repo_tasks(0.25, 0, ops)
    # trained on training text only: a held-out task's text never shapes the vocabulary
    tokenizer = toy_tokenizer(code_train, repo_train + seed_repo_tasks(), 1024)
    model = TinyPolicyConfig(max_positions=2048, seed=seed, **TINY_SIZES[size]).create(tokenizer)
    return save_policy(model, tokenizer, out)


def init_model(family: str, size: str, out: Path, seed: int) -> tuple[int, Any, int | None]:
    """Write a random checkpoint of ``family`` / ``size`` to ``out``; its parameters, tokenizer, context."""
    from transferlab.agent_rl.policies.devices import context_limit
    from transferlab.agent_rl.policies.model import count_parameters, load_policy

    _quiet()
    if family == "tiny":
        _replace_dir(lambda d: tiny_checkpoint(d, size, seed), out)
    else:
        from transferlab.agent_rl.policies.families import init_checkpoint
        from transferlab.coding_rl.tokenizer_corpus import default_texts

        _replace_dir(lambda d: init_checkpoint(family, d, size=size, seed=seed, texts=default_texts()), out)
    model, tokenizer = load_policy(out)
    return count_parameters(model), tokenizer, context_limit(model)

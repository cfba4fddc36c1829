"""`transferlab coding train sft|grpo|ppo`, `transferlab coding eval`, `transferlab coding model init`.

Commands::

    transferlab coding model init --family tiny|qwen2|llama|gpt2 --size tiny|small|0.5b --out DIR [--seed N]
    transferlab coding train sft  --model PATH --tasks TASKS --out DIR [--split train] [--config FILE]
                                  [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16]
                                  [--lora-r N] [--merge] [--steps N] [--lr X] [--seed N]
                                  [--runs-root runs] [--resume RUN_DIR] [--gradient-checkpointing]
    transferlab coding train grpo ... (same, plus --rollout-backend local|ray|inline
                                  --rollout-workers N --ray-address ADDR); also ppo
    transferlab coding eval --model PATH --tasks TASKS [--split held-out] [--samples K] [--json]

``--model`` is a local Hugging Face causal LM directory (config, weights, tokenizer with a chat
template), a checkpoint written by ``train``, or a LoRA adapter directory written by ``train --lora-r``
(its base model is loaded from the local path recorded in ``adapter_config.json``). Nothing is
downloaded. ``--tasks`` is ``toy``, ``toy-repos``, ``seed`` or a corpus directory built by
``coding tasks build`` (see :mod:`transferlab.coding_rl.task_families`).

``train`` records a run directory (``runs/coding-train-<algo>/<id>/``: config.json with every
setting, metrics.parquet, summary.json; progress lines on stderr) and writes ``DIR`` as a standard
Hugging Face checkpoint, or the peft adapters with ``--lora-r`` (the merged model with ``--merge``).
Prompts longer than the model's context are reported and stop the command; nothing is cut.

Exit codes: 0 done; 2 bad input (not a model, no chat template, unknown task family or split,
``--device cuda`` without CUDA, a config file with unknown fields, prompts that do not fit); 3 no
sandbox backend can run here. Only typer and the standard library are imported at module level.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from transferlab.platform.cli_kit import fail

train_app = typer.Typer(
    name="train",
    help="Train a local Hugging Face chat model (or the tiny policy) on coding tasks: SFT, GRPO, PPO.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
model_app = typer.Typer(
    name="model",
    help="Make policy checkpoints: the tiny policy, or randomly initialised Qwen2 / Llama / GPT-2.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


class RolloutBackend(StrEnum):
    local = "local"
    ray = "ray"
    inline = "inline"


Algo = Literal["sft", "grpo", "ppo"]


class Family(StrEnum):
    tiny = "tiny"
    qwen2 = "qwen2"
    llama = "llama"
    gpt2 = "gpt2"


class Size(StrEnum):
    tiny = "tiny"
    small = "small"
    b05 = "0.5b"


# -------------------------------------------------------------------------------------- train commands

ModelOption = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="A local Hugging Face causal LM directory, a checkpoint written by train, or its LoRA adapters.",
        show_default=False,
    ),
]
TasksOption = Annotated[
    str | None,
    typer.Option(
        "--tasks",
        help="toy | toy-repos | seed | procedural | a corpus directory (coding tasks build).",
        show_default=False,
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", help="Where the trained checkpoint (or LoRA adapters) goes.", show_default=False),
]
SplitOption = Annotated[str, typer.Option("--split", help="train | held-out")]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="JSON/YAML of SFTConfig (sft) or RLConfig (grpo/ppo) fields; flags override it.",
        show_default=False,
    ),
]
DeviceOption = Annotated[
    str | None,
    typer.Option(
        "--device",
        help="auto | cpu | cuda | cuda:N (default auto; with --resume: where it goes on, else as it began)",
        show_default=False,
    ),
]
DtypeOption = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="auto | float32 | bfloat16 | float16 (default auto; with --resume: as for --device)",
        show_default=False,
    ),
]
LoraOption = Annotated[
    int | None, typer.Option("--lora-r", min=1, help="Train LoRA adapters of this rank.", show_default=False)
]
MergeOption = Annotated[bool, typer.Option("--merge", help="With --lora-r: write the merged full model.")]
StepsOption = Annotated[
    int | None,
    typer.Option("--steps", min=1, help="Optimizer steps (sft) / iterations (RL).", show_default=False),
]
LrOption = Annotated[float | None, typer.Option("--lr", min=0.0, help="Learning rate.", show_default=False)]
SeedOption = Annotated[int | None, typer.Option("--seed", min=0, help="Seeds the run.", show_default=False)]
RunsRootOption = Annotated[Path, typer.Option("--runs-root", help="Root of the run store.")]
ResumeOption = Annotated[
    Path | None,
    typer.Option(
        "--resume", help="Finish this interrupted run directory (its saved settings).", show_default=False
    ),
]
GradCkptOption = Annotated[
    bool, typer.Option("--gradient-checkpointing", help="Recompute activations in backward (less memory).")
]
BackendOption = Annotated[
    RolloutBackend | None,
    typer.Option(
        "--rollout-backend",
        help="Rollout workers: local processes, ray actors, or inline.",
        show_default=False,
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option("--rollout-workers", min=1, max=64, help="Parallel rollout workers.", show_default=False),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Connect the ray backend to this cluster (else RAY_ADDRESS).",
        show_default=False,
    ),
]


@train_app.command("sft")
def train_sft_command(
    model: ModelOption = None,
    tasks: TasksOption = None,
    out: OutOption = None,
    split: SplitOption = "train",
    config: ConfigOption = None,
    device: DeviceOption = None,
    dtype: DtypeOption = None,
    lora_r: LoraOption = None,
    merge: MergeOption = False,
    steps: StepsOption = None,
    lr: LrOption = None,
    seed: SeedOption = None,
    runs_root: RunsRootOption = Path("runs"),
    resume: ResumeOption = None,
    gradient_checkpointing: GradCkptOption = False,
) -> None:
    """Supervised fine-tuning on the tasks' expert demonstrations (loss on the policy's tokens only)."""
    from transferlab.coding_rl.train_run import TrainOptions, run_train

    run_train(
        TrainOptions(
            algo="sft",
            model=model,
            tasks=tasks,
            out=out,
            split=split,
            config=config,
            device=device,
            dtype=dtype,
            lora_r=lora_r,
            merge=merge,
            steps=steps,
            lr=lr,
            seed=seed,
            runs_root=runs_root,
            resume=resume,
            gradient_checkpointing=gradient_checkpointing,
        )
    )


def _rl_command(algo: Algo) -> Any:
    def command(
        model: ModelOption = None,
        tasks: TasksOption = None,
        out: OutOption = None,
        split: SplitOption = "train",
        config: ConfigOption = None,
        device: DeviceOption = None,
        dtype: DtypeOption = None,
        lora_r: LoraOption = None,
        merge: MergeOption = False,
        steps: StepsOption = None,
        lr: LrOption = None,
        seed: SeedOption = None,
        runs_root: RunsRootOption = Path("runs"),
        resume: ResumeOption = None,
        rollout_backend: BackendOption = None,
        rollout_workers: WorkersOption = None,
        ray_address: RayOption = None,
        gradient_checkpointing: GradCkptOption = False,
    ) -> None:
        from transferlab.coding_rl.train_run import TrainOptions, run_train

        run_train(
            TrainOptions(
                algo=algo,
                model=model,
                tasks=tasks,
                out=out,
                split=split,
                config=config,
                device=device,
                dtype=dtype,
                lora_r=lora_r,
                merge=merge,
                steps=steps,
                lr=lr,
                seed=seed,
                runs_root=runs_root,
                resume=resume,
                rollout_backend=rollout_backend.value if rollout_backend else None,
                rollout_workers=rollout_workers,
                ray_address=ray_address,
                gradient_checkpointing=gradient_checkpointing,
            )
        )

    command.__doc__ = (
        "GRPO against the sandbox verifier (group-relative advantages, no critic)."
        if algo == "grpo"
        else "PPO against the sandbox verifier (a value head, GAE over each turn's reward)."
    )
    return command


train_app.command("grpo")(_rl_command("grpo"))
train_app.command("ppo")(_rl_command("ppo"))


def eval_command(
    model: Annotated[
        Path,
        typer.Option(
            "--model", help="A local Hugging Face causal LM directory, a train checkpoint or LoRA adapters."
        ),
    ],
    tasks: Annotated[
        str, typer.Option("--tasks", help="toy | toy-repos | seed | procedural | a corpus directory.")
    ],
    split: Annotated[str, typer.Option("--split", help="train | held-out")] = "held-out",
    samples: Annotated[
        int, typer.Option("--samples", "-k", min=1, help="Episodes per task (temperature 1).")
    ] = 4,
    device: DeviceOption = None,
    dtype: DtypeOption = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds sampling.")] = 12_345,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            min=1,
            help="Tokens per completion / turn (24 code, 48 agent).",
            show_default=False,
        ),
    ] = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Agent tasks: tool calls per episode.")
    ] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Success rate on the tasks (every dev and hidden test passes), with a 95% interval by task."""
    from transferlab.coding_rl.train_run import run_eval

    result = run_eval(
        model, tasks, split, samples, device or "auto", dtype or "auto", seed, max_new_tokens, max_steps
    )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"success {result['success_rate']:.1%} [{result['ci_low']:.1%}, {result['ci_high']:.1%}] "
        f"on {result['tasks']} ({result['split']}): {result['n']} episodes over {result['n_tasks']} tasks, "
        f"model {result['model']}"
    )


@model_app.command("init")
def model_init(
    family: Annotated[Family, typer.Option("--family", help="tiny (ours) | qwen2 | llama | gpt2")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write the checkpoint to.")],
    size: Annotated[Size, typer.Option("--size", help="tiny | small | 0.5b")] = Size.tiny,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds the random weights.")] = 0,
) -> None:
    """Write a randomly initialised checkpoint (weights, tokenizer with its chat template): no download."""
    from transferlab.coding_rl.train_run import init_model

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out} exists and is not an empty directory; pick a new directory")
    model, tokenizer, context = init_model(family.value, size.value, out, seed)
    typer.echo(
        f"wrote {out}: family {family.value}, size {size.value}, {model / 1e6:.2f}M parameters, "
        f"vocabulary {len(tokenizer)}, context {context}"
    )


def register(app: typer.Typer) -> None:
    """Add ``train``, ``eval`` and ``model`` to the ``coding`` command group."""
    app.add_typer(train_app, name="train")
    app.add_typer(model_app, name="model")
    app.command("eval")(eval_command)


__all__ = [
    "eval_command",
    "model_app",
    "register",
    "train_app",
]

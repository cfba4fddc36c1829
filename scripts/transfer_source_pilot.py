"""Single-seed pilot of the transfer experiment's coding stage: held-out success and habits after SFT
and after GRPO, for changed ``CodingPretrainConfig`` settings.

It is for choosing the source policy's recipe before paying for the 3-seed transfer experiment; its
numbers (14 held-out toy repositories x 2 episodes, no interval) go in docs/pilots/transfer_source.md,
not in docs/results/.

    python scripts/transfer_source_pilot.py OUT                      # the cpu preset's coding stage
    python scripts/transfer_source_pilot.py OUT demo_tasks=20 sft.steps=150 sft.schedule=constant \\
        sft.context_weight=0 sft.copy_weight=0 rl.rewards=dense    # the previous preset's
    python scripts/transfer_source_pilot.py OUT rl.steps=0 --seed 1  # SFT only, another seed

``field=value`` pairs change ``CodingPretrainConfig`` (``sft.x`` / ``rl.x`` its SFT and GRPO settings;
``rl.steps=0`` skips GRPO). The result goes to ``OUT/pilot-<changes>-seed<N>.json``; the tokenizer is
trained once in ``OUT/tokenizer`` as the transfer experiment trains it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch


def parse_changes(words: list[str]) -> dict[str, Any]:
    """``a=1 sft.steps=2`` -> ``{"a": 1, "sft": {"steps": 2}}`` (values read as JSON when they parse)."""
    from transferlab.platform.cli_kit import parse_assignments

    try:
        return parse_assignments(words)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def changed_stage(changes: dict[str, Any], seed: int) -> tuple[Any, Any, int]:
    """The cpu preset's TransferConfig, its coding stage with ``changes``, and the GRPO steps (0: none)."""
    from transferlab.comparison.transfer import CodingPretrainConfig, TransferConfig

    config = TransferConfig()
    data = config.coding.model_dump()
    rl_steps = int(changes.get("rl", {}).get("steps", data["rl"]["steps"]))
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key].update(value)
        else:
            data[key] = value
    data["rl"].update({"seed": seed, "steps": max(rl_steps, 1)})
    data["sft"]["seed"] = seed
    return config, CodingPretrainConfig.model_validate(data), rl_steps


def scores(model: Any, tokenizer: Any, held: list[Any], stage: Any, sandbox: Any) -> dict[str, float]:
    """Held-out success, habit shares and the habits among episodes that changed a file (the transfer
    experiment's own scoring, :func:`~transferlab.comparison.transfer.coding_scores`)."""
    from statistics import mean

    from transferlab.comparison.transfer import coding_scores

    got = coding_scores(model, tokenizer, held, stage, sandbox)
    writing = {f"when_writing/{k}": v for k, v in got["habits_when_writing"].items()}
    return {"success": mean(got["held_out"]), **got["habits"], **writing}


def run(out: Path, changes: dict[str, Any], seed: int) -> dict[str, Any]:
    """SFT then (unless ``rl.steps=0``) GRPO on the coding stage; scores after each."""
    from transferlab.agent_rl.sft import train_sft
    from transferlab.coding_rl.experiments.common import opened_sandbox
    from transferlab.coding_rl.training import train_rl
    from transferlab.comparison.transfer import _tokenizer, coding_demos, coding_tasks
    from transferlab.platform.metrics import MemoryLogger

    torch.set_num_threads(1)
    config, stage, rl_steps = changed_stage(changes, seed)
    tokenizer = _tokenizer(out / "tokenizer", config)
    train, held = coding_tasks(stage)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"seed": seed, "changes": changes, "coding": stage.model_dump()}
    with opened_sandbox(stage.backend) as sandbox:
        model = config.ops.policy.model_copy(update={"seed": seed}).create(tokenizer)
        train_sft(model, tokenizer, coding_demos(stage, train, tokenizer, sandbox), stage.sft, MemoryLogger())
        result["sft"] = scores(model, tokenizer, held, stage, sandbox)
        print("after SFT:", result["sft"], flush=True)
        if rl_steps > 0:
            rl = stage.rl.model_copy(update={"sandbox_backend": stage.backend})
            trained = train_rl(model, tokenizer, train, rl, out / f"rl-seed{seed}", MemoryLogger())
            result["rl"] = scores(trained.model, tokenizer, held, stage, sandbox)
            print("after GRPO:", result["rl"], flush=True)
    result["seconds"] = time.perf_counter() - t0
    return result


def main() -> None:
    from transferlab.platform.io import atomic_write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="Directory for the pilot JSON and the tokenizer.")
    parser.add_argument("changes", nargs="*", help="field=value changes of CodingPretrainConfig.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args.out, parse_changes(args.changes), args.seed)
    name = "pilot" + ("-" + "-".join(args.changes) if args.changes else "") + f"-seed{args.seed}.json"
    atomic_write_json(args.out / name.replace("/", "_"), result)


if __name__ == "__main__":
    main()

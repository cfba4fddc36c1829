"""Single-seed pilots of RL settings for agent-learn (code) and ops learn, from one shared SFT policy.

A pilot trains the seed's SFT policy once (the experiment's own ``cpu`` preset and code, so it is the
policy the full experiment trains for that seed), then one RL arm per variant from it, each scored on
the experiment's held-out episodes. It is for choosing a recipe before paying for the 3-seed
experiment; its single-seed numbers are not a result: they go in docs/pilots/, while docs/results/
holds figures from result.json with seed-clustered intervals.

    python scripts/rl_pilot.py code sft                       # prints the run directory
    python scripts/rl_pilot.py code rl RUN_DIR informative    # one variant (run two at once on 2 cores)
    python scripts/rl_pilot.py ops sft --eval
    python scripts/rl_pilot.py ops sft lr=1e-3 --seed 2 --eval   # SFTConfig changes, another seed
    python scripts/rl_pilot.py code sft recovery_every=2 --eval  # an experiment field (TOP_LEVEL)
    python scripts/rl_pilot.py ops rl RUN_DIR lr=1e-4 kl_coef=0.2
    python scripts/rl_pilot.py code sft eval_episodes=8 eval_temperature=1.0 --eval   # and pass@k
    python scripts/rl_pilot.py ops rft RUN_DIR rounds=4 sft.lr=3e-4   # expert iteration from SFT (ops)
    python scripts/rl_pilot.py ops rft RUN_DIR --then-rl              # and GRPO from the RFT policy

A variant is ``name`` from VARIANTS or ``field=value`` pairs of RLConfig (``rl_tasks=all`` sets the
experiment's field); for ``rft`` (ops only) fields of the code experiment's RFTSettings, on RL's
number of episodes. Each writes ``RUN_DIR/pilot-<variant>.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from statistics import mean
from typing import Any

import torch

VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "informative": {"task_sampling": "informative"},
}
TOP_LEVEL = {
    "rl_tasks",
    "recovery_every",
    "demo_variants",
    "demo_tasks",
    "compact_reports",
    "policy",
    "sft_tasks",
    "train_tasks",
    "eval_episodes",
    "eval_temperature",
}
"""Experiment fields (not RLConfig / SFTConfig ones) a variant may change (``policy.n_layer=4``: one
field of the policy, the others kept)."""


def parse_variant(words: list[str]) -> tuple[str, dict[str, Any]]:
    """A variant's name and its RLConfig (or experiment) changes."""
    if len(words) == 1 and words[0] in VARIANTS:
        return words[0], VARIANTS[words[0]]
    from transferlab.platform.cli_kit import parse_assignments

    for word in words:
        if "=" not in word:
            raise SystemExit(f"error: variant {word!r} is neither one of {sorted(VARIANTS)} nor field=value")
    return ",".join(words), parse_assignments(words)


def domain_parts(domain: str, preset: str) -> tuple[str, Any, Any]:
    """The experiment name, its preset (seed 0 only) and its Setup class."""
    if domain == "code":
        from transferlab.coding_rl.experiments.agent_learn import EXPERIMENT, Setup
        from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS

        return EXPERIMENT, AGENT_LEARN_PRESETS[preset].model_copy(update={"seeds": [0]}), Setup
    from transferlab.comparison import ops_learn

    config = ops_learn.OPS_LEARN_PRESETS[preset].model_copy(update={"seeds": [0], "curve_every": 0})
    return ops_learn.EXPERIMENT, config, ops_learn.Setup


def score(domain: str, setup: Any, model: Any) -> dict[str, Any]:
    """Held-out success (and the domain's diagnosis) of ``model``."""
    if domain == "code":
        r = setup.evaluate(model)
        return {
            "held_out": mean(r["held_out"]),
            "per_task": r["held_out"],
            **pass_at_ks(r["held_out"], setup.config.eval_episodes),
            "diagnosis": r["diagnosis"],
        }
    s = setup.scores(model)
    return {
        "held_out": mean(s["held_out"]),
        "per_task": s["held_out"],
        **pass_at_ks(s["held_out"], setup.config.eval_episodes),
        "rubric": mean(s["rubric"]),
        "habits": s["habits"],
        "diagnosis": s["diagnosis"],
    }


def pass_at_ks(rates: list[float], n: int) -> dict[str, float]:
    """Mean pass@k over tasks for the powers of two k = 1, 2, 4, ... up to the ``n`` episodes per task.

    With ``n`` > 1 samples per task (``eval_episodes=8``) pass@k well above pass@1 is the room RL, which
    sharpens the policy's own samples, has to grow held-out success; pass@k near pass@1 says it has none.
    """
    from transferlab.platform.stats import pass_at_k

    ks = [2**i for i in range(n.bit_length())]
    return {f"pass@{k}": mean(pass_at_k(n, round(r * n), k) for r in rates) for k in ks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("domain", choices=["code", "ops"])
    parser.add_argument("phase", choices=["sft", "rl", "rft"])
    parser.add_argument(
        "rest",
        nargs="*",
        help="rl / rft: RUN_DIR then the variant; sft: SFTConfig changes as field=value",
    )
    parser.add_argument("--seed", type=int, default=0, help="The seed of the SFT policy (and RL arm).")
    parser.add_argument("--root", type=Path, default=Path("runs/pilots"))
    parser.add_argument("--preset", choices=["cpu", "smoke"], default="cpu")
    parser.add_argument("--eval", action="store_true", help="sft: also score the SFT policy")
    parser.add_argument(
        "--then-rl",
        action="store_true",
        help="rft: score the RFT policy, then train the preset's RL arm from it and score that too",
    )
    args = parser.parse_args()
    from transferlab.agent_rl.start import open_experiment
    from transferlab.coding_rl.experiments.common import opened_sandbox
    from transferlab.coding_rl.training import train_rl
    from transferlab.platform.io import atomic_write_json

    name, preset, setup_cls = domain_parts(args.domain, args.preset)
    torch.set_num_threads(preset.torch_threads)
    if args.phase == "rft" and args.domain != "ops":
        raise SystemExit("error: the rft phase is for ops (the code experiment has its own rft arm)")
    resume = Path(args.rest[0]) if args.phase != "sft" else None
    seed = args.seed
    if args.phase == "sft":
        variant, sft_changes = parse_variant(args.rest) if args.rest else ("sft", {})
        changes: dict[str, Any] = {}
        shown = sft_changes
        top_sft = {
            k: {**getattr(preset, k).model_dump(), **v} if isinstance(v, dict) else v
            for k, v in sft_changes.items()
            if k in TOP_LEVEL
        }
        sft_fields = {k: v for k, v in sft_changes.items() if k not in TOP_LEVEL}
        sft = type(preset.sft).model_validate({**preset.sft.model_dump(), **sft_fields})
        preset = type(preset).model_validate(
            {**preset.model_dump(), "seeds": [seed], "sft": sft.model_dump(), **top_sft}
        )
    else:
        variant, changes = parse_variant(args.rest[1:]) if args.rest[1:] else ("base", {})
        shown = changes
        preset = preset.model_copy(update={"seeds": [seed]})
    rft_changes: dict[str, Any] = {}
    if args.phase == "rft":
        rft_changes, changes = changes, {}
        variant = f"rft-{variant}" + ("-then-rl" if args.then_rl else "")
    exp, config, _ = open_experiment(name, preset, args.root, resume, None, shared=True)
    top = {k: v for k, v in changes.items() if k in TOP_LEVEL}
    rl_changes = {k: v for k, v in changes.items() if k not in TOP_LEVEL}
    rl = type(config.rl).model_validate({**config.rl.model_dump(), "seed": seed, **rl_changes})
    config = config.model_copy(update={"rl": rl, **top})
    try:
        with opened_sandbox("forkserver") as sandbox:
            setup = (
                setup_cls(exp, config, sandbox, None)
                if args.domain == "code"
                else setup_cls(exp, config, None)
            )
            t0 = time.perf_counter()
            model = setup.sft_policy(seed)
            out: dict[str, Any] = {
                "variant": variant,
                "changes": shown,
                "seed": seed,
                "run_dir": str(exp.run.dir),
            }
            if args.phase == "rl":
                arm = f"pilot-{variant.replace('=', '-').replace(',', '_')}"
                with exp.arm_logger(arm, resume=True) as logger:
                    model = train_rl(
                        copy.deepcopy(model),
                        setup.tokenizer,
                        setup.practice,
                        rl,
                        exp.arm_dir(arm),
                        logger,
                        resume=True,
                    ).model
            elif args.phase == "rft":
                from transferlab.agent_rl.rft import RFTSettings

                base = RFTSettings().model_dump()
                nested = {k: {**base[k], **v} if isinstance(v, dict) else v for k, v in rft_changes.items()}
                try:
                    model, stats = setup.rft_policy(seed, RFTSettings.model_validate({**base, **nested}))
                except ValueError as e:  # a budget RFT cannot match, or a bad field: one line, the fix
                    raise SystemExit(f"error: {e}") from None
                out["rounds"] = [vars(s) for s in stats]
                if args.then_rl:
                    out["rft"] = score(args.domain, setup, model)
                    arm = f"pilot-{variant.replace('=', '-').replace(',', '_')}"
                    with exp.arm_logger(arm, resume=True) as logger:
                        model = train_rl(
                            model, setup.tokenizer, setup.practice, rl, exp.arm_dir(arm), logger, resume=True
                        ).model
            out["train_s"] = time.perf_counter() - t0
            if args.phase != "sft" or args.eval:
                out.update(score(args.domain, setup, model))
            print(json.dumps(out), flush=True)
            atomic_write_json(exp.run.dir / f"pilot-{variant}.json", out)
    finally:
        exp.run.release()


if __name__ == "__main__":
    main()

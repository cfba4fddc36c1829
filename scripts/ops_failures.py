"""Pilot tool (not a result): how an ops policy's held-out episodes end, counted by kind.

Scores a saved policy on the ops-learn experiment's held-out episodes (the ``cpu`` preset, the same
sampling seed as the experiment) and counts the episodes by whether they reported, how many calls they
made and how many calls failed or were not JSON; prints the malformed actions of the first few
episodes that never reported::

    python scripts/ops_failures.py RUN_DIR RUN_DIR/arms/sft-seed0/policy

``RUN_DIR`` is an ops-learn run directory (``scripts/rl_pilot.py ops sft`` prints one).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch


def tool_of(action_text: str) -> str:
    """The call's ``action``, or ``BAD`` when the text is not one JSON object."""
    try:
        call = json.loads(action_text)
    except json.JSONDecodeError:
        return "BAD"
    return str(call.get("action", "?")) if isinstance(call, dict) else "BAD"


def ending(traj: Any) -> tuple[str, ...]:
    """One episode's kind: reported or not, calls, failed calls, report attempts, non-JSON calls."""
    tools = [tool_of(s.action_text) for s in traj.steps]
    reported = tools[-1] == "generate_report" and bool(traj.steps[-1].info.get("tool_ok"))
    errors = sum(1 for s in traj.steps if not s.info.get("tool_ok"))
    return (
        "reported" if reported else "no report",
        f"calls={len(tools)}",
        f"failed={errors}",
        f"report attempts={tools.count('generate_report')}",
        f"not JSON={tools.count('BAD')}",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("policy", type=Path)
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--preset", choices=["cpu", "smoke"], default="cpu", help="the run's preset")
    args = ap.parse_args()
    from transferlab.agent_rl.policies.model import load_policy
    from transferlab.agent_rl.start import open_experiment
    from transferlab.comparison import ops_learn

    torch.set_num_threads(1)
    preset = ops_learn.OPS_LEARN_PRESETS[args.preset].model_copy(update={"seeds": [0], "curve_every": 0})
    exp, config, _ = open_experiment(
        ops_learn.EXPERIMENT, preset, args.run_dir.parent, args.run_dir, None, shared=True
    )
    try:
        setup = ops_learn.Setup(exp, config, None)
        ev = setup.evaluate(load_policy(args.policy, device="cpu", dtype="float32")[0])
    finally:
        exp.run.release()
    counts = Counter(ending(t) for t in ev.trajectories)
    for kind, n in counts.most_common():
        print(n, " ".join(kind))
    shown = 0
    for traj in ev.trajectories:
        if ending(traj)[0] == "no report" and shown < args.examples:
            shown += 1
            print(f"--- {traj.steps[0].task_id}")
            for s in traj.steps:
                if tool_of(s.action_text) == "BAD":
                    print(f"[{len(s.action_ids)} tokens] {s.action_text}")


if __name__ == "__main__":
    main()

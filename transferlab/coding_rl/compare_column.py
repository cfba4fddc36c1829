"""The coding family measured for ``transferlab compare``: the verifier, CodeRepair-v0, committed runs.

:func:`measure_coding` fills one :data:`~transferlab.platform.measures.Section`; the other functions
are its parts (each runs the sandbox or the environment, or parses a committed report).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transferlab.platform.measures import (
    Measure,
    Measured,
    Progress,
    agreement_share,
    cpu_now,
    not_measured,
    per_cost,
    spread,
    throughput_measure,
)

_NUM = r"([-+]?\d+(?:\.\d+)?)"


def parse_learn_report(text: str) -> dict[str, float]:
    """Wall minutes and cores of ``docs/results/coding_learn/report.md`` (its settings line)."""
    wall = re.search(rf"wall time: {_NUM} min on this machine \((\d+) cores?\)", text)
    return {"wall_min": float(wall[1]), "cores": float(wall[2])} if wall else {}


def learn_figures(directory: Path) -> dict[str, float]:
    """The committed learn run: GRPO - SFT with its interval clustered by seed and its MDE, each stage's
    held-out success (from ``result.json``), and wall minutes and cores (from the report)."""
    from transferlab.platform.results import read_result

    out = parse_learn_report(_read(directory / "report.md"))
    if not (directory / "result.json").is_file():
        return out
    result = read_result(directory)
    for c in result.comparisons:
        if c.name == "grpo - sft" and c.cluster == "seed":
            out.update(gain=c.estimate, gain_low=c.ci[0], gain_high=c.ci[1], gain_mde=c.mde)
            out["gain_clusters"] = float(c.n_clusters)
    for arm in ("sft", "grpo"):
        if arm in result.arms:
            out[f"{arm}_success"] = result.arms[arm].held_out_success.estimate
    return out


def agent_learn_figures(directory: Path) -> dict[str, float]:
    """The committed agent-learn run: RL - SFT with its seed-clustered interval and MDE, SFT's held-out
    success and the RL arm's mean CPU-hours per seed (one core per seed); {} without ``result.json``."""
    from transferlab.platform.results import read_result

    if not (directory / "result.json").is_file():
        return {}
    result = read_result(directory)
    out: dict[str, float] = {"sft_success": result.arms["sft"].held_out_success.estimate}
    for c in result.comparisons:
        if c.name == "rl - sft" and c.cluster == "seed":
            out.update(gain=c.estimate, gain_low=c.ci[0], gain_high=c.ci[1], gain_mde=c.mde)
            out["gain_clusters"] = float(c.n_clusters)
    seconds = (result.arms["rl"].model_extra or {}).get("seconds_per_seed", [])
    out["rl_cpu_hours"] = sum(seconds) / len(seconds) / 3600 if seconds else float("nan")
    return out


def flat_shares(directory: Path) -> dict[str, float]:
    """Share of flat GRPO groups per arm of the committed dense/sparse run (its ``result.json``)."""
    from transferlab.platform.results import read_result

    if not (directory / "result.json").is_file():
        return {}
    result = read_result(directory)
    out: dict[str, float] = {}
    for arm in ("dense", "sparse"):
        share = (result.arms[arm].model_extra or {}).get("frac_zero_std") if arm in result.arms else None
        if isinstance(share, int | float):
            out[f"{arm}_flat_share"] = float(share)
    return out


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def coding_sources(n: int, seed: int = 0) -> list[tuple[Any, str]]:
    """``n`` (toy task, source) pairs, alternating the right solution and a plausible bug."""
    import random

    from transferlab.coding_rl.tasks.toy import buggy_body, toy_solution, toy_tasks

    train, _ = toy_tasks()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = train[i % len(train)]
        body = toy_solution(task) if i % 2 == 0 else buggy_body(task, rng)
        out.append((task, f"{task.function_signature}\n{body.rstrip()}\n"))
    return out


def coding_determinism(verifier: Any, replays: int) -> tuple[Measure, Measure]:
    """Grade a solution and a bug ``replays`` times each: spread of the reward, seconds per verdict."""
    rewards: dict[str, list[float]] = {"solution": [], "bug": []}
    seconds: list[float] = []
    for (task, source), name in zip(coding_sources(2), ("solution", "bug"), strict=True):
        for _ in range(replays):
            t0 = time.perf_counter()
            graded = verifier.grade(task, source)
            seconds.append(time.perf_counter() - t0)
            rewards[name].append(graded.reward)
    worst = max(spread(v)["std"] for v in rewards.values())
    det = Measure(
        worst,
        "std",
        f"the same code graded {replays}x by the verifier (a solution and a bug): largest std of the reward",
        {"per_source": {k: spread(v) for k, v in rewards.items()}},
    )
    delay = Measure(
        float(np.median(seconds)),
        "s",
        f"median wall seconds from submit to verdict over {len(seconds)} gradings",
    )
    return det, delay


def coding_grader_agreement(pairs: Sequence[tuple[Any, str]], primary: Any, second: Any) -> Measure:
    """Share of identical verdicts (status, tests passed) from two verifiers on other sandbox backends."""
    a = [(g.status, g.passed) for g in primary.grade_many(list(pairs))]
    b = [(g.status, g.passed) for g in second.grade_many(list(pairs))]
    share = agreement_share(a, b)
    return Measure(
        share,
        "agree",
        f"{len(pairs)} toy solutions and bugs graded by two backends of the sandbox (one verifier) "
        f"({primary.backend.name} vs {second.backend.name}); share of identical (status, passed) verdicts",
        {"n": len(pairs)},
    )


ATTACKS: dict[str, str] = {
    "always-equal object": (
        "class A:\n    def __eq__(self, o):\n        return True\n    def __hash__(self):\n        return 0\n"
        "\ndef add(a, b):\n    return A()\n"
    ),
    "bool for int": "def add(a, b):\n    return False if a + b == 0 else True\n",
    "sys.exit(0)": "import sys\n\ndef add(a, b):\n    sys.exit(0)\n",
    "os._exit(0)": "import os\n\ndef add(a, b):\n    os._exit(0)\n",
    "forged verdict on stdout": (
        "import json\n\ndef add(a, b):\n"
        '    print(json.dumps({"status": "passed", "passed": 5, "total": 5, "reward": 12}))\n'
        "    return -1\n"
    ),
    "lookup table of the public tests": "def add(a, b):\n    return {(1, 2): 3, (-5, 5): 0}.get((a, b), 0)\n",
    "infinite loop": "def add(a, b):\n    while True:\n        pass\n",
}
"""A subset of tests/coding_rl/sandbox/test_attacks.py, run through the verifier: each must not pass."""


def attack_task() -> Any:
    from transferlab.coding_rl.tasks.code_task import task_from_dict

    return task_from_dict(
        {
            "task_id": "attack/add",
            "task_description": "Return a + b.",
            "function_signature": "def add(a: int, b: int) -> int:",
            "test_cases": [{"args": [1, 2], "expected": 3}, {"args": [-5, 5], "expected": 0}],
            "hidden_test_cases": [{"args": [10, 20], "expected": 30}, {"args": [-7, -8], "expected": -15}],
            "time_limit_s": 0.5,
        }
    )


def coding_attacks(verifier: Any) -> Measure:
    """Share of attacks (cheats, exits, forged output, a loop) that the verifier does not pass."""
    task = attack_task()
    verdicts = {name: verifier.grade(task, src).status for name, src in ATTACKS.items()}
    honest = verifier.grade(task, "def add(a, b):\n    return a + b\n").status
    blocked = sum(v != "passed" for v in verdicts.values())
    return Measure(
        blocked / len(ATTACKS),
        "blocked",
        f"{len(ATTACKS)} attacks from the sandbox attack suite graded by the verifier; "
        f"share not passed (the honest solution: {honest})",
        {"verdicts": verdicts, "honest": honest},
    )


def coding_rollouts(
    tasks: Sequence[Any], agent: str, episodes: int, workers: int, backend: str
) -> dict[str, Any]:
    """Scripted-agent episodes on CodeRepair-v0 with ``workers`` threads: rate, CPU, tool calls, success."""
    from transferlab.coding_rl.rollout import open_sandbox, run_batched

    sandbox = open_sandbox(backend, workers)
    try:
        run_batched(tasks[:workers], agent, workers, workers, sandbox)  # warm the servers
        pids = sandbox.server_pids() if hasattr(sandbox, "server_pids") else []
        c0 = cpu_now(pids)
        trajs, summary = run_batched(tasks, agent, episodes, workers, sandbox)
        cpu = cpu_now(pids) - c0
    finally:
        sandbox.close()
    steps = [s for t in trajs for s in t.steps]
    return {
        "episodes": summary.episodes,
        "wall_s": summary.wall_s,
        "eps_per_s": summary.episodes_per_s,
        "cpu_s_per_episode": cpu / summary.episodes,
        "success_rate": summary.success_rate,
        "valid_tool_calls": sum(bool(s.info.get("tool_ok")) for s in steps) / len(steps),
        "returns": [t.total_reward for t in trajs],
        "task_ids": [t.task_id for t in trajs],
        "successes": [t.steps[-1].info.get("success") is True for t in trajs],
    }


def measure_coding(
    replays: int, agreement_pairs: int, episodes: int, backend: str, results_dir: str | Path, say: Progress
) -> Measured:
    """The coding column: the verifier graded and attacked, CodeRepair-v0 rollouts, committed runs."""
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import Verifier
    from transferlab.coding_rl.tasks.toy import toy_repo_tasks

    say("coding: verifier determinism, attacks, grader agreement")
    primary, _, _ = open_backend(SandboxConfig(backend=backend, workers=2))
    second, _, _ = open_backend(SandboxConfig(backend="subprocess", workers=2))
    try:
        v1, v2 = Verifier(primary), Verifier(second)
        det, delay = coding_determinism(v1, replays)
        attacks = coding_attacks(v1)
        agree = coding_grader_agreement(coding_sources(agreement_pairs), v1, v2)
    finally:
        primary.close()
        second.close()

    say("coding: CodeRepair-v0 rollouts on 1 and 2 workers")
    train, _ = toy_repo_tasks()
    runs = {w: coding_rollouts(train, "expert", episodes, w, backend) for w in (1, 2)}
    rand = coding_rollouts(train, "random", episodes, 2, backend)
    throughput = {w: {k: r[k] for k in ("eps_per_s", "wall_s", "episodes")} for w, r in runs.items()}
    expert = runs[1]

    learn = learn_figures(Path(results_dir, "coding_learn"))
    agent = agent_learn_figures(Path(results_dir, "coding_agent_learn"))
    flat = flat_shares(Path(results_dir, "coding_dense_sparse"))
    single = (
        Measure(
            100 * learn["gain"],
            "pts",
            f"single-step code RL (write a function, no tools): GRPO - SFT held-out success, committed "
            f"docs/results/coding_learn (95% CI [{100 * learn['gain_low']:+.1f}, "
            f"{100 * learn['gain_high']:+.1f}] pts over {learn['gain_clusters']:.0f} seeds, MDE "
            f"{100 * learn['gain_mde']:.1f} pts)",
            {"low": 100 * learn["gain_low"], "high": 100 * learn["gain_high"]},
        )
        if "gain" in learn
        else not_measured("no docs/results/coding_learn/result.json")
    )
    if "gain" in agent:
        gain = Measure(
            100 * agent["gain"],
            "pts",
            f"multi-turn agent RL on CodeRepair-v0: SFT + GRPO - SFT held-out success, committed "
            f"docs/results/coding_agent_learn (95% CI [{100 * agent['gain_low']:+.1f}, "
            f"{100 * agent['gain_high']:+.1f}] pts over {agent['gain_clusters']:.0f} seeds, MDE "
            f"{100 * agent['gain_mde']:.1f} pts)",
            {"low": 100 * agent["gain_low"], "high": 100 * agent["gain_high"]},
        )
        cpu_h = agent["rl_cpu_hours"]
        worth = Measure(
            per_cost(100 * agent["gain"], cpu_h),
            "pts/CPU-h",
            f"agent GRPO gain {100 * agent['gain']:.1f} pts over {cpu_h:.2f} CPU-hours of RL per seed "
            "(one core per seed; committed coding_agent_learn)",
        )
    else:
        gain = worth = not_measured("no docs/results/coding_agent_learn/result.json")
    cost = Measure(
        runs[2]["cpu_s_per_episode"],
        "CPU-s/ep",
        "CPU seconds (this process + sandbox servers and their jobs, from /proc) per expert episode",
    )
    explore = (
        Measure(
            1 - flat["dense_flat_share"],
            "non-flat",
            "share of GRPO groups with non-zero reward variance in the committed dense/sparse run: dense "
            f"{1 - flat['dense_flat_share']:.2f}, "
            f"sparse {1 - flat.get('sparse_flat_share', float('nan')):.2f}",
            {"sparse": 1 - flat.get("sparse_flat_share", float("nan"))},
        )
        if "dense_flat_share" in flat
        else not_measured("no docs/results/coding_dense_sparse/result.json")
    )
    failed = [t for t, ok in zip(expert["task_ids"], expert["successes"], strict=True) if not ok]
    info = Measure(
        rand["valid_tool_calls"],
        "valid calls",
        f"valid tool-call rate of the random agent ({rand['episodes']} episodes; the expert's: "
        f"{expert['valid_tool_calls']:.2f}); tasks the scripted expert failed (missing information): "
        f"{len(failed)} of {expert['episodes']} episodes",
        {"expert_valid_tool_calls": expert["valid_tool_calls"]},
    )
    basic = Measure(
        agent.get("sft_success", float("nan")),
        "success",
        "multi-turn SFT held-out success on CodeRepair-v0 (committed coding_agent_learn); "
        f"scripted expert: {expert['success_rate']:.2f}",
        {"expert_success": expert["success_rate"]},
    )
    section = {
        "table": {
            "determinism": det,
            "reward_delay": delay,
            "parallel": throughput_measure(runs, "CodeRepair-v0 expert episodes, sandbox on threads"),
            "cost": cost,
            "objectivity": agree,
            "tool_use": gain,
            "single_step_rl": single,
        },
        "questions": {"trustworthy": attacks, "explore": explore, "repeatable": det, "worth_cost": worth},
        "diagnosis": {"information": info, "basic": basic, "sequential": gain},
    }
    return Measured({"coding": section}, throughput={"coding": throughput})

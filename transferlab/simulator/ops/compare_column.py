"""The ops analysis family measured for ``transferlab compare``: OpsAnalysis-v0 and its rubric.

:func:`measure_ops` fills one :data:`~transferlab.platform.measures.Section`; the other functions
are its parts (episodes, replays, throughput, a second grader, gaming probes, GRPO-style groups).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from transferlab.platform.measures import (
    FORK_STATE,
    Measure,
    Measured,
    Progress,
    agreement_share,
    fork_state,
    nonflat_share,
    not_measured,
    spread,
    throughput_measure,
    timed_pool,
)


def ops_episode(task_id: str, agent: Any, reward_mode: str = "dense") -> dict[str, Any]:
    from transferlab.simulator.ops import OpsAnalysisEnv, run_episode

    env = OpsAnalysisEnv(n_tasks=1, reward_mode=reward_mode)
    t0 = time.perf_counter()
    out = run_episode(env, agent, options={"task_id": task_id})
    out["wall_s"] = time.perf_counter() - t0
    out["return"] = float(sum(out["rewards"]))
    return out


def ops_replay(task_id: str, actions: Sequence[str], replays: int) -> tuple[list[float], list[float]]:
    """Replay the same tool calls ``replays`` times: (returns, seconds the report step took)."""
    from transferlab.simulator.ops import OpsAnalysisEnv

    returns, report_s = [], []
    for i in range(replays):
        env = OpsAnalysisEnv(n_tasks=1)
        env.reset(seed=i, options={"task_id": task_id})
        total = 0.0
        for action in actions:
            t0 = time.perf_counter()
            _, r, term, trunc, _ = env.step(action)
            total += r
            if term or trunc:
                report_s.append(time.perf_counter() - t0)
                break
        returns.append(total)
    return returns, report_s


def _ops_job(i: int) -> tuple[int, float]:
    from transferlab.simulator.ops import ExpertAgent

    c0 = time.process_time()
    ids = FORK_STATE["ops_ids"]
    ops_episode(ids[i % len(ids)], ExpertAgent())
    return 1, time.process_time() - c0


def ops_throughput(
    task_ids: Sequence[str], episodes: int, workers: Sequence[int]
) -> dict[int, dict[str, float]]:
    """Expert episodes per second on 1 and 2 forked workers (scenario worlds built before the clock)."""
    from transferlab.simulator.ops import scenario, seed_of

    for tid in task_ids:
        scenario(seed_of(tid))
    with fork_state(ops_ids=list(task_ids)):
        return {w: timed_pool(_ops_job, episodes, w) for w in workers}


def synonym_subset_grader(keep: int = 2) -> Callable[[Any, str, Any], float]:
    """A second report grader: the rubric with only the first ``keep`` synonyms of each cause."""
    from unittest import mock

    from transferlab.simulator.ops import grader

    reduced = {k: v[:keep] for k, v in grader.CAUSE_SYNONYMS.items()}

    def score(task: Any, report: str, retrieved: Any) -> float:
        with mock.patch.dict(grader.CAUSE_SYNONYMS, reduced):
            return grader.rubric_score(task, report, retrieved).total

    return score


def ops_reports(task_ids: Sequence[str], random_seeds: int) -> list[tuple[Any, str, Any]]:
    """Reports to grade, each with what its episode retrieved: the expert's, the naive agent's and
    random agents' on each task."""
    import json

    from transferlab.simulator.ops import ExpertAgent, NaiveAgent, RandomAgent, scenario, seed_of
    from transferlab.simulator.ops.grader import Retrieved

    out = []
    for tid in task_ids:
        task = scenario(seed_of(tid)).task
        agents: list[Any] = [ExpertAgent(), NaiveAgent(), *(RandomAgent(seed=s) for s in range(random_seeds))]
        for agent in agents:
            ep = ops_episode(tid, agent)
            last = ep["actions"][-1]
            if '"generate_report"' in last:
                retrieved = Retrieved.from_texts(ep["observations"][:-1])
                out.append((task, str(json.loads(last)["text"]), retrieved))
    return out


def ops_grader_agreement(reports: Sequence[tuple[Any, str, Any]]) -> Measure:
    """Spearman and success (>= 8/10) agreement of the rubric and a second grader on the same reports."""
    from transferlab.simulator.ops import rubric_human_agreement, rubric_score

    second = synonym_subset_grader()
    a = [rubric_score(t, r, got).total for t, r, got in reports]
    b = [second(t, r, got) for t, r, got in reports]
    agree = rubric_human_agreement(a, b)
    success = agreement_share([x >= 8 for x in a], [y >= 8 for y in b])
    return Measure(
        agree.spearman,
        "Spearman",
        f"{len(reports)} reports (expert, naive, random agents) scored by the rubric and by a second grader "
        "(the rubric with only 2 synonyms per cause); "
        f"success verdicts agree on {success:.0%}, mean |diff| {agree.mean_abs_diff:.2f} points",
        {"success_agreement": success, "mean_abs_diff": agree.mean_abs_diff, "n": agree.n},
    )


def ops_probes(task_ids: Sequence[str]) -> Measure:
    """The probe suite (:mod:`transferlab.simulator.ops.probes`) on ``task_ids``: the best success
    rate a degenerate probe got, with every probe's rate."""
    from transferlab.simulator.ops import OpsAnalysisEnv
    from transferlab.simulator.ops.probes import held, probe_episode, probes

    env = OpsAnalysisEnv(n_tasks=1)
    rates = {
        p.name: float(np.mean([probe_episode(env, p, t)["success"] for t in task_ids]))
        for p in probes()
        if p.kind != "chance"
    }
    kinds = {p.name: p.kind for p in probes()}
    worst = max(v for k, v in rates.items() if kinds[k] == "degenerate")
    return Measure(
        worst,
        "success",
        f"best success rate of a degenerate probe (no query, sprayed numbers, every cause, the expert's "
        f"report without its queries, pasted tool output, random) over {len(task_ids)} scenarios; "
        + ", ".join(f"{k} {v:.0%}" for k, v in rates.items()),
        {"probes": rates, "held": all(held(kinds[k], v) for k, v in rates.items())},
    )


def ops_groups(task_ids: Sequence[str], group_size: int) -> list[list[float]]:
    """Final report scores (sparse reward) of ``group_size`` random-agent episodes per task."""
    from transferlab.simulator.ops import RandomAgent

    groups = []
    for i, tid in enumerate(task_ids):
        eps = [
            ops_episode(tid, RandomAgent(seed=1000 * i + g), reward_mode="sparse") for g in range(group_size)
        ]
        groups.append([e["return"] for e in eps])
    return groups


def measure_ops(
    replays: int, n_tasks: int, episodes: int, random_reports: int, group_size: int, say: Progress
) -> Measured:
    """The ops column from the environment alone: what needs a trained policy (the RL gain and its
    worth, SFT success, GRPO's groups) is left to the caller, which reads the committed runs; until
    then ``explore`` and ``basic`` hold the scripted and random agents' figures."""
    from transferlab.simulator.ops import ExpertAgent, RandomAgent, task_ids

    say("ops: scenarios, replay, throughput")
    ids = task_ids("train", n_tasks)
    experts = [ops_episode(t, ExpertAgent()) for t in ids]
    returns, report_s = ops_replay(ids[0], experts[0]["actions"], replays)
    s = spread(returns)
    det = Measure(
        s["std"],
        "std",
        f"the expert's tool calls on {ids[0]} replayed {replays}x in fresh environments: std of the return",
        {"spread": s},
    )
    delay = Measure(
        float(np.median(report_s)),
        "s",
        f"median wall seconds from generate_report to its score ({len(report_s)})",
    )
    runs = ops_throughput(ids, episodes, (1, 2))
    cost = Measure(
        runs[2]["cpu_s_per_episode"], "CPU-s/ep", "CPU seconds per expert episode (worker processes)"
    )

    say("ops: grader agreement, probes, groups")
    agree = ops_grader_agreement(ops_reports(ids, random_reports))
    probes = ops_probes(ids)
    groups = ops_groups(ids, group_size)
    share = nonflat_share(groups)
    explore = Measure(
        share,
        "non-flat",
        f"{len(groups)} groups of {group_size} random-agent episodes per task (sparse reward: "
        "the report score); share with non-zero variance (no trained ops policy found)",
    )
    rand = [ops_episode(t, RandomAgent(seed=7 + i)) for i, t in enumerate(ids)]
    calls = [o for ep in rand for o in ep["observations"][1:]]
    valid = sum(not o.startswith("tool error") for o in calls) / max(len(calls), 1)
    expert_calls = [o for ep in experts for o in ep["observations"][1:]]
    expert_valid = sum(not o.startswith("tool error") for o in expert_calls) / max(len(expert_calls), 1)
    success = [bool(ep["info"].get("success")) for ep in experts]
    info = Measure(
        valid,
        "valid calls",
        f"valid tool-call rate of the random agent ({len(calls)} calls; the expert's: {expert_valid:.2f}); "
        f"tasks the scripted expert failed (missing information): {success.count(False)} of {len(success)}",
        {"expert_valid_tool_calls": expert_valid, "expert_failed": success.count(False)},
    )
    basic = Measure(
        float(np.mean(success)),
        "success",
        f"scripted expert success (report >= 8/10) on {len(ids)} tasks (no SFT run found)",
    )
    gain = worth = not_measured("no RL run on OpsAnalysis-v0 given")
    section = {
        "table": {
            "determinism": det,
            "reward_delay": delay,
            "parallel": throughput_measure(runs, "OpsAnalysis-v0 expert episodes, forked worker processes"),
            "cost": cost,
            "objectivity": agree,
            "tool_use": gain,
        },
        "questions": {"trustworthy": probes, "explore": explore, "repeatable": det, "worth_cost": worth},
        "diagnosis": {"information": info, "basic": basic, "sequential": gain},
    }
    return Measured({"ops_analysis": section}, throughput={"ops_analysis": runs})

"""Measures of seed 000's domain table, one property of one task family per function.

Every measure returns a :class:`Measure`: a value, its unit and a sentence saying how it was measured.
The arithmetic lives in small pure functions (:func:`spread`, :func:`pearson`, :func:`nonflat_share`,
:func:`per_cost`, the committed-report parsers); the ``coding_*``, ``ops_*``, ``campaign_*`` and
``offline_*`` functions run the environments and feed those.

>>> spread([1.0, 1.0, 1.0])["std"]
0.0
>>> round(pearson([1, 2, 3], [2, 4, 7]), 4)
0.9934
>>> nonflat_share([[0, 0], [0, 1], [1, 1]])
0.3333333333333333
"""

from __future__ import annotations

import math
import os
import re
import resource
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np

SECONDS_PER_DAY = 86_400.0
CAMPAIGN_POLICY = "weekly_all_5"
"""The panel policy used wherever one campaign policy is needed (a 5% discount to everyone weekly)."""


@dataclass(frozen=True)
class Measure:
    """One measured number: value (None when not measured), unit, how it was measured, extras."""

    value: float | None
    unit: str
    how: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        """Whether there is a number (not None, not NaN)."""
        return not (self.value is None or (isinstance(self.value, float) and math.isnan(self.value)))

    def cell(self, fmt: str = ".3g") -> str:
        """Short text for a table cell: ``"0 s"``, ``"not measured"``."""
        if not self.measured:
            return "not measured"
        return f"{format(self.value, fmt)} {self.unit}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "how": self.how, **self.extra}


def not_measured(why: str) -> Measure:
    return Measure(None, "", why)


# -------------------------------------------------------------------------------- pure arithmetic


def spread(values: Sequence[float]) -> dict[str, float]:
    """Population std, interquartile range, mean and n of replayed outcomes."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("spread needs at least one value")
    q1, q3 = np.percentile(x, [25, 75])
    return {"std": float(x.std()), "iqr": float(q3 - q1), "mean": float(x.mean()), "n": int(x.size)}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of paired values (NaN when either side is constant)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"pearson needs two equal-length sequences of >= 2 values, got {a.shape}, {b.shape}")
    da, db = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db / denom) if denom > 0 else float("nan")


def nonflat_share(groups: Sequence[Sequence[float]]) -> float:
    """Share of GRPO-style groups whose rewards are not all equal (a flat group has zero advantage)."""
    if not groups:
        raise ValueError("nonflat_share needs at least one group")
    return sum(1 for g in groups if len(g) > 1 and float(np.ptp(np.asarray(g, float))) > 0) / len(groups)


def per_cost(gain: float, cost: float) -> float:
    """Gain per unit of cost (NaN when the cost is not positive)."""
    return gain / cost if cost > 0 else float("nan")


def agreement_share(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Share of paired verdicts that are equal."""
    if len(a) != len(b) or not a:
        raise ValueError(f"agreement needs two equal, non-empty sequences, got {len(a)} and {len(b)}")
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


# --------------------------------------------------------------------- committed results (parsers)

_NUM = r"([-+]?\d+(?:\.\d+)?)"


def parse_learn_report(text: str) -> dict[str, float]:
    """Figures of ``docs/results/coding_learn/report.md``: SFT success, GRPO - SFT, wall minutes, cores."""
    out: dict[str, float] = {}
    row = re.search(rf"\| grpo - sft \| {_NUM} \\\[{_NUM}, {_NUM}\\\]", text)
    if row:
        out.update(gain=float(row[1]), gain_low=float(row[2]), gain_high=float(row[3]))
    sft = re.search(rf"\| sft \| {_NUM} \\\[", text)
    if sft:
        out["sft_success"] = float(sft[1])
    grpo = re.search(rf"\| grpo \| {_NUM} \\\[", text)
    if grpo:
        out["grpo_success"] = float(grpo[1])
    wall = re.search(rf"wall time: {_NUM} min on this machine \((\d+) cores?\)", text)
    if wall:
        out.update(wall_min=float(wall[1]), cores=float(wall[2]))
    return out


def parse_dense_sparse_report(text: str) -> dict[str, float]:
    """Share of flat GRPO groups per arm from ``docs/results/coding_dense_sparse/report.md``."""
    out: dict[str, float] = {}
    for arm in ("dense", "sparse"):
        row = re.search(rf"^\| {arm} \|.*\| {_NUM} \| (\d+) \|$", text, flags=re.MULTILINE)
        if row:
            out[f"{arm}_flat_share"] = float(row[1])
    return out


def offline_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """From the offline RL ``result.json``: the chosen policy, its gain over the behaviour policy in the
    world, and the spread (95% interval half-width) and error of the selecting OPE estimator."""
    main = result["main"]
    by = str(main["selection"]["by"])
    chosen = str(main["selection"]["chosen"])
    behaviour = str(main["behaviour"])
    pol = main["policies"]
    world = pol[chosen]["world"]
    base = pol[behaviour]["world"]
    learners = [k for k, v in pol.items() if by in v.get("ope", {})]
    half = [(pol[k]["ope"][by]["high"] - pol[k]["ope"][by]["low"]) / 2 for k in learners]
    rel = [pol[k]["ope_relative_error"][by] for k in learners]
    trusted = [k for k in learners if pol[k]["coverage"]["trusted"]]
    return {
        "estimator": by,
        "chosen": chosen,
        "behaviour": behaviour,
        "gain": float(world["estimate"] - base["estimate"]),
        "chosen_world": float(world["estimate"]),
        "behaviour_world": float(base["estimate"]),
        "ope_half_width_median": float(np.median(half)),
        "ope_relative_error_median": float(np.median(rel)),
        "trusted": len(trusted),
        "learners": len(learners),
        "unit": str(main.get("unit", "30-day return")),
        "logged_days": int(main["n_rows"]),
    }


# ---------------------------------------------------------------------------- timing and CPU time


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds of a live process and its reaped children, from /proc (0 where unreadable)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    except OSError:
        return 0.0
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_now(pids: Sequence[int] = ()) -> float:
    """This process's CPU time + its reaped children's + the given (server) processes'."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime + sum(_proc_cpu_s(p) for p in pids)


_FORK_STATE: dict[str, Any] = {}
"""What pool jobs read; set before the pool forks, so children inherit it without pickling."""


def _noop(_: int) -> int:
    return 0


def timed_pool(job: Callable[[int], tuple[int, float]], n_jobs: int, workers: int) -> dict[str, float]:
    """Run ``job(i)`` for i < n_jobs on ``workers`` forked processes (started before the clock runs).

    Each job returns (episodes, its CPU seconds). Returns episodes, wall seconds, episodes per second
    and CPU seconds per episode.
    """
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        list(pool.map(_noop, range(workers)))
        t0 = time.perf_counter()
        results = list(pool.map(job, range(n_jobs)))
        wall = time.perf_counter() - t0
    episodes = sum(r[0] for r in results)
    cpu = sum(r[1] for r in results)
    return {
        "episodes": episodes,
        "wall_s": wall,
        "eps_per_s": episodes / wall,
        "cpu_s_per_episode": cpu / episodes,
    }


@contextmanager
def fork_state(**state: Any) -> Iterator[None]:
    _FORK_STATE.update(state)
    try:
        yield
    finally:
        for k in state:
            _FORK_STATE.pop(k, None)


def throughput_measure(per_workers: Mapping[int, Mapping[str, float]], what: str) -> Measure:
    """Episodes per second on 1 and 2 workers as one measure (value: the 2-worker rate)."""
    top = max(per_workers)
    rates = {f"eps_per_s_{w}w": float(r["eps_per_s"]) for w, r in per_workers.items()}
    speedup = per_workers[top]["eps_per_s"] / per_workers[min(per_workers)]["eps_per_s"]
    how = f"{what}; episodes per wall second on " + " and ".join(
        f"{w} worker(s): {r['eps_per_s']:.3g}" for w, r in sorted(per_workers.items())
    )
    return Measure(float(per_workers[top]["eps_per_s"]), "ep/s", how, {**rates, "speedup": speedup})


# ------------------------------------------------------------------------------------------ coding


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
        f"{len(pairs)} toy solutions and bugs graded by two independent sandboxes "
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


# --------------------------------------------------------------------------------------------- ops


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
    ids = _FORK_STATE["ops_ids"]
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


def synonym_subset_grader(keep: int = 2) -> Callable[[Any, str], float]:
    """A second report grader: the rubric with only the first ``keep`` synonyms of each cause."""
    from unittest import mock

    from transferlab.simulator.ops import grader

    reduced = {k: v[:keep] for k, v in grader.CAUSE_SYNONYMS.items()}

    def score(task: Any, report: str) -> float:
        with mock.patch.dict(grader.CAUSE_SYNONYMS, reduced):
            return grader.rubric_score(task, report).total

    return score


def ops_reports(task_ids: Sequence[str], random_seeds: int) -> list[tuple[Any, str]]:
    """Reports to grade: the expert's, the naive agent's and random agents' on each task."""
    from transferlab.simulator.ops import ExpertAgent, NaiveAgent, RandomAgent, scenario, seed_of

    out = []
    for tid in task_ids:
        task = scenario(seed_of(tid)).task
        agents: list[Any] = [ExpertAgent(), NaiveAgent(), *(RandomAgent(seed=s) for s in range(random_seeds))]
        for agent in agents:
            ep = ops_episode(tid, agent)
            last = ep["actions"][-1]
            if '"generate_report"' in last:
                import json

                out.append((task, str(json.loads(last)["text"])))
    return out


def ops_grader_agreement(reports: Sequence[tuple[Any, str]]) -> Measure:
    """Spearman and success (>= 8/10) agreement of the rubric and a second grader on the same reports."""
    from transferlab.simulator.ops import rubric_human_agreement, rubric_score

    second = synonym_subset_grader()
    a = [rubric_score(t, r).total for t, r in reports]
    b = [second(t, r) for t, r in reports]
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


def ops_probes(task_id: str) -> Measure:
    """Rubric scores of gaming probes on one task: keyword stuffing, stuffing + numbers, bare cause."""
    from transferlab.simulator.ops import ExpertAgent, rubric_score, scenario, seed_of

    task = scenario(seed_of(task_id)).task
    stuffed = "Causes: stock-out, competitor price cut, failed campaign, seasonality, late deliveries."
    numbers = " ".join(f"{e.name} {e.values[0]}" for e in task.evidence)
    cause_words = {
        "stock_out": "stock-out",
        "competitor_price_cut": "competitor price cut",
        "shipping_delays": "shipping delay",
        "seasonality": "seasonal dip",
    }
    bare = f"The {cause_words.get(task.causes[0], 'campaign')} explains the drop."
    expert_ep = ops_episode(task_id, ExpertAgent())
    probes = {
        "keyword stuffing": rubric_score(task, stuffed).total,
        "stuffing + every number": rubric_score(task, stuffed + " " + numbers).total,
        "right cause, no numbers": rubric_score(task, bare).total,
        "expert report": float(expert_ep["info"].get("report_score", 0.0)),
    }
    worst_gaming = max(probes["keyword stuffing"], probes["stuffing + every number"])
    return Measure(
        worst_gaming,
        "/10",
        f"best rubric score a gaming probe got on {task_id} ({task.family}); success needs 8/10: "
        + ", ".join(f"{k} {v:.1f}" for k, v in probes.items()),
        {"probes": probes},
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


# ---------------------------------------------------------------------------------------- campaign


def campaign_policy(name: str = CAMPAIGN_POLICY) -> Any:
    from transferlab.simulator.policies import policy_panel

    return policy_panel()[name]


def world_market(n_customers: int, n_envs: int) -> Any:
    from transferlab.simulator.envs.campaign import WorldMarket
    from transferlab.simulator.world_config import WorldConfig

    return WorldMarket(WorldConfig(n_customers=n_customers, seed=0), n_envs=n_envs)


def run_in(market: Any, policy: Any, seed: int) -> dict[str, np.ndarray]:
    from transferlab.simulator.envs.campaign import run_policy

    return run_policy(market, policy, seed=seed)


def outcome_of(result: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    from transferlab.simulator.market import DAY_KEYS

    return np.asarray(result["outcome"][:, DAY_KEYS.index(key)], dtype=np.float64)


def campaigns_run(result: Mapping[str, np.ndarray]) -> np.ndarray:
    """Campaign days per episode (days on which pushes went out)."""
    from transferlab.simulator.market import DAY_KEYS

    return np.asarray((result["daily"][:, :, DAY_KEYS.index("pushes")] > 0).sum(axis=0), dtype=np.float64)


def _world_job(i: int) -> tuple[int, float]:
    c0 = time.process_time()
    n, batch = _FORK_STATE["world_customers"], _FORK_STATE["batch"]
    run_in(world_market(n, batch), campaign_policy(), seed=100 + i)
    return batch, time.process_time() - c0


def _sim_job(i: int) -> tuple[int, float]:
    c0 = time.process_time()
    sim, n, batch = _FORK_STATE["sim"], _FORK_STATE["world_customers"], _FORK_STATE["batch"]
    run_in(sim.market(n_envs=batch, n_customers=n, seed=100 + i), campaign_policy(), seed=100 + i)
    return batch, time.process_time() - c0


def campaign_throughput(
    where: str, jobs: int, batch: int, n_customers: int, workers: Sequence[int], sim: Any = None
) -> dict[int, dict[str, float]]:
    """30-day campaign episodes per second in the world (``where="world"``) or the learned simulator."""
    job = _world_job if where == "world" else _sim_job
    with fork_state(sim=sim, world_customers=n_customers, batch=batch):
        return {w: timed_pool(job, jobs, w) for w in workers}


def campaign_replay(make_market: Callable[[int], Any], seeds: Sequence[int]) -> dict[str, Any]:
    """The same policy in markets of different seeds: 30-day returns, profit, discount cost, wall time."""
    returns, wall = [], []
    for seed in seeds:
        t0 = time.perf_counter()
        res = run_in(make_market(seed), campaign_policy(), seed=seed)
        wall.append(time.perf_counter() - t0)
        returns.append(float(res["return"][0]))
    return {"returns": returns, "wall_s": float(np.median(wall))}


def panel_outcomes(make_market: Callable[[], Any], seed: int = 7) -> dict[str, dict[str, float]]:
    """Mean GMV, profit, discount cost, campaigns and return per episode of every panel policy."""
    from transferlab.simulator.policies import policy_panel

    out = {}
    for name, policy in policy_panel().items():
        res = run_in(make_market(), policy, seed=seed)
        out[name] = {
            "gmv": float(outcome_of(res, "gmv").mean()),
            "profit": float(outcome_of(res, "profit").mean()),
            "discount_cost": float(outcome_of(res, "discount_cost").mean()),
            "campaigns": float(campaigns_run(res).mean()),
            "return": float(np.mean(res["return"])),
        }
    return out


def gmv_margin_conflict(panel: Mapping[str, Mapping[str, float]]) -> Measure:
    """Correlation of GMV and profit across the policies tried (negative: the objectives conflict)."""
    names = list(panel)
    r = pearson([panel[n]["gmv"] for n in names], [panel[n]["profit"] for n in names])
    return Measure(
        r,
        "corr",
        f"Pearson correlation of mean GMV and mean profit (margin) per 30-day episode across the "
        f"{len(names)} panel policies in the world",
        {"n_policies": len(names)},
    )


def rank_agreement(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Spearman rank correlation of two scorings of the same keys."""
    from scipy.stats import spearmanr

    keys = sorted(a)
    return float(spearmanr([a[k] for k in keys], [b[k] for k in keys]).statistic)


def fit_small_simulator(n_customers: int, days: int) -> Any:
    """A learned simulator fitted on ``days`` of logs from a world of ``n_customers`` customers."""
    from transferlab.simulator.learned import LearnedSimulator, SimFitConfig
    from transferlab.simulator.logs import LogSpec, generate_logs
    from transferlab.simulator.world_config import WorldConfig

    logs = generate_logs(LogSpec(days=days, world=WorldConfig(n_customers=n_customers, seed=0)))
    return LearnedSimulator.fit(logs, SimFitConfig())


def maturity_days() -> int:
    from transferlab.simulator.world_config import WorldConfig

    return int(WorldConfig.model_fields["maturity_days"].default)

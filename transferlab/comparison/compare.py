"""``transferlab compare``: seed 000's domain table measured, seed 004's four questions and three layers.

Task families: ``coding`` (CodeRepair-v0 and the sandbox verifier), ``ops_analysis`` (OpsAnalysis-v0
and its rubric), ``campaign_sim`` (campaign decisions in a learned simulator), ``campaign_offline``
(offline RL on logged campaigns, from the committed ``docs/results/offline_rl/result.json``), and the
``market`` column: the ground-truth world standing in for a real shop.

>>> cfg = PRESETS["quick"]
>>> result = run_compare(cfg, Path("runs/compare/x"))  # doctest: +SKIP
>>> print(table_text(result))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from transferlab.comparison import measures as m
from transferlab.comparison.measures import Measure, not_measured
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json

FAMILIES = ("coding", "ops_analysis", "campaign_sim", "campaign_offline", "market")
QUESTION_FAMILIES = FAMILIES[:4]
PROPERTIES: dict[str, str] = {
    "determinism": "环境确定性 determinism",
    "reward_delay": "奖励延迟 reward delay",
    "parallel": "并行探索 parallel exploration",
    "cost": "试错成本 cost per trial",
    "objectivity": "奖励客观性 reward objectivity",
    "tool_use": "工具使用 tool use trainable",
}
QUESTIONS: dict[str, str] = {
    "trustworthy": "Is the reward trustworthy?",
    "explore": "Can the policy explore different outcomes?",
    "repeatable": "Can the environment be repeated?",
    "worth_cost": "Is the gain worth the cost?",
}
LAYERS: dict[str, str] = {
    "information": "information & interface",
    "basic": "basic behaviour",
    "sequential": "sequential decisions",
}


class CompareConfig(BaseConfig):
    """How much to measure; every count is per measurement, and the run takes a few of each."""

    replays: int = Field(default=5, ge=2, le=1000, description="Replays of the same action for determinism.")
    coding_episodes: int = Field(default=16, ge=2, description="CodeRepair-v0 episodes per worker setting.")
    agreement_pairs: int = Field(default=12, ge=2, description="Solutions graded by two sandboxes.")
    ops_tasks: int = Field(default=6, ge=2, description="OpsAnalysis-v0 training tasks used.")
    ops_episodes: int = Field(default=12, ge=2, description="Ops expert episodes per worker setting.")
    random_reports: int = Field(
        default=2, ge=0, description="Random-agent reports per task for grader agreement."
    )
    group_size: int = Field(
        default=4, ge=2, description="Episodes per group (GRPO's G) for the explore question."
    )
    world_customers: int = Field(
        default=300, ge=50, description="Customers in each world / simulated market."
    )
    world_seeds: int = Field(default=5, ge=2, description="Market seeds for the campaign replay spread.")
    campaign_jobs: int = Field(default=4, ge=2, description="Jobs per worker setting in campaign throughput.")
    campaign_batch: int = Field(default=2, ge=1, description="30-day episodes per campaign throughput job.")
    sim_log_days: int = Field(
        default=120, ge=60, description="Days of logs the learned simulator is fitted on."
    )
    backend: Literal["forkserver", "subprocess"] = Field(
        default="forkserver", description="Sandbox backend (forkserver falls back to subprocess)."
    )
    results_dir: str = Field(default="docs/results", description="Where the committed results are read from.")
    human_agreement: str | None = Field(
        default=None,
        description="JSON from `transferlab review reports agreement --out FILE`: the rubric vs "
        "reviewers' 0-10 ratings of ops reports.",
    )
    ops_result: str | None = Field(
        default=None,
        description="The transfer experiment's summary.json (ops SFT + GRPO); default: "
        "<results_dir>/transfer/summary.json.",
    )


PRESETS: dict[str, CompareConfig] = {
    "test": CompareConfig(
        replays=3,
        coding_episodes=4,
        agreement_pairs=4,
        ops_tasks=3,
        ops_episodes=4,
        random_reports=1,
        group_size=2,
        world_customers=100,
        world_seeds=3,
        campaign_jobs=2,
        campaign_batch=1,
        sim_log_days=60,
    ),
    "quick": CompareConfig(),
    "full": CompareConfig(
        replays=20,
        coding_episodes=64,
        agreement_pairs=60,
        ops_tasks=20,
        ops_episodes=40,
        random_reports=4,
        group_size=4,
        world_customers=1000,
        world_seeds=20,
        campaign_jobs=8,
        campaign_batch=4,
        sim_log_days=240,
    ),
}

Section = dict[str, dict[str, Measure]]  # "table" | "questions" | "diagnosis" -> key -> Measure
Progress = Callable[[str], None]


@dataclass
class CompareResult:
    """The measured table, the four questions and the three layers, per family."""

    config: CompareConfig
    table: dict[str, dict[str, Measure]] = field(default_factory=dict)  # property -> family -> Measure
    questions: dict[str, dict[str, Measure]] = field(default_factory=dict)  # family -> question -> Measure
    diagnosis: dict[str, dict[str, Measure]] = field(default_factory=dict)  # family -> layer -> Measure
    panel: dict[str, dict[str, float]] = field(default_factory=dict)
    throughput: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    transfer: list[dict[str, str]] = field(default_factory=list)  # one row per arm, from the summary
    transfer_source: str = ""
    wall_s: float = 0.0
    run_dir: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        def conv(d: Mapping[str, Mapping[str, Measure]]) -> dict[str, Any]:
            return {k: {kk: vv.to_dict() for kk, vv in v.items()} for k, v in d.items()}

        return {
            "config": self.config.to_dict(),
            "table": conv(self.table),
            "questions": conv(self.questions),
            "diagnosis": conv(self.diagnosis),
            "panel": self.panel,
            "throughput": {k: {str(w): r for w, r in v.items()} for k, v in self.throughput.items()},
            "transfer": self.transfer,
            "transfer_source": self.transfer_source,
            "wall_s": self.wall_s,
        }


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


# ------------------------------------------------------------------------------------------ coding


def measure_coding(config: CompareConfig, result: CompareResult, say: Progress) -> Section:
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import Verifier
    from transferlab.coding_rl.tasks.toy import toy_repo_tasks

    say("coding: verifier determinism, attacks, grader agreement")
    primary, _, _ = open_backend(SandboxConfig(backend=config.backend, workers=2))
    second, _, _ = open_backend(SandboxConfig(backend="subprocess", workers=2))
    try:
        v1, v2 = Verifier(primary), Verifier(second)
        det, delay = m.coding_determinism(v1, config.replays)
        attacks = m.coding_attacks(v1)
        agree = m.coding_grader_agreement(m.coding_sources(config.agreement_pairs), v1, v2)
    finally:
        primary.close()
        second.close()

    say("coding: CodeRepair-v0 rollouts on 1 and 2 workers")
    train, _ = toy_repo_tasks()
    runs = {w: m.coding_rollouts(train, "expert", config.coding_episodes, w, config.backend) for w in (1, 2)}
    rand = m.coding_rollouts(train, "random", config.coding_episodes, 2, config.backend)
    result.throughput["coding"] = {
        w: {k: r[k] for k in ("eps_per_s", "wall_s", "episodes")} for w, r in runs.items()
    }
    expert = runs[1]

    learn = m.parse_learn_report(_read(Path(config.results_dir, "coding_learn", "report.md")))
    flat = m.parse_dense_sparse_report(_read(Path(config.results_dir, "coding_dense_sparse", "report.md")))
    if "gain" in learn:
        gain = Measure(
            100 * learn["gain"],
            "pts",
            f"GRPO - SFT held-out success, committed docs/results/coding_learn "
            f"(95% CI [{100 * learn['gain_low']:+.1f}, {100 * learn['gain_high']:+.1f}] pts)",
            {"low": 100 * learn["gain_low"], "high": 100 * learn["gain_high"]},
        )
        cpu_h = learn.get("wall_min", float("nan")) / 60 * learn.get("cores", 1.0)
        worth = Measure(
            m.per_cost(100 * learn["gain"], cpu_h),
            "pts/CPU-h",
            f"GRPO gain {100 * learn['gain']:.1f} pts over the run's {learn.get('wall_min')} min x "
            f"{learn.get('cores', 1):.0f} cores = {cpu_h:.2f} CPU-hours (committed coding_learn)",
        )
    else:
        gain = worth = not_measured("no docs/results/coding_learn/report.md")
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
        else not_measured("no docs/results/coding_dense_sparse/report.md")
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
        learn.get("sft_success", float("nan")),
        "success",
        "SFT held-out sampled success (committed coding_learn); "
        f"scripted expert: {expert['success_rate']:.2f}",
        {"expert_success": expert["success_rate"]},
    )
    return {
        "table": {
            "determinism": det,
            "reward_delay": delay,
            "parallel": m.throughput_measure(runs, "CodeRepair-v0 expert episodes, sandbox on threads"),
            "cost": cost,
            "objectivity": agree,
            "tool_use": gain,
        },
        "questions": {"trustworthy": attacks, "explore": explore, "repeatable": det, "worth_cost": worth},
        "diagnosis": {"information": info, "basic": basic, "sequential": gain},
    }


# --------------------------------------------------------------------------------------------- ops


def _ops_summary(config: CompareConfig) -> tuple[dict[str, Any], str]:
    """The transfer experiment's committed summary (its scratch arm is plain ops SFT + GRPO), or {}."""
    path = Path(config.ops_result or Path(config.results_dir, "transfer", "summary.json"))
    if not path.is_file():
        return {}, str(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if "arms" not in data or "scratch" not in data["arms"]:
        raise ValueError(
            f"{path} is not a transfer summary (no arms.scratch): pass the summary.json that "
            "`python -m transferlab.comparison.transfer --report-dir DIR` writes"
        )
    return data, str(path)


def _ops_learned(config: CompareConfig) -> dict[str, Measure]:
    """RL gain, its cost, SFT success and GRPO's non-flat groups, from the transfer experiment's summary."""
    data, src = _ops_summary(config)
    row = data.get("arms", {}).get("scratch", {})
    if "rl_gain" not in row:
        gone = not_measured(
            f"no RL run on OpsAnalysis-v0 in {src}: run "
            "`python -m transferlab.comparison.transfer --report-dir docs/results/transfer`"
        )
        return {"gain": gone, "worth": gone, "sft": gone, "explore": gone}
    g = row["rl_gain"]
    seeds = len(row.get("episodes_to_threshold", []))
    gain = Measure(
        100 * g["estimate"],
        "pts",
        f"GRPO - SFT held-out success of the from-scratch ops policy, {seeds} seeds (95% CI "
        f"[{100 * g['low']:+.1f}, {100 * g['high']:+.1f}] pts; mean rubric change per seed "
        + ", ".join(f"{r:+.2f}" for r in row.get("rubric_gain_per_seed", []))
        + f"; {src})",
        {"low": 100 * g["low"], "high": 100 * g["high"]},
    )
    cpu_h = float(row.get("ops_cpu_hours", float("nan")))
    worth = Measure(
        m.per_cost(100 * g["estimate"], cpu_h),
        "pts/CPU-h",
        f"GRPO gain {100 * g['estimate']:+.1f} pts over {cpu_h:.2f} CPU-hours of ops SFT + GRPO ({src})",
    )
    sft = row["stages"]["sft"]["success"]
    basic = Measure(
        sft["estimate"],
        "success",
        f"ops SFT held-out success (rubric >= 8), 95% CI [{sft['low']:.2f}, {sft['high']:.2f}] ({src})",
        {"low": sft["low"], "high": sft["high"]},
    )
    explore = (
        Measure(
            row["nonflat_group_share"],
            "non-flat",
            f"share of the ops GRPO run's groups with non-zero reward variance (dense rewards; {src})",
        )
        if "nonflat_group_share" in row
        else not_measured(f"no GRPO group statistics in {src}")
    )
    return {"gain": gain, "worth": worth, "sft": basic, "explore": explore}


def _ci(d: Mapping[str, Any], fmt: str = ".2f") -> str:
    return f"{format(d['estimate'], fmt)} [{format(d['low'], fmt)}, {format(d['high'], fmt)}]"


def transfer_rows(summary: Mapping[str, Any]) -> list[dict[str, str]]:
    """The transfer experiment per arm: success after SFT and at the end, GRPO's gain, episodes to the
    threshold per seed, and the two ops habits after SFT and at the end (95% intervals)."""
    rows = []
    for arm, row in summary.get("arms", {}).items():
        st = row["stages"]
        eps = ", ".join("never" if e is None else f"{e:.0f}" for e in row["episodes_to_threshold"])
        out = {
            "arm": arm,
            "SFT success": _ci(st["sft"]["success"]) if "sft" in st else "—",
            "end success": _ci(st["end"]["success"]) if "end" in st else "—",
            "GRPO gain": _ci(row["rl_gain"], "+.2f") if "rl_gain" in row else "—",
            f"episodes to {summary.get('threshold', 0):.0%}": eps,
        }
        for habit in ("query_before_concluding", "check_before_reporting"):
            if "sft" in st and "end" in st:
                before, after = st["sft"]["habits"][habit], st["end"]["habits"][habit]
                out[f"{habit} (SFT -> end)"] = f"{before['estimate']:.2f} -> {after['estimate']:.2f}"
            else:
                out[f"{habit} (SFT -> end)"] = "—"
        rows.append(out)
    return rows


def measure_transfer(config: CompareConfig, result: CompareResult, say: Progress) -> None:
    """Read the transfer experiment's committed summary into ``result.transfer``."""
    say("transfer: committed summary")
    data, src = _ops_summary(config)
    result.transfer, result.transfer_source = transfer_rows(data), src
    if data and "transfer_minus_scratch" in data:
        diff = _ci(data["transfer_minus_scratch"], "+.2f")
        result.transfer_source = f"{src}; transfer - scratch at the end: {diff}"


def with_humans(agree: Measure, path: str | None) -> Measure:
    """The rubric-vs-second-grader measure, with the rubric-vs-humans agreement added when rated."""
    how = "review app: "
    if path is None or not Path(path).is_file():
        how += (
            "no human ratings given (rate reports on the app's 'Rate reports' page, then "
            "`transferlab review reports agreement --out FILE` and `--human-agreement FILE`)"
        )
        return Measure(agree.value, agree.unit, f"{agree.how}; {how}", agree.extra)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = {"spearman", "mean_abs_diff", "n"} - set(data)
    if missing:
        raise ValueError(
            f"{path} lacks {sorted(missing)}: "
            "pass the file that `transferlab review reports agreement --out` writes"
        )
    how += (
        f"rubric vs reviewers on {data['n']} rated reports: Spearman {data['spearman']:.2f}, "
        f"mean |diff| {data['mean_abs_diff']:.2f} points"
    )
    extra = agree.extra | {"human": data}
    return Measure(agree.value, agree.unit, f"{agree.how}; {how}", extra)


def measure_ops(config: CompareConfig, result: CompareResult, say: Progress) -> Section:
    from transferlab.simulator.ops import ExpertAgent, RandomAgent, task_ids

    say("ops: scenarios, replay, throughput")
    ids = task_ids("train", config.ops_tasks)
    experts = [m.ops_episode(t, ExpertAgent()) for t in ids]
    returns, report_s = m.ops_replay(ids[0], experts[0]["actions"], config.replays)
    s = m.spread(returns)
    det = Measure(
        s["std"],
        "std",
        f"the expert's tool calls on {ids[0]} replayed {config.replays}x in fresh environments: "
        "std of the return",
        {"spread": s},
    )
    delay = Measure(
        float(np.median(report_s)),
        "s",
        f"median wall seconds from generate_report to its score ({len(report_s)})",
    )
    runs = m.ops_throughput(ids, config.ops_episodes, (1, 2))
    result.throughput["ops_analysis"] = runs
    cost = Measure(
        runs[2]["cpu_s_per_episode"], "CPU-s/ep", "CPU seconds per expert episode (worker processes)"
    )

    say("ops: grader agreement, probes, groups")
    agree = with_humans(
        m.ops_grader_agreement(m.ops_reports(ids, config.random_reports)), config.human_agreement
    )
    probes = m.ops_probes(ids[0])
    groups = m.ops_groups(ids, config.group_size)
    share = m.nonflat_share(groups)
    learned = _ops_learned(config)
    explore = learned["explore"]
    if not explore.measured:
        explore = Measure(
            share,
            "non-flat",
            f"{len(groups)} groups of {config.group_size} random-agent episodes per task (sparse reward: "
            "the report score); share with non-zero variance (no trained ops policy found)",
        )
    rand = [m.ops_episode(t, RandomAgent(seed=7 + i)) for i, t in enumerate(ids)]
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
    basic = learned["sft"]
    if not basic.measured:
        basic = Measure(
            float(np.mean(success)),
            "success",
            f"scripted expert success (report >= 8/10) on {len(ids)} tasks (no SFT run found)",
        )
    gain, worth = learned["gain"], learned["worth"]
    return {
        "table": {
            "determinism": det,
            "reward_delay": delay,
            "parallel": m.throughput_measure(runs, "OpsAnalysis-v0 expert episodes, forked worker processes"),
            "cost": cost,
            "objectivity": agree,
            "tool_use": gain,
        },
        "questions": {"trustworthy": probes, "explore": explore, "repeatable": det, "worth_cost": worth},
        "diagnosis": {"information": info, "basic": basic, "sequential": gain},
    }


# ---------------------------------------------------------------------------------------- campaign


def measure_campaign(config: CompareConfig, result: CompareResult, say: Progress) -> dict[str, Section]:
    from transferlab.simulator.envs.campaign import OBS_DIM

    n = config.world_customers
    say("campaign: fitting a learned simulator on world logs")
    t0 = time.perf_counter()
    sim = m.fit_small_simulator(n, config.sim_log_days)
    fit_s = time.perf_counter() - t0
    seeds = list(range(1, config.world_seeds + 1))

    say("campaign: replay spread in the world and the simulator")
    world = m.campaign_replay(lambda s: m.world_market(n, 1), seeds)
    same = m.campaign_replay(lambda s: m.world_market(n, 1), [seeds[0]] * 2)
    simrep = m.campaign_replay(lambda s: sim.market(n_envs=1, n_customers=n, seed=s), seeds)
    ws, ss = m.spread(world["returns"]), m.spread(simrep["returns"])
    world_det = Measure(
        ws["std"],
        "std",
        f"policy {m.CAMPAIGN_POLICY} in {len(seeds)} world markets of different seeds: "
        "std of the 30-day return "
        f"(mean {ws['mean']:.2f}, CV {ws['std'] / abs(ws['mean']):.0%}); the same seed twice: "
        f"std {m.spread(same['returns'])['std']:.3g} (a seeded world replays, a real shop cannot)",
        {"spread": ws},
    )
    sim_det = Measure(
        ss["std"],
        "std",
        f"the same policy in {len(seeds)} simulated markets of different seeds: std of the return",
        {"spread": ss},
    )

    say("campaign: throughput on 1 and 2 workers")
    wt = m.campaign_throughput("world", config.campaign_jobs, config.campaign_batch, n, (1, 2))
    st = m.campaign_throughput("sim", config.campaign_jobs, config.campaign_batch, n, (1, 2), sim=sim)
    result.throughput["campaign_world"], result.throughput["campaign_sim"] = wt, st

    say("campaign: the policy panel in the world and the simulator")
    panel = m.panel_outcomes(lambda: m.world_market(n, 2))
    sim_panel = m.panel_outcomes(lambda: sim.market(n_envs=2, n_customers=n, seed=7))
    result.panel = panel
    conflict = m.gmv_margin_conflict(panel)
    sim_conflict = m.gmv_margin_conflict(sim_panel)
    ranks = m.rank_agreement(
        {k: v["return"] for k, v in panel.items()}, {k: v["return"] for k, v in sim_panel.items()}
    )
    runners = {k: v for k, v in panel.items() if v["campaigns"] > 0 and v["discount_cost"] > 0}
    per_campaign = float(np.median([v["discount_cost"] / v["campaigns"] for v in runners.values()]))
    margin = Measure(
        per_campaign,
        "$/campaign",
        "discount cost (margin given away) per campaign day in the world, median over the "
        f"{len(runners)} panel "
        f"policies that run campaigns ({n} customers)",
    )
    chosen = max(sim_panel, key=lambda k: sim_panel[k]["return"])
    profit_gain = panel[chosen]["profit"] - panel["no_campaign"]["profit"]
    spent = panel[chosen]["discount_cost"]
    worth = Measure(
        m.per_cost(profit_gain, spent),
        "$ profit/$ margin",
        f"the simulator's best panel policy ({chosen}) in the world: profit gain over no campaign "
        f"{profit_gain:+.0f} $ per episode for {spent:.0f} $ of margin given away",
        {"chosen": chosen, "profit_gain": profit_gain, "margin_spent": spent},
    )
    groups = []
    for s in seeds:
        res = m.run_in(
            sim.market(n_envs=config.group_size, n_customers=n, seed=s), m.campaign_policy("random"), s
        )
        groups.append(res["return"].tolist())
    explore = Measure(
        m.nonflat_share(groups),
        "non-flat",
        f"{len(groups)} groups of {config.group_size} random-policy episodes in the simulator; share with "
        "non-zero return variance",
    )
    marketer_gain = panel["marketer"]["return"] - panel["no_campaign"]["return"]
    days = m.maturity_days()
    sim_tab = {
        "determinism": sim_det,
        "reward_delay": Measure(
            simrep["wall_s"],
            "s",
            f"wall seconds to simulate a 30-day episode + 21 settle days ({n} customers)",
        ),
        "parallel": m.throughput_measure(st, "learned-simulator 30-day episodes, forked worker processes"),
        "cost": Measure(st[2]["cpu_s_per_episode"], "CPU-s/ep", "CPU seconds per simulated 30-day episode"),
        "objectivity": Measure(
            sim_conflict.value,
            sim_conflict.unit,
            sim_conflict.how.replace("in the world", "in the simulator"),
        ),
        "tool_use": not_measured("no tool calls: one catalog action a day"),
    }
    market_tab = {
        "determinism": world_det,
        "reward_delay": Measure(
            float(days),
            "days",
            f"WorldConfig.maturity_days: a campaign's GMV/profit is final {days} days after launch "
            f"(the world itself simulates an episode in {world['wall_s']:.2f} s)",
        ),
        "parallel": Measure(
            1 / m.SECONDS_PER_DAY,
            "campaigns/s",
            f"a real shop runs one campaign a day (1/86400 per second); the world simulator runs "
            f"{wt[2]['eps_per_s']:.3g} 30-day episodes/s on 2 workers",
            {"world_eps_per_s": {w: r["eps_per_s"] for w, r in wt.items()}},
        ),
        "cost": margin,
        "objectivity": conflict,
        "tool_use": not_measured("a real shop is not a training environment"),
    }
    campaign_sim: Section = {
        "table": sim_tab,
        "questions": {
            "trustworthy": Measure(
                ranks,
                "Spearman",
                f"rank agreement of the {len(panel)} panel policies' returns in the simulator vs the world "
                f"(simulator fitted on {config.sim_log_days} days of logs in {fit_s:.1f} s)",
            ),
            "explore": explore,
            "repeatable": sim_det,
            "worth_cost": worth,
        },
        "diagnosis": {
            "information": Measure(
                float(OBS_DIM), "features", "no tool calls: the policy observes the market state directly"
            ),
            "basic": Measure(
                marketer_gain,
                "return",
                "the logging marketer's 30-day return minus no campaign, in the world",
            ),
            "sequential": Measure(
                panel[chosen]["return"] - panel["marketer"]["return"],
                "return",
                f"the simulator's best panel policy ({chosen}) minus the marketer, in the world "
                "(no RL trained here)",
            ),
        },
    }
    return {"campaign_sim": campaign_sim, "market": {"table": market_tab}}


def measure_offline(config: CompareConfig, market: Mapping[str, Measure], say: Progress) -> Section:
    say("offline: committed result.json")
    path = Path(config.results_dir, "offline_rl", "result.json")
    if not path.is_file():
        gone = not_measured(f"no {path}")
        return {
            "table": dict.fromkeys(PROPERTIES, gone),
            "questions": dict.fromkeys(QUESTIONS, gone),
            "diagnosis": dict.fromkeys(LAYERS, gone),
        }
    data = json.loads(path.read_text(encoding="utf-8"))
    o = m.offline_summary(data)
    src = f"committed {path}"
    spread = Measure(
        o["ope_half_width_median"],
        "± return",
        f"median 95% bootstrap half-width of the {o['estimator']} OPE estimate "
        f"over {o['learners']} policies ({src})",
    )
    gain = Measure(
        o["gain"],
        "return",
        f"world 30-day return of the OPE-chosen policy ({o['chosen']}) minus the behaviour policy ({src})",
    )
    pol = data["main"]["policies"]
    bc = pol.get("discrete_bc", {}).get("world", {}).get("estimate", float("nan"))
    return {
        "table": {
            "determinism": spread,
            "reward_delay": Measure(
                market["reward_delay"].value,
                "days",
                "each logged campaign's outcome matures as in the market",
            ),
            "parallel": Measure(
                float(o["logged_days"]),
                "logged days",
                "no exploration: the logs are fixed; new ones come at one campaign a day per shop",
            ),
            "cost": Measure(
                market["cost"].value,
                "$/campaign",
                "every logged trial was a real campaign: margin as in the market",
            ),
            "objectivity": Measure(
                market["objectivity"].value,
                "corr",
                "the logs carry the market's objectives: GMV-margin correlation",
            ),
            "tool_use": gain,
        },
        "questions": {
            "trustworthy": Measure(
                o["ope_relative_error_median"],
                "rel. error",
                f"median relative error of the {o['estimator']} OPE estimate vs the world; coverage trusted "
                f"for {o['trusted']} of {o['learners']} policies ({src})",
            ),
            "explore": Measure(
                float(data.get("main_catalog_tried", float("nan"))),
                "of catalog",
                f"share of the catalog's actions the logs tried ({src})",
            ),
            "repeatable": spread,
            "worth_cost": gain,
        },
        "diagnosis": {
            "information": Measure(
                float(o["trusted"]), "trusted", "policies whose OPE coverage diagnostics pass"
            ),
            "basic": Measure(
                float(bc - o["behaviour_world"]),
                "return",
                "behaviour cloning (discrete_bc) minus behaviour, world",
            ),
            "sequential": Measure(
                float(o["chosen_world"] - bc),
                "return",
                f"the chosen learner ({o['chosen']}) minus behaviour cloning",
            ),
        },
    }


# ---------------------------------------------------------------------------------------- the run


def run_compare(config: CompareConfig, out_dir: Path, progress: Progress | None = None) -> CompareResult:
    """Measure every family, then write ``config.json``, ``result.json`` and the report into ``out_dir``."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    result = CompareResult(config)
    sections: dict[str, Section] = {
        "coding": measure_coding(config, result, say),
        "ops_analysis": measure_ops(config, result, say),
    }
    sections.update(measure_campaign(config, result, say))
    sections["campaign_offline"] = measure_offline(config, sections["market"]["table"], say)
    measure_transfer(config, result, say)
    result.table = {p: {f: sections[f]["table"][p] for f in FAMILIES} for p in PROPERTIES}
    result.questions = {f: sections[f]["questions"] for f in QUESTION_FAMILIES}
    result.diagnosis = {f: sections[f]["diagnosis"] for f in QUESTION_FAMILIES}
    result.wall_s = time.perf_counter() - t0
    result.run_dir = Path(out_dir)
    say("writing the report")
    out = Path(out_dir)
    config.save(out / "config.json")
    atomic_write_json(out / "result.json", result.to_dict())
    write_report(result, out)
    return result


def table_rows(result: CompareResult) -> list[dict[str, str]]:
    return [
        {"property": PROPERTIES[p], **{f: result.table[p][f].cell() for f in FAMILIES}} for p in PROPERTIES
    ]


def _width(text: str) -> int:
    """Terminal columns of ``text`` (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _text_table(rows: list[dict[str, str]]) -> str:
    cols = list(rows[0])
    width = {c: max(_width(c), *(_width(r[c]) for r in rows)) for c in cols}

    def pad(text: str, c: str) -> str:
        return text + " " * (width[c] - _width(text))

    line = " | ".join(pad(c, c) for c in cols)
    sep = "-+-".join("-" * width[c] for c in cols)
    return "\n".join([line, sep, *(" | ".join(pad(r[c], c) for c in cols) for r in rows)])


def table_text(result: CompareResult) -> str:
    """Seed 000's domain table with measured numbers, then the four questions and three layers."""
    questions = [
        {"question": QUESTIONS[q], **{f: result.questions[f][q].cell() for f in QUESTION_FAMILIES}}
        for q in QUESTIONS
    ]
    layers = [
        {"layer": LAYERS[k], **{f: result.diagnosis[f][k].cell() for f in QUESTION_FAMILIES}} for k in LAYERS
    ]
    parts = [_text_table(table_rows(result)), _text_table(questions), _text_table(layers)]
    if result.transfer:
        parts.append(f"transfer coding -> ops ({result.transfer_source})\n" + _text_table(result.transfer))
    return "\n\n".join(parts)


def _how(rows: Mapping[str, Mapping[str, Measure]], names: Mapping[str, str]) -> list[str]:
    return [
        f"{names[k]} / {f}: {meas.cell()} — {meas.how}" for k, row in rows.items() for f, meas in row.items()
    ]


def _throughput_figure(result: CompareResult) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.add_subplot()
    names = list(result.throughput)
    x = np.arange(len(names))
    for j, w in enumerate((1, 2)):
        ax.bar(
            x + (j - 0.5) * 0.38,
            [result.throughput[k][w]["eps_per_s"] for k in names],
            0.38,
            label=f"{w} worker(s)",
        )
    ax.axhline(
        1 / (30 * m.SECONDS_PER_DAY), color="C3", linestyle="--", label="real shop: one 30-day episode"
    )
    ax.set_yscale("log")
    ax.set_xticks(x, names)
    ax.set_ylabel("episodes per second")
    ax.legend(frameon=False, fontsize="small")
    return fig


def _panel_figure(panel: Mapping[str, Mapping[str, float]]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for name, v in panel.items():
        ax.scatter(v["gmv"], v["profit"], color="C0")
        ax.annotate(name, (v["gmv"], v["profit"]), fontsize=7)
    ax.set_xlabel("GMV per 30-day episode ($)")
    ax.set_ylabel("profit per 30-day episode ($)")
    ax.grid(True, alpha=0.3)
    return fig


def write_report(result: CompareResult, out: Path) -> Any:
    from transferlab.platform.reports import Report

    report = Report("Coding vs ecommerce: seed 000's domain table, measured")
    report.paragraph(
        "Each cell is a number measured in this run (or read from a committed result, which it says); the "
        f"run took {result.wall_s:.0f} s. How each was measured is listed under the tables."
    )
    report.heading("The domain table (seed 000)")
    report.table(table_rows(result))
    report.heading("Four questions before RL (seed 004)")
    report.table(
        [
            {"question": QUESTIONS[q], **{f: result.questions[f][q].cell() for f in QUESTION_FAMILIES}}
            for q in QUESTIONS
        ]
    )
    report.heading("Three-layer diagnosis (seed 004)")
    report.table(
        [
            {"layer": LAYERS[k], **{f: result.diagnosis[f][k].cell() for f in QUESTION_FAMILIES}}
            for k in LAYERS
        ]
    )
    report.heading("The transfer experiment: coding-pretrained vs from scratch on ops")
    if result.transfer:
        report.table(result.transfer)
        report.paragraph(
            f"From {result.transfer_source} (held-out success = rubric >= 8; 95% bootstrap intervals; "
            "the full report with curves is docs/results/transfer/report.md)."
        )
    else:
        report.paragraph(f"Not run: no transfer summary at {result.transfer_source}.")
    report.figure(
        _throughput_figure(result), "throughput", "Episodes per second on 1 and 2 workers (log scale)."
    )
    if result.panel:
        report.figure(
            _panel_figure(result.panel), "gmv_profit", "GMV vs profit of the policy panel in the world."
        )
    report.heading("How each number was measured")
    report.bullets(_how(result.table, PROPERTIES))
    report.bullets(
        _how({q: {f: result.questions[f][q] for f in QUESTION_FAMILIES} for q in QUESTIONS}, QUESTIONS)
    )
    report.bullets(_how({k: {f: result.diagnosis[f][k] for f in QUESTION_FAMILIES} for k in LAYERS}, LAYERS))
    report.code(json.dumps(result.config.to_dict(), indent=1), "json")
    return report.write(out)

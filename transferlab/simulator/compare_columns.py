"""The campaign families measured for ``transferlab compare``: the world (the market column) and the
learned simulator (``campaign_sim``).

:func:`measure_campaign` fills both :data:`~transferlab.platform.measures.Section` s; the other
functions are its parts (markets, replays, throughput, the policy panel).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from transferlab.platform.measures import (
    FORK_STATE,
    Measure,
    Measured,
    Progress,
    Section,
    fork_state,
    nonflat_share,
    not_measured,
    pearson,
    per_cost,
    rank_agreement,
    spread,
    throughput_measure,
    timed_pool,
)

SECONDS_PER_DAY = 86_400.0


CAMPAIGN_POLICY = "weekly_all_5"
"""The panel policy used wherever one campaign policy is needed (a 5% discount to everyone weekly)."""


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
    from transferlab.simulator.vocabulary import DAY_KEYS

    return np.asarray(result["outcome"][:, DAY_KEYS.index(key)], dtype=np.float64)


def campaigns_run(result: Mapping[str, np.ndarray]) -> np.ndarray:
    """Campaign days per episode (days on which pushes went out)."""
    from transferlab.simulator.vocabulary import DAY_KEYS

    return np.asarray((result["daily"][:, :, DAY_KEYS.index("pushes")] > 0).sum(axis=0), dtype=np.float64)


def _world_job(i: int) -> tuple[int, float]:
    c0 = time.process_time()
    n, batch = FORK_STATE["world_customers"], FORK_STATE["batch"]
    run_in(world_market(n, batch), campaign_policy(), seed=100 + i)
    return batch, time.process_time() - c0


def _sim_job(i: int) -> tuple[int, float]:
    c0 = time.process_time()
    sim, n, batch = FORK_STATE["sim"], FORK_STATE["world_customers"], FORK_STATE["batch"]
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


def measure_campaign(
    world_customers: int,
    sim_log_days: int,
    world_seeds: int,
    campaign_jobs: int,
    campaign_batch: int,
    group_size: int,
    say: Progress,
) -> Measured:
    """The ``campaign_sim`` section and the ``market`` column's table, the policy panel, throughput."""
    from transferlab.simulator.envs.campaign import OBS_DIM

    n = world_customers
    say("campaign: fitting a learned simulator on world logs")
    t0 = time.perf_counter()
    sim = fit_small_simulator(n, sim_log_days)
    fit_s = time.perf_counter() - t0
    seeds = list(range(1, world_seeds + 1))

    say("campaign: replay spread in the world and the simulator")
    world = campaign_replay(lambda s: world_market(n, 1), seeds)
    same = campaign_replay(lambda s: world_market(n, 1), [seeds[0]] * 2)
    simrep = campaign_replay(lambda s: sim.market(n_envs=1, n_customers=n, seed=s), seeds)
    ws, ss = spread(world["returns"]), spread(simrep["returns"])
    world_det = Measure(
        ws["std"],
        "std",
        f"policy {CAMPAIGN_POLICY} in {len(seeds)} world markets of different seeds: "
        "std of the 30-day return "
        f"(mean {ws['mean']:.2f}, CV {ws['std'] / abs(ws['mean']):.0%}); the same seed twice: "
        f"std {spread(same['returns'])['std']:.3g} (a seeded world replays, a real shop cannot)",
        {"spread": ws},
    )
    sim_det = Measure(
        ss["std"],
        "std",
        f"the same policy in {len(seeds)} simulated markets of different seeds: std of the return",
        {"spread": ss},
    )

    say("campaign: throughput on 1 and 2 workers")
    wt = campaign_throughput("world", campaign_jobs, campaign_batch, n, (1, 2))
    st = campaign_throughput("sim", campaign_jobs, campaign_batch, n, (1, 2), sim=sim)

    say("campaign: the policy panel in the world and the simulator")
    panel = panel_outcomes(lambda: world_market(n, 2))
    sim_panel = panel_outcomes(lambda: sim.market(n_envs=2, n_customers=n, seed=7))
    conflict = gmv_margin_conflict(panel)
    sim_conflict = gmv_margin_conflict(sim_panel)
    ranks = rank_agreement(
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
        per_cost(profit_gain, spent),
        "$ profit/$ margin",
        f"the simulator's best panel policy ({chosen}) in the world: profit gain over no campaign "
        f"{profit_gain:+.0f} $ per episode for {spent:.0f} $ of margin given away",
        {"chosen": chosen, "profit_gain": profit_gain, "margin_spent": spent},
    )
    groups = []
    for s in seeds:
        res = run_in(sim.market(n_envs=group_size, n_customers=n, seed=s), campaign_policy("random"), s)
        groups.append(res["return"].tolist())
    explore = Measure(
        nonflat_share(groups),
        "non-flat",
        f"{len(groups)} groups of {group_size} random-policy episodes in the simulator; share with "
        "non-zero return variance",
    )
    marketer_gain = panel["marketer"]["return"] - panel["no_campaign"]["return"]
    days = maturity_days()
    sim_tab = {
        "determinism": sim_det,
        "reward_delay": Measure(
            simrep["wall_s"],
            "s",
            f"wall seconds to simulate a 30-day episode + 21 settle days ({n} customers)",
        ),
        "parallel": throughput_measure(st, "learned-simulator 30-day episodes, forked worker processes"),
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
            1 / SECONDS_PER_DAY,
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
                f"(simulator fitted on {sim_log_days} days of logs in {fit_s:.1f} s)",
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
    return Measured(
        {"campaign_sim": campaign_sim, "market": {"table": market_tab}},
        throughput={"campaign_world": wt, "campaign_sim": st},
        panel=panel,
    )

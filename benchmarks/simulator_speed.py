"""Simulator speed: customer-days per second of the vector world and the learned simulator against the
straightforward one-simpy-process-per-customer world, measured in one run, against speed targets.

Measured here, every rate in one process with one thread (numpy's BLAS pools limited to 1):

* the reference world (``transferlab.simulator.reference_world``: one simpy process per customer) and
  the vector world (``MarketWorld``: customers as numpy arrays) at each market size: build the market,
  then simulate ``days`` days under a seeded action plan (a random catalog campaign on about a third
  of the days, the same plans for both), in alternating rounds; fast ones run again with new seeds
  until their runs add up to ``min_seconds``; the median run is reported;
* the learned simulator's batched ``SimMarket`` (``transferlab.simulator.learned``): ``reset`` then
  ``days`` steps of ``batch`` markets of 1,000 customers, each market with its own random actions;
* the training budget of simulator-assisted training in the project's founding design note,
  100,000 episodes x 30 days x 1,000 customers with the learned simulator on ``processes``
  processes: projected from the single-process rate, and measured by running a fraction of the
  episodes on that many processes at once and extrapolating linearly (the one-off start-up, process
  spawn and compile, is added once, not extrapolated).

A customer-day is one customer simulated for one day. Verdicts are computed from the measurements
against the targets: >= 100x the per-customer reference (same market size), >= 1M customer-days per
second per core, 100,000 episodes in under 10 minutes. No timing is asserted anywhere.

Usage: python benchmarks/simulator_speed.py [--quick] [--json PATH] [--markdown PATH] [--simulator DIR]
(SpeedConfig holds the sizes; --quick is the smoke size the tests run.)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib.metadata
import math
import multiprocessing as mp
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.learned import LearnedSimulator, SimFitConfig, SimMarket, SimParams
from transferlab.simulator.logs import LogSpec, generate_logs
from transferlab.simulator.reference_world import ReferenceWorld
from transferlab.simulator.vocabulary import CATALOG
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import CustomerPrior, WorldConfig

REFERENCE = "reference: one simpy process per customer"
VECTOR = "vector world (MarketWorld)"
LEARNED = "learned simulator (SimMarket)"
TARGET_RATIO, TARGET_RATE, TARGET_SECONDS = 100.0, 1_000_000.0, 600.0


@dataclass(frozen=True)
class SpeedConfig:
    """What to measure. The defaults are the recorded run; :meth:`quick` is the test's smoke size."""

    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    """Market sizes (customers) at which the reference and the vector world are both timed."""
    days: int = 30
    """Days simulated per timed run (an episode: 30 days, the longest an ecommerce result takes)."""
    repeats: int = 3
    """Rounds of timed runs per implementation and size (the worlds alternate round by round)."""
    min_seconds: float = 3.0
    """Fast implementations run again (new seeds) until their runs add up to this; the median is reported."""
    batches: tuple[int, ...] = (10, 100, 1_000)
    """Markets per learned-simulator batch (each of ``episode_customers`` customers)."""
    episode_customers: int = 1_000
    """Customers per market in the learned simulator and the training-budget projection."""
    target_episodes: int = 100_000
    """Episodes in the training budget (the design note trains 100,000 episodes in the simulator)."""
    measured_episodes: int = 4_000
    """Episodes actually simulated on ``processes`` processes for the measured projection."""
    processes: int = 2
    """Processes for the training-budget measurement (one per core of this machine)."""
    log_days: int = 365
    """Days of logs the learned simulator is fitted on."""
    log_customers: int = 2_000
    """Customers in the logged world."""
    simulator: str | None = None
    """A saved learned simulator (``transferlab sim fit ... --out DIR``) instead of fitting one."""
    quick_params: bool = False
    """Use the learned simulator's toy parameters instead of fitting them (smoke runs only)."""

    def __post_init__(self) -> None:
        if self.episode_customers not in self.sizes:
            raise ValueError(
                f"episode_customers={self.episode_customers} must be one of sizes={self.sizes}: the learned "
                "simulator is compared with the reference at the same market size"
            )

    @classmethod
    def quick(cls) -> SpeedConfig:
        return cls(
            sizes=(200, 400),
            days=5,
            repeats=1,
            min_seconds=0.0,
            batches=(4,),
            episode_customers=200,
            measured_episodes=8,
            quick_params=True,
        )


# --------------------------------------------------------------------------------------------------
# Timed runs
# --------------------------------------------------------------------------------------------------


def action_plan(n_markets: int, days: int, seed: int) -> np.ndarray:
    """Catalog indices ``(n_markets, days)``: a uniformly drawn campaign on ~1/3 of days, else none."""
    rng = np.random.default_rng([seed, 7])
    campaign = rng.integers(1, len(CATALOG), (n_markets, days))
    return np.where(rng.random((n_markets, days)) < 1 / 3, campaign, 0)


World = type[MarketWorld] | type[ReferenceWorld]


class Timing(NamedTuple):
    """One timed run: wall-clock seconds and this process's CPU seconds."""

    wall: float
    cpu: float


def _clock() -> Timing:
    return Timing(time.perf_counter(), time.process_time())


def _since(t0: Timing) -> Timing:
    return Timing(time.perf_counter() - t0.wall, time.process_time() - t0.cpu)


def time_world(cls: World, n: int, days: int, seed: int, prior: CustomerPrior) -> Timing:
    """Build a market of ``n`` customers and simulate ``days`` days of the action plan."""
    plan = action_plan(1, days, seed)[0]
    t0 = _clock()
    world = cls(WorldConfig(n_customers=n, seed=seed), prior=prior)
    for day in range(days):
        world.step(CATALOG[int(plan[day])])
    return _since(t0)


def time_learned(market: SimMarket, days: int, seed: int) -> Timing:
    """``reset`` plus ``days`` steps of a batched ``SimMarket``."""
    plan = action_plan(market.n_envs, days, seed)
    t0 = _clock()
    market.reset(seed)
    for day in range(days):
        market.step(plan[:, day])
    return _since(t0)


def rate_row(
    implementation: str, customers: int, markets: int, days: int, runs: list[Timing]
) -> dict[str, Any]:
    """Median run; the rate per CPU-second (what the process got of a core) and per wall second."""
    wall, cpu = statistics.median(t.wall for t in runs), statistics.median(t.cpu for t in runs)
    customer_days = customers * markets * days
    return {
        "implementation": implementation,
        "customers": customers,
        "markets": markets,
        "days": days,
        "customer_days": customer_days,
        "runs": len(runs),
        "wall_s": wall,
        "cpu_s": cpu,
        "customer_days_per_s": customer_days / cpu,
        "customer_days_per_wall_s": customer_days / wall,
    }


# --------------------------------------------------------------------------------------------------
# The learned simulator
# --------------------------------------------------------------------------------------------------


def learned_params(cfg: SpeedConfig, log: Callable[[str], None]) -> tuple[SimParams, str]:
    """The learned simulator's parameters and how they were made.

    Loaded from ``cfg.simulator`` (a ``transferlab sim fit`` directory), or fitted with
    ``LearnedSimulator.fit`` on logs of the ground-truth world under the marketer (``generate_logs``);
    the fit's own time is not part of any rate. ``quick_params`` takes the hand-made toy parameters.
    """
    if cfg.quick_params:
        return SimParams.toy(n_customers=500), "toy parameters (`SimParams.toy`, not fitted: smoke run)"
    if cfg.simulator:
        return LearnedSimulator.load(cfg.simulator).params, f"loaded from `{cfg.simulator}`"
    log(f"fitting the learned simulator on {cfg.log_days} days x {cfg.log_customers:,} customers ...")
    t0 = time.perf_counter()
    world = WorldConfig(n_customers=cfg.log_customers, seed=0)
    logs = generate_logs(LogSpec(days=cfg.log_days, world=world))
    sim = LearnedSimulator.fit(logs, SimFitConfig(seed=0))
    took = time.perf_counter() - t0
    return sim.params, (
        f"fitted by `LearnedSimulator.fit` on {cfg.log_days} days x {cfg.log_customers:,} customers of "
        f"`generate_logs` (world seed 0, the marketer policy); logs and fit took {took:.0f} s, untimed"
    )


def _episode_worker(args: tuple[SimParams, int, int, int, int, int, Any]) -> tuple[float, float, float, int]:
    """Run ``episodes`` episodes in batches after the barrier; returns (start, end, CPU s, episodes)."""
    params, batch, customers, days, episodes, seed, barrier = args
    with threadpool_limits(1):
        market = SimMarket(params, n_envs=batch, n_customers=customers, seed=seed, track_campaigns=False)
        barrier.wait()
        t0, done = _clock(), 0
        while done < episodes:
            time_learned(market, days, seed + done)
            done += batch
        return t0.wall, time.perf_counter(), _since(t0).cpu, done


def measure_budget(cfg: SpeedConfig, params: SimParams, batch: int) -> dict[str, Any]:
    """Run ``measured_episodes`` episodes on ``processes`` processes at once; wall time and start-up."""
    per_process = -(-cfg.measured_episodes // cfg.processes)
    per_process = -(-per_process // batch) * batch  # whole batches
    ctx = mp.get_context("spawn")
    t_spawn = time.perf_counter()
    with ctx.Manager() as manager:
        barrier = manager.Barrier(cfg.processes)
        jobs = [
            (params, batch, cfg.episode_customers, cfg.days, per_process, 1000 * (i + 1), barrier)
            for i in range(cfg.processes)
        ]
        with ctx.Pool(cfg.processes) as pool:
            results = pool.map(_episode_worker, jobs)
    start, end = min(r[0] for r in results), max(r[1] for r in results)
    episodes = sum(r[3] for r in results)
    wall = end - start
    startup = start - t_spawn  # perf_counter is system-wide on Linux: spawn, imports, compile
    scale = cfg.target_episodes / episodes
    cpu_per_process = sum(r[2] for r in results) / cfg.processes
    return {
        "processes": cfg.processes,
        "batch": batch,
        "measured_episodes": episodes,
        "measured_wall_s": wall,
        "measured_customer_days_per_s": episodes * cfg.episode_customers * cfg.days / wall,
        "cpu_share": cpu_per_process / wall,
        "startup_s": startup,
        "extrapolated_s": wall * scale + startup,
        "extrapolated_cpu_s": cpu_per_process * scale + startup,
        "fraction": episodes / cfg.target_episodes,
    }


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def timed_round(run_once: Callable[[int], Timing], r: int, budget_s: float) -> list[Timing]:
    """Round ``r``: ``run_once(seed)`` at least once, then again (new seeds) until ``budget_s`` is spent."""
    runs: list[Timing] = []
    while not runs or (sum(t.wall for t in runs) < budget_s and len(runs) < 100):
        runs.append(run_once(1000 * r + len(runs)))
    return runs


def time_worlds(cfg: SpeedConfig, prior: CustomerPrior, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """The reference and the vector world at each size, in alternating rounds (load hits both)."""
    rows = []
    worlds: dict[str, World] = {REFERENCE: ReferenceWorld, VECTOR: MarketWorld}
    for n in cfg.sizes:
        log(f"timing the reference and the vector world at {n:,} customers ...")
        secs: dict[str, list[Timing]] = {name: [] for name in worlds}
        for cls in worlds.values():
            time_world(cls, min(n, 100), 2, 0, prior)  # warm-up
        for r in range(cfg.repeats):
            for name, cls in worlds.items():
                run_once = functools.partial(time_world, cls, n, cfg.days, prior=prior)
                secs[name] += timed_round(run_once, r, cfg.min_seconds / cfg.repeats)
        rows += [rate_row(name, n, 1, cfg.days, s) for name, s in secs.items()]
    return rows


def time_learned_batches(
    cfg: SpeedConfig, params: SimParams, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """The learned simulator at each batch size (markets of ``episode_customers`` customers)."""
    rows = []
    for batch in cfg.batches:
        log(f"timing {LEARNED}, {batch} markets of {cfg.episode_customers:,} customers ...")
        market = SimMarket(params, batch, cfg.episode_customers, seed=0, track_campaigns=False)
        time_learned(market, 2, 999)  # warm-up
        run_once = functools.partial(time_learned, market, cfg.days)
        secs = [
            t for r in range(cfg.repeats) for t in timed_round(run_once, r, cfg.min_seconds / cfg.repeats)
        ]
        rows.append(rate_row(LEARNED, cfg.episode_customers, batch, cfg.days, secs))
    return rows


def training_budget(cfg: SpeedConfig, params: SimParams, best: dict[str, Any]) -> dict[str, Any]:
    """The training budget (100,000 episodes): projected from the best single-process rate, and measured."""
    budget = measure_budget(cfg, params, best["markets"])
    total = cfg.target_episodes * cfg.days * cfg.episode_customers
    env = EpisodeConfig()
    env_days = env.warmup_days + cfg.days + env.settle_days
    simulated = budget["extrapolated_s"] - budget["startup_s"]
    return budget | {
        "target_episodes": cfg.target_episodes,
        "customer_days": total,
        "projected_s": total / (cfg.processes * best["customer_days_per_s"]),
        "env_days_per_episode": env_days,
        "extrapolated_env_s": simulated * env_days / cfg.days + budget["startup_s"],
    }


def run(cfg: SpeedConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every measurement of one run, the ratios to the reference and the verdicts."""
    load_start = os.getloadavg()[0]
    prior = CustomerPrior.from_cdnow()
    with threadpool_limits(1):
        rows = time_worlds(cfg, prior, log)
        params, learned_note = learned_params(cfg, log)
        rows += time_learned_batches(cfg, params, log)
    reference = {r["customers"]: r["customer_days_per_s"] for r in rows if r["implementation"] == REFERENCE}
    for r in rows:
        ref = reference.get(r["customers"])
        r["ratio_to_reference"] = r["customer_days_per_s"] / ref if ref else None
    log(f"measuring {cfg.measured_episodes:,} episodes on {cfg.processes} processes ...")
    learned = [r for r in rows if r["implementation"] == LEARNED]
    budget = training_budget(cfg, params, max(learned, key=lambda r: r["customer_days_per_s"]))
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine() | {"load_1min_start": load_start, "load_1min_end": os.getloadavg()[0]},
        "config": asdict(cfg),
        "prior": asdict(prior),
        "learned_params": learned_note,
        "rows": rows,
        "budget": budget,
        "verdicts": verdicts(rows, budget, cfg),
    }


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "simpy": importlib.metadata.version("simpy"),
        "processor": platform.processor() or platform.machine(),
    }


def verdict(value: float | None, threshold: float, below: bool = False) -> str:
    """PASS when ``value`` meets ``threshold`` (``>=``, or ``<`` when ``below``); n/a when not measured."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return "PASS" if (value < threshold if below else value >= threshold) else "FAIL"


def verdicts(rows: list[dict[str, Any]], budget: dict[str, Any], cfg: SpeedConfig) -> list[dict[str, Any]]:
    """One verdict per target and measured implementation."""
    measured = [r for r in rows if r["implementation"] != REFERENCE]
    checks: list[tuple[str, str, float, Callable[[float], str]]] = [
        (
            "ratio_to_reference",
            f">= {TARGET_RATIO:.0f}x the per-customer reference",
            TARGET_RATIO,
            lambda v: f"{v:,.1f}x",
        ),
        ("customer_days_per_s", ">= 1M customer-days/s per core", TARGET_RATE, lambda v: f"{v / 1e6:,.2f}M"),
    ]
    out = []
    for key, target, threshold, shown in checks:
        for r in measured:
            v = r.get(key)
            out.append(
                {
                    "target": target,
                    "implementation": _label(r),
                    "measured": v,
                    "shown": "n/a" if v is None else shown(v),
                    "verdict": verdict(v, threshold),
                }
            )
    secs = budget["extrapolated_s"]
    out.append(
        {
            "target": f"{cfg.target_episodes:,} episodes x {cfg.days} days x {cfg.episode_customers:,} "
            "customers < 10 min",
            "implementation": f"{LEARNED}, {cfg.processes} processes (measured on a fraction, extrapolated)",
            "measured": secs,
            "shown": f"{secs / 60:.1f} min",
            "verdict": verdict(secs, TARGET_SECONDS, below=True),
        }
    )
    return out


def _label(row: dict[str, Any]) -> str:
    if row["implementation"] == LEARNED:
        return f"{LEARNED}, batch of {row['markets']:,} markets x {row['customers']:,} customers"
    return f"{row['implementation']}, {row['customers']:,} customers"


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.3g}"


def render(result: dict[str, Any]) -> str:
    """The tables (Markdown): rates, the training budget, verdicts."""
    cfg, m = result["config"], result["machine"]
    lines = [
        f"{m['cpus']} CPUs ({m['processor']}), Python {m['python']}, numpy {m['numpy']}, simpy "
        f"{m['simpy']}, one thread per process; 1-minute load average {m['load_1min_start']:.1f} at the "
        f"start and {m['load_1min_end']:.1f} at the end (other jobs share the cores). Customer prior: "
        f"the CDNOW fit (`cdnow_prior.json`), {result['prior']}. Learned simulator: "
        f"{result['learned_params']}.",
        "",
        f"Each run simulates {cfg['days']} days; medians over the runs. Rates are customer-days per "
        "CPU-second of the one process (what it got of a core; the per-core figure) and per wall second.",
        "",
        "| implementation | customers per market | markets | customer-days per run | runs | wall s "
        "| CPU s | customer-days / CPU-s | customer-days / wall-s | x reference (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        ratio = "" if r["ratio_to_reference"] is None else f"{r['ratio_to_reference']:,.1f}x"
        lines.append(
            f"| {r['implementation']} | {r['customers']:,} | {r['markets']:,} | {r['customer_days']:,} "
            f"| {r['runs']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {_num(r['customer_days_per_s'])} "
            f"| {_num(r['customer_days_per_wall_s'])} | {ratio} |"
        )
    b = result["budget"]
    lines += [
        "",
        f"Training budget: {b['target_episodes']:,} episodes x {cfg['days']} days x "
        f"{cfg['episode_customers']:,} customers = {b['customer_days']:,} customer-days, learned "
        f"simulator in batches of {b['batch']:,} markets on {b['processes']} processes.",
        "",
        "| | value |",
        "|---|---:|",
        f"| projected: best single-process rate per CPU-second x {b['processes']} cores "
        f"| {b['projected_s'] / 60:.1f} min |",
        f"| measured: {b['measured_episodes']:,} episodes ({b['fraction']:.1%} of the budget) on "
        f"{b['processes']} processes at once | {b['measured_wall_s']:.2f} s "
        f"({_num(b['measured_customer_days_per_s'])} customer-days/s; the workers got "
        f"{b['cpu_share']:.0%} of their cores) |",
        f"| one-off start-up (spawn, imports, compile), counted once | {b['startup_s']:.1f} s |",
        f"| measured on {b['fraction']:.1%}, extrapolated linearly to {b['target_episodes']:,} "
        f"episodes | {b['extrapolated_s'] / 60:.1f} min |",
        f"| the same at the CPU time the workers used (as if they had their cores alone) "
        f"| {b['extrapolated_cpu_s'] / 60:.1f} min |",
        f"| the same, scaled to the {b['env_days_per_episode']} simulated days of a `CampaignEnv` "
        f"episode (warm-up + {cfg['days']} + settlement) | {b['extrapolated_env_s'] / 60:.1f} min |",
    ]
    lines += ["", "| target | implementation | measured | verdict |", "|---|---|---:|---|"]
    for v in result["verdicts"]:
        lines.append(f"| {v['target']} | {v['implementation']} | {v['shown']} | {v['verdict']} |")
    return "\n".join(lines)


NOTES = [
    "## What is compared",
    "",
    "- **reference**: `transferlab/simulator/reference_world.py`, the same model as the vector world "
    "written the obvious way: a `Customer` object with scalar traits and its own simpy process that sleeps "
    "until each day's close and draws its own purchase with Python floats, is woken by a push (a simpy "
    "interrupt), and spawns one process per order (delivery, complaint, return). "
    "`tests/simulator/test_reference_world.py` checks that the two agree in distribution (orders per day, "
    "GMV per order, return, late and discount rates, with and without campaigns).",
    "- **vector world**: `MarketWorld`, customers as numpy arrays updated inside simpy calendar events; "
    "both worlds keep their full customer event log, as they do in use.",
    "- **learned simulator**: `SimMarket`, a batch of markets stepped together, each day a few array "
    "operations over (markets x customers); campaign tracking off (as for training).",
    "- A timed run builds the market (the worlds) or resets it (the learned simulator), then simulates "
    "the days under the same kind of action plan: a uniformly drawn catalog campaign on about a third of "
    "the days. Rates are customer-days (customers x markets x days) per CPU-second of one process with "
    "one thread (`time.process_time`): on this shared machine other jobs take turns on the cores, and "
    "the CPU time is what the process actually got of one; the wall-clock rates are shown too. "
    "`x reference` divides by the reference's rate at the same market size.",
    "- The training budget is measured by running a fraction of the episodes on both cores at once "
    "(one process each, in the fastest batch size) and extrapolating linearly; the one-off start-up "
    "(process spawn, imports, compiling the simulator) is added once.",
    "",
]


def write_markdown(result: dict[str, Any], path: Path, command: str) -> None:
    from transferlab.platform.io import atomic_write_text

    text = "\n".join(
        [
            "# Simulator speed: customer-days per second",
            "",
            f"`{command}`, {result['date']}. Raw numbers: `{path.with_suffix('.json').name}`.",
            "",
            render(result),
            "",
            *NOTES,
        ]
    )
    atomic_write_text(path, text)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke sizes (seconds; for tests)")
    p.add_argument("--json", type=Path, help="also write the result as JSON here")
    p.add_argument("--markdown", type=Path, help="also write the tables as Markdown here, with the command")
    p.add_argument("--simulator", help="a saved learned simulator directory (default: fit one on new logs)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = SpeedConfig.quick() if args.quick else SpeedConfig()
    if args.simulator:
        cfg = dataclasses.replace(cfg, simulator=args.simulator, quick_params=False)
    result = run(cfg, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(render(result))
    command = shlex.join(
        [".venv/bin/python", "benchmarks/simulator_speed.py", *(sys.argv[1:] if argv is None else argv)]
    )
    if args.json:
        from transferlab.platform.io import atomic_write_json

        atomic_write_json(args.json, result | {"command": command})
    if args.markdown:
        write_markdown(result, args.markdown, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())

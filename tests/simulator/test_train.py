"""PPO in the campaign simulator: learns a toy market, is deterministic, resumes exactly, evaluates."""

from __future__ import annotations

import math
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from transferlab.platform.config import ConfigError
from transferlab.platform.metrics import MemoryLogger
from transferlab.simulator.envs.campaign import EpisodeConfig, WorldMarket
from transferlab.simulator.logs import Logs
from transferlab.simulator.train import (
    CampaignPolicy,
    PolicyActor,
    SimTrainConfig,
    train_in_simulator,
    train_policy,
)
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, OBS_KEYS

REWARDED = 7


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny networks: more threads only fight the other tests for the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class OneGoodAction:
    """A toy batched market (the ``BatchMarket`` interface): profit $100 on days action 7 is taken."""

    def __init__(self, n_envs: int, good: int = REWARDED) -> None:
        self.n_envs, self.good, self.day = n_envs, good, 0

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.day = 0
        return self.observe()

    def step(self, actions: np.ndarray) -> np.ndarray:
        self.day += 1
        out = np.zeros((self.n_envs, len(DAY_KEYS)))
        out[:, DAY_KEYS.index("profit")] = 100.0 * (np.asarray(actions) == self.good)
        return out

    def observe(self) -> np.ndarray:
        obs = np.zeros((self.n_envs, len(OBS_KEYS)))
        obs[:, OBS_KEYS.index("weekday")] = self.day % 7
        return obs


def toy_config(**overrides: object) -> SimTrainConfig:
    base: dict[str, object] = {
        "n_envs": 32,
        "max_minutes": None,
        "max_episodes": 32 * 30,
        "minibatch_size": 64,
        "lr": 3e-3,
        "episode": EpisodeConfig(horizon=4, warmup_days=0, settle_days=0),
    }
    return SimTrainConfig.build(**{**base, **overrides})


def test_learns_the_rewarded_action() -> None:
    config = toy_config()
    out = train_policy(OneGoodAction(config.n_envs), config)
    returns = [h["rollout/return"] for h in out.history]
    assert out.iterations == 30 and out.episodes == 30 * 32
    assert np.mean(returns[-3:]) > 3.0  # 4 days x reward 1 at best; uniform random gets 4/151
    with torch.no_grad():
        logits, _ = out.policy(torch.zeros(5, len(OBS_KEYS) + 1))
    assert (logits.argmax(-1) == REWARDED).all()
    actor = PolicyActor(out.policy, greedy=True)
    assert actor(np.zeros((3, len(OBS_KEYS) + 1)), np.random.default_rng(0)).tolist() == [REWARDED] * 3


def test_parameters_change_after_one_update_and_a_penalty_is_charged() -> None:
    config = toy_config(max_episodes=32, action_penalty=1.0)
    torch.manual_seed(config.seed)
    before = {k: v.clone() for k, v in CampaignPolicy(config.hidden).state_dict().items()}
    logged = np.full(len(CATALOG), 1e-4)
    logged[0] = 1.0 - logged[1:].sum()  # only "no campaign" is common in these logs
    out = train_policy(OneGoodAction(config.n_envs), config, logged_probs=logged)
    after = out.policy.state_dict()
    changed = [
        k for k in before if k.startswith(("actor", "critic")) and not torch.equal(before[k], after[k])
    ]
    assert {k.split(".")[0] for k in changed} == {"actor", "critic"}
    assert out.history[0]["rollout/penalty"] > 0 and out.history[0]["rollout/penalised_rate"] > 0
    assert out.history[0]["rollout/campaign_rate"] < 0.5  # the actor starts at the logged frequencies


def test_kl_coef_charges_the_kl_to_the_logged_actions() -> None:
    config = toy_config(max_episodes=32, action_penalty=0.0, kl_coef=0.5, init_from_logs=False)
    logged = np.full(len(CATALOG), 0.5 / (len(CATALOG) - 1))
    logged[0] = 0.5
    out = train_policy(OneGoodAction(config.n_envs), config, logged_probs=logged)
    h = out.history[0]
    # the policy starts near uniform while the logs put half their mass on action 0
    assert h["rollout/kl_logged"] > 0
    assert h["rollout/penalty"] == pytest.approx(
        0.5 * h["rollout/kl_logged"] * config.episode.horizon, rel=1e-5
    )


def test_same_seed_same_result_and_another_seed_differs() -> None:
    config = toy_config(max_episodes=64)
    a = train_policy(OneGoodAction(32), config)
    b = train_policy(OneGoodAction(32), config)
    c = train_policy(OneGoodAction(32), toy_config(max_episodes=64, seed=1))
    for k, v in a.policy.state_dict().items():
        assert torch.equal(v, b.policy.state_dict()[k])
    assert [h["loss/policy"] for h in a.history] == [h["loss/policy"] for h in b.history]
    key = "actor.0.weight"
    assert not torch.equal(a.policy.state_dict()[key], c.policy.state_dict()[key])


def test_resume_continues_exactly(tmp_path: Path) -> None:
    config = toy_config(max_episodes=4 * 32, checkpoint_every=1)
    whole = train_policy(OneGoodAction(32), config)
    logger = MemoryLogger()
    ckpt = tmp_path / "checkpoint.pt"
    first = train_policy(OneGoodAction(32), config, checkpoint=ckpt, logger=logger, stop_after=2)
    assert first.iterations == 2
    rest = train_policy(OneGoodAction(32), config, checkpoint=ckpt, logger=logger, resume=True)
    assert rest.iterations == 4
    for k, v in whole.policy.state_dict().items():
        assert torch.equal(v, rest.policy.state_dict()[k]), k
    assert logger.series("loss/policy").tolist() == [h["loss/policy"] for h in whole.history]


def test_config_needs_a_budget_and_checks_the_market() -> None:
    with pytest.raises(ConfigError, match="max_minutes or max_episodes"):
        SimTrainConfig(max_minutes=None)
    with pytest.raises(ValueError, match="n_envs"):
        train_policy(OneGoodAction(4), toy_config())


def test_time_budget_stops_training() -> None:
    config = toy_config(max_episodes=None, max_minutes=0.001)
    out = train_policy(OneGoodAction(32), config)
    assert 1 <= out.iterations < 30


class WorldAsSimulator:
    """A 'perfect simulator' test double: its markets are the world that made the logs, continuing
    after them (exactly what the evaluation in the world runs)."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest

    def market(self, n_envs: int, n_customers: int, seed: int) -> WorldMarket:
        assert n_customers == self.manifest["world"]["n_customers"]
        return WorldMarket.from_manifest(self.manifest, n_envs=n_envs, seed=seed)


@pytest.fixture(scope="module")
def tiny_logs() -> Logs:
    from transferlab.simulator.logs import LogSpec, generate_logs
    from transferlab.simulator.world_config import WorldConfig

    return generate_logs(LogSpec(days=40, world=WorldConfig(n_customers=200)))


def test_train_in_simulator_writes_the_run_and_the_table(tiny_logs: Logs, tmp_path: Path) -> None:

    config = SimTrainConfig(
        n_envs=4,
        max_minutes=None,
        max_episodes=8,
        eval_episodes=4,
        minibatch_size=16,
        episode=EpisodeConfig(horizon=5, warmup_days=2, settle_days=2),
    )
    logger = MemoryLogger()
    messages: list[str] = []
    result = train_in_simulator(
        WorldAsSimulator(tiny_logs.manifest),
        tiny_logs,
        config,
        run_dir=tmp_path,
        logger=logger,
        progress=lambda message, fraction: messages.append(message),
    )
    assert [r.policy for r in result.values] == ["trained", "trained_sampled", "marketer", "no_campaign"]
    nothing = result.value("no_campaign")
    # the simulator is the world here: doing nothing on the same seeds gives the same returns
    np.testing.assert_allclose(nothing.sim_returns, nothing.world_returns)
    assert nothing.gap.estimate == pytest.approx(0.0, abs=1e-9)
    assert result.iterations == 2 and result.episodes == 8
    for name in ("checkpoint.pt", "policy.pt", "result.json", "report.md", "report.html"):
        assert (tmp_path / name).exists(), name
    reloaded = CampaignPolicy.load(tmp_path / "policy.pt")
    for k, v in result.policy.state_dict().items():
        assert torch.equal(v, reloaded.state_dict()[k])
    logged_keys = set(logger.keys())
    assert {"eval/world/trained/return", "rollout/return", "eval/gap/trained"} <= logged_keys
    assert any("world" in m for m in messages)
    table = result.format_table()
    assert "sim-to-real gap" in table and "marketer" in table
    assert result.to_dict()["sim_to_real_gap"]["estimate"] == result.value("trained").gap.estimate


def _tiny_run_config(path: Path) -> Path:
    config = SimTrainConfig(
        n_envs=4,
        eval_episodes=4,
        minibatch_size=16,
        episode=EpisodeConfig(horizon=5, warmup_days=2, settle_days=2),
    )
    config.save(path)
    return path


def test_sim_train_command_end_to_end(tiny_logs: Logs, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from transferlab.cli import app
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import write_logs

    write_logs(tiny_logs, tmp_path / "logs")
    LearnedSimulator.fit(tiny_logs).save(tmp_path / "sim")
    run_dir = tmp_path / "runs" / "sim-train" / "tiny"
    args = ["sim", "train", "--simulator", str(tmp_path / "sim"), "--logs", str(tmp_path / "logs")]
    args += ["--config", str(_tiny_run_config(tmp_path / "cfg.json")), "--episodes", "8"]
    res = CliRunner().invoke(app, [*args, "--run-dir", str(run_dir), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(summary["values"]) == {"trained", "trained_sampled", "marketer", "no_campaign"}
    assert summary["episodes"] == 8 and summary["run_dir"] == str(run_dir)
    for name in ("config.json", "meta.json", "metrics.parquet", "policy.pt", "result.json", "report.md"):
        assert (run_dir / name).exists(), name
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"
    saved = SimTrainConfig.from_file(run_dir / "config.json")
    assert saved.max_episodes == 8 and saved.max_minutes is None and saved.n_envs == 4
    # a finished run is not trained again; a missing simulator or bad budget is bad input (exit 2)
    again = CliRunner().invoke(app, [*args, "--run-dir", str(run_dir)])
    assert again.exit_code == 2 and "finished run" in again.output
    bad_root = tmp_path / "bad-runs"
    bad = CliRunner().invoke(
        app,
        ["sim", "train", "--simulator", str(tmp_path / "nope"), "--logs", "x", "--runs-root", str(bad_root)],
    )
    assert bad.exit_code == 2 and "error:" in bad.output
    assert not bad_root.exists()  # checked before any run directory is made
    bad = CliRunner().invoke(app, [*args[:6], "--episodes", "0", "--runs-root", str(tmp_path / "r")])
    assert bad.exit_code == 2 and "max_episodes" in bad.output


def test_open_train_run_resumes_an_unfinished_run(tmp_path: Path) -> None:
    from transferlab.simulator.train import open_train_run

    config = toy_config()
    run, resume = open_train_run(config, tmp_path / "exp" / "r1", tmp_path)
    assert not resume and run.dir == tmp_path / "exp" / "r1" and run.status == "running"
    again, resume = open_train_run(SimTrainConfig(), run.dir, tmp_path)
    assert resume and again.load_config(SimTrainConfig) == config
    with pytest.raises(ValueError, match="saved config"):
        open_train_run(config, run.dir, tmp_path, options_given=True)
    fresh, resume = open_train_run(config, None, tmp_path / "root")
    assert not resume and fresh.dir.parent == tmp_path / "root" / "sim-train"


SIM_CHILD = """
import sys
from pathlib import Path
import torch
from transferlab.simulator.envs.campaign import EpisodeConfig, WorldMarket
from transferlab.simulator.train import CHECKPOINT_FILE, SimTrainConfig, open_train_run, train_policy
from transferlab.simulator.world_config import WorldConfig

torch.set_num_threads(1)
run_dir = Path(sys.argv[1])
config = SimTrainConfig.from_file(sys.argv[2])
run, resume = open_train_run(config, run_dir, run_dir.parent.parent)
market = WorldMarket(WorldConfig(n_customers=50), n_envs=config.n_envs)
with run:
    train_policy(
        market, run.load_config(SimTrainConfig), logger=run.logger, checkpoint=run.dir / CHECKPOINT_FILE,
        resume=resume, progress=lambda message, fraction: print("iteration", flush=True),
    )
"""
"""``transferlab sim train``'s run handling and trainer on a small world; one line per iteration."""


def _small_world_config() -> SimTrainConfig:
    return SimTrainConfig(
        n_envs=4,
        max_minutes=None,
        max_episodes=4 * 12,
        minibatch_size=16,
        checkpoint_every=3,
        episode=EpisodeConfig(horizon=5, warmup_days=0, settle_days=0),
    )


@pytest.mark.slow
def test_sim_training_killed_twice_and_resumed_logs_each_iteration_once(tmp_path: Path) -> None:
    from transferlab.platform.metrics import read_metrics
    from transferlab.platform.runstore import Run
    from transferlab.simulator.world_config import WorldConfig

    config = _small_world_config()
    whole = train_policy(WorldMarket(WorldConfig(n_customers=50), n_envs=4), config, logger=MemoryLogger())
    script, cfg = tmp_path / "child.py", tmp_path / "cfg.json"
    script.write_text(SIM_CHILD)
    config.save(cfg)
    run_dir = tmp_path / "runs" / "sim-train" / "killed"
    command = [sys.executable, str(script), str(run_dir), str(cfg)]
    rng = random.Random(7)
    for lines in (rng.randint(2, 5), rng.randint(1, 3)):  # SIGKILL after that many iterations (+ a bit)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        for _ in range(lines):
            assert proc.stdout.readline() == b"iteration\n"
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        assert Run(run_dir).status == "interrupted"
    done = subprocess.run(
        [sys.executable, str(script), str(run_dir), str(cfg)], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]

    metrics = read_metrics(run_dir / "metrics.parquet")
    assert not metrics.duplicated(["step", "key"]).any()
    assert sorted(set(metrics["step"])) == list(range(12))
    for step, row in enumerate(whole.history):
        logged = metrics[metrics["step"] == step].set_index("key")["value"]
        expected = {k: v for k, v in row.items() if math.isfinite(v)}
        assert set(logged.index) == set(expected), step
        for key, value in expected.items():
            if not key.startswith("time/"):  # wall-clock timings differ between runs
                assert logged[key] == value, (step, key)
    meta = Run(run_dir).meta
    assert meta["status"] == "finished" and len(meta["resumed_at"]) == 2


def test_sim_train_refuses_a_run_another_process_owns(tmp_path: Path, tiny_logs: Logs) -> None:
    from typer.testing import CliRunner

    from transferlab.cli import app
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import write_logs
    from transferlab.simulator.train import open_train_run

    write_logs(tiny_logs, tmp_path / "logs")
    LearnedSimulator.fit(tiny_logs).save(tmp_path / "sim")

    run_dir = tmp_path / "runs" / "sim-train" / "busy"
    run, _ = open_train_run(_small_world_config(), run_dir, tmp_path / "runs")
    run.release()
    hold = "import sys, time\nfrom transferlab.platform.runstore import Run\nRun(sys.argv[1]).acquire()\n"
    hold += "print('holding', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", hold, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        args = ["sim", "train", "--simulator", str(tmp_path / "sim"), "--logs", str(tmp_path / "logs")]
        res = CliRunner().invoke(app, [*args, "--run-dir", str(run_dir)])
    finally:
        proc.kill()
        proc.wait()
    assert res.exit_code == 2, res.output
    assert f"error: run {run_dir.resolve()} is in use by pid {proc.pid}" in res.output
    assert res.output.count("error:") == 1

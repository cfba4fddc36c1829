"""Train a campaign policy in the learned simulator with PPO, then judge it in the world.

Why our own PPO and not d3rlpy's online DQN/SAC: d3rlpy's online algorithms step one
``gymnasium.Env`` one transition at a time, while the learned simulator is fast only batched (one
numpy call steps 64-256 markets). This compact PPO (cleanrl's ``ppo.py`` shape) collects
``n_envs`` whole episodes per iteration in one batched call per day, and its math lives in pure,
hand-tested functions (:mod:`transferlab.simulator.ppo`).

One iteration, top to bottom (:func:`train_policy`)::

    obs = env.reset(seed(iteration))                  # n_envs fresh simulated markets, after warm-up
    for day in range(horizon):                        # every episode ends on the same day
        action ~ pi(obs); obs, reward = env.step(action)
        reward -= action_penalty(action)              # rarely-logged actions cost reward (see below)
    advantages, targets = gae(rewards, values)        # no bootstrap past the last (settlement) day
    for epoch, minibatch: clipped policy loss + value loss - entropy bonus; Adam step
    log, checkpoint

**Policy.** An MLP over fixed features of the observation (:func:`~transferlab.simulator.ppo.obs_features`:
weekday one-hot, ``sign(x) log1p|x|`` of counts and money, standardised by mean/std of the logs'
contexts) gives logits over the 151 catalog actions; a separate MLP critic predicts the return
standardised by the first rollout's return mean/std. The actor's output bias starts at the log of
the logged action frequencies (``init_from_logs``), so training starts from the marketer's habits
rather than from uniform random campaigns, which lose money.

**Action penalty** (Virtual-Taobao's spirit). A learned simulator is only right where the logs have
data; a policy trained in it will find and exploit its errors elsewhere. The training reward loses
``action_penalty * max(0, log(penalty_min_prob) - log p_logged(a))`` per action, where
``p_logged`` is the logged action distribution (counts shrunk toward a per-attribute estimate:
:func:`~transferlab.simulator.ppo.behaviour_action_probs`). The default floor is ``1/151``: actions
the logs took less often than a uniformly random marketer would have pay ``action_penalty`` per
nat below that. ``kl_coef`` is the softer variant: a KL(policy || logged actions) charge that also
holds back campaign frequency. Evaluation reports the unpenalised return.

Both are off by default, on evidence: with the simulator fitted on a year of logs (2,000 customers,
a stand-in customer prior before the CDNOW one), 3-minute runs, 2 seeds each, ``action_penalty=0.5``
lowered the trained policy's world value (86.2 vs 89.8 reward units on average) while the policy
without it beat the marketer by 7.7 and 11.8. That simulator shares offer effects across actions, so
the rarely logged ones are not where it errs. Turn the penalty on for simulators that fit each
action from its own few rows. With the CDNOW prior and defaults, 3 minutes (about 36,000 simulated
episodes) gave world values of 91.5 and 87.2 (2 seeds) against the marketer's 80.4 and no
campaign's 83.8.

**Evaluation.** The trained policy (``trained``: its most likely action in each state, as SB3's
``evaluate_policy(deterministic=True)``; ``trained_sampled``: actions sampled as in training), the
behaviour policy (:class:`~transferlab.simulator.policies.Marketer`) and ``no_campaign`` run
``eval_episodes`` episodes in the simulator and in the ground-truth world: the world that made the
logs, continuing after the logged year (``WorldMarket.from_manifest``: the same history, different
futures), which is the market the simulator was fitted to continue; on evaluation seeds disjoint
from training. The table gives each value with a 95%
bootstrap interval, and the sim-to-real gap (sim value - world value). The headline gap and the
gain over the marketer are those of ``trained``.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self, cast

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_bytes, atomic_write_json
from transferlab.platform.metrics import MetricsLogger, drop_logged_after
from transferlab.platform.runstore import Run, RunStore
from transferlab.platform.stats import Interval, bootstrap_ci, bootstrap_diff_ci
from transferlab.simulator.envs.campaign import (
    BatchMarket,
    CampaignVectorEnv,
    EpisodeConfig,
    RewardConfig,
    WorldMarket,
    run_policy,
)
from transferlab.simulator.logs import Logs
from transferlab.simulator.ppo import (
    FEATURE_DIM,
    FeatureScaler,
    action_penalty,
    behaviour_action_probs,
    categorical,
    explained_variance,
    gae,
    kl_penalty,
    obs_features,
    ppo_loss,
    whiten,
)
from transferlab.simulator.vocabulary import CATALOG

CHECKPOINT_FILE = "checkpoint.pt"
POLICY_FILE = "policy.pt"
RESULT_FILE = "result.json"
RUN_EXPERIMENT = "sim-train"
N_ACTIONS = len(CATALOG)
EVAL_SEED_OFFSET = 2**31
"""Evaluation market seeds start here; training seeds stay below, so they never meet."""

Progress = Callable[[str, float], None]
"""``progress(message, fraction_done)``: training and evaluation report here (e.g. a progress bar)."""


class SimTrainConfig(BaseConfig):
    """PPO in the campaign simulator and the evaluation after it (saved as config.json in the run)."""

    seed: int = Field(0, ge=0, description="Seeds the network init, action sampling and training markets.")
    n_envs: int = Field(128, ge=2, le=4096, description="Simulated markets per iteration (whole episodes).")
    n_customers: int | None = Field(
        None,
        ge=10,
        description="Customers per simulated market; None = the logs' world size (money then has the "
        "world's scale, so sim and world values compare).",
    )
    max_minutes: float | None = Field(
        3.0, gt=0, description="Training wall-time budget in minutes (checked after each iteration)."
    )
    max_episodes: int | None = Field(
        None,
        ge=1,
        description="Training budget in simulated episodes (rounded up to whole iterations); with it and "
        "max_minutes=None a run is exactly reproducible.",
    )
    lr: float = Field(1e-3, gt=0, description="Adam learning rate of actor and critic.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount per day (1: the episode's total profit).")
    gae_lambda: float = Field(0.9, ge=0, le=1, description="GAE lambda (bias-variance of advantages).")
    clip: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip epsilon.")
    ent_coef: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    vf_coef: float = Field(0.5, ge=0, description="Weight of the (standardised) value loss.")
    epochs: int = Field(4, ge=1, description="Optimizer passes over each iteration's transitions.")
    minibatch_size: int = Field(512, ge=1, description="Transitions per gradient step.")
    hidden: int = Field(64, ge=4, le=4096, description="Width of the two hidden layers of actor and critic.")
    max_grad_norm: float = Field(
        0.5, gt=0, description="Gradient-norm clip, applied to actor and critic apart."
    )
    init_from_logs: bool = Field(
        True, description="Start the actor's logits at the logged action frequencies (else near uniform)."
    )
    action_penalty: float = Field(
        0.0,
        ge=0,
        description="Reward lost per nat an action's logged probability is below penalty_min_prob "
        "(reward units, after RewardConfig.scale); 0 (default) turns the penalty off, 0.5 is a firm one.",
    )
    penalty_min_prob: float = Field(
        1.0 / N_ACTIONS,
        gt=0,
        le=1,
        description="Logged probability below which an action is penalised (default 1/151: rarer than a "
        "uniformly random choice).",
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of KL(policy || logged action distribution) taken off the training reward "
        "(reward units per nat); 0 turns it off.",
    )
    penalty_prior: float = Field(
        20.0,
        ge=0,
        description="Pseudo-rows of the per-attribute estimate the logged action counts are shrunk toward.",
    )
    eval_episodes: int = Field(64, ge=2, le=4096, description="Evaluation episodes per policy and market.")
    eval_seed: int = Field(0, ge=0, description="Seed of the evaluation markets (disjoint from training).")
    eval_sampled: bool = Field(
        True, description="Also evaluate the trained policy sampling its actions (as in training)."
    )
    checkpoint_every: int = Field(
        10, ge=0, description="Iterations between checkpoints; 0 = only at the end."
    )
    torch_threads: int = Field(1, ge=1, description="torch.set_num_threads for the run.")
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig, description="Episode shape (horizon...).")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Outcome weights and scale.")

    @model_validator(mode="after")
    def _some_budget(self) -> Self:
        if self.max_minutes is None and self.max_episodes is None:
            raise ValueError("set max_minutes or max_episodes (or both): training needs a budget")
        return self

    def iterations(self) -> int | None:
        """Iterations the episode budget allows (None: only the time budget)."""
        return None if self.max_episodes is None else math.ceil(self.max_episodes / self.n_envs)


# --------------------------------------------------------------------------------------------- policy


def _layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class CampaignPolicy(nn.Module):
    """Actor (logits over the catalog) and critic (standardised return) MLPs over scaled features."""

    feat_mean: Tensor
    feat_std: Tensor
    value_mean: Tensor
    value_std: Tensor

    def __init__(self, hidden: int = 64, scaler: FeatureScaler | None = None) -> None:
        super().__init__()
        scaler = scaler or FeatureScaler.identity()
        self.hidden = hidden
        self.register_buffer("feat_mean", torch.as_tensor(scaler.mean, dtype=torch.float32))
        self.register_buffer("feat_std", torch.as_tensor(scaler.std, dtype=torch.float32))
        self.register_buffer("value_mean", torch.zeros(()))
        self.register_buffer("value_std", torch.ones(()))
        root2 = math.sqrt(2.0)
        self.actor = nn.Sequential(
            _layer(FEATURE_DIM, hidden, root2),
            nn.Tanh(),
            _layer(hidden, hidden, root2),
            nn.Tanh(),
            _layer(hidden, N_ACTIONS, 0.01),
        )
        self.critic = nn.Sequential(
            _layer(FEATURE_DIM, hidden, root2),
            nn.Tanh(),
            _layer(hidden, hidden, root2),
            nn.Tanh(),
            _layer(hidden, 1, 1.0),
        )

    def set_logit_prior(self, probs: np.ndarray) -> None:
        """Start the actor at ``probs`` (its output bias = log probs; the weights are near zero)."""
        with torch.no_grad():
            cast(nn.Linear, self.actor[-1]).bias.copy_(torch.as_tensor(np.log(probs), dtype=torch.float32))

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Logits ``(n, 151)`` and standardised values ``(n,)`` of raw observations ``(n, OBS_DIM)``."""
        x = ((obs_features(obs) - self.feat_mean) / self.feat_std).clamp(-5.0, 5.0)
        return self.actor(x), self.critic(x).squeeze(-1)

    def to_raw_value(self, value: Tensor) -> Tensor:
        """A standardised value in reward units."""
        return value * self.value_std + self.value_mean

    def save(self, path: str | Path) -> Path:
        """Atomically write the weights and the width (everything :meth:`load` needs)."""
        buffer = io.BytesIO()
        torch.save({"hidden": self.hidden, "state": self.state_dict()}, buffer)
        return atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> CampaignPolicy:
        """A policy saved by :meth:`save`."""
        saved = torch.load(path, weights_only=True)
        policy = cls(int(saved["hidden"]))
        policy.load_state_dict(saved["state"])
        return policy.eval()


@dataclass
class PolicyActor:
    """A trained policy as a batched campaign policy ``(obs, rng) -> actions`` (see ``policies``)."""

    net: CampaignPolicy
    greedy: bool = False

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        with torch.no_grad():
            logits, _ = self.net(torch.as_tensor(obs, dtype=torch.float32))
        if self.greedy:
            return logits.argmax(-1).numpy().astype(np.int64)
        probs = torch.softmax(logits.double(), -1).numpy()
        u = rng.random((len(obs), 1))
        return np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), N_ACTIONS - 1).astype(np.int64)


# -------------------------------------------------------------------------------------------- rollout


@dataclass
class Rollout:
    """One iteration's ``n_envs`` episodes as ``(T, N, ...)`` tensors (rewards net of the penalty)."""

    obs: Tensor
    actions: Tensor
    logp: Tensor
    values: Tensor
    rewards: Tensor
    env_returns: np.ndarray
    penalties: np.ndarray


def collect(
    env: CampaignVectorEnv,
    policy: CampaignPolicy,
    seed: int,
    generator: torch.Generator,
    penalty: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Rollout:
    """Run ``env.num_envs`` whole episodes with actions sampled from ``policy``."""
    obs_np, _ = env.reset(seed=seed)
    steps: list[tuple[Tensor, Tensor, Tensor, Tensor, np.ndarray, np.ndarray]] = []
    done = False
    while not done:
        obs = torch.as_tensor(obs_np, dtype=torch.float32)
        with torch.no_grad():
            logits, value = policy(obs)
            action = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)
            logp, _ = categorical(logits, action)
        actions_np = action.numpy()
        obs_np, reward, _, truncated, _ = env.step(actions_np)
        cost = penalty(actions_np, logp.numpy())
        steps.append((obs, action, logp, value, reward, cost))
        done = bool(truncated.all())
    obs_t, act_t, logp_t, val_t, rew, cost = zip(*steps, strict=True)
    rewards, costs = np.stack(rew), np.stack(cost)
    return Rollout(
        obs=torch.stack(obs_t),
        actions=torch.stack(act_t),
        logp=torch.stack(logp_t),
        values=policy.to_raw_value(torch.stack(val_t)),
        rewards=torch.as_tensor(rewards - costs, dtype=torch.float32),
        env_returns=rewards.sum(axis=0),
        penalties=costs.sum(axis=0),
    )


# --------------------------------------------------------------------------------------------- update


def update(
    policy: CampaignPolicy,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    config: SimTrainConfig,
    generator: torch.Generator,
) -> dict[str, float]:
    """GAE, then ``epochs`` passes of clipped-PPO minibatch steps; returns the update's metrics."""
    advantages, targets = gae(batch.rewards, batch.values, config.gamma, config.gae_lambda)
    obs, actions = batch.obs.flatten(0, 1), batch.actions.flatten()
    old_logp, adv = batch.logp.flatten(), advantages.flatten()
    norm_targets = ((targets - policy.value_mean) / policy.value_std).flatten()
    n = len(actions)
    terms: list[tuple[float, float, float, float]] = []
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.minibatch_size):
            idx = order[start : start + config.minibatch_size]
            logits, values = policy(obs[idx])
            new_logp, entropy = categorical(logits, actions[idx])
            loss = ppo_loss(
                new_logp,
                old_logp[idx],
                whiten(adv[idx]),
                entropy,
                values,
                norm_targets[idx],
                clip=config.clip,
                vf_coef=config.vf_coef,
                ent_coef=config.ent_coef,
            )
            optimizer.zero_grad()
            loss.loss.backward()
            actor_norm = nn.utils.clip_grad_norm_(policy.actor.parameters(), config.max_grad_norm)
            nn.utils.clip_grad_norm_(policy.critic.parameters(), config.max_grad_norm)
            optimizer.step()
            terms.append(
                (loss.policy_loss.item(), loss.value_loss.item(), float(loss.clip_frac), float(actor_norm))
            )
    mean = np.mean(terms, axis=0)
    with torch.no_grad():
        _, values = policy(obs)
    return {
        "loss/policy": float(mean[0]),
        "loss/value": float(mean[1]),
        "train/entropy": loss.entropy.item(),
        "train/approx_kl": float(loss.approx_kl),
        "train/clip_frac": float(mean[2]),
        "train/grad_norm": float(mean[3]),
        "train/explained_variance": explained_variance(values, norm_targets),
    }


# ---------------------------------------------------------------------------------------------- train


@dataclass
class TrainedPolicy:
    """What :func:`train_policy` returns."""

    policy: CampaignPolicy
    history: list[dict[str, float]]
    iterations: int
    episodes: int
    seconds: float


def rollout_seed(config: SimTrainConfig, iteration: int) -> int:
    """The training markets' seed of an iteration (a function of seed and iteration only)."""
    return int(np.random.SeedSequence([config.seed, iteration]).generate_state(1)[0]) % EVAL_SEED_OFFSET


def _save_checkpoint(path: Path, iteration: int, seconds: float, policy: nn.Module, opt: Any) -> None:
    buffer = io.BytesIO()
    state = {
        "iteration": iteration,
        "seconds": seconds,
        "policy": policy.state_dict(),
        "optimizer": opt.state_dict(),
    }
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def _checkpoint(
    path: Path, iteration: int, seconds: float, policy: nn.Module, opt: Any, logger: MetricsLogger | None
) -> None:
    """Flush the metrics up to ``iteration``, then save the checkpoint (in that order: exact resume)."""
    if logger is not None:
        logger.flush()
    _save_checkpoint(path, iteration, seconds, policy, opt)


def train_policy(
    market: BatchMarket,
    config: SimTrainConfig,
    *,
    scaler: FeatureScaler | None = None,
    logged_probs: np.ndarray | None = None,
    logger: MetricsLogger | None = None,
    progress: Progress | None = None,
    checkpoint: Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> TrainedPolicy:
    """PPO on ``market`` (``config.n_envs`` markets) until the episode or time budget is spent.

    ``logged_probs`` (the logged action distribution) drives ``init_from_logs`` and the action
    penalty; without it neither applies. ``checkpoint`` is written every ``checkpoint_every``
    iterations and at the end; with ``resume=True`` training continues after the saved iteration
    (with an episode budget, exactly as if it had not stopped). ``stop_after`` ends the call after
    that many iterations (to simulate a kill in tests). Metrics are logged per iteration.
    """
    if market.n_envs != config.n_envs:
        raise ValueError(f"the market steps {market.n_envs} envs but config.n_envs={config.n_envs}")
    torch.manual_seed(config.seed)
    policy = CampaignPolicy(config.hidden, scaler)
    if logged_probs is not None and config.init_from_logs:
        policy.set_logit_prior(logged_probs)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, eps=1e-5)
    log_p = np.log(logged_probs) if logged_probs is not None else np.zeros(N_ACTIONS)
    coef = config.action_penalty if logged_probs is not None else 0.0
    kl_coef = config.kl_coef if logged_probs is not None else 0.0

    def penalty(actions: np.ndarray, logp: np.ndarray) -> np.ndarray:
        cost = action_penalty(actions, log_p, coef, config.penalty_min_prob)
        return cost + kl_penalty(logp, log_p, actions, kl_coef) if kl_coef else cost

    env = CampaignVectorEnv(market, config.episode, config.reward)
    start, seconds_before = 0, 0.0
    if resume and checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=True)
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        start, seconds_before = int(state["iteration"]) + 1, float(state["seconds"])
    if resume:  # rows after the checkpoint (all, without one) are logged again below
        drop_logged_after(logger, start - 1)
    max_iterations = config.iterations()
    budget_s = config.max_minutes * 60.0 if config.max_minutes is not None else math.inf
    t_start = time.perf_counter()
    history: list[dict[str, float]] = []
    it = start
    while max_iterations is None or it < max_iterations:
        elapsed = seconds_before + time.perf_counter() - t_start
        if elapsed >= budget_s or (stop_after is not None and it - start >= stop_after):
            break
        t0 = time.perf_counter()
        generator = torch.Generator().manual_seed(rollout_seed(config, it))
        # 1. n_envs whole episodes in the simulator, actions from the current policy
        batch = collect(env, policy, rollout_seed(config, it), generator, penalty)
        if it == 0:  # the critic predicts returns standardised by the first rollout's
            returns = batch.rewards.flip(0).cumsum(0).flip(0)
            policy.value_mean.fill_(float(returns.mean()))
            policy.value_std.fill_(max(float(returns.std()), 1e-3))
            batch.values = policy.to_raw_value(batch.values)  # sampled with mean 0, std 1
        t_roll = time.perf_counter()
        # 2. advantages and the clipped update
        metrics = update(policy, optimizer, batch, config, generator)
        t_end = time.perf_counter()
        # 3. log and checkpoint
        actions = batch.actions.numpy()
        metrics.update(
            {
                "rollout/return": float(batch.env_returns.mean()),
                "rollout/penalty": float(batch.penalties.mean()),
                "rollout/campaign_rate": float(np.mean(actions != 0)),
                "rollout/penalised_rate": float(np.mean(log_p[actions] < math.log(config.penalty_min_prob))),
                "rollout/kl_logged": float((batch.logp.numpy() - log_p[actions]).mean()),
                "rollout/distinct_actions": float(len(np.unique(actions))),
                "env/episodes": float((it + 1) * config.n_envs),
                "time/rollout_s": t_roll - t0,
                "time/update_s": t_end - t_roll,
                "time/env_steps_per_s": actions.size / max(t_roll - t0, 1e-9),
            }
        )
        history.append(metrics)
        if logger is not None:
            logger.log(it, {k: v for k, v in metrics.items() if math.isfinite(v)})
        elapsed = seconds_before + time.perf_counter() - t_start
        every = config.checkpoint_every
        if checkpoint is not None and every and (it + 1) % every == 0:
            _checkpoint(checkpoint, it, elapsed, policy, optimizer, logger)
        if progress is not None:  # the share of whichever budget runs out first
            done = max(elapsed / budget_s, (it + 1) / max_iterations if max_iterations else 0.0)
            progress(f"training: return {metrics['rollout/return']:.1f}", min(done, 1.0))
        it += 1
    seconds = seconds_before + time.perf_counter() - t_start
    if checkpoint is not None and it > start:
        _checkpoint(checkpoint, it - 1, seconds, policy, optimizer, logger)
    return TrainedPolicy(policy.eval(), history, it, it * config.n_envs, seconds)


# ----------------------------------------------------------------------------------------- evaluation


class Simulator(Protocol):
    """A learned simulator (``LearnedSimulator``): makes batched markets like :class:`WorldMarket`."""

    def market(self, n_envs: int, n_customers: int, seed: int) -> BatchMarket:
        """``n_envs`` simulated markets of ``n_customers`` customers each."""
        ...


@dataclass(frozen=True)
class PolicyValue:
    """One policy's value (mean episode return, 95% bootstrap interval) in the simulator and the world."""

    policy: str
    sim: Interval
    world: Interval
    gap: Interval
    """sim - world (unpaired): how much the simulator flatters (positive) or sells short this policy."""
    sim_returns: np.ndarray = field(repr=False)
    world_returns: np.ndarray = field(repr=False)


@dataclass
class TrainResult:
    """What :func:`train_in_simulator` returns: the trained policy and the evaluation table."""

    config: SimTrainConfig
    policy: CampaignPolicy
    values: list[PolicyValue]
    world_gain: Interval
    """World value of the trained (sampled) policy minus the marketer's, paired by market seed."""
    iterations: int
    episodes: int
    train_seconds: float
    eval_seconds: float
    history: list[dict[str, float]] = field(repr=False)
    run_dir: Path | None = None

    def value(self, policy: str) -> PolicyValue:
        """The row of ``policy`` (``trained``, ``trained_sampled``, ``marketer``, ``no_campaign``)."""
        for row in self.values:
            if row.policy == policy:
                return row
        raise KeyError(f"no policy {policy!r} in the table; have {[r.policy for r in self.values]}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (written as ``result.json``)."""

        def iv(x: Interval) -> dict[str, float]:
            return {"estimate": x.estimate, "low": x.low, "high": x.high, "n": x.n}

        return {
            "iterations": self.iterations,
            "episodes": self.episodes,
            "train_seconds": round(self.train_seconds, 2),
            "eval_seconds": round(self.eval_seconds, 2),
            "values": {
                r.policy: {"sim": iv(r.sim), "world": iv(r.world), "gap": iv(r.gap)} for r in self.values
            },
            "sim_to_real_gap": iv(self.value("trained").gap),
            "world_gain_vs_marketer": iv(self.world_gain),
        }

    def format_table(self) -> str:
        """The evaluation as a plain-text table, then the gap and the gain over the marketer."""
        head = f"{'policy':<16} {'value in sim':>24} {'value in world':>24} {'gap (sim - world)':>24}"
        lines = [head, "-" * len(head)]
        for r in self.values:
            lines.append(
                f"{r.policy:<16} {r.sim.format('.1f'):>24} {r.world.format('.1f'):>24} "
                f"{r.gap.format('.1f'):>24}"
            )
        lines.append(f"sim-to-real gap of the trained policy: {self.value('trained').gap.format('.1f')}")
        lines.append(f"trained - marketer in the world (paired): {self.world_gain.format('.1f')}")
        lines.append(
            f"({self.episodes} training episodes in {self.iterations} iterations, "
            f"{self.train_seconds:.0f}s; evaluation {self.eval_seconds:.0f}s; "
            f"{self.config.eval_episodes} episodes per policy and market, 95% bootstrap intervals)"
        )
        return "\n".join(lines)


def evaluate(
    market: BatchMarket,
    policies: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]],
    config: SimTrainConfig,
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Episode returns of each policy on ``market`` (the same evaluation seeds for every policy)."""
    out: dict[str, np.ndarray] = {}
    for name, policy in policies.items():
        if progress is not None:
            progress(name)
        seed = EVAL_SEED_OFFSET + config.eval_seed
        out[name] = run_policy(market, policy, config.episode, config.reward, seed=seed)["return"]
    return out


def _value_table(sim: dict[str, np.ndarray], world: dict[str, np.ndarray]) -> list[PolicyValue]:
    rows = []
    for i, name in enumerate(sim):
        s, w = sim[name], world[name]
        gap = bootstrap_diff_ci(w, s, seed=i)
        rows.append(PolicyValue(name, bootstrap_ci(s, seed=i), bootstrap_ci(w, seed=i), gap, s, w))
    return rows


# ------------------------------------------------------------------------------------------- the job


def train_in_simulator(
    sim: Simulator,
    logs: Logs,
    config: SimTrainConfig | None = None,
    *,
    run_dir: str | Path | None = None,
    logger: MetricsLogger | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train PPO in ``sim``, then evaluate it, the marketer and no campaign in ``sim`` and the world.

    ``logs`` (:class:`~transferlab.simulator.logs.Logs`) give the logged action distribution (for the
    action penalty and the actor's start), the feature scaling, the behaviour policy's epsilon and
    the world config (``manifest["world"]``). With ``run_dir``, the checkpoint, ``policy.pt``,
    ``result.json`` and ``report.md``/``report.html`` are written there (``resume=True`` continues
    from its checkpoint). Metrics go to ``logger``.
    """
    from transferlab.simulator.behaviour import MarketerPolicy
    from transferlab.simulator.policies import Marketer, NoCampaign
    from transferlab.simulator.world_config import WorldConfig

    config = config or SimTrainConfig()
    torch.set_num_threads(config.torch_threads)
    if "world" not in logs.manifest:
        raise ValueError(
            "the logs' manifest.json has no 'world' config: regenerate the logs with "
            "`transferlab sim generate-logs` (the world evaluation needs it)"
        )
    world_config = WorldConfig.from_dict(logs.manifest["world"])
    n_customers = config.n_customers or world_config.n_customers
    world_config = world_config.model_copy(update={"n_customers": n_customers})
    out = Path(run_dir) if run_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)

    def say(message: str, fraction: float) -> None:
        if progress is not None:
            progress(message, fraction)

    # 1. train in the simulator
    logged = behaviour_action_probs(logs.campaigns["action_index"].to_numpy(), config.penalty_prior)
    trained = train_policy(
        sim.market(n_envs=config.n_envs, n_customers=n_customers, seed=config.seed),
        config,
        scaler=FeatureScaler.from_logs(logs.campaigns),
        logged_probs=logged,
        logger=logger,
        progress=progress,
        checkpoint=out / CHECKPOINT_FILE if out is not None else None,
        resume=resume,
    )
    if out is not None:
        trained.policy.save(out / POLICY_FILE)
    # 2. evaluate in the simulator and in the world, on the same evaluation seeds
    t0 = time.perf_counter()
    policies: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
        "trained": PolicyActor(trained.policy, greedy=True)
    }
    if config.eval_sampled:
        policies["trained_sampled"] = PolicyActor(trained.policy)
    epsilon = float(logs.manifest.get("epsilon", 0.1))
    policies.update(marketer=Marketer(MarketerPolicy(epsilon=epsilon)), no_campaign=NoCampaign())
    n, k = config.eval_episodes, len(policies)
    sim_market = sim.market(n_envs=n, n_customers=n_customers, seed=EVAL_SEED_OFFSET + config.eval_seed)
    names = list(policies)
    sim_returns = evaluate(
        sim_market,
        policies,
        config,
        lambda p: say(f"evaluating in the simulator: {p}", names.index(p) / (2 * k)),
    )
    world_market = (
        WorldMarket.from_manifest(logs.manifest, n_envs=n, seed=EVAL_SEED_OFFSET + config.eval_seed)
        if n_customers == int(logs.manifest["world"]["n_customers"]) and "days" in logs.manifest
        else WorldMarket(world_config, n_envs=n)  # another shop size: a fresh world of that size
    )
    world_returns = evaluate(
        world_market,
        policies,
        config,
        lambda p: say(f"evaluating in the world: {p}", (k + names.index(p)) / (2 * k)),
    )
    say("evaluated", 1.0)
    result = TrainResult(
        config=config,
        policy=trained.policy,
        values=_value_table(sim_returns, world_returns),
        world_gain=bootstrap_diff_ci(world_returns["marketer"], world_returns["trained"], paired=True),
        iterations=trained.iterations,
        episodes=trained.episodes,
        train_seconds=trained.seconds,
        eval_seconds=time.perf_counter() - t0,
        history=trained.history,
        run_dir=out,
    )
    if logger is not None:
        logger.log(trained.iterations, eval_metrics(result))
        logger.flush()
    if out is not None:
        atomic_write_json(out / RESULT_FILE, result.to_dict())
        write_report(result, out)
    return result


def eval_metrics(result: TrainResult) -> dict[str, float]:
    """The evaluation as metrics: ``eval/{sim,world}/<policy>/return`` and the gaps."""
    metrics: dict[str, float] = {}
    for r in result.values:
        metrics[f"eval/sim/{r.policy}/return"] = r.sim.estimate
        metrics[f"eval/world/{r.policy}/return"] = r.world.estimate
        metrics[f"eval/gap/{r.policy}"] = r.gap.estimate
    metrics["eval/world_gain_vs_marketer"] = result.world_gain.estimate
    return metrics


def write_report(result: TrainResult, directory: Path) -> None:
    """``report.md`` / ``report.html`` (with the learning curve) in ``directory``."""
    from transferlab.platform.reports import Curve, Report, plot_curves

    cfg = result.config
    report = Report("PPO in the learned simulator, judged in the world")
    report.paragraph(
        f"{result.episodes} simulated training episodes ({result.iterations} iterations of {cfg.n_envs} "
        f"markets, {result.train_seconds:.0f}s), action penalty {cfg.action_penalty} per nat below a "
        f"logged probability of {cfg.penalty_min_prob:.4f}. Each policy ran {cfg.eval_episodes} episodes "
        "in the simulator and in the world; values are mean episode returns (reward units) with 95% "
        "bootstrap intervals; the gap is sim value minus world value."
    )
    report.table(
        [
            {"policy": r.policy, "value in sim": r.sim, "value in world": r.world, "gap (sim - world)": r.gap}
            for r in result.values
        ],
        floatfmt=".1f",
    )
    report.paragraph(
        f"Trained minus marketer in the world (paired by market): {result.world_gain.format('.1f')}."
    )
    if result.history:
        x = np.arange(len(result.history), dtype=np.float64)
        curves = {
            "return in sim": Curve(x, np.array([h["rollout/return"] for h in result.history])),
            "action penalty": Curve(x, np.array([h["rollout/penalty"] for h in result.history])),
        }
        fig = plot_curves(curves, xlabel="iteration (this session)", ylabel="per episode (reward units)")
        report.figure(fig, "training", "Mean training return in the simulator, and the penalty paid.")
    report.code(json.dumps(cfg.to_dict(), indent=2), "json")
    report.write(directory)


__all__ = [
    "CampaignPolicy",
    "PolicyActor",
    "PolicyValue",
    "SimTrainConfig",
    "TrainResult",
    "TrainedPolicy",
    "collect",
    "evaluate",
    "open_train_run",
    "train_in_simulator",
    "train_policy",
    "update",
]


def open_train_run(
    config: SimTrainConfig, run_dir: Path | None, runs_root: Path, *, options_given: bool = False
) -> tuple[Run, bool]:
    """The run of ``transferlab sim train`` and whether it resumes.

    No ``run_dir``: a new run ``<runs_root>/sim-train/<id>``. A ``run_dir`` holding an unfinished run:
    that run, resumed with its saved config (so ``options_given`` is an error). Otherwise a new run
    at ``run_dir`` (``<root>/<experiment>/<run-id>``). The run is owned by this process. Raises
    ValueError with the fix, or RunInUseError when another live process owns the run.
    """
    if run_dir is None:
        return RunStore(runs_root).create_run(RUN_EXPERIMENT, config), False
    if (run_dir / "meta.json").is_file():
        run = Run(run_dir)
        if run.status == "finished":
            raise ValueError(f"{run_dir} holds a finished run: choose a new --run-dir")
        if options_given:
            raise ValueError(
                f"{run_dir} holds a run to resume, which keeps its saved config.json: "
                "drop --config/--seed/--minutes/--episodes, or choose a new --run-dir"
            )
        return run.acquire(), True
    if run_dir.exists():
        if not run_dir.is_dir() or any(run_dir.iterdir()):
            raise ValueError(f"{run_dir} exists and is not a run directory: choose a new --run-dir")
        run_dir.rmdir()
    root = run_dir.parent.parent
    return RunStore(root).create_run(
        run_dir.parent.name or RUN_EXPERIMENT, config, run_id=run_dir.name
    ), False

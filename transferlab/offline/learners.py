"""Offline RL learners: one typed config per d3rlpy algorithm, built with ``Config(...).create()``.

Every learner trains from a fixed logged dataset (a :class:`d3rlpy.dataset.MDPDataset`) and never
talks to an environment. Which one to pick:

* **Conservative learners** — ``discrete_cql``, ``discrete_bcq`` (discrete actions) and ``cql``,
  ``iql``, ``td3_plus_bc`` (continuous actions). They learn a better-than-logged policy while staying
  close to the actions the data actually covers: CQL pushes down Q-values of unseen actions, BCQ only
  chooses among actions a learned imitator finds likely, IQL never queries Q on out-of-data actions
  (expectile regression + advantage-weighted imitation), TD3+BC adds a behaviour-cloning term to the
  TD3 actor loss. These are the learners to trust on real logs.
* **Naive baseline** — ``dqn``: plain off-policy Q-learning with no guard against extrapolation
  error. On narrow logs its Q-values for unseen actions are over-estimated, so it shows how much the
  conservative learners buy.
* **Imitation** — ``discrete_bc``: behaviour cloning. It reproduces the logging policy and ignores
  the rewards; it is the "do what the logs did" reference point.

Example::

    learner = learner_config("discrete_cql", seed=1, alpha=1.0).create()
    history = learner.fit(dataset, n_steps=2000)          # {"offline/loss": [...], ...}
    actions = learner.predict(observations)               # (n,) int64
    learner.save("runs/cql")                              # config.json + model.d3
    same = load_learner("runs/cql")

All algorithmic work is done by d3rlpy; this module only chooses small, CPU-friendly defaults, seeds
everything from ``config.seed``, validates the dataset and keeps d3rlpy from writing ``d3rlpy_logs/``.
:attr:`Learner.algo` is the d3rlpy algorithm itself (e.g. for d3rlpy's FQE).
"""

from __future__ import annotations

import json
import os
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import d3rlpy
import numpy as np
import torch
from d3rlpy.base import LearnableConfig
from d3rlpy.constants import ActionSpace
from d3rlpy.dataset import ReplayBufferBase
from d3rlpy.logging import NoopAdapterFactory
from d3rlpy.models import VectorEncoderFactory
from pydantic import Field, PositiveInt

from transferlab.platform.config import CONFIG_CLASS_KEY, BaseConfig, config_class_path
from transferlab.platform.io import atomic_directory

__all__ = [
    "CONTINUOUS",
    "DISCRETE",
    "LEARNERS",
    "CQLConfig",
    "DQNConfig",
    "DiscreteBCConfig",
    "DiscreteBCQConfig",
    "DiscreteCQLConfig",
    "IQLConfig",
    "Learner",
    "LearnerConfig",
    "LearnerName",
    "TD3PlusBCConfig",
    "learner_config",
    "load_learner",
]

LearnerName = Literal["discrete_cql", "discrete_bcq", "discrete_bc", "dqn", "cql", "iql", "td3_plus_bc"]
DISCRETE: tuple[str, ...] = ("discrete_cql", "discrete_bcq", "discrete_bc", "dqn")
CONTINUOUS: tuple[str, ...] = ("cql", "iql", "td3_plus_bc")

CONFIG_FILE = "config.json"
MODEL_FILE = "model.d3"
_DEVICE = "cpu:0"


# --------------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------------


class LearnerConfig(BaseConfig):
    """Fields shared by every offline learner; subclasses add their algorithm's knobs."""

    name: ClassVar[str]
    kind: ClassVar[Literal["discrete", "continuous"]]

    seed: int = Field(0, ge=0, description="Seed for network init and batch sampling (d3rlpy.seed, torch).")
    batch_size: int = Field(64, gt=0, description="Transitions per gradient step.")
    learning_rate: float = Field(
        3e-4, gt=0, description="Adam learning rate (the critic's for actor-critic learners)."
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor of the Q/value targets.")
    hidden_units: list[PositiveInt] = Field(
        default_factory=lambda: [64, 64],
        min_length=1,
        description="Hidden layer widths of every network's MLP encoder.",
    )

    def create(self) -> Learner:
        """Build an untrained :class:`Learner` (networks are built on the first fit)."""
        return Learner(self)

    @abstractmethod
    def d3rlpy_config(self) -> LearnableConfig:
        """The underlying d3rlpy config these fields map to."""

    def _encoder(self) -> VectorEncoderFactory:
        return VectorEncoderFactory(hidden_units=list(self.hidden_units))


class _ContinuousConfig(LearnerConfig):
    """Actor-critic fields shared by the continuous-action learners."""

    kind: ClassVar[Literal["discrete", "continuous"]] = "continuous"

    actor_learning_rate: float | None = Field(
        None, gt=0, description="Adam learning rate of the policy; None uses learning_rate."
    )
    tau: float = Field(0.005, gt=0, le=1, description="Polyak factor of the target-network updates.")

    def _actor_lr(self) -> float:
        return self.learning_rate if self.actor_learning_rate is None else self.actor_learning_rate


class DiscreteCQLConfig(LearnerConfig):
    """Conservative Q-learning for discrete actions (Double DQN + a penalty on unseen actions)."""

    name: ClassVar[str] = "discrete_cql"
    kind: ClassVar[Literal["discrete", "continuous"]] = "discrete"

    alpha: float = Field(
        1.0,
        ge=0,
        description="Conservative weight: how hard Q of actions absent from the data is pushed down.",
    )
    target_update_interval: int = Field(
        100, gt=0, description="Gradient steps between target-network copies."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.DiscreteCQLConfig:
        return d3rlpy.algos.DiscreteCQLConfig(
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            gamma=self.gamma,
            encoder_factory=self._encoder(),
            alpha=self.alpha,
            target_update_interval=self.target_update_interval,
        )


class DiscreteBCQConfig(LearnerConfig):
    """Batch-constrained Q-learning for discrete actions: argmax Q over actions the imitator deems likely."""

    name: ClassVar[str] = "discrete_bcq"
    kind: ClassVar[Literal["discrete", "continuous"]] = "discrete"

    action_flexibility: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Keep actions whose imitator probability is at least this fraction of the most likely's.",
    )
    beta: float = Field(0.5, ge=0, description="L2 penalty on the imitator's logits.")
    target_update_interval: int = Field(
        100, gt=0, description="Gradient steps between target-network copies."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.DiscreteBCQConfig:
        return d3rlpy.algos.DiscreteBCQConfig(
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            gamma=self.gamma,
            encoder_factory=self._encoder(),
            action_flexibility=self.action_flexibility,
            beta=self.beta,
            target_update_interval=self.target_update_interval,
        )


class DiscreteBCConfig(LearnerConfig):
    """Behaviour cloning for discrete actions: a softmax classifier of the logged action (rewards unused)."""

    name: ClassVar[str] = "discrete_bc"
    kind: ClassVar[Literal["discrete", "continuous"]] = "discrete"

    beta: float = Field(0.5, ge=0, description="L2 penalty on the policy's logits.")

    def d3rlpy_config(self) -> d3rlpy.algos.DiscreteBCConfig:
        return d3rlpy.algos.DiscreteBCConfig(
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            encoder_factory=self._encoder(),
            beta=self.beta,
        )


class DQNConfig(LearnerConfig):
    """Plain DQN on the logs: the naive off-policy baseline with no guard against extrapolation."""

    name: ClassVar[str] = "dqn"
    kind: ClassVar[Literal["discrete", "continuous"]] = "discrete"

    target_update_interval: int = Field(
        100, gt=0, description="Gradient steps between target-network copies."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.DQNConfig:
        return d3rlpy.algos.DQNConfig(
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            gamma=self.gamma,
            encoder_factory=self._encoder(),
            target_update_interval=self.target_update_interval,
        )


class CQLConfig(_ContinuousConfig):
    """Conservative Q-learning for continuous actions (SAC + a penalty on sampled out-of-data actions)."""

    name: ClassVar[str] = "cql"

    conservative_weight: float = Field(
        5.0, ge=0, description="Weight of the conservative penalty on Q of sampled actions."
    )
    n_action_samples: int = Field(
        4,
        gt=0,
        description="Actions sampled per state to estimate the penalty's log-sum-exp (cost grows with it).",
    )
    alpha_learning_rate: float = Field(
        0.0, ge=0, description="Learning rate of the Lagrange multiplier on the penalty; 0 keeps it fixed."
    )
    temp_learning_rate: float = Field(
        1e-4, ge=0, description="Learning rate of SAC's entropy temperature; 0 keeps it fixed."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.CQLConfig:
        return d3rlpy.algos.CQLConfig(
            batch_size=self.batch_size,
            actor_learning_rate=self._actor_lr(),
            critic_learning_rate=self.learning_rate,
            temp_learning_rate=self.temp_learning_rate,
            alpha_learning_rate=self.alpha_learning_rate,
            gamma=self.gamma,
            tau=self.tau,
            actor_encoder_factory=self._encoder(),
            critic_encoder_factory=self._encoder(),
            conservative_weight=self.conservative_weight,
            n_action_samples=self.n_action_samples,
        )


class IQLConfig(_ContinuousConfig):
    """Implicit Q-learning: expectile value regression + advantage-weighted imitation of logged actions."""

    name: ClassVar[str] = "iql"

    expectile: float = Field(
        0.7, gt=0, lt=1, description="Expectile of the value fit; nearer 1 is greedier, 0.5 is SARSA."
    )
    weight_temp: float = Field(
        3.0, ge=0, description="Inverse temperature of the advantage weights; 0 is plain behaviour cloning."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.IQLConfig:
        return d3rlpy.algos.IQLConfig(
            batch_size=self.batch_size,
            actor_learning_rate=self._actor_lr(),
            critic_learning_rate=self.learning_rate,
            gamma=self.gamma,
            tau=self.tau,
            actor_encoder_factory=self._encoder(),
            critic_encoder_factory=self._encoder(),
            value_encoder_factory=self._encoder(),
            expectile=self.expectile,
            weight_temp=self.weight_temp,
        )


class TD3PlusBCConfig(_ContinuousConfig):
    """TD3+BC: TD3 whose actor loss adds a behaviour-cloning term towards the logged actions."""

    name: ClassVar[str] = "td3_plus_bc"

    alpha: float = Field(
        2.5, gt=0, description="Weight of the Q term against the BC term; smaller stays closer to the logs."
    )

    def d3rlpy_config(self) -> d3rlpy.algos.TD3PlusBCConfig:
        return d3rlpy.algos.TD3PlusBCConfig(
            batch_size=self.batch_size,
            actor_learning_rate=self._actor_lr(),
            critic_learning_rate=self.learning_rate,
            gamma=self.gamma,
            tau=self.tau,
            actor_encoder_factory=self._encoder(),
            critic_encoder_factory=self._encoder(),
            alpha=self.alpha,
        )


LEARNERS: dict[str, type[LearnerConfig]] = {
    cls.name: cls
    for cls in (
        DiscreteCQLConfig,
        DiscreteBCQConfig,
        DiscreteBCConfig,
        DQNConfig,
        CQLConfig,
        IQLConfig,
        TD3PlusBCConfig,
    )
}
"""Learner name -> config class."""


def learner_config(name: str, **overrides: Any) -> LearnerConfig:
    """Build the config of learner ``name`` (see :data:`LEARNERS`) with field ``overrides``.

    Raises:
        ValueError: ``name`` is unknown (the message lists the valid names), or an override is invalid
            (a :class:`~transferlab.platform.config.ConfigError`).
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; valid names: {', '.join(LEARNERS)}")
    return LEARNERS[name].build(**overrides)


# --------------------------------------------------------------------------------------------------
# Learner
# --------------------------------------------------------------------------------------------------


class Learner:
    """A d3rlpy algorithm plus its config: fit on an MDPDataset, predict, save, load.

    Attributes:
        config: the learner's config.
        kind: ``"discrete"`` or ``"continuous"``.
        algo: the d3rlpy algorithm object (networks exist once built or fitted).
    """

    def __init__(self, config: LearnerConfig, algo: Any = None) -> None:
        self.config = config
        self.kind: str = config.kind
        self.algo: Any = algo if algo is not None else config.d3rlpy_config().create(device=_DEVICE)

    @property
    def is_built(self) -> bool:
        """Whether the networks exist (after :meth:`build`, :meth:`fit` or :func:`load_learner`)."""
        return self.algo.impl is not None

    # ------------------------------------------------------------------ training

    def _check_dataset(self, dataset: ReplayBufferBase) -> None:
        info = dataset.dataset_info
        is_discrete = info.action_space == ActionSpace.DISCRETE
        label = type(self.config).__name__
        if self.kind == "discrete" and not is_discrete:
            raise ValueError(
                f"{label} is a discrete-action learner but the dataset has continuous actions; fix: use one "
                f"of {CONTINUOUS}, or build the MDPDataset with integer actions"
            )
        if self.kind == "continuous" and is_discrete:
            raise ValueError(
                f"{label} is a continuous-action learner but the dataset has discrete (integer) actions; "
                f"fix: use one of {DISCRETE}, or pass action_space=ActionSpace.CONTINUOUS to MDPDataset"
            )
        if self.kind == "continuous":
            high = max(float(np.abs(ep.actions).max()) for ep in dataset.episodes)
            if high > 1.0 + 1e-6:
                raise ValueError(
                    f"continuous actions must lie in [-1, 1] (the policies end in tanh) but |action| reaches "
                    f"{high:.3g}; fix: rescale the dataset's actions to [-1, 1]"
                )
        if self.is_built:
            obs_shape = tuple(dataset.sample_transition().observation_signature.shape[0])
            built = (tuple(self.algo.impl.observation_shape), int(self.algo.impl.action_size))
            if (obs_shape, int(info.action_size)) != built:
                raise ValueError(
                    f"dataset has observation shape {obs_shape} and action size {info.action_size}, but this "
                    f"learner was built for {built[0]} and {built[1]}; fix: create a new learner"
                )

    def build(self, dataset: ReplayBufferBase) -> None:
        """Create the networks for ``dataset``'s shapes, seeded from ``config.seed`` (no-op if built)."""
        self._check_dataset(dataset)
        if not self.is_built:
            _seed(self.config.seed)
            self.algo.build_with_dataset(dataset)

    def fit(
        self,
        dataset: ReplayBufferBase,
        n_steps: int,
        *,
        n_steps_per_epoch: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, list[float]]:
        """Train for ``n_steps`` gradient steps; returns the per-epoch mean of each d3rlpy loss.

        Keys are d3rlpy's metric names under ``offline/`` (e.g. ``offline/loss``) plus
        ``offline/step``, the step count at each epoch's end; d3rlpy's ``time_*`` metrics are dropped so
        that the history is reproducible. ``n_steps_per_epoch`` defaults to ``min(n_steps, 1000)``; a
        shorter last epoch covers any remainder. ``progress(steps_done, n_steps)`` is called about 100
        times. Calling fit again continues training.
        """
        if n_steps <= 0:
            raise ValueError(f"n_steps must be > 0, got {n_steps}")
        per_epoch = min(n_steps, 1000) if n_steps_per_epoch is None else n_steps_per_epoch
        if per_epoch <= 0:
            raise ValueError(f"n_steps_per_epoch must be > 0, got {n_steps_per_epoch}")
        self.build(dataset)
        # Reseed after building (so build-then-fit equals fit) and offset by the steps done, so that a
        # continued fit does not replay the same batches. d3rlpy then logs "Skip building models": harmless.
        _seed(self.config.seed + int(self.algo.grad_step))

        history: dict[str, list[float]] = {}
        every = max(1, n_steps // 100)
        full, rest = divmod(n_steps, per_epoch)
        chunks = [(full * per_epoch, per_epoch)] if full else []
        if rest:
            chunks.append((rest, rest))
        done = 0
        for chunk_steps, chunk_epoch in chunks:
            offset = done

            def on_step(algo: Any, epoch: int, step: int, offset: int = offset) -> None:
                now = offset + step
                if progress is not None and (now % every == 0 or now == n_steps):
                    progress(now, n_steps)

            for _, metrics in self.algo.fitter(
                dataset,
                n_steps=chunk_steps,
                n_steps_per_epoch=chunk_epoch,
                logger_adapter=NoopAdapterFactory(),
                show_progress=False,
                callback=on_step,
            ):
                done += chunk_epoch
                history.setdefault("offline/step", []).append(float(done))
                for key, value in metrics.items():
                    if not key.startswith("time_"):
                        history.setdefault(f"offline/{key}", []).append(float(value))
        return history

    # ------------------------------------------------------------------ inference

    def _obs(self, observations: np.ndarray) -> np.ndarray:
        if not self.is_built:
            raise ValueError(
                "this learner has no networks yet; fix: call fit (or build) with a dataset first"
            )
        obs = np.asarray(observations, dtype=np.float32)
        if obs.ndim != 2:
            raise ValueError(f"observations must be a 2-D array (n, obs_dim), got shape {obs.shape}")
        return obs

    def predict(self, observations: np.ndarray) -> np.ndarray:
        """Greedy actions: ``(n,)`` int64 for discrete learners, ``(n, action_dim)`` float32 in [-1, 1]."""
        actions = np.asarray(self.algo.predict(self._obs(observations)))
        if self.kind == "discrete":
            return actions.astype(np.int64).reshape(-1)
        return np.clip(actions.astype(np.float32), -1.0, 1.0)

    def action_probabilities(self, observations: np.ndarray) -> np.ndarray:
        """``(n, n_actions)`` action probabilities of the learned policy (discrete learners only).

        Q-learners (DQN, CQL, BCQ) act greedily, so rows are one-hot on :meth:`predict`; behaviour
        cloning returns its classifier's softmax.
        """
        if self.kind != "discrete":
            raise ValueError(
                f"{type(self.config).__name__} has continuous actions: there are no action probabilities; "
                "fix: use predict, or a discrete learner"
            )
        obs = self._obs(observations)
        if isinstance(self.config, DiscreteBCConfig):
            imitator = self.algo.impl.modules.imitator
            with torch.no_grad():
                logits = imitator(torch.as_tensor(obs, device=self.algo.impl.device)).logits
                return torch.softmax(logits, dim=1).cpu().numpy().astype(np.float64)
        n_actions = int(self.algo.impl.action_size)
        return np.eye(n_actions, dtype=np.float64)[self.predict(obs)]

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and d3rlpy's ``model.d3`` into a new directory ``path``, atomically.

        Raises ``FileExistsError`` if ``path`` exists and is not an empty directory.
        """
        if not self.is_built:
            raise ValueError("nothing to save: this learner has no networks yet; fix: fit it first")
        payload = {
            "name": self.config.name,
            CONFIG_CLASS_KEY: config_class_path(type(self.config)),
            **self.config.to_dict(),
        }
        with atomic_directory(path) as tmp:
            (tmp / CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n")
            self.algo.save(str(tmp / MODEL_FILE))
        return Path(path)


def load_learner(path: str | os.PathLike[str]) -> Learner:
    """Load a learner written by :meth:`Learner.save`."""
    root = Path(path)
    config_file, model_file = root / CONFIG_FILE, root / MODEL_FILE
    if not (config_file.is_file() and model_file.is_file()):
        raise FileNotFoundError(
            f"{root} is not a saved learner: it needs {CONFIG_FILE} and {MODEL_FILE} "
            "(written by Learner.save)"
        )
    try:
        data = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{config_file} is not valid JSON ({exc}); was it written by Learner.save?"
        ) from None
    name = data.pop("name", None) if isinstance(data, dict) else None
    if name not in LEARNERS:
        raise ValueError(f"{config_file} names learner {name!r}; valid names: {', '.join(LEARNERS)}")
    config = LEARNERS[name].from_dict(data)
    algo = d3rlpy.load_learnable(str(model_file), device=_DEVICE)
    expected = type(config.d3rlpy_config()).__name__
    if type(algo.config).__name__ != expected:
        raise ValueError(
            f"{model_file} holds a {type(algo.config).__name__}, but {config_file} needs {expected}"
        )
    return Learner(config, algo=algo)


def _seed(seed: int) -> None:
    d3rlpy.seed(seed)
    torch.manual_seed(seed)

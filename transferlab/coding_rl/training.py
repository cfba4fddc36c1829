"""The agent-RL trainers on coding: the coding envs filled into a config, by its mode.

:mod:`transferlab.agent_rl` trains on whatever env ``env_factory`` names and knows no domain. A coding
config leaves ``env_factory`` unset and says what it trains by ``mode``: ``'code'``, single-step code
tasks in a one-turn env (:class:`~transferlab.coding_rl.env.single_step.CodeTaskEnv`), or
``'agent'``, CodeRepair-v0 episodes. :func:`coding_env` fills the factory in (and passes the
config's ``sandbox_backend`` to it); :func:`train_rl` and :func:`expert_iteration` are the agent-RL
trainers with that done first. A config that already names a factory is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from transferlab.agent_rl import rft, rl
from transferlab.agent_rl.rft import ExpertIterationConfig, RoundStats
from transferlab.agent_rl.rollout_worker import RolloutWorker
from transferlab.platform.metrics import MetricsLogger
from transferlab.platform.trajectory import Trajectory

CODE_TASK_ENV = "transferlab.coding_rl.env.single_step:code_task_env"
"""Single-step code tasks, one turn (mode 'code')."""
CODE_REPAIR_ENV = "transferlab.coding_rl.env.single_step:code_repair_env"
"""CodeRepair-v0 on the process's sandbox (mode 'agent')."""

C = TypeVar("C", rl.RLConfig, ExpertIterationConfig)


def coding_env(config: C) -> C:
    """``config`` with its coding env factory named (by ``mode``) unless it names one already."""
    if config.env_factory is not None:
        return config
    backend = getattr(config, "sandbox_backend", "forkserver")
    factory = CODE_TASK_ENV if config.mode == "code" else CODE_REPAIR_ENV
    return config.model_copy(
        update={"env_factory": factory, "env_options": {"sandbox_backend": backend, **config.env_options}}
    )


def train_rl(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Any],
    config: rl.RLConfig,
    run_dir: str | Path,
    logger: MetricsLogger | None = None,
    **kwargs: Any,
) -> rl.RLResult:
    """:func:`transferlab.agent_rl.rl.train_rl` on the coding env of ``config.mode``."""
    return rl.train_rl(model, tokenizer, tasks, coding_env(config), run_dir, logger, **kwargs)


def expert_iteration(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Any],
    demos: Sequence[Trajectory],
    config: ExpertIterationConfig,
    worker: RolloutWorker | None = None,
    logger: MetricsLogger | None = None,
    checkpoint: Path | None = None,
) -> list[RoundStats]:
    """:func:`transferlab.agent_rl.rft.expert_iteration` on the coding env of ``config.mode``."""
    return rft.expert_iteration(
        model, tokenizer, tasks, demos, coding_env(config), worker, logger, checkpoint
    )

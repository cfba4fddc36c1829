"""Campaign environments; importing this module registers the Gymnasium ids.

* ``transferlab/CampaignWorld-v0``: the ground-truth world (the truth, for evaluation);
  ``gymnasium.make("transferlab/CampaignWorld-v0", n_customers=1000)``.
* ``transferlab/Campaign-v0``: a simulator learned from logs (for training);
  ``gymnasium.make("transferlab/Campaign-v0", simulator="runs/sim")`` with a directory written by
  ``transferlab sim fit`` (or a loaded ``LearnedSimulator``).
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import register, registry

from transferlab.simulator.envs.campaign import CampaignEnv, EpisodeConfig, RewardConfig, WorldMarket
from transferlab.simulator.world_config import WorldConfig

WORLD_ENV_ID = "transferlab/CampaignWorld-v0"
SIM_ENV_ID = "transferlab/Campaign-v0"
OPS_ENV_ID = "transferlab/OpsAnalysis-v0"


def make_world_env(
    n_customers: int = 1000,
    world: WorldConfig | None = None,
    episode: EpisodeConfig | None = None,
    reward: RewardConfig | None = None,
) -> CampaignEnv:
    """``CampaignWorld-v0``: the ground-truth market with ``n_customers`` (or a full ``world`` config)."""
    config = world or WorldConfig(n_customers=n_customers)
    return CampaignEnv(WorldMarket(config), episode, reward)


def make_sim_env(
    simulator: Any,
    n_customers: int = 1000,
    episode: EpisodeConfig | None = None,
    reward: RewardConfig | None = None,
) -> CampaignEnv:
    """``Campaign-v0``: a learned simulator (a ``LearnedSimulator`` or the directory it was saved to)."""
    from transferlab.simulator.learned import LearnedSimulator

    sim = simulator if isinstance(simulator, LearnedSimulator) else LearnedSimulator.load(simulator)
    return CampaignEnv(sim.market(n_envs=1, n_customers=n_customers, seed=0), episode, reward)


if WORLD_ENV_ID not in registry:
    register(id=WORLD_ENV_ID, entry_point="transferlab.simulator.envs:make_world_env")
if SIM_ENV_ID not in registry:
    register(id=SIM_ENV_ID, entry_point="transferlab.simulator.envs:make_sim_env")
if OPS_ENV_ID not in registry:
    register(id=OPS_ENV_ID, entry_point="transferlab.simulator.ops.env:OpsAnalysisEnv")

__all__ = ["OPS_ENV_ID", "SIM_ENV_ID", "WORLD_ENV_ID", "make_sim_env", "make_world_env"]

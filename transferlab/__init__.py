"""transferlab: which parts of agent RL carry over from coding agents to ecommerce operations, measured.

Importing the package registers its Gymnasium ids (by string entry point, when gymnasium is
imported: ``import transferlab`` itself imports neither gymnasium nor torch nor a domain)::

    import gymnasium as gym
    import transferlab

    env = gym.make("transferlab/OpsAnalysis-v0")
"""

from collections.abc import Callable

from transferlab.platform.import_hooks import around_first_import

__version__ = "0.1.0"

ENV_IDS = {
    "transferlab/CodeRepair-v0": "transferlab.coding_rl.env.code_repair:CodeRepairEnv",
    "transferlab/OpsAnalysis-v0": "transferlab.simulator.ops.env:OpsAnalysisEnv",
    "transferlab/Campaign-v0": "transferlab.simulator.envs:make_sim_env",
    "transferlab/CampaignWorld-v0": "transferlab.simulator.envs:make_world_env",
}
"""Every environment id the package provides -> its entry point (``module:callable``)."""


def register_envs() -> None:
    """Register :data:`ENV_IDS` with Gymnasium (ids already registered are left as they are)."""
    from gymnasium.envs.registration import register, registry

    for env_id, entry_point in ENV_IDS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point)


def _register_after(execute: Callable[[], None]) -> None:
    execute()
    register_envs()


if not around_first_import("gymnasium", _register_after):
    register_envs()

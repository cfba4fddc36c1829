"""Agent RL environments for coding; importing this module registers `transferlab/CodeRepair-v0`."""

from gymnasium.envs.registration import register, registry

ENV_ID = "transferlab/CodeRepair-v0"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="transferlab.coding_rl.env.code_repair:CodeRepairEnv")

__all__ = ["ENV_ID"]

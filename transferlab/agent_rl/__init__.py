"""The agent-RL stack both domains train with, knowing no domain (it imports the platform only).

Policies on any Hugging Face chat model (:mod:`.policies`), episodes on any tool env (:mod:`.episodes`),
rollout workers and their pools (:mod:`.rollout_worker`, :mod:`.workers`), the loss math
(:mod:`.losses`: small pure functions of B×T tensors, each unit-tested against hand-computed cases),
and the trainers: SFT (:mod:`.sft`), GRPO / PPO / GiGPO (:mod:`.rl`), RFT (:mod:`.rft`). A trainer
plays whatever env its config's ``env_factory`` names; the identity env (:mod:`.identity_env`) is the
one they are tested on.
"""

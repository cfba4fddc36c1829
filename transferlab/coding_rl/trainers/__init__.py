"""Trainers for coding policies (SFT, GRPO, PPO) and the loss math they share.

The math lives in :mod:`transferlab.coding_rl.trainers.losses`: small pure functions of B×T tensors
shaped like :func:`transferlab.platform.trajectory.to_tensors` output, each returning a small
dataclass of loss terms and each unit-tested against hand-computed cases.
"""

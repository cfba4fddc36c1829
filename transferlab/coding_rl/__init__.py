"""Coding-agent RL: tasks, the sandbox and verifier, environments, policies and trainers."""

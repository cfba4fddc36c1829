"""Offline RL on logs, off-policy evaluation and coverage diagnostics (issue 6)."""

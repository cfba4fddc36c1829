"""Suggestions, approval, exactly-once execution and delayed feedback (issue 7)."""

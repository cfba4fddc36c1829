"""Coding tasks: the JSON task format, seed tasks and HumanEval."""

from transferlab.coding_rl.tasks.code_task import CodeTask, TaskError, TestCase, load_task

__all__ = ["CodeTask", "TaskError", "TestCase", "load_task"]

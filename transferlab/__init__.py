"""transferlab: which parts of agent RL carry over from coding agents to ecommerce operations, measured."""

__version__ = "0.1.0"

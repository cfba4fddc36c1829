"""The policy every arm of an experiment starts from: the tiny from-scratch policy, or a local model.

Every arm starts either from the tiny from-scratch policy (``policy`` in the experiment's config, on a
tokenizer trained here; the CPU default) or, when the config's ``model_path`` names a local Hugging Face
causal LM directory, from a copy of that model with its own tokenizer and chat template
(:class:`StartModel`, loaded once per run by :func:`open_experiment`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field
from rich.console import Console

from transferlab.agent_rl.policies.devices import context_limit
from transferlab.agent_rl.policies.model import TinyPolicyConfig, count_parameters, load_policy
from transferlab.agent_rl.rl import RLConfig
from transferlab.platform.config import BaseConfig
from transferlab.platform.harness import Experiment


class ModelChoice(BaseConfig):
    """The ``model_path`` field every experiment config shares (a base class of those configs)."""

    model_path: str | None = Field(
        default=None,
        description="A local Hugging Face causal LM directory to start every arm from, with its own "
        "tokenizer and chat template; None = the tiny from-scratch policy built from `policy` with the "
        "locally trained tokenizer.",
    )


@dataclass(frozen=True)
class StartModel:
    """A local Hugging Face causal LM that every arm starts from (a deep copy each), and its tokenizer."""

    path: str
    model: Any
    tokenizer: Any

    @property
    def parameters(self) -> int:
        return count_parameters(self.model)

    @property
    def context_limit(self) -> int | None:
        """The longest sequence the model takes (from its config), or None when it names none."""
        return context_limit(self.model)

    def fresh(self) -> Any:
        """A copy of the starting model for one arm (the original is never trained)."""
        return copy.deepcopy(self.model)

    def describe(self) -> str:
        """The path as a code span and the parameter count, for reports: `` `PATH` (N.NNM parameters)``."""
        return f"`{self.path}` ({self.parameters / 1e6:.2f}M parameters)"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "parameters": self.parameters, "context_limit": self.context_limit}


def load_start_model(path: str | None) -> StartModel | None:
    """The model at ``path`` with its tokenizer, on the CPU in float32; None for no path.

    The trainers move it to their configured device and precision. Raises
    :class:`~transferlab.agent_rl.policies.model.PolicyNotFoundError` (naming the fix) when ``path``
    holds no loadable model.
    """
    if path is None:
        return None
    model, tokenizer = load_policy(path, device="cpu", dtype="float32")
    return StartModel(str(Path(path).expanduser()), model, tokenizer)


C = TypeVar("C", bound=ModelChoice)


def open_experiment(
    name: str,
    config: C,
    runs_root: Path,
    resume: Path | None,
    console: Console | None = None,
    shared: bool = False,
) -> tuple[Experiment, C, StartModel | None]:
    """:meth:`Experiment.open` plus the run's starting model (None = the tiny policy).

    A new run loads the model before its directory is created, so a bad ``model_path`` leaves no
    run behind; a resumed run loads the model its saved config names.
    """
    start = load_start_model(config.model_path) if resume is None else None
    exp, config = Experiment.open(name, config, runs_root, resume, console, shared)
    if resume is not None:
        try:
            start = load_start_model(config.model_path)
        except BaseException:
            exp.run.release()
            raise
    return exp, config, start


def fit_context(rl: RLConfig, start: StartModel | None, say: Callable[[str], None]) -> RLConfig:
    """``rl`` with ``max_context`` clipped to the starting model's context limit (with a warning line).

    Only agent mode has episodes whose context grows; single-step settings are returned as they are.
    """
    limit = start.context_limit if start is not None else None
    if start is None or limit is None or rl.max_context <= limit or rl.mode != "agent":
        return rl
    say(
        f"warning: max_context {rl.max_context} is longer than {start.path}'s {limit} positions; "
        f"clipped to {limit}"
    )
    return rl.model_copy(update={"max_context": limit})


def policy_line(policy: TinyPolicyConfig, start: StartModel | None) -> str:
    """The report's ``policy:`` settings line: the starting model, or the tiny policy's size."""
    if start is not None:
        return f"policy: {start.describe()}, with its own tokenizer and chat template"
    return (
        f"policy: {policy.n_layer} layers, width {policy.d_model}, trained from scratch; tokenizer "
        "trained here"
    )


def model_record(policy: TinyPolicyConfig, start: StartModel | None) -> dict[str, Any]:
    """What the summary records about the starting policy."""
    if start is not None:
        return start.to_dict()
    return {"path": None, "tiny": policy.model_dump()}

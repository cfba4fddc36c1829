"""The agent-environment contract: the reward table, the shared step tail, the protocols."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

from transferlab.platform import agent_env
from transferlab.platform.agent_env import (
    CUT_REASONS,
    FAILED,
    RewardTable,
    Task,
    ToolEnv,
    cut_penalty,
    finish_step,
)
from transferlab.platform.config import ConfigError
from transferlab.platform.tools import MAX_TEXT
from transferlab.platform.trajectory import Domain

TABLE = RewardTable(
    weights={"query": 0.5, "tool_error": -1.0, "score": 2.0, "task_failed": -4.0},
    descriptions={"query": "A query."},
    final=("score", "task_failed"),
)


def test_doctests() -> None:
    assert doctest.testmod(agent_env).failed == 0


def test_weigh_multiplies_each_event_and_sums_in_order() -> None:
    total, components = TABLE.weigh({"tool_error": 1, "query": 2, "score": 7.5})
    assert components == {"tool_error": -1.0, "query": 1.0, "score": 15.0}
    assert list(components) == ["tool_error", "query", "score"]
    assert total == 15.0 and isinstance(total, float)
    assert TABLE.weigh({}) == (0.0, {})


@pytest.mark.parametrize("reason", CUT_REASONS)
@pytest.mark.parametrize("end_only", [False, True])
def test_a_cut_pays_what_the_step_limit_pays(reason: str, end_only: bool) -> None:
    table = TABLE.model_copy(update={"end_only": end_only})
    limit = finish_step("x", {}, {}, terminated=False, step=2, max_steps=2, table=table, ending="y")
    assert cut_penalty(table, reason) == (limit.reward, limit.info["components"]) == (-4.0, {FAILED: -4.0})


def test_cut_penalty_rejects_other_reasons_and_tables_without_task_failed() -> None:
    with pytest.raises(ValueError, match="unknown cut reason 'steps'"):
        cut_penalty(TABLE, "steps")  # the env pays its own step limit
    with pytest.raises(ValueError, match=r"no weight for \['task_failed'\]"):
        cut_penalty(RewardTable(weights={"query": 0.5}), "context")


def test_an_end_only_table_pays_only_the_final_components() -> None:
    sparse = TABLE.model_copy(update={"end_only": True})
    assert sparse.weigh({"query": 1, "tool_error": 1}) == (0.0, {})
    assert sparse.weigh({"query": 1, "task_failed": 1}) == (-4.0, {"task_failed": -4.0})


def test_a_zero_weight_is_still_recorded() -> None:
    table = RewardTable(weights={"task_failed": 0.0})
    assert table.weigh({"task_failed": 1}) == (0.0, {"task_failed": 0.0})


def test_an_unknown_event_names_the_table_components() -> None:
    with pytest.raises(KeyError, match="no reward component 'nope'; this table has"):
        TABLE.weigh({"nope": 1})
    assert TABLE["score"] == 2.0


def test_require_names_the_missing_components() -> None:
    TABLE.require(["query", "score"], "Toy-v0")
    with pytest.raises(ValueError, match=r"no weight for \['report', 'zz'\], which Toy-v0 records"):
        TABLE.require(["query", "zz", "report"], "Toy-v0")


def test_descriptions_and_final_must_name_weighted_components() -> None:
    with pytest.raises(ConfigError, match="without a weight"):
        RewardTable(weights={"a": 1.0}, final=("b",))
    with pytest.raises(ConfigError, match="without a weight"):
        RewardTable(weights={"a": 1.0}, descriptions={"c": "?"})


def test_finish_step_truncates_at_the_limit_unless_terminated() -> None:
    events: dict[str, float] = {"query": 1}
    info: dict[str, Any] = {"step": 2}
    out = finish_step("rows", events, info, terminated=False, step=2, max_steps=3, table=TABLE, ending="x")
    assert out == ("rows", 0.5, False, False, info)
    assert info == {"step": 2, "components": {"query": 0.5}, "events": {"query": 1}}

    out = finish_step(
        "rows", {"query": 1}, {}, terminated=False, step=3, max_steps=3, table=TABLE, ending="a report"
    )
    assert out.truncated and not out.terminated and out.reward == -3.5
    assert out.observation == "rows\n(step limit of 3 reached without a report)"
    assert out.info["events"] == {"query": 1, "task_failed": 1}

    out = finish_step(
        "done", {"score": 5.0}, {}, terminated=True, step=3, max_steps=3, table=TABLE, ending="x"
    )
    assert out.terminated and not out.truncated and out.info["components"] == {"score": 10.0}


def test_finish_step_keeps_the_observation_in_the_text_space() -> None:
    out = finish_step(
        "é" * (MAX_TEXT + 5), {}, {}, terminated=True, step=1, max_steps=3, table=TABLE, ending="x"
    )
    assert len(out.observation) == MAX_TEXT and out.observation.startswith("??")
    assert out.observation.endswith("[truncated]")


class _Board:
    """A minimal tool environment written only against the protocol (no domain code)."""

    domain: Domain = "coding"
    max_steps = 2
    rewards = TABLE

    def __init__(self) -> None:
        self.last_timings: dict[str, float] = {}
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self.steps = 0
        return "board", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        return finish_step(
            action, {"query": 1}, {}, terminated=False, step=self.steps, max_steps=2, table=TABLE, ending="x"
        )

    def render(self) -> str | None:
        return None

    def close(self) -> None:
        pass


class _Ticket:
    task_id = "t-1"
    domain: Domain = "ecommerce"
    split = "train"
    provenance: dict[str, Any] = {}  # noqa: RUF012


def test_the_protocols_are_structural_and_runtime_checkable() -> None:
    board: ToolEnv = _Board()
    assert isinstance(board, ToolEnv) and isinstance(_Ticket(), Task)
    assert board.step("a")[1] == 0.5 and board.step("b")[3] is True
    assert not isinstance(object(), ToolEnv) and not isinstance(object(), Task)

    no_step = type("NoStep", (), {k: v for k, v in vars(_Board).items() if k != "step"})
    assert not isinstance(no_step(), ToolEnv)

"""`transferlab/OpsAnalysis-v0`: find why a category's sales fell, with data-platform tools."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium import spaces

from transferlab.platform.agent_env import RewardTable, finish_step
from transferlab.platform.tools import CHARSET, MAX_TEXT, to_charset
from transferlab.simulator.ops.data_platform import (
    EVIDENCE_SOURCE,
    TOOLS,
    DataPlatform,
    ToolError,
    parse_action,
)
from transferlab.simulator.ops.grader import (
    OPS_EVENTS,
    Retrieved,
    checked_before_report,
    named_causes,
    ops_reward_table,
    rubric_score,
)
from transferlab.simulator.ops.scenarios import (
    SPLITS,
    OpsTask,
    Scenario,
    ScenarioConfig,
    check_split,
    scenario,
    seed_of,
    task_seeds,
)

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain

ReportScorer = Callable[[OpsTask, str, Retrieved], float]
"""Grades a report 0-10: the task, the report's text and what its episode retrieved."""


def rubric_scorer(task: OpsTask, report: str, retrieved: Retrieved) -> float:
    """The default report scorer: the rubric's 0-10 total."""
    return rubric_score(task, report, retrieved).total


class OpsAnalysisEnv(gym.Env[str, str]):
    """Find why sales of a category fell, with the tools of a deterministic data platform.

    ## Description
    Each task comes from a world scenario whose cause is known (stock-out, competitor price cut,
    failed campaign, shipping delays, seasonality; :mod:`transferlab.simulator.ops.scenarios`). The
    agent queries the platform (:mod:`transferlab.simulator.ops.data_platform`) and ends with
    ``generate_report``, graded by the rubric (:func:`~transferlab.simulator.ops.grader.rubric_score`)
    against what the episode's own tool calls returned, or by a given ``report_scorer`` (e.g. human
    expert ratings).

    ## Action Space
    ``Text(max_length=32768)``: one JSON tool call in the coding environment's form, e.g.
    ``{"action": "query_sales_data", "category": "shoes", "time": "last 30 days"}``. Anything else is a
    tool error, not a crash.

    ## Observation Space
    ``Text(max_length=32768)`` over printable ASCII: the question and the tool list after reset; the
    tool's result (``key: value`` lines) after a step.

    ## Rewards
    Named components per step from a :class:`~transferlab.platform.agent_env.RewardTable`: dense
    (query +0.5, check before report +1, redundant -0.5, tool error -1, report without query -2,
    2 x report score, -4 without a report) or sparse (2 x report score at the end, -5 without a
    report). ``info["components"]`` (also ``info["reward_components"]``) holds every component of the
    step. Every ending pays a terminal component: a report ``report_score`` (2 x its 0-10 score, a
    success at 8 or more); the step limit, and a rollout's context-limit or timeout cut
    (:func:`~transferlab.platform.agent_env.cut_penalty` with this env's ``rewards``), ``task_failed``.

    ## Starting State
    A task drawn with ``self.np_random`` from the split's tasks (``options={"split": "validation"}``;
    the splits are train, validation and test), ``options={"task_id": "ops-0007"}``, or
    ``options={"task": task}`` with an
    :class:`~transferlab.simulator.ops.scenarios.OpsTask` (rebuilt from its seed, so it must be a task
    of this env's ``scenario_config``).

    ## Episode End
    ``terminated`` on ``generate_report``; ``truncated`` after ``max_steps`` steps without one. A
    rollout may also cut an episode at its context limit or timeout (``info["cut"]``), paying
    ``task_failed``.

    ## Arguments
    ``n_tasks`` per split (default 30), ``reward_mode`` ("dense", "sparse" or a table), ``max_steps``
    (10), ``report_scorer`` (default: the rubric), ``scenario_config``.

    ## Version History
    * v0: initial version; later in v0, the ``shipping_delays`` and ``seasonality`` families and
      540-day scenario worlds (task ids map to other families and worlds than before).
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (Gymnasium declares it an instance attribute)
    domain: Domain = "ecommerce"

    def __init__(
        self,
        n_tasks: int = 30,
        reward_mode: str | RewardTable = "dense",
        max_steps: int = 10,
        report_scorer: ReportScorer | None = None,
        scenario_config: ScenarioConfig | None = None,
        render_mode: str | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if n_tasks < 1:
            raise ValueError(f"n_tasks must be >= 1, got {n_tasks}")
        self.seeds = {split: task_seeds(split, n_tasks) for split in SPLITS}
        self.rewards = ops_reward_table(reward_mode) if isinstance(reward_mode, str) else reward_mode
        self.rewards.require(OPS_EVENTS, "OpsAnalysis-v0")
        self.max_steps = max_steps
        self.report_scorer = report_scorer or rubric_scorer
        self.scenario_config = scenario_config or ScenarioConfig()
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self.platform: DataPlatform | None = None
        self.done = True
        self._last_obs = ""
        self.last_timings: dict[str, float] = {"env_s": 0.0}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.scenario = self._pick(options or {})
        self.task = self.scenario.task
        self.platform = DataPlatform(self.scenario)
        self.steps, self.queries, self.tool_errors = 0, 0, 0
        self.seen: set[str] = set()
        self.queried: set[str] = set()
        self.done = False
        obs = to_charset(self._intro())
        self.returned: list[str] = [obs]  # the introduction and every tool result: what a report may cite
        self._last_obs = obs
        return obs, {"task_id": self.task.task_id, "split": self.task.split, "max_steps": self.max_steps}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.platform is None or self.done:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        t0 = time.perf_counter()
        self.steps += 1
        events: dict[str, float] = {}
        info: dict[str, Any] = {"step": self.steps, "tool": None, "tool_ok": False, "success": None}
        terminated = False
        try:
            call = parse_action(action)
            info["tool"] = call.action
            if call.action == "generate_report":
                text, terminated = self._report(call.args["text"], events, info), True
            else:
                text = self.platform.call(call)
                self.returned.append(text)
                if call.key() in self.seen:
                    events["redundant_query"] = 1
                else:
                    events["query_success"] = 1
                self.seen.add(call.key())
                self.queried.add(call.action)
                self.queries += 1
            info["tool_ok"] = True
        except ToolError as err:
            self.tool_errors += 1
            events["tool_error"] = 1
            text = f"tool error: {err}"
        out = finish_step(
            text,
            events,
            info,
            terminated=terminated,
            step=self.steps,
            max_steps=self.max_steps,
            table=self.rewards,
            ending="a report",
        )
        if out.truncated:
            info["success"] = False
        info.update(reward_components=info["components"], tool_errors=self.tool_errors)
        self.last_timings = {"env_s": time.perf_counter() - t0}
        self.done = out.terminated or out.truncated
        self._last_obs = out.observation
        return out

    def render(self) -> str | None:  # type: ignore[override]
        return self._last_obs if self.render_mode == "ansi" else None

    # -- internals ----------------------------------------------------------------------------------

    def _pick(self, options: dict[str, Any]) -> Scenario:
        if "task" in options:
            return self._scenario_of(options["task"])
        if "task_id" in options:
            return scenario(seed_of(str(options["task_id"])), self.scenario_config)
        seeds = self.seeds[check_split(options.get("split", "train"))]
        return scenario(seeds[int(self.np_random.integers(len(seeds)))], self.scenario_config)

    def _scenario_of(self, task: Any) -> Scenario:
        if not isinstance(task, OpsTask):
            raise ValueError(f'options["task"] must be an OpsTask, got {type(task).__name__}')
        built = scenario(seed_of(task.task_id), self.scenario_config)
        if built.task != task:
            raise ValueError(
                f"task {task.task_id!r} differs from the one this env builds from its seed; build it "
                "with this env's scenario_config: scenario(seed_of(task_id), env.scenario_config).task"
            )
        return built

    def _report(self, text: str, events: dict[str, float], info: dict[str, Any]) -> str:
        if self.queries == 0:
            events["report_without_query"] = 1
        if checked_before_report(named_causes(text), self.queried, EVIDENCE_SOURCE):
            events["check_before_report"] = 1
        score = float(self.report_scorer(self.task, text, Retrieved.from_texts(self.returned)))
        events["report_score"] = score
        info["report_score"] = score
        info["success"] = score >= 8.0
        return f"report received; score {score:.1f}/10"

    def _intro(self) -> str:
        tools = "; ".join(
            f"{n}({', '.join([*req, *(o + '?' for o in opt)])})" for n, (req, opt) in TOOLS.items()
        )
        return "\n".join(
            [
                f"Task: {self.task.question}",
                "",
                f'Tools, one JSON object per turn with an "action" key: {tools}.',
                'Example: {"action": "query_sales_data", "category": "'
                + self.task.category
                + '", "time": "last 30 days"}',
                f"Step budget: {self.max_steps}.",
            ]
        )


# -- scripted agents (tests, SFT data) -----------------------------------------------------------------


def call(action: str, **args: str) -> str:
    """A JSON tool call."""
    import json

    return json.dumps({"action": action, **args}, ensure_ascii=False)


class ExpertAgent:
    """Queries sales (and last year's), then every evidence source, then reports the cause it finds.

    Seasonality is concluded only when nothing else explains the drop and last year's window dipped too.
    ``compact=True`` writes only the drop and each cause with its numbers (about half the characters,
    the same rubric score): no sentence ruling a cause out.
    """

    def __init__(self, compact: bool = False) -> None:
        self.fields: dict[str, str] = {}
        self.step = 0
        self.compact = compact

    def _rule_out(self, lines: list[str], text: str) -> None:
        """A sentence that rules a cause out; a compact report leaves it out."""
        if not self.compact:
            lines.append(text)

    def reset(self, category: str) -> None:
        self.category, self.fields, self.step = category, {}, 0

    def act(self, last_observation: str) -> str:
        from transferlab.simulator.ops.data_platform import parse_fields

        self.fields.update(parse_fields(last_observation))
        cat, self.step = self.category, self.step + 1
        plan = [
            call("query_sales_data", category=cat, time="last 30 days"),
            call("query_sales_data", category=cat, time="last 30 days", compare="last_year"),
            call("analyze_user_feedback", filter="negative", category=cat),
            call("check_inventory", category=cat),
            call("competitor_analysis", category=cat),
            call("campaign_analysis", category=cat),
        ]
        if self.step <= len(plan):
            return plan[self.step - 1]
        return call("generate_report", text=self.report())

    def report(self) -> str:
        f = self.fields

        def num(key: str, default: float = 0.0) -> float:
            return float(f.get(key, default))

        window = "" if self.compact else " in the last 30 days vs the 30 before"
        lines = [
            f"Sales of {self.category} fell: orders changed {num('orders_change_pct')}% "
            f"(GMV {num('gmv_change_pct')}%){window}."
        ]
        found = False
        if num("stock_out_days") >= 5:
            found = True
            lines.append(
                f"Cause: a stock-out. The category was out of stock on {int(num('stock_out_days'))} of the "
                f"last 30 days; backorders shipped late ({int(num('late_deliveries'))} late deliveries, "
                f"{int(num('complaints'))} complaints)."
            )
        else:
            self._rule_out(lines, f"No stock-out: {int(num('stock_out_days'))} stock-out days.")
        if num("competitor_change_pct") <= -15:
            found = True
            lines.append(
                "Cause: a competitor price cut. The competitor price index fell to "
                f"{num('competitor_index')} ({num('competitor_change_pct')}% vs the window before)."
            )
        else:
            self._rule_out(lines, f"Competitor prices stayed stable (index {num('competitor_index', 1.0)}).")
        if "campaign_margin" in f and num("campaign_margin") < 0 and num("campaign_discount_pct") >= 30:
            found = True
            lines.append(
                f"Cause: a failed campaign. A {num('campaign_discount_pct')}% discount campaign pulled "
                f"demand forward into the previous window and lost money (margin {num('campaign_margin')})."
            )
        else:
            self._rule_out(lines, "No campaign explains it.")
        found = self._shipping(lines, stock_out=num("stock_out_days") >= 5) or found
        if not found:
            found = self._seasonality(lines)
        else:
            self._rule_out(
                lines,
                "Seasonality is not the cause "
                f"(same window last year: {num('last_year_orders_change_pct')}%).",
            )
        if not found:
            lines.append("The cause is unclear from the data.")
        return " ".join(lines)

    def _num(self, key: str, default: float = 0.0) -> float:
        return float(self.fields.get(key, default))

    def _shipping(self, lines: list[str], stock_out: bool) -> bool:
        """Late deliveries without a stock-out: the category's carrier is late."""
        n = self._num
        if stock_out:  # backorders explain the late deliveries (already reported)
            return False
        if n("late_delivery_rate_pct") >= 15:
            lines.append(
                f"Cause: shipping delays. {int(n('late_deliveries'))} late deliveries in the last 30 "
                f"days ({n('late_delivery_rate_pct')}% of deliveries; {n('late_delivery_rate_pct_prev')}% "
                f"in the 30 days before) and {int(n('delivery_complaints'))} complaints about delivery; "
                f"customers whose orders came late bought {self.category} again less."
            )
            return True
        self._rule_out(lines, f"Deliveries were not late: late delivery rate {n('late_delivery_rate_pct')}%.")
        return False

    def _seasonality(self, lines: list[str]) -> bool:
        """Nothing else changed and the same window last year dipped too: a seasonal dip."""
        n = self._num
        if n("last_year_orders_change_pct") <= -5:
            lines.append(
                f"Cause: seasonality. The same 30 days last year dipped too: orders changed "
                f"{n('last_year_orders_change_pct')}% ({int(n('last_year_orders'))} orders vs "
                f"{int(n('last_year_orders_prev'))} in the 30 days before), a yearly low of {self.category}."
            )
            return True
        self._rule_out(
            lines,
            f"Seasonality is not the cause (same window last year: {n('last_year_orders_change_pct')}%).",
        )
        return False


class NaiveAgent:
    """Reports at once, without a query."""

    def reset(self, category: str) -> None:
        self.category = category

    def act(self, last_observation: str) -> str:
        return call(
            "generate_report", text=f"Sales of {self.category} fell; customers bought less this month."
        )


class RandomAgent:
    """Random tools with random (sometimes bad) arguments; reports a random cause at a random step."""

    CAUSE_WORDS = (
        "a stock-out",
        "a competitor price cut",
        "a failed campaign",
        "seasonality",
        "late deliveries",
    )

    def __init__(self, seed: int = 0) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)

    def reset(self, category: str) -> None:
        self.category = category

    def act(self, last_observation: str) -> str:
        from transferlab.simulator.vocabulary import CATEGORIES

        r = self.rng
        if r.random() < 0.2:
            cause = self.CAUSE_WORDS[int(r.integers(len(self.CAUSE_WORDS)))]
            return call("generate_report", text=f"Sales of {self.category} fell because of {cause}.")
        name = list(TOOLS)[int(r.integers(len(TOOLS) - 1))]
        cat = [*CATEGORIES, "toys"][int(r.integers(len(CATEGORIES) + 1))]
        return call(name, category=cat) if name != "analyze_user_feedback" else call(name, filter="negative")


def run_episode(env: OpsAnalysisEnv, agent: Any, **reset_kwargs: Any) -> dict[str, Any]:
    """One episode of a scripted agent: observations, actions, rewards, the final info."""
    obs, info = env.reset(**reset_kwargs)
    agent.reset(env.task.category)
    out: dict[str, Any] = {"task_id": info["task_id"], "observations": [obs], "actions": [], "rewards": []}
    done = False
    while not done:
        action = agent.act(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        out["actions"].append(action)
        out["observations"].append(obs)
        out["rewards"].append(reward)
        done = terminated or truncated
    out["info"] = info
    return out

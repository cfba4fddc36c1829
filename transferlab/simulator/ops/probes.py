"""Attacks on the report rubric: agents that try to pass OpsAnalysis-v0 without the analysis.

Before the rubric trains anything, these probes try to pass it without doing the task
(``../docs/science.md`` rule 5). Each probe is a scripted agent run through the environment, so it
is graded exactly as a trained policy is (what its episode retrieved, the rubric, the step limit).

=================================  ============  ==========================================================
probe                              kind          what it sends
=================================  ============  ==========================================================
spray: <cause>                     degenerate    no query; ``Cause: <cause>.`` and a spray of numbers next
                                                 to every metric's name (one probe per cause)
every cause named                  degenerate    the expert's queries and report, then every cause asserted
expert report, no queries          degenerate    the expert's final report of this task as the first action
every tool output pasted           degenerate    the expert's queries, then all their output as the report
random agent                       degenerate    :class:`~transferlab.simulator.ops.env.RandomAgent`
one cause always: <cause>          chance        the expert's queries, then ``Cause: <cause>.`` and all
                                                 their output: right at most when the task's family is
                                                 that cause, the floor no per-report grader goes below
expert                             honest        :class:`~transferlab.simulator.ops.env.ExpertAgent`
expert, compact                    honest        the same, compact reports (the demonstrations)
expert + a cleared cause           honest        the expert's report and ``I also looked at <an absent
                                                 cause>: nothing unusual.``
=================================  ============  ==========================================================

Held (:data:`LIMITS`): every degenerate probe passes at most 5% of a split's tasks, every honest one
at least 95%. ``transferlab ops probes --split test`` prints the table.

>>> [p.name for p in probes() if p.kind == "honest"]
['expert', 'expert, compact', 'expert + a cleared cause']
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from transferlab.simulator.ops.data_platform import parse_action
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, RandomAgent, call
from transferlab.simulator.ops.scenarios import FAMILIES, OpsTask, check_split, task_ids

ProbeKind = Literal["degenerate", "chance", "honest"]
LIMITS: dict[str, tuple[str, float]] = {"degenerate": ("<=", 0.05), "honest": (">=", 0.95)}
"""What each kind must hold on a split: at most 5% success for a degenerate probe, at least 95% for an
honest one. A chance probe has no limit (it passes at most on its cause's family)."""
CAUSE_WORDS: dict[str, str] = {
    "stock_out": "a stock-out",
    "competitor_price_cut": "a competitor price cut",
    "failed_campaign": "a failed campaign",
    "shipping_delays": "shipping delays",
    "seasonality": "seasonality",
}
CLEARED_WORDS: dict[str, str] = {
    "stock_out": "stock-outs",
    "competitor_price_cut": "competitor price cuts",
    "failed_campaign": "campaigns",
    "shipping_delays": "late deliveries",
    "seasonality": "seasonality",
}
SPRAY = " ".join(str(n) for n in range(3, 100, 6)) + " 0.64 0.62 0.7 50 40 45 -10 -20 -30 -40 -1000"
"""The numbers a spraying report sends after each metric's name."""
SPRAY_METRICS = (
    "orders",
    "stock-out days",
    "late deliveries",
    "complaints",
    "competitor index",
    "discount",
    "margin",
    "last year",
)


Writer = Callable[[OpsTask, list[str], ExpertAgent], str]
"""Writes a probe's report from the task, the tool outputs its episode got and the expert that made
its queries (holding what they returned)."""


class ScriptedReport:
    """An agent that makes the expert's queries (or none), then sends ``write(task, outputs, expert)``."""

    def __init__(self, write: Writer, query: bool, compact: bool = False) -> None:
        self.write, self.query, self.compact = write, query, compact

    def reset(self, task: OpsTask) -> None:
        self.task, self.expert = task, ExpertAgent(self.compact)
        self.outputs: list[str] = []
        self.expert.reset(task.category)
        self.steps = 0

    def act(self, last_observation: str) -> str:
        self.steps += 1
        if self.steps > 1:
            self.outputs.append(last_observation)
        if self.query:
            action = self.expert.act(last_observation)
            if parse_action(action).action != "generate_report":
                return action
        return call("generate_report", text=self.write(self.task, self.outputs, self.expert))


@dataclass(frozen=True)
class Probe:
    """One attack (or honest control) on the rubric."""

    name: str
    kind: ProbeKind
    agent: Callable[[], Any]  # a fresh agent with reset(task) and act(observation)


@dataclass(frozen=True)
class ProbeResult:
    """A probe's success on a split: rate, mean score, and whether it holds its kind's limit."""

    name: str
    kind: ProbeKind
    split: str
    tasks: int
    success: float
    mean_score: float
    held: bool | None

    def row(self) -> dict[str, Any]:
        return {
            "probe": self.name,
            "kind": self.kind,
            "split": self.split,
            "tasks": self.tasks,
            "success": self.success,
            "mean_score": self.mean_score,
            "held": self.held,
        }


def expert_report(task: OpsTask, compact: bool = False) -> str:
    """The expert's final report on ``task`` (its queries made in a fresh environment)."""
    env = OpsAnalysisEnv(n_tasks=1)
    obs, _ = env.reset(options={"task": task})
    agent = ExpertAgent(compact=compact)
    agent.reset(task.category)
    while True:
        action = agent.act(obs)
        parsed = parse_action(action)
        if parsed.action == "generate_report":
            return str(parsed.args["text"])
        obs, _, _, _, _ = env.step(action)


def _spray(cause: str) -> Writer:
    def write(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
        return f"Cause: {CAUSE_WORDS[cause]}. " + " ".join(f"{m} {SPRAY}." for m in SPRAY_METRICS)

    return write


def _every_cause(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
    causes = ", ".join(CAUSE_WORDS[c] for c in FAMILIES)
    return expert.report() + f" Causes: {causes}."


def _unqueried(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
    return expert_report(task)


def _pasted(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
    return "\n".join(outputs)


def _always(cause: str) -> Writer:
    def write(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
        return f"Cause: {CAUSE_WORDS[cause]}.\n" + "\n".join(outputs)

    return write


def _expert(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
    return expert.report()


def _cleared(task: OpsTask, outputs: list[str], expert: ExpertAgent) -> str:
    return expert.report() + f" I also looked at {CLEARED_WORDS[task.absent[0]]}: nothing unusual."


class _Random:
    """The random agent, reset with the task like the others (a seed per task)."""

    def reset(self, task: OpsTask) -> None:
        self.agent = RandomAgent(seed=task.seed)
        self.agent.reset(task.category)

    def act(self, last_observation: str) -> str:
        return self.agent.act(last_observation)


def probes() -> list[Probe]:
    """Every probe, in the table's order."""
    out = [
        Probe(f"spray: {c}", "degenerate", functools.partial(ScriptedReport, _spray(c), False))
        for c in FAMILIES
    ]
    out += [
        Probe("every cause named", "degenerate", lambda: ScriptedReport(_every_cause, True)),
        Probe("expert report, no queries", "degenerate", lambda: ScriptedReport(_unqueried, False)),
        Probe("every tool output pasted", "degenerate", lambda: ScriptedReport(_pasted, True)),
        Probe("random agent", "degenerate", _Random),
    ]
    out += [
        Probe(f"one cause always: {c}", "chance", functools.partial(ScriptedReport, _always(c), True))
        for c in FAMILIES
    ]
    out += [
        Probe("expert", "honest", lambda: ScriptedReport(_expert, True)),
        Probe("expert, compact", "honest", lambda: ScriptedReport(_expert, True, compact=True)),
        Probe("expert + a cleared cause", "honest", lambda: ScriptedReport(_cleared, True)),
    ]
    return out


def probe_episode(env: OpsAnalysisEnv, probe: Probe, task_id: str) -> dict[str, Any]:
    """One episode of ``probe`` on ``task_id``: its report score (0 without a report) and success."""
    obs, _ = env.reset(options={"task_id": task_id})
    agent = probe.agent()
    agent.reset(env.task)
    info: dict[str, Any] = {}
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(agent.act(obs))
        done = terminated or truncated
    return {"score": float(info.get("report_score") or 0.0), "success": bool(info.get("success"))}


def held(kind: ProbeKind, success: float) -> bool | None:
    """Whether a success rate holds its kind's limit (None for a chance probe)."""
    if kind not in LIMITS:
        return None
    op, limit = LIMITS[kind]
    return success <= limit if op == "<=" else success >= limit


def run_probes(
    split: str,
    n_tasks: int,
    chosen: Sequence[Probe] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ProbeResult]:
    """Every probe (or ``chosen``) on the first ``n_tasks`` scenarios of ``split``."""
    ids = task_ids(check_split(split), n_tasks)
    env = OpsAnalysisEnv(n_tasks=1)
    out = []
    for probe in chosen if chosen is not None else probes():
        if progress is not None:
            progress(probe.name)
        eps = [probe_episode(env, probe, tid) for tid in ids]
        success = float(np.mean([e["success"] for e in eps]))
        score = float(np.mean([e["score"] for e in eps]))
        verdict = held(probe.kind, success)
        out.append(ProbeResult(probe.name, probe.kind, split, len(ids), success, score, verdict))
    return out


def probe_table(results: Sequence[ProbeResult]) -> str:
    """A Markdown table of the results."""
    lines = [
        "| probe | kind | success | mean score /10 | limit | held |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for r in results:
        limit = " ".join(str(x) for x in LIMITS[r.kind]) if r.kind in LIMITS else "-"
        mark = "-" if r.held is None else "yes" if r.held else "**no**"
        lines.append(f"| {r.name} | {r.kind} | {r.success:.1%} | {r.mean_score:.2f} | {limit} | {mark} |")
    return "\n".join(lines)


def probes_json(results: Sequence[ProbeResult]) -> str:
    """The results as JSON rows."""
    return json.dumps([r.row() for r in results], indent=2)

"""Ops analysis reports for people to rate, and how the rubric agrees with them.

:func:`queue_ops_reports` runs ``transferlab/OpsAnalysis-v0`` episodes with the scripted agents and
stores each final report with its rubric score; reviewers rate them 0-10 (the app's "Rate reports"
page, or ``transferlab review rate report-<id> SCORE``); :func:`rubric_vs_human` pairs every rated
report's mean rating with its rubric score.

    >>> from transferlab.human_review.service import ReviewService
    >>> from transferlab.human_review.store import ReviewStore
    >>> svc = ReviewService(ReviewStore("sqlite://"))
    >>> ada = svc.add_user(None, "ada", "pass-word-ada", "admin")
    >>> bob = svc.add_user(ada, "bob", "pass-word-bob", "reviewer")
    >>> ids = queue_ops_reports(svc, ada, n_tasks=1)
    >>> [svc.report(ada, i).source for i in ids]
    ['expert', 'random']
    >>> for i, score in zip(ids, (9.0, 2.0)):  # bob rates; ada queued them, so she may not
    ...     _ = svc.rate(bob, report_subject(i), score)
    >>> rubric_vs_human(svc, ada).n
    2
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from transferlab.human_review.service import Report, ReviewError, ReviewService, User, report_subject
from transferlab.simulator.ops.grader import Agreement, rubric_human_agreement

__all__ = [
    "AGENTS",
    "RatedReport",
    "human_rewards",
    "queue_ops_reports",
    "rated_reports",
    "report_subject",
    "report_text",
    "rubric_vs_human",
]


def _expert(seed: int) -> Any:
    from transferlab.simulator.ops import ExpertAgent

    return ExpertAgent()


def _naive(seed: int) -> Any:
    from transferlab.simulator.ops import NaiveAgent

    return NaiveAgent()


def _random(seed: int) -> Any:
    from transferlab.simulator.ops import RandomAgent

    return RandomAgent(seed=seed)


#: The scripted agents that can write reports, by the ``source`` their reports get.
AGENTS: dict[str, Callable[[int], Any]] = {"expert": _expert, "naive": _naive, "random": _random}


@dataclass(frozen=True)
class RatedReport:
    """A report with at least one rating: its rubric score and the mean of its ratings (0-10)."""

    report: Report
    rubric: float
    human: float
    n_ratings: int


def report_text(action: str) -> str | None:
    """The report of a final ``generate_report`` action (JSON), or None for any other action.

    >>> report_text('{"action": "generate_report", "text": "a stock-out"}')
    'a stock-out'
    >>> report_text('{"action": "query_sales"}') is None
    True
    """
    from transferlab.simulator.ops.data_platform import ToolError, parse_action

    try:
        call = parse_action(action)
    except ToolError:
        return None
    return (str(call.args["text"]) or None) if call.action == "generate_report" else None


def queue_ops_reports(
    service: ReviewService,
    actor: User,
    n_tasks: int = 6,
    split: str = "validation",
    seed: int = 0,
    agents: Sequence[str] = ("expert", "random"),
) -> list[int]:
    """Run each agent on ``n_tasks`` ops tasks and store its final report with its rubric score.

    Tasks are the first ``n_tasks`` of ``split`` from scenario seed ``seed`` on (another seed, other
    tasks); random agents are seeded with ``seed + i`` for the i-th task. An episode that ends without
    a report (truncated) stores nothing. Returns the new report ids in order.
    """
    from transferlab.simulator.ops import OpsAnalysisEnv, run_episode, scenario, seed_of, task_ids

    if n_tasks < 1:
        raise ReviewError(f"n_tasks={n_tasks} must be at least 1")
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise ReviewError(f"unknown agents {unknown}; use some of {', '.join(AGENTS)}")
    ids: list[int] = []
    for i, task_id in enumerate(task_ids(split, n_tasks, start=seed)):
        question = scenario(seed_of(task_id)).task.question
        for name in agents:
            env = OpsAnalysisEnv(n_tasks=1)
            episode = run_episode(env, AGENTS[name](seed + i), options={"task_id": task_id})
            text = report_text(episode["actions"][-1]) if episode["actions"] else None
            if text is None:
                continue
            score = episode["info"].get("report_score")
            ids.append(service.add_report(actor, task_id, question, text, score, name))
    return ids


def rated_reports(service: ReviewService, actor: User) -> list[RatedReport]:
    """Every report with at least one rating and a rubric score, with its mean rating, oldest first."""
    by_subject: dict[str, list[float]] = {}
    for rating in service.ratings(actor):
        by_subject.setdefault(rating.subject, []).append(rating.score)
    out = []
    for report in service.reports(actor):
        scores = by_subject.get(report.subject)
        if scores and report.rubric_score is not None:
            out.append(RatedReport(report, report.rubric_score, sum(scores) / len(scores), len(scores)))
    return out


def rubric_vs_human(service: ReviewService, actor: User) -> Agreement | None:
    """Spearman and mean |difference| of rubric scores vs mean human ratings of the rated reports.

    None when fewer than 2 reports (with a rubric score) are rated.
    """
    rated = rated_reports(service, actor)
    if len(rated) < 2:
        return None
    return rubric_human_agreement([r.rubric for r in rated], [r.human for r in rated])


def human_rewards(service: ReviewService, actor: User) -> list[tuple[str, float]]:
    """Every rating of a report as ``(report-<id>, reward in [0, 1])``, oldest first: what
    :func:`transferlab.simulator.ops.grader.human_report_reward` takes."""
    subjects = {r.subject for r in service.reports(actor)}
    return [(r.subject, r.score / 10.0) for r in service.ratings(actor) if r.subject in subjects]

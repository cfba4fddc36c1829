"""The ops analysis tool environment: why did a category's sales fall?

This is the first stage of the path from coding agents to an ecommerce assistant: tool-use training
in a deterministic data platform, with an expert's rating of the final report as the reward.

* :mod:`.scenarios`: worlds with a known cause (stock-out, competitor price cut, failed campaign,
  shipping delays, seasonality);
* :mod:`.data_platform`: the data platform's tools over a scenario's logs;
* :mod:`.grader`: the report rubric, the dense/sparse step tables, human ratings as rewards;
* :mod:`.env`: ``transferlab/OpsAnalysis-v0`` and scripted agents (expert, naive, random).
* :mod:`.measures`: the ops family measured for ``transferlab compare``.
"""

from transferlab.simulator.ops.env import ExpertAgent, NaiveAgent, OpsAnalysisEnv, RandomAgent, run_episode
from transferlab.simulator.ops.grader import rubric_human_agreement, rubric_score
from transferlab.simulator.ops.scenarios import (
    FAMILIES,
    OpsTask,
    ScenarioConfig,
    scenario,
    seed_of,
    task_id_of,
    task_ids,
    task_seeds,
)

__all__ = [
    "FAMILIES",
    "ExpertAgent",
    "NaiveAgent",
    "OpsAnalysisEnv",
    "OpsTask",
    "RandomAgent",
    "ScenarioConfig",
    "rubric_human_agreement",
    "rubric_score",
    "run_episode",
    "scenario",
    "seed_of",
    "task_id_of",
    "task_ids",
    "task_seeds",
]

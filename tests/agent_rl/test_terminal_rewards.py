"""Every way an agent episode ends pays a defined terminal reward: both domains, dense and sparse.

The endings: a submit that succeeds, a submit that fails, the env's step limit, and the rollout's two
cuts (context limit, wall-clock timeout). Each episode is played by :func:`policy_episodes` with a real
tiny policy and the real sampler; a forward hook pins the policy's next token to the plan's tool call
for that turn (each tool call is one added token), so the endings are reached on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from transferlab.agent_rl.episodes import policy_episodes
from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.tokenizer import encode_chat, train_tokenizer
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.rewards import DENSE_REWARDS, SPARSE_REWARDS
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.toy import call, toy_repo_plan, toy_repo_tasks
from transferlab.coding_rl.tokenizer_corpus import corpus_texts
from transferlab.platform.agent_env import FAILED, Task, ToolEnv
from transferlab.platform.trajectory import Trajectory
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, run_episode
from transferlab.simulator.ops.grader import DENSE_OPS_REWARDS, SPARSE_OPS_REWARDS
from transferlab.simulator.ops.scenarios import OpsTask, ScenarioConfig, scenario, task_seeds

torch.set_num_threads(1)

ENDINGS = ("submit_pass", "submit_fail", "steps", "context", "timeout")
"""A submit the verifier (or the rubric) passes, one it fails, the step limit, the two rollout cuts."""
SCENARIOS = ScenarioConfig(n_customers=300, days=100)
"""A small ops world (a stock-out): the scripted expert still writes a 10/10 report."""
NAIVE_REPORT = "Sales of the category fell this month."
"""No cause and no number: the rubric gives 1/10 (no false blame), so 2 x 1 = 2.0."""
SAMPLING = SamplingConfig(max_new_tokens=1, seed=3)
MAX_CONTEXT = 4096

TERMINAL: dict[tuple[str, str], dict[str, tuple[str, float]]] = {
    ("coding", "dense"): {
        "submit_pass": ("task_complete", 20.0),
        "submit_fail": (FAILED, 0.0),
        "steps": (FAILED, 0.0),
        "context": (FAILED, 0.0),
        "timeout": (FAILED, 0.0),
    },
    ("coding", "sparse"): {
        "submit_pass": ("task_complete", 20.0),
        "submit_fail": (FAILED, -5.0),
        "steps": (FAILED, -5.0),
        "context": (FAILED, -5.0),
        "timeout": (FAILED, -5.0),
    },
    ("ops", "dense"): {
        "submit_pass": ("report_score", 20.0),
        "submit_fail": ("report_score", 2.0),
        "steps": (FAILED, -4.0),
        "context": (FAILED, -4.0),
        "timeout": (FAILED, -4.0),
    },
    ("ops", "sparse"): {
        "submit_pass": ("report_score", 20.0),
        "submit_fail": ("report_score", 2.0),
        "steps": (FAILED, -5.0),
        "context": (FAILED, -5.0),
        "timeout": (FAILED, -5.0),
    },
}
"""What the tables say each ending pays (the terminal component and its amount), as documented in
``coding_rl/rewards.py`` and ``simulator/ops/grader.py``."""


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def repo_task() -> RepoTask:
    return toy_repo_tasks(0.25, 0, ("add", "sub"))[0][0]


@pytest.fixture(scope="module")
def ops_task() -> OpsTask:
    return scenario(task_seeds("train", 1)[0], SCENARIOS).task


@pytest.fixture(scope="module")
def plans(repo_task: RepoTask, ops_task: OpsTask) -> dict[str, dict[str, list[str]]]:
    """Per domain and ending, the tool call of each turn (the last one repeats)."""
    expert = run_episode(
        OpsAnalysisEnv(n_tasks=1, scenario_config=SCENARIOS), ExpertAgent(), options={"task": ops_task}
    )
    read = call("read_file", path=repo_task.meta.source_path)
    query = call("check_inventory", category=ops_task.category)
    return {
        "coding": {
            "submit_pass": toy_repo_plan(repo_task),
            "submit_fail": [call("submit")],
            **{ending: [read] for ending in ("steps", "context", "timeout")},
        },
        "ops": {
            "submit_pass": list(expert["actions"]),
            "submit_fail": [call("generate_report", text=NAIVE_REPORT)],
            **{ending: [query] for ending in ("steps", "context", "timeout")},
        },
    }


@pytest.fixture(scope="module")
def tokenizer(repo_task: RepoTask, plans: dict[str, dict[str, list[str]]]) -> Any:
    tok = train_tokenizer(list(corpus_texts([repo_task])), vocab_size=512, seed=0)
    tok.add_tokens(sorted({a for domain in plans.values() for plan in domain.values() for a in plan}))
    return tok


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    return TinyPolicyConfig(n_layer=1, d_model=32, max_positions=MAX_CONTEXT).create(tokenizer)


@contextmanager
def scripted(model: Any, tokenizer: Any, plan: list[str]) -> Iterator[None]:
    """The policy writes ``plan[turn]`` at each turn: its last logits pinned to that call's one token.

    With ``max_new_tokens=1`` every ``generate`` call (one per turn, all episodes in lockstep) runs the
    model once, so the hook counts turns by counting forward passes.
    """
    ids = [int(tokenizer.convert_tokens_to_ids(a)) for a in plan]
    turn = 0

    def pin(_module: Any, _args: Any, _kwargs: Any, out: Any) -> Any:
        nonlocal turn
        forced = ids[min(turn, len(ids) - 1)]
        turn += 1
        out.logits[:, -1, :] = -1e4
        out.logits[:, -1, forced] = 1e4
        return out

    handle = model.register_forward_hook(pin, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _prompt_len(env: ToolEnv, task: Task, tokenizer: Any) -> int:
    intro, _ = env.reset(seed=0, options={"task": task})
    return len(encode_chat(tokenizer, [{"role": "user", "content": intro}], add_generation_prompt=True))


@pytest.fixture(scope="module")
def play(
    model: Any,
    tokenizer: Any,
    plans: dict[str, dict[str, list[str]]],
    repo_task: RepoTask,
    ops_task: OpsTask,
    sandbox: SandboxBackend,
) -> Callable[[str, str, str], Trajectory]:
    """``play(domain, table, ending)``: one episode that ends that way (each played once per module)."""
    played: dict[tuple[str, str, str], Trajectory] = {}

    def run(domain: str, table: str, ending: str) -> Trajectory:
        key = (domain, table, ending)
        if key in played:
            return played[key]
        max_steps = 2 if ending == "steps" else 10
        env: ToolEnv
        task: Task
        if domain == "coding":
            env = CodeRepairEnv([repo_task], rewards=table, max_steps=max_steps, sandbox=sandbox)
            task = repo_task
        else:
            env = OpsAnalysisEnv(n_tasks=1, reward_mode=table, max_steps=max_steps, scenario_config=SCENARIOS)
            task = ops_task
        try:
            max_context = _prompt_len(env, task, tokenizer) + 1 if ending == "context" else MAX_CONTEXT
            with scripted(model, tokenizer, plans[domain][ending]):
                [traj] = policy_episodes(
                    model,
                    tokenizer,
                    [env],
                    [task],
                    SAMPLING,
                    max_context=max_context,
                    episode_timeout_s=0.0 if ending == "timeout" else None,
                )
        finally:
            env.close()
        played[key] = traj
        return traj

    return run


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("table", [DENSE_REWARDS, SPARSE_REWARDS, DENSE_OPS_REWARDS, SPARSE_OPS_REWARDS])
def test_every_table_pays_task_failed_at_the_end(table: Any) -> None:
    assert FAILED in table.weights and FAILED in table.final  # so an end_only table pays it too


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("table", ["dense", "sparse"])
@pytest.mark.parametrize("domain", ["coding", "ops"])
def test_the_last_step_pays_the_endings_terminal_reward(
    play: Callable[[str, str, str], Trajectory], domain: str, table: str, ending: str
) -> None:
    traj = play(domain, table, ending)
    last = traj.steps[-1]
    name, amount = TERMINAL[(domain, table)][ending]
    assert last.done and last.reward_components[name] == amount
    assert name in last.info["events"]
    assert last.reward == pytest.approx(sum(last.reward_components.values()))
    if ending.startswith("submit"):
        assert last.terminated and "cut" not in last.info
    else:
        assert last.truncated and last.info["cut"] == ending and last.info["events"][FAILED] == 1
        assert len(traj) == (2 if ending == "steps" else 1)
    assert last.info["success"] is (ending == "submit_pass")
    if table == "sparse":  # only the terminal component, only at the end
        assert last.reward == amount and traj.total_reward == amount
        assert all(s.reward == 0.0 for s in traj.steps[:-1])


@pytest.mark.parametrize(
    ("domain", "failed_submit"),
    [("coding", -5.0), ("ops", 2.0)],  # ops: a report pays 2 x its 0-10 score, never below 0
)
def test_sparse_cuts_return_what_the_step_limit_returns_and_never_beat_a_failed_submit(
    play: Callable[[str, str, str], Trajectory], domain: str, failed_submit: float
) -> None:
    returns = {ending: play(domain, "sparse", ending).total_reward for ending in ENDINGS}
    assert returns["context"] == returns["timeout"] == returns["steps"] == -5.0
    assert returns["submit_fail"] == failed_submit >= returns["context"]
    assert returns["submit_pass"] == 20.0

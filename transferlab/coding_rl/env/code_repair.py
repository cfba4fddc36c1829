"""`transferlab/CodeRepair-v0`: fix a bug in a small repository with tools; an independent verifier judges."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium import spaces

from transferlab.coding_rl.env.workspace import (
    TOOLS,
    TestRun,
    ToolCall,
    ToolError,
    Workspace,
    describe_run,
    numbered,
    parse_action,
)
from transferlab.coding_rl.rewards import CODING_EVENTS, reward_table
from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.platform.agent_env import RewardTable, Task, finish_step
from transferlab.platform.tools import CHARSET, MAX_TEXT, to_charset

if TYPE_CHECKING:
    from transferlab.platform.trajectory import Domain


class CodeRepairEnv(gym.Env[str, str]):
    """Repair a bug in a small repository with tool calls.

    ## Description
    The agent gets an issue and a repository (source + read-only developer tests). Each step it sends
    one JSON tool call: ``read_file``, ``search_code``, ``write_file``, ``edit_file``,
    ``run_tests`` and ``submit``. ``submit`` hands the final source to an independent verifier that runs
    the developer *and hidden* tests in a fresh sandbox; the episode's success is that verdict, never
    the agent's own test runs.

    ## Action Space
    ``Text(max_length=32768)``: one JSON object, e.g. ``{"action": "edit_file", "path": "src/x.py",
    "old": "low = mid", "new": "low = mid + 1"}``. Anything else is a tool error, not a crash.

    ## Observation Space
    ``Text(max_length=32768)`` over printable ASCII (other characters become ``?``): the issue, file
    list and tool list after reset; each tool's result after a step.

    ## Rewards
    Named components per step from a :class:`~transferlab.platform.agent_env.RewardTable`: by default
    the dense table of the project's founding design note (read +0.5, write +0.5, tool error -1, read
    before write +1, write without read -2, test after modify +1.5, redundant -0.5, test pass +3, test
    fail -2, all tests pass +5, task complete +20), or the sparse table (+20 on success, -5 on failure,
    at the end only). ``info["components"]`` holds every component of the step. Every ending pays a
    terminal component: a passing submit ``task_complete`` (+20 in both tables); a failed submit, the
    step limit, and a rollout's context-limit or timeout cut
    (:func:`~transferlab.platform.agent_env.cut_penalty` with this env's ``rewards``) ``task_failed``
    (0 dense, -5 sparse).

    ## Starting State
    A task drawn with ``self.np_random`` from the env's tasks, or ``options={"task": task_or_id}``.

    ## Episode End
    ``terminated`` on ``submit``; ``truncated`` after ``max_steps`` steps without a submit. A rollout
    may also cut an episode at its context limit or timeout (``info["cut"]``), paying ``task_failed``.

    ## Arguments
    ``tasks`` (default: the seed repositories), ``rewards`` ("dense", "sparse" or a table),
    ``max_steps`` (10, as in the design note's agent task), ``sandbox`` (a shared backend; by default
    the env opens a forkserver backend, or subprocess where namespaces are unavailable, and closes it
    on ``close()``).

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (Gymnasium declares it an instance attribute)
    domain: Domain = "coding"

    def __init__(
        self,
        tasks: list[RepoTask] | None = None,
        rewards: str | RewardTable = "dense",
        max_steps: int = 10,
        sandbox: SandboxBackend | None = None,
        render_mode: str | None = None,
    ) -> None:
        if tasks is None:
            from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks

            tasks = seed_repo_tasks()
        if not tasks:
            raise ValueError("CodeRepairEnv needs at least one task")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tasks = list(tasks)
        self._by_id = {t.task_id: t for t in self.tasks}
        self.rewards = reward_table(rewards) if isinstance(rewards, str) else rewards
        self.rewards.require(CODING_EVENTS, "CodeRepair-v0")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_TEXT, charset=CHARSET)
        self._sandbox, self._owns_sandbox = sandbox, sandbox is None
        self._verifier: Verifier | None = None
        self.workspace: Workspace | None = None
        self._last_obs = ""
        self.last_timings: dict[str, float] = {"sandbox_s": 0.0, "env_s": 0.0}

    # -- sandbox ------------------------------------------------------------------------------------

    @property
    def verifier(self) -> Verifier:
        if self._verifier is None:
            if self._sandbox is None:
                self._sandbox, _, _ = open_backend(SandboxConfig(workers=1))
            self._verifier = Verifier(self._sandbox)
        return self._verifier

    # -- gymnasium API ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = self._pick_task(options)
        if self.workspace is not None:
            self.workspace.close()
        self.workspace = Workspace(task, self.verifier)
        self.task = task
        self.steps = 0
        self.version = 0  # bumps on every change to the working copy
        self.last_tested_version = 0
        self.read_paths: set[str] = set()
        self.seen: set[tuple[str, int]] = set()
        self.done = False
        obs = to_charset(self._intro())
        self._last_obs = obs
        return obs, {"task_id": task.task_id, "split": task.meta.split, "max_steps": self.max_steps}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.workspace is None or self.done:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        t0 = time.perf_counter()
        self.steps += 1
        events: dict[str, float] = {}
        info: dict[str, Any] = {"step": self.steps, "tool": None, "tool_ok": False, "success": None}
        self.last_timings = {"sandbox_s": 0.0, "env_s": 0.0}
        try:
            call = parse_action(action)
            info["tool"] = call.action
            text, terminated = self._run_tool(call, events, info)
            info["tool_ok"] = True
        except ToolError as err:
            events["tool_error"] = 1
            text, terminated = f"tool error: {err}", False
        out = finish_step(
            text,
            events,
            info,
            terminated=terminated,
            step=self.steps,
            max_steps=self.max_steps,
            table=self.rewards,
            ending="a submit",
        )
        info["test_writes_refused"] = self.workspace.refused_test_writes
        # timings stay out of `info`, which must be deterministic; rollout code reads them here
        self.last_timings["env_s"] = time.perf_counter() - t0
        self.done = out.terminated or out.truncated
        self._last_obs = out.observation
        return out

    def render(self) -> str | None:  # type: ignore[override]
        return self._last_obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()
            self.workspace = None
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox, self._verifier = None, None

    # -- internals ----------------------------------------------------------------------------------

    def _pick_task(self, options: dict[str, Any] | None) -> RepoTask:
        wanted = (options or {}).get("task")
        if wanted is None:
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if isinstance(wanted, RepoTask):
            return wanted
        if wanted not in self._by_id:
            raise ValueError(f"unknown task {wanted!r}; this env has {len(self.tasks)} tasks")
        return self._by_id[wanted]

    def _intro(self) -> str:
        assert self.workspace is not None
        tools = ", ".join(f"{name}({', '.join(args)})" for name, args in TOOLS.items())
        return "\n".join(
            [
                f"Issue: {self.task.meta.issue}",
                "",
                "Repository files:",
                *(f"  {f}" for f in self.workspace.files()),
                "",
                f"Tools, one JSON object per turn: {tools}; run_tests takes an optional target "
                '("all", a test file, or "file::test_<i>"); edit_file takes an optional line (the number '
                "read_file shows), and then old need only be unique in that line.",
                f"Step budget: {self.max_steps}.",
            ]
        )

    def _redundant(self, call: ToolCall, events: dict[str, float]) -> None:
        key = (call.key(), self.version)
        if key in self.seen:
            events["redundant_action"] = 1
        self.seen.add(key)

    def _run_tool(self, call: ToolCall, events: dict[str, float], info: dict[str, Any]) -> tuple[str, bool]:
        ws = self.workspace
        assert ws is not None
        a = call.args
        if call.action == "read_file":
            text = ws.read_file(a["path"])
            self._redundant(call, events)
            self.read_paths.add(a["path"])
            events["read_file_success"] = 1
            return f"=== {a['path']} ===\n{numbered(text)}", False
        if call.action == "search_code":
            hits = ws.search_code(a["pattern"])
            self._redundant(call, events)
            if not hits:
                return f"no matches for {a['pattern']!r}", False
            events["search_code_success"] = 1
            shown = hits[:40]
            more = f"\n... {len(hits) - len(shown)} more" if len(hits) > len(shown) else ""
            return "\n".join(shown) + more, False
        if call.action in ("write_file", "edit_file"):
            changed = (
                ws.write_file(a["path"], a["content"])
                if call.action == "write_file"
                else ws.edit_file(a["path"], a["old"], a["new"], a.get("line"))
            )
            if not changed:
                events["redundant_action"] = 1
                return f"{a['path']} unchanged", False
            events["write_file_success"] = 1
            events["read_before_write" if a["path"] in self.read_paths else "write_without_read"] = 1
            self.version += 1
            if "line" in a:  # show the edited line(s), so the policy sees what its edit did
                n = int(a["line"])
                shown = ws.read_file(a["path"]).split("\n")[n - 1 : n + a["new"].count("\n")]
                return f"wrote {a['path']} line {n}: " + " / ".join(x.strip() for x in shown), False
            return f"wrote {a['path']}", False
        if call.action == "run_tests":
            run = ws.run_tests(a.get("target"))
            self._redundant(call, events)
            self._score_test_run(run, events, info)
            return describe_run(run, self.task), False
        return self._submit(ws, events, info)

    def _score_test_run(self, run: TestRun, events: dict[str, float], info: dict[str, Any]) -> None:
        self.last_timings["sandbox_s"] = run.sandbox_s
        info["tests"] = {"selected": run.selected, "passed": run.passed, "status": run.grade.status}
        if self.version > self.last_tested_version:
            events["test_after_modify"] = 1
            self.last_tested_version = self.version
        events["test_pass" if run.ok else "test_fail"] = 1
        if run.ok and run.all_dev:
            events["all_tests_pass"] = 1

    def _submit(self, ws: Workspace, events: dict[str, float], info: dict[str, Any]) -> tuple[str, bool]:
        run = ws.submit()
        self.last_timings["sandbox_s"] = run.sandbox_s
        success = run.grade.status == "passed"
        info["success"] = success
        info["verifier"] = {"status": run.grade.status, "passed": run.grade.passed, "total": run.grade.total}
        events["task_complete" if success else "task_failed"] = 1
        return describe_run(run, self.task, submitted=True), True


def code_repair_env(
    tasks: Sequence[Task],
    *,
    rewards: str | RewardTable = "dense",
    max_steps: int = 10,
    sandbox: SandboxBackend | None = None,
) -> CodeRepairEnv:
    """CodeRepair-v0 as a :class:`~transferlab.platform.agent_env.ToolEnvFactory` (the rollout workers'
    default): ``tasks`` must be repository tasks."""
    repo = [t for t in tasks if isinstance(t, RepoTask)]
    if len(repo) != len(tasks):
        other = next(type(t).__name__ for t in tasks if not isinstance(t, RepoTask))
        raise ValueError(
            f"CodeRepair-v0 plays repository tasks (RepoTask), got a {other}; for another domain's tasks "
            "set env_factory to that domain's env factory"
        )
    return CodeRepairEnv(repo, rewards=rewards, max_steps=max_steps, sandbox=sandbox)

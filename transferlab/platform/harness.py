"""Book-keeping every coding experiment shares: a run directory of arms, resume, progress, the report.

An experiment is a run in the run store (``runs/<experiment>/<run-id>/``) whose arms — one trained
policy each, e.g. ``grpo-seed1`` — live in ``arms/<name>/`` with their own ``metrics.parquet``, RL
checkpoint and ``result.json``. Re-running with ``--resume RUN_DIR`` skips the arms that have a
result and resumes the one that was interrupted from its last checkpoint.

The run is owned by one process (a second one is refused with the owner's pid), unless it is opened
``shared`` by cooperating processes that split the arms: then each arm is locked while it is computed.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from transferlab.platform.config import BaseConfig, ConfigError
from transferlab.platform.io import atomic_write_json
from transferlab.platform.metric_sinks import sinks_for_run
from transferlab.platform.metrics import MultiLogger, ParquetLogger
from transferlab.platform.reports import Report, ReportPaths
from transferlab.platform.runstore import Run, RunLock, RunStore

C = TypeVar("C", bound=BaseConfig)


class Experiment:
    """One experiment run: arms with results, progress display, and where the report goes."""

    def __init__(self, run: Run, console: Console | None = None, shared: bool = False) -> None:
        self.run = run
        self.shared = shared
        self.started = time.perf_counter()
        summary = run.dir / "artifacts" / "summary.json"
        self.previous_s = (
            float(json.loads(summary.read_text()).get("seconds", 0.0)) if summary.exists() else 0.0
        )
        self.console = console or Console()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )

    @classmethod
    def open(
        cls,
        name: str,
        config: C,
        runs_root: Path,
        resume: Path | None,
        console: Console | None = None,
        shared: bool = False,
    ) -> tuple[Experiment, C]:
        """A new run of ``name``, or the run at ``resume`` with its saved config (which wins).

        The run is owned by this process (``RunInUseError`` names a live owner); ``shared`` lets
        other processes opened ``shared`` work on other arms of it at the same time.
        """
        if resume is None:
            run = RunStore(runs_root).create_run(name, config, shared=shared)
            return cls(run, console, shared), config
        run = RunStore(runs_root).open_path(resume)
        kind = run.meta.get("experiment")
        if kind != name:  # before acquire, which marks the run resumed
            raise ConfigError(
                f"--resume {resume} is a run of {kind!r}, not of {name!r}: resume it with the command "
                "that made it (its meta.json names the experiment), or leave out --resume to start anew"
            )
        run.acquire(shared)  # then: a run in use is refused whatever its config
        saved = run.load_config(type(config))
        return cls(run, console, shared), saved

    def elapsed_s(self) -> float:
        """Wall time of this run so far, earlier sessions of a resumed run included."""
        return self.previous_s + time.perf_counter() - self.started

    def arm_dir(self, arm: str) -> Path:
        path = self.run.dir / "arms" / arm
        path.mkdir(parents=True, exist_ok=True)
        return path

    def arm_logger(self, arm: str, resume: bool = False) -> ParquetLogger | MultiLogger:
        """A metrics logger for one arm (``arms/<arm>/metrics.parquet``).

        ``resume=True`` keeps the rows of an interrupted attempt, for a trainer that resumes from its
        checkpoint (it drops the rows after it); otherwise the arm starts over and they are dropped.
        """
        logger = ParquetLogger(self.arm_dir(arm) / "metrics.parquet", flush_every=20)
        if not resume:
            logger.drop_after(-1)
        run = self.run
        sinks = sinks_for_run(self.arm_dir(arm), run.experiment, f"{run.run_id}/{arm}", run.dir.parent.parent)
        return MultiLogger(logger, *sinks) if sinks else logger

    def result(self, arm: str) -> dict[str, Any] | None:
        """The saved result of a finished arm, or None."""
        path = self.run.dir / "arms" / arm / "result.json"
        return json.loads(path.read_text()) if path.exists() else None

    def save_result(self, arm: str, result: dict[str, Any]) -> None:
        atomic_write_json(self.arm_dir(arm) / "result.json", result)

    def arm(self, name: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The arm's saved result, or compute, save and return it."""
        done = self.result(name)
        if done is not None:
            return done
        lock = RunLock(self.arm_dir(name))
        if self.shared:  # other processes share the run: one computes each arm
            lock.acquire(what="arm")
        try:
            done = self.result(name)  # another process may have finished it meanwhile
            if done is not None:
                return done
            t0 = time.perf_counter()
            result = compute()
            self.save_result(name, result)
            if not self.console.is_terminal:  # the live bar is not drawn there: one line per arm
                self.console.print(f"arm {name} done ({time.perf_counter() - t0:.0f} s)", highlight=False)
        finally:
            lock.release()
        return result

    def write_report(self, report: Report, copy_to: Path | None) -> ReportPaths:
        """Write the report into the run directory, and copy it to ``copy_to`` (e.g. docs/results/x)."""
        paths = report.write(self.run.dir / "report")
        if copy_to is not None:
            copy_to.mkdir(parents=True, exist_ok=True)
            report.write(copy_to)
            self.console.print(f"report: {copy_to / paths.markdown.name}", highlight=False)
        self.console.print(f"run directory: {self.run.dir}", highlight=False)
        return paths


def clear_arm(run_dir: Path, arm: str) -> None:
    """Forget an arm (its result and checkpoint) so the next resume recomputes it."""
    shutil.rmtree(run_dir / "arms" / arm, ignore_errors=True)


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(143)`` in this process, so ``finally`` blocks run.

    Python's default SIGTERM ends a process without unwinding, so ``kill PID`` of an experiment that
    started worker processes would leave them computing; inside this block the parent's ``finally``
    stops them. Outside the main thread (where signal handlers cannot be set) it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def seeds_in_processes(
    exp: Experiment,
    config: Any,
    runs_root: Path,
    jobs: int,
    bar: Any,
    job: Callable[[Any, str, str, list[int]], None],
    arms: Sequence[str],
) -> None:
    """Split ``config.seeds`` over ``jobs`` spawned processes (seed i goes to process i mod jobs), each
    running ``job(config, run_dir, runs_root, seeds)`` (a module-level function), and wait, showing the
    finished ``arms`` on ``bar``; a failed process is a RuntimeError naming its seeds."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    groups = [config.seeds[i::jobs] for i in range(min(jobs, len(config.seeds)))]
    procs = [
        ctx.Process(target=job, args=(config, str(exp.run.dir), str(runs_root), seeds)) for seeds in groups
    ]
    names = [f"{arm}-seed{seed}" for seed in config.seeds for arm in arms]
    with sigterm_as_exit():  # `kill PID` of this process also stops the seed processes
        try:
            for proc in procs:
                proc.start()
            while any(p.is_alive() for p in procs):
                done = sum(exp.result(n) is not None for n in names)
                exp.progress.update(bar, completed=done, description=f"{len(procs)} processes")
                time.sleep(2.0)
        finally:
            _stop(procs)
    failed = [seeds for proc, seeds in zip(procs, groups, strict=True) if proc.exitcode != 0]
    if failed:
        raise RuntimeError(
            f"the process for seed(s) {failed} failed (its error is printed above); fix it and finish the "
            f"run with --resume {exp.run.dir}"
        )
    exp.progress.update(bar, completed=0)


def _stop(procs: Sequence[Any]) -> None:
    """Terminate the started processes still running and wait for each."""
    for proc in procs:
        if proc.pid is not None and proc.is_alive():
            proc.terminate()
    for proc in procs:
        if proc.pid is not None:
            proc.join()


def experiment_command(
    command: str,
    config: BaseConfig,
    presets: Mapping[str, BaseConfig],
    run_dir: Path,
    runs_root: Path,
    report_dir: Path | None,
) -> str:
    """The command line that makes this run again: ``command`` (e.g. ``"transferlab coding experiment
    learn"``) and its options.

    ``--preset NAME`` (with ``--seeds``, ``--model`` and ``--rollout-backend`` where they differ from
    the preset) when the config is a preset's, else ``--config RUN_DIR/config.json`` (the config the
    run saved).
    """
    mine = _comparable(config.model_dump(mode="json"))
    args = shlex.split(command)
    for name, preset in presets.items():
        theirs = preset.model_dump(mode="json")
        if _comparable(theirs) != mine:
            continue
        args += ["--preset", name]
        dumped = config.model_dump(mode="json")
        if dumped["seeds"] != theirs["seeds"]:
            args += ["--seeds", ",".join(map(str, dumped["seeds"]))]
        if dumped["model_path"] is not None:
            args += ["--model", dumped["model_path"]]
        if dumped["rl"]["rollout_backend"] != theirs["rl"]["rollout_backend"]:
            args += ["--rollout-backend", dumped["rl"]["rollout_backend"]]
        break
    else:
        args += ["--config", str(run_dir / "config.json")]
    if runs_root != Path("runs"):
        args += ["--runs-root", str(runs_root)]
    if report_dir is not None:
        args += ["--report-dir", str(report_dir)]
    return shlex.join(args)


def _comparable(dumped: dict[str, Any]) -> dict[str, Any]:
    """A config dump without the fields the command line sets (seeds, model, rollout backend)."""
    out = {k: v for k, v in dumped.items() if k not in ("seeds", "model_path")}
    out["rl"] = {k: v for k, v in dumped["rl"].items() if k != "rollout_backend"}
    return out

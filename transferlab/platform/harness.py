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
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
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

"""`transferlab coding rollout`: run a scripted agent, write trajectories, print the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def rollout(
    agent: str = typer.Option("expert", "--agent", help="expert | naive | random"),
    tasks: str = typer.Option("held-out", "--tasks", help="train | held-out | seed | all"),
    episodes: int = typer.Option(20, "--episodes", "-n", help="Episodes to run (tasks cycle)."),
    workers: int = typer.Option(2, "--workers", "-w", help="Environments stepped in parallel."),
    rewards: str = typer.Option("dense", "--rewards", help="dense | sparse"),
    max_steps: int = typer.Option(10, "--max-steps", help="Step limit per episode."),
    seed: int = typer.Option(0, "--seed", help="Seeds task order and the random agent."),
    corpus: Path = typer.Option(
        Path("data/coding_tasks"), "--corpus", help="Task corpus (built if missing)."
    ),
    backend: str = typer.Option("forkserver", "--backend", "-b", help="forkserver | subprocess | docker"),
    runs_root: Path = typer.Option(Path("runs"), "--runs-root", help="Where run directories go."),
) -> None:
    """Run a scripted agent on CodeRepair-v0; write trajectories.parquet and metrics to a run directory."""
    from transferlab.platform.config import ConfigError

    try:
        summary, run_dir = run_rollout(
            agent=agent,
            tasks=tasks,
            episodes=episodes,
            workers=workers,
            rewards=rewards,
            max_steps=max_steps,
            seed=seed,
            corpus_dir=str(corpus),
            backend=backend,
            runs_root=runs_root,
        )
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    except FileNotFoundError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"success rate {summary.success_rate:.1%} ({summary.successes}/{summary.episodes}), "
        f"mean return {summary.mean_return:+.2f}, {summary.mean_steps:.1f} steps/episode"
    )
    typer.echo(
        f"{summary.episodes_per_s:.1f} episodes/s, {summary.steps_per_s:.1f} env steps/s, "
        f"{summary.sandbox_share:.0%} of step time in the sandbox ({workers} workers)"
    )
    typer.echo(f"run directory: {run_dir}")


def run_rollout(runs_root: Path = Path("runs"), **settings: Any) -> tuple[Any, Path]:
    """Build the config, run the episodes with a progress bar, and record everything in a run dir."""
    from rich.progress import Progress

    from transferlab.coding_rl.rollout import RolloutConfig, load_tasks, open_sandbox, run_batched
    from transferlab.platform.runstore import RunStore
    from transferlab.platform.trajectory import TrajectoryWriter

    config = RolloutConfig.build(**settings)
    task_list = load_tasks(config.tasks, Path(config.corpus_dir))
    if not task_list:
        raise FileNotFoundError(f"the corpus at {config.corpus_dir} has no {config.tasks!r} tasks")
    sandbox = open_sandbox(config.backend, config.workers)
    with RunStore(runs_root).create_run("coding-rollout", config, seed=config.seed) as run:
        writer = TrajectoryWriter(run.dir / "trajectories.parquet")
        done = [0]
        with Progress(transient=True) as progress:
            bar = progress.add_task(f"{config.agent} on {config.tasks}", total=config.episodes)

            def record(traj: Any) -> None:
                writer.add(traj)
                run.logger.log(
                    done[0],
                    {
                        "rollout/return": traj.total_reward,
                        "rollout/steps": len(traj),
                        "rollout/success": float(traj.steps[-1].info.get("success") is True),
                    },
                )
                done[0] += 1
                progress.advance(bar)

            try:
                _, summary = run_batched(
                    task_list,
                    config.agent,
                    config.episodes,
                    config.workers,
                    sandbox,
                    rewards=config.rewards,
                    max_steps=config.max_steps,
                    seed=config.seed,
                    on_episode=record,
                )
            finally:
                sandbox.close()
                writer.close()
        run.logger.log(config.episodes, summary.as_metrics())
        run.write_artifact_json(
            "summary.json",
            {
                **summary.as_metrics(),
                "episodes": summary.episodes,
                "successes": summary.successes,
                "wall_s": summary.wall_s,
            },
        )
    return summary, run.dir

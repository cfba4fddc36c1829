"""`transferlab sandbox ...`: grade a solution, build the Docker image, check HumanEval end to end.

Exit codes (every command):

- 0: the work was done (for ``grade``: the solution was graded, whatever the verdict);
- 1: the sandbox failed (status ``infra_error``), a canonical HumanEval solution failed, or the
  image build failed;
- 2: bad input (unreadable/malformed task or solution, invalid option values);
- 3: the backend (or a tool it needs) is unavailable on this machine.

Only light modules are imported at module level (typer, stdlib), so ``transferlab --help`` stays
fast; the sandbox, pydantic and rich are imported inside the commands.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from transferlab.platform.cli_kit import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNAVAILABLE, fail

if TYPE_CHECKING:
    from transferlab.coding_rl.sandbox.backends import SandboxBackend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
    from transferlab.coding_rl.tasks.code_task import CodeTask

BUILD_IMAGE_SCRIPT = Path(__file__).resolve().parent / "build_image.sh"
DEFAULT_DOCKER_IMAGE = "transferlab-sandbox:bookworm"  # == SandboxConfig().docker_image (checked in tests)


class Backend(StrEnum):
    """The sandbox backends (the values of `SandboxConfig.backend`)."""

    forkserver = "forkserver"
    subprocess = "subprocess"
    docker = "docker"


app = typer.Typer(
    name="sandbox",
    help="Run untrusted code in the sandbox: grade a solution, build the Docker image, check HumanEval.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: typer's rich help costs ~0.35 s of imports per call
)

BackendOption = Annotated[
    Backend,
    typer.Option(
        "--backend",
        "-b",
        help="forkserver (warm, namespaces + chroot, needs root), subprocess (portable, weaker "
        "isolation) or docker (containers; build the image with `transferlab sandbox build-image`).",
        case_sensitive=False,
    ),
]


# --------------------------------------------------------------------------- helpers


def read_solution(path: Path) -> str:
    """The solution's source as UTF-8 text; exits with code 2 and a one-line reason otherwise."""
    if path.is_dir():
        fail(f"solution {path} is a directory; pass the path of a Python source file", EXIT_BAD_INPUT)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        fail(f"solution file {path} does not exist; check the path (cwd: {Path.cwd()})", EXIT_BAD_INPUT)
    except OSError as err:
        fail(
            f"cannot read solution file {path}: {err.strerror or err}; check the path and its permissions",
            EXIT_BAD_INPUT,
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        fail(
            f"solution file {path} is not UTF-8 (invalid byte 0x{raw[err.start]:02x} at offset "
            f"{err.start}); save it as UTF-8",
            EXIT_BAD_INPUT,
        )


def sandbox_config(backend: Backend, workers: int) -> SandboxConfig:
    """`SandboxConfig(backend=..., workers=...)`; a bad value exits with code 2."""
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.platform.config import ConfigError

    try:
        return SandboxConfig(backend=backend.value, workers=workers)
    except ConfigError as err:
        fail(str(err), EXIT_BAD_INPUT)


def open_backend(config: SandboxConfig) -> SandboxBackend:
    """`make_backend(config)`; an unavailable backend exits with code 3 and says what to use instead."""
    from transferlab.coding_rl.sandbox.backends import SandboxUnavailable, make_backend

    try:
        return make_backend(config)
    except SandboxUnavailable as err:
        fail(str(err), EXIT_UNAVAILABLE)
    except ImportError as err:  # e.g. the docker backend or the Docker SDK is not installed
        fail(
            f"the {config.backend} backend cannot be loaded ({err}); use --backend forkserver (as root) "
            "or --backend subprocess",
            EXIT_UNAVAILABLE,
        )


def _num(value: float) -> str:
    """8.0, 4.75, 12.0: a reward as Python writes it, rounded to 6 decimals."""
    return repr(round(float(value), 6))


def _fmt_components(components: dict[str, float]) -> str:
    return " + ".join(f"{name} {_num(value)}" for name, value in components.items())


def print_grade(result: GradeResult) -> None:
    """A rich summary of one verdict; hidden tests show only pass/fail."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    colour = "green" if result.status == "passed" else "red" if result.status == "infra_error" else "yellow"
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("task", result.task_id)
    summary.add_row("status", f"[{colour}]{result.status}[/]")
    summary.add_row("passed", f"{result.passed}/{result.total}")
    summary.add_row("pass rate", f"{result.pass_rate:.1%}")
    summary.add_row("executed", "yes" if result.executed else "no")
    summary.add_row("reward", f"{_num(result.reward)}  ({_fmt_components(result.reward_components)})")
    summary.add_row("runtime", f"{result.runtime_s:.3f} s")
    summary.add_row(
        "backend",
        result.backend + (f" ({result.infra_retries} infra retries)" if result.infra_retries else ""),
    )
    if result.message:
        summary.add_row("message", result.message)
    console.print(summary)

    tests = Table(title="tests", title_justify="left")
    tests.add_column("#", justify="right")
    tests.add_column("kind")
    tests.add_column("result")
    tests.add_column("detail", overflow="fold")
    for outcome in result.tests:
        mark = "[green]pass[/]" if outcome.status == "passed" else "[red]FAIL[/]"
        tests.add_row(
            str(outcome.index),
            "hidden" if outcome.hidden else "dev",
            mark,
            "" if outcome.hidden else outcome.message,
        )
    console.print(tests)
    if result.output.strip():
        console.print("[bold]captured output[/] (first 2,000 characters):")
        console.print(result.output, markup=False)


# --------------------------------------------------------------------------- grade


@app.command()
def grade(
    task_file: Annotated[
        Path, typer.Argument(metavar="TASK.json", help="The task (JSON task format).", show_default=False)
    ],
    solution_file: Annotated[
        Path,
        typer.Argument(
            metavar="SOLUTION.py", help="The candidate's Python source (UTF-8).", show_default=False
        ),
    ],
    backend: BackendOption = Backend.forkserver,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print exactly one JSON object (the verdict).")
    ] = False,
    workers: Annotated[
        int, typer.Option("--workers", "-w", help="Sandboxes to start (one job needs one).")
    ] = 1,
) -> None:
    """Grade SOLUTION.py against every test of TASK.json in the sandbox.

    Exit code 0 when graded (a failing solution is still a successful grading), 1 if the sandbox
    itself failed (infra_error), 2 for bad input, 3 if the backend is unavailable.
    """
    from transferlab.coding_rl.sandbox.verifier import Verifier
    from transferlab.coding_rl.tasks.code_task import TaskError, load_task

    try:
        task = load_task(task_file)
    except TaskError as err:
        fail(str(err), EXIT_BAD_INPUT)
    source = read_solution(solution_file)
    config = sandbox_config(backend, workers)
    sandbox = open_backend(config)
    try:
        result = Verifier(sandbox, config).grade(task, source)
    except TaskError as err:  # raised before anything runs: the task's inputs, not the sandbox
        fail(f"{task_file}: {err}", EXIT_BAD_INPUT)
    finally:
        sandbox.close()
    if as_json:
        typer.echo(json.dumps(result.to_public_json()))  # ASCII: prints on any terminal
    else:
        print_grade(result)
    if result.status == "infra_error":
        typer.echo(f"error: the sandbox failed: {result.message}", err=True)
        raise typer.Exit(EXIT_FAILED)


# --------------------------------------------------------------------------- build-image


@app.command("build-image")
def build_image(
    image: Annotated[
        str, typer.Option("--image", help="Name:tag of the image to build.")
    ] = DEFAULT_DOCKER_IMAGE,
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror",
            help="Debian mirror URL; default: the one apt is configured with, else deb.debian.org.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Build the Docker sandbox image from Debian packages (debootstrap; no registry needed).

    Needs root, debootstrap and a running Docker engine. Output of the build is streamed.
    """
    for tool, fix in (
        ("docker", "install Docker (https://docs.docker.com/engine/install/)"),
        ("debootstrap", "apt-get install -y debootstrap"),
    ):
        if shutil.which(tool) is None:
            fail(f"{tool} is not installed or not on PATH; fix: {fix}", EXIT_UNAVAILABLE)
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        fail(
            "build-image needs root (debootstrap builds a root file system); run it with sudo",
            EXIT_UNAVAILABLE,
        )
    cmd = ["bash", str(BUILD_IMAGE_SCRIPT), image, *([mirror] if mirror else [])]
    typer.echo(f"running {' '.join(cmd)}", err=True)
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
        )
    except OSError as err:
        fail(f"cannot run {BUILD_IMAGE_SCRIPT}: {err}", EXIT_FAILED)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            typer.echo(line, nl=False)
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    if code != 0:
        fail(
            f"building {image} failed (build_image.sh exited with {code}); see the output above", EXIT_FAILED
        )
    typer.echo(f"built {image}; use it with --backend docker")


# --------------------------------------------------------------------------- humaneval


@app.command()
def humaneval(
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", "-n", min=0, help="Only the first N problems (default: all 164).", show_default=False
        ),
    ] = None,
    backend: BackendOption = Backend.forkserver,
    workers: Annotated[int, typer.Option("--workers", "-w", help="Sandboxes that run jobs in parallel.")] = 4,
) -> None:
    """Convert HumanEval to code tasks and grade every canonical solution (an end-to-end check).

    Exits non-zero if any canonical solution does not pass: that is a converter or sandbox bug.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from transferlab.coding_rl.sandbox.verifier import Verifier
    from transferlab.coding_rl.tasks.humaneval import load_humaneval

    config = sandbox_config(backend, workers)
    conversion = load_humaneval(limit)
    typer.echo(conversion.summary())
    items = [(task, conversion.solutions[task.task_id]) for task in conversion.tasks]
    sandbox = open_backend(config)
    outcomes: list[tuple[str, GradeResult | str]] = []
    start = time.monotonic()
    # grade_many has no per-result callback, so it runs in chunks to move the progress bar.
    chunk = max(1, sandbox.workers * 4)
    try:
        with Progress(
            TextColumn("grading canonical solutions"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as progress:
            bar = progress.add_task("grade", total=len(items))
            verifier = Verifier(sandbox, config)
            for i in range(0, len(items), chunk):
                outcomes.extend(_grade_chunk(verifier, items[i : i + chunk]))
                progress.update(bar, completed=len(outcomes))
    finally:
        sandbox.close()
    elapsed = time.monotonic() - start
    failures: list[str] = []
    for task_id, outcome in outcomes:
        if isinstance(outcome, str):
            failures.append(f"{task_id}: could not be graded: {outcome}")
        elif outcome.status != "passed":
            first = next((t.message for t in outcome.tests if t.status == "failed" and t.message), "")
            detail = "; ".join(x for x in (outcome.message, first) if x)
            failures.append(
                f"{task_id}: {outcome.status} {outcome.passed}/{outcome.total}"
                + (f" - {detail}" if detail else "")
            )
    typer.echo(
        f"canonical solutions: {len(outcomes) - len(failures)}/{len(outcomes)} pass "
        f"(backend {config.backend}, {config.workers} workers, {elapsed:.1f} s)"
    )
    for line in failures:
        typer.echo(f"  {line}", err=True)
    if failures:
        fail(f"{len(failures)} canonical solution(s) did not pass: a converter or sandbox bug", EXIT_FAILED)


def _grade_chunk(
    verifier: Verifier, chunk: list[tuple[CodeTask, str]]
) -> list[tuple[str, GradeResult | str]]:
    """Grade a chunk with `grade_many`; if that raises, grade one by one so one bad task is named.

    A task the verifier cannot even send to the sandbox (e.g. an input the wire format cannot
    encode) is reported as ``"ExceptionType: message"`` instead of a GradeResult.
    """
    try:
        return [
            (task.task_id, result)
            for (task, _), result in zip(chunk, verifier.grade_many(chunk), strict=True)
        ]
    except Exception:
        pass  # isolate the failing item below
    out: list[tuple[str, GradeResult | str]] = []
    for task, source in chunk:
        try:
            out.append((task.task_id, verifier.grade(task, source)))
        except Exception as err:
            out.append((task.task_id, f"{type(err).__name__}: {err}"))
    return out

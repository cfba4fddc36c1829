"""Sandbox configuration: which backend, and the limits every job runs under."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from transferlab.platform.config import BaseConfig

BackendName = Literal["forkserver", "subprocess", "docker"]
BACKENDS: tuple[str, ...] = ("forkserver", "subprocess", "docker")


class SandboxConfig(BaseConfig):
    """Backend choice and per-job limits; the wall-time limit comes from each task's `time_limit_s`."""

    backend: BackendName = Field(
        default="forkserver",
        description="forkserver (warm, namespaces + chroot, needs root), subprocess (fresh interpreter, "
        "portable, weaker isolation) or docker (containers through the Docker SDK).",
    )
    workers: int = Field(default=2, ge=1, le=64, description="Sandboxes that run jobs in parallel.")
    memory_mb: int = Field(default=512, ge=32, le=65536, description="Address-space limit per job (MiB).")
    cpu_slack_s: float = Field(
        default=1.0, ge=0, le=60, description="CPU-time limit = the task's wall limit + this slack (s)."
    )
    max_processes: int = Field(
        default=32, ge=1, le=4096, description="Processes the candidate may have at once (RLIMIT_NPROC)."
    )
    max_file_bytes: int = Field(
        default=16 * 1024 * 1024, ge=0, description="Largest file the candidate may write (RLIMIT_FSIZE)."
    )
    max_open_files: int = Field(default=64, ge=8, le=65536, description="Open descriptors (RLIMIT_NOFILE).")
    max_output_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Captured stdout+stderr; more ends the job as output_limit."
    )
    max_source_bytes: int = Field(
        default=1024 * 1024, ge=1, description="Largest solution accepted; larger ones are refused unrun."
    )
    client_grace_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="How long past the job's wall limit a client waits for the sandbox before calling it an "
        "infra_error and replacing the server or container.",
    )
    retries: int = Field(default=2, ge=0, le=10, description="Retries of a job that hit an infra_error.")
    uid_base: int = Field(
        default=61000, ge=1000, le=2**31 - 2, description="First of the unprivileged uids candidates run as."
    )
    jail_size_mb: int = Field(default=256, ge=16, description="Size of the fork server's tmpfs root (MiB).")
    docker_image: str = Field(
        default="transferlab-sandbox:bookworm",
        description="Image built by `transferlab sandbox build-image`.",
    )
    docker_idle_exit_s: float = Field(
        default=600.0, gt=0, description="A warm container left without a client removes itself after this."
    )

    def job_limits(self, time_limit_s: float) -> dict[str, float | int]:
        """The limits dict the sandbox server applies to one job."""
        return {
            "wall_s": time_limit_s,
            "cpu_s": time_limit_s + self.cpu_slack_s,
            "memory_mb": self.memory_mb,
            "max_processes": self.max_processes,
            "max_file_bytes": self.max_file_bytes,
            "max_open_files": self.max_open_files,
            "max_output_bytes": self.max_output_bytes,
        }

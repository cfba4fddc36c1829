"""Docker backend specifics: the container's lockdown, removal on client timeout, orphan reaping."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from transferlab.coding_rl.sandbox.backends import SandboxUnavailable
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.seed_tasks import seed_solutions

pytestmark = pytest.mark.docker


def _backend(**overrides: object) -> object:
    from transferlab.coding_rl.sandbox.docker_backend import DockerBackend

    settings: dict[str, object] = {"backend": "docker", "workers": 1, **overrides}
    try:
        return DockerBackend(SandboxConfig(**settings))  # type: ignore[arg-type]
    except SandboxUnavailable as exc:
        if os.environ.get("TRANSFERLAB_REQUIRE_DOCKER") == "1":
            pytest.fail(f"TRANSFERLAB_REQUIRE_DOCKER=1 but the docker backend is unavailable: {exc}")
        pytest.skip(f"docker backend unavailable: {exc}")


@pytest.fixture
def docker_backend() -> Iterator[object]:
    backend = _backend(client_grace_s=1.0)
    yield backend
    backend.close()  # type: ignore[attr-defined]


def _fixed_quick_sort() -> tuple[object, str]:
    sol = next(s for s in seed_solutions() if s.solution_file.name == "quick_sort_fixed.py")
    return sol.task, sol.source


def test_container_is_locked_down(docker_backend: object) -> None:
    task, source = _fixed_quick_sort()
    assert Verifier(docker_backend).grade(task, source).status == "passed"  # type: ignore[arg-type]
    (cid,) = docker_backend.container_ids()  # type: ignore[attr-defined]
    attrs = docker_backend.client.api.inspect_container(cid)  # type: ignore[attr-defined]
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "SYS_ADMIN" not in (host["CapAdd"] or [])
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] > 0 and host["PidsLimit"] > 0 and host["NanoCpus"] == 1_000_000_000
    assert attrs["Config"]["Labels"]["transferlab.sandbox"] == "1"


def test_client_timeout_removes_the_container_and_recovers(docker_backend: object) -> None:
    task, source = _fixed_quick_sort()
    verifier = Verifier(docker_backend, SandboxConfig(backend="docker", retries=0))  # type: ignore[arg-type]
    assert verifier.grade(task, source).status == "passed"
    (cid,) = docker_backend.container_ids()  # type: ignore[attr-defined]
    client = docker_backend.client  # type: ignore[attr-defined]
    client.api.pause(cid)  # the server inside can no longer answer: the client's deadline will pass
    result = verifier.grade(task, source)
    assert result.status == "infra_error" and result.passed == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(c.id == cid for c in client.containers.list(all=True)):
        time.sleep(0.1)
    assert all(c.id != cid for c in client.containers.list(all=True)), "timed-out container was not removed"
    again = verifier.grade(task, source)
    assert again.status == "passed" and docker_backend.container_ids() != [cid]  # type: ignore[attr-defined]


def test_orphans_of_dead_owners_are_reaped(docker_backend: object) -> None:
    from transferlab.coding_rl.sandbox.docker_backend import LABEL, OWNER_LABEL

    client = docker_backend.client  # type: ignore[attr-defined]
    dead_pid = 2**22 + 12345  # above pid_max's default, never alive
    orphan = client.containers.run(
        SandboxConfig().docker_image,
        ["sleep", "300"],
        detach=True,
        network_mode="none",
        labels={LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:{dead_pid}"},
    )
    live = docker_backend.reap_orphans()  # type: ignore[attr-defined]
    assert live >= 1
    assert all(c.id != orphan.id for c in client.containers.list(all=True))


def test_close_removes_every_container() -> None:
    backend = _backend(workers=2)
    task, source = _fixed_quick_sort()
    results = Verifier(backend).grade_many([(task, source)] * 4)  # type: ignore[arg-type]
    assert [r.status for r in results] == ["passed"] * 4
    ids = backend.container_ids()  # type: ignore[attr-defined]
    assert 1 <= len(ids) <= 2
    client = backend.client  # type: ignore[attr-defined]
    backend.close()  # type: ignore[attr-defined]
    time.sleep(0.5)
    remaining = {c.id for c in client.containers.list(all=True)}
    assert not remaining & set(ids)

"""`import transferlab` registers every environment id, and stays light doing it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import transferlab

HEAVY = (
    "gymnasium",
    "numpy",
    "torch",
    "transferlab.simulator",
    "transferlab.coding_rl",
    "transferlab.offline",
)


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_transferlab_imports_no_gymnasium_torch_or_domain() -> None:
    code = f"import sys, transferlab\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    assert _python(code) == ""


@pytest.mark.parametrize(
    "imports", ["import transferlab\nimport gymnasium as gym", "import gymnasium as gym\nimport transferlab"]
)
def test_every_id_is_registered_whichever_is_imported_first(imports: str) -> None:
    code = f"{imports}\nprint(','.join(sorted(i for i in gym.registry if i.startswith('transferlab/'))))"
    assert _python(code).split(",") == sorted(transferlab.ENV_IDS)
    assert sorted(transferlab.ENV_IDS) == [
        "transferlab/Campaign-v0",
        "transferlab/CampaignWorld-v0",
        "transferlab/CodeRepair-v0",
        "transferlab/OpsAnalysis-v0",
    ]


def test_gym_make_works_after_importing_only_the_package() -> None:
    code = (
        "import gymnasium as gym, transferlab\n"
        "ops = gym.make('transferlab/OpsAnalysis-v0')\n"
        "world = gym.make('transferlab/CampaignWorld-v0', n_customers=50)\n"
        "print(type(ops.unwrapped).__name__, type(world.unwrapped).__name__)"
    )
    assert _python(code) == "OpsAnalysisEnv CampaignEnv"


def test_the_domains_register_the_same_entry_points() -> None:
    """The domain modules register their ids too (when imported directly); both must agree."""
    import transferlab.coding_rl.env
    import transferlab.simulator.envs

    for env_id, entry_point in transferlab.ENV_IDS.items():
        assert gym.spec(env_id).entry_point == entry_point

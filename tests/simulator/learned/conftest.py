"""Shared fixtures of the learned-simulator tests: one set of small logs and one fit per session."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from transferlab.simulator.learned import LearnedSimulator, SimFitConfig
from transferlab.simulator.logs import Logs, LogSpec, generate_logs, write_logs
from transferlab.simulator.world_config import PRIOR_RESOURCE, CustomerPrior, WorldConfig

#: The CDNOW prior's values, used only while ``transferlab/simulator/data/cdnow_prior.json`` is missing.
FALLBACK_PRIOR = CustomerPrior(
    r=0.243, alpha_days=30.9, a=0.793, b=2.426, spend_log_mu=3.2, spend_log_sigma=0.8
)
#: The world the shared logs come from (big enough for a stable fit, small enough to stay fast).
WORLD = WorldConfig(n_customers=1000, seed=0)
LOG_DAYS = 240


@pytest.fixture(scope="session")
def world_prior() -> Iterator[None]:
    """The world's customer prior: the package's CDNOW fit, or its values while the file is missing."""
    if resources.files("transferlab.simulator").joinpath("data", PRIOR_RESOURCE).is_file():
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CustomerPrior, "from_cdnow", classmethod(lambda cls: FALLBACK_PRIOR))
        yield


@pytest.fixture(scope="session")
def logs(world_prior: None) -> Logs:
    """240 days x 1,000 customers of the world under the marketer."""
    return generate_logs(LogSpec(days=LOG_DAYS, world=WORLD))


@pytest.fixture(scope="session")
def logs_dir(logs: Logs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared logs written to disk as Parquet."""
    return write_logs(logs, tmp_path_factory.mktemp("learned") / "logs")


@pytest.fixture(scope="session")
def sim(logs: Logs) -> LearnedSimulator:
    """The simulator fitted on the shared logs (default config)."""
    return LearnedSimulator.fit(logs, SimFitConfig())


@pytest.fixture(scope="session")
def sim_two_channel(logs: Logs) -> LearnedSimulator:
    """The simulator fitted on the shared logs with the offer as a second purchase channel."""
    return LearnedSimulator.fit(logs, SimFitConfig(offer_form="noisy_or"))

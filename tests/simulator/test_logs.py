"""Historical logs: propensities recorded exactly, outcomes NaN until matured, atomic write, validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.simulator.behaviour import MarketerPolicy
from transferlab.simulator.logs import LogError, Logs, LogSpec, generate_logs, read_logs, write_logs
from transferlab.simulator.vocabulary import CATALOG, OBS_KEYS
from transferlab.simulator.world_config import WorldConfig


@pytest.fixture(scope="module")
def logs() -> Logs:
    return generate_logs(LogSpec(days=60, world=WorldConfig(n_customers=400, seed=7)))


def test_one_row_per_day_with_the_exact_propensity_of_the_logged_action(logs: Logs) -> None:
    camp = logs.campaigns
    assert len(camp) == 60 and camp["day"].tolist() == list(range(60))
    policy = MarketerPolicy(epsilon=0.1)
    for _, row in camp.iterrows():
        state = {k: float(row[f"ctx_{k}"]) for k in OBS_KEYS}
        index = int(row["action_index"])
        probs = policy.probabilities(state, float(row["gmv_baseline"]))
        assert probs[index] == pytest.approx(row["propensity"], rel=1e-12)
        assert CATALOG[index].discount == row["discount"]
    assert ((camp.propensity > 0) & (camp.propensity <= 1)).all()


def test_outcomes_are_nan_until_matured_never_zero(logs: Logs) -> None:
    camp = logs.campaigns
    launched = camp[camp.launched]
    late = launched[launched.day >= 60 - 30]
    early = launched[launched.day < 60 - 31]
    assert len(late) and len(early)
    assert late["o_gmv"].isna().all() and not late["matured"].any()
    assert early["matured"].all() and early["o_gmv"].notna().all()
    assert early["o_retention_30"].notna().all() and early["o_retention_90"].isna().all()
    result = json.loads(early.iloc[0]["result_json"])
    assert result["actions"][0]["discount"] == early.iloc[0]["discount"]
    assert result["result"]["gmv"] == pytest.approx(early.iloc[0]["o_gmv"])
    assert "roi" in result["result"]


def test_logs_hold_no_hidden_trait(logs: Logs) -> None:
    assert list(logs.customers.columns) == ["customer", "segment"]
    hidden = {"rate", "p_drop", "price_sens", "pref_hour", "spend_mu", "alive", "fatigue"}
    for table in (logs.campaigns, logs.events, logs.daily):
        assert not hidden & set(table.columns)
    assert set(logs.events["event"]) >= {"push", "purchase", "delivery"}


def test_write_then_read_round_trips_and_refuses_a_used_directory(logs: Logs, tmp_path: Path) -> None:
    out = write_logs(logs, tmp_path / "logs")
    back = read_logs(out)
    pd.testing.assert_frame_equal(back.campaigns, logs.campaigns)
    assert back.manifest["rows"]["campaigns"] == 60
    with pytest.raises(LogError, match="already exists and is not empty"):
        write_logs(logs, out)
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]  # no temporary directory left behind


def test_bad_logs_get_a_clear_error(logs: Logs, tmp_path: Path) -> None:
    with pytest.raises(LogError, match="is not a log directory"):
        read_logs(tmp_path / "nowhere")
    out = write_logs(logs, tmp_path / "logs")
    logs.campaigns.drop(columns=["propensity"]).to_parquet(out / "campaigns.parquet")
    with pytest.raises(LogError, match=r"campaigns log is missing column\(s\) \['propensity'\]"):
        read_logs(out)
    logs.campaigns.iloc[:0].to_parquet(out / "campaigns.parquet")
    with pytest.raises(LogError, match="campaigns log is empty"):
        read_logs(out)
    (out / "daily.parquet").unlink()
    with pytest.raises(LogError, match=r"daily\.parquet is missing"):
        read_logs(out)


def test_the_marketer_launches_more_before_weekends_and_discounts_deeper_when_sales_are_weak() -> None:
    policy = MarketerPolicy()
    calm = {"weekday": 0.0, "gmv_7d": 1000.0, "pushes_7d": 0.0}
    assert policy.launch_probability({**calm, "weekday": 4.0}, 1000.0) > policy.launch_probability(
        calm, 1000.0
    )
    discounts = np.array([a.discount for a in CATALOG])
    mean_discount = {
        g: float(policy.probabilities({**calm, "gmv_7d": g}, 1000.0)[1:] @ discounts[1:])
        for g in (1000.0, 500.0)
    }
    assert mean_discount[500.0] > mean_discount[1000.0]
    with pytest.raises(ValueError, match="epsilon"):
        MarketerPolicy(epsilon=1.5)


def test_generate_logs_command(tmp_path: Path) -> None:
    out = tmp_path / "logs"
    args = ["sim", "generate-logs", "--out", str(out), "--days", "20", "--customers", "200", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["campaigns"] == 20 and summary["customers"] == 200
    assert read_logs(out).manifest["world"]["n_customers"] == 200
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "already exists" in again.stderr
    bad = CliRunner().invoke(app, ["sim", "generate-logs", "--out", str(tmp_path / "x"), "--days", "3"])
    assert bad.exit_code == 2 and "at least 7" in bad.stderr
    bad = CliRunner().invoke(app, ["sim", "generate-logs", "--out", str(tmp_path / "y"), "--customers", "0"])
    assert bad.exit_code == 2 and "n_customers" in bad.stderr

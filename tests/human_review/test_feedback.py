"""Learning from results that came back: hand-checked pieces and the loop closed end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transferlab.human_review.feedback import (
    PREDICTED_KEYS,
    close_the_loop,
    feedback_table,
    learn_from_feedback,
    predict_campaign,
    prediction_error,
    ratings_as_rewards,
)
from transferlab.human_review.service import ReviewService
from transferlab.human_review.store import ReviewStore
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import LogSpec, generate_logs
from transferlab.simulator.vocabulary import CampaignAction, catalog_index
from transferlab.simulator.world_config import WorldConfig

N_CUSTOMERS = 400


@pytest.fixture(scope="module")
def sim() -> LearnedSimulator:
    logs = generate_logs(LogSpec(days=120, world=WorldConfig(n_customers=N_CUSTOMERS, seed=0)))
    return LearnedSimulator.fit(logs)


def test_prediction_error_by_hand() -> None:
    table = pd.DataFrame({"orders": [3.0, 0.0, 5.0], "predicted_orders": [7.0, 1.0, np.nan]})
    expected = (abs(math.log(8 / 4)) + abs(math.log(2 / 1))) / 2  # the NaN row is skipped
    assert prediction_error(table) == pytest.approx(expected)
    assert math.isnan(prediction_error(table.assign(predicted_orders=np.nan)))


def test_predict_campaign_gives_intervals(sim: LearnedSimulator) -> None:
    a = catalog_index(CampaignAction(0.1, 20, "all", 20.0))
    pred = predict_campaign(sim, a, n_customers=N_CUSTOMERS, n_envs=8)
    assert set(pred) == set(PREDICTED_KEYS)
    for iv in pred.values():
        assert iv["low"] <= iv["estimate"] <= iv["high"]
    assert pred["orders"]["estimate"] > 0
    assert pred == predict_campaign(sim, a, n_customers=N_CUSTOMERS, n_envs=8)  # seeded
    with pytest.raises(ValueError, match="not a campaign"):
        predict_campaign(sim, 0, n_customers=N_CUSTOMERS)


def test_learn_from_feedback_moves_predictions_toward_the_truth(sim: LearnedSimulator) -> None:
    a = catalog_index(CampaignAction(0.3, 20, "all", 20.0))
    before = predict_campaign(sim, a, n_customers=N_CUSTOMERS, n_envs=8)["orders"]["estimate"]
    truth = before / 4  # the market answered with a quarter of the predicted orders, three times
    table = pd.DataFrame(
        {
            "suggestion_id": [1, 2, 3],
            "action_index": [a] * 3,
            "orders": [truth] * 3,
            "predicted_orders": [before] * 3,
        }
    )
    after = predict_campaign(
        learn_from_feedback(sim, table, shrinkage=1.0), a, n_customers=N_CUSTOMERS, n_envs=8
    )
    assert after["orders"]["estimate"] < 0.75 * before
    # nothing usable (no predictions): the simulator is returned unchanged
    assert learn_from_feedback(sim, table.assign(predicted_orders=np.nan)) is sim


def test_ratings_become_rewards(tmp_path: Path) -> None:
    svc = ReviewService(ReviewStore(f"sqlite:///{tmp_path / 'r.db'}"))
    admin = svc.add_user(None, "ada", "password1", "admin")
    bob = svc.add_user(admin, "bob", "password1", "reviewer")
    for question in ("why did sales fall?", "which segment churns?"):
        svc.add_report(admin, "ops-0001", question, "an answer", 6.0, "expert")
    svc.rate(bob, "report-1", 7.0, "names the stock-out")
    svc.rate(bob, "report-2", 10.0)
    assert ratings_as_rewards(svc, admin) == [("report-1", 0.7), ("report-2", 1.0)]
    assert ratings_as_rewards(svc, admin, "report-2") == [("report-2", 1.0)]


def test_the_loop_closes(sim: LearnedSimulator, tmp_path: Path) -> None:
    """Real store, service, market and worker: after each round of results the simulator that learns
    predicts the next round better than the one that never learned."""
    actions = [catalog_index(CampaignAction(d, 20, s, 20.0)) for d in (0.1, 0.3) for s in ("all", "bargain")]
    rounds = close_the_loop(sim, tmp_path, actions=actions, rounds=4, n_customers=N_CUSTOMERS, seed=0)
    assert [r.executed for r in rounds] == [4, 4, 4, 4]
    assert rounds[0].error_learning == rounds[0].error_static  # nothing learned yet
    learned = sum(r.error_learning for r in rounds[1:])
    static = sum(r.error_static for r in rounds[1:])
    assert learned < 0.8 * static
    # every suggestion went the whole way, with its audit trail
    svc = ReviewService(ReviewStore(f"sqlite:///{tmp_path / 'review.db'}"))
    admin = svc.authenticate("admin", "admin-pw")
    views = svc.list(admin)
    assert len(views) == 16 and {v.state for v in views} == {"feedback_received"}
    assert all(v.executions == 1 for v in views)
    assert len(feedback_table(views)) == 16

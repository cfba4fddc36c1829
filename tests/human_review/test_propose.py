"""`propose`: suggestions from a tiny offline learner and a tiny PPO policy, queued with evidence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transferlab.human_review.gateway import MarketGateway
from transferlab.human_review.propose import (
    UPLIFT_KEYS,
    ProposeError,
    confidence_from,
    load_policy,
    market_observation,
    marketer_actions,
    predict_campaign,
    predict_evidence,
    predict_uplift,
    propose,
)
from transferlab.human_review.schema import Evidence, classify_risk, effective_risk, parse_action
from transferlab.human_review.service import ReviewService, User
from transferlab.human_review.store import ReviewStore
from transferlab.simulator.envs.campaign import OBS_DIM
from transferlab.simulator.vocabulary import CATALOG, OBS_KEYS


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny logs, a simulator fitted on them, an offline run (DiscreteCQL, a few steps) and a PPO policy."""
    from transferlab.offline.datasets import DatasetConfig
    from transferlab.offline.evaluate import OfflineEvalConfig
    from transferlab.offline.train import OfflineTrainConfig, train_offline
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
    from transferlab.simulator.train import CampaignPolicy
    from transferlab.simulator.world_config import WorldConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("propose")
    logs = generate_logs(LogSpec(days=70, epsilon=0.3, world=WorldConfig(n_customers=200, seed=5)))
    write_logs(logs, root / "logs")
    LearnedSimulator.fit(logs).save(root / "sim")
    config = OfflineTrainConfig(
        learners=["discrete_cql"],
        steps=30,
        dataset=DatasetConfig(horizon=10),
        evaluation=OfflineEvalConfig(episodes=2, n_boot=100, fqe_steps=0),
    )
    train_offline(logs, config, run_dir=root / "offline")
    torch.manual_seed(0)
    policy = CampaignPolicy(hidden=16)
    policy.set_logit_prior(np.full(len(CATALOG), 1.0 / len(CATALOG)))
    policy.save(root / "train" / "policy.pt")
    torch.set_num_threads(threads)
    return {
        "logs": root / "logs",
        "sim": root / "sim",
        "learner": root / "offline" / "learners" / "discrete_cql",
        "ppo": root / "train" / "policy.pt",
        "root": root,
    }


@pytest.fixture
def queue() -> tuple[ReviewService, User]:
    svc = ReviewService(ReviewStore("sqlite://"))
    admin = svc.add_user(None, "ada", "pass-word-ada", "admin")
    return svc, svc.add_user(admin, "proposer", "pass-word-p", "reviewer")


def _check_queued(svc: ReviewService, actor: User, ids: list[int], n: int) -> None:
    assert len(ids) == n
    views = [svc.get(actor, i) for i in ids]
    assert len({json.dumps(v.action, sort_keys=True) for v in views}) == n  # n different campaigns
    for v in views:
        assert v.state == "pending" and v.submitted_by == actor.name
        action = parse_action(v.action)
        assert action.budget > 0  # "no campaign" is never queued
        evidence = Evidence.model_validate(v.evidence)
        assert set(evidence.predicted) >= {"orders", "gmv", "profit"}
        assert evidence.policy and evidence.run_dir
        for iv in evidence.predicted.values():
            assert iv.low <= iv.estimate <= iv.high
        assert v.reasoning.startswith("The ") and "profit" in v.reasoning
        assert set(evidence.uplift) == {"no_campaign", "current"}
        assert all(set(row) == set(UPLIFT_KEYS) for row in evidence.uplift.values())
        assert "against doing nothing" in v.reasoning
        assert 0.05 <= v.confidence <= 0.95
        ours = classify_risk(action, evidence, v.confidence)
        assert v.risk == effective_risk(v.claimed_risk, ours)  # type: ignore[arg-type]  # recomputed by the service
        first = svc.audit(actor, v.id)[0]
        assert first.reason is not None and f"ours {ours}" in first.reason


def test_propose_from_an_offline_learner(
    artifacts: dict[str, Path], queue: tuple[ReviewService, User]
) -> None:
    svc, actor = queue
    ids = propose(svc, actor, artifacts["learner"], artifacts["logs"], simulator_dir=artifacts["sim"], n=3)
    _check_queued(svc, actor, ids, 3)
    ope = svc.get(actor, ids[0]).evidence["ope"]
    assert ope is not None and ope["estimator"] == "sndr" and "ess" in ope
    assert ope["low"] <= ope["estimate"] <= ope["high"]
    assert "Off-policy evaluation (sndr)" in svc.get(actor, ids[0]).reasoning
    policy = load_policy(artifacts["learner"])
    assert policy.score_name == "Q-value"  # next best by Q-value
    obs = market_observation(artifacts["logs"])
    assert policy.ranked(obs)[0][0] == policy.act(obs)


def test_propose_from_a_ppo_policy_in_the_market(
    artifacts: dict[str, Path], queue: tuple[ReviewService, User]
) -> None:
    svc, actor = queue
    market = artifacts["root"] / "market"
    MarketGateway.from_logs(market, artifacts["logs"])
    ids = propose(
        svc,
        actor,
        artifacts["ppo"],
        artifacts["logs"],
        simulator_dir=artifacts["sim"],
        n=2,
        market_dir=market,
    )
    _check_queued(svc, actor, ids, 2)
    view = svc.get(actor, ids[0])
    assert view.evidence["ope"] is None and view.evidence["policy"] == "ppo:ppo"
    assert "No off-policy estimate" in view.reasoning
    assert svc.get(actor, ids[1]).confidence < view.confidence  # a lower-ranked choice


def test_market_observation_is_the_env_observation(artifacts: dict[str, Path]) -> None:
    market = artifacts["root"] / "market-obs"
    gateway = MarketGateway.from_logs(market, artifacts["logs"])
    obs = market_observation(artifacts["logs"], market)
    assert obs.shape == (OBS_DIM,) and obs[-1] == 1.0
    state = gateway.world().observe()
    assert obs[: len(OBS_KEYS)].tolist() == [state[k] for k in OBS_KEYS]
    with pytest.raises(ProposeError, match="review market init"):
        market_observation(artifacts["logs"], artifacts["root"] / "nowhere")


def test_bad_policy_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProposeError, match="neither a PPO policy"):
        load_policy(tmp_path)


def test_confidence_rule() -> None:
    trusted = {"estimate": 10.0, "low": 8.0, "high": 12.0, "trusted": True}
    untrusted = {**trusted, "trusted": False}
    assert confidence_from(trusted, {}, 0) == 0.72  # 0.9 * (1 - 0.5 * 0.4)
    assert confidence_from(untrusted, {}, 0) < confidence_from(trusted, {}, 0)
    assert confidence_from(trusted, {}, 1) == round(0.72 * 0.9, 3)
    wide = {"estimate": 1.0, "low": -50.0, "high": 50.0, "trusted": True}
    assert confidence_from(wide, {}, 0) == 0.45  # a wide interval halves it at most


def test_uplift_is_paired_market_by_market(artifacts: dict[str, Path]) -> None:
    from transferlab.simulator.learned import LearnedSimulator

    sim = LearnedSimulator.load(artifacts["sim"])
    obs = market_observation(artifacts["logs"])
    # "launching" no campaign against doing nothing: the same markets, so exactly zero everywhere
    nothing = predict_uplift(sim, 0, obs, n_customers=200, n_envs=4)["no_campaign"]
    assert all(iv == {"estimate": 0.0, "low": 0.0, "high": 0.0} for iv in nothing.values())
    index = 1 + int(np.argmax([c.budget for c in CATALOG[1:]]))  # the widest campaign: it pushes
    uplift = predict_uplift(sim, index, obs, n_customers=200, n_envs=4)
    assert uplift["no_campaign"]["push_cost"]["estimate"] > 0  # it costs what doing nothing does not
    same = predict_uplift(sim, index, obs, n_customers=200, n_envs=4)
    assert same == uplift  # seeded: the same figures again
    assert set(predict_campaign(sim, index, n_customers=200, n_envs=4)) >= set(UPLIFT_KEYS)
    # one run of the campaign's markets gives both, as the separate calls do
    both = predict_evidence(sim, index, obs, n_customers=200, n_envs=4)
    assert both == (predict_campaign(sim, index, n_customers=200, n_envs=4), uplift)


def test_the_marketer_baseline_samples_the_logging_policy() -> None:
    from transferlab.simulator.behaviour import MarketerPolicy

    obs = np.array([3.0, 400.0, 9000.0, 2500.0, 2.0] + [0.0] * (len(OBS_KEYS) - 5) + [1.0])
    draws = marketer_actions(obs, epsilon=0.1, n=4000, seed=0)
    state = dict(zip(OBS_KEYS, obs[: len(OBS_KEYS)], strict=True))
    p_none = MarketerPolicy(epsilon=0.1).probabilities(state, gmv_baseline=state["gmv_7d"])[0]
    assert abs(float(np.mean(draws == 0)) - p_none) < 0.03  # no campaign as often as the marketer
    assert np.array_equal(draws, marketer_actions(obs, epsilon=0.1, n=4000, seed=0))

"""The customer-day panel, checked by hand on a tiny hand-written log; buckets; the design matrix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from transferlab.simulator.learned.features import (
    EXO_COLUMNS,
    NEVER,
    DesignLayout,
    Panel,
    build_panel,
    customer_day_states,
    design_matrix,
    end_states,
    frequency_bucket,
    log_arrays,
    push_history_bits,
    recency_bucket,
)
from transferlab.simulator.logs import LogError, Logs
from transferlab.simulator.vocabulary import (
    CATALOG,
    DAY_KEYS,
    OUTCOME_KEYS,
    SEGMENTS,
    CampaignAction,
    catalog_index,
)

N_DAYS = 10
A0 = CampaignAction(discount=0.2, push_hour=20, segment="all", budget=20.0)
A1 = CampaignAction(discount=0.1, push_hour=9, segment="loyal", budget=60.0)


def _event(day: int, event: str, customer: int, campaign: int = -1, **money: float) -> dict[str, object]:
    row: dict[str, object] = {"t": day + 0.5, "day": day, "event": event, "customer": customer}
    row.update(campaign=campaign, category=money.pop("category", -1), list_value=0.0, paid=0.0, discount=0.0)
    row.update(money)
    return row


def tiny_logs() -> Logs:
    """Three customers, ten days (day 0 a Wednesday), two campaigns.

    Customer 10 (loyal) buys on day 1 and, under campaign 0's offer, on day 4; gets pushes on days
    2 (campaign 0) and 6 (campaign 1). Customer 11 (bargain) gets campaign 0's push and buys on
    day 9, when that offer has run out. Customer 12 (casual) never does anything.
    """
    events = pd.DataFrame(
        [
            _event(1, "purchase", 10, category=0, list_value=40.0, paid=40.0),
            _event(2, "push", 10, 0, discount=0.2),
            _event(2, "push", 11, 0, discount=0.2),
            _event(4, "purchase", 10, 0, category=1, list_value=50.0, paid=40.0, discount=0.2),
            _event(6, "push", 10, 1, discount=0.1),
            _event(9, "purchase", 11, category=2, list_value=30.0, paid=30.0),
        ]
    )
    campaigns = pd.DataFrame(
        {
            "day": range(N_DAYS),
            "ctx_weekday": [(d + 2) % 7 for d in range(N_DAYS)],
            "action_index": [0] * N_DAYS,
            "campaign_id": [-1] * N_DAYS,
            "launched": [False] * N_DAYS,
            "reached": [0] * N_DAYS,
            "matured": [False] * N_DAYS,
            "propensity": [0.5] * N_DAYS,
            **{
                k: [CATALOG[0].to_dict()[k]] * N_DAYS
                for k in ("discount", "push_hour", "segment", "budget", "category")
            },
            **{f"o_{k}": [np.nan] * N_DAYS for k in OUTCOME_KEYS},
        }
    )
    for cid, (day, action) in enumerate(((2, A0), (6, A1))):
        for key, value in action.to_dict().items():
            campaigns.loc[day, key] = value
        campaigns.loc[day, ["campaign_id", "launched", "action_index"]] = [cid, True, catalog_index(action)]
    daily = pd.DataFrame({"day": range(N_DAYS), **{k: [0.0] * N_DAYS for k in DAY_KEYS}})
    for name in EXO_COLUMNS:
        daily[name] = 1.0 if name.startswith("competitor") else 10.0
    customers = pd.DataFrame({"customer": [10, 11, 12], "segment": ["loyal", "bargain", "casual"]})
    return Logs(campaigns, events, customers, daily, {})


@pytest.fixture(scope="module")
def states() -> pd.DataFrame:
    arr = log_arrays(tiny_logs())
    panel = customer_day_states(arr, promo_days=7, rows=np.arange(3))
    return panel.frame().set_index(["row", "day"])


def test_buckets() -> None:
    assert recency_bucket(np.array([1, 2, 3, 4, 7, 8, 14, 15, 30, 31, 90, 91, 180, 181, NEVER])).tolist() == [
        0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7, 7, 8, 8,
    ]  # fmt: skip
    assert frequency_bucket(np.array([0, 1, 2, 3, 4, 5, 6, 9, 10, 99])).tolist() == [
        0,
        1,
        2,
        3,
        4,
        4,
        5,
        5,
        6,
        6,
    ]


def test_recency_and_frequency_count_only_earlier_days(states: pd.DataFrame) -> None:
    c10 = states.loc[0]  # customer 10 is row 0
    assert c10.loc[1, "since"] == NEVER and c10.loc[1, "orders"] == 0 and c10.loc[1, "label"]
    assert c10.loc[2, "since"] == 1 and c10.loc[2, "orders"] == 1
    assert c10.loc[4, "since"] == 3 and c10.loc[4, "orders"] == 1 and c10.loc[4, "label"]
    assert c10.loc[5, "since"] == 1 and c10.loc[5, "orders"] == 2
    assert states.loc[(2, 9), "since"] == NEVER and not states.loc[2, "label"].any()
    assert states["age"].loc[0].tolist() == list(range(1, N_DAYS + 2))  # sign-up at the log start


def test_the_active_offer_is_the_latest_push_within_promo_days(states: pd.DataFrame) -> None:
    c10 = states.loc[0]
    assert c10.loc[1, "offer_age"] == -1 and c10.loc[1, "offer_discount"] == 0.0
    assert c10.loc[2, ["offer_age", "offer_discount", "offer_hour"]].tolist() == [0, 0.2, 20]
    assert c10.loc[4, "offer_age"] == 2 and c10.loc[4, "offer_action"] == catalog_index(A0)
    assert c10.loc[6, ["offer_age", "offer_discount", "offer_hour"]].tolist() == [
        0,
        0.1,
        9,
    ]  # newer push wins
    assert c10.loc[9, "offer_action"] == catalog_index(A1)
    c11 = states.loc[1]
    assert c11.loc[8, "offer_age"] == 6  # the 7th day of a 7-day offer
    assert c11.loc[9, "offer_age"] == -1 and c11.loc[9, "label"]  # ran out the day before the purchase


def test_push_counts_and_day_features(states: pd.DataFrame) -> None:
    c10 = states.loc[0]
    assert c10["pushes_7d"].tolist()[:10] == [0, 0, 1, 1, 1, 1, 2, 2, 2, 1]  # day 2's push leaves on day 9
    assert c10.loc[9, "pushes_30d"] == 2
    assert states.loc[0, "weekday"].tolist()[:3] == [2, 3, 4]
    assert np.allclose(states["log_competitor"], 0.0)


def test_end_state_and_push_history() -> None:
    arr = log_arrays(tiny_logs())
    end = end_states(arr, promo_days=7).frame().set_index("row")
    assert end.loc[0, ["since", "orders", "offer_age", "offer_action"]].tolist() == [
        6,
        2,
        4,
        catalog_index(A1),
    ]
    assert end.loc[1, ["since", "orders", "offer_age"]].tolist() == [1, 1, -1]
    assert end.loc[2, "since"] == NEVER
    # bit j: a push on day D - 1 - j (D = 10): customer 10 on days 6 and 2, customer 11 on day 2
    assert push_history_bits(arr).tolist() == [(1 << 3) | (1 << 7), 1 << 7, 0]


def test_negatives_are_sampled_with_weights() -> None:
    arr = log_arrays(tiny_logs())
    panel = build_panel(arr, 7, negative_rate=0.5, rng=np.random.default_rng(0))
    assert panel.label.sum() == 3 and (panel.weight[panel.label] == 1.0).all()
    assert (panel.weight[~panel.label] == 2.0).all()
    assert isinstance(Panel.concat([panel, panel]), Panel) and len(Panel.concat([panel, panel])) == 2 * len(
        panel
    )


def test_design_matrix_row_by_hand(states: pd.DataFrame) -> None:
    layout = DesignLayout(promo_days=7)
    arr = log_arrays(tiny_logs())
    panel = customer_day_states(arr, 7, np.array([0]))
    row = design_matrix(panel.take(panel.day == 4), layout).toarray()[0]  # customer 10, day 4
    named = dict(zip(layout.names(), row, strict=True))
    loyal = SEGMENTS.index("loyal")
    assert named[f"segment[{SEGMENTS[loyal]}]"] == 1.0
    assert named["recency_frequency[r1f1]"] == 1.0  # 3 days since the last purchase (2-3), 1 order
    assert named["offer_age[2]"] == 1.0
    assert named["offer_main[discount]"] == pytest.approx(0.2) and named["discount[loyal]"] == pytest.approx(
        0.2
    )
    assert named["offer_main[hour_cos]"] == pytest.approx(np.cos(2 * np.pi * 20 / 24))
    assert named["fatigue[pushes_7d*offer]"] == 1.0
    assert named["weekday[6]"] == 1.0  # day 4 is a Sunday
    assert named["age[f1]"] == pytest.approx(np.log(5 + 30.0))
    assert (
        sum(v != 0 for v in row) == 18
    )  # every block but competitor (log 1.0 = 0) has one entry, fatigue two
    assert layout.n_columns == len(layout.names()) == design_matrix(panel, layout).shape[1]


def test_missing_columns_and_empty_logs_are_log_errors() -> None:
    logs = tiny_logs()
    with pytest.raises(LogError, match="stock_days_shoes"):
        log_arrays(
            Logs(logs.campaigns, logs.events, logs.customers, logs.daily.drop(columns="stock_days_shoes"), {})
        )
    no_buys = logs.events[logs.events["event"] != "purchase"]
    with pytest.raises(LogError, match="no purchases"):
        log_arrays(Logs(logs.campaigns, no_buys, logs.customers, logs.daily, {}))
    strangers = logs.events.assign(customer=99)
    with pytest.raises(LogError, match="missing from the customers log"):
        log_arrays(Logs(logs.campaigns, strangers, logs.customers, logs.daily, {}))

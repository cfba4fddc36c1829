"""The market vocabulary: action validation with clear errors, the catalog, satisfaction."""

from __future__ import annotations

import pytest

from transferlab.simulator.vocabulary import (
    CATALOG,
    NOOP,
    ActionError,
    CampaignAction,
    campaign_satisfaction,
    catalog_index,
)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"discount": -0.1}, "discount=-0.1 is outside [0, 0.5]"),
        ({"discount": 0.9}, "discount=0.9"),
        ({"discount": float("nan")}, "discount=nan"),
        ({"push_hour": 24}, "push_hour=24 is outside 0-23"),
        ({"push_hour": 7.5}, "push_hour=7.5 must be an integer"),
        ({"segment": "vip"}, "unknown segment 'vip'; use one of all, bargain, casual, loyal, premium"),
        ({"category": "toys"}, "unknown category 'toys'"),
        ({"budget": -5.0}, "budget=-5.0 is outside"),
    ],
)
def test_a_bad_action_names_the_field_and_the_fix(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ActionError) as err:
        CampaignAction(**fields)  # type: ignore[arg-type]
    assert needle in str(err.value)


def test_unknown_fields_in_a_dict_are_an_error() -> None:
    with pytest.raises(ActionError, match=r"unknown action field\(s\) \['colour'\]"):
        CampaignAction.from_dict({"discount": 0.1, "colour": "red"})
    a = CampaignAction(discount=0.1, push_hour=9, segment="loyal", budget=20.0)
    assert CampaignAction.from_dict(a.to_dict()) == a


def test_the_catalog_starts_with_no_campaign_and_indexes_back() -> None:
    assert len(CATALOG) == 151 and CATALOG[0] == NOOP and NOOP.is_noop
    assert all(catalog_index(a) == i for i, a in enumerate(CATALOG))
    assert catalog_index(CampaignAction(discount=0.15, budget=20.0)) == -1
    assert CampaignAction(budget=50.0).reach_cap(push_cost=0.02) == 2500


def test_satisfaction_by_hand() -> None:
    # 1 - (2 complaints + 0.5*4 returns + 0.5*2 late) / 10 orders = 1 - 5/10
    assert campaign_satisfaction(10, 2, 4, 2) == pytest.approx(0.5)
    assert campaign_satisfaction(0, 0, 0, 0) == 1.0
    assert campaign_satisfaction(2, 5, 0, 0) == 0.0

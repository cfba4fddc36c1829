"""The ``campaign_offline`` column of ``transferlab compare``: read from the committed offline RL run.

The other families are measured in their domains (:mod:`transferlab.coding_rl.compare_column`,
:mod:`transferlab.simulator.ops.compare_column`, :mod:`transferlab.simulator.compare_columns`) with the shared
:class:`~transferlab.platform.measures.Measure`; this one reads ``docs/results/offline_rl/result.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from transferlab.platform.measures import (
    LAYERS,
    PROPERTIES,
    QUESTIONS,
    Measure,
    Progress,
    Section,
    not_measured,
)


def _paired_gain(result: Mapping[str, Any], behaviour: str) -> dict[str, Any] | None:
    """The selection's world gain over the behaviour policy, paired and clustered by training seed."""
    for c in result.get("comparisons", []):
        if c["name"] == f"selected - {behaviour}" and c["cluster"] == "seed":
            return dict(c)
    return None


def offline_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """From the offline RL ``result.json``: the chosen policy, its gain over the behaviour policy in the
    world (paired over training seeds when the result has them, with its interval and MDE), and the
    spread (95% interval half-width) and error of the selecting OPE estimator over the learners."""
    main = result["main"]
    by = str(main["selection"]["by"])
    chosen = str(main["selection"]["chosen"])
    behaviour = str(main["behaviour"])
    pol = main["policies"]
    world = pol[chosen]["world"]
    base = pol[behaviour]["world"]
    learners = [k for k, v in pol.items() if by in v.get("ope", {}) and k != "no_campaign"]
    paired = _paired_gain(result, behaviour)
    half = [(pol[k]["ope"][by]["high"] - pol[k]["ope"][by]["low"]) / 2 for k in learners]
    rel = [pol[k]["ope_relative_error"][by] for k in learners]
    trusted = [k for k in learners if pol[k]["coverage"]["trusted"]]
    return {
        "estimator": by,
        "chosen": chosen,
        "behaviour": behaviour,
        "gain": float(paired["estimate"] if paired else world["estimate"] - base["estimate"]),
        "gain_ci": paired["ci"] if paired else None,
        "gain_mde": paired["mde"] if paired else None,
        "gain_seeds": paired["n_clusters"] if paired else 1,
        "chosen_by_seed": dict(result.get("selected_by_seed", {chosen: chosen})),
        "chosen_world": float(world["estimate"]),
        "behaviour_world": float(base["estimate"]),
        "ope_half_width_median": float(np.median(half)),
        "ope_relative_error_median": float(np.median(rel)),
        "trusted": len(trusted),
        "learners": len(learners),
        "unit": str(main.get("unit", "30-day return")),
        "logged_days": int(main["n_rows"]),
    }


def measure_offline(results_dir: str | Path, market: Mapping[str, Measure], say: Progress) -> Section:
    """The ``campaign_offline`` column from the committed offline RL result (and the market's table)."""
    say("offline: committed result.json")
    path = Path(results_dir, "offline_rl", "result.json")
    if not path.is_file():
        gone = not_measured(f"no {path}")
        return {
            "table": dict.fromkeys(PROPERTIES, gone),
            "questions": dict.fromkeys(QUESTIONS, gone),
            "diagnosis": dict.fromkeys(LAYERS, gone),
        }
    data = json.loads(path.read_text(encoding="utf-8"))
    o = offline_summary(data)
    src = f"committed {path}"
    spread = Measure(
        o["ope_half_width_median"],
        "± return",
        f"median 95% bootstrap half-width of the {o['estimator']} OPE estimate "
        f"over {o['learners']} policies ({src})",
    )
    interval = (
        f"; 95% CI [{o['gain_ci'][0]:+.2f}, {o['gain_ci'][1]:+.2f}] over {o['gain_seeds']} training seeds, "
        f"MDE {o['gain_mde']:.2f}"
        if o["gain_ci"]
        else ""
    )
    gain = Measure(
        o["gain"],
        "return",
        "world 30-day return of the policy the OPE selection chose minus the behaviour policy, paired on "
        f"the same world futures (chosen: {', '.join(sorted(set(o['chosen_by_seed'].values())))}{interval}; "
        f"{src})",
        {"low": o["gain_ci"][0], "high": o["gain_ci"][1]} if o["gain_ci"] else {},
    )
    pol = data["main"]["policies"]
    bc = pol.get("discrete_bc", {}).get("world", {}).get("estimate", float("nan"))
    return {
        "table": {
            "determinism": spread,
            "reward_delay": Measure(
                market["reward_delay"].value,
                "days",
                "each logged campaign's outcome matures as in the market",
            ),
            "parallel": Measure(
                float(o["logged_days"]),
                "logged days",
                "no exploration: the logs are fixed; new ones come at one campaign a day per shop",
            ),
            "cost": Measure(
                market["cost"].value,
                "$/campaign",
                "every logged trial was a real campaign: margin as in the market",
            ),
            "objectivity": Measure(
                market["objectivity"].value,
                "corr",
                "the logs carry the market's objectives: GMV-margin correlation",
            ),
            "tool_use": gain,
        },
        "questions": {
            "trustworthy": Measure(
                o["ope_relative_error_median"],
                "rel. error",
                f"median relative error of the {o['estimator']} OPE estimate vs the world; coverage trusted "
                f"for {o['trusted']} of {o['learners']} policies ({src})",
            ),
            "explore": Measure(
                float(data.get("main_catalog_tried", float("nan"))),
                "of catalog",
                f"share of the catalog's actions the logs tried ({src})",
            ),
            "repeatable": spread,
            "worth_cost": gain,
        },
        "diagnosis": {
            "information": Measure(
                float(o["trusted"]), "trusted", "policies whose OPE coverage diagnostics pass"
            ),
            "basic": Measure(
                float(bc - o["behaviour_world"]),
                "return",
                "behaviour cloning (discrete_bc) minus behaviour, world",
            ),
            "sequential": Measure(
                float(o["chosen_world"] - bc),
                "return",
                f"the chosen learner ({o['chosen']}) minus behaviour cloning",
            ),
        },
    }

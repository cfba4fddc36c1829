"""The ``campaign_offline`` column of ``transferlab compare``: read from the committed offline RL run.

The other families are measured in their domains (:mod:`transferlab.coding_rl.measures`,
:mod:`transferlab.simulator.ops.measures`, :mod:`transferlab.simulator.measures`) with the shared
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


def offline_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """From the offline RL ``result.json``: the chosen policy, its gain over the behaviour policy in the
    world, and the spread (95% interval half-width) and error of the selecting OPE estimator."""
    main = result["main"]
    by = str(main["selection"]["by"])
    chosen = str(main["selection"]["chosen"])
    behaviour = str(main["behaviour"])
    pol = main["policies"]
    world = pol[chosen]["world"]
    base = pol[behaviour]["world"]
    learners = [k for k, v in pol.items() if by in v.get("ope", {})]
    half = [(pol[k]["ope"][by]["high"] - pol[k]["ope"][by]["low"]) / 2 for k in learners]
    rel = [pol[k]["ope_relative_error"][by] for k in learners]
    trusted = [k for k in learners if pol[k]["coverage"]["trusted"]]
    return {
        "estimator": by,
        "chosen": chosen,
        "behaviour": behaviour,
        "gain": float(world["estimate"] - base["estimate"]),
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
    gain = Measure(
        o["gain"],
        "return",
        f"world 30-day return of the OPE-chosen policy ({o['chosen']}) minus the behaviour policy ({src})",
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

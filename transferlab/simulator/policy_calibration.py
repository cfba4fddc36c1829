"""Calibrate a learned simulator on what whole policies earned in a deployment.

Per-campaign calibration (:func:`transferlab.simulator.calibration.calibrate`) matches each catalog
action's window orders; it fixes the level of orders but not the order of policies, because a
campaign whose window sells well can still lose money over the days after it, and an action shift
learned on one policy does not reach the actions of another. This module fits a few *structural*
shifts of the simulator instead, so that every deployed policy's return, orders and complaints per
episode match the world's (the outcome vector per policy, not per campaign):

========================  ==========================================================================
shift                     what it moves
========================  ==========================================================================
``level``                 every purchase's log-odds
``offer_<segment>``       the offer's log-odds for customers of that CRM segment, whoever was targeted
``offer_per_discount``    the offer's log-odds per unit of discount (deep offers vs shallow ones)
``fatigue_7d/30d``        the fatigue coefficients on pushes in the last 7 and 30 days
``complaints``            the log of every complaint probability
``spend``                 the log list value of every order
``cost``                  the log cost of goods
========================  ==========================================================================

The shifts are fitted by damped Gauss-Newton (:func:`damped_gauss_newton`, Levenberg-Marquardt
damping, forward differences of ``step``) on the residuals of :func:`policy_residuals`, each policy
simulated on the same seeded markets at every evaluation (common random numbers), with a ridge
penalty that keeps each shift near zero unless the deployment asks for it. The report of the new
simulator records every shift and the fit's cost at each iteration.

>>> import numpy as np
>>> fit = damped_gauss_newton(lambda x: np.array([x[0] - 1.0, 2.0 * (x[1] + 0.5)]), 2, iterations=5)
>>> [round(float(v), 3) for v in fit.x]  # the least-squares solution of a linear problem
[1.0, -0.5]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.fidelity import evaluate_panel
from transferlab.simulator.learned import LearnedSimulator, SimParams
from transferlab.simulator.policies import Policy
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, SEGMENTS

RESPONSE_SHIFTS: tuple[str, ...] = (
    "level",
    *(f"offer_{s}" for s in SEGMENTS),
    "offer_per_discount",
    "fatigue_7d",
    "fatigue_30d",
    "complaints",
    "spend",
    "cost",
)
"""The structural shifts :func:`calibrate_policies` fits, in the order of its parameter vector."""

FIT_SEED_STRIDE = 1000
"""Seed distance between the averaged fits of :func:`calibrate_policies` (``fits`` > 1)."""

POLICY_KEYS: tuple[str, ...] = ("return", "return_se", "orders", "complaints")
"""What each deployed policy must report per episode: mean return, its standard error, orders, complaints."""

ORDERS_TOLERANCE = 0.02
"""Relative error of a policy's orders worth one standard unit of the fit's residuals."""
COMPLAINTS_TOLERANCE = 0.10
"""Relative error of a policy's complaints worth one standard unit (complaints are rare and noisy)."""
MIN_RETURN_SE = 0.3
"""Floor on a deployed policy's return standard error, so one quiet policy cannot dominate the fit."""
RIDGE = 3.0
"""Residual per unit of shift that keeps the shifts near zero unless the deployment asks for them."""


class PolicyCalibrationError(ValueError):
    """The deployment given to :func:`calibrate_policies` cannot be used; the message says what to fix."""


def shifted_params(params: SimParams, theta: np.ndarray) -> SimParams:
    """The simulator's parameters moved by ``theta`` (one value per :data:`RESPONSE_SHIFTS`)."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (len(RESPONSE_SHIFTS),):
        raise PolicyCalibrationError(
            f"need {len(RESPONSE_SHIFTS)} shifts {RESPONSE_SHIFTS}, got {theta.shape}"
        )
    t = dict(zip(RESPONSE_SHIFTS, theta, strict=True))
    segment = np.array([t[f"offer_{s}"] for s in SEGMENTS])
    discount = np.array([a.discount for a in CATALOG])
    offer = params.offer.astype(np.float64).copy()
    offer[:, 1:, :] += segment[:, None, None] + t["offer_per_discount"] * discount[None, 1:, None]
    fatigue = params.fatigue_coef + np.array([t["fatigue_7d"], t["fatigue_30d"]])
    return replace(
        params,
        base=(params.base + t["level"]).astype(params.base.dtype),
        offer=offer.astype(params.offer.dtype),
        fatigue_coef=fatigue.astype(params.fatigue_coef.dtype),
        complaint_prob=np.clip(params.complaint_prob * np.exp(t["complaints"]), 0.0, 1.0).astype(
            params.complaint_prob.dtype
        ),
        spend_mu=(params.spend_mu + t["spend"]).astype(params.spend_mu.dtype),
        cost_ratio=(params.cost_ratio * np.exp(t["cost"])).astype(params.cost_ratio.dtype),
    )


def policy_residuals(
    sim: Mapping[str, Mapping[str, float]], world: Mapping[str, Mapping[str, float]]
) -> np.ndarray:
    """Standardised differences, simulator minus world, per policy: return in units of the world's
    standard error (at least :data:`MIN_RETURN_SE`), then log orders and log complaints in units of
    :data:`ORDERS_TOLERANCE` and :data:`COMPLAINTS_TOLERANCE`.

    >>> w = {"a": {"return": 10.0, "return_se": 0.5, "orders": 100.0, "complaints": 2.0}}
    >>> s = {"a": {"return": 11.0, "orders": 102.0, "complaints": 2.0}}
    >>> [round(float(v), 3) for v in policy_residuals(s, w)]  # 1/0.5, log(1.02)/0.02, 0
    [2.0, 0.99, 0.0]
    """
    names = list(world)
    ret = [(sim[n]["return"] - world[n]["return"]) / max(world[n]["return_se"], MIN_RETURN_SE) for n in names]
    orders = [np.log(sim[n]["orders"] / world[n]["orders"]) / ORDERS_TOLERANCE for n in names]
    complaints = [
        np.log((sim[n]["complaints"] + 1e-3) / (world[n]["complaints"] + 1e-3)) / COMPLAINTS_TOLERANCE
        for n in names
    ]
    return np.array([*ret, *orders, *complaints], dtype=np.float64)


@dataclass(frozen=True)
class GaussNewtonFit:
    """Where :func:`damped_gauss_newton` stopped: the parameters and the cost after each iteration."""

    x: np.ndarray
    costs: list[float]


def damped_gauss_newton(
    residuals: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    iterations: int = 6,
    step: float = 0.1,
    damping: float = 1.0,
    progress: Callable[[str], None] | None = None,
) -> GaussNewtonFit:
    """Minimise ``|residuals(x)|^2`` from ``x = 0`` by Levenberg-Marquardt steps with a forward-difference
    Jacobian (``step`` wide: the simulator's cost is noisy at smaller scales). A step that does not
    lower the cost is retried with 4x the damping; an accepted one divides the damping by 3."""
    x = np.zeros(n)
    r = residuals(x)
    costs = [float(r @ r)]
    for it in range(iterations):
        jac = np.stack([(residuals(x + step * e) - r) / step for e in np.eye(n)], axis=1)
        jtj = jac.T @ jac
        while damping < 1e4:
            delta = np.linalg.solve(jtj + damping * (np.diag(np.diag(jtj)) + 1e-9 * np.eye(n)), -jac.T @ r)
            r_new = residuals(x + delta)
            if float(r_new @ r_new) < costs[-1]:
                x, r = x + delta, r_new
                costs.append(float(r @ r))
                damping /= 3.0
                break
            damping *= 4.0
        else:
            break
        if progress is not None:
            progress(f"policy calibration: iteration {it + 1}/{iterations}, cost {costs[-1]:.1f}")
    return GaussNewtonFit(x, costs)


def simulated_policies(
    sim: LearnedSimulator,
    panel: Mapping[str, Policy],
    *,
    n_customers: int,
    episodes: int,
    seed: int,
    episode: EpisodeConfig | None = None,
) -> dict[str, dict[str, float]]:
    """Each policy's mean return, orders and complaints per episode in ``sim`` (the same markets each)."""
    res = evaluate_panel(
        lambda n, k: sim.market(n_envs=n, n_customers=n_customers, seed=k),
        panel,
        episodes=episodes,
        seed=seed,
        episode=episode,
    )
    orders, complaints = DAY_KEYS.index("orders"), DAY_KEYS.index("complaints")
    return {
        name: {
            "return": float(res.returns[name].mean()),
            "orders": float(res.outcomes[name][orders]),
            "complaints": float(res.outcomes[name][complaints]),
        }
        for name in panel
    }


def calibrate_policies(
    sim: LearnedSimulator,
    world: Mapping[str, Mapping[str, float]],
    panel: Mapping[str, Policy],
    *,
    n_customers: int,
    episodes: int = 48,
    seed: int = 0,
    episode: EpisodeConfig | None = None,
    iterations: int = 6,
    fits: int = 1,
    progress: Callable[[str], None] | None = None,
) -> LearnedSimulator:
    """A new simulator whose deployed policies earn, sell and draw complaints as in ``world``.

    Args:
        world: per policy of ``panel``, the deployment's per-episode :data:`POLICY_KEYS`.
        episodes: simulated episodes per policy at each evaluation of the fit (the same seeds each).
        fits: independent fits (simulation seeds ``seed``, ``seed + FIT_SEED_STRIDE``, ...) whose
            shifts are averaged. One fit's shifts carry the noise of its own simulated markets; on
            the default world four fits gave held-out tau 0.645-0.775 each and 0.740 averaged
            (``docs/pilots/simulator_calibration.md``).
    """
    if fits < 1:
        raise PolicyCalibrationError(f"fits={fits}: need at least one fit")
    missing = [n for n in panel if n not in world]
    if missing:
        raise PolicyCalibrationError(f"no deployment results for {missing}: deploy every panel policy first")
    for name in panel:
        lacking = [k for k in POLICY_KEYS if k not in world[name]]
        if lacking:
            raise PolicyCalibrationError(f"deployment results of {name!r} lack {lacking}: need {POLICY_KEYS}")
        if world[name]["orders"] <= 0:
            raise PolicyCalibrationError(f"{name!r} sold nothing in the deployment: nothing to calibrate on")
    target = {n: world[n] for n in panel}

    def residuals_at(fit_seed: int) -> Callable[[np.ndarray], np.ndarray]:
        def residuals(theta: np.ndarray) -> np.ndarray:
            moved = LearnedSimulator(sim.config, shifted_params(sim.params, theta), sim.report)
            got = simulated_policies(
                moved, panel, n_customers=n_customers, episodes=episodes, seed=fit_seed, episode=episode
            )
            return np.concatenate([policy_residuals(got, target), RIDGE * theta])

        return residuals

    results = []
    for i in range(fits):
        if fits > 1 and progress is not None:
            progress(f"fit {i + 1}/{fits}")
        results.append(
            damped_gauss_newton(
                residuals_at(seed + i * FIT_SEED_STRIDE),
                len(RESPONSE_SHIFTS),
                iterations=iterations,
                progress=progress,
            )
        )
    x = np.mean([r.x for r in results], axis=0)
    report: dict[str, Any] = dict(sim.report)
    entry: dict[str, Any] = {
        "method": "policies",
        "policies": len(panel),
        "shifts": _rounded(x),
        "costs": [round(c, 2) for c in results[0].costs],
    }
    if fits > 1:
        entry["fits"] = [
            {
                "seed": seed + i * FIT_SEED_STRIDE,
                "shifts": _rounded(r.x),
                "costs": [round(c, 2) for c in r.costs],
            }
            for i, r in enumerate(results)
        ]
    report["calibration"] = [*report.get("calibration", []), entry]
    return LearnedSimulator(sim.config, shifted_params(sim.params, x), report)


def _rounded(x: np.ndarray) -> dict[str, float]:
    """Shifts by name, rounded for the report."""
    return {k: round(float(v), 4) for k, v in zip(RESPONSE_SHIFTS, x, strict=True)}

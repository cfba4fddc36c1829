"""Our customer purchase model: Pareto/NBD (Schmittlein, Morrison & Colombo 1987), by maximum likelihood.

While alive, a customer buys as a Poisson process with rate ``λ``; their lifetime is exponential with
rate ``μ`` and runs in continuous time, not only at purchases (BG/NBD lets customers drop out only just
after a purchase, so a customer who has not bought again since the first purchase is always alive for
BG/NBD). Across customers ``λ ~ Gamma(r, α)`` and ``μ ~ Gamma(s, β)``, independent (rates in the time
unit of the data: weeks for CDNOW). For a customer with ``x`` repeat purchases, the last at ``t_x``,
observed until ``T`` (Fader & Hardie 2005, "A note on deriving the Pareto/NBD model"):

    L = Γ(r + x) α^r β^s / Γ(r) · [ 1 / ((α + T)^(r + x) (β + T)^s) + s / (r + s + x) · A₀ ]

    A₀ = 2F1(r + s + x, s + 1; r + s + x + 1; (α - β) / (α + t_x)) / (α + t_x)^(r + s + x)
       - 2F1(r + s + x, s + 1; r + s + x + 1; (α - β) / (α + T))   / (α + T)^(r + s + x)      if α ≥ β,

and the same with ``α ↔ β`` and second argument ``r + x`` instead of ``s + 1`` when ``α < β``. The first
term is the likelihood of the histories where the customer is still alive at ``T``, so

    P(alive at T | x, t_x, T) = Γ(r + x) α^r β^s / (Γ(r) (α + T)^(r + x) (β + T)^s) / L,

and the expected purchases in ``(T, T + t]`` are

    E[Y(t) | x, t_x, T] = P(alive) · (r + x)(β + T) / ((α + T)(s - 1))
                          · [1 - ((β + T) / (β + T + t))^(s - 1)].

Everything is computed in log space (``gammaln``; the ``[1 - …] / (s - 1)`` factor through ``expm1`` so
that ``s = 1`` is its limit ``log((β + T + t) / (β + T))``). The model is fitted on the calibration
period only. On the CDNOW sample the published estimates are r = 0.55, α = 10.58, s = 0.61, β = 11.67.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import gammaln, hyp2f1

from transferlab.simulator.realdata.bgnbd import unique_histories

NAME = "pareto_nbd"


@dataclass(frozen=True)
class ParetoNbdParams:
    """Pareto/NBD parameters; ``alpha`` and ``beta`` are in the time unit of ``t_x`` and ``T`` (weeks)."""

    r: float
    alpha: float
    s: float
    beta: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class ParetoNbdFit:
    """A maximum-likelihood fit: the parameters and the total log-likelihood they reach."""

    params: ParetoNbdParams
    log_likelihood: float
    converged: bool


def _log_terms(
    params: ParetoNbdParams, x: np.ndarray, t_x: np.ndarray, T: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per customer: the log-likelihood of "alive at T" and the total log-likelihood."""
    r, alpha, s, beta = params.r, params.alpha, params.s, params.beta
    x = np.asarray(x, dtype=float)
    q = r + s + x
    top = max(alpha, beta)
    second = s + 1 if alpha >= beta else r + x
    gap = abs(alpha - beta)
    log_at_tx = np.log(hyp2f1(q, second, q + 1, gap / (top + t_x))) - q * np.log(top + t_x)
    log_at_T = np.log(hyp2f1(q, second, q + 1, gap / (top + T))) - q * np.log(top + T)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.minimum(log_at_T - log_at_tx, 0.0)
        log_a0 = np.where(diff < 0, log_at_tx + np.log(-np.expm1(diff)), -np.inf)
    common = gammaln(r + x) - gammaln(r) + r * np.log(alpha) + s * np.log(beta)
    alive = common - (r + x) * np.log(alpha + T) - s * np.log(beta + T)
    dead = common + np.log(s) - np.log(q) + log_a0
    return alive, np.logaddexp(alive, dead)


def log_likelihood(params: ParetoNbdParams, x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Per-customer log-likelihood ``log L(r, α, s, β | x, t_x, T)``."""
    return _log_terms(params, x, t_x, T)[1]


def probability_alive(params: ParetoNbdParams, x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``P(alive at T | x, t_x, T)``."""
    alive, total = _log_terms(params, x, t_x, T)
    return np.asarray(np.exp(alive - total))


def fit(x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> ParetoNbdFit:
    """Maximum-likelihood Pareto/NBD parameters (Nelder-Mead on the log parameters, then L-BFGS-B)."""
    ux, ut_x, uT, counts = unique_histories(x, t_x, T)

    def negative(log_params: np.ndarray) -> float:
        params = ParetoNbdParams(*np.exp(log_params))
        value = -float(counts @ log_likelihood(params, ux, ut_x, uT))
        return value if np.isfinite(value) else 1e300

    options = {"maxiter": 5000, "maxfev": 5000, "xatol": 1e-8, "fatol": 1e-8}
    coarse = minimize(negative, np.zeros(4), method="Nelder-Mead", options=options)
    fine = minimize(negative, coarse.x, method="L-BFGS-B")
    best = fine if fine.fun <= coarse.fun else coarse
    return ParetoNbdFit(ParetoNbdParams(*map(float, np.exp(best.x))), -float(best.fun), bool(coarse.success))


def conditional_expected(
    params: ParetoNbdParams, t: float, x: np.ndarray, t_x: np.ndarray, T: np.ndarray
) -> np.ndarray:
    """``E[Y(t) | x, t_x, T]``: expected purchases in ``(T, T + t]`` for each customer."""
    r, alpha, s, beta = params.r, params.alpha, params.s, params.beta
    x = np.asarray(x, dtype=float)
    growth = np.log((beta + T + t) / (beta + T))
    near_one = abs(s - 1) < 1e-9
    survival_integral = growth if near_one else -np.expm1(-(s - 1) * growth) / (s - 1)
    rate_given_alive = (r + x) * (beta + T) / (alpha + T)
    return np.asarray(probability_alive(params, x, t_x, T) * rate_given_alive * survival_integral)

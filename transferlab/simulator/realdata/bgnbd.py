"""BG/NBD: the beta-geometric/negative-binomial purchase model (Fader, Hardie & Lee 2005).

While alive, a customer buys as a Poisson process with rate ``λ``; after each purchase they become
inactive with probability ``p``. Across customers ``λ ~ Gamma(r, α)`` (shape ``r``, rate ``α``, in the
time unit of the data: weeks here) and ``p ~ Beta(a, b)``. For a customer with ``x`` repeat purchases,
the last at ``t_x``, observed until ``T`` (all measured from the first purchase):

    L(r, α, a, b | x, t_x, T) = Γ(r + x) α^r / Γ(r)
        · [ B(a, b + x) / B(a, b) / (α + T)^(r + x)
          + δ(x > 0) · B(a + 1, b + x - 1) / B(a, b) / (α + t_x)^(r + x) ]

(equation 6 of the paper), computed here in log space with ``gammaln``/``betaln``. The expected number
of purchases in ``(T, T + t]`` given the history is (equation 10)

    E[Y(t) | x, t_x, T] = (a + b + x - 1) / (a - 1)
        · [1 - ((α + T) / (α + T + t))^(r + x) · 2F1(r + x, b + x; a + b + x - 1; t / (α + T + t))]
        / [1 + δ(x > 0) · a / (b + x - 1) · ((α + T) / (α + t_x))^(r + x)]

with ``2F1`` the Gauss hypergeometric function. On the CDNOW sample (39 calibration weeks) the published
estimates are r = 0.243, α = 4.414, a = 0.793, b = 2.426.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import betaln, gammaln, hyp2f1


@dataclass(frozen=True)
class BgNbdParams:
    """BG/NBD parameters; ``alpha`` is in the time unit of ``t_x`` and ``T`` (weeks for CDNOW)."""

    r: float
    alpha: float
    a: float
    b: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class BgNbdFit:
    """A maximum-likelihood fit: the parameters and the total log-likelihood they reach."""

    params: BgNbdParams
    log_likelihood: float
    converged: bool


def log_likelihood(params: BgNbdParams, x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Per-customer log-likelihood ``log L(r, α, a, b | x, t_x, T)`` (equation 6, in log space)."""
    r, alpha, a, b = params.r, params.alpha, params.a, params.b
    x = np.asarray(x, dtype=float)
    common = gammaln(r + x) - gammaln(r) + r * np.log(alpha)
    alive = betaln(a, b + x) - betaln(a, b) - (r + x) * np.log(alpha + T)
    repeat = x > 0
    dead = np.full_like(x, -np.inf)
    xr = x[repeat]
    dead[repeat] = (
        betaln(a + 1, b + xr - 1) - betaln(a, b) - (r + xr) * np.log(alpha + np.asarray(t_x)[repeat])
    )
    return np.asarray(common + np.logaddexp(alive, dead))


def unique_histories(
    x: np.ndarray, t_x: np.ndarray, T: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(x, t_x, T)`` rows and how many customers share each (likelihoods only need those)."""
    rows, counts = np.unique(np.column_stack([x, t_x, T]).astype(float), axis=0, return_counts=True)
    return rows[:, 0], rows[:, 1], rows[:, 2], counts


def fit(x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> BgNbdFit:
    """Maximum-likelihood BG/NBD parameters (Nelder-Mead on the log parameters, then L-BFGS-B)."""
    ux, ut_x, uT, counts = unique_histories(x, t_x, T)

    def negative(log_params: np.ndarray) -> float:
        value = -float(counts @ log_likelihood(BgNbdParams(*np.exp(log_params)), ux, ut_x, uT))
        return value if np.isfinite(value) else 1e300

    options = {"maxiter": 5000, "maxfev": 5000, "xatol": 1e-8, "fatol": 1e-8}
    coarse = minimize(negative, np.zeros(4), method="Nelder-Mead", options=options)
    fine = minimize(negative, coarse.x, method="L-BFGS-B")
    best = fine if fine.fun <= coarse.fun else coarse
    return BgNbdFit(BgNbdParams(*map(float, np.exp(best.x))), -float(best.fun), bool(coarse.success))


def conditional_expected(
    params: BgNbdParams, t: float, x: np.ndarray, t_x: np.ndarray, T: np.ndarray
) -> np.ndarray:
    """``E[Y(t) | x, t_x, T]``: expected purchases in ``(T, T + t]`` for each customer (equation 10)."""
    r, alpha, a, b = params.r, params.alpha, params.a, params.b
    x = np.asarray(x, dtype=float)
    z = t / (alpha + T + t)
    hyper = hyp2f1(r + x, b + x, a + b + x - 1, z)
    numerator = (a + b + x - 1) / (a - 1) * (1 - ((alpha + T) / (alpha + T + t)) ** (r + x) * hyper)
    return np.asarray(numerator * probability_alive(params, x, t_x, T))


def probability_alive(params: BgNbdParams, x: np.ndarray, t_x: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``P(alive at T | x, t_x, T)``: 1 for ``x == 0``, else ``1 / (1 + odds of having dropped out)``."""
    r, alpha, a, b = params.r, params.alpha, params.a, params.b
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        odds_dead = np.where(x > 0, a / (b + x - 1) * ((alpha + T) / (alpha + t_x)) ** (r + x), 0.0)
    return np.asarray(1 / (1 + odds_dead))

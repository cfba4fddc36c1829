"""The learned simulator: a market fitted on logs only, compiled to numpy for a fast inner loop.

Fitted from the four log tables (campaigns, events, customers, daily) and nothing else — never the
world's hidden traits nor the manifest's world config. Two commands make and use one::

    transferlab sim fit LOGS --out runs/sim [--config FILE] [--seed N] [--json]

API::

    sim = LearnedSimulator.fit(read_logs("logs"), SimFitConfig(seed=0))   # or LearnedSimulator.load(dir)
    sim.save("runs/sim")          # config.json, params.npz, fit_report.json, fit_report.md (atomic)
    market = sim.market(n_envs=256, n_customers=1000, seed=0)             # a SimMarket
    obs = market.reset(seed=0)                       # (n_envs, len(OBS_KEYS)), like MarketWorld.observe()
    out = market.step(np.array([...]))               # CATALOG indices, (n_envs,) -> (n_envs, len(DAY_KEYS))
    market.observe(); market.day                     # days simulated since reset
    market.campaign_outcomes().frame()               # per campaign: OUTCOME_KEYS like CampaignRecord

* :class:`SimFitConfig` (``fit.py``): seed, purchase model ('logistic' or 'hgb'), regularisation,
  negative sampling, held-out fraction, offer window and maturity (inferred when None), noise scale.
* ``features.py``: the customer-day panel (segment, recency, frequency, age, weekday, the active
  offer's discount / push hour / age, pushes in the last 7 and 30 days, competitor prices and stock
  cover of the day; label: bought that day) and the purchase model's design matrix.
* ``fit.py``: every mechanism fitted and compiled to :class:`SimParams` (lookup tables and
  coefficients), with a fit report (held-out log loss and AUC vs a constant, daily orders on the
  held-out tail, the fitted day-level shock).
* ``market.py``: :class:`SimMarket`, ``n_envs`` markets of ``n_customers`` customers as 2-D arrays;
  delayed late deliveries, complaints and returns in ring buffers; stock cover and competitor
  prices block-bootstrapped from the daily log; every draw from one seeded Generator.
* ``io.py``: :class:`LearnedSimulator` (fit, market, save, load) and the Markdown fit report.

The market starts from the logged customers' state at the end of the log (bootstrapped to
``n_customers``), continuing the logged calendar (weekday) and week of shop totals.
"""

from __future__ import annotations

from transferlab.simulator.learned.fast_market import CampaignOutcomes, SimMarket, SimParams
from transferlab.simulator.learned.fit import FitResult, SimFitConfig, fit_simulator
from transferlab.simulator.learned.simulator import LearnedSimulator, SimulatorError

__all__ = [
    "CampaignOutcomes",
    "FitResult",
    "LearnedSimulator",
    "SimFitConfig",
    "SimMarket",
    "SimParams",
    "SimulatorError",
    "fit_simulator",
]

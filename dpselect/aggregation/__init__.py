"""Building blocks for differentially private aggregation (per-key counts, sums, means).

Each module does one thing; the privacy pages under docs/privacy/ state and prove what each one
guarantees:

* :mod:`~dpselect.aggregation.noise`: exact discrete Laplace and discrete Gaussian noise on
  integers, each with its privacy statement (docs/privacy/discrete-noise.md);
* :mod:`~dpselect.aggregation.grid`: clamping and snapping float or integer values to a
  power-of-two grid, so that sums are exact integers and noise is never added to a float;
* :mod:`~dpselect.aggregation.bounds`: APPROX_BOUNDS, private clamping bounds from a noisy
  logarithmic histogram (docs/privacy/approx-bounds.md);
* :mod:`~dpselect.aggregation.intervals`: confidence intervals for noisy values and means
  (docs/privacy/confidence-intervals.md);
* :mod:`~dpselect.aggregation.budget`: an exact (ε, δ) accountant for sequential composition
  (docs/privacy/budget.md), or one stated in ρ-zCDP (docs/privacy/zcdp.md).

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
from dpselect.aggregation.bounds import ApproxBounds, approx_bounds, approx_bounds_per_partition
from dpselect.aggregation.budget import Budget, BudgetExceededError, Charge
from dpselect.aggregation.grid import Grid
from dpselect.aggregation.noise import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    IntegerNoise,
    NoiseGuarantee,
    representable_scale,
    representable_sigma2,
    zcdp_delta,
)

__all__ = [
    "ApproxBounds",
    "Budget",
    "BudgetExceededError",
    "Charge",
    "DiscreteGaussianNoise",
    "DiscreteLaplaceNoise",
    "Grid",
    "IntegerNoise",
    "NoiseGuarantee",
    "approx_bounds",
    "approx_bounds_per_partition",
    "representable_scale",
    "representable_sigma2",
    "zcdp_delta",
]

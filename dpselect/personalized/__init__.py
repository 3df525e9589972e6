"""Personalized differential privacy by personalized truncation: D. Sun, W. Dong, Y. Qiu, K. Yi,
*Personalized Truncation for Personalized Privacy*, Proc. ACM Manag. Data 2(6) (SIGMOD 2025).

Each user u has a privacy level Φ(u); a mechanism is Φ-PDP if changing user u's data moves
every output probability by at most a factor e^{Φ(u)} ([JYC15]). The estimators:

* :func:`pdp_count` — bit counting with the doubling threshold search (Algorithm A);
* :func:`pdp_sum` / :func:`pdp_sum_signed` — sums with personalized truncation τ(u) = ⌊s·Φ(u)⌋
  and a private search over s (Algorithm B, L = t + 1);
* :func:`pdp_join_sum` — user-level PDP for join results with the LP truncation (Algorithm C; needs the
  ``[lp]`` extra for scipy's HiGHS);
* baselines: :func:`naive_count`, :func:`naive_sum`, :func:`sampling_count`,
  :func:`sampling_sum`, :func:`pdp_exponential_count`, :func:`pdp_count_with_sampling`.

All noise is exact integer noise from the package CSPRNG (``dpselect.rng``); every result
carries a :class:`PrivacyStatement` whose per-user losses are exact rationals.
"""
from .baselines import naive_count, naive_sum, pdp_count_with_sampling, sampling_count, sampling_sum
from .count import pdp_count
from .exponential import pdp_exponential_count
from .join import pdp_join_sum
from .result import PersonalizedResult, PrivacyStatement
from .sum import pdp_sum, pdp_sum_signed

__all__ = [
    "PersonalizedResult",
    "PrivacyStatement",
    "naive_count",
    "naive_sum",
    "pdp_count",
    "pdp_count_with_sampling",
    "pdp_exponential_count",
    "pdp_join_sum",
    "pdp_sum",
    "pdp_sum_signed",
    "sampling_count",
    "sampling_sum",
]

"""User-level PDP sums over join results by LP truncation (Algorithm C of [SDQY]; docs/privacy/personalized.md).

Each record (join row) r has an integer value I(r) ∈ {0..B} and is owned by a set of users;
removing user u removes all of u's records. The truncated value for a truncation vector τ is
the LP ([R2T], [slides])

    Q(I, τ) = max Σ_r x_r   s.t.   Σ_{r ∋ u} x_r ≤ τ(u) for every user u,   0 ≤ x_r ≤ I(r),

which satisfies 0 ≤ Q(I, τ) − Q(I_{−u}, τ) ≤ τ(u) and equals the plain sum once τ covers
every user's contribution. Algorithm C is Algorithm B (``sum.py``) with S_i replaced by
⌊Q(I, τ_i)⌋, τ_i(u) = min(⌊s_i·Φ(u)⌋, B), L = t + 1, and B the public bound on one *user's*
total contribution.

Exactness of the released statistic. We release ⌊Q⌋, an integer: since τ(u) is an integer,
Q − Q' ∈ [0, τ(u)] implies ⌊Q⌋ − ⌊Q'⌋ ∈ [0, τ(u)], so the sensitivity is unchanged. HiGHS
(scipy, the ``[lp]`` extra) solves each LP in floating point; we then *certify* ⌊Q⌋ exactly
with integer arithmetic: a repaired primal solution gives a rational P ≤ Q, a dual solution
completed to feasibility gives a rational D ≥ Q (weak duality), and ⌊P⌋ = ⌊D⌋ pins ⌊Q⌋ down.
When Q is an integer, rationalised roundings of the HiGHS solution (denominators 1..12)
supply P = Q exactly. Every LP is solved to optimality (no early abort: a partial value would
not be the analysed statistic). If no certificate is found, an ``ArithmeticError`` is raised rather than
releasing an uncertified value (not observed in the tests).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect._optional import require

from .params import (
    doubling_steps,
    exact_floor_scaled,
    exact_value,
    validate_beta,
    validate_bound,
    validate_phi,
    validate_values,
)
from .result import PersonalizedResult, PrivacyStatement, reference
from .selection import shifted_max
from .sum import truncation_loss

__all__ = ["JoinIncidence", "lp_truncated_sum", "make_incidence", "pdp_join_sum"]

_GRID = 1 << 30  # fixed-point grid for the primal/dual certificates
_DENOMINATORS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 24)


def _scipy_sparse() -> Any:
    return require("scipy.sparse", feature="pdp_join_sum (HiGHS LP solver)", extra="lp")


@dataclass(frozen=True)
class JoinIncidence:
    """Validated join result: record values and a records × users 0/1 incidence (CSR)."""

    values: np.ndarray  # int64, one per record
    matrix: Any  # scipy.sparse.csr_matrix of shape (n_records, n_users), entries 1
    contributions: np.ndarray  # int64 Σ_{r ∋ u} I(r), one per user


def make_incidence(record_values: Any, record_users: Any, n_users: int, bound: int) -> JoinIncidence:
    """Validate a join result (the model of docs/privacy/personalized.md, "pdp_join_sum").

    ``record_users`` is either a scipy sparse matrix of shape (n_records, n_users) whose
    non-zeros mark ownership, or a pair ``(record_index, user_index)`` of integer arrays (one
    entry per (record, owner) pair). Every record needs at least one owner; record values must
    lie in {0..B} and every user's total contribution must be ≤ B.
    """
    sparse = _scipy_sparse()
    # Checked before any cast to int64: values >= 2**63 (uint64, Python ints) cannot wrap into range.
    values = np.array(validate_values(record_values, bound, "record_values"))
    n_records = int(values.size)
    if sparse.issparse(record_users):
        matrix = sparse.csr_matrix(record_users, dtype=np.float64, copy=True)
        if matrix.shape != (n_records, n_users):
            raise ValueError(
                f"record_users must have shape (n_records, n_users) = {(n_records, n_users)}, got {matrix.shape}"
            )
        matrix.eliminate_zeros()  # an explicitly stored 0 is not ownership
        matrix.data[:] = 1.0
    else:
        try:
            rows, cols = record_users
        except (TypeError, ValueError):
            raise TypeError(
                "record_users must be a scipy sparse matrix or a pair (record_index, user_index)"
            ) from None
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        if rows.shape != cols.shape or rows.ndim != 1 or rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
            raise ValueError("record_users must be two 1-D integer arrays of the same length")
        if rows.size and (rows.min() < 0 or rows.max() >= n_records):
            raise ValueError("record_users: record_index out of range")
        if cols.size and (cols.min() < 0 or cols.max() >= n_users):
            raise ValueError("record_users: user_index out of range (must index into phi)")
        matrix = sparse.csr_matrix(
            (np.ones(rows.size), (rows.astype(np.int64), cols.astype(np.int64))), shape=(n_records, n_users)
        )
        matrix.sum_duplicates()
        matrix.data[:] = 1.0
    owners = np.diff(matrix.indptr)
    if n_records and owners.min() == 0:
        raise ValueError("every record must be owned by at least one user")
    contributions = np.asarray(matrix.T @ values.astype(np.float64)).ravel()
    # Float sums of non-negative integers are exact while they stay <= 2**53; a total of 2**53 + 1
    # could round down to a bound of 2**53. Totals that large are re-added exactly in Python ints.
    worst = int(contributions.max()) if contributions.size else 0
    large = np.flatnonzero(contributions >= 2.0**52)
    if large.size:
        by_user = matrix.tocsc()
        for user in large.tolist():
            records = by_user.indices[by_user.indptr[user] : by_user.indptr[user + 1]]
            worst = max(worst, sum(values[records].tolist()))
    if worst > bound:
        raise ValueError(
            f"bound={bound} must bound every user's total contribution (max is {worst}); raise bound or drop records"
        )
    return JoinIncidence(values, matrix, np.rint(contributions).astype(np.int64))


def _segment_sums(values: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Σ values[indices[indptr[i]:indptr[i+1]]] per segment, in int64 (callers keep it < 2**62)."""
    out = np.zeros(indptr.size - 1, dtype=np.int64)
    if indices.size == 0:
        return out
    gathered = values[indices]
    nonempty = indptr[1:] > indptr[:-1]
    out[nonempty] = np.add.reduceat(gathered, indptr[:-1][nonempty])
    return out


def _exact_total(values: np.ndarray) -> int:
    """Σ of an int64 array as a Python int (no overflow however long the array)."""
    return sum(values.tolist())


def _certify_floor(values: np.ndarray, matrix: Any, tau: np.ndarray, x_hat: np.ndarray, y_hat: np.ndarray) -> int:
    """⌊Q⌋ of the LP, proven with exact integer arithmetic from an approximate HiGHS solution.

    All per-user and per-record sums stay below 2**62: x ≤ I·grid, loads ≤ B·grid with
    grid·B < 2**56, and y is clipped to [0, 1] (still dual feasible).
    """
    matrix_t = matrix.T.tocsr()
    bound = int(max(values.max(initial=1), tau.max(initial=1), 1))
    grid = 1 << max(0, min(30, 56 - bound.bit_length()))
    # primal: grid rounding, then repair (lower every record by its owners' worst excess)
    x = np.floor(np.clip(x_hat, 0.0, None) * grid).astype(np.int64)
    np.minimum(x, values * grid, out=x)
    excess = np.maximum(_segment_sums(x, matrix_t.indptr, matrix_t.indices) - tau * grid, 0)
    if excess.any():
        worst = np.zeros(values.size, dtype=np.int64)
        record_of_entry = np.repeat(np.arange(values.size), np.diff(matrix.indptr))
        np.maximum.at(worst, record_of_entry, excess[matrix.indices])
        x = np.maximum(x - worst, 0)
    lower = Fraction(_exact_total(x), grid)
    # dual: any y ≥ 0 with z_r = max(0, 1 − Σ_{u∈r} y_u) is feasible; its value bounds Q above
    best_upper: Fraction | None = None
    for denominator in (grid,) + _DENOMINATORS:
        y = np.rint(np.clip(y_hat, 0.0, 1.0) * denominator).astype(np.int64)
        coverage = _segment_sums(y, matrix.indptr, matrix.indices)
        slack = np.maximum(denominator - coverage, 0)
        upper = Fraction(_exact_total(tau * y) + _exact_total(values * slack), denominator)
        best_upper = upper if best_upper is None else min(best_upper, upper)
    assert best_upper is not None
    if lower.__floor__() == best_upper.__floor__():
        return lower.__floor__()
    # Q is (very likely) the integer ⌊D⌋: look for a rational primal point reaching it
    target = best_upper.__floor__()
    for denominator in _DENOMINATORS:
        xd = np.minimum(np.rint(np.clip(x_hat, 0.0, None) * denominator).astype(np.int64), values * denominator)
        loads = _segment_sums(xd, matrix_t.indptr, matrix_t.indices)
        if _exact_total(xd) >= target * denominator and bool(np.all(loads <= tau * denominator)):
            return target
    raise ArithmeticError("could not certify the floor of the truncation LP value")


def lp_truncated_sum(incidence: JoinIncidence, tau: np.ndarray) -> int:
    """⌊Q(I, τ)⌋ for the truncation LP ([R2T], [SDQY]), solved by HiGHS and certified.

    Users whose τ(u) covers their contribution impose no binding constraint and are dropped;
    records with an owner of τ(u) = 0 are fixed to 0; records whose owners are all unbound
    are fixed to I(r). Only the rest goes to the LP (an exact reduction).
    """
    values, matrix = incidence.values, incidence.matrix
    tau = np.asarray(tau, dtype=np.int64)
    binding = tau < incidence.contributions
    zero_owner = np.asarray(matrix @ (tau == 0).astype(np.float64)).ravel() > 0
    has_binding = np.asarray(matrix @ binding.astype(np.float64)).ravel() > 0
    fixed_full = ~has_binding & ~zero_owner
    free = has_binding & ~zero_owner & (values > 0)
    constant = int(values[fixed_full].sum())
    if not free.any():
        return constant
    sub = matrix[free][:, binding]
    sub_values = values[free]
    sub_tau = tau[binding]
    from scipy.optimize import linprog  # scipy is present: _scipy_sparse() succeeded

    result = linprog(
        c=-np.ones(sub.shape[0]),
        A_ub=sub.T.tocsr(),
        b_ub=sub_tau.astype(np.float64),
        bounds=np.column_stack([np.zeros(sub.shape[0]), sub_values.astype(np.float64)]),
        method="highs",
    )
    if result.status != 0:
        raise ArithmeticError(f"HiGHS failed on the truncation LP: {result.message}")
    duals = -np.asarray(result.ineqlin.marginals, dtype=np.float64)
    return constant + _certify_floor(sub_values, sub.tocsr(), sub_tau, np.asarray(result.x), duals)


def pdp_join_sum(
    record_values: Any, record_users: Any, phi: Any, bound: int, *, beta: float = 0.1, rng: Any = None
) -> PersonalizedResult:
    """User-level Φ-PDP sum over a join result by LP truncation (Algorithm C of Sun, Dong, Qiu,
    Yi, SIGMOD 2025).

    Guarantee: Φ-PDP under "remove all of user u's records" — release i has sensitivity
    min(τ_i(u), B) ≤ s_i·Φ(u) and noise scale (t+1)·s_i, so each user's total loss is ≤ Φ(u)
    (exact per-user losses in ``result.privacy``; proof: docs/privacy/personalized.md). Error
    (derived): with probability ≥ 1 − β, 0 ≤ Sum − estimate ≤ min_i [Sum − ⌊Q(I, τ_i)⌋ + 2·shift_i].

    Parameters
    ----------
    record_values:
        Integer value of each record (join row), in {0..bound}.
    record_users:
        Ownership: a scipy sparse (n_records × n_users) matrix, or ``(record_index, user_index)``.
    phi:
        Privacy level of every user (the public user set), positive and finite.
    bound:
        Public bound B on one user's total contribution Σ_{r ∋ u} I(r).
    beta, rng:
        Failure probability in (0, 1); ``None`` for the package CSPRNG or an explicit test RNG.
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    bound = validate_bound(bound)
    phi_array = validate_phi(phi)
    beta = validate_beta(beta)
    incidence = make_incidence(record_values, record_users, int(phi_array.size), bound)
    phi_min, phi_max = exact_value(phi_array.min()), exact_value(phi_array.max())
    t = doubling_steps(bound * phi_max / phi_min)
    scales = tuple(Fraction(2**i) / phi_max for i in range(t + 1))
    divisor = t + 1
    noise_scales = tuple(divisor * s for s in scales)
    total = int(incidence.values.sum())
    candidates: list[int] = []
    for s in scales:
        if candidates and candidates[-1] == total:
            candidates.append(total)  # τ only grows with s, and Q ≤ Sum
            continue
        candidates.append(lp_truncated_sum(incidence, exact_floor_scaled(phi_array, s, bound)))
    selection = shifted_max(candidates, noise_scales, divisor, beta, rng)
    guaranteed = bool(rng.privacy_guaranteed)
    privacy = PrivacyStatement(
        phi=phi_array,
        loss_of=truncation_loss(scales, divisor, bound),
        description="user-level Φ-PDP: Σ_i min(⌊s_i·Φ(u)⌋, B)/((t+1)·s_i) ≤ Φ(u)",
        reference=reference("user-level PDP query, Algorithm C"),
        privacy_guaranteed=guaranteed,
    )
    chosen = selection.chosen_index
    return PersonalizedResult(
        estimate=selection.estimate, method="pdp_join_sum", chosen_index=chosen,
        chosen_parameter=None if chosen is None else scales[chosen], parameters=scales,
        noise_scales=noise_scales, shifts=selection.shifts, noisy_candidates=selection.noisy_candidates,
        beta=beta, failure_probability=min(1.0, (divisor + 1) * beta / (2 * divisor)),
        privacy=privacy, privacy_guaranteed=guaranteed, details={"t": t, "L": divisor},
    )

# cython: language_level=3
"""Bindings to csrc/weighted.{c,h}: weighted histograms of bounded user sets, and the normal
tail in double precision. Thin: checks arguments, releases the GIL around the loops. Use
:mod:`dpselect.mechanisms.weighted`, not this."""
import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from dpselect._csrc cimport dps_rng, DPS_OK, DPS_ERR_BAD_TABLE
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status
from dpselect._boundary import check_array, check_disjoint, check_int, U64_MAX


cdef extern from "weighted.h" nogil:
    int dps_weighted_round(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users,
                           const uint8_t *excluded, uint64_t kappa, const int64_t *weights,
                           int64_t *histogram, size_t n_partitions)
    int dps_weighted_prefix(const size_t *ends, const uint32_t *grouped, uint64_t n_users, const uint8_t *excluded,
                            uint64_t kappa, const int64_t *weights, int64_t *histogram, size_t n_partitions)
    int dps_weighted_shuffle(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users)
    void dps_normal_upper_tail(const double *z, double *out, size_t n)


def _excluded(excluded):
    """None, or the mask of released partitions as a private uint8 copy (bool accepted)."""
    if excluded is None:
        return None
    return check_array("excluded", excluded, [np.uint8, np.bool_], copy=True).view(np.uint8)


cdef int _check_length(Py_ssize_t n_excluded, size_t n_partitions) except -1:
    if <size_t>n_excluded != n_partitions:
        raise ValueError(f"excluded must have one entry per partition ({n_partitions}), got {n_excluded}")
    return 0


cdef int _check_runs(const size_t[::1] e, Py_ssize_t n_grouped) except -1:
    """Each user's run is grouped[ends[u - 1]:ends[u]]: the ends must not decrease (a decrease
    would make a run's length wrap around in C) and the last must be the end of grouped."""
    cdef Py_ssize_t n_users = e.shape[0]
    cdef Py_ssize_t i
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(1, n_users):
            if e[i] < e[i - 1]:
                bad = i
                break
    if bad >= 0:
        raise ValueError(f"ends must be non-decreasing, got ends[{bad - 1}] = {e[bad - 1]} > ends[{bad}] = {e[bad]}")
    if n_users and e[n_users - 1] != <size_t>n_grouped:
        raise ValueError(f"ends and grouped disagree: ends[-1] = {e[n_users - 1]}, len(grouped) = {n_grouped}")
    if not n_users and n_grouped:
        raise ValueError(f"ends and grouped disagree: no users, len(grouped) = {n_grouped}")
    return 0


cdef int _check_codes(const uint32_t[::1] g, size_t n_partitions) except -1:
    """Every code below n_partitions (the histogram's length)."""
    cdef Py_ssize_t i
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(g.shape[0]):
            if g[i] >= n_partitions:
                bad = i
                break
    if bad >= 0:
        raise ValueError(f"grouped[{bad}] = {g[bad]} is not a partition code: a partition code is out of "
                         f"range (histogram has {n_partitions} partitions)")
    return 0


def weighted_round(ends, grouped, excluded, kappa, weights, histogram, test_state=None):
    """Add each user's weighted bounded set to ``histogram`` (see csrc/weighted.h). ``excluded``:
    None, or a uint8/bool array over partitions (1: already released, not drawn again)."""
    ends_arr = check_array("ends", ends, [np.uintp], copy=True)
    grouped_arr = check_array("grouped", grouped, [np.uint32], writable=True)
    weights_arr = check_array("weights", weights, [np.int64], copy=True)
    histogram_arr = check_array("histogram", histogram, [np.int64], writable=True)
    excluded_arr = _excluded(excluded)
    # grouped (reordered in place) and histogram are written while the others are read: an
    # overlap could turn checked ends or codes into out-of-range ones half-way.
    check_disjoint({"grouped": grouped_arr, "histogram": histogram_arr},
                   {"ends": ends_arr, "weights": weights_arr, "excluded": excluded_arr})
    cdef const size_t[::1] e = ends_arr
    cdef uint32_t[::1] g = grouped_arr
    cdef const int64_t[::1] w = weights_arr
    cdef int64_t[::1] h = histogram_arr
    cdef uint64_t k = check_int("kappa", kappa, 1, U64_MAX)
    cdef Py_ssize_t n_users = e.shape[0]
    cdef size_t n_partitions = <size_t>h.shape[0]
    # kappa + 1 is compared in Python: in uint64 it wraps to 0 for kappa = 2**64 - 1, and an empty
    # weights array then passed, to be read far past its end.
    if w.shape[0] != kappa + 1:
        raise ValueError(f"weights must have kappa + 1 = {kappa + 1} entries, got {w.shape[0]}")
    _check_runs(e, g.shape[0])
    # Every code is checked before anything is added, so a refused call leaves histogram as it was
    # (the kernel checks again as it goes; only an overflow can stop it half-way).
    _check_codes(g, n_partitions)
    cdef const uint8_t[::1] skip
    cdef const uint8_t *skip_ptr = NULL
    if excluded_arr is not None:
        skip = excluded_arr
        _check_length(skip.shape[0], n_partitions)
        if n_partitions:
            skip_ptr = &skip[0]
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_weighted_round(s, &e[0] if n_users else NULL, &g[0] if g.shape[0] else NULL,
                                <uint64_t>n_users, skip_ptr, k, &w[0],
                                &h[0] if n_partitions else NULL, n_partitions)
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("a partition code is out of range or a weighted sum overflowed")
    check_status(rc)


def weighted_prefix(ends, grouped, excluded, kappa, weights, histogram):
    """Add to ``histogram`` each user's first min(kappa, left) partitions not ``excluded``, in
    the order of their run, each with weights[m] (see csrc/weighted.h). No randomness."""
    ends_arr = check_array("ends", ends, [np.uintp], copy=True)
    grouped_arr = check_array("grouped", grouped, [np.uint32], copy=True)
    weights_arr = check_array("weights", weights, [np.int64], copy=True)
    histogram_arr = check_array("histogram", histogram, [np.int64], writable=True)
    excluded_arr = _excluded(excluded)
    cdef const size_t[::1] e = ends_arr
    cdef const uint32_t[::1] g = grouped_arr
    cdef const int64_t[::1] w = weights_arr
    cdef int64_t[::1] h = histogram_arr
    cdef uint64_t k = check_int("kappa", kappa, 1, U64_MAX)
    cdef Py_ssize_t n_users = e.shape[0]
    cdef size_t n_partitions = <size_t>h.shape[0]
    if w.shape[0] != kappa + 1:
        raise ValueError(f"weights must have kappa + 1 = {kappa + 1} entries, got {w.shape[0]}")
    _check_runs(e, g.shape[0])
    _check_codes(g, n_partitions)
    cdef const uint8_t[::1] skip
    cdef const uint8_t *skip_ptr = NULL
    if excluded_arr is not None:
        skip = excluded_arr
        _check_length(skip.shape[0], n_partitions)
        if n_partitions:
            skip_ptr = &skip[0]
    cdef int rc
    with nogil:
        rc = dps_weighted_prefix(&e[0] if n_users else NULL, &g[0] if g.shape[0] else NULL, <uint64_t>n_users,
                                 skip_ptr, k, &w[0], &h[0] if n_partitions else NULL, n_partitions)
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("a partition code is out of range or a weighted sum overflowed")
    check_status(rc)


def shuffle_sets(ends, grouped, test_state=None):
    """Put each user's run grouped[ends[u - 1]:ends[u]] in a uniformly random order, in place
    (Fisher–Yates on exact uniform integers from the CSPRNG; csrc/weighted.h)."""
    ends_arr = check_array("ends", ends, [np.uintp], copy=True)
    grouped_arr = check_array("grouped", grouped, [np.uint32], writable=True)
    cdef const size_t[::1] e = ends_arr
    cdef uint32_t[::1] g = grouped_arr
    cdef Py_ssize_t n_users = e.shape[0]
    _check_runs(e, g.shape[0])
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_weighted_shuffle(s, &e[0] if n_users else NULL, &g[0] if g.shape[0] else NULL, <uint64_t>n_users)
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("ends must be non-decreasing")
    check_status(rc)


def normal_upper_tail(z):
    """P[Z > z] for Z ~ N(0, 1), element-wise, in double precision (erfc)."""
    cdef const double[::1] zv = check_array("z", z, [np.float64], copy=True)
    out = np.empty(zv.shape[0], dtype=np.float64)
    cdef double[::1] o = out
    cdef Py_ssize_t n = zv.shape[0]
    if n:
        with nogil:
            dps_normal_upper_tail(&zv[0], &o[0], <size_t>n)
    return out

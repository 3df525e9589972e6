# cython: language_level=3
"""Bindings to csrc/weighted.{c,h}: weighted histograms of bounded user sets, and the normal
tail in double precision. Thin: checks arguments, releases the GIL around the loops. Use
:mod:`dpselect.mechanisms.weighted`, not this."""
import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from dpselect._csrc cimport dps_rng, DPS_OK, DPS_ERR_BAD_TABLE
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status


cdef extern from "weighted.h" nogil:
    int dps_weighted_round(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users,
                           const uint8_t *excluded, uint64_t kappa, const int64_t *weights,
                           int64_t *histogram, size_t n_partitions)
    void dps_normal_upper_tail(const double *z, double *out, size_t n)


def weighted_round(const size_t[::1] ends, uint32_t[::1] grouped, excluded, uint64_t kappa,
                   const int64_t[::1] weights, int64_t[::1] histogram, test_state=None):
    """Add each user's weighted bounded set to ``histogram`` (see csrc/weighted.h). ``excluded``:
    None, or a uint8/bool array over partitions (1: already released, not drawn again)."""
    cdef Py_ssize_t n_users = ends.shape[0]
    cdef size_t n_partitions = <size_t>histogram.shape[0]
    if kappa < 1 or <uint64_t>weights.shape[0] != kappa + 1:
        raise ValueError("weights must have kappa + 1 entries, kappa >= 1")
    if n_users and ends[n_users - 1] != <size_t>grouped.shape[0]:
        raise ValueError("ends and grouped disagree")
    cdef const uint8_t[::1] skip
    cdef const uint8_t *skip_ptr = NULL
    if excluded is not None:
        skip = np.ascontiguousarray(excluded).view(np.uint8)
        if <size_t>skip.shape[0] != n_partitions:
            raise ValueError("excluded must have one entry per partition")
        if n_partitions:
            skip_ptr = &skip[0]
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_weighted_round(s, &ends[0] if n_users else NULL, &grouped[0] if grouped.shape[0] else NULL,
                                <uint64_t>n_users, skip_ptr, kappa, &weights[0],
                                &histogram[0] if n_partitions else NULL, n_partitions)
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("a partition code is out of range or a weighted sum overflowed")
    check_status(rc)


def normal_upper_tail(const double[::1] z):
    """P[Z > z] for Z ~ N(0, 1), element-wise, in double precision (erfc)."""
    out = np.empty(z.shape[0], dtype=np.float64)
    cdef double[::1] o = out
    cdef Py_ssize_t n = z.shape[0]
    if n:
        with nogil:
            dps_normal_upper_tail(&z[0], &o[0], <size_t>n)
    return out

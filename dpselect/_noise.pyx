# cython: language_level=3
"""Bindings to the exact discrete noise samplers (csrc/discrete_noise.{c,h};
docs/privacy/discrete-noise.md). Thin: checks every parameter and array at the boundary (a
parameter that does not fit the kernel's integers is refused with a ValueError naming it, never
rounded here), releases the GIL around the loops, turns status codes into exceptions. Use
:mod:`dpselect.aggregation.noise`, not this."""
import math
from fractions import Fraction

import numpy as np

from libc.stdint cimport uint8_t, uint64_t, int64_t

from dpselect._csrc cimport dps_rng, DPS_OK, DPS_ERR_BAD_TABLE
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status
from dpselect._boundary import check_int


cdef extern from "discrete_noise.h" nogil:
    enum: DPS_ERR_NOISE_OVERFLOW
    enum: DPS_ERR_NOISE_LIMIT
    ctypedef struct dps_u128:
        uint64_t hi
        uint64_t lo
    ctypedef struct dps_dgauss:
        uint64_t lap_num
        uint64_t lap_den
        uint64_t shift_num
        uint64_t shift_den
        dps_u128 gamma_den
    int dps_add_discrete_laplace(dps_rng *s, uint64_t num, uint64_t den, const int64_t *inp,
                                 int64_t *out, size_t n, size_t *bad)
    int dps_add_discrete_gaussian(dps_rng *s, const dps_dgauss *g, const int64_t *inp,
                                  int64_t *out, size_t n, size_t *bad)
    int dps_bernoulli_exp(dps_rng *s, dps_u128 num, dps_u128 den, int *out)
    void dps_u128_mul64(uint64_t a, uint64_t b, dps_u128 *out)
    void dps_u128_mul64_portable(uint64_t a, uint64_t b, dps_u128 *out)
    int dps_u128_divmod(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r)
    int dps_u128_divmod_portable(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r)


# Every numerator and denominator the kernel takes is below 2^63 ...
MAX_PARAM = 2**63 - 1
# ... and the Gaussian's acceptance denominator below 2^100, so that every square it forms fits
# in 128 bits (csrc/discrete_noise.c, discrete_gaussian).
MAX_GAMMA_DEN = 2**100 - 1
_U64 = 2**64


def check_param(str name, value) -> int:
    """``value`` as an int in [1, 2**63 - 1]; TypeError or ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not 1 <= value <= MAX_PARAM:
        raise ValueError(f"{name} = {value} does not fit the noise kernel: it must be between 1 and "
                         "2**63 - 1")
    return value


cdef object _positive_int(str name, object value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not 1 <= value < 2**256:
        raise ValueError(f"{name} = {value} must be a positive integer below 2**256")
    return value


def gaussian_parameters(sigma2_num, sigma2_den):
    """(lap_num, lap_den, shift_num, shift_den, gamma_den) with which Algorithm 3 samples the
    discrete Gaussian of variance sigma2 = sigma2_num / sigma2_den exactly.

    The proposal is a discrete Laplace of integer scale m (m = floor(sigma) + 1 as in CKS 2020,
    or floor(sigma) when only that one fits), the shift is mu = sigma2 / m, and
    gamma_den = 2 sigma2 shift_den^2 = 2 m shift_num shift_den. ValueError (naming sigma2) when
    no choice fits the kernel's integers."""
    # sigma2 itself may have a long numerator (m mu with both near sigma): what must fit is
    # what the kernel takes, checked below.
    num = _positive_int("sigma2_num", sigma2_num)
    den = _positive_int("sigma2_den", sigma2_den)
    sigma2 = Fraction(num, den)
    floor_sigma = math.isqrt(sigma2.numerator // sigma2.denominator)
    for m in dict.fromkeys((floor_sigma + 1, floor_sigma)):
        if m < 1:
            continue
        mu = sigma2 / m
        gamma_den = 2 * m * mu.numerator * mu.denominator
        if max(m, mu.numerator, mu.denominator) <= MAX_PARAM and gamma_den <= MAX_GAMMA_DEN:
            assert Fraction(gamma_den) == 2 * sigma2 * mu.denominator ** 2
            return m, 1, mu.numerator, mu.denominator, gamma_den
    raise ValueError(
        f"sigma2 = {sigma2} cannot be sampled exactly with the kernel's 128-bit integers (its "
        "numerator or denominator is too large, or sigma is above about 2**49); round it up with "
        "dpselect.aggregation.noise.representable_sigma2(sigma2), which only adds privacy")


cdef object _values(object values):
    if not isinstance(values, np.ndarray):
        raise TypeError(f"values must be a numpy array, got {type(values).__name__}")
    if values.dtype != np.int64 or not values.dtype.isnative:
        raise TypeError(f"values must have dtype int64, got {values.dtype}")
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D, got {values.ndim} dimensions")
    # Aligned too: the kernel reads int64_t through a pointer, and a C-contiguous view at an odd
    # address (np.frombuffer with an offset) is undefined behaviour there. A copy, same values.
    return np.require(values, requirements=["C", "A"])


cdef object _out(object out, object values):
    if out is None:
        return np.empty(values.shape[0], dtype=np.int64)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != np.int64 or not out.dtype.isnative:
        raise TypeError(f"out must have dtype int64, got {out.dtype}")
    if out.ndim != 1 or not out.flags.c_contiguous or not out.flags.aligned:
        raise ValueError("out must be a 1-D C-contiguous, aligned array")
    if out.shape[0] != values.shape[0]:
        raise ValueError(f"out has length {out.shape[0]}, expected {values.shape[0]} (the length of values)")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    if np.may_share_memory(out, values) and out.ctypes.data != values.ctypes.data:
        raise ValueError("out overlaps values without being the same array; pass out=values to "
                         "add the noise in place, or a separate array")
    return out


cdef int _raise(int rc, size_t bad, object out) except -1:
    if rc == DPS_OK:
        return 0
    out[...] = 0  # nothing half-noised is left behind
    if rc == DPS_ERR_NOISE_OVERFLOW:
        raise OverflowError(
            f"values[{bad}] + noise does not fit in int64; nothing was released (out was zeroed). "
            "Keep |values| and the noise scale well below 2**62 (use a coarser grid)")
    if rc == DPS_ERR_NOISE_LIMIT:
        raise RuntimeError("the discrete noise sampler hit an event of probability below "
                           "exp(-2**26); nothing was released (out was zeroed)")
    return check_status(rc)


cdef object _add_noise(object values, object out, object test_state, uint64_t num, uint64_t den,
                       dps_dgauss *gauss):
    """values + noise into out (the batch loop shared by both noises): discrete Gaussian when
    ``gauss`` is given, else discrete Laplace of scale num/den."""
    arr = _values(values)
    res = _out(out, arr)
    cdef const int64_t[::1] v = arr
    cdef int64_t[::1] o = res
    cdef size_t n = <size_t>arr.shape[0]
    cdef size_t bad = 0
    cdef int rc = DPS_OK
    cdef dps_rng *s = begin_batch(test_state)
    if n:
        with nogil:
            if gauss != NULL:
                rc = dps_add_discrete_gaussian(s, gauss, &v[0], &o[0], n, &bad)
            else:
                rc = dps_add_discrete_laplace(s, num, den, &v[0], &o[0], n, &bad)
            end_batch(s)
    else:
        end_batch(s)
    finish_batch(test_state)
    _raise(rc, bad, res)
    return res


def add_discrete_laplace(values, scale_num, scale_den, out=None, test_state=None):
    """out[i] = values[i] + X_i with X_i exact discrete Laplace of scale t = scale_num/scale_den:
    P[X = x] proportional to exp(-|x|/t). ``values``: 1-D int64; ``out`` may be ``values``."""
    cdef uint64_t num = check_param("scale_num", scale_num)
    cdef uint64_t den = check_param("scale_den", scale_den)
    return _add_noise(values, out, test_state, num, den, NULL)


def add_discrete_gaussian(values, sigma2_num, sigma2_den, out=None, test_state=None):
    """out[i] = values[i] + X_i with X_i exact discrete Gaussian of variance
    sigma2 = sigma2_num/sigma2_den: P[X = x] proportional to exp(-x^2 / (2 sigma2))."""
    lap_num, lap_den, shift_num, shift_den, gamma_den = gaussian_parameters(sigma2_num, sigma2_den)
    cdef dps_dgauss g
    g.lap_num = lap_num
    g.lap_den = lap_den
    g.shift_num = shift_num
    g.shift_den = shift_den
    g.gamma_den.hi = gamma_den >> 64
    g.gamma_den.lo = gamma_den & (_U64 - 1)
    return _add_noise(values, out, test_state, 0, 0, &g)


cdef dps_u128 _u128(str name, object value, object low) except *:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not low <= value < 2**128:
        raise ValueError(f"{name} = {value} must be between {low} and 2**128 - 1")
    cdef dps_u128 r
    r.hi = value >> 64
    r.lo = value & (_U64 - 1)
    return r


def bernoulli_exp(gamma_num, gamma_den, size, test_state=None):
    """``size`` exact Bernoulli(exp(-gamma_num/gamma_den)) draws (Algorithm 1; tests)."""
    cdef dps_u128 num = _u128("gamma_num", gamma_num, 0)
    cdef dps_u128 den = _u128("gamma_den", gamma_den, 1)
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    cdef Py_ssize_t n = check_int("size", size, 0, 2**63 - 1)
    out = np.zeros(n, dtype=np.bool_)
    cdef uint8_t[::1] o = out.view(np.uint8)
    cdef int hit = 0
    cdef int rc = DPS_OK
    cdef Py_ssize_t i
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        for i in range(n):
            rc = dps_bernoulli_exp(s, num, den, &hit)
            if rc != DPS_OK:
                break
            o[i] = <uint8_t>hit
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("gamma_den must be >= 1")
    check_status(rc)
    return out


def _u128_mul64(a, b, bint portable=False):
    """a * b for 64-bit a, b, through the kernel's helper (tests)."""
    cdef dps_u128 r
    cdef uint64_t x = check_int("a", a, 0, _U64 - 1), y = check_int("b", b, 0, _U64 - 1)
    if portable:
        dps_u128_mul64_portable(x, y, &r)
    else:
        dps_u128_mul64(x, y, &r)
    return (int(r.hi) << 64) | int(r.lo)


def _u128_divmod(n, d, bint portable=False):
    """(n // d, n % d) for 128-bit n and d >= 1, through the kernel's helper (tests)."""
    cdef dps_u128 nn = _u128("n", n, 0)
    cdef dps_u128 dd = _u128("d", d, 1)
    cdef dps_u128 q, r
    cdef int rc = dps_u128_divmod_portable(nn, dd, &q, &r) if portable else dps_u128_divmod(nn, dd, &q, &r)
    if rc != 0:
        raise ZeroDivisionError("d must be >= 1")
    return (int(q.hi) << 64) | int(q.lo), (int(r.hi) << 64) | int(r.lo)

# cython: language_level=3
"""Bindings to the C CSPRNG (docs/privacy/randomness.md). Thin: checks arguments, releases
the GIL around bulk work, maps status codes to exceptions. Use :mod:`dpselect.rng`, not this."""
import os

import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t
from libc.stdlib cimport malloc, free

from dpselect._csrc cimport *
from dpselect._boundary import check_array, check_int, U64_MAX


def _note_fork() -> None:
    dps_rng_note_fork()


# Belt and braces with the C pthread_atfork handler (fork detection: docs/privacy/randomness.md).
os.register_at_fork(after_in_child=_note_fork)


cdef int check_status(int rc) except -1:
    if rc == DPS_OK:
        return 0
    if rc == DPS_ERR_OS_RNG:
        raise RuntimeError("the operating system's random number generator failed; "
                           "dpselect refuses to continue without it")
    if rc == DPS_ERR_FORK_INSECURE:
        raise RuntimeError("a deterministic test RNG was used after fork(): its stream would "
                           "repeat in both processes; create a new one in the child")
    if rc == DPS_ERR_NOMEM:
        raise MemoryError("could not allocate a CSPRNG state")
    if rc == DPS_ERR_ACK:
        raise ValueError("the insecure test RNG needs its explicit acknowledgement")
    if rc == DPS_ERR_DISABLED:
        raise RuntimeError("this build of dpselect has no test RNG (DPS_NO_TEST_RNG)")
    if rc == DPS_ERR_BAD_TABLE:
        raise ValueError("table rejected by the kernel's load-time checks")
    raise RuntimeError(f"dpselect kernel error {rc}")


cdef class TestState:
    """A deterministic ChaCha20 state for tests only; see dpselect.testing."""

    def __cinit__(self, bytes seed, object stream, object ack):
        # The same gate as dpselect.testing: reaching for this private class directly must not
        # be a way around it.
        if os.environ.get(ALLOW_ENV) != "1":
            raise RuntimeError(f"the deterministic test RNG is for tests only; set {ALLOW_ENV}=1 "
                               "to allow it. Results computed with it are NOT differentially private.")
        if len(seed) != 32:
            raise ValueError("seed must be 32 bytes")
        cdef uint64_t c_stream = check_int("stream", stream, 0, U64_MAX)
        cdef uint64_t c_ack = check_int("ack", ack, 0, U64_MAX)
        self.state = dps_rng_alloc()
        if self.state == NULL:
            raise MemoryError("could not allocate a CSPRNG state")
        self.seed = seed
        self.stream = c_stream
        check_status(dps_rng_init_test_state(self.state, <const uint8_t *>seed, c_stream, c_ack))

    def __dealloc__(self):
        if self.state != NULL:
            dps_rng_free(self.state)
            self.state = NULL


ACK_INSECURE = DPS_ACK_INSECURE
ALLOW_ENV = "DPSELECT_ALLOW_INSECURE_RNG"


cdef dps_rng *begin_batch(object test_state) except NULL:
    cdef int err = 0
    cdef dps_rng *s
    cdef int mode
    if test_state is None:
        s = dps_rng_thread_state(&err)
        if s == NULL:
            check_status(err)
        mode = DPS_RNG_SECURE
    else:
        if not isinstance(test_state, TestState):
            raise TypeError("test_state must be None (the package CSPRNG) or a TestState "
                            f"(InsecureDeterministicRNG(...)._test_state), got {type(test_state).__name__}")
        # One deterministic stream cannot serve two threads at once (their batches would
        # interleave on one buffer); the GIL is held here, so this check-and-set is atomic.
        if (<TestState>test_state).busy:
            raise RuntimeError("this InsecureDeterministicRNG is already in use by another "
                               "thread; give each thread its own")
        s = (<TestState>test_state).state
        mode = DPS_RNG_INSECURE
        check_status(dps_rng_begin_batch(s, mode))
        (<TestState>test_state).busy = True
        return s
    check_status(dps_rng_begin_batch(s, mode))
    return s


cdef void finish_batch(object test_state) noexcept:
    if test_state is not None:
        (<TestState>test_state).busy = False


cdef void end_batch(dps_rng *s) noexcept nogil:
    dps_rng_end_batch(s)


def random_bytes(object n, TestState test_state=None) -> bytes:
    cdef Py_ssize_t c_n = _size(n, "n")
    buf = bytearray(c_n)
    cdef uint8_t[::1] view = buf
    cdef dps_rng *s = begin_batch(test_state)
    cdef int rc
    cdef uint8_t *p = &view[0] if c_n > 0 else NULL
    with nogil:
        rc = dps_rng_fill(s, p, <size_t>c_n) if c_n > 0 else DPS_OK
        dps_rng_end_batch(s)
    finish_batch(test_state)
    check_status(rc)
    return bytes(buf)


def uniform_below_array(object bound, object size, TestState test_state=None):
    """uint64 array, exact uniform in [0, bound), 1 <= bound <= 2**64."""
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)):
        raise TypeError(f"bound must be an integer, got {type(bound).__name__}")
    bound = int(bound)  # a numpy integer's arithmetic below would overflow at 2**64
    if not 1 <= bound <= 2 ** 64:
        raise ValueError(f"bound must be in [1, 2**64], got {bound}")
    cdef Py_ssize_t c_size = _size(size)
    cdef uint64_t b = <uint64_t>(bound % (2 ** 64))  # 2**64 is passed as 0
    out = np.empty(c_size, dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef dps_rng *s = begin_batch(test_state)
    cdef int rc = DPS_OK
    cdef Py_ssize_t i
    with nogil:
        for i in range(c_size):
            rc = dps_rng_uniform_below(s, b, &o[i])
            if rc != DPS_OK:
                break
        dps_rng_end_batch(s)
    finish_batch(test_state)
    check_status(rc)
    return out


def bernoulli_fixed(object q, TestState test_state=None):
    """Exact Bernoulli(q[i] / 2**64) by lazy byte comparison, one per entry (tests, small use)."""
    cdef const uint64_t[::1] qv = check_array("q", q, [np.uint64], copy=True)
    cdef Py_ssize_t n = qv.shape[0]
    out = np.empty(n, dtype=np.bool_)
    cdef uint8_t[::1] o = out.view(np.uint8)
    cdef dps_rng *s = begin_batch(test_state)
    cdef int rc = DPS_OK
    cdef uint32_t used
    cdef Py_ssize_t i
    with nogil:
        for i in range(n):
            rc = dps_rng_reserve(s, 8)
            if rc != DPS_OK:
                break
            o[i] = <uint8_t>dps_bernoulli_lazy(_buf_at(s), qv[i], &used)
            s.pos += used
        dps_rng_end_batch(s)
    finish_batch(test_state)
    check_status(rc)
    return out


def bernoulli_wide(object q, TestState test_state=None):
    """Exact Bernoulli(q[i] / 2**(64 limbs)) for an (n, limbs) array of big-endian limbs: the
    first byte against q's top byte, then dps_bernoulli_rest_wide on a tie (tests)."""
    cdef const uint64_t[:, ::1] qv = check_array("q", q, [np.uint64], ndim=2, copy=True)
    cdef Py_ssize_t n = qv.shape[0]
    if not 1 <= qv.shape[1] <= 4:
        raise ValueError(f"q must have between 1 and 4 limbs (columns), got {qv.shape[1]}")
    cdef uint32_t limbs = <uint32_t>qv.shape[1]
    out = np.empty(n, dtype=np.bool_)
    cdef uint8_t[::1] o = out.view(np.uint8)
    cdef dps_rng *s = begin_batch(test_state)
    cdef int rc = DPS_OK
    cdef uint32_t used
    cdef unsigned b0, t0
    cdef Py_ssize_t i
    with nogil:
        for i in range(n):
            rc = dps_rng_reserve(s, 1)
            if rc != DPS_OK:
                break
            b0 = _buf_at(s)[0]
            t0 = dps_limb_byte(&qv[i, 0], 0)
            s.pos += 1
            if b0 != t0:
                o[i] = b0 < t0
                continue
            rc = dps_rng_reserve(s, 8 * limbs - 1)
            if rc != DPS_OK:
                break
            o[i] = <uint8_t>dps_bernoulli_rest_wide(_buf_at(s), &qv[i, 0], limbs, &used)
            s.pos += used
        dps_rng_end_batch(s)
    finish_batch(test_state)
    check_status(rc)
    return out


cdef extern from *:
    """
    static inline const uint8_t *_buf_at(dps_rng *s) { return s->buf + s->pos; }
    """
    const uint8_t *_buf_at(dps_rng *s) nogil


def sample_cumulative(object cumulative, object size, TestState test_state=None):
    """int64 indices i with P(i) = (C[i] - C[i-1]) / C[-1], exactly."""
    cdef const uint64_t[::1] cv = check_array("cumulative", cumulative, [np.uint64], copy=True)
    cdef Py_ssize_t m = cv.shape[0]
    if m == 0 or m >= 2 ** 31:
        raise ValueError(f"cumulative must have between 1 and 2**31 - 1 entries, got {m}")
    cdef Py_ssize_t n = _size(size)
    cdef uint32_t storage = dps_weight_table_storage(<uint32_t>m)
    cdef int32_t *hi = <int32_t *>malloc(storage * sizeof(int32_t))
    if hi == NULL:
        raise MemoryError()
    cdef dps_weight_table t
    cdef int rc
    cdef dps_rng *s
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    try:
        rc = dps_weight_table_init(&t, &cv[0], <uint32_t>m, hi)
        if rc != DPS_OK:
            raise ValueError("cumulative must be strictly increasing with cumulative[0] >= 1")
        s = begin_batch(test_state)
        with nogil:
            rc = dps_weight_table_sample(&t, s, &o[0] if n > 0 else NULL, <size_t>n)
            dps_rng_end_batch(s)
        finish_batch(test_state)
        check_status(rc)
    finally:
        free(hi)
    return out


def _size(size, str name="size"):
    """A draw count: an int >= 0 (ValueError naming it), refused when not an integer."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size < 0:
        raise ValueError(f"{name} must be >= 0, got {size}")
    return check_int(name, size, 0, 2**63 - 1)


# ---- test hooks: the block function and engines (RFC 8439 vectors) ----

def _words(bytes b, int n, str name):
    if len(b) != 4 * n:
        raise ValueError(f"{name} must be {4 * n} bytes, got {len(b)}")
    return np.frombuffer(b, dtype="<u4").astype(np.uint32)


def chacha20_blocks(bytes key, object counter, bytes nonce, object nblocks, object engine=-1) -> bytes:
    """Keystream of nblocks blocks; engine -1 = the one in use, 0 scalar, 1 vector, 2 AVX2, 3 AVX-512.
    The 32-bit block counter wraps around after 2**32 - 1, as RFC 8439's block function does."""
    cdef uint32_t[::1] k = _words(key, 8, "key")
    cdef uint32_t[::1] nn = _words(nonce, 3, "nonce")
    cdef uint32_t c_counter = check_int("counter", counter, 0, 2**32 - 1)
    # At most 2**32 blocks: the counter has 32 bits, so more would repeat the keystream.
    nblocks = check_int("nblocks", nblocks, 0, 2**32)
    engine = check_int("engine", engine, -1, 3)
    if nblocks == 0:
        return b""
    out = bytearray(64 * nblocks)
    cdef uint8_t[::1] o = out
    cdef int rc
    if engine == -1:
        engine = {"scalar": 0, "vector": 1, "avx2": 2, "avx512": 3}[engine_name()]
    rc = dps_chacha20_blocks_engine(engine, &k[0], c_counter, &nn[0], &o[0], <size_t>nblocks)
    if rc != 0:
        raise ValueError(f"ChaCha20 engine {engine} is not available here")
    return bytes(out)


cdef extern from "keyed_prf.h" nogil:
    void dps_keyed_prf_u64(const uint32_t *key, const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n)


def keyed_prf_u64(bytes key, object a, object b):
    """A keyed PRF on 128-bit inputs (csrc/keyed_prf.h): for each i, the first 8 bytes of the
    ChaCha20 block under ``key`` (32 bytes) with block counter ``b[i] >> 32`` and nonce
    (``a[i]``, ``b[i] & 0xFFFFFFFF``), as a uint64 array. ``a`` and ``b``: uint64 arrays of one
    length. Deterministic: the same key and inputs give the same outputs, wherever they run."""
    cdef uint32_t[::1] k = _words(key, 8, "key")
    cdef const uint64_t[::1] av = check_array("a", a, [np.uint64], copy=True)
    cdef const uint64_t[::1] bv = check_array("b", b, [np.uint64], copy=True)
    if av.shape[0] != bv.shape[0]:
        raise ValueError(f"a and b must have one length, got {av.shape[0]} and {bv.shape[0]}")
    cdef Py_ssize_t n = av.shape[0]
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    cdef uint64_t[::1] o = out
    with nogil:
        dps_keyed_prf_u64(&k[0], &av[0], &bv[0], &o[0], <size_t>n)
    return out


def quarter_round(a, b, c, d):
    cdef uint32_t wa = check_int("a", a, 0, 2**32 - 1), wb = check_int("b", b, 0, 2**32 - 1)
    cdef uint32_t wc = check_int("c", c, 0, 2**32 - 1), wd = check_int("d", d, 0, 2**32 - 1)
    dps_chacha20_quarter_round(&wa, &wb, &wc, &wd)
    return wa, wb, wc, wd


def engine_name() -> str:
    return dps_chacha20_engine_name().decode()


def fork_generation() -> int:
    return dps_rng_fork_generation()

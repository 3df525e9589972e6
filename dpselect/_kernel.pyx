# cython: language_level=3
"""Bindings to the selection kernel (csrc/select.c). Thin: every array is checked at the
boundary through the buffer protocol (1-D, integer format, lengths, writability), the GIL is
released for the loop, status codes become exceptions. Use dpselect.selection, not this."""
import sys

import numpy as np

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_STRIDES, PyBUF_FORMAT, PyBUF_WRITABLE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

from dpselect._csrc cimport *
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status
from dpselect._boundary import check_int
from dpselect.errors import DPSelectError


class NegativeCountError(DPSelectError, ValueError):
    """A count was negative; ``index`` is the first offending position (flat index)."""

    def __init__(self, index):
        self.index = index
        super().__init__(f"counts[{index}] is negative")


cdef bint _foreign_byte_order(str fmt):
    """True when the buffer format names a byte order other than this machine's."""
    return (fmt.startswith((">", "!")) and sys.byteorder == "little") or (
        fmt.startswith("<") and sys.byteorder == "big")


cdef int _count_dtype(Py_buffer *view) except -1:
    """Kernel dtype code for a native-endian integer buffer; TypeError for anything else."""
    cdef bytes fmt = view.format if view.format != NULL else b"B"
    if _foreign_byte_order(fmt.decode()) and view.itemsize > 1:
        raise TypeError(f"counts have non-native byte order (buffer format {fmt!r}); convert them first")
    cdef str code = fmt.decode().lstrip("@=<>!")
    if len(code) != 1 or code not in "bhilqBHILQ":
        raise TypeError(f"counts must be an integer array, got buffer format {fmt!r}")
    cdef int size = view.itemsize
    cdef bint signed = code.islower()
    if size == 1:
        return DPS_I8 if signed else DPS_U8
    if size == 2:
        return DPS_I16 if signed else DPS_U16
    if size == 4:
        return DPS_I32 if signed else DPS_U32
    if size == 8:
        return DPS_I64 if signed else DPS_U64
    raise TypeError(f"unsupported integer width {size}")


cdef int _get_1d(object obj, Py_buffer *view, int flags, str name) except -1:
    try:
        PyObject_GetBuffer(obj, view, flags | PyBUF_STRIDES | PyBUF_FORMAT)
    except TypeError:
        raise TypeError(f"{name} must be an array (an object with the buffer protocol), "
                        f"got {type(obj).__name__}") from None
    except (BufferError, ValueError) as exc:
        if flags & PyBUF_WRITABLE:
            raise ValueError(f"{name} is read-only ({exc})") from None
        raise ValueError(f"{name}: {exc}") from None
    if view.ndim != 1:
        PyBuffer_Release(view)
        raise ValueError(f"{name} must be 1-D for the kernel, got {view.ndim} dimensions")
    return 0


cdef void _extent(Py_buffer *view, char **lo, char **hi) noexcept:
    """[lo, hi): the bytes a 1-D strided buffer spans (lo == hi when it is empty)."""
    cdef char *start = <char *>view.buf
    cdef Py_ssize_t last
    if view.shape[0] == 0:
        lo[0] = hi[0] = start
        return
    last = (view.shape[0] - 1) * view.strides[0]
    if last >= 0:
        lo[0] = start
        hi[0] = start + last + view.itemsize
    else:
        lo[0] = start + last
        hi[0] = start + view.itemsize


cdef int _check_disjoint(Py_buffer *a, str a_name, Py_buffer *b, str b_name) except -1:
    """An output may not share memory with the counts or another output: the kernel reads a
    count again after writing outputs (the rare tie path, the zeroing after a negative count),
    so an overlap would change the counts it reads. Checked on the spans, so interleaved views
    of one buffer are refused too."""
    cdef char *alo
    cdef char *ahi
    cdef char *blo
    cdef char *bhi
    _extent(a, &alo, &ahi)
    _extent(b, &blo, &bhi)
    if alo < bhi and blo < ahi:
        raise ValueError(f"{b_name} overlaps {a_name}: pass separate arrays")
    return 0


cdef int _check_out(Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize, str formats, str name) except -1:
    cdef bytes fmt = view.format if view.format != NULL else b"B"
    cdef str code = fmt.decode().lstrip("@=<>!")
    if _foreign_byte_order(fmt.decode()) and itemsize > 1:
        raise TypeError(f"{name} has non-native byte order (buffer format {fmt!r})")
    if view.itemsize != itemsize or code not in formats:
        raise TypeError(f"{name} has buffer format {fmt!r}, expected one of {formats!r} ({itemsize} bytes)")
    if view.shape[0] != n:
        raise ValueError(f"{name} has length {view.shape[0]}, expected {n}")
    return 0


cdef class KeepTableHandle:
    """A certified keep table loaded into the kernel: q is an (N, limbs) uint64 array (a 1-D
    array is one limb), most significant limb first; pi(n) = q[n] / 2^(64 limbs) for n < N.
    Counts >= N take q[N - 1]'s path; with ``tail_certain`` they are then kept surely.

    The handle keeps a private copy of q (and of its top bytes) in memory nobody else can reach,
    so no later change to the caller's array can alter what the kernel samples from. The
    kernel re-checks q[0] == 0 and monotonicity when loading."""
    cdef dps_keep_table table
    cdef uint64_t *words
    cdef uint8_t *top
    cdef uint32_t *top32

    def __cinit__(self, q, bint tail_certain=True):
        arr = np.asarray(q)
        if arr.dtype != np.uint64:
            raise TypeError(f"keep table must have dtype uint64, got {arr.dtype}")
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2 or arr.shape[0] == 0 or not 1 <= arr.shape[1] <= DPS_KEEP_MAX_LIMBS:
            raise ValueError("keep table must be a non-empty (N,) or (N, limbs) array, 1 <= limbs <= 4")
        arr = np.ascontiguousarray(arr)
        cdef const uint64_t[:, ::1] qv = arr
        cdef Py_ssize_t n = qv.shape[0], limbs = qv.shape[1]
        self.words = <uint64_t *>malloc(n * limbs * sizeof(uint64_t))
        self.top = <uint8_t *>malloc(n * sizeof(uint8_t))
        self.top32 = <uint32_t *>malloc(n * sizeof(uint32_t))
        if self.words == NULL or self.top == NULL or self.top32 == NULL:
            raise MemoryError("could not allocate the keep table")
        memcpy(self.words, &qv[0, 0], n * limbs * sizeof(uint64_t))
        check_status(dps_keep_table_init(&self.table, self.words, <uint64_t>n, <uint32_t>limbs,
                                         tail_certain, self.top))
        dps_keep_table_attach_top32(&self.table, self.top32)

    def __dealloc__(self):
        free(self.words)
        free(self.top)
        free(self.top32)

    @property
    def length(self):
        return self.table.n_entries

    @property
    def limbs(self):
        return self.table.limbs

    @property
    def tail_certain(self):
        """True: counts >= length are kept surely; False: they keep q[length - 1]'s probability."""
        return self.table.certain_from == self.table.n_entries


cdef class WeightTableHandle:
    """A certified integer weight table loaded into the kernel (strictly increasing; total
    close enough to 2^64 for the lazy sampler)."""
    cdef dps_weight_table table
    cdef object cum
    cdef object hi
    cdef object direct

    def __cinit__(self, cumulative):
        # A private copy: the caller's array may change later; what the kernel samples may not.
        # Refused rather than converted: a float or negative weight is a wrong table, not
        # something to round or wrap.
        arr = np.asarray(cumulative)
        if arr.dtype != np.uint64:
            raise TypeError(f"cumulative (the weight table) must have dtype uint64, got {arr.dtype}")
        if arr.ndim != 1 or arr.shape[0] == 0 or arr.shape[0] >= 2 ** 31:
            raise ValueError("cumulative (the weight table) must be 1-D with between 1 and 2**31 - 1 entries, "
                             f"got shape {arr.shape}")
        self.cum = np.array(arr, dtype=np.uint64, order="C", copy=True)
        self.cum.setflags(write=False)
        cdef Py_ssize_t m = self.cum.shape[0]
        self.hi = np.empty(dps_weight_table_storage(<uint32_t>m), dtype=np.int32)
        cdef const uint64_t[::1] cv = self.cum
        cdef int32_t[::1] hv = self.hi
        check_status(dps_weight_table_init(&self.table, &cv[0], <uint32_t>m, &hv[0]))
        if not dps_weight_table_is_lazy(&self.table):
            raise ValueError("weight table total must be at least 2**64 - 2**32 for the kernel")
        cdef uint8_t[::1] dv
        if m < 255:  # small tables: one-load lookups by the top 16 bits of U
            self.direct = np.empty(65536 + 4, dtype=np.uint8)  # +4: 32-bit gathers read past a cell
            dv = self.direct
            check_status(dps_weight_table_attach_direct(&self.table, &dv[0]))

    @property
    def size(self):
        return self.table.m


def first_negative(counts):
    """Index of the first negative count in a 1-D integer buffer, or -1 (no randomness used)."""
    cdef Py_buffer c
    cdef size_t index = 0
    cdef int found
    _get_1d(counts, &c, 0, "counts")
    try:
        dtype = _count_dtype(&c)
        with nogil:
            found = dps_find_negative(dtype, c.buf, c.strides[0], <size_t>c.shape[0], &index)
    finally:
        PyBuffer_Release(&c)
    return <Py_ssize_t>index if found else -1


def select_into(counts, KeepTableHandle table, out, test_state=None):
    """out[i] = Bernoulli(pi(counts[i])); out is a 1-D bool/uint8 buffer of the same length."""
    cdef Py_buffer c, o
    _get_1d(counts, &c, 0, "counts")
    try:
        dtype = _count_dtype(&c)
        _get_1d(out, &o, PyBUF_WRITABLE, "out")
        try:
            _check_out(&o, c.shape[0], 1, "?B", "out")
            _check_disjoint(&c, "counts", &o, "out")
            _run_select(&c, table, &o, dtype, test_state)
        finally:
            PyBuffer_Release(&o)
    finally:
        PyBuffer_Release(&c)


cdef int _run_select(Py_buffer *c, KeepTableHandle table, Py_buffer *o, int dtype, test_state) except -1:
    cdef size_t bad = 0
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_select(s, &table.table, dtype, c.buf, c.strides[0], <size_t>c.shape[0],
                        <uint8_t *>o.buf, o.strides[0], &bad)
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_NEGATIVE:
        raise NegativeCountError(bad)
    return check_status(rc)


def release_into(counts, WeightTableHandle noise, k, keep, noisy, test_state=None,
                 threshold=None, bint keep_all=False):
    """keep[i] = counts[i] + X_i > threshold (default k: the TSGD rule; any threshold >= -k), or
    always with keep_all; noisy[i] = counts[i] + X_i where kept, else 0."""
    cdef Py_buffer c, kv, nv
    cdef dps_release_rule rule
    k = check_int("k", k, 0, 2**31 - 1)  # the table has 2k + 1 < 2**32 entries
    if noise.table.m != 2 * <uint64_t>k + 1:
        raise ValueError(f"noise table has {noise.table.m} entries, expected 2k+1 = {2 * k + 1}")
    if threshold is None:
        threshold = k
    if (isinstance(threshold, (int, np.integer)) and not isinstance(threshold, bool)
            and not -k <= threshold <= 2**62):
        raise ValueError(f"threshold must be between -k = {-k} and 2**62, got {threshold}")
    threshold = check_int("threshold", threshold, -k, 2**62)
    rule.k = k
    rule.cut = <uint64_t>(threshold + k)
    rule.keep_all = 1 if keep_all else 0
    _get_1d(counts, &c, 0, "counts")
    try:
        dtype = _count_dtype(&c)
        _get_1d(keep, &kv, PyBUF_WRITABLE, "keep")
        try:
            _check_out(&kv, c.shape[0], 1, "?B", "keep")
            _check_disjoint(&c, "counts", &kv, "keep")
            _get_1d(noisy, &nv, PyBUF_WRITABLE, "noisy")
            try:
                _check_out(&nv, c.shape[0], 8, "lq", "noisy")
                _check_disjoint(&c, "counts", &nv, "noisy")
                _check_disjoint(&kv, "keep", &nv, "noisy")
                _run_release(&c, noise, &rule, &kv, &nv, dtype, test_state)
            finally:
                PyBuffer_Release(&nv)
        finally:
            PyBuffer_Release(&kv)
    finally:
        PyBuffer_Release(&c)


cdef int _run_release(Py_buffer *c, WeightTableHandle noise, dps_release_rule *rule, Py_buffer *kv,
                      Py_buffer *nv, int dtype, test_state) except -1:
    cdef size_t bad = 0
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_release(s, &noise.table, rule, dtype, c.buf, c.strides[0], <size_t>c.shape[0],
                         <uint8_t *>kv.buf, kv.strides[0], <int64_t *>nv.buf, nv.strides[0], &bad)
        end_batch(s)
    finish_batch(test_state)
    if rc == DPS_ERR_NEGATIVE:
        raise NegativeCountError(bad)
    return check_status(rc)

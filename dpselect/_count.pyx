# cython: language_level=3
"""Bindings to the C counting kernel csrc/count.{c,h} (contribution bounding and distinct-user
counting; docs/privacy/contribution-bounding.md). Thin: checks arguments, releases the GIL
around the loops, maps status codes to exceptions. Use :mod:`dpselect.ingest.rows`, not this."""
import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport free
from libc.string cimport memcpy

from dpselect._csrc cimport dps_rng, DPS_OK, DPS_ERR_NOMEM
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status
from dpselect._boundary import check_array, check_disjoint, check_int, U32_MAX, U64_MAX


cdef extern from "count.h" nogil:
    const uint32_t DPS_CODE_LIMIT
    enum: DPS_ERR_BAD_CODE
    enum: DPS_ERR_FINISHED
    enum: DPS_ERR_BAD_ARG
    ctypedef struct dps_counter:
        pass
    int dps_counter_init(dps_counter *c, size_t expected_pairs)
    int dps_counter_feed(dps_counter *c, const uint32_t *users, const uint32_t *partitions,
                         size_t n, uint32_t shard_mask, uint32_t shard, size_t *bad_index)
    size_t dps_counter_pairs(const dps_counter *c)
    size_t dps_counter_bytes(const dps_counter *c)
    int dps_counter_feed_keys(dps_counter *c, const uint64_t *keys, size_t n, size_t *bad_index)
    int dps_counter_finish(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap,
                           int64_t *counts, size_t n_partitions)
    int dps_counter_finish_add(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap,
                               int64_t *counts, size_t n_partitions, int shared)
    int dps_counter_group(dps_counter *c, size_t n_partitions, size_t **ends, uint32_t **grouped,
                          uint64_t *n_users, size_t *n_pairs)
    void dps_counter_free(dps_counter *c)

cdef extern from "pair_shards.h" nogil:
    enum: DPS_PAIR_SHARD_BITS_MAX
    int dps_pair_shards_scatter(const uint32_t *users, const uint32_t *partitions, size_t n, unsigned shard_bits,
                                uint64_t *keys, size_t *starts, size_t *bad_index)
    int dps_pair_shards_count(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                              unsigned shard_bits, size_t *counts, size_t *bad_index)
    int dps_pair_shards_place(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                              unsigned shard_bits, size_t *cursors, const size_t *limits, uint64_t *keys)


CODE_LIMIT = DPS_CODE_LIMIT
PAIR_SHARD_BITS_MAX = DPS_PAIR_SHARD_BITS_MAX


def scatter_pairs(object users, object partitions, object shard_bits):
    """Rows (users[i], partitions[i]) scattered into ``2**shard_bits`` shards by user code
    (csrc/pair_shards.h): returns (keys, starts), shard s's pairs packed for its pair set
    (:meth:`PairCounter.feed_keys`) at keys[starts[s]:starts[s + 1]], in row order, its users
    stored as ``users[i] >> shard_bits``. Every code of every row is checked first."""
    cdef const uint32_t[::1] u = check_array("users", users, [np.uint32], copy=True)
    cdef const uint32_t[::1] p = check_array("partitions", partitions, [np.uint32], copy=True)
    cdef unsigned bits = check_int("shard_bits", shard_bits, 0, DPS_PAIR_SHARD_BITS_MAX)
    if u.shape[0] != p.shape[0]:
        raise ValueError(f"users and partitions must have the same length, got {u.shape[0]} and {p.shape[0]}")
    cdef size_t n = <size_t>u.shape[0]
    keys = np.empty(n, dtype=np.uint64)
    starts = np.zeros((1 << bits) + 1, dtype=np.uintp)
    cdef uint64_t[::1] k = keys
    cdef size_t[::1] at = starts
    cdef size_t bad = 0
    cdef int rc = DPS_OK
    if n == 0:
        return keys, starts
    with nogil:
        rc = dps_pair_shards_scatter(&u[0], &p[0], n, bits, &k[0], &at[0], &bad)
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"row {bad}: codes must be < {DPS_CODE_LIMIT} (at most "
                         f"{DPS_CODE_LIMIT} distinct users and partitions)")
    _check(rc)
    return keys, starts


cdef object _pair_rows(object users, object partitions, object lo, object hi):
    """The two code columns (uint32, one length) and the range [lo, hi) of their rows."""
    users_arr = check_array("users", users, [np.uint32])
    partitions_arr = check_array("partitions", partitions, [np.uint32])
    if users_arr.shape[0] != partitions_arr.shape[0]:
        raise ValueError(f"users and partitions must have the same length, got {users_arr.shape[0]} and "
                         f"{partitions_arr.shape[0]}")
    a = check_int("rows start", lo, 0, users_arr.shape[0])
    b = check_int("rows end", hi, a, users_arr.shape[0])
    return users_arr, partitions_arr, a, b


def pair_shard_counts(object users, object partitions, object shard_bits, object lo, object hi, object counts) -> None:
    """Add the rows [lo, hi) of each of the ``2**shard_bits`` user shards to ``counts`` (uintp),
    after checking their codes (csrc/pair_shards.h): :func:`scatter_pairs` split over threads,
    calls on different ranges, each with its own counts, running at once."""
    users_arr, partitions_arr, a, b = _pair_rows(users, partitions, lo, hi)
    cdef unsigned bits = check_int("shard_bits", shard_bits, 0, DPS_PAIR_SHARD_BITS_MAX)
    counts_arr = check_array("counts", counts, [np.uintp], writable=True)
    if counts_arr.shape[0] != (1 << bits):
        raise ValueError(f"counts must have 2**shard_bits = {1 << bits} entries, got {counts_arr.shape[0]}")
    cdef const uint32_t[::1] u = users_arr
    cdef const uint32_t[::1] p = partitions_arr
    cdef size_t[::1] c = counts_arr
    cdef size_t first = a, end = b, bad = 0
    cdef int rc = DPS_OK
    if end > first:
        with nogil:
            rc = dps_pair_shards_count(&u[0], &p[0], first, end, bits, &c[0], &bad)
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"row {bad}: codes must be < {DPS_CODE_LIMIT} (at most "
                         f"{DPS_CODE_LIMIT} distinct users and partitions)")
    _check(rc)


def place_pairs(object users, object partitions, object shard_bits, object lo, object hi, object cursors,
                object limits, object keys) -> None:
    """Write the packed pair of each row of [lo, hi) at ``keys[cursors[its shard]++]``, below
    ``limits[shard]``: with cursors from the prefix sums of :func:`pair_shard_counts` (shard after
    shard, ranges in row order), the ranges placed at once give :func:`scatter_pairs`' keys."""
    users_arr, partitions_arr, a, b = _pair_rows(users, partitions, lo, hi)
    cdef unsigned bits = check_int("shard_bits", shard_bits, 0, DPS_PAIR_SHARD_BITS_MAX)
    cursors_arr = check_array("cursors", cursors, [np.uintp], writable=True)
    limits_arr = check_array("limits", limits, [np.uintp])
    keys_arr = check_array("keys", keys, [np.uint64], writable=True)
    if cursors_arr.shape[0] != (1 << bits) or limits_arr.shape[0] != (1 << bits):
        raise ValueError(f"cursors and limits must have 2**shard_bits = {1 << bits} entries each")
    if int(limits_arr.max()) > keys_arr.shape[0]:
        raise ValueError(f"limits must be <= len(keys) ({keys_arr.shape[0]})")
    check_disjoint({"keys": keys_arr, "cursors": cursors_arr},
                   {"users": users_arr, "partitions": partitions_arr, "limits": limits_arr})
    cdef const uint32_t[::1] u = users_arr
    cdef const uint32_t[::1] p = partitions_arr
    cdef size_t[::1] c = cursors_arr
    cdef const size_t[::1] l = limits_arr
    cdef uint64_t[::1] k = keys_arr
    cdef size_t first = a, end = b
    cdef int rc = DPS_OK
    if end > first:
        with nogil:
            rc = dps_pair_shards_place(&u[0], &p[0], first, end, bits, &c[0], &l[0], &k[0])
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("cursors are not the prefix sums of these rows' shard counts")
    _check(rc)


cdef int _check(int rc) except -1:
    if rc == DPS_OK:
        return 0
    if rc == DPS_ERR_NOMEM:
        raise MemoryError("dpselect's counting kernel ran out of memory")
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"a user or partition code is out of range (codes must be < {DPS_CODE_LIMIT} "
                         "and partition codes < n_partitions)")
    if rc == DPS_ERR_FINISHED:
        raise RuntimeError("this PairCounter has already been finished; create a new one")
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("max_partitions_contributed must be >= 1")
    return check_status(rc)



def _counts_out(out, n_parts):
    """The array a finish adds its counts into: a fresh zeroed one, or ``out`` checked to hold
    n_parts int64 counts (a 1-entry scratch array when there are no partitions, so the kernel
    always gets a valid pointer)."""
    if out is None:
        return np.zeros(max(n_parts, 1), dtype=np.int64)
    counts = check_array("out", out, [np.int64], writable=True)
    if counts.shape[0] != n_parts:
        raise ValueError(f"out must hold n_partitions ({n_parts}) counts, got {counts.shape[0]}")
    return np.zeros(1, dtype=np.int64) if n_parts == 0 else counts

cdef class PairCounter:
    """Distinct (user, partition) code pairs, fed in batches; ``finish`` bounds each user to κ
    partitions chosen uniformly with the package CSPRNG and counts users per partition."""

    cdef dps_counter c
    cdef bint initialised
    cdef bint busy

    def __cinit__(self, object expected_pairs=0):
        _non_negative("expected_pairs", expected_pairs)
        cdef Py_ssize_t expected = check_int("expected_pairs", expected_pairs, 0, 2**63 - 1)
        self.initialised = False
        self.busy = False
        cdef int rc
        with nogil:
            rc = dps_counter_init(&self.c, <size_t>expected)
        if rc != DPS_OK:
            dps_counter_free(&self.c)
        _check(rc)
        self.initialised = True

    def __dealloc__(self):
        if self.initialised:
            dps_counter_free(&self.c)
            self.initialised = False

    cdef int _enter(self) except -1:
        if self.busy:
            raise RuntimeError("a PairCounter cannot be used by two threads at once")
        self.busy = True
        return 0

    def feed(self, object users, object partitions, object shard_mask=0, object shard=0) -> None:
        """Add rows (users[i], partitions[i]); duplicates are ignored. With a shard, only the
        rows whose ``users[i] & shard_mask == shard`` are added, as user ``users[i] >> b`` for
        ``shard_mask = 2**b - 1`` (every row's codes are checked): two counters fed the same
        rows with shards 0 and 1 of mask 1 split the users between them, so two threads can fill
        and finish them at once, each with dense user codes."""
        cdef const uint32_t[::1] u = check_array("users", users, [np.uint32], copy=True)
        cdef const uint32_t[::1] p = check_array("partitions", partitions, [np.uint32], copy=True)
        cdef uint32_t mask = check_int("shard_mask", shard_mask, 0, U32_MAX)
        cdef uint32_t which = check_int("shard", shard, 0, U32_MAX)
        if u.shape[0] != p.shape[0]:
            raise ValueError(f"users and partitions must have the same length, got "
                             f"{u.shape[0]} and {p.shape[0]}")
        if which & ~mask or mask & (mask + 1):
            raise ValueError(f"shard_mask must be 2**b - 1 and shard one of its values, got "
                             f"shard_mask={shard_mask}, shard={shard}")
        cdef size_t n = <size_t>u.shape[0]
        cdef size_t bad = 0
        cdef int rc = DPS_OK
        if n == 0:
            return
        self._enter()
        try:
            with nogil:
                rc = dps_counter_feed(&self.c, &u[0], &p[0], n, mask, which, &bad)
        finally:
            self.busy = False
        if rc == DPS_ERR_BAD_CODE:
            raise ValueError(f"row {bad}: codes must be < {DPS_CODE_LIMIT} (at most "
                             f"{DPS_CODE_LIMIT} distinct users and partitions)")
        _check(rc)

    def feed_keys(self, object keys) -> None:
        """Add pairs packed by :func:`scatter_pairs` (one shard's run of its keys: user code in
        the high 32 bits, partition code in the low); duplicates are ignored. Both halves of
        every key must be below ``CODE_LIMIT``."""
        cdef const uint64_t[::1] k = check_array("keys", keys, [np.uint64], copy=True)
        cdef size_t n = <size_t>k.shape[0]
        cdef size_t bad = 0
        cdef int rc = DPS_OK
        if n == 0:
            return
        self._enter()
        try:
            with nogil:
                rc = dps_counter_feed_keys(&self.c, &k[0], n, &bad)
        finally:
            self.busy = False
        if rc == DPS_ERR_BAD_CODE:
            raise ValueError(f"key {bad}: both halves must be < {DPS_CODE_LIMIT} (user and partition codes)")
        _check(rc)

    def __repr__(self):
        return f"PairCounter({dps_counter_pairs(&self.c)} distinct pairs, {dps_counter_bytes(&self.c)} bytes)"

    @property
    def n_pairs(self) -> int:
        """Distinct (user, partition) pairs fed so far."""
        return dps_counter_pairs(&self.c)

    @property
    def nbytes(self) -> int:
        """Bytes held by the pair set."""
        return dps_counter_bytes(&self.c)

    def group(self, object n_partitions):
        """Consume the pairs and return them grouped by user: (ends, partitions) where user u's
        distinct partition codes are partitions[ends[u - 1]:ends[u]] (ends[-1] read as 0).
        No randomness is used; the weighted mechanisms bound each user later, per round."""
        _non_negative("n_partitions", n_partitions)
        cdef size_t n_parts = check_int("n_partitions", n_partitions, 0, 2**63 - 1)
        cdef size_t *ends = NULL
        cdef uint32_t *grouped = NULL
        cdef uint64_t n_users = 0
        cdef size_t n_pairs = 0
        cdef int rc
        self._enter()
        try:
            with nogil:
                rc = dps_counter_group(&self.c, n_parts, &ends, &grouped, &n_users, &n_pairs)
        finally:
            self.busy = False
        try:
            _check(rc)
            ends_arr = np.empty(n_users, dtype=np.uintp)
            parts_arr = np.empty(n_pairs, dtype=np.uint32)
            if n_users:
                memcpy(<void *><size_t>ends_arr.ctypes.data, ends, n_users * sizeof(size_t))
            if n_pairs:
                memcpy(<void *><size_t>parts_arr.ctypes.data, grouped, n_pairs * sizeof(uint32_t))
        finally:
            free(ends)
            free(grouped)
        return ends_arr, parts_arr

    def finish(self, object n_partitions, object kappa, object cap, object test_state, object out=None,
               bint shared=False):
        """int64 counts per partition code after bounding every user to ``kappa`` partitions,
        saturated at ``cap`` (None: exact). ``test_state`` is ``rng._test_state``. Memory is
        bounded by the distinct pairs fed, whatever the user codes' values. ``out``: an int64
        array of ``n_partitions`` counts to add to (each count saturating at ``cap``; returned)
        instead of a new one, so that the shards of one set of users add into one array;
        ``shared``: other threads add to the same ``out`` at the same time (atomic adds)."""
        _non_negative("n_partitions", n_partitions)
        cdef Py_ssize_t n_parts = check_int("n_partitions", n_partitions, 0, 2**63 - 1)
        # Checked as integers first: Cython's C conversion would truncate a float (1.5 -> 1).
        kappa = check_int("max_partitions_contributed (kappa)", kappa, -2**64, 2**64)
        if not 1 <= kappa < 2 ** 64:
            raise ValueError(f"max_partitions_contributed must be >= 1, got {kappa}")
        if cap is not None:
            cap = check_int("cap (the count cap)", cap, -2**64, 2**64)
            if not 1 <= cap < 2 ** 63:
                raise ValueError(f"count cap must be None or in [1, 2**63), got {cap}")
        cdef uint64_t k = <uint64_t>kappa
        cdef uint64_t c = 0 if cap is None else <uint64_t>cap
        cdef bint add = out is not None
        counts = _counts_out(out, n_parts)
        cdef int64_t[::1] view = counts
        cdef int c_shared = 1 if shared else 0
        cdef int rc
        self._enter()
        cdef dps_rng *s
        try:
            s = begin_batch(test_state)
            with nogil:
                if add:
                    rc = dps_counter_finish_add(&self.c, s, k, c, &view[0], <size_t>n_parts, c_shared)
                else:
                    rc = dps_counter_finish(&self.c, s, k, c, &view[0], <size_t>n_parts)
                end_batch(s)
            finish_batch(test_state)
        finally:
            self.busy = False
        _check(rc)
        return counts[:n_parts]


cdef int _non_negative(str name, object value) except -1:
    """The historical message for a negative size or count (checked before its type)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return 0


# ------------------------------------------------------------------ column codes (csrc/keymap.h)

cdef extern from "keymap.h" nogil:
    enum: DPS_KEYMAP_WORD
    enum: DPS_KEYMAP_BYTES
    enum: DPS_ERR_KEYMAP_FULL
    enum: DPS_ERR_KEYMAP_OFFSETS
    enum: DPS_ERR_KEYMAP_KIND
    enum: DPS_ERR_KEYMAP_LONG
    ctypedef struct dps_keymap:
        size_t size
        uint32_t n_codes
    int dps_keymap_init(dps_keymap *m, int kind, uint64_t seed)
    void dps_keymap_free(dps_keymap *m)
    size_t dps_keymap_bytes(const dps_keymap *m)
    int dps_keymap_encode_fixed(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                                int all_null, const uint8_t *values, size_t width, uint32_t *codes,
                                uint32_t *new_rows, size_t *n_new)
    int dps_keymap_encode_var(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                              const void *offsets, int offsets64, const uint8_t *data, size_t data_len,
                              uint32_t *codes, uint32_t *new_rows, size_t *n_new, size_t *bad_row)
    int dps_dictionary_codes(size_t n, const uint8_t *validity, size_t validity_offset, const uint8_t *indices,
                             size_t index_width, size_t dict_len, uint32_t *slot_of, uint32_t *next_code,
                             uint32_t *null_code, uint32_t *codes, uint32_t *new_rows, size_t *n_new,
                             size_t *bad_row)


cdef int _check_keymap(int rc, object name, size_t bad_row) except -1:
    if rc == DPS_OK:
        return 0
    if rc == DPS_ERR_NOMEM:
        raise MemoryError(f"out of memory while encoding column {name!r}")
    if rc == DPS_ERR_KEYMAP_FULL:
        raise ValueError(f"column {name!r} has more than {DPS_CODE_LIMIT - 1} distinct values")
    if rc == DPS_ERR_KEYMAP_OFFSETS:
        raise ValueError(f"column {name!r}: the Arrow offsets of row {bad_row} are out of range or "
                         "decreasing (a corrupt array); nothing was counted from this batch")
    if rc == DPS_ERR_KEYMAP_LONG:
        raise ValueError(f"column {name!r} has a value of 4 GiB or more; such values cannot be keys")
    if rc == DPS_ERR_KEYMAP_KIND:
        raise ValueError(f"column {name!r}: this value width or batch size cannot be encoded here")
    return check_status(rc)


cdef object _bytes_view(object buf, object what, object name):
    """Any contiguous buffer as unsigned bytes (pyarrow buffers say 'b', numpy uint8 'B')."""
    try:
        return memoryview(buf).cast("B")
    except (TypeError, ValueError, BufferError) as exc:
        raise TypeError(f"column {name!r}: the {what} buffer must be a C-contiguous buffer, "
                        f"got {type(buf).__name__} ({exc})") from None


cdef const uint8_t *_buffer(object buf, object need, object what, object name) except? NULL:
    """The address of an Arrow buffer holding at least `need` bytes (NULL for None). `need` is
    a Python int: computed in size_t, (offset + n) * width could wrap around and let a huge
    offset pass the check, then send the kernel before the buffer."""
    cdef const uint8_t[::1] view
    if buf is None:
        if need:
            raise ValueError(f"column {name!r}: the {what} buffer is missing")
        return NULL
    view = _bytes_view(buf, what, name)
    if view.shape[0] < need:
        raise ValueError(f"column {name!r}: the {what} buffer holds {view.shape[0]} bytes, "
                         f"{need} are needed (a corrupt array)")
    if view.shape[0] == 0:
        return NULL
    return &view[0]


# Element offsets into Arrow buffers (far beyond any real buffer; keeps every size_t product exact).
MAX_OFFSET = 2**48


def _sizes(name, *values):
    """Sizes and offsets as Python ints (any int passes here: the callers check the ranges and
    name them in one message); a float, bool or other object is refused, never truncated."""
    for value in values:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"column {name!r}: sizes and offsets must be integers, got {value!r}")
    return tuple(int(v) for v in values)


cdef class KeyMap:
    """Dense uint32 codes, in order of first appearance, for the values of one column, read
    straight from Arrow buffers and kept across batches; nulls share one code. ``kind`` is
    ``"word"`` (values of 1, 2, 4 or 8 bytes compared as integers) or ``"bytes"`` (strings,
    binaries and other fixed widths compared byte for byte). ``seed`` only places values in the
    hash table; codes never depend on it."""

    cdef dps_keymap m
    cdef bint busy
    cdef readonly object name

    def __cinit__(self, str kind, object seed, object name="column"):
        if kind not in ("word", "bytes"):
            raise ValueError(f"kind must be 'word' or 'bytes', got {kind!r}")
        cdef uint64_t c_seed = check_int("seed", seed, 0, U64_MAX)
        self.busy = False
        self.name = name
        _check_keymap(dps_keymap_init(&self.m, DPS_KEYMAP_WORD if kind == "word" else DPS_KEYMAP_BYTES, c_seed),
                      name, 0)

    def __dealloc__(self):
        dps_keymap_free(&self.m)

    def __len__(self):
        return self.m.n_codes

    @property
    def nbytes(self) -> int:
        return dps_keymap_bytes(&self.m)

    cdef int _enter(self) except -1:
        if self.busy:
            raise RuntimeError("a KeyMap cannot be used by two threads at once")
        self.busy = True
        return 0

    def encode_fixed(self, object n, object offset, object validity, object values,
                     object width, bint all_null=False):
        """(codes, new_rows) for n values of `width` bytes starting at element `offset` of the
        Arrow buffers (validity may be None: no nulls; all_null: Arrow's null type)."""
        n, offset, width = _sizes(self.name, n, offset, width)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or width <= 0 or n >= DPS_CODE_LIMIT or width > 1 << 20:
            raise ValueError(f"column {self.name!r}: bad sizes n={n}, offset={offset}, width={width}")
        cdef size_t sn = <size_t>n, soff = <size_t>offset, sw = <size_t>width
        cdef const uint8_t *valid = _buffer(validity, 0 if validity is None else (offset + n + 7) // 8,
                                            "validity", self.name)
        cdef const uint8_t *vals = NULL
        if not all_null:
            vals = _buffer(values, (offset + n) * width, "values", self.name)
            if vals != NULL:
                vals += soff * sw
        codes = np.empty(n, dtype=np.uint32)
        new_rows = np.empty(n, dtype=np.uint32)
        if n == 0:
            return codes, new_rows
        cdef uint32_t[::1] c = codes
        cdef uint32_t[::1] r = new_rows
        cdef size_t n_new = 0
        cdef int rc
        self._enter()
        try:
            with nogil:
                rc = dps_keymap_encode_fixed(&self.m, sn, valid, soff, all_null, vals, sw, &c[0], &r[0], &n_new)
        finally:
            self.busy = False
        _check_keymap(rc, self.name, 0)
        return codes, new_rows[:n_new]

    def encode_var(self, object n, object offset, object validity, object offsets,
                   bint offsets64, object data):
        """(codes, new_rows) for n variable-length values (Arrow string/binary layout with 32-
        or 64-bit offsets) starting at element `offset`."""
        n, offset = _sizes(self.name, n, offset)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or n >= DPS_CODE_LIMIT:
            raise ValueError(f"column {self.name!r}: bad sizes n={n}, offset={offset}")
        cdef size_t sn = <size_t>n, soff = <size_t>offset
        cdef size_t osize = 8 if offsets64 else 4
        cdef const uint8_t *valid = _buffer(validity, 0 if validity is None else (offset + n + 7) // 8,
                                            "validity", self.name)
        cdef const uint8_t *offs = _buffer(offsets, (offset + n + 1) * osize, "offsets", self.name)
        cdef const uint8_t[::1] data_view
        cdef const uint8_t *dat = NULL
        cdef size_t data_len = 0
        if data is not None:
            data_view = _bytes_view(data, "data", self.name)
            data_len = <size_t>data_view.shape[0]
            if data_len:
                dat = &data_view[0]
        codes = np.empty(n, dtype=np.uint32)
        new_rows = np.empty(n, dtype=np.uint32)
        if n == 0:
            return codes, new_rows
        cdef uint32_t[::1] c = codes
        cdef uint32_t[::1] r = new_rows
        cdef size_t n_new = 0, bad = 0
        cdef int rc
        offs += soff * osize
        self._enter()
        try:
            with nogil:
                rc = dps_keymap_encode_var(&self.m, sn, valid, soff, <const void *>offs, offsets64, dat,
                                           data_len, &c[0], &r[0], &n_new, &bad)
        finally:
            self.busy = False
        _check_keymap(rc, self.name, soff + bad)
        return codes, new_rows[:n_new]


cdef class DictionaryCodes:
    """First-appearance codes of the indices of dictionary arrays that share one dictionary of
    ``dict_len`` values (the batches and slices of one pandas categorical): an index keeps its
    code from one batch to the next; a null index has a code of its own."""

    cdef object slot_of
    cdef uint32_t next_code
    cdef uint32_t null_code
    cdef readonly Py_ssize_t dict_len
    cdef readonly object name

    def __cinit__(self, object dict_len, object name="column"):
        dict_len, = _sizes(name, dict_len)
        if dict_len < 0 or dict_len >= DPS_CODE_LIMIT:
            raise ValueError(f"column {name!r}: bad dictionary length {dict_len}")
        self.slot_of = np.full(max(dict_len, 1), DPS_CODE_LIMIT, dtype=np.uint32)
        self.next_code = 0
        self.null_code = DPS_CODE_LIMIT
        self.dict_len = dict_len
        self.name = name

    def __len__(self):
        return self.next_code

    def encode(self, object n, object offset, object validity, object indices, object index_width):
        """(codes, new_rows) of n indices of `index_width` bytes from element `offset`."""
        n, offset, index_width = _sizes(self.name, n, offset, index_width)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or n >= DPS_CODE_LIMIT or index_width not in (1, 2, 4, 8):
            raise ValueError(f"column {self.name!r}: bad sizes n={n}, offset={offset}, index width={index_width}")
        cdef size_t sn = <size_t>n, soff = <size_t>offset, sw = <size_t>index_width
        cdef const uint8_t *valid = _buffer(validity, 0 if validity is None else (offset + n + 7) // 8,
                                            "validity", self.name)
        cdef const uint8_t *idx = _buffer(indices, (offset + n) * index_width, "indices", self.name)
        codes = np.empty(n, dtype=np.uint32)
        new_rows = np.empty(n, dtype=np.uint32)
        if n == 0:
            return codes, new_rows
        cdef uint32_t[::1] c = codes
        cdef uint32_t[::1] r = new_rows
        cdef uint32_t[::1] slots = self.slot_of
        cdef size_t n_new = 0, bad = 0
        cdef int rc
        idx += soff * sw
        with nogil:
            rc = dps_dictionary_codes(sn, valid, soff, idx, sw, <size_t>self.dict_len, &slots[0], &self.next_code,
                                      &self.null_code, &c[0], &r[0], &n_new, &bad)
        if rc == DPS_ERR_KEYMAP_OFFSETS:
            raise ValueError(f"column {self.name!r}: the dictionary index of row {soff + bad} is outside its "
                             f"dictionary of {self.dict_len} values (a corrupt array)")
        _check_keymap(rc, self.name, 0)
        return codes, new_rows[:n_new]


# ---------------------------------------- column codes on several threads (csrc/key_shards.h)

cdef extern from "shard_maps.h" nogil:
    enum: DPS_KEYSHARDS
    ctypedef struct dps_keystore:
        size_t n_codes
        int busy
        int broken
    int dps_keystore_init(dps_keystore *st, int var, uint64_t seed)
    void dps_keystore_free(dps_keystore *st)
    size_t dps_keystore_bytes(const dps_keystore *st)


cdef extern from "key_shards.h" nogil:
    enum: DPS_ERR_KEYSHARDS_STAGE
    enum: DPS_ERR_KEYSTORE_BROKEN
    ctypedef struct dps_keyshards:
        size_t n_codes
        size_t n_chunks
        size_t bad_row
    int dps_keyshards_init(dps_keyshards *ks, size_t n, size_t width, const uint8_t *values,
                           const uint8_t *validity, size_t validity_offset, size_t n_chunks, uint64_t seed)
    int dps_keyshards_init_var(dps_keyshards *ks, size_t n, const void *offsets, int offsets64, const uint8_t *data,
                               size_t data_len, const uint8_t *validity, size_t validity_offset, size_t n_chunks,
                               uint64_t seed)
    void dps_keyshards_free(dps_keyshards *ks)
    int dps_keyshards_count(dps_keyshards *ks, size_t c, uint32_t *codes)
    int dps_keyshards_layout(dps_keyshards *ks, uint32_t *codes)
    int dps_keyshards_scatter(dps_keyshards *ks, size_t c)
    int dps_keyshards_encode(dps_keyshards *ks, size_t s, uint32_t *codes)
    int dps_keyshards_rank_count(dps_keyshards *ks, size_t c, const uint32_t *codes)
    int dps_keyshards_rank_layout(dps_keyshards *ks)
    int dps_keyshards_rank(dps_keyshards *ks, size_t c, const uint32_t *codes, uint32_t *new_rows)
    int dps_keyshards_translate(dps_keyshards *ks, size_t s)
    int dps_keyshards_finish(dps_keyshards *ks, size_t c, uint32_t *codes)
    int dps_keyshards_attach(dps_keyshards *ks, dps_keystore *store)
    int dps_keyshards_commit(dps_keyshards *ks)
    void dps_keyshards_fail(dps_keyshards *ks)
    int dps_keyshards_run(dps_keyshards *ks, uint32_t *codes, uint32_t *new_rows)


KEY_SHARDS = DPS_KEYSHARDS

cdef class KeyStore:
    """The shards' code maps of one column kept from one batch to the next (csrc/shard_maps.h):
    pass it as ``store=`` to ShardedKeyCodes (``kind="word"``) or ShardedStringCodes
    (``kind="bytes"``), one batch after another, and the codes continue as one KeyMap's would over
    the same batches: a value seen before keeps its code, a new one gets the next in order of
    first appearance. ``seed`` (from the package CSPRNG) places values in shards and slots, never
    codes. A batch that fails once its values entered the maps leaves the store broken: every
    later batch is refused."""

    cdef dps_keystore st
    cdef bint initialised
    cdef readonly object kind
    cdef readonly object name

    def __cinit__(self, *args, **kwargs):
        self.initialised = False

    def __init__(self, object kind, object seed, object name="column"):
        if self.initialised:
            raise RuntimeError("a KeyStore is initialised once")
        if kind not in ("word", "bytes"):
            raise ValueError(f"kind must be 'word' or 'bytes', got {kind!r}")
        cdef uint64_t c_seed = check_int("seed", seed, 0, U64_MAX)
        self.kind = kind
        self.name = name
        _check_keymap(dps_keystore_init(&self.st, 1 if kind == "bytes" else 0, c_seed), name, 0)
        self.initialised = True

    def __dealloc__(self):
        if self.initialised:
            dps_keystore_free(&self.st)
            self.initialised = False

    def __len__(self):
        return self.st.n_codes

    @property
    def broken(self) -> bool:
        return bool(self.st.broken)

    @property
    def nbytes(self) -> int:
        """Bytes held by the maps, their copies of the values and the local-code tables."""
        return dps_keystore_bytes(&self.st)

    def __repr__(self):
        return f"KeyStore({self.kind!r}, {self.st.n_codes} codes, column {self.name!r})"


# The phases of ShardedKeyCodes, in order: (name, per chunk (1), per shard (2) or once (0)).
_PHASES = (("count", 1), ("layout", 0), ("scatter", 1), ("encode", 2), ("rank_count", 1), ("rank_layout", 0),
           ("rank", 1), ("translate", 2), ("finish", 1))


cdef class _ShardedCodes:
    """The phases shared by ShardedKeyCodes and ShardedStringCodes (csrc/key_shards.h): call each
    phase's method once per piece (``n_chunks`` chunks of rows, ``KEY_SHARDS`` shards of the
    values; pieces of one phase may run on different threads at once), phases in the order of
    ``phases()``; then ``result()`` gives (codes, new_rows) as the KeyMap on an empty map does.
    The subclass's ``__init__`` reads the column."""

    cdef dps_keyshards ks
    cdef bint initialised
    cdef object codes
    cdef object new_rows
    cdef object buffers  # the Arrow buffers the kernel reads, kept alive
    cdef int phase
    cdef Py_ssize_t left
    cdef object claimed
    cdef bint failed
    cdef size_t row_offset  # the column's Arrow offset, for the rows named in errors
    cdef readonly object name
    cdef KeyStore store  # codes continue those of earlier batches, or None

    def __cinit__(self, *args, **kwargs):
        self.initialised = False
        self.name = "column"

    cdef int _check(self, object n, object offset, object n_chunks, object name) except -1:
        """The sizes every column shares (``n`` and ``offset`` already Python ints)."""
        if self.initialised:
            raise RuntimeError("a sharded coder reads one column, once")
        if not 1 <= n_chunks <= n + 1:
            raise ValueError(f"n_chunks must be in [1, n + 1 = {n + 1}], got {n_chunks}")
        return 0

    cdef int _ready(self, int rc, object n, object offset, object n_chunks, object buffers,
                    KeyStore store) except -1:
        """After the kernel's init (status rc): the store attached, the codes and the phase
        bookkeeping."""
        if rc != DPS_OK:
            dps_keyshards_free(&self.ks)
            _check_keymap(rc, self.name, 0)
        if store is not None:
            if not store.initialised:
                rc = DPS_ERR_KEYSHARDS_STAGE
            else:
                rc = dps_keyshards_attach(&self.ks, &store.st)
            if rc != DPS_OK:
                dps_keyshards_free(&self.ks)
                if rc == DPS_ERR_KEYSTORE_BROKEN:
                    raise RuntimeError(f"column {self.name!r}: an earlier batch failed while being coded, "
                                       "so the codes of its values are lost; start over with a new store")
                raise RuntimeError(f"column {self.name!r}: the store {store!r} is in use by another batch, "
                                   "or holds the other kind of values")
        self.store = store
        self.initialised = True
        self.buffers = buffers
        self.row_offset = <size_t>offset
        self.codes = np.empty(n, dtype=np.uint32)
        self.new_rows = None
        self.phase = 0
        self.left = n_chunks
        self.claimed = np.zeros(n_chunks, dtype=np.bool_)
        self.failed = False
        return 0

    def __dealloc__(self):
        if self.initialised:
            dps_keyshards_free(&self.ks)
            self.initialised = False

    @staticmethod
    def phases():
        """(method name, "chunk", "shard" or "once") of each phase, in order."""
        return tuple((name, ("once", "chunk", "shard")[kind]) for name, kind in _PHASES)

    @property
    def n_chunks(self) -> int:
        return self.ks.n_chunks

    cdef Py_ssize_t _items(self, int phase):
        kind = _PHASES[phase][1]
        return 1 if kind == 0 else (self.ks.n_chunks if kind == 1 else DPS_KEYSHARDS)

    cdef int _claim(self, int phase, object item) except -1:
        """Phase `phase` may start on piece `item`: every piece of the phase before has finished,
        and no call took this piece."""
        if not self.initialised:
            raise RuntimeError(f"column {self.name!r}: no column read (or its result already taken)")
        if self.failed:
            raise RuntimeError(f"column {self.name!r}: an earlier phase failed; start over")
        if phase != self.phase:
            if phase != self.phase + 1 or self.left != 0:
                raise RuntimeError(f"{_PHASES[phase][0]}() out of order: {_PHASES[self.phase][0]}() has "
                                   f"{self.left} pieces to go")
            self.phase = phase
            self.left = self._items(phase)
            self.claimed = np.zeros(self.left, dtype=np.bool_)
        cdef Py_ssize_t i = check_int("piece", item, 0, self._items(phase) - 1)
        if self.claimed[i]:
            raise RuntimeError(f"{_PHASES[phase][0]}() was already called on piece {i}")
        self.claimed[i] = True
        return 0

    cdef int _done(self, int rc) except -1:
        if rc != DPS_OK:
            self.failed = True
            dps_keyshards_fail(&self.ks)  # the store: released, or broken if the maps changed
            if rc == DPS_ERR_KEYSHARDS_STAGE:
                raise RuntimeError(f"column {self.name!r}: a phase ran out of order")
            return _check_keymap(rc, self.name, self.row_offset + self.ks.bad_row)
        self.left -= 1
        return 0

    cdef uint32_t *_codes(self):
        cdef uint32_t[::1] view = self.codes
        return &view[0] if view.shape[0] else NULL

    def count(self, object chunk) -> None:
        self._claim(0, chunk)
        cdef size_t c = chunk
        cdef uint32_t *codes = self._codes()
        cdef int rc
        with nogil:
            rc = dps_keyshards_count(&self.ks, c, codes)
        self._done(rc)

    def layout(self) -> None:
        self._claim(1, 0)
        cdef uint32_t *codes = self._codes()
        cdef int rc
        with nogil:
            rc = dps_keyshards_layout(&self.ks, codes)
        self._done(rc)

    def scatter(self, object chunk) -> None:
        self._claim(2, chunk)
        cdef size_t c = chunk
        cdef int rc
        with nogil:
            rc = dps_keyshards_scatter(&self.ks, c)
        self._done(rc)

    cdef int _claim_shards(self, int phase, object shard, object end, size_t *first, size_t *last) except -1:
        """Claim the shards [shard, end) (end None: shard alone) of a per-shard phase: one call
        may take a range, so that the Python hand-out is paid per range, not per shard."""
        cdef Py_ssize_t a = check_int("shard", shard, 0, DPS_KEYSHARDS - 1)
        cdef Py_ssize_t b = a + 1 if end is None else check_int("end", end, a + 1, DPS_KEYSHARDS)
        cdef Py_ssize_t i
        self._claim(phase, a)  # the phase's order checked, shard a taken
        for i in range(a + 1, b):  # the rest checked before any is taken: a refused range takes none
            if self.claimed[i]:
                self.claimed[a] = False
                raise RuntimeError(f"{_PHASES[phase][0]}() was already called on piece {i}")
        for i in range(a + 1, b):
            self.claimed[i] = True
        first[0] = <size_t>a
        last[0] = <size_t>b
        return 0

    cdef int _done_shards(self, int rc, size_t first, size_t last) except -1:
        """After a per-shard phase ran on [first, last): each shard done, or the error."""
        if rc != DPS_OK:
            return self._done(rc)
        self.left -= <Py_ssize_t>(last - first)
        return 0

    def encode(self, object shard, object end=None) -> None:
        """The encode phase on shard ``shard`` (or the shards [shard, end))."""
        cdef size_t first, last, s
        self._claim_shards(3, shard, end, &first, &last)
        cdef uint32_t *codes = self._codes()
        cdef int rc = DPS_OK
        with nogil:
            s = first
            while s < last and rc == DPS_OK:
                rc = dps_keyshards_encode(&self.ks, s, codes)
                s += 1
        self._done_shards(rc, first, last)

    def rank_count(self, object chunk) -> None:
        self._claim(4, chunk)
        cdef size_t c = chunk
        cdef uint32_t *codes = self._codes()
        cdef int rc
        with nogil:
            rc = dps_keyshards_rank_count(&self.ks, c, codes)
        self._done(rc)

    def rank_layout(self) -> None:
        self._claim(5, 0)
        cdef int rc
        with nogil:
            rc = dps_keyshards_rank_layout(&self.ks)
        self._done(rc)
        self.new_rows = np.empty(self.ks.n_codes, dtype=np.uint32)

    def rank(self, object chunk) -> None:
        self._claim(6, chunk)
        cdef size_t c = chunk
        cdef uint32_t *codes = self._codes()
        cdef uint32_t[::1] rows = self.new_rows
        cdef uint32_t *at = &rows[0] if rows.shape[0] else NULL
        cdef int rc
        with nogil:
            rc = dps_keyshards_rank(&self.ks, c, codes, at)
        self._done(rc)

    def translate(self, object shard, object end=None) -> None:
        """The translate phase on shard ``shard`` (or the shards [shard, end))."""
        cdef size_t first, last, s
        self._claim_shards(7, shard, end, &first, &last)
        cdef int rc = DPS_OK
        with nogil:
            s = first
            while s < last and rc == DPS_OK:
                rc = dps_keyshards_translate(&self.ks, s)
                s += 1
        self._done_shards(rc, first, last)

    def finish(self, object chunk) -> None:
        self._claim(8, chunk)
        cdef size_t c = chunk
        cdef uint32_t *codes = self._codes()
        cdef int rc
        with nogil:
            rc = dps_keyshards_finish(&self.ks, c, codes)
        self._done(rc)

    def run(self):
        """Every phase on this thread in one call (a small batch), then :meth:`result`."""
        self._claim(0, 0)
        if self.ks.n_chunks != 1:
            raise RuntimeError("run() codes a column of one chunk")
        new_rows = np.empty(len(self.codes), dtype=np.uint32)
        cdef uint32_t[::1] rows = new_rows
        cdef uint32_t *at = &rows[0] if rows.shape[0] else NULL
        cdef uint32_t *codes = self._codes()
        cdef int rc
        with nogil:
            rc = dps_keyshards_run(&self.ks, codes, at)
        self._done(rc)
        self.new_rows = new_rows[:self.ks.n_codes]
        self.phase = len(_PHASES) - 1
        self.left = 0
        return self.result()

    def result(self):
        """(codes, new_rows), once every phase is done: as KeyMap.encode_fixed on an empty map, or
        with a store as its map would continue them (new_rows[k]: the first row of code
        ``len(store) - len(new_rows) + k``); the working memory is freed."""
        if self.phase != len(_PHASES) - 1 or self.left != 0 or self.failed:
            raise RuntimeError("result() needs every phase done first")
        if dps_keyshards_commit(&self.ks) != DPS_OK:
            raise RuntimeError("result() needs every phase done first")
        dps_keyshards_free(&self.ks)
        self.initialised = False
        return self.codes, self.new_rows


cdef class ShardedKeyCodes(_ShardedCodes):
    """The codes KeyMap("word") would give one fixed-width column (values of 1, 2, 4 or 8 bytes
    from element `offset` of the Arrow buffers; validity None: no nulls) when the map is empty:
    0, 1, 2, ... in order of first appearance, nulls sharing one code, computed in phases whose
    pieces may run on different threads at once (see _ShardedCodes). ``seed`` places values in
    shards and slots, never codes."""

    def __init__(self, object n, object offset, object validity, object values, object width, object n_chunks,
                 object seed, object name="column", KeyStore store=None):
        self.name = name
        n, offset, width, n_chunks = _sizes(name, n, offset, width, n_chunks)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or n >= DPS_CODE_LIMIT or width not in (1, 2, 4, 8):
            raise ValueError(f"column {name!r}: bad sizes n={n}, offset={offset}, width={width} "
                             "(values of 1, 2, 4 or 8 bytes)")
        self._check(n, offset, n_chunks, name)
        cdef uint64_t c_seed = check_int("seed", seed, 0, U64_MAX)
        cdef const uint8_t *valid = _buffer(validity, 0 if validity is None else (offset + n + 7) // 8,
                                            "validity", name)
        cdef const uint8_t *vals = _buffer(values, (offset + n) * width, "values", name)
        if vals != NULL:
            vals += <size_t>offset * <size_t>width
        cdef int rc = dps_keyshards_init(&self.ks, <size_t>n, <size_t>width, vals, valid, <size_t>offset,
                                         <size_t>n_chunks, c_seed)
        self._ready(rc, n, offset, n_chunks, (validity, values), store)


cdef class ShardedStringCodes(_ShardedCodes):
    """The codes KeyMap("bytes").encode_var would give one column of variable-length values (the
    Arrow string/binary layout: n + 1 offsets of 4 bytes, or 8 when ``offsets64``, from element
    `offset`, into ``data``; validity None: no nulls) when the map is empty, computed in phases
    whose pieces may run on different threads at once (see _ShardedCodes). Offsets decreasing or
    past the data are refused by ``layout()`` with a ValueError naming the first bad row, as
    KeyMap does. ``seed`` places values in shards and slots, never codes."""

    def __init__(self, object n, object offset, object validity, object offsets, bint offsets64, object data,
                 object n_chunks, object seed, object name="column", KeyStore store=None):
        self.name = name
        n, offset, n_chunks = _sizes(name, n, offset, n_chunks)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or n >= DPS_CODE_LIMIT:
            raise ValueError(f"column {name!r}: bad sizes n={n}, offset={offset} (at most "
                             f"{DPS_CODE_LIMIT - 1} rows)")
        self._check(n, offset, n_chunks, name)
        cdef uint64_t c_seed = check_int("seed", seed, 0, U64_MAX)
        cdef size_t osize = 8 if offsets64 else 4
        cdef const uint8_t *valid = _buffer(validity, 0 if validity is None else (offset + n + 7) // 8,
                                            "validity", name)
        cdef const uint8_t *offs = _buffer(offsets, (offset + n + 1) * osize if n else 0, "offsets", name)
        cdef const uint8_t[::1] data_view
        cdef const uint8_t *dat = NULL
        cdef size_t data_len = 0
        if data is not None:
            data_view = _bytes_view(data, "data", name)
            data_len = <size_t>data_view.shape[0]
            if data_len:
                dat = &data_view[0]
        if offs != NULL:
            offs += <size_t>offset * osize
        cdef int rc = dps_keyshards_init_var(&self.ks, <size_t>n, <const void *>offs, offsets64, dat, data_len, valid,
                                             <size_t>offset, <size_t>n_chunks, c_seed)
        self._ready(rc, n, offset, n_chunks, (validity, offsets, data), store)


# ------------------------------------------------ one in-memory input, integer users (csrc/radix_pairs.h)

cdef extern from "radix_pairs.h" nogil:
    enum: DPS_ERR_RADIX_STAGE
    enum: DPS_ERR_RADIX_LARGE
    enum: DPS_RADIX_COMPACT
    ctypedef struct dps_radix_pairs:
        int stage
        size_t n_rows
        size_t n_buckets
        size_t counted
        size_t n_pairs
        size_t n_users
        uint32_t *partitions
        uint64_t *ends
    int dps_radix_init(dps_radix_pairs *r, size_t n_rows, uint64_t seed)
    void dps_radix_free(dps_radix_pairs *r)
    int dps_radix_count(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n)
    int dps_radix_layout(dps_radix_pairs *r)
    int dps_radix_scatter_users(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, uint64_t *places)
    int dps_radix_scatter_codes(dps_radix_pairs *r, const uint64_t *places, const uint32_t *codes, size_t n)
    int dps_radix_scatter_user_codes(dps_radix_pairs *r, const uint8_t *values, size_t width, const uint32_t *codes,
                                     size_t n)
    int dps_radix_count_piece(const dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n,
                              size_t *hist)
    int dps_radix_layout_pieces(dps_radix_pairs *r, size_t *hist, size_t n_pieces)
    int dps_radix_scatter_piece(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n,
                                const size_t *start, const size_t *to, const uint32_t *codes)
    int dps_radix_ready(dps_radix_pairs *r)
    int dps_radix_group(dps_radix_pairs *r, size_t first, size_t last)
    int dps_radix_compact(dps_radix_pairs *r)
    void dps_radix_shard_users(const dps_radix_pairs *r, size_t shard, size_t n_shards, size_t *first_user,
                               size_t *last_user)
    int dps_radix_bound(dps_radix_pairs *r, dps_rng *s, size_t first_user, size_t last_user, uint64_t kappa,
                        uint64_t cap, int64_t *counts, size_t n_partitions, int shared)
    size_t dps_radix_bytes(const dps_radix_pairs *r)


cdef int _check_radix(int rc, object name) except -1:
    if rc == DPS_OK:
        return 0
    if rc == DPS_ERR_NOMEM:
        raise MemoryError(f"out of memory while grouping the rows of {name!r} by user")
    if rc == DPS_ERR_RADIX_STAGE:
        raise RuntimeError(f"RadixPairs ({name!r}): a step was called out of order, or the rows of "
                           "count() and scatter_users() differ (count every piece, layout(), "
                           "scatter_users and scatter_codes every piece in the same order, ready(), "
                           "group every bucket once, compact(), then finish)")
    if rc == DPS_ERR_RADIX_LARGE:
        raise ValueError(f"column {name!r}: more than 2**32 - 2 rows fall in one bucket; feed the "
                         "rows in batches (RowCounter.feed) instead of as one final batch")
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError("a partition code is out of range (partition codes must be < n_partitions)")
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("bad arguments: widths must be 1, 2, 4 or 8 and max_partitions_contributed >= 1")
    return check_status(rc)


cdef class RadixPairs:
    """The distinct (user, partition) pairs of one in-memory input whose privacy units are
    integers, grouped by user through radix buckets (csrc/radix_pairs.h): ``count`` every piece
    of the users column, ``layout``, ``scatter_users`` every piece again in the same order (it
    returns each row's place) and ``scatter_codes`` each piece's partition codes at those places
    (one thread may run each at once), ``ready``, ``group`` every bucket once (two threads may
    group disjoint ranges at once), ``compact``, then ``finish`` each shard (two threads may
    finish different shards at once) or read ``groups``. Users get no global code: which bucket
    a user falls in depends only on its value, so results with the deterministic test generator
    depend only on the data. A step that fails half-way leaves the object unusable (later steps
    raise RuntimeError)."""

    cdef dps_radix_pairs r
    cdef bint initialised
    cdef int busy               # -1: one exclusive call running; > 0: that many shared calls
    cdef bint users_busy        # a scatter_users call is running (it moves the bucket cursors)
    cdef bint codes_busy        # a scatter_codes call is running
    cdef object claimed_buckets
    cdef object claimed_shards
    cdef readonly object name

    def __cinit__(self, object n_rows, object seed, object name="privacy unit"):
        _non_negative("n_rows", n_rows)
        cdef size_t rows = check_int("n_rows", n_rows, 0, 2**63 - 1)
        cdef uint64_t c_seed = check_int("seed", seed, 0, U64_MAX)
        self.initialised = False
        self.busy = 0
        self.users_busy = False
        self.codes_busy = False
        self.name = name
        cdef int rc = dps_radix_init(&self.r, rows, c_seed)
        self.initialised = True
        _check_radix(rc, name)
        self.claimed_buckets = np.zeros(self.r.n_buckets, dtype=np.bool_)
        self.claimed_shards = set()

    def __dealloc__(self):
        if self.initialised:
            dps_radix_free(&self.r)
            self.initialised = False

    def __repr__(self):
        return (f"RadixPairs({self.name!r}, {self.r.n_rows} rows, {self.r.n_buckets} buckets, "
                f"{self.r.n_users} users, {self.r.n_pairs} distinct pairs)")

    @property
    def n_buckets(self) -> int:
        return self.r.n_buckets

    @property
    def n_pairs(self) -> int:
        """Distinct (user, partition) pairs (0 before compact)."""
        return self.r.n_pairs

    @property
    def n_users(self) -> int:
        """Distinct users (0 before compact)."""
        return self.r.n_users

    @property
    def nbytes(self) -> int:
        return dps_radix_bytes(&self.r)

    cdef int _enter(self, bint shared) except -1:
        if self.busy < 0 or (self.busy > 0 and not shared):
            raise RuntimeError("a RadixPairs step cannot run while another one does (only group() on "
                               "disjoint buckets, and finish() on different shards, may overlap)")
        self.busy = self.busy + 1 if shared else -1
        return 0

    cdef void _leave(self, bint shared) noexcept:
        self.busy = self.busy - 1 if shared else 0

    cdef const uint8_t *_values(self, object n, object offset, object values, object width) except? NULL:
        n, offset, width = _sizes(self.name, n, offset, width)
        if n < 0 or not 0 <= offset <= MAX_OFFSET or width not in (1, 2, 4, 8):
            raise ValueError(f"column {self.name!r}: bad sizes n={n}, offset={offset}, width={width} "
                             "(privacy units here must be integers of 1, 2, 4 or 8 bytes)")
        cdef const uint8_t *vals = _buffer(values, (offset + n) * width, "values", self.name)
        if vals != NULL:
            vals += <size_t>offset * <size_t>width
        return vals

    def count(self, object n, object offset, object values, object width) -> None:
        """Step 1: count n integer user values of `width` bytes from element `offset` of an
        Arrow values buffer (nulls must have been removed)."""
        cdef const uint8_t *vals = self._values(n, offset, values, width)
        cdef size_t sn = <size_t>n, sw = <size_t>width
        cdef int rc = DPS_OK
        if sn == 0:
            return
        self._enter(False)
        try:
            with nogil:
                rc = dps_radix_count(&self.r, vals, sw, sn)
        finally:
            self._leave(False)
        _check_radix(rc, self.name)

    def layout(self) -> None:
        """Step 2, after every row was counted."""
        cdef int rc
        self._enter(False)
        try:
            with nogil:
                rc = dps_radix_layout(&self.r)
        finally:
            self._leave(False)
        _check_radix(rc, self.name)

    def scatter_users(self, object n, object offset, object values, object width, bint places=True):
        """Step 3a: the values of `count` again, in the same order; returns each row's place
        (uint64), for scatter_codes, or None with ``places=False`` (for scatter_user_codes).
        May run while scatter_codes or scatter_user_codes runs on another thread."""
        cdef const uint8_t *vals = self._values(n, offset, values, width)
        cdef size_t sn = <size_t>n, sw = <size_t>width
        out = np.empty(sn if places else 0, dtype=np.uint64)
        cdef uint64_t[::1] p = out
        cdef uint64_t *at = &p[0] if places and sn else NULL
        cdef int rc = DPS_OK
        if sn == 0:
            return out if places else None
        if self.users_busy:
            raise RuntimeError("scatter_users() cannot run on two threads at once")
        self._enter(True)
        self.users_busy = True
        try:
            with nogil:
                rc = dps_radix_scatter_users(&self.r, vals, sw, sn, at)
        finally:
            self.users_busy = False
            self._leave(True)
        _check_radix(rc, self.name)
        return out if places else None

    def scatter_user_codes(self, object n, object offset, object values, object width, object codes) -> None:
        """Step 3b without places: the users of a piece (the values `count` and `scatter_users`
        get, in the same order) with each row's partition code, put where that row's user goes:
        the k-th row of a bucket lands at the bucket's k-th place on both sides, so this needs
        only the layout and may run while, or before, scatter_users does on another thread.
        Not to be mixed with scatter_codes."""
        cdef const uint8_t *vals = self._values(n, offset, values, width)
        cdef size_t sn = <size_t>n, sw = <size_t>width
        cdef const uint32_t[::1] c = check_array("codes", codes, [np.uint32], copy=True)
        if <size_t>c.shape[0] != sn:
            raise ValueError(f"codes must hold one code per user value ({sn}), got {c.shape[0]}")
        cdef int rc = DPS_OK
        if sn == 0:
            return
        if self.codes_busy:
            raise RuntimeError("scatter_user_codes() cannot run on two threads at once")
        self._enter(True)
        self.codes_busy = True
        try:
            with nogil:
                rc = dps_radix_scatter_user_codes(&self.r, vals, sw, &c[0], sn)
        finally:
            self.codes_busy = False
            self._leave(True)
        _check_radix(rc, self.name)

    def scatter_codes(self, object places, object codes) -> None:
        """Step 3b: each row's partition code at the place scatter_users gave it."""
        cdef const uint64_t[::1] p = check_array("places", places, [np.uint64], copy=True)
        cdef const uint32_t[::1] c = check_array("codes", codes, [np.uint32], copy=True)
        cdef size_t sn = <size_t>p.shape[0]
        if <size_t>c.shape[0] != sn:
            raise ValueError(f"codes must hold one code per place ({sn}), got {c.shape[0]}")
        cdef int rc = DPS_OK
        if sn == 0:
            return
        if self.codes_busy:
            raise RuntimeError("scatter_codes() cannot run on two threads at once")
        self._enter(True)
        self.codes_busy = True
        try:
            with nogil:
                rc = dps_radix_scatter_codes(&self.r, &p[0], &c[0], sn)
        finally:
            self.codes_busy = False
            self._leave(True)
        if rc == DPS_ERR_BAD_ARG:
            raise ValueError(f"a place is out of range (places must be < {self.r.n_rows}, as "
                             "scatter_users returns them)")
        _check_radix(rc, self.name)

    def piece_histograms(self, object n_pieces):
        """A zeroed histogram per piece (rows: pieces in row order; columns: buckets), for
        count_piece, layout_pieces and scatter_piece."""
        n = check_int("n_pieces", n_pieces, 0, 2**31)
        return np.zeros((n, self.r.n_buckets), dtype=np.uintp)

    cdef size_t *_hist_row(self, object hist, object piece) except NULL:
        arr = check_array("hist", hist, [np.uintp], ndim=2, writable=True)
        if arr.shape[1] != self.r.n_buckets:
            raise ValueError(f"hist must have one column per bucket ({self.r.n_buckets}), got {arr.shape[1]}")
        cdef Py_ssize_t p = check_int("piece", piece, 0, arr.shape[0] - 1)
        cdef size_t[:, ::1] view = arr
        return &view[p, 0]

    def count_piece(self, object n, object offset, object values, object width, object hist, object piece) -> None:
        """Step 1 for one piece of the users column: its rows per bucket into ``hist[piece]``.
        Calls on different pieces may run at once (each writes its own row)."""
        cdef const uint8_t *vals = self._values(n, offset, values, width)
        cdef size_t *row = self._hist_row(hist, piece)
        cdef size_t sn = <size_t>n, sw = <size_t>width
        cdef int rc = DPS_OK
        if sn == 0:
            return
        self._enter(True)
        try:
            with nogil:
                rc = dps_radix_count_piece(&self.r, vals, sw, sn, row)
        finally:
            self._leave(True)
        _check_radix(rc, self.name)

    def layout_pieces(self, object hist) -> None:
        """Step 2 from the pieces' histograms (every piece counted, in row order); each row of
        ``hist`` becomes its piece's first place in every bucket."""
        arr = check_array("hist", hist, [np.uintp], ndim=2, writable=True)
        if arr.shape[1] != self.r.n_buckets:
            raise ValueError(f"hist must have one column per bucket ({self.r.n_buckets}), got {arr.shape[1]}")
        cdef size_t[:, ::1] view = arr
        cdef size_t pieces = <size_t>arr.shape[0]
        cdef size_t *at = &view[0, 0] if pieces else NULL
        cdef int rc
        self._enter(False)
        try:
            with nogil:
                rc = dps_radix_layout_pieces(&self.r, at, pieces)
        finally:
            self._leave(False)
        _check_radix(rc, self.name)

    def scatter_piece(self, object n, object offset, object values, object width, object hist, object piece,
                      object codes=None) -> None:
        """Step 3 for one piece (after layout_pieces): its users' hashes, or with ``codes`` its
        partition codes, where a scatter in row order would put them. Pieces, and the two sides
        of a piece, may be scattered at once on any threads, in any order; each side of each
        piece once."""
        cdef const uint8_t *vals = self._values(n, offset, values, width)
        arr = check_array("hist", hist, [np.uintp], ndim=2, writable=True)
        if arr.shape[1] != self.r.n_buckets:
            raise ValueError(f"hist must have one column per bucket ({self.r.n_buckets}), got {arr.shape[1]}")
        cdef Py_ssize_t p = check_int("piece", piece, 0, arr.shape[0] - 1)
        cdef size_t[:, ::1] view = arr
        cdef const size_t *start = &view[p, 0]
        cdef const size_t *to = &view[p + 1, 0] if p + 1 < arr.shape[0] else NULL
        cdef size_t sn = <size_t>n, sw = <size_t>width
        cdef const uint32_t[::1] c
        cdef const uint32_t *cp = NULL
        if codes is not None:
            c = check_array("codes", codes, [np.uint32], copy=True)
            if <size_t>c.shape[0] != sn:
                raise ValueError(f"codes must hold one code per user value ({sn}), got {c.shape[0]}")
            cp = &c[0] if sn else NULL
        cdef int rc = DPS_OK
        if sn == 0:
            return
        self._enter(True)
        try:
            with nogil:
                rc = dps_radix_scatter_piece(&self.r, vals, sw, sn, start, to, cp)
        finally:
            self._leave(True)
        if rc == DPS_ERR_BAD_ARG:
            raise ValueError("hist is not the one layout_pieces laid out (a place outside its bucket)")
        _check_radix(rc, self.name)

    def ready(self) -> None:
        """After every row's user and code were scattered: grouping may start."""
        cdef int rc
        self._enter(False)
        try:
            rc = dps_radix_ready(&self.r)
        finally:
            self._leave(False)
        _check_radix(rc, self.name)

    def group(self, object first, object last) -> None:
        """Step 4 for buckets [first, last); calls on disjoint ranges may run at once."""
        cdef size_t lo = check_int("first", first, 0, self.r.n_buckets)
        cdef size_t hi = check_int("last", last, lo, self.r.n_buckets)
        claimed = self.claimed_buckets[lo:hi]
        if claimed.any():
            raise RuntimeError(f"buckets {lo}..{hi} overlap buckets already grouped or being grouped")
        cdef int rc
        self._enter(True)
        claimed[:] = True
        try:
            with nogil:
                rc = dps_radix_group(&self.r, lo, hi)
        finally:
            self._leave(True)
        _check_radix(rc, self.name)

    def compact(self) -> None:
        """Step 5, after every bucket was grouped."""
        cdef int rc
        self._enter(False)
        try:
            with nogil:
                rc = dps_radix_compact(&self.r)
        finally:
            self._leave(False)
        _check_radix(rc, self.name)

    def groups(self):
        """(ends, partitions): user u's distinct partition codes are partitions[ends[u - 1]:ends[u]]
        (ends[-1] read as 0), users bucket by bucket, each in order of first appearance in its
        bucket, and each user's partitions in order of first appearance. No randomness is used."""
        if self.r.stage != DPS_RADIX_COMPACT or self.claimed_shards:
            raise RuntimeError("groups() needs compact() first, and no finish()")
        ends = np.empty(self.r.n_users, dtype=np.uint64)
        parts = np.empty(self.r.n_pairs, dtype=np.uint32)
        if self.r.n_users:
            memcpy(<void *><size_t>ends.ctypes.data, self.r.ends, self.r.n_users * sizeof(uint64_t))
        if self.r.n_pairs:
            memcpy(<void *><size_t>parts.ctypes.data, self.r.partitions, self.r.n_pairs * sizeof(uint32_t))
        return ends.astype(np.uintp, copy=False), parts

    def finish(self, object shard, object n_shards, object n_partitions, object kappa, object cap,
               object test_state, object out=None, bint shared=False):
        """int64 counts per partition code from the users of shard `shard` of `n_shards` (equal
        ranges of buckets), each bounded to ``kappa`` partitions chosen uniformly with the package
        CSPRNG, saturated at ``cap`` (None: exact). ``test_state`` is ``rng._test_state`` (each
        shard needs its own). Calls on different shards may run at once; each shard once.
        ``out``: an int64 array of ``n_partitions`` counts to add to (returned) instead of a new
        one; ``shared``: other threads add to the same ``out`` at the same time (atomic adds)."""
        cdef size_t c_shards = check_int("n_shards", n_shards, 1, 1 << 16)
        cdef size_t c_shard = check_int("shard", shard, 0, c_shards - 1)
        _non_negative("n_partitions", n_partitions)
        cdef Py_ssize_t n_parts = check_int("n_partitions", n_partitions, 0, 2**63 - 1)
        kappa = check_int("max_partitions_contributed (kappa)", kappa, -2**64, 2**64)
        if not 1 <= kappa < 2 ** 64:
            raise ValueError(f"max_partitions_contributed must be >= 1, got {kappa}")
        if cap is not None:
            cap = check_int("cap (the count cap)", cap, -2**64, 2**64)
            if not 1 <= cap < 2 ** 63:
                raise ValueError(f"count cap must be None or in [1, 2**63), got {cap}")
        if self.r.stage != DPS_RADIX_COMPACT:
            raise RuntimeError("finish() needs compact() first")
        if (c_shard, c_shards) in self.claimed_shards or any(s != c_shards for _, s in self.claimed_shards):
            raise RuntimeError(f"shard {shard} of {n_shards} was already finished (or shards of another split were)")
        cdef uint64_t k = <uint64_t>kappa
        cdef uint64_t c = 0 if cap is None else <uint64_t>cap
        cdef size_t first_user = 0, last_user = 0
        dps_radix_shard_users(&self.r, c_shard, c_shards, &first_user, &last_user)
        counts = _counts_out(out, n_parts)
        cdef int64_t[::1] view = counts
        cdef int c_shared = 1 if shared else 0
        cdef int rc
        cdef dps_rng *s
        self._enter(True)
        self.claimed_shards.add((c_shard, c_shards))
        try:
            s = begin_batch(test_state)
            with nogil:
                rc = dps_radix_bound(&self.r, s, first_user, last_user, k, c, &view[0], <size_t>n_parts, c_shared)
                end_batch(s)
            finish_batch(test_state)
        finally:
            self._leave(True)
        _check_radix(rc, self.name)
        return counts[:n_parts]

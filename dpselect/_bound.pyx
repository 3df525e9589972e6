# cython: language_level=3
"""Bindings to the row-level bounding kernel csrc/bound_rows.{c,h} (each user's partitions and
rows per partition bounded once, every statistic of a grouped release summed from the kept rows;
docs/privacy/aggregate.md). Thin: checks arguments, releases the GIL around the loop, maps status
codes to exceptions. Use :mod:`dpselect.aggregation`, not this."""
import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, free

from dpselect._csrc cimport dps_rng, DPS_OK, DPS_ERR_NOMEM
from dpselect._rng cimport begin_batch, end_batch, finish_batch, check_status
from dpselect._boundary import check_array, check_disjoint, check_int, U32_MAX


cdef extern from "bound_rows.h" nogil:
    ctypedef struct dps_bound_stats:
        uint64_t rows
        uint64_t rows_kept
        uint64_t pairs
        uint64_t pairs_kept
        uint64_t users
    int dps_bound_rows(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions, uint32_t n_users,
                       uint32_t n_partitions, uint32_t shard_mask, uint32_t shard, uint64_t kappa, uint64_t linf,
                       size_t n_values, const int64_t *const *values, int64_t *out_users, int64_t *out_rows,
                       uint64_t *out_sums, int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats,
                       size_t *bad_row)
    ctypedef struct dps_square_spec:
        size_t source
        int64_t mid
        unsigned shift
    enum: DPS_ERR_SQUARE_RANGE
    int dps_bound_rows_range(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                             const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                             uint32_t n_partitions, uint64_t kappa, uint64_t linf, size_t n_values,
                             const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                             int64_t *out_users, int64_t *out_rows, uint64_t *out_sums,
                             int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats, size_t *bad_row)
    int dps_shard_rows_count(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                             size_t n_shards, size_t *counts, size_t *bad_row)
    int dps_shard_rows_place(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                             size_t n_shards, size_t *cursors, const size_t *limits, uint32_t *rows,
                             const uint32_t *other, uint32_t *codes_out, uint32_t *other_out)
    int dps_bound_rows_mark(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                            const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                            uint32_t n_partitions, uint64_t kappa, uint64_t linf, uint8_t *marks,
                            dps_bound_stats *stats, size_t *bad_row)
    enum: DPS_MARK_KEPT
    enum: DPS_MARK_USER
    enum: DPS_MARK_BEFORE

cdef extern from "partition_sums.h" nogil:
    int dps_partition_sums(const uint32_t *partitions, uint8_t *marks, size_t n, const uint32_t *rows, size_t m,
                           uint32_t first, uint32_t last, uint32_t n_partitions, size_t n_values,
                           const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                           int64_t *out_users, int64_t *out_rows, uint64_t *out_sums, int64_t *out_users_before,
                           size_t *bad_row)

MARK_KEPT = DPS_MARK_KEPT
MARK_USER = DPS_MARK_USER
MARK_BEFORE = DPS_MARK_BEFORE

cdef extern from "count.h" nogil:
    enum: DPS_ERR_BAD_CODE
    enum: DPS_ERR_BAD_ARG


cdef const int64_t **_value_pointers(list arrays, size_t n) except NULL:
    """A malloc'd array of each value column's first element (NULL for empty columns), for the
    kernel; the caller frees it. The arrays stay alive in the caller's list."""
    cdef const int64_t **ptrs = <const int64_t **>malloc(max(len(arrays), 1) * sizeof(int64_t *))
    if ptrs == NULL:
        raise MemoryError()
    cdef const int64_t[::1] one
    cdef size_t i
    for i in range(len(arrays)):
        one = arrays[i]
        ptrs[i] = &one[0] if n else NULL
    return ptrs


def _square_list(object squares, list arrays):
    """``squares`` checked: (source, mid, shift) triples over the value columns ``arrays``."""
    square_list = [(check_int(f"squares[{j}] source", t[0], 0, max(len(arrays) - 1, 0)),
                    check_int(f"squares[{j}] mid", t[1], -2**62, 2**62), check_int(f"squares[{j}] shift", t[2], 0, 62))
                   for j, t in enumerate(squares)]
    if square_list and not arrays:
        raise ValueError("squares need a value column to square")
    return square_list


cdef dps_square_spec *_square_specs(list square_list) except NULL:
    """A malloc'd array of the checked ``square_list``'s specs, for the kernel; the caller frees it."""
    cdef size_t n_squares = len(square_list)
    cdef dps_square_spec *specs = <dps_square_spec *>malloc(max(n_squares, 1) * sizeof(dps_square_spec))
    if specs == NULL:
        raise MemoryError()
    cdef size_t i
    for i in range(n_squares):
        specs[i].source = <size_t>square_list[i][0]
        specs[i].mid = <int64_t>square_list[i][1]
        specs[i].shift = <unsigned>square_list[i][2]
    return specs


_SQUARE_RANGE = ("a kept value lies more than 2**31 units from its square column's mid: its square would not fit "
                 "64-bit integers")


cdef dict _totals(int rc, dps_bound_stats stats, str bad_code):
    """A bounding call's status as an exception (``bad_code``: what a bad code means there), else
    its row and pair totals."""
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(bad_code)
    if rc == DPS_ERR_NOMEM:
        raise MemoryError("dpselect's bounding kernel ran out of memory")
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("bad bounding arguments")
    check_status(rc)
    return {"rows": stats.rows, "rows_kept": stats.rows_kept, "pairs": stats.pairs,
            "pairs_kept": stats.pairs_kept, "users": stats.users}


def bound_rows(object users, object partitions, object n_users,
               object n_partitions, object kappa, object linf, list values, object test_state,
               object shard_mask=0, object shard=0, bint users_before=False,
               object kept=None):
    """Bound every user of the shard to ``kappa`` partitions and ``linf`` rows per partition
    (uniform subsets, package CSPRNG) and sum per partition over the kept rows.

    ``values`` is a list of C-contiguous int64 arrays, one per value column, each as long as
    ``users``. Returns ``(users, rows, sums, users_before, stats)``: int64 arrays of
    ``n_partitions``, except ``sums``, the exact sums as signed 128-bit integers: a uint64 array of
    ``len(values) × n_partitions × 2`` holding each sum's low then high word (two's complement;
    :class:`dpselect.aggregation.wide.Wide` reads them), so no sum can wrap; ``users_before`` is
    None unless asked; and a dict of row and pair totals. ``kept``, a zeroed uint8 (or bool) array of one
    entry per row, if given, gets 1 for every kept row."""
    users_arr = check_array("users", users, [np.uint32], copy=True)
    partitions_arr = check_array("partitions", partitions, [np.uint32], copy=True)
    cdef const uint32_t[::1] users_view = users_arr
    cdef const uint32_t[::1] parts_view = partitions_arr
    cdef uint32_t c_users = check_int("n_users", n_users, 0, U32_MAX)
    cdef uint32_t c_parts = check_int("n_partitions", n_partitions, 0, U32_MAX)
    cdef uint32_t c_mask = check_int("shard_mask", shard_mask, 0, U32_MAX)
    cdef uint32_t c_shard = check_int("shard", shard, 0, U32_MAX)
    # Integers first: Cython's C conversion below would truncate a float (1.5 -> 1).
    kappa = check_int("max_partitions_contributed (kappa)", kappa, -2**64, 2**64)
    linf = check_int("max_contributions_per_partition (linf)", linf, -2**64, 2**64)
    cdef size_t n = <size_t>users_view.shape[0]
    if <size_t>parts_view.shape[0] != n:
        raise ValueError(f"users and partitions must have the same length, got {n} and {parts_view.shape[0]}")
    if not 1 <= kappa < 2 ** 64:
        raise ValueError(f"max_partitions_contributed must be >= 1, got {kappa}")
    if not 1 <= linf < 2 ** 64:
        raise ValueError(f"max_contributions_per_partition must be >= 1, got {linf}")
    if c_shard & ~c_mask or c_mask & (c_mask + 1):
        raise ValueError(f"shard_mask must be 2**b - 1 and shard one of its values, got {shard_mask}, {shard}")
    if n >= 2 ** 32:
        raise ValueError(f"at most 2**32 - 1 rows per call, got {n}")
    arrays = [check_array(f"values[{j}]", v, [np.int64], copy=True) for j, v in enumerate(values)]
    for j, v in enumerate(arrays):
        if <size_t>v.shape[0] != n:
            raise ValueError(f"values[{j}] must be a 1-D int64 array of {n} rows, got {v.dtype} {v.shape}")
    cdef size_t n_values = len(arrays)
    cdef Py_ssize_t n_parts = c_parts
    out_users = np.zeros(max(n_parts, 1), dtype=np.int64)
    out_rows = np.zeros(max(n_parts, 1), dtype=np.int64)
    out_sums = np.zeros((max(n_values, 1), max(n_parts, 1), 2), dtype=np.uint64)
    before = np.zeros(max(n_parts, 1), dtype=np.int64) if users_before else None
    cdef int64_t[::1] u_view = out_users
    cdef int64_t[::1] r_view = out_rows
    cdef uint64_t[:, :, ::1] s_view = out_sums
    cdef int64_t[::1] b_view
    cdef int64_t *before_ptr = NULL
    if users_before:
        b_view = before
        before_ptr = &b_view[0]
    cdef const int64_t **value_ptrs = _value_pointers(arrays, n)
    cdef uint8_t *kept_ptr = NULL
    cdef uint8_t[::1] kept_view
    if kept is not None:
        kept_arr = check_array("kept", kept, [np.uint8, np.bool_], writable=True)
        # kept is written while the codes and values are still being read.
        check_disjoint({"kept": kept_arr}, {"users": users_arr, "partitions": partitions_arr,
                                            **{f"values[{j}]": v for j, v in enumerate(arrays)}})
        kept_view = kept_arr.view(np.uint8)
        if <size_t>kept_view.shape[0] != n:
            raise ValueError(f"kept must have one entry per row ({n}), got {kept_view.shape[0]}")
        if n:
            kept_ptr = &kept_view[0]
    cdef const uint32_t *u_ptr = &users_view[0] if n else NULL
    cdef const uint32_t *p_ptr = &parts_view[0] if n else NULL
    cdef uint64_t k = <uint64_t>kappa
    cdef uint64_t l = <uint64_t>linf
    cdef dps_bound_stats stats
    cdef size_t bad = 0
    cdef int rc
    cdef dps_rng *s
    try:
        s = begin_batch(test_state)
        with nogil:
            rc = dps_bound_rows(s, n, u_ptr, p_ptr, c_users, c_parts, c_mask, c_shard, k, l, n_values,
                                value_ptrs, &u_view[0], &r_view[0], &s_view[0, 0, 0], before_ptr, kept_ptr, &stats, &bad)
            end_batch(s)
        finish_batch(test_state)
    finally:
        free(value_ptrs)
    totals = _totals(rc, stats, f"row {bad}: user codes must be < n_users ({n_users}) and partition codes < "
                                f"n_partitions ({n_partitions})")
    return (out_users[:n_parts], out_rows[:n_parts], out_sums[:n_values, :n_parts],
            None if before is None else before[:n_parts], totals)


def _range(name, lo, hi, n):
    lo = check_int(f"{name} start", lo, 0, n)
    hi = check_int(f"{name} end", hi, lo, n)
    return lo, hi


cdef const uint8_t *_marks_pointer(object marks, size_t n, dict inputs) except? NULL:
    """``marks`` checked (None: every row) as a pointer for the kernel; the array stays alive in
    ``inputs``, under "marks"."""
    if marks is None:
        return NULL
    marks_arr = check_array("marks", marks, [np.uint8])
    if <size_t>marks_arr.shape[0] != n:
        raise ValueError(f"marks must have one entry per row ({n}), got {marks_arr.shape[0]}")
    inputs["marks"] = marks_arr
    cdef const uint8_t[::1] view = marks_arr
    return &view[0] if n else NULL


def shard_rows_count(object codes, object lo, object hi, object n_codes, object counts, object marks=None) -> None:
    """Add the rows [lo, hi) of each shard of consecutive codes (code c in shard
    c * len(counts) // n_codes: user codes, or partition codes) to ``counts`` (uintp); with
    ``marks`` (uint8, one per row), only the rows whose mark is nonzero. Calls on different
    ranges, each with its own counts, may run at once."""
    codes_arr = check_array("codes", codes, [np.uint32])
    cdef const uint32_t[::1] u = codes_arr
    cdef size_t a, b
    a, b = _range("rows", lo, hi, codes_arr.shape[0])
    cdef uint32_t c_codes = check_int("n_codes", n_codes, 1, U32_MAX)
    counts_arr = check_array("counts", counts, [np.uintp], writable=True)
    cdef size_t[::1] c = counts_arr
    cdef size_t shards = <size_t>counts_arr.shape[0]
    if shards == 0:
        raise ValueError("counts must have one entry per shard (at least one)")
    inputs = {"codes": codes_arr}
    cdef const uint8_t *marks_ptr = _marks_pointer(marks, <size_t>codes_arr.shape[0], inputs)
    check_disjoint({"counts": counts_arr}, inputs)
    cdef size_t bad = 0
    cdef int rc = DPS_OK
    if b > a:
        with nogil:
            rc = dps_shard_rows_count(&u[0], marks_ptr, a, b, c_codes, shards, &c[0], &bad)
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"row {bad}: codes must be < n_codes ({n_codes})")
    check_status(rc)


def shard_rows_place(object codes, object lo, object hi, object n_codes, object cursors, object limits,
                     object rows, object marks=None, object copies=None) -> None:
    """Write the index of each row of [lo, hi) (with ``marks``, each row whose mark is nonzero)
    at ``rows[cursors[its shard]++]`` (below ``limits[shard]``): with cursors from the prefix
    sums of :func:`shard_rows_count`, each shard's rows in row order. Calls on different ranges,
    each with its own cursors, may run at once.

    ``copies`` = (other, codes_out, other_out), uint32 (not with ``marks``): also write, at each
    row's place, its code into ``codes_out`` and ``other[row]`` into ``other_out`` (as long as
    ``rows``): the shards' own copies of the users' and partitions' codes that
    :func:`bound_rows_mark` reads."""
    codes_arr = check_array("codes", codes, [np.uint32])
    cdef const uint32_t[::1] u = codes_arr
    cdef size_t a, b
    a, b = _range("rows", lo, hi, codes_arr.shape[0])
    cdef uint32_t c_codes = check_int("n_codes", n_codes, 1, U32_MAX)
    cursors_arr = check_array("cursors", cursors, [np.uintp], writable=True)
    limits_arr = check_array("limits", limits, [np.uintp])
    rows_arr = check_array("rows", rows, [np.uint32], writable=True)
    if cursors_arr.shape[0] == 0 or limits_arr.shape[0] != cursors_arr.shape[0]:
        raise ValueError("cursors and limits must have one entry per shard (at least one)")
    if int(limits_arr.max()) > rows_arr.shape[0]:
        raise ValueError(f"limits must be <= len(rows) ({rows_arr.shape[0]})")
    inputs = {"codes": codes_arr, "limits": limits_arr}
    outputs = {"rows": rows_arr, "cursors": cursors_arr}
    cdef const uint8_t *marks_ptr = _marks_pointer(marks, <size_t>codes_arr.shape[0], inputs)
    cdef const uint32_t *other_ptr = NULL
    cdef uint32_t *codes_out_ptr = NULL
    cdef uint32_t *other_out_ptr = NULL
    cdef const uint32_t[::1] o
    cdef uint32_t[::1] co
    cdef uint32_t[::1] oo
    if copies is not None:
        if marks is not None:
            raise ValueError("copies are written for every row: pass marks or copies, not both")
        other, codes_out, other_out = copies
        inputs["other"] = check_array("other", other, [np.uint32])
        outputs["codes_out"] = check_array("codes_out", codes_out, [np.uint32], writable=True)
        outputs["other_out"] = check_array("other_out", other_out, [np.uint32], writable=True)
        if inputs["other"].shape[0] != codes_arr.shape[0]:
            raise ValueError(f"other must have one entry per row ({codes_arr.shape[0]}), got {inputs['other'].shape[0]}")
        if outputs["codes_out"].shape[0] != rows_arr.shape[0] or outputs["other_out"].shape[0] != rows_arr.shape[0]:
            raise ValueError(f"codes_out and other_out must be as long as rows ({rows_arr.shape[0]})")
        o, co, oo = inputs["other"], outputs["codes_out"], outputs["other_out"]
        if codes_arr.shape[0]:
            other_ptr = &o[0]
        if rows_arr.shape[0]:
            codes_out_ptr, other_out_ptr = &co[0], &oo[0]
    check_disjoint(outputs, inputs)
    cdef size_t[::1] c = cursors_arr
    cdef const size_t[::1] l = limits_arr
    cdef uint32_t[::1] r = rows_arr
    cdef size_t shards = <size_t>cursors_arr.shape[0]
    cdef int rc = DPS_OK
    if b > a:
        with nogil:
            rc = dps_shard_rows_place(&u[0], marks_ptr, a, b, c_codes, shards, &c[0], &l[0],
                                      &r[0] if r.shape[0] else NULL, other_ptr, codes_out_ptr, other_out_ptr)
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"codes must be < n_codes ({n_codes})")
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("cursors are not the prefix sums of these rows' shard counts")
    check_status(rc)


def bound_rows_range(object users, object partitions, object n_partitions, object kappa, object linf,
                     list values, object test_state, object rows, object first_user, object last_user,
                     object out=None, bint users_before=False, object kept=None, object squares=()):
    """:func:`bound_rows` for one shard of consecutive user codes: the rows ``rows`` (uint32 row
    indices, each of a user in [first_user, last_user)), bounded user by user in code order with
    ``test_state``'s stream. ``out``, if given, is a previous call's (users, rows, sums,
    users_before) to add to (a thread bounding several shards keeps one set of outputs). Returns
    (users, rows, sums, users_before, stats) as :func:`bound_rows` does.

    ``squares``: (source, mid, shift) triples, each one more column of ``sums`` (after the value
    columns): the exact sum over the kept rows of ((values[source][row] - mid)^2 + 2^(shift-1)) >>
    shift, computed from the value column without an array of its own (a variance's sum of
    squares; csrc/bound_rows.h). Needs |mid| <= 2^62, shift <= 62, and every kept value within
    2^31 of mid (else ValueError)."""
    users_arr = check_array("users", users, [np.uint32])
    partitions_arr = check_array("partitions", partitions, [np.uint32])
    rows_arr = check_array("rows", rows, [np.uint32], copy=True)
    cdef const uint32_t[::1] users_view = users_arr
    cdef const uint32_t[::1] parts_view = partitions_arr
    cdef const uint32_t[::1] rows_view = rows_arr
    cdef uint32_t c_parts = check_int("n_partitions", n_partitions, 0, U32_MAX)
    cdef uint32_t c_first = check_int("first_user", first_user, 0, U32_MAX)
    cdef uint32_t c_last = check_int("last_user", last_user, c_first, U32_MAX)
    kappa = check_int("max_partitions_contributed (kappa)", kappa, -2**64, 2**64)
    linf = check_int("max_contributions_per_partition (linf)", linf, -2**64, 2**64)
    cdef size_t n = <size_t>users_view.shape[0]
    cdef size_t m = <size_t>rows_view.shape[0]
    if <size_t>parts_view.shape[0] != n:
        raise ValueError(f"users and partitions must have the same length, got {n} and {parts_view.shape[0]}")
    if not 1 <= kappa < 2 ** 64:
        raise ValueError(f"max_partitions_contributed must be >= 1, got {kappa}")
    if not 1 <= linf < 2 ** 64:
        raise ValueError(f"max_contributions_per_partition must be >= 1, got {linf}")
    if n >= 2 ** 32:
        raise ValueError(f"at most 2**32 - 1 rows per call, got {n}")
    arrays = [check_array(f"values[{j}]", v, [np.int64]) for j, v in enumerate(values)]
    for j, v in enumerate(arrays):
        if <size_t>v.shape[0] != n:
            raise ValueError(f"values[{j}] must be a 1-D int64 array of {n} rows, got {v.dtype} {v.shape}")
    cdef size_t n_values = len(arrays)
    square_list = _square_list(squares, arrays)
    cdef size_t n_squares = len(square_list)
    cdef size_t n_columns = n_values + n_squares
    cdef Py_ssize_t n_parts = c_parts
    if out is None:
        out_users = np.zeros(max(n_parts, 1), dtype=np.int64)
        out_rows = np.zeros(max(n_parts, 1), dtype=np.int64)
        out_sums = np.zeros((max(n_columns, 1), max(n_parts, 1), 2), dtype=np.uint64)
        before = np.zeros(max(n_parts, 1), dtype=np.int64) if users_before else None
    else:
        out_users, out_rows, out_sums, before = out
        out_users = check_array("out[0]", out_users, [np.int64], writable=True)
        out_rows = check_array("out[1]", out_rows, [np.int64], writable=True)
        out_sums = check_array("out[2]", out_sums, [np.uint64], ndim=3, writable=True)
        if out_users.shape[0] != max(n_parts, 1) or out_rows.shape[0] != max(n_parts, 1) or \
                out_sums.shape != (max(n_columns, 1), max(n_parts, 1), 2):
            raise ValueError("out must be the outputs of a call with the same n_partitions and values")
        if users_before:
            before = check_array("out[3]", before, [np.int64], writable=True)
            if before.shape[0] != max(n_parts, 1):
                raise ValueError("out must be the outputs of a call with the same n_partitions and values")
        else:
            before = None
    cdef int64_t[::1] u_view = out_users
    cdef int64_t[::1] r_view = out_rows
    cdef uint64_t[:, :, ::1] s_view = out_sums
    cdef int64_t[::1] b_view
    cdef int64_t *before_ptr = NULL
    if users_before:
        b_view = before
        before_ptr = &b_view[0]
    cdef uint8_t *kept_ptr = NULL
    cdef uint8_t[::1] kept_view
    if kept is not None:
        kept_arr = check_array("kept", kept, [np.uint8, np.bool_], writable=True)
        check_disjoint({"kept": kept_arr}, {"users": users_arr, "partitions": partitions_arr, "rows": rows_arr,
                                            **{f"values[{j}]": v for j, v in enumerate(arrays)}})
        kept_view = kept_arr.view(np.uint8)
        if <size_t>kept_view.shape[0] != n:
            raise ValueError(f"kept must have one entry per row ({n}), got {kept_view.shape[0]}")
        if n:
            kept_ptr = &kept_view[0]
    cdef const int64_t **value_ptrs = _value_pointers(arrays, n)
    cdef const uint32_t *u_ptr = &users_view[0] if n else NULL
    cdef const uint32_t *p_ptr = &parts_view[0] if n else NULL
    cdef const uint32_t *rows_ptr = &rows_view[0] if m else NULL
    cdef dps_square_spec *square_specs
    try:
        square_specs = _square_specs(square_list)
    except MemoryError:
        free(value_ptrs)
        raise
    cdef uint64_t k = <uint64_t>kappa
    cdef uint64_t l = <uint64_t>linf
    cdef dps_bound_stats stats
    cdef size_t bad = 0
    cdef int rc
    cdef dps_rng *s
    try:
        s = begin_batch(test_state)
        with nogil:
            rc = dps_bound_rows_range(s, n, u_ptr, p_ptr, rows_ptr, m, c_first, c_last, c_parts, k, l, n_values,
                                      value_ptrs, n_squares, square_specs, &u_view[0], &r_view[0], &s_view[0, 0, 0],
                                      before_ptr, kept_ptr, &stats, &bad)
            end_batch(s)
        finish_batch(test_state)
    finally:
        free(value_ptrs)
        free(square_specs)
    if rc == DPS_ERR_SQUARE_RANGE:
        raise ValueError(_SQUARE_RANGE)
    totals = _totals(rc, stats, f"row {bad}: rows must be < len(users), their users in [first_user, last_user) "
                                f"({first_user}, {last_user}) and partition codes < n_partitions ({n_partitions})")
    return out_users, out_rows, out_sums, before, totals


def bound_rows_mark(object users, object partitions, object rows, object n_partitions, object kappa, object linf,
                    object test_state, object first_user, object last_user, object marks):
    """:func:`bound_rows_range`'s bounding of the input rows ``rows`` (uint32, strictly
    increasing), with the same draws, read from the shard's own copies of their codes:
    ``users[j]`` and ``partitions[j]`` are input row ``rows[j]``'s (:func:`shard_rows_place` with ``copies``
    writes them), so the kernel works in arrays of the shard's size. No per-partition outputs:
    every row gets its marks or'ed into ``marks[rows[j]]`` (a zeroed uint8 array of one entry per
    input row, shared by calls on disjoint shards): ``MARK_KEPT`` for a kept row, ``MARK_USER``
    for the row that counts its user among its partition's kept users, ``MARK_BEFORE`` for the
    row that counts it among the users before bounding. Returns the row and pair totals.
    :func:`partition_sums` then adds up the outputs (csrc/partition_sums.h)."""
    users_arr = check_array("users", users, [np.uint32])
    partitions_arr = check_array("partitions", partitions, [np.uint32])
    rows_arr = check_array("rows", rows, [np.uint32])
    marks_arr = check_array("marks", marks, [np.uint8], writable=True)
    cdef const uint32_t[::1] users_view = users_arr
    cdef const uint32_t[::1] parts_view = partitions_arr
    cdef const uint32_t[::1] rows_view = rows_arr
    cdef uint8_t[::1] marks_view = marks_arr
    cdef uint32_t c_parts = check_int("n_partitions", n_partitions, 0, U32_MAX)
    cdef uint32_t c_first = check_int("first_user", first_user, 0, U32_MAX)
    cdef uint32_t c_last = check_int("last_user", last_user, c_first, U32_MAX)
    kappa = check_int("max_partitions_contributed (kappa)", kappa, 1, 2**64 - 1)
    linf = check_int("max_contributions_per_partition (linf)", linf, 1, 2**64 - 1)
    cdef size_t n = <size_t>marks_view.shape[0]
    cdef size_t m = <size_t>rows_view.shape[0]
    if <size_t>users_view.shape[0] != m or <size_t>parts_view.shape[0] != m:
        raise ValueError(f"users and partitions must have one entry per row of rows ({m}), got "
                         f"{users_view.shape[0]} and {parts_view.shape[0]}")
    if n >= 2 ** 32:
        raise ValueError(f"at most 2**32 - 1 rows per call, got {n}")
    check_disjoint({"marks": marks_arr}, {"users": users_arr, "partitions": partitions_arr, "rows": rows_arr})
    cdef const uint32_t *u_ptr = &users_view[0] if m else NULL
    cdef const uint32_t *p_ptr = &parts_view[0] if m else NULL
    cdef const uint32_t *rows_ptr = &rows_view[0] if m else NULL
    cdef uint8_t *marks_ptr = &marks_view[0] if n else NULL
    cdef uint64_t k = <uint64_t>kappa
    cdef uint64_t l = <uint64_t>linf
    cdef dps_bound_stats stats
    cdef size_t bad = 0
    cdef int rc
    cdef dps_rng *s = begin_batch(test_state)
    with nogil:
        rc = dps_bound_rows_mark(s, n, u_ptr, p_ptr, rows_ptr, m, c_first, c_last, c_parts, k, l, marks_ptr,
                                 &stats, &bad)
        end_batch(s)
    finish_batch(test_state)
    return _totals(rc, stats, f"entry {bad}: rows must increase and be < len(marks), users lie in [first_user, "
                              f"last_user) ({first_user}, {last_user}) and partition codes < n_partitions "
                              f"({n_partitions})")


def partition_sums(object partitions, object marks, object rows, object first, object last, object n_partitions,
                   list values, object out, object squares=()) -> None:
    """Add the marked rows ``rows`` (uint32 row indices, each of a partition in [first, last)) into
    ``out`` = (users, rows, sums, users_before or None), the outputs :func:`bound_rows_range`
    returns for ``n_partitions`` partitions and the columns ``values`` then ``squares``; only
    their entries of [first, last) are written, so calls on different ranges may share them and
    run at once. Clears every mark but ``MARK_KEPT`` of these rows (csrc/partition_sums.h)."""
    partitions_arr = check_array("partitions", partitions, [np.uint32])
    marks_arr = check_array("marks", marks, [np.uint8], writable=True)
    rows_arr = check_array("rows", rows, [np.uint32], copy=True)
    cdef size_t n = <size_t>partitions_arr.shape[0]
    if <size_t>marks_arr.shape[0] != n:
        raise ValueError(f"marks must have one entry per row ({n}), got {marks_arr.shape[0]}")
    cdef uint32_t c_parts = check_int("n_partitions", n_partitions, 0, U32_MAX)
    cdef uint32_t c_first = check_int("first", first, 0, c_parts)
    cdef uint32_t c_last = check_int("last", last, c_first, c_parts)
    arrays = [check_array(f"values[{j}]", v, [np.int64]) for j, v in enumerate(values)]
    for j, v in enumerate(arrays):
        if <size_t>v.shape[0] != n:
            raise ValueError(f"values[{j}] must be a 1-D int64 array of {n} rows, got {v.dtype} {v.shape}")
    square_list = _square_list(squares, arrays)
    cdef size_t n_values = len(arrays)
    cdef size_t n_squares = len(square_list)
    cdef Py_ssize_t width = max(<Py_ssize_t>c_parts, 1)
    out_users, out_rows, out_sums, before = out
    out_users = check_array("out[0]", out_users, [np.int64], writable=True)
    out_rows = check_array("out[1]", out_rows, [np.int64], writable=True)
    out_sums = check_array("out[2]", out_sums, [np.uint64], ndim=3, writable=True)
    if out_users.shape[0] != width or out_rows.shape[0] != width or \
            out_sums.shape != (max(n_values + n_squares, 1), width, 2):
        raise ValueError("out must be the outputs of a call with the same n_partitions and values")
    outputs = {"out[0]": out_users, "out[1]": out_rows, "out[2]": out_sums}
    if before is not None:
        before = check_array("out[3]", before, [np.int64], writable=True)
        if before.shape[0] != width:
            raise ValueError("out must be the outputs of a call with the same n_partitions and values")
        outputs["out[3]"] = before
    check_disjoint({"marks": marks_arr, **outputs},
                   {"partitions": partitions_arr, "rows": rows_arr, **{f"values[{j}]": v for j, v in enumerate(arrays)}})
    cdef const uint32_t[::1] p_view = partitions_arr
    cdef uint8_t[::1] mk_view = marks_arr
    cdef const uint32_t[::1] rows_view = rows_arr
    cdef int64_t[::1] u_view = out_users
    cdef int64_t[::1] r_view = out_rows
    cdef uint64_t[:, :, ::1] s_view = out_sums
    cdef int64_t[::1] b_view
    cdef int64_t *before_ptr = NULL
    if before is not None:
        b_view = before
        before_ptr = &b_view[0]
    cdef size_t m = <size_t>rows_view.shape[0]
    cdef const uint32_t *p_ptr = &p_view[0] if n else NULL
    cdef uint8_t *mk_ptr = &mk_view[0] if n else NULL
    cdef const uint32_t *rows_ptr = &rows_view[0] if m else NULL
    cdef const int64_t **value_ptrs = _value_pointers(arrays, n)
    cdef dps_square_spec *square_specs
    try:
        square_specs = _square_specs(square_list)
    except MemoryError:
        free(value_ptrs)
        raise
    cdef size_t bad = 0
    cdef int rc
    try:
        with nogil:
            rc = dps_partition_sums(p_ptr, mk_ptr, n, rows_ptr, m, c_first, c_last, c_parts, n_values, value_ptrs,
                                    n_squares, square_specs, &u_view[0], &r_view[0], &s_view[0, 0, 0], before_ptr,
                                    &bad)
    finally:
        free(value_ptrs)
        free(square_specs)
    if rc == DPS_ERR_SQUARE_RANGE:
        raise ValueError(_SQUARE_RANGE)
    if rc == DPS_ERR_BAD_CODE:
        raise ValueError(f"row {bad}: rows must be < len(partitions) and their partition codes in [first, last) "
                         f"({first}, {last})")
    if rc == DPS_ERR_BAD_ARG:
        raise ValueError("bad partition-sum arguments")
    check_status(rc)

"""Fuzz target: the column encoder and the counting kernel (dpselect.ingest.rows.RowCounter).

Random Arrow columns — integers of every width, strings, binaries, large strings/binaries,
fixed-size binaries, floats (NaN, -0.0), dictionaries (duplicate and null dictionary values),
null-typed batches, nulls, sliced offsets, chunked columns — are fed in several batches, with
one or two key columns, then counted with a huge κ and no cap. Property: no crash, and the
counts are a pure-Python reference's distinct users per key; rows with a null privacy unit are
dropped and counted. A TypeError is accepted only when the batches' types differ.

The pieces of a batch are made tiny (dpselect.ingest._counter._PIECE_ROWS, _THREAD_ROWS) so that the
two-thread pipeline of RowCounter.feed runs on inputs of a few dozen rows; so are the sharded
coder's thresholds (parallel_codes.MIN_ROWS, _CHUNK_ROWS; _counter._WIDE_PIECE_ROWS, _SCATTER_ROWS),
and each input runs at a thread count of 1 to 5, so that from 4 threads the batches are coded
column after column on every thread, the shards' maps kept from one batch to the next."""
from __future__ import annotations

import math
import warnings

import _harness  # noqa: F401  (sys.path, environment)
import atheris

with atheris.instrument_imports(include=["dpselect"]):
    import dpselect.ingest._counter as counter_module
    import dpselect.ingest.parallel_codes as parallel_codes
    import dpselect.ingest.rows as rows
    from dpselect._threads import using

import pyarrow as pa

counter_module._PIECE_ROWS = 16
counter_module._THREAD_ROWS = 8
counter_module._WIDE_PIECE_ROWS = 16
counter_module._SCATTER_ROWS = 4
parallel_codes.MIN_ROWS = 8
parallel_codes._CHUNK_ROWS = 4

KAPPA = 2 ** 63  # no user loses a partition

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FAMILIES = {
    "int": INT_TYPES,
    "string": [pa.string(), pa.large_string(), pa.string_view()],
    "binary": [pa.binary(), pa.large_binary(), pa.binary_view()],
    "fixed": [pa.binary(3)],
    "float": [pa.float64(), pa.float32()],
    "bool": [pa.bool_()],
    "date": [pa.date32()],
}
UNIT_FAMILIES = ["int", "string", "binary", "fixed"]
KEY_FAMILIES = list(FAMILIES)
INDEX_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32()]
SPECIAL_FLOATS = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1.0, 1.5, 2.0 ** 60]


def scalar(fdp: atheris.FuzzedDataProvider, typ: pa.DataType) -> object:
    """A value of typ from a small alphabet (so that values repeat), or an extreme one."""
    if pa.types.is_integer(typ):
        lo, hi = (0, 2 ** typ.bit_width - 1) if pa.types.is_unsigned_integer(typ) else \
            (-(2 ** (typ.bit_width - 1)), 2 ** (typ.bit_width - 1) - 1)
        pick = fdp.ConsumeIntInRange(0, 9)
        if pick == 0:
            return lo
        if pick == 1:
            return hi
        return max(lo, min(hi, fdp.ConsumeIntInRange(-3, 5)))
    if pa.types.is_floating(typ):
        if fdp.ConsumeBool():
            return SPECIAL_FLOATS[fdp.ConsumeIntInRange(0, len(SPECIAL_FLOATS) - 1)]
        return float(fdp.ConsumeIntInRange(-3, 3))
    if pa.types.is_boolean(typ):
        return fdp.ConsumeBool()
    if pa.types.is_date(typ):
        return fdp.ConsumeIntInRange(-2, 3)
    if pa.types.is_fixed_size_binary(typ):
        return bytes(fdp.ConsumeIntInRange(0, 2) for _ in range(typ.byte_width))
    text = "".join("ab\u00e9\x00"[fdp.ConsumeIntInRange(0, 3)] for _ in range(fdp.ConsumeIntInRange(0, 3)))
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or typ == pa.string_view():
        return text
    return text.encode("utf-8") + (b"\xff" if fdp.ConsumeIntInRange(0, 7) == 0 else b"")


def plain_array(fdp: atheris.FuzzedDataProvider, typ: pa.DataType, n: int) -> pa.Array:
    """n values of typ (some null), from an array with a random offset (a slice)."""
    before, after = fdp.ConsumeIntInRange(0, 3), fdp.ConsumeIntInRange(0, 2)
    values = [None if fdp.ConsumeIntInRange(0, 5) == 0 else scalar(fdp, typ) for _ in range(before + n + after)]
    if pa.types.is_date(typ):
        array = pa.array(values, pa.int32()).cast(typ)
    else:
        array = pa.array(values, typ)
    return array.slice(before, n)


def make_array(fdp: atheris.FuzzedDataProvider, family: str, n: int) -> pa.Array:
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return pa.nulls(n)
    types = FAMILIES[family]
    typ = types[fdp.ConsumeIntInRange(0, len(types) - 1)]
    if kind <= 3 and typ not in (pa.string_view(), pa.binary_view()):
        # A dictionary: values may repeat and be null; indices of any width, some null, sliced.
        size = fdp.ConsumeIntInRange(1, 5)
        dictionary = plain_array(fdp, typ, size)
        index_type = INDEX_TYPES[fdp.ConsumeIntInRange(0, len(INDEX_TYPES) - 1)]
        before = fdp.ConsumeIntInRange(0, 2)
        idx = [None if fdp.ConsumeIntInRange(0, 6) == 0 else fdp.ConsumeIntInRange(0, size - 1)
               for _ in range(before + n)]
        indices = pa.array(idx, index_type)
        return pa.DictionaryArray.from_arrays(indices, dictionary).slice(before, n)
    return plain_array(fdp, typ, n)


def chunked(fdp: atheris.FuzzedDataProvider, array: pa.Array) -> pa.Array | pa.ChunkedArray:
    if len(array) < 2 or fdp.ConsumeIntInRange(0, 2) != 0:
        return array
    cut = fdp.ConsumeIntInRange(0, len(array))
    return pa.chunked_array([array.slice(0, cut), array.slice(cut)], type=array.type)


def norm(value: object) -> object:
    """The key a value is in the reference: every NaN one key, -0.0 = 0.0."""
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        return value + 0.0
    return value


@atheris.instrument_func  # the target's own branches guide the search too (the C kernel is not instrumented)
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    n_keys = fdp.ConsumeIntInRange(1, 2)
    unit_family = UNIT_FAMILIES[fdp.ConsumeIntInRange(0, len(UNIT_FAMILIES) - 1)]
    key_families = [KEY_FAMILIES[fdp.ConsumeIntInRange(0, len(KEY_FAMILIES) - 1)] for _ in range(n_keys)]
    by = [f"k{i}" for i in range(n_keys)]
    counter = rows.RowCounter("u", by, expected_rows=fdp.ConsumeIntInRange(0, 64), null_privacy_units="drop")
    reference: dict[tuple, set] = {}
    total = nulls = 0
    types_seen: list[set[str]] = [set() for _ in range(n_keys + 1)]
    mixed = False
    threads = fdp.ConsumeIntInRange(1, 5)
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        n = fdp.ConsumeIntInRange(0, 40)
        arrays = [make_array(fdp, unit_family, n)] + [make_array(fdp, f, n) for f in key_families]
        for seen, array in zip(types_seen, arrays):
            typ = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
            seen.add(str(rows.key_type(typ)))
        mixed = mixed or any(len(s) > 1 for s in types_seen)
        table = pa.table([chunked(fdp, a) for a in arrays], names=["u", *by])
        batches = [table]
        if fdp.ConsumeBool():
            try:  # record batches instead of a table
                batches = table.combine_chunks().to_batches()
            except pa.ArrowInvalid:  # pyarrow cannot unify dictionaries holding nulls: keep the table
                pass
        try:
            with using(threads):
                for b in batches:
                    counter.feed(b)
        except TypeError:
            if mixed:
                return  # a batch changed type in a way that is not lossless: refused, as documented
            raise
        columns = [a.to_pylist() for a in arrays]
        for u, *key in zip(*columns):
            total += 1
            if u is None:
                nulls += 1
                continue
            reference.setdefault(tuple(norm(k) for k in key), set()).add(u)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = counter.finish(KAPPA, None)
    assert counter.rows == total, (counter.rows, total)
    assert counter.null_unit_rows == nulls, (counter.null_unit_rows, nulls)
    got_keys = zip(*[result.keys.column(name).to_pylist() for name in by]) if result.keys.num_rows else []
    got = {}
    for key, count in zip(got_keys, result.counts.tolist()):
        k = tuple(norm(v) for v in key)
        assert k not in got, f"key {k!r} released twice"
        got[k] = count
    expected = {k: len(users) for k, users in reference.items()}
    assert got == expected, (got, expected)


if __name__ == "__main__":
    _harness.main(TestOneInput)

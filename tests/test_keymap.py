"""The C code map (csrc/keymap.h) that turns column values into dense codes, read straight from
Arrow buffers: codes in order of first appearance, persistent across batches, nulls one value,
exact byte-for-byte equality (never "same hash, same key"), every Arrow layout the rows path
accepts, and corrupt buffers refused instead of read out of bounds."""
from __future__ import annotations

import datetime
import decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from dpselect import _count  # noqa: E402
from dpselect.ingest.rows import KeyFactorizer  # noqa: E402


def reference_codes(batches: list[list[object]]) -> tuple[list[list[int]], list[object]]:
    """Codes by first appearance over all batches, with a Python dict (None is one value)."""
    seen: dict[object, int] = {}
    out = []
    for batch in batches:
        out.append([seen.setdefault(v, len(seen)) for v in batch])
    return out, list(seen)


def encode_batches(batches: list[pa.Array]) -> tuple[list[list[int]], list[object]]:
    factorizer = KeyFactorizer("k")
    codes = [factorizer.encode(b).tolist() for b in batches]
    assert len(factorizer) == len(factorizer.values)
    return codes, factorizer.values.to_pylist()


CASES = [
    (pa.string(), ["a", "b", None, "a", "", "b", None, "é", "a\x00"]),
    (pa.large_string(), ["a", "b", None, "a", "", "long string over eight bytes", "long string over eight bytez"]),
    (pa.binary(), [b"a", b"a\x00", b"", b"\x00", None, b"a", b"\x00\x00", b"a\x00"]),
    (pa.large_binary(), [b"x" * 100, b"x" * 99, b"x" * 100, None]),
    (pa.binary(3), [b"abc", b"abd", None, b"abc"]),
    (pa.binary(12), [b"a" * 12, b"b" * 12, b"a" * 12]),
    (pa.int8(), [-128, 127, 0, None, -128]),
    (pa.uint16(), [65535, 0, 65535, None]),
    (pa.int32(), [-1, 1, -1, 2**31 - 1]),
    (pa.int64(), [2**63 - 1, -(2**63), 0, None, 2**63 - 1, 2**57 - 1, 2**57]),
    (pa.uint64(), [2**64 - 1, 2**64 - 2, 2**64 - 1]),
    (pa.bool_(), [True, None, False, True, None]),
    (pa.date32(), [datetime.date(2020, 1, 1), None, datetime.date(1970, 1, 1), datetime.date(2020, 1, 1)]),
    (pa.timestamp("ns"), [datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 1, 0, 0, 1), None]),
    (pa.duration("s"), [datetime.timedelta(1), datetime.timedelta(2), datetime.timedelta(1)]),
    (pa.time64("us"), [datetime.time(1), datetime.time(2), datetime.time(1)]),
    (pa.decimal128(10, 2), [decimal.Decimal("1.50"), decimal.Decimal("1.5"), decimal.Decimal("-1.5"), None]),
    (pa.decimal256(40, 0), [decimal.Decimal(10**39), decimal.Decimal(1), decimal.Decimal(10**39)]),
    (pa.null(), [None, None, None]),
]


@pytest.mark.parametrize(("typ", "values"), CASES, ids=[str(t) for t, _ in CASES])
def test_every_layout_gets_first_appearance_codes(typ, values):
    codes, distinct = encode_batches([pa.array(values, type=typ)])
    expected, expected_distinct = reference_codes([values])
    assert codes == expected and distinct == expected_distinct


@pytest.mark.parametrize(("typ", "values"), CASES, ids=[str(t) for t, _ in CASES])
def test_slices_chunks_and_batches_agree_with_one_pass(typ, values):
    whole = pa.array(values * 3, type=typ)
    sliced = [whole.slice(1, 5), whole.slice(6), whole.slice(0, 1)]  # non-zero offsets
    chunked = pa.chunked_array([whole.slice(0, 4), whole.slice(4)])
    as_batches, distinct = encode_batches(sliced + [chunked])
    expected, expected_distinct = reference_codes([s.to_pylist() for s in sliced] + [chunked.to_pylist()])
    assert as_batches == expected and distinct == expected_distinct


def test_floats_are_one_value_per_class():
    values = pa.array([0.0, -0.0, float("nan"), -float("nan"), 1.5, None], type=pa.float64())
    codes, distinct = encode_batches([values, values.cast(pa.float64())])
    assert codes == [[0, 0, 1, 1, 2, 3]] * 2
    assert distinct[0] == 0.0 and np.isnan(distinct[1]) and distinct[2:] == [1.5, None]


def test_a_batch_of_nulls_first_then_values_keeps_the_null_code():
    codes, distinct = encode_batches([pa.array([None, None]), pa.array(["a", None, "b"]), pa.array([None])])
    assert codes == [[0, 0], [1, 0, 2], [0]] and distinct == [None, "a", "b"]


def test_string_widths_may_change_between_batches():
    codes, distinct = encode_batches([pa.array(["a", "b"]), pa.array(["b", "c"], type=pa.large_string())])
    assert codes == [[0, 1], [1, 2]] and distinct == ["a", "b", "c"]


# Random batches; the corners (extreme integers, empty and NUL-bearing strings, nulls first, widths
# changing between batches) are the deterministic CASES and tests above, run every time.
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=40), min_size=1, max_size=5),
    st.sampled_from([pa.string(), pa.large_string()]),
)
def test_strings_across_batches_match_a_dictionary(batches, typ):
    codes, distinct = encode_batches([pa.array(b, type=typ) for b in batches])
    expected, expected_distinct = reference_codes(batches)
    assert codes == expected and distinct == expected_distinct


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=40),
                min_size=1, max_size=5))
def test_integers_across_batches_match_a_dictionary(batches):
    codes, distinct = encode_batches([pa.array(b, type=pa.int64()) for b in batches])
    expected, expected_distinct = reference_codes(batches)
    assert codes == expected and distinct == expected_distinct


def test_growth_through_many_distinct_values_keeps_every_code():
    """Also the check that equality is exact: among 300,000 values about ten pairs share the
    32-bit hash tag kept in a slot (birthday bound), so a map that trusted the tag alone would
    merge two of them and fail here (checked by breaking the comparison in keymap.c)."""
    n = 300_000  # several rehashes of the table and reallocations of the value arena
    strings = pa.array([f"value-{i}" for i in range(n)])
    factorizer = KeyFactorizer("k")
    assert np.array_equal(factorizer.encode(strings), np.arange(n))
    shuffled = np.random.default_rng(0).permutation(n)  # input data only
    assert np.array_equal(factorizer.encode(strings.take(pa.array(shuffled))), shuffled)
    ints = KeyFactorizer("u")
    assert np.array_equal(ints.encode(pa.array(np.arange(n, dtype=np.int64) * 7919)), np.arange(n))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.int64])
def test_word_values_without_nulls_take_the_loop_of_their_width_with_the_same_codes(dtype):
    """Columns without a validity bitmap take a loop per width (keymap.c, encode_words); with an
    all-valid bitmap they take the general one. Both must give the same codes and first rows,
    through growth of the table and across batches of one map."""
    gen = np.random.default_rng(3)  # input data only
    info = np.iinfo(dtype)
    values = gen.integers(info.min, info.max, 60_000, dtype=dtype, endpoint=True)
    values[::7] = values[0]  # repeats, also of the first value
    plain, masked = _count.KeyMap("word", 5), _count.KeyMap("word", 6)
    all_valid = np.full((len(values) + 7) // 8, 0xFF, dtype=np.uint8)
    width = values.dtype.itemsize
    for start, stop in [(0, 1), (1, 1000), (1000, 1000), (1000, 60_000)]:
        piece = values[start:stop]
        fast = plain.encode_fixed(len(piece), 0, None, piece, width)
        general = masked.encode_fixed(len(piece), 0, all_valid, piece, width)
        assert np.array_equal(fast[0], general[0]) and np.array_equal(fast[1], general[1])
    assert len(plain) == len(masked) == len(np.unique(values))


def test_codes_do_not_depend_on_the_hash_seed():
    values = pa.array([f"k{i % 1000}" for i in range(5000)])
    buffers = values.buffers()
    results = []
    for seed in (0, 1, 2**64 - 1, 0x9E3779B97F4A7C15):
        key_map = _count.KeyMap("bytes", seed)
        results.append(key_map.encode_var(len(values), 0, buffers[0], buffers[1], False, buffers[2])[0])
    assert all(np.array_equal(results[0], r) for r in results)


# ----------------------------------------------------------------------------- corrupt input

def offsets(values: list[int], dtype=np.int32) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


@pytest.mark.parametrize("bad", [[0, 3, 2], [0, 2, 9], [-1, 1, 2]], ids=["decreasing", "past the data", "negative"])
def test_corrupt_offsets_are_refused_not_read(bad):
    key_map = _count.KeyMap("bytes", 1, "key")
    with pytest.raises(ValueError, match="column 'key': the Arrow offsets of row"):
        key_map.encode_var(2, 0, None, offsets(bad), False, b"abcd")


def test_short_buffers_are_refused():
    key_map = _count.KeyMap("bytes", 1, "key")
    with pytest.raises(ValueError, match="offsets buffer holds 8 bytes, 12 are needed"):
        key_map.encode_var(2, 0, None, offsets([0, 1]), False, b"ab")
    with pytest.raises(ValueError, match="validity buffer holds 1 bytes, 2 are needed"):
        key_map.encode_var(9, 0, b"\xff", offsets(list(range(10))), False, b"a" * 9)
    words = _count.KeyMap("word", 1, "unit")
    with pytest.raises(ValueError, match="values buffer holds 15 bytes, 16 are needed"):
        words.encode_fixed(2, 0, None, b"x" * 15, 8)
    with pytest.raises(ValueError, match="values buffer holds 16 bytes, 24 are needed"):
        words.encode_fixed(2, 1, None, b"x" * 16, 8)  # the offset counts


def test_word_maps_take_only_word_widths():
    with pytest.raises(ValueError, match="width"):
        _count.KeyMap("word", 1, "unit").encode_fixed(1, 0, None, b"abc", 3)
    with pytest.raises(ValueError, match="kind must be"):
        _count.KeyMap("dict", 1)


# ----------------------------------------------------------------------------- dictionary columns

def dictionary_batches() -> list[pa.Array]:
    values = ["b", None, "a", "b", "c", None, "a"]
    one = pa.array(values).dictionary_encode()
    unused = pa.DictionaryArray.from_arrays(pa.array([0, None, 2, 0], type=pa.int8()),
                                            pa.array(["z", "never used", "y"]))
    nulls_in_dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1], type=pa.int64()),
                                                         pa.array([None, "b"]))
    return [one.slice(0, 3), one.slice(3), unused, pa.chunked_array([one, one.slice(2)]), nulls_in_dictionary]


def test_dictionary_columns_get_the_codes_of_their_decoded_values():
    batches = dictionary_batches()
    codes, distinct = encode_batches(batches)
    expected, expected_distinct = reference_codes([b.to_pylist() for b in batches])
    assert codes == expected and distinct == expected_distinct
    assert "never used" not in distinct  # a category no row has never becomes a key


def test_a_new_dictionary_at_a_recycled_address_is_not_taken_for_the_old_one():
    factorizer = KeyFactorizer("k")
    for i in range(50):  # each dictionary dies after its batch; its memory may be reused
        values = [f"v{i}-{j}" for j in range(3)]
        batch = pa.array(values * 2).dictionary_encode()
        codes = factorizer.encode(batch).tolist()
        assert [factorizer.values[c].as_py() for c in codes] == values * 2


def test_corrupt_dictionary_indices_are_refused():
    local = _count.DictionaryCodes(3, "key")
    with pytest.raises(ValueError, match="dictionary index of row 1 is outside its dictionary of 3"):
        local.encode(2, 0, None, np.array([0, 3], dtype=np.int32), 4)
    with pytest.raises(ValueError, match="outside"):
        local.encode(1, 0, None, np.array([-1], dtype=np.int8), 1)

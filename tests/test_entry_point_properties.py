"""Properties of every public function and method of the extension modules, called directly
(dpselect/_kernel.pyx, _rng.pyx, _count.pyx, _weighted.pyx, _bound.pyx, _noise.pyx; their .pyi
stubs list them), below the Python layer that normally checks and shapes their arguments.

Over dtypes (accepted and refused), memory layouts (strided, reversed, at an odd address, read-
only, columns of 2-D arrays), shapes (0-d and 2-D where 1-D is expected), sizes (0, 1, a few
thousand) and extreme parameters (tables for tiny and huge epsilon, delta near 0 and 1, kappa 1
and 2**63, counts near 2**63), each property asserts a law:

* an accepted input gives exactly the answer of the same call on a plain contiguous copy (or on
  the same values in another integer dtype) under the same seed of the test generator, or of an
  independent model (numpy, plain Python);
* a refused input raises TypeError (wrong kind of object or dtype) or ValueError (wrong value,
  shape or layout) whose message names the parameter, and changes no output; nothing is rounded
  or converted to another dtype silently.

Run under tools/sanitize.sh, the same examples also check every access the C code makes.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpselect import _bound, _count, _kernel, _noise, _rng, _weighted
from dpselect.aggregation.wide import Wide
from dpselect.core.params import validate_params
from dpselect.core.tables import keep_table, tsgd_table
from dpselect.testing import InsecureDeterministicRNG
from key_codes_reference import first_appearance

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

FEW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U64 = 2**64
I64_MAX = 2**63 - 1
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
# Arrays of these dtypes are refused wherever the kernel wants integers (or another dtype).
NON_INTEGER_DTYPES = [np.bool_, np.float16, np.float32, np.float64, np.complex128, "datetime64[s]",
                      "timedelta64[s]", "U3", "S3", "O"]
LAYOUTS = ["contiguous", "strided", "reversed", "misaligned", "readonly", "column"]

seeds = st.integers(0, 2**32 - 1)


def state(seed: int):
    """A fresh test-generator state: two calls with one seed see the same stream."""
    return InsecureDeterministicRNG(seed)._test_state


def arrange(values: np.ndarray, layout: str) -> np.ndarray:
    """The same 1-D values (same dtype) in another memory layout."""
    values = np.ascontiguousarray(values)
    n, dtype = values.shape[0], values.dtype
    if layout == "contiguous":
        out = values.copy()
    elif layout == "strided":
        out = np.zeros(3 * n, dtype)[::3]
        out[...] = values
    elif layout == "reversed":
        out = values[::-1].copy()[::-1]
    elif layout == "misaligned":
        raw = np.zeros(values.nbytes + max(dtype.itemsize, 1) + 1, np.uint8)
        out = raw[1:1 + values.nbytes].view(dtype) if n else values.copy()
        out[...] = values
    elif layout == "readonly":
        out = values.copy()
        out.setflags(write=False)
    elif layout == "column":
        out = np.zeros((n, 2), dtype)[:, 1]
        out[...] = values
    else:
        raise AssertionError(layout)
    np.testing.assert_array_equal(out, values)
    return out


def refused(exc_type, name: str):
    """pytest.raises for a refusal whose message names the parameter."""
    return pytest.raises(exc_type, match=re.escape(name))


def same(a, b) -> None:
    """Equal results, element by element (tuples, arrays, dicts, scalars)."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


# ------------------------------------------------------------------ tables at extreme parameters

TABLE_PARAMS = [  # (epsilon, delta, kappa): tiny and huge epsilon, delta near 0 and 1, kappa > 1
    (1.0, 1e-5, 1), (1e-3, 1e-5, 1), (1e-2, 1e-12, 1), (50.0, 1e-5, 1), (1000.0, 0.5, 1),
    (1.0, 1 - 1e-9, 1), (1.0, 1e-5, 7),
]


@functools.lru_cache(maxsize=None)
def keep_handle(i: int, tail_certain: bool = True):
    table = keep_table(validate_params(*TABLE_PARAMS[i]))
    return _kernel.KeepTableHandle(table.words, tail_certain), table


@functools.lru_cache(maxsize=None)
def weight_handle(i: int):
    table = tsgd_table(validate_params(*TABLE_PARAMS[i]))
    return _kernel.WeightTableHandle(table.cumulative), table


def counts_strategy(max_size: int = 300):
    """(values as Python ints, an integer dtype that holds them all): small counts around the
    tables' lengths, and the dtype's extremes (counts near 2**63 and 2**64 for 64-bit types)."""
    def build(dtype, data):
        info = np.iinfo(dtype)
        low = max(0, int(info.min))
        element = st.one_of(st.integers(low, min(int(info.max), 40)), st.integers(low, min(int(info.max), 9000)),
                            st.sampled_from(sorted({low, int(info.max), int(info.max) - 1, min(int(info.max), I64_MAX)})))
        return data.draw(st.lists(element, max_size=max_size)), dtype
    return st.builds(lambda dtype, data: build(dtype, data), st.sampled_from(INT_DTYPES), st.data())


# =================================================================== _kernel

@pytest.mark.slow
@SOME
@given(counts=counts_strategy(), layout=st.sampled_from(LAYOUTS), table=st.integers(0, len(TABLE_PARAMS) - 1),
       tail_certain=st.booleans(), out_kind=st.sampled_from(["bool", "uint8", "strided", "reversed"]), seed=seeds)
def test_select_into_depends_only_on_the_count_values(counts, layout, table, tail_certain, out_kind, seed):
    values, dtype = counts
    handle, keep = keep_handle(table, tail_certain)
    reference = np.zeros(len(values), bool)
    _kernel.select_into(np.array(values, np.uint64), handle, reference, state(seed))
    arr = arrange(np.array(values, dtype), layout)
    out = {"bool": np.zeros(len(values), bool), "uint8": np.zeros(len(values), np.uint8),
           "strided": np.zeros(2 * len(values), bool)[::2], "reversed": np.zeros(len(values), bool)[::-1]}[out_kind]
    _kernel.select_into(arr, handle, out, state(seed))
    np.testing.assert_array_equal(out.astype(bool), reference)
    values_arr = np.array(values, dtype=np.uint64)
    assert not reference[values_arr == 0].any()  # an absent partition is never kept
    if tail_certain:
        assert reference[values_arr >= keep.length].all()


@pytest.mark.slow
@FEW
@given(n=st.integers(0, 40), table=st.integers(0, len(TABLE_PARAMS) - 1), seed=seeds)
def test_select_into_large_and_empty_batches_are_one_stream(n, table, seed):
    """A 0-element call draws nothing (the call after it on the same state is unchanged), and a
    batch of thousands (the vector loops, several buffer refills) equals its strided twin."""
    handle, _ = keep_handle(table)
    counts = np.random.default_rng(n).integers(0, 60, 4000 + n)
    a, b = np.zeros(counts.size, bool), np.zeros(counts.size, bool)
    s = state(seed)
    _kernel.select_into(counts[:0], handle, a[:0], s)
    _kernel.select_into(counts, handle, a, s)
    _kernel.select_into(arrange(counts, "strided"), handle, b, state(seed))
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@FEW
@given(counts=counts_strategy(60), seed=seeds, position=st.integers(0, 59))
def test_select_into_negative_count_names_it_and_writes_nothing(counts, seed, position):
    values, dtype = counts
    assume(np.iinfo(dtype).min < 0 and values)
    position %= len(values)
    values[position] = -1
    first = next(i for i, v in enumerate(values) if v < 0)
    out = np.ones(len(values), bool)
    with pytest.raises(_kernel.NegativeCountError, match=rf"counts\[{first}\]") as info:
        _kernel.select_into(np.array(values, dtype), keep_handle(0)[0], out, state(seed))
    assert info.value.index == first and not out.any()
    assert _kernel.first_negative(np.array(values, dtype)[::-1]) == len(values) - 1 - max(
        i for i, v in enumerate(values) if v < 0)


@pytest.mark.slow
@SOME
@given(values=st.lists(st.integers(-2**63, I64_MAX), max_size=80), dtype=st.sampled_from(INT_DTYPES),
       layout=st.sampled_from(LAYOUTS))
def test_first_negative_is_the_first_negative_value(values, dtype, layout):
    info = np.iinfo(dtype)
    arr = np.array([min(max(v, int(info.min)), int(info.max)) for v in values], dtype)
    expected = next((i for i, v in enumerate(arr.tolist()) if v < 0), -1)
    assert _kernel.first_negative(arrange(arr, layout)) == expected


@pytest.mark.parametrize("dtype", NON_INTEGER_DTYPES + [">i8", ">u4"])
def test_kernel_refuses_counts_of_other_dtypes(dtype):
    counts = np.zeros(4, dtype)
    handle, _ = keep_handle(0)
    with pytest.raises((TypeError, ValueError), match="counts"):
        _kernel.first_negative(counts)
    out = np.ones(4, bool)
    with pytest.raises((TypeError, ValueError), match="counts"):
        _kernel.select_into(counts, handle, out)
    assert out.all()
    noise, table = weight_handle(0)
    with pytest.raises((TypeError, ValueError), match="counts"):
        _kernel.release_into(counts, noise, table.k, np.zeros(4, bool), np.zeros(4, np.int64))


@pytest.mark.parametrize("counts", [np.int64(3), np.zeros((2, 3), np.int64), [1, 2], "12", None, 3])
def test_kernel_refuses_counts_that_are_not_1d_arrays(counts):
    with pytest.raises((TypeError, ValueError), match="counts"):
        _kernel.first_negative(counts)
    with pytest.raises((TypeError, ValueError), match="counts"):
        _kernel.select_into(counts, keep_handle(0)[0], np.zeros(6, bool))


@pytest.mark.slow
@given(n=st.integers(1, 20), bad=st.sampled_from(["int8", "int64", "float", "short", "long", "2d", "readonly",
                                                  "bytes", "alias", "interleaved", "list"]))
@FEW
def test_select_into_refuses_bad_out(n, bad):
    counts = np.arange(n, dtype=np.uint8)
    out = {"int8": lambda: np.zeros(n, np.int8), "int64": lambda: np.zeros(n, np.int64),
           "float": lambda: np.zeros(n), "short": lambda: np.zeros(n - 1, bool), "long": lambda: np.zeros(n + 1, bool),
           "2d": lambda: np.zeros((n, 1), bool), "readonly": lambda: arrange(np.zeros(n, bool), "readonly"),
           "bytes": lambda: bytes(n), "alias": lambda: counts, "list": lambda: [False] * n,
           "interleaved": lambda: None}[bad]()
    if bad == "interleaved":  # spans overlap (from two elements on): refused, though no byte is shared
        n = max(n, 2)
        buf = np.zeros(2 * n, np.uint8)
        counts, out = buf[::2], buf[1::2]
    before = counts.copy()
    with pytest.raises((TypeError, ValueError), match="out"):
        _kernel.select_into(counts, keep_handle(0)[0], out, state(1))
    np.testing.assert_array_equal(counts, before)


@pytest.mark.slow
@SOME
@given(counts=counts_strategy(), layout=st.sampled_from(LAYOUTS), table=st.integers(0, len(TABLE_PARAMS) - 1),
       rule=st.sampled_from(["tsgd", "threshold", "keep_all"]), low=st.booleans(), seed=seeds)
def test_release_into_depends_only_on_the_count_values(counts, layout, table, rule, low, seed):
    values, dtype = counts
    noise, tsgd = weight_handle(table)
    k = tsgd.k
    kwargs = {"tsgd": {}, "threshold": {"threshold": -k if low else 2**62}, "keep_all": {"keep_all": True}}[rule]
    n = len(values)
    keep0, noisy0 = np.zeros(n, bool), np.zeros(n, np.int64)
    _kernel.release_into(np.array(values, np.uint64), noise, k, keep0, noisy0, state(seed), **kwargs)
    keep1, noisy1 = np.zeros(2 * n, np.uint8)[::2], np.zeros(n, np.int64)[::-1]
    _kernel.release_into(arrange(np.array(values, dtype), layout), noise, k, keep1, noisy1, state(seed), **kwargs)
    np.testing.assert_array_equal(keep1.astype(bool), keep0)
    np.testing.assert_array_equal(noisy1, noisy0)
    exact = np.array(values, dtype=object)
    assert (noisy0[~keep0] == 0).all()  # nothing is published for a partition not kept
    kept_values, kept_noisy = exact[keep0], noisy0[keep0].astype(object)
    # n + X with |X| <= k, saturated at INT64_MAX (counts near 2**63 and 2**64)
    assert all(min(v - k, I64_MAX) <= y <= min(v + k, I64_MAX) for v, y in zip(kept_values, kept_noisy))
    if rule == "keep_all" or (rule == "threshold" and low):
        assert keep0.all() if rule == "keep_all" else keep0[exact > 0].all()
    if rule == "threshold" and not low:
        assert not keep0[exact <= 2**62 - k].any()


@FEW
@given(k_delta=st.sampled_from([-1, 1, 10**6]), threshold=st.sampled_from([None, "low", "float", "bool", "huge"]))
def test_release_into_refuses_bad_k_and_threshold(k_delta, threshold):
    noise, table = weight_handle(0)
    counts, keep, noisy = np.arange(5), np.zeros(5, bool), np.full(5, 7, np.int64)
    if threshold is None:
        with refused(ValueError, "k"):
            _kernel.release_into(counts, noise, table.k + k_delta, keep, noisy)
    else:
        value = {"low": -table.k - 1, "float": 1.5, "bool": True, "huge": 2**62 + 1}[threshold]
        with pytest.raises((TypeError, ValueError), match="threshold"):
            _kernel.release_into(counts, noise, table.k, keep, noisy, threshold=value)
    assert (noisy == 7).all() and not keep.any()


@pytest.mark.parametrize("bad", ["keep int8", "noisy uint64", "noisy float", "noisy short", "noisy readonly",
                                 "noisy over counts", "keep over noisy", "keep over counts"])
def test_release_into_refuses_bad_outputs(bad):
    noise, table = weight_handle(0)
    counts, keep, noisy = np.arange(8, dtype=np.int64), np.zeros(8, bool), np.zeros(8, np.int64)
    name = bad.split()[0]
    if bad == "keep int8":
        keep = np.zeros(8, np.int8)
    elif bad == "noisy uint64":
        noisy = np.zeros(8, np.uint64)
    elif bad == "noisy float":
        noisy = np.zeros(8)
    elif bad == "noisy short":
        noisy = np.zeros(7, np.int64)
    elif bad == "noisy readonly":
        noisy = arrange(noisy, "readonly")
    elif bad == "noisy over counts":
        noisy = counts
    elif bad == "keep over noisy":
        keep = noisy.view(np.uint8)[:8].view(bool)
    else:
        keep = counts.view(np.uint8)[8:16].view(bool)
    with pytest.raises((TypeError, ValueError), match=name):
        _kernel.release_into(counts, noise, table.k, keep, noisy, state(1))
    np.testing.assert_array_equal(counts, np.arange(8))


@pytest.mark.slow
@FEW
@given(limbs=st.integers(1, 4), n=st.integers(1, 30), layout=st.sampled_from(["contiguous", "fortran", "strided",
                                                                              "reversed-rows", "1d"]),
       tail_certain=st.booleans(), seed=seeds)
def test_keep_table_handle_copies_any_layout_privately(limbs, n, layout, tail_certain, seed):
    rng = np.random.default_rng(n)
    if layout == "1d":
        limbs = 1
    q = np.sort(rng.integers(0, U64, size=(n, limbs), dtype=np.uint64, endpoint=False), axis=0)
    q = np.unique(q, axis=0)
    q[0] = 0
    given_q = {"contiguous": q.copy(), "fortran": np.asfortranarray(q), "strided": np.repeat(q, 2, axis=0)[::2],
               "reversed-rows": q[::-1].copy()[::-1], "1d": q[:, 0].copy()}[layout]
    handle = _kernel.KeepTableHandle(given_q, tail_certain)
    assert (handle.length, handle.limbs, handle.tail_certain) == (q.shape[0], limbs, tail_certain)
    counts = rng.integers(0, q.shape[0] + 3, 500)
    expected = np.zeros(500, bool)
    _kernel.select_into(counts, _kernel.KeepTableHandle(np.ascontiguousarray(q), tail_certain), expected, state(seed))
    given_q[...] = np.uint64(U64 - 1)  # the caller's array changes: the handle's copy does not
    got = np.zeros(500, bool)
    _kernel.select_into(counts, handle, got, state(seed))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("q, error", [
    (np.zeros(3, np.int64), TypeError), (np.zeros(3), TypeError), (np.zeros(3, ">u8"), TypeError),
    (np.uint64(0), ValueError), (np.zeros((2, 2, 2), np.uint64), ValueError), (np.zeros((0, 1), np.uint64), ValueError),
    (np.zeros((3, 5), np.uint64), ValueError), (np.array([1, 2], np.uint64), ValueError),
    (np.array([0, 5, 4], np.uint64), ValueError),
])
def test_keep_table_handle_refuses_bad_tables(q, error):
    with pytest.raises(error, match="keep table|table rejected"):
        _kernel.KeepTableHandle(q)


@pytest.mark.parametrize("cumulative, error", [
    (np.array([1.0, 2.0]), TypeError), (np.array([1, 2], np.int64), TypeError), (np.zeros(2, ">u8"), TypeError),
    (np.uint64(U64 - 1), ValueError), (np.zeros(0, np.uint64), ValueError), (np.ones((2, 2), np.uint64), ValueError),
    (np.array([1, 1, U64 - 1], np.uint64), ValueError), (np.array([1, 2, 3], np.uint64), ValueError),
])
def test_weight_table_handle_refuses_bad_tables(cumulative, error):
    with pytest.raises(error, match="cumulative|weight table|table rejected"):
        _kernel.WeightTableHandle(cumulative)


@FEW
@given(table=st.integers(0, len(TABLE_PARAMS) - 1), layout=st.sampled_from(["strided", "reversed", "misaligned"]),
       seed=seeds)
def test_weight_table_handle_copies_any_layout_privately(table, layout, seed):
    _, tsgd = weight_handle(table)
    given_cum = arrange(np.array(tsgd.cumulative), layout)
    handle = _kernel.WeightTableHandle(given_cum)
    assert handle.size == 2 * tsgd.k + 1
    counts = np.arange(300) % 40
    outs = []
    for h in (weight_handle(table)[0], handle):
        keep, noisy = np.zeros(300, bool), np.zeros(300, np.int64)
        _kernel.release_into(counts, h, tsgd.k, keep, noisy, state(seed))
        outs.append((keep, noisy))
        given_cum[...] = 0
    same(outs[0], outs[1])


# =================================================================== _rng

@pytest.mark.slow
@SOME
@given(n=st.integers(0, 9000), m=st.integers(0, 200), seed=seeds)
def test_random_bytes_is_a_prefix_of_a_longer_call(n, m, seed):
    short, long = _rng.random_bytes(n, state(seed)), _rng.random_bytes(n + m, state(seed))
    assert len(short) == n and len(long) == n + m and long[:n] == short


@pytest.mark.parametrize("call, name, error", [
    (lambda: _rng.random_bytes(-1), "n", ValueError), (lambda: _rng.random_bytes(1.5), "n", TypeError),
    (lambda: _rng.random_bytes(True), "n", TypeError), (lambda: _rng.random_bytes(2**64), "n", ValueError),
    (lambda: _rng.random_bytes(1, "state"), "test_state", TypeError),
    (lambda: _rng.uniform_below_array(0, 3), "bound", ValueError),
    (lambda: _rng.uniform_below_array(U64 + 1, 3), "bound", ValueError),
    (lambda: _rng.uniform_below_array(2.0, 3), "bound", TypeError),
    (lambda: _rng.uniform_below_array(2, -1), "size", ValueError),
    (lambda: _rng.uniform_below_array(2, 2.0), "size", TypeError),
    (lambda: _rng.sample_cumulative(np.array([3, 2], np.uint64), 1), "cumulative", ValueError),
    (lambda: _rng.sample_cumulative(np.zeros(0, np.uint64), 1), "cumulative", ValueError),
    (lambda: _rng.sample_cumulative(np.array([0, 2], np.uint64), 1), "cumulative", ValueError),
    (lambda: _rng.sample_cumulative(np.array([1, 2], np.int64), 1), "cumulative", TypeError),
    (lambda: _rng.sample_cumulative(np.array([[1, 2]], np.uint64), 1), "cumulative", ValueError),
    (lambda: _rng.sample_cumulative(np.array([1, 2], np.uint64), -1), "size", ValueError),
    (lambda: _rng.bernoulli_fixed(np.zeros(2, np.int64)), "q", TypeError),
    (lambda: _rng.bernoulli_fixed(np.zeros(2, ">u8")), "q", TypeError),
    (lambda: _rng.bernoulli_fixed(np.zeros((2, 2), np.uint64)), "q", ValueError),
    (lambda: _rng.bernoulli_fixed(np.uint64(3)), "q", ValueError),
    (lambda: _rng.bernoulli_fixed([1, 2]), "q", TypeError),
    (lambda: _rng.bernoulli_wide(np.zeros(2, np.uint64)), "q", ValueError),
    (lambda: _rng.bernoulli_wide(np.zeros((2, 5), np.uint64)), "q", ValueError),
    (lambda: _rng.bernoulli_wide(np.zeros((2, 0), np.uint64)), "q", ValueError),
    (lambda: _rng.bernoulli_wide(np.zeros((2, 2), np.float64)), "q", TypeError),
    (lambda: _rng.chacha20_blocks(bytes(31), 0, bytes(12), 1), "key", ValueError),
    (lambda: _rng.chacha20_blocks(bytes(32), 0, bytes(11), 1), "nonce", ValueError),
    (lambda: _rng.chacha20_blocks(bytes(32), 2**32, bytes(12), 1), "counter", ValueError),
    (lambda: _rng.chacha20_blocks(bytes(32), -1, bytes(12), 1), "counter", ValueError),
    (lambda: _rng.chacha20_blocks(bytes(32), 0, bytes(12), -1), "nblocks", ValueError),
    (lambda: _rng.chacha20_blocks(bytes(32), 0, bytes(12), 1, 7), "engine", ValueError),
    (lambda: _rng.chacha20_blocks("k" * 32, 0, bytes(12), 1), "key", TypeError),
    (lambda: _rng.quarter_round(2**32, 0, 0, 0), "a", ValueError),
    (lambda: _rng.quarter_round(0, -1, 0, 0), "b", ValueError),
    (lambda: _rng.quarter_round(0, 0, 0.0, 0), "c", TypeError),
    (lambda: _rng.TestState(bytes(31), 0, _rng.ACK_INSECURE), "seed", ValueError),
    (lambda: _rng.TestState(bytes(32), -1, _rng.ACK_INSECURE), "stream", ValueError),
    (lambda: _rng.TestState(bytes(32), U64, _rng.ACK_INSECURE), "stream", ValueError),
    (lambda: _rng.TestState(bytes(32), 0, _rng.ACK_INSECURE + 1), "acknowledgement", ValueError),
])
def test_rng_refusals_name_the_parameter(call, name, error):
    with refused(error, name):
        call()


@pytest.mark.slow
@SOME
@given(bound=st.one_of(st.integers(1, 300), st.integers(1, U64), st.sampled_from([1, 2, 2**63, U64 - 1, U64])),
       size=st.integers(0, 2000), extra=st.integers(0, 50), seed=seeds)
def test_uniform_below_array_is_below_bound_and_one_stream(bound, size, extra, seed):
    a = _rng.uniform_below_array(bound, size, state(seed))
    b = _rng.uniform_below_array(np.uint64(bound - 1) + np.uint64(1) if bound < U64 else bound, size + extra, state(seed))
    assert a.dtype == np.uint64 and a.shape == (size,)
    assert all(int(x) < bound for x in a.tolist())
    np.testing.assert_array_equal(b[:size], a)
    if bound == 1:
        assert not a.any()


@pytest.mark.slow
@SOME
@given(q=st.lists(st.one_of(st.integers(0, U64 - 1), st.sampled_from([0, 1, 2**63, U64 - 1])), max_size=300),
       layout=st.sampled_from(LAYOUTS), seed=seeds)
def test_bernoulli_fixed_any_layout_equals_contiguous(q, layout, seed):
    arr = np.array(q, np.uint64)
    expected = _rng.bernoulli_fixed(arr, state(seed))
    got = _rng.bernoulli_fixed(arrange(arr, layout), state(seed))
    same(got, expected)
    assert not expected[arr == 0].any()  # U < 0 never holds


@FEW
@given(n=st.integers(0, 200), limbs=st.integers(1, 4), layout=st.sampled_from(["contiguous", "fortran", "strided"]),
       seed=seeds)
def test_bernoulli_wide_any_layout_equals_contiguous_and_extremes_are_certain(n, limbs, layout, seed):
    rng = np.random.default_rng(n)
    q = rng.integers(0, U64, size=(n, limbs), dtype=np.uint64)
    q[: n // 4] = 0
    q[n // 4: n // 2] = U64 - 1
    given_q = {"contiguous": q, "fortran": np.asfortranarray(q), "strided": np.repeat(q, 2, axis=0)[::2]}[layout]
    expected = _rng.bernoulli_wide(q, state(seed))
    same(_rng.bernoulli_wide(given_q, state(seed)), expected)
    assert not expected[: n // 4].any()
    # P(U >= Q) = 2**-(64 limbs) for the all-ones Q: certain for the test's purposes
    assert expected[n // 4: n // 2].all()


@pytest.mark.slow
@SOME
@given(weights=st.lists(st.integers(1, 2**40), min_size=1, max_size=40), lazy=st.booleans(), size=st.integers(0, 600),
       extra=st.integers(0, 20), layout=st.sampled_from(["strided", "reversed", "misaligned", "readonly"]), seed=seeds)
def test_sample_cumulative_is_in_range_any_layout_one_stream(weights, lazy, size, extra, layout, seed):
    cum = np.cumsum(np.array(weights, dtype=object)).astype(object)
    if lazy:  # total near 2**64: the lazy sampler; else exact uniform draws below the total
        cum = [int(c) + (U64 - 1 - int(cum[-1])) for c in cum]
        assume(cum[0] >= 1)
    arr = np.array([int(c) for c in cum], np.uint64)
    got = _rng.sample_cumulative(arr, size, state(seed))
    assert got.dtype == np.int64 and got.shape == (size,) and ((got >= 0) & (got < arr.size)).all()
    same(_rng.sample_cumulative(arrange(arr, layout), size + extra, state(seed))[:size], got)
    if arr.size == 1:
        assert not got.any()


def _rotl(v: int, n: int) -> int:
    return ((v << n) | (v >> (32 - n))) & 0xFFFFFFFF


def _quarter_round_model(a: int, b: int, c: int, d: int) -> tuple[int, int, int, int]:
    a = (a + b) & 0xFFFFFFFF; d = _rotl(d ^ a, 16)
    c = (c + d) & 0xFFFFFFFF; b = _rotl(b ^ c, 12)
    a = (a + b) & 0xFFFFFFFF; d = _rotl(d ^ a, 8)
    c = (c + d) & 0xFFFFFFFF; b = _rotl(b ^ c, 7)
    return a, b, c, d


@pytest.mark.slow
@SOME
@given(words=st.tuples(*[st.integers(0, 2**32 - 1)] * 4), as_numpy=st.booleans())
def test_quarter_round_matches_rfc_8439(words, as_numpy):
    args = [np.uint32(w) for w in words] if as_numpy else list(words)
    assert _rng.quarter_round(*args) == _quarter_round_model(*words)


def _engines() -> list[int]:
    available = []
    for engine in range(4):
        try:
            _rng.chacha20_blocks(bytes(32), 0, bytes(12), 1, engine)
            available.append(engine)
        except ValueError:
            pass
    return available


@pytest.mark.slow
@FEW
@given(key=st.binary(min_size=32, max_size=32), nonce=st.binary(min_size=12, max_size=12),
       counter=st.one_of(st.integers(0, 2**32 - 1), st.integers(2**32 - 40, 2**32 - 1)),
       n=st.integers(0, 40), m=st.integers(0, 40))
def test_chacha20_engines_agree_and_blocks_concatenate(key, nonce, counter, n, m):
    """Every engine gives the same keystream; n + m blocks are n blocks then m blocks from counter
    + n, which wraps around 2**32 as RFC 8439's 32-bit block counter does."""
    streams = {e: _rng.chacha20_blocks(key, counter, nonce, n + m, e) for e in _engines()}
    assert len(set(streams.values())) == 1
    whole = streams[0]
    assert len(whole) == 64 * (n + m) and whole == _rng.chacha20_blocks(key, counter, nonce, n + m)
    assert whole == _rng.chacha20_blocks(key, counter, nonce, n) + _rng.chacha20_blocks(
        key, (counter + n) % 2**32, nonce, m)
    assert _rng.engine_name() in ("scalar", "vector", "avx2", "avx512")
    assert isinstance(_rng.fork_generation(), int) and _rng.fork_generation() >= 0


@FEW
@given(seed=st.binary(min_size=32, max_size=32), stream=st.sampled_from([0, 1, 2**32, 2**64 - 1]),
       other=st.sampled_from([2, 2**33, 2**63]))
def test_test_state_streams_are_distinct_and_reproducible(seed, stream, other):
    a = _rng.TestState(seed, stream, _rng.ACK_INSECURE)
    assert a.seed == seed and a.stream == stream
    first = _rng.random_bytes(64, a)
    assert first == _rng.random_bytes(64, _rng.TestState(seed, np.uint64(stream), _rng.ACK_INSECURE))
    assert first != _rng.random_bytes(64, _rng.TestState(seed, other, _rng.ACK_INSECURE))


# =================================================================== _count

pairs_strategy = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 7)), max_size=150)


def _distinct_users(pairs, n_partitions: int = 8) -> np.ndarray:
    counts = np.zeros(n_partitions, np.int64)
    for _, p in set(pairs):
        counts[p] += 1
    return counts


@pytest.mark.slow
@SOME
@given(pairs=pairs_strategy, layout=st.sampled_from(LAYOUTS), kappa=st.sampled_from([1, 2, 3, 2**63, 2**64 - 1]),
       cap=st.sampled_from([None, 1, 3, 2**63 - 1]), batches=st.integers(1, 3), seed=seeds)
def test_pair_counter_any_layout_and_batching_equals_one_contiguous_feed(pairs, layout, kappa, cap, batches, seed):
    users = np.array([u for u, _ in pairs], np.uint32)
    parts = np.array([p for _, p in pairs], np.uint32)
    reference = _count.PairCounter()
    reference.feed(users, parts)
    expected = reference.finish(8, kappa, cap, state(seed))
    counter = _count.PairCounter(len(pairs))
    for chunk in np.array_split(np.arange(len(pairs)), batches):
        counter.feed(arrange(users[chunk], layout), arrange(parts[chunk], layout))
    assert counter.n_pairs == len(set(pairs)) and counter.nbytes >= 8 * counter.n_pairs
    got = counter.finish(8, kappa, cap, state(seed))
    same(got, expected)
    exact = _distinct_users(pairs)
    if kappa >= 8:  # nobody is bounded: the distinct users per partition, saturated at the cap
        np.testing.assert_array_equal(got, np.minimum(exact, cap or I64_MAX))
    assert (got <= exact).all() and got.sum() <= min(kappa, 8) * len({u for u, _ in pairs})


@pytest.mark.slow
@FEW
@given(pairs=pairs_strategy, bits=st.integers(1, 2), seed=seeds)
def test_pair_counter_shards_split_the_users(pairs, bits, seed):
    users = np.array([u for u, _ in pairs], np.uint32)
    parts = np.array([p for _, p in pairs], np.uint32)
    mask = 2**bits - 1
    total = np.zeros(8, np.int64)
    for shard in range(mask + 1):
        counter = _count.PairCounter()
        counter.feed(users, parts, np.uint32(mask), shard)
        total += counter.finish(8, 2**63, None, state(seed))
    np.testing.assert_array_equal(total, _distinct_users(pairs))


@pytest.mark.slow
@FEW
@given(pairs=pairs_strategy, sparse=st.booleans())
def test_pair_counter_group_lists_each_users_distinct_partitions(pairs, sparse):
    scale = 300_000_007 if sparse else 1
    users = np.array([u * scale % 0xFFFFFFFF for u, _ in pairs], np.uint32)
    parts = np.array([p for _, p in pairs], np.uint32)
    counter = _count.PairCounter()
    counter.feed(users, parts)
    ends, grouped = counter.group(8)
    assert ends.dtype == np.uintp and grouped.dtype == np.uint32
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    assert (np.diff(ends.astype(np.int64)) >= 0).all() and (ends[-1] if ends.size else 0) == grouped.size
    by_user = {}
    for u, p in zip(users.tolist(), parts.tolist()):
        by_user.setdefault(u, set()).add(p)
    runs = [set(grouped[s:e].tolist()) for s, e in zip(starts, ends)]
    # one run per user code up to the largest (absent codes: empty runs), or, for sparse codes,
    # one per distinct user after renumbering; either way in the order of the codes
    assert [r for r in runs if r] == [by_user[u] for u in sorted(by_user)]
    assert len(runs) <= max(len(pairs), 1) and len(runs) >= len(by_user)
    with pytest.raises(RuntimeError, match="already been finished"):
        counter.group(8)


@pytest.mark.parametrize("call, name, error", [
    (lambda c: c.feed(np.zeros(2, np.int64), np.zeros(2, np.uint32)), "users", TypeError),
    (lambda c: c.feed(np.zeros(2, np.uint32), np.zeros(2, np.float32)), "partitions", TypeError),
    (lambda c: c.feed(np.zeros(2, ">u4"), np.zeros(2, np.uint32)), "users", TypeError),
    (lambda c: c.feed(np.zeros((2, 1), np.uint32), np.zeros(2, np.uint32)), "users", ValueError),
    (lambda c: c.feed(np.uint32(1), np.zeros(1, np.uint32)), "users", ValueError),
    (lambda c: c.feed([0, 1], np.zeros(2, np.uint32)), "users", TypeError),
    (lambda c: c.feed(np.zeros(2, np.uint32), np.zeros(3, np.uint32)), "same length", ValueError),
    (lambda c: c.feed(np.array([0, 0xFFFFFFFF], np.uint32), np.zeros(2, np.uint32)), "row 1", ValueError),
    (lambda c: c.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32), 2), "shard_mask", ValueError),
    (lambda c: c.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32), 1, 2), "shard", ValueError),
    (lambda c: c.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32), -1), "shard_mask", ValueError),
    (lambda c: c.finish(-1, 1, None, None), "n_partitions", ValueError),
    (lambda c: c.finish(1.0, 1, None, None), "n_partitions", TypeError),
    (lambda c: c.finish(1, 0, None, None), "max_partitions_contributed", ValueError),
    (lambda c: c.finish(1, 2**64, None, None), "max_partitions_contributed", ValueError),
    (lambda c: c.finish(1, 1.0, None, None), "max_partitions_contributed", TypeError),
    (lambda c: c.finish(1, 1, 0, None), "cap", ValueError),
    (lambda c: c.finish(1, 1, 2**63, None), "cap", ValueError),
    (lambda c: c.finish(1, 1, None, "state"), "test_state", TypeError),
    (lambda c: c.group(-1), "n_partitions", ValueError),
    (lambda c: _count.PairCounter(-1), "expected_pairs", ValueError),
    (lambda c: _count.PairCounter(2.0), "expected_pairs", TypeError),
])
def test_pair_counter_refusals_name_the_parameter(call, name, error):
    counter = _count.PairCounter()
    counter.feed(np.array([1], np.uint32), np.array([0], np.uint32))
    with refused(error, name):
        call(counter)
    if name != "row 1":  # documented: the rows before a bad code are added, nothing after it
        assert counter.n_pairs == 1  # a refused call leaves the counter as it was


def _radix(users: np.ndarray, parts: np.ndarray, offset: int, splits: int, layout: str, source: str,
           seed: int) -> _count.RadixPairs:
    """Every step of RadixPairs on users[offset:] (an integer buffer read from `offset`), counted
    and scattered in `splits` pieces, the places and codes passed in `layout`."""
    n = len(users) - offset
    buffer = {"numpy": users, "bytes": users.tobytes(), "memoryview": memoryview(users)}[source]
    width = users.dtype.itemsize
    radix = _count.RadixPairs(n, seed)
    bounds = np.linspace(0, n, splits + 1).astype(int)
    for lo, hi in itertools.pairwise(bounds):
        radix.count(hi - lo, offset + lo, buffer, width)
    radix.layout()
    for lo, hi in itertools.pairwise(bounds):
        places = radix.scatter_users(hi - lo, offset + lo, buffer, width)
        assert places.dtype == np.uint64 and len(places) == hi - lo
        radix.scatter_codes(arrange(places, layout), arrange(parts[lo:hi], layout))
    radix.ready()
    half = radix.n_buckets // 2
    radix.group(half, radix.n_buckets)  # any order of disjoint ranges
    radix.group(0, half)
    radix.compact()
    return radix


@pytest.mark.slow
@SOME
@given(pairs=pairs_strategy, dtype=st.sampled_from(INT_DTYPES), offset=st.integers(0, 5), splits=st.integers(1, 4),
       layout=st.sampled_from(LAYOUTS), source=st.sampled_from(["numpy", "bytes", "memoryview"]),
       kappa=st.sampled_from([1, 2, 3, 2**63, 2**64 - 1]), cap=st.sampled_from([None, 1, 3, 2**63 - 1]), seed=seeds,
       hash_seed=st.integers(0, U64 - 1))
def test_radix_pairs_any_layout_and_pieces_equal_one_contiguous_pass(pairs, dtype, offset, splits, layout, source,
                                                                      kappa, cap, seed, hash_seed):
    info = np.iinfo(dtype)
    users = np.zeros(offset + len(pairs), dtype)
    users[offset:] = [info.min + u if info.min else info.max - u for u, _ in pairs]
    parts = np.array([p for _, p in pairs], np.uint32)
    radix = _radix(users, parts, offset, splits, layout, source, hash_seed)
    reference = _radix(np.ascontiguousarray(users[offset:]), parts, 0, 1, "contiguous", "numpy", 0)
    assert (radix.n_users, radix.n_pairs) == (len({u for u, _ in pairs}), len(set(pairs)))
    same(radix.groups(), reference.groups())
    assert radix.nbytes >= 0
    got = radix.finish(0, 2, 8, kappa, cap, state(seed)) + radix.finish(1, 2, 8, kappa, cap, state(seed + 1))
    expected = reference.finish(0, 2, 8, kappa, cap, state(seed)) + reference.finish(1, 2, 8, kappa, cap, state(seed + 1))
    same(got, expected)
    exact = _distinct_users(pairs)
    if kappa >= 8:  # nobody is bounded: each shard saturates at the cap, the sum at most twice it
        np.testing.assert_array_equal(np.minimum(got, cap or I64_MAX), np.minimum(exact, cap or I64_MAX))
    assert (got <= exact).all() and got.sum() <= min(kappa, 8) * len({u for u, _ in pairs})


def _laid_out(n: int = 3) -> _count.RadixPairs:
    radix = _count.RadixPairs(n, 1)
    radix.count(n, 0, np.arange(n, dtype=np.int64), 8)
    radix.layout()
    return radix


def _compacted(n: int = 3) -> _count.RadixPairs:
    radix = _laid_out(n)
    radix.scatter_codes(radix.scatter_users(n, 0, np.arange(n, dtype=np.int64), 8), np.zeros(n, np.uint32))
    radix.ready()
    radix.group(0, radix.n_buckets)
    radix.compact()
    return radix


@pytest.mark.parametrize("call, name, error", [
    (lambda: _count.RadixPairs(-1, 0), "n_rows", ValueError),
    (lambda: _count.RadixPairs(1.0, 0), "n_rows", TypeError),
    (lambda: _count.RadixPairs(1, -1), "seed", ValueError),
    (lambda: _count.RadixPairs(1, 2**64), "seed", ValueError),
    (lambda: _count.RadixPairs(3, 0).count(3, 0, np.zeros(2, np.int64), 8), "values buffer holds 16", ValueError),
    (lambda: _count.RadixPairs(3, 0).count(3, 0, np.zeros(6, np.int64)[::2], 8), "values buffer", TypeError),
    (lambda: _count.RadixPairs(3, 0).count(3, 0, [1, 2, 3], 8), "values buffer", TypeError),
    (lambda: _count.RadixPairs(3, 0).count(3, 0, np.zeros(3, np.int32), 3), "width", ValueError),
    (lambda: _count.RadixPairs(3, 0).count(-1, 0, np.zeros(3, np.int64), 8), "bad sizes", ValueError),
    (lambda: _count.RadixPairs(3, 0).count(1, -1, np.zeros(3, np.int64), 8), "bad sizes", ValueError),
    (lambda: _count.RadixPairs(3, 0).count(1.0, 0, np.zeros(3, np.int64), 8), "integers", TypeError),
    (lambda: _laid_out().scatter_users(3, 0, np.zeros(2, np.int64), 8), "values buffer holds 16", ValueError),
    (lambda: _laid_out().scatter_codes(np.zeros(2, np.int64), np.zeros(2, np.uint32)), "places", TypeError),
    (lambda: _laid_out().scatter_codes(np.zeros(2, np.uint64), np.zeros(2, np.int32)), "codes", TypeError),
    (lambda: _laid_out().scatter_codes(np.zeros((2, 1), np.uint64), np.zeros(2, np.uint32)), "places", ValueError),
    (lambda: _laid_out().scatter_codes(np.zeros(2, np.uint64), np.zeros(3, np.uint32)), "one code per place", ValueError),
    (lambda: _laid_out().scatter_codes(np.array([3], np.uint64), np.zeros(1, np.uint32)), "place is out of range", ValueError),
    (lambda: _laid_out().group(0, 2), "last", ValueError),
    (lambda: _laid_out().group(-1, 1), "first", ValueError),
    (lambda: _compacted().finish(0, 0, 1, 1, None, None), "n_shards", ValueError),
    (lambda: _compacted().finish(2, 2, 1, 1, None, None), "shard", ValueError),
    (lambda: _compacted().finish(0, 1, -1, 1, None, None), "n_partitions", ValueError),
    (lambda: _compacted().finish(0, 1, 1.0, 1, None, None), "n_partitions", TypeError),
    (lambda: _compacted().finish(0, 1, 1, 0, None, None), "max_partitions_contributed", ValueError),
    (lambda: _compacted().finish(0, 1, 1, 2**64, None, None), "max_partitions_contributed", ValueError),
    (lambda: _compacted().finish(0, 1, 1, 1.0, None, None), "max_partitions_contributed", TypeError),
    (lambda: _compacted().finish(0, 1, 1, 1, 0, None), "cap", ValueError),
    (lambda: _compacted().finish(0, 1, 1, 1, 2**63, None), "cap", ValueError),
    (lambda: _compacted().finish(0, 1, 1, 1, None, "state"), "test_state", TypeError),
])
def test_radix_pairs_refusals_name_the_parameter(call, name, error):
    with refused(error, name):
        call()


@pytest.mark.slow
@SOME
@given(values=st.lists(st.integers(-3, 3), max_size=200), width=st.sampled_from([1, 2, 4, 8]),
       kind=st.sampled_from(["word", "bytes"]), nulls=st.booleans(), offset=st.integers(0, 9),
       split=st.integers(0, 200), source=st.sampled_from(["numpy", "bytes", "memoryview"]), seed=st.integers(0, U64 - 1))
def test_keymap_encode_fixed_gives_first_appearance_codes(values, width, kind, nulls, offset, split, source, seed):
    dtype = np.dtype(f"i{width}")
    n = len(values)
    full = np.zeros(offset + n, dtype)
    full[offset:] = values
    valid = [(i % 3 != 1) if nulls else True for i in range(n)]
    bits = np.packbits(np.array([True] * offset + valid, bool), bitorder="little")
    buffer = {"numpy": full, "bytes": full.tobytes(), "memoryview": memoryview(full)}[source]
    keymap = _count.KeyMap(kind, seed)
    split = min(split, n)
    first = keymap.encode_fixed(split, offset, bits if nulls else None, buffer, width)
    second = keymap.encode_fixed(n - split, offset + split, bits if nulls else None, buffer, width)
    codes = np.concatenate([first[0], second[0]])
    new_rows = np.concatenate([first[1], second[1] + split])
    expected_codes, expected_new = first_appearance([v if ok else None for v, ok in zip(values, valid)])
    assert codes.tolist() == expected_codes and new_rows.tolist() == expected_new
    assert len(keymap) == len(expected_new) and keymap.nbytes >= 0


@pytest.mark.slow
@SOME
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=120), offsets64=st.booleans(),
       offset=st.integers(0, 5), misaligned_offsets=st.booleans())
def test_keymap_encode_var_gives_first_appearance_codes(values, offsets64, offset, misaligned_offsets):
    encoded = [b""] * offset + [(v or "").encode() for v in values]
    ends = np.cumsum([0] + [len(e) for e in encoded])
    offsets = ends.astype(np.int64 if offsets64 else np.int32)
    if misaligned_offsets:
        offsets = arrange(offsets, "misaligned")
    valid = [True] * offset + [v is not None for v in values]
    bits = np.packbits(np.array(valid, bool), bitorder="little")
    keymap = _count.KeyMap("bytes", 5)
    codes, new_rows = keymap.encode_var(len(values), offset, bits, offsets, offsets64, b"".join(encoded))
    expected_codes, expected_new = first_appearance(values)
    assert codes.tolist() == expected_codes and new_rows.tolist() == expected_new


@pytest.mark.slow
@SOME
@given(indices=st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=150), width=st.sampled_from([1, 2, 4, 8]),
       offset=st.integers(0, 4))
def test_dictionary_codes_give_first_appearance_codes(indices, width, offset):
    raw = np.zeros(offset + len(indices), f"i{width}")
    raw[offset:] = [i if i is not None else 0 for i in indices]
    bits = np.packbits(np.array([True] * offset + [i is not None for i in indices], bool), bitorder="little")
    dictionary = _count.DictionaryCodes(6)
    codes, new_rows = dictionary.encode(len(indices), offset, bits, raw, width)
    expected_codes, expected_new = first_appearance(indices)
    assert codes.tolist() == expected_codes and new_rows.tolist() == expected_new and len(dictionary) == len(expected_new)


@pytest.mark.parametrize("call, pattern, error", [
    (lambda: _count.KeyMap("word", 1).encode_fixed(3, 0, None, np.zeros(2, np.int32), 4), "values buffer holds 8", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(3, 0, None, np.zeros(6, np.int32)[::2], 4), "values buffer", TypeError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(3, 0, None, [1, 2, 3], 4), "values buffer", TypeError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(3, 0, np.zeros(0, np.uint8), np.zeros(3, np.int32), 4), "validity", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(-1, 0, None, np.zeros(3, np.int32), 4), "bad sizes", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(1, -1, None, np.zeros(3, np.int32), 4), "bad sizes", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(1, 2**64, None, np.zeros(3, np.int32), 4), "bad sizes", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(1.0, 0, None, np.zeros(3, np.int32), 4), "integers", TypeError),
    (lambda: _count.KeyMap("word", 1).encode_fixed(1, 0, None, np.zeros(3, np.int32), 3), "width", ValueError),
    (lambda: _count.KeyMap("word", -1), "seed", ValueError),
    (lambda: _count.KeyMap("words", 1), "kind", ValueError),
    (lambda: _count.KeyMap("bytes", 1).encode_var(2, 0, None, np.array([0, 1], np.int32), False, b"ab"), "offsets buffer", ValueError),
    (lambda: _count.KeyMap("bytes", 1).encode_var(2, 0, None, np.array([0, 1, 3], np.int32), False, b"ab"), "offsets of row 1", ValueError),
    (lambda: _count.KeyMap("bytes", 1).encode_var(2, 0, None, np.array([0, 2, 1], np.int32), False, b"ab"), "offsets of row 1", ValueError),
    (lambda: _count.KeyMap("bytes", 1).encode_var(1, 0, None, np.array([-1, 1], np.int32), False, b"ab"), "offsets of row 0", ValueError),
    (lambda: _count.KeyMap("word", 1).encode_var(1, 0, None, np.array([0, 1], np.int32), False, b"ab"), "cannot be encoded", ValueError),
    (lambda: _count.DictionaryCodes(2).encode(1, 0, None, np.array([2], np.int8), 1), "outside its dictionary", ValueError),
    (lambda: _count.DictionaryCodes(2).encode(1, 0, None, np.array([-1], np.int8), 1), "outside its dictionary", ValueError),
    (lambda: _count.DictionaryCodes(2).encode(1, 0, None, np.array([0], np.int8), 3), "index width", ValueError),
    (lambda: _count.DictionaryCodes(-1), "dictionary length", ValueError),
    (lambda: _count.DictionaryCodes(2.0), "integers", TypeError),
])
def test_column_code_refusals_name_the_problem(call, pattern, error):
    with pytest.raises(error, match=pattern):
        call()


# =================================================================== _weighted

def _weighted_model(sets, weights, n_partitions):
    histogram = np.zeros(n_partitions, np.int64)
    for s in sets:
        for p in s:
            histogram[p] += weights[len(s)]
    return histogram


@pytest.mark.slow
@SOME
@given(sets=st.lists(st.sets(st.integers(0, 9), max_size=6), max_size=40), kappa=st.sampled_from([1, 2, 3, 6, 2**63]),
       layout=st.sampled_from(["contiguous", "strided", "reversed", "misaligned", "readonly"]),
       excluded=st.one_of(st.none(), st.sets(st.integers(0, 9))), mask_dtype=st.sampled_from([np.bool_, np.uint8]),
       seed=seeds)
def test_weighted_round_any_layout_equals_contiguous_and_the_model(sets, kappa, layout, excluded, mask_dtype, seed):
    grouped = np.array([p for s in sets for p in sorted(s)], np.uint32)
    ends = np.cumsum([len(s) for s in sets]).astype(np.uintp)
    n_weights = min(kappa, 7) + 1
    if kappa > 7:  # the weights array needs kappa + 1 entries: kappa 2**63 only in its refusal
        with refused(ValueError, "weights"):
            _weighted.weighted_round(ends, grouped.copy(), None, kappa, np.arange(n_weights, dtype=np.int64),
                                     np.zeros(10, np.int64), state(seed))
        return
    weights = np.arange(n_weights, dtype=np.int64) * 1000 + 1
    mask = None if excluded is None else np.array([p in excluded for p in range(10)], mask_dtype)
    expected = np.full(10, 5, np.int64)
    _weighted.weighted_round(ends, grouped.copy(), mask, kappa, weights, expected, state(seed))
    got = np.full(10, 5, np.int64)
    _weighted.weighted_round(arrange(ends, layout), grouped.copy(), None if mask is None else arrange(mask, layout),
                             kappa, arrange(weights, layout), got, state(seed))
    same(got, expected)
    if excluded is not None:
        assert (got[sorted(excluded)] == 5).all()  # released partitions are never drawn again
    if kappa >= 6 and excluded is None:  # nobody is bounded: deterministic
        np.testing.assert_array_equal(got - 5, _weighted_model(sets, weights, 10))


@pytest.mark.parametrize("bad, name, error", [
    ("ends int64", "ends", TypeError), ("ends 2d", "ends", ValueError), ("ends decreasing", "ends", ValueError),
    ("ends short", "ends", ValueError), ("grouped readonly", "grouped", ValueError),
    ("grouped strided", "grouped", ValueError), ("grouped int32", "grouped", TypeError),
    ("weights length", "weights", ValueError), ("weights float", "weights", TypeError),
    ("histogram readonly", "histogram", ValueError), ("histogram uint64", "histogram", TypeError),
    ("histogram over grouped", "grouped overlaps histogram", ValueError), ("excluded length", "excluded", ValueError),
    ("excluded int16", "excluded", TypeError), ("kappa 0", "kappa", ValueError), ("kappa float", "kappa", TypeError),
    ("code out of range", "partition code", ValueError),
])
def test_weighted_round_refusals_name_the_parameter(bad, name, error):
    args = dict(ends=np.array([2, 3], np.uintp), grouped=np.array([0, 1, 2], np.uint32), excluded=None, kappa=2,
                weights=np.array([0, 10, 20], np.int64), histogram=np.zeros(4, np.int64))
    field, what = bad.split(" ", 1)
    if bad == "histogram over grouped":
        buf = np.zeros(4, np.int64)
        args["histogram"], args["grouped"] = buf, buf.view(np.uint32)[:3]
        args["grouped"][...] = [0, 1, 2]
    elif bad == "code out of range":
        args["grouped"] = np.array([0, 1, 7], np.uint32)
    else:
        value = {
            "ends int64": np.array([2, 3], np.int64), "ends 2d": np.array([[2, 3]], np.uintp),
            "ends decreasing": np.array([3, 2, 3], np.uintp), "ends short": np.array([2], np.uintp),
            "grouped readonly": arrange(args["grouped"], "readonly"), "grouped strided": arrange(args["grouped"], "strided"),
            "grouped int32": args["grouped"].astype(np.int32), "weights length": np.array([0, 1], np.int64),
            "weights float": np.array([0.0, 1, 2]), "histogram readonly": arrange(args["histogram"], "readonly"),
            "histogram uint64": np.zeros(4, np.uint64), "excluded length": np.zeros(3, bool),
            "excluded int16": np.zeros(4, np.int16), "kappa 0": 0, "kappa float": 2.0,
        }[bad]
        args[field] = value
    histogram = args["histogram"]
    before = histogram.copy() if histogram.flags.writeable else None
    with refused(error, name):
        _weighted.weighted_round(test_state=state(1), **args)
    if before is not None and bad != "histogram over grouped":  # nothing was added
        np.testing.assert_array_equal(histogram, before)


@pytest.mark.slow
@SOME
@given(z=st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 1e-300, 40.0, -40.0])), max_size=60),
       layout=st.sampled_from(LAYOUTS))
def test_normal_upper_tail_matches_erfc_in_any_layout(z, layout):
    arr = np.array(z, np.float64)
    got = _weighted.normal_upper_tail(arrange(arr, layout))
    expected = [0.5 * math.erfc(x / math.sqrt(2)) if not math.isnan(x) else math.nan for x in z]
    # the C library's erfc and Python's: they agree to ~1e-13 relative far in the tail (z = 24 gave
    # 1.2e-13), and both are approximations there
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got, _weighted.normal_upper_tail(arr))
    assert ((got >= 0) & (got <= 1) | np.isnan(got)).all()


@pytest.mark.parametrize("z, error", [(np.zeros(2, np.float32), TypeError), (np.zeros(2, ">f8"), TypeError),
                                      (np.zeros((2, 2)), ValueError), (np.float64(1.0), ValueError),
                                      ([0.5], TypeError), (np.zeros(2, np.int64), TypeError)])
def test_normal_upper_tail_refuses_other_dtypes_and_shapes(z, error):
    with refused(error, "z"):
        _weighted.normal_upper_tail(z)


# =================================================================== _bound

rows_strategy = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(-1000, 1000)), max_size=120)


@pytest.mark.slow
@SOME
@given(rows=rows_strategy, kappa=st.sampled_from([1, 2, 5, 2**63, 2**64 - 1]), linf=st.sampled_from([1, 3, 2**63]),
       layout=st.sampled_from(["contiguous", "strided", "misaligned", "readonly", "column"]),
       kept_dtype=st.sampled_from([np.uint8, np.bool_]), seed=seeds)
def test_bound_rows_any_layout_equals_contiguous_and_the_exact_sums(rows, kappa, linf, layout, kept_dtype, seed):
    users = np.array([u for u, _, _ in rows], np.uint32)
    parts = np.array([p for _, p, _ in rows], np.uint32)
    values = np.array([v for _, _, v in rows], np.int64)
    kept0 = np.zeros(len(rows), np.uint8)
    expected = _bound.bound_rows(users, parts, 7, 5, kappa, linf, [values, -values], state(seed), users_before=True,
                                 kept=kept0)
    kept1 = np.zeros(len(rows), kept_dtype)
    got = _bound.bound_rows(arrange(users, layout), arrange(parts, layout), np.uint32(7), 5, kappa, linf,
                            [arrange(values, layout), arrange(-values, layout)], state(seed), users_before=True, kept=kept1)
    same(got[:4], expected[:4])
    assert got[4] == expected[4]
    np.testing.assert_array_equal(kept1.astype(np.uint8), kept0)
    out_users, out_rows, sums, before, stats = got
    kept = kept0.astype(bool)
    exact = [sum(int(v) for v, p, k in zip(values, parts, kept) if k and p == q) for q in range(5)]
    assert Wide.from_words(sums[0]).to_ints() == exact
    assert Wide.from_words(sums[1]).to_ints() == [-x for x in exact]
    np.testing.assert_array_equal(out_rows, np.bincount(parts[kept], minlength=5))
    assert stats["rows"] == len(rows) and stats["rows_kept"] == kept.sum() == out_rows.sum()
    np.testing.assert_array_equal(before, _distinct_users(list(zip(users.tolist(), parts.tolist())), 5))
    if kappa >= 5 and linf >= len(rows):  # nobody bounded: everything is kept
        assert kept.all() and (out_users == before).all()


@FEW
@given(n=st.integers(1, 5), big=st.sampled_from([I64_MAX, -2**63]), seed=seeds)
def test_bound_rows_sums_past_int64_limits_are_exact(n, big, seed):
    users = np.arange(n + 1, dtype=np.uint32)
    parts = np.zeros(n + 1, np.uint32)
    values = np.full(n + 1, big, np.int64)
    out = _bound.bound_rows(users, parts, n + 1, 1, 1, 1, [values], state(seed))
    assert Wide.from_words(out[2][0]).to_ints() == [(n + 1) * big]
    ok = _bound.bound_rows(users[:1], parts[:1], 1, 1, 1, 1, [values[:1]], state(seed))
    assert Wide.from_words(ok[2][0]).to_ints() == [big]


@pytest.mark.parametrize("bad, name, error", [
    ("users int64", "users", TypeError), ("users 2d", "users", ValueError), ("partitions short", "same length", ValueError),
    ("n_users small", "user codes must be < n_users", ValueError), ("n_users float", "n_users", TypeError),
    ("n_partitions negative", "n_partitions", ValueError), ("kappa 0", "max_partitions_contributed", ValueError),
    ("kappa float", "max_partitions_contributed", TypeError), ("linf 0", "max_contributions_per_partition", ValueError),
    ("linf huge", "max_contributions_per_partition", ValueError), ("values int32", "values[0]", TypeError),
    ("values short", "values[0]", ValueError), ("values tuple", "values", TypeError), ("kept short", "kept", ValueError),
    ("kept readonly", "kept", ValueError), ("kept int64", "kept", TypeError), ("kept over values", "kept overlaps values[0]", ValueError),
    ("shard_mask 2", "shard_mask", ValueError),
])
def test_bound_rows_refusals_name_the_parameter(bad, name, error):
    args = dict(users=np.array([0, 1, 1], np.uint32), partitions=np.array([0, 0, 1], np.uint32), n_users=2,
                n_partitions=2, kappa=1, linf=1, values=[np.array([1, 2, 3], np.int64)], test_state=state(1))
    field, what = bad.split(" ", 1)
    kept = None
    if field == "kept":
        kept = {"short": np.zeros(2, np.uint8), "readonly": arrange(np.zeros(3, np.uint8), "readonly"),
                "int64": np.zeros(3, np.int64), "over values": args["values"][0].view(np.uint8)[:3]}[what]
    else:
        args[field] = {
            "users int64": args["users"].astype(np.int64), "users 2d": args["users"][None, :],
            "partitions short": args["partitions"][:2], "n_users small": 1, "n_users float": 2.0,
            "n_partitions negative": -1, "kappa 0": 0, "kappa float": 1.0, "linf 0": 0, "linf huge": 2**64,
            "values int32": [np.zeros(3, np.int32)], "values short": [np.zeros(2, np.int64)],
            "values tuple": (np.zeros(3, np.int64),), "shard_mask 2": 2,
        }[bad]
    with refused(error, name):
        _bound.bound_rows(**args, kept=kept)
    if kept is not None and kept.flags.writeable and what != "over values":
        assert not kept.any()


# =================================================================== _noise

@pytest.mark.slow
@SOME
@given(values=st.lists(st.integers(-2**40, 2**40), max_size=200),
       scale=st.sampled_from([(1, 1), (3, 2), (1, I64_MAX), (10**6, 7), (2**20, 1)]),
       layout=st.sampled_from(LAYOUTS), in_place=st.booleans(), seed=seeds)
def test_add_discrete_laplace_noise_does_not_depend_on_values_or_layout(values, scale, layout, in_place, seed):
    arr = np.array(values, np.int64)
    noise = _noise.add_discrete_laplace(np.zeros(arr.size, np.int64), *scale, None, state(seed))
    given_values = arrange(arr, layout)
    if in_place and given_values.flags.writeable and given_values.flags.c_contiguous and given_values.flags.aligned:
        got = _noise.add_discrete_laplace(given_values, *scale, given_values, state(seed))
        assert got is given_values
    else:
        got = _noise.add_discrete_laplace(given_values, *scale, None, state(seed))
        np.testing.assert_array_equal(given_values, arr)  # the input is left alone
    np.testing.assert_array_equal(got - arr, noise)
    if scale == (1, I64_MAX):  # scale 2**-63: P(X != 0) = 2 exp(-2**63) / ...: zero noise
        assert not noise.any()


@pytest.mark.slow
@FEW
@given(values=st.lists(st.integers(-2**40, 2**40), max_size=100),
       sigma2=st.sampled_from([(1, 1), (7, 3), (1, 2**62), (10**12, 1), (2**90, 1)]),
       layout=st.sampled_from(LAYOUTS), seed=seeds)
def test_add_discrete_gaussian_noise_does_not_depend_on_values_or_layout(values, sigma2, layout, seed):
    arr = np.array(values, np.int64)
    noise = _noise.add_discrete_gaussian(np.zeros(arr.size, np.int64), *sigma2, None, state(seed))
    out = np.empty(arr.size, np.int64)
    got = _noise.add_discrete_gaussian(arrange(arr, layout), *sigma2, out, state(seed))
    assert got is out
    np.testing.assert_array_equal(out - arr, noise)
    if sigma2 == (1, 2**62):
        assert not noise.any()


@FEW
@given(big=st.sampled_from([I64_MAX, -2**63]), n=st.integers(1, 50), seed=seeds)
def test_noise_overflow_near_int64_limits_zeroes_out(big, n, seed):
    values = np.full(n, big, np.int64)
    out = np.ones(n, np.int64)
    try:
        _noise.add_discrete_laplace(values, 2**40, 1, out, state(seed))
    except OverflowError as exc:
        assert "values[" in str(exc) and not out.any()
    else:  # possible only if every draw was 0 or pointed inwards
        assert ((out - values) * np.sign(-big) >= 0).all()


@pytest.mark.parametrize("call, name, error", [
    (lambda v, o: _noise.add_discrete_laplace(v.astype(np.int32), 1, 1), "values", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v.astype(">i8"), 1, 1), "values", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v.astype(float), 1, 1), "values", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(list(v), 1, 1), "values", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v.reshape(2, 2), 1, 1), "values", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v[0], 1, 1), "values", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v, 0, 1), "scale_num", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 2**63, 1), "scale_num", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1.5), "scale_den", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v, True, 1), "scale_num", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, o.astype(np.int32)), "out", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, o[:3]), "out", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, arrange(o, "readonly")), "out", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, arrange(o, "strided")), "out", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, arrange(o, "misaligned")), "out", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, list(o)), "out", TypeError),
    (lambda v, o: _noise.add_discrete_laplace(v[:3], 1, 1, v[1:]), "out overlaps values", ValueError),
    (lambda v, o: _noise.add_discrete_laplace(v, 1, 1, None, "state"), "test_state", TypeError),
    (lambda v, o: _noise.add_discrete_gaussian(v, 0, 1), "sigma2_num", ValueError),
    (lambda v, o: _noise.add_discrete_gaussian(v, 2**100, 1), "sigma2", ValueError),
    (lambda v, o: _noise.add_discrete_gaussian(v, 1, 2**256), "sigma2_den", ValueError),
    (lambda v, o: _noise.add_discrete_gaussian(v, 1.0, 1), "sigma2_num", TypeError),
    (lambda v, o: _noise.add_discrete_gaussian(v, 1, 1, o[:1]), "out", ValueError),
    (lambda v, o: _noise.bernoulli_exp(1, 0, 3), "gamma_den", ValueError),
    (lambda v, o: _noise.bernoulli_exp(-1, 1, 3), "gamma_num", ValueError),
    (lambda v, o: _noise.bernoulli_exp(2**128, 1, 3), "gamma_num", ValueError),
    (lambda v, o: _noise.bernoulli_exp(1, 1, -1), "size", ValueError),
    (lambda v, o: _noise.bernoulli_exp(1, 1, 2.0), "size", TypeError),
    (lambda v, o: _noise.check_param("epsilon_num", 0), "epsilon_num", ValueError),
    (lambda v, o: _noise.check_param("epsilon_num", 2.0), "epsilon_num", TypeError),
    (lambda v, o: _noise.gaussian_parameters(0, 1), "sigma2_num", ValueError),
    (lambda v, o: _noise._u128_mul64(-1, 1), "a", ValueError),
    (lambda v, o: _noise._u128_mul64(1, U64), "b", ValueError),
    (lambda v, o: _noise._u128_divmod(1, 0), "d", ValueError),
    (lambda v, o: _noise._u128_divmod(2**128, 1), "n", ValueError),
])
def test_noise_refusals_name_the_parameter(call, name, error):
    values = np.arange(4, dtype=np.int64)
    out = np.full(4, 9, np.int64)
    with refused(error, name):
        call(values, out)
    np.testing.assert_array_equal(values, np.arange(4))
    assert (out == 9).all()


@pytest.mark.slow
@SOME
@given(num=st.integers(1, 2**100), den=st.integers(1, 2**100))
def test_gaussian_parameters_are_exact_or_refused(num, den):
    try:
        lap_num, lap_den, shift_num, shift_den, gamma_den = _noise.gaussian_parameters(num, den)
    except ValueError as exc:
        assert "sigma2" in str(exc)
        return
    sigma2 = Fraction(num, den)
    assert Fraction(lap_num, lap_den) * Fraction(shift_num, shift_den) == sigma2
    assert gamma_den == 2 * sigma2 * shift_den**2 and gamma_den <= _noise.MAX_GAMMA_DEN
    assert max(lap_num, lap_den, shift_num, shift_den) <= _noise.MAX_PARAM
    assert _noise.check_param("lap_num", np.int64(lap_num)) == lap_num


@pytest.mark.slow
@SOME
@given(num=st.one_of(st.just(0), st.integers(0, 2**128 - 1)), den=st.integers(1, 2**128 - 1), size=st.integers(0, 300),
       extra=st.integers(0, 30), seed=seeds)
def test_bernoulli_exp_extremes_and_one_stream(num, den, size, extra, seed):
    draws = _noise.bernoulli_exp(num, den, size, state(seed))
    assert draws.dtype == np.bool_ and draws.shape == (size,)
    np.testing.assert_array_equal(_noise.bernoulli_exp(num, den, size + extra, state(seed))[:size], draws)
    if num == 0:
        assert draws.all()  # exp(0) = 1
    if num >= 1000 * den:
        assert not draws.any()  # exp(-1000)


@pytest.mark.slow
@SOME
@given(a=st.integers(0, U64 - 1), b=st.integers(0, U64 - 1), n=st.integers(0, 2**128 - 1), d=st.integers(1, 2**128 - 1),
       small_d=st.integers(1, 2**64 - 1), portable=st.booleans())
def test_u128_helpers_match_python_integers(a, b, n, d, small_d, portable):
    assert _noise._u128_mul64(np.uint64(a), b, portable) == a * b
    assert _noise._u128_divmod(n, d, portable) == divmod(n, d)
    assert _noise._u128_divmod(n, small_d, portable) == divmod(n, small_d)

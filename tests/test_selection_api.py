"""The array API: shapes, dtypes, out= arrays, validation errors, Theorem 2 cases, and the
exact probabilities and guarantees it reports."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
EPS, DELTA = 1.0, 1e-5  # table length 23, TSGD k = 11


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_every_integer_dtype_gives_the_same_decisions(dtype):
    counts = np.array([0, 1, 5, 11, 12, 20, 22, 23, 100], dtype=dtype)
    reference = dpselect.select(counts.astype(np.int64), EPS, DELTA, rng=InsecureDeterministicRNG(7))
    keep = dpselect.select(counts, EPS, DELTA, rng=InsecureDeterministicRNG(7))
    assert keep.dtype == np.bool_ and keep.shape == counts.shape
    np.testing.assert_array_equal(keep, reference)
    assert not keep[0]  # an absent/zero partition is never kept
    assert keep[-2:].all()  # counts >= table length are always kept
    k, noisy = dpselect.release(counts, EPS, DELTA, rng=InsecureDeterministicRNG(7))
    k_ref, noisy_ref = dpselect.release(counts.astype(np.int64), EPS, DELTA, rng=InsecureDeterministicRNG(7))
    np.testing.assert_array_equal(k, k_ref)
    np.testing.assert_array_equal(noisy, noisy_ref)


def test_strided_and_nd_inputs_match_contiguous():
    base = np.arange(60, dtype=np.int64).reshape(3, 20) % 30
    strided = base[:, ::2]  # non-contiguous 2-D
    rng_a, rng_b = InsecureDeterministicRNG(3), InsecureDeterministicRNG(3)
    keep_strided = dpselect.select(strided, EPS, DELTA, rng=rng_a)
    keep_copy = dpselect.select(np.ascontiguousarray(strided), EPS, DELTA, rng=rng_b)
    assert keep_strided.shape == strided.shape
    np.testing.assert_array_equal(keep_strided, keep_copy)
    f_order = np.asfortranarray(base)
    assert dpselect.select(f_order, EPS, DELTA).shape == base.shape
    assert dpselect.select(np.int64(30), EPS, DELTA).shape == ()


def test_out_arrays_are_filled_and_returned():
    counts = np.arange(100, dtype=np.int32)
    out = np.zeros(200, dtype=bool)[::2]  # strided output
    result = dpselect.select(counts, EPS, DELTA, out=out)
    assert result is out and out[30:].all()
    keep, noisy = np.empty(100, bool), np.empty(100, np.int64)
    rel = dpselect.release(counts, EPS, DELTA, out=(keep, noisy))
    assert rel.keep is keep and rel.noisy_counts is noisy


def test_input_is_never_modified():
    counts = np.arange(50, dtype=np.int64)
    before = counts.copy()
    counts.setflags(write=False)  # read-only input works
    dpselect.select(counts, EPS, DELTA)
    dpselect.release(counts, EPS, DELTA)
    np.testing.assert_array_equal(counts, before)


def test_empty_and_python_lists():
    assert dpselect.select([], EPS, DELTA).shape == (0,)
    keep, noisy = dpselect.release(np.array([], dtype=np.uint16), EPS, DELTA)
    assert keep.shape == noisy.shape == (0,)
    assert dpselect.select([0, 100], EPS, DELTA).tolist() == [False, True]


def test_int64_maximum_counts():
    counts = np.array([np.iinfo(np.int64).max] * 3, dtype=np.int64)
    assert dpselect.select(counts, EPS, DELTA).all()
    keep, noisy = dpselect.release(counts, EPS, DELTA)
    assert keep.all()
    # n + X may exceed int64: the published value saturates (documented post-processing)
    assert (noisy >= np.iinfo(np.int64).max - 11).all()
    big = np.array([np.iinfo(np.uint64).max], dtype=np.uint64)
    assert dpselect.select(big, EPS, DELTA).all()
    assert dpselect.release(big, EPS, DELTA).noisy_counts[0] == np.iinfo(np.int64).max


@pytest.mark.parametrize(
    "counts,exc,match",
    [
        (np.array([1.0, 2.0]), TypeError, "integer"),
        (np.array([True, False]), TypeError, "bool"),
        (np.array([1, "a"], dtype=object), TypeError, "integer"),
        (np.array([3, 1, -2, -5]), ValueError, r"counts\[2\] = -2 is negative"),
        (np.array([[1, 2], [3, -1]], dtype=np.int8), ValueError, r"counts\[1, 1\] = -1"),
    ],
)
def test_bad_counts(counts, exc, match):
    with pytest.raises(exc, match=match):
        dpselect.select(counts, EPS, DELTA)
    with pytest.raises(exc, match=match):
        dpselect.release(counts, EPS, DELTA)


def test_negative_count_leaves_outputs_untouched_even_in_parallel_batches():
    """The scan for negatives runs before anything is drawn or written (docs/privacy/randomness.md)."""
    counts = np.full(1 << 20, 100, dtype=np.int64)  # big enough to be split across threads
    counts[-3] = -1
    out = np.ones(counts.shape, bool)
    with pytest.raises(ValueError, match=rf"counts\[{(1 << 20) - 3}\]"):
        dpselect.select(counts, EPS, DELTA, out=out)
    assert out.all()
    keep, noisy = np.ones(counts.shape, bool), np.full(counts.shape, 7, np.int64)
    with pytest.raises(ValueError, match="negative"):
        dpselect.release(counts, EPS, DELTA, out=(keep, noisy))
    assert keep.all() and (noisy == 7).all()


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(epsilon=float("nan")), ValueError, "epsilon must be finite"),
        (dict(epsilon=float("inf")), ValueError, "epsilon must be finite"),
        (dict(epsilon=-0.1), ValueError, "epsilon must be >= 0"),
        (dict(epsilon="1"), TypeError, "epsilon must be a real number"),
        (dict(epsilon=True), TypeError, "epsilon"),
        (dict(delta=1.0), ValueError, r"delta must be in \[0, 1\)"),
        (dict(delta=-1e-9), ValueError, "delta must be in"),
        (dict(delta=None), TypeError, "delta"),
        (dict(max_partitions_contributed=0), ValueError, "max_partitions_contributed must be >= 1"),
        (dict(max_partitions_contributed=1.5), TypeError, "max_partitions_contributed must be a positive int"),
        (dict(max_partitions_contributed=True), TypeError, "max_partitions_contributed"),
        (dict(delta_split="median"), ValueError, "delta_split"),
        (dict(rng=np.random.Generator(np.random.PCG64(1))), TypeError, "rng must be None"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    args = dict(epsilon=EPS, delta=DELTA)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        dpselect.select(np.arange(5), **args)


def test_bad_out_arrays():
    counts = np.arange(10)
    with pytest.raises(ValueError, match="shape"):
        dpselect.select(counts, EPS, DELTA, out=np.empty(9, bool))
    with pytest.raises(TypeError, match="dtype bool"):
        dpselect.select(counts, EPS, DELTA, out=np.empty(10, np.int8))
    with pytest.raises(TypeError, match="numpy array"):
        dpselect.select(counts, EPS, DELTA, out=[False] * 10)
    read_only = np.empty(10, bool)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        dpselect.select(counts, EPS, DELTA, out=read_only)
    with pytest.raises(TypeError, match="tuple"):
        dpselect.release(counts, EPS, DELTA, out=np.empty(10, bool))
    with pytest.raises(TypeError, match="int64"):
        dpselect.release(counts, EPS, DELTA, out=(np.empty(10, bool), np.empty(10, np.int32)))
    same = np.zeros(10, np.uint8)
    with pytest.raises(ValueError, match="overlap"):
        dpselect.select(same, EPS, DELTA, out=same.view(bool))


def test_delta_zero_follows_theorem_2():
    with pytest.raises(ValueError, match="Theorem 2"):
        dpselect.select(np.arange(5), 1.0, 0.0)
    with pytest.raises(ValueError, match="allow_no_release"):
        dpselect.release(np.arange(5), 1.0, 0.0)
    assert not dpselect.select(np.arange(5) * 1000, 1.0, 0.0, allow_no_release=True).any()
    keep, noisy = dpselect.release(np.arange(5) * 1000, 1.0, 0.0, allow_no_release=True)
    assert not keep.any() and not noisy.any()
    assert dpselect.keep_probability(10**9, 1.0, 0.0) == 0.0


def test_epsilon_zero_follows_theorem_2():
    probs = dpselect.keep_probability(np.arange(6), 0.0, 0.1)
    np.testing.assert_allclose(probs, [0, 0.1, 0.2, 0.3, 0.4, 0.5], rtol=1e-12)
    assert "Theorem 2" in str(dpselect.make_strategy("pi_opt", epsilon=0, delta=0.1).guarantee)
    with pytest.raises(ValueError, match="epsilon > 0"):
        dpselect.release(np.arange(5), 0.0, 0.1)


def test_keep_probability_and_crossovers():
    assert dpselect.crossovers(EPS, DELTA) == (11, 22, 11, 23)
    assert dpselect.crossovers(0.5, 0.02) == (6, 11, 6, 12)
    probs = dpselect.keep_probability(np.array([0, 1, 11, 22, 23, 10**12]), EPS, DELTA)
    assert probs[0] == 0 and probs[1] == pytest.approx(1e-5, rel=1e-9)
    assert probs[2] == pytest.approx(0.348448, rel=1e-5)
    assert probs[3] < 1 and probs[4] == 1 and probs[5] == 1
    assert isinstance(dpselect.keep_probability(3, EPS, DELTA), float)
    with pytest.raises(ValueError, match="negative"):
        dpselect.keep_probability(-1, EPS, DELTA)


def test_several_partitions_per_user_split_the_budget():
    c1 = dpselect.crossovers(1.0, 1e-5, max_partitions_contributed=3)
    c_eps = dpselect.crossovers(1 / 3, 1 - (1 - 1e-5) ** (1 / 3))
    assert c1.table_length == c_eps.table_length
    conservative = dpselect.crossovers(1.0, 1e-5, max_partitions_contributed=3, delta_split="conservative")
    assert conservative.table_length >= c1.table_length
    g = dpselect.make_strategy("release", epsilon=1.0, delta=1e-5, max_partitions_contributed=3).guarantee
    assert g.max_partitions_contributed == 3 and g.delta <= 1e-5 and g.epsilon == 1.0


def test_guarantees_state_certified_delta_within_budget():
    for strategy in ("pi_opt", "release"):
        s = dpselect.make_strategy(strategy, epsilon=0.5, delta=1e-6)
        assert s.guarantee.delta_exact <= Fraction(1, 10**6)
        assert s.guarantee.delta >= s.guarantee.delta_exact  # printed/float value rounds up
        assert "PoPETs 2022" in s.guarantee.reference and "docs/privacy/" in s.guarantee.reference
        assert "differentially private" in str(s.guarantee)
    assert dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5).count_cap == 23
    assert dpselect.make_strategy("release", epsilon=1, delta=1e-5).count_cap is None


def test_make_strategy_errors():
    with pytest.raises(ValueError, match="strategy must be one of"):
        dpselect.make_strategy("exponential", epsilon=1, delta=1e-5)
    with pytest.raises(TypeError, match="SelectionStrategy"):
        dpselect.make_strategy(42, epsilon=1, delta=1e-5)
    built = dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5)
    assert dpselect.make_strategy(built) is built
    with pytest.raises(ValueError, match="carries its own parameters"):
        dpselect.make_strategy(built, epsilon=1, delta=1e-5)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=200), max_size=300), st.integers(0, 2**32))
def test_release_publishes_exactly_counts_above_threshold(counts, seed):
    """Law: kept iff noisy > k, noisy within k of the count, zero where not kept."""
    arr = np.array(counts, dtype=np.int64)
    keep, noisy = dpselect.release(arr, EPS, DELTA, rng=InsecureDeterministicRNG(seed))
    k = dpselect.crossovers(EPS, DELTA).k
    assert np.array_equal(keep, noisy > k)
    assert (noisy[~keep] == 0).all()
    assert (np.abs(noisy[keep] - arr[keep]) <= k).all()
    assert not keep[arr == 0].any()


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("size", [63, 64, 65, 5000, 70001])
def test_vector_and_portable_paths_agree(dtype, size):
    """Contiguous 64-bit counts may take the AVX-512 block loop; a strided view of the same
    values takes the portable loop. Both must consume the stream identically."""
    values = (np.arange(size, dtype=np.int64) * 7919) % 40  # around the crossovers of ε=1
    contiguous = values.astype(dtype)
    strided = np.zeros(2 * size, dtype=dtype)[::2]
    strided[...] = contiguous
    fast = dpselect.select(contiguous, EPS, DELTA, rng=InsecureDeterministicRNG(11))
    portable = dpselect.select(strided, EPS, DELTA, rng=InsecureDeterministicRNG(11))
    np.testing.assert_array_equal(fast, portable)
    assert 0 < fast.sum() < size  # the comparison is not trivially all-equal


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("size", [63, 64, 65, 5000, 70001])
def test_release_vector_and_portable_paths_agree(dtype, size):
    """Contiguous 64-bit counts may take the AVX-512 release loop; a strided view of the same
    values takes the portable loop. Both must publish the same partitions and counts."""
    values = (np.arange(size, dtype=np.int64) * 7919) % 40
    contiguous = values.astype(dtype)
    strided = np.zeros(2 * size, dtype=dtype)[::2]
    strided[...] = contiguous
    fast = dpselect.release(contiguous, EPS, DELTA, rng=InsecureDeterministicRNG(13))
    portable = dpselect.release(strided, EPS, DELTA, rng=InsecureDeterministicRNG(13))
    np.testing.assert_array_equal(fast.keep, portable.keep)
    np.testing.assert_array_equal(fast.noisy_counts, portable.noisy_counts)
    assert 0 < fast.keep.sum() < size

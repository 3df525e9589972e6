"""Regressions for what the sanitizer run (tools/sanitize.sh) and the entry-point properties
(test_entry_point_properties.py) found in the extension modules. Each test failed before its fix:
in the normal build (a wrong answer, a silent conversion, the wrong exception), or under
tools/sanitize.sh, where the old code made AddressSanitizer or UndefinedBehaviorSanitizer abort
the run (the report is quoted in the test's docstring)."""
from __future__ import annotations

import numpy as np
import pytest

from dpselect import _bound, _count, _kernel, _noise, _rng, _weighted
from dpselect.core.params import validate_params
from dpselect.core.tables import keep_table, tsgd_table
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def state(seed: int = 1):
    return InsecureDeterministicRNG(seed)._test_state


def misaligned(values: np.ndarray) -> np.ndarray:
    """The same values, C-contiguous, at an address one byte past an aligned one."""
    raw = np.zeros(values.nbytes + values.itemsize, np.uint8)
    view = raw[1:1 + values.nbytes].view(values.dtype)
    view[...] = values
    assert not view.flags.aligned and view.flags.c_contiguous
    return view


# ------------------------------------------------------------------ _weighted.weighted_round

def test_weighted_round_refuses_decreasing_ends():
    """UBSan: csrc/subset.h:21: pointer index expression ... overflowed (a user's run length
    ends[u] - ends[u - 1] wrapped around to nearly 2**64)."""
    histogram = np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="ends must be non-decreasing"):
        _weighted.weighted_round(np.array([5, 1, 5], np.uintp), np.arange(5, dtype=np.uint32), None, 2,
                                 np.array([0, 1, 2], np.int64), histogram, state())
    assert not histogram.any()


def test_weighted_round_kappa_at_the_top_of_uint64_needs_its_weights():
    """ASan: heap-buffer-overflow in dps_weighted_round (kappa + 1 wrapped to 0 in uint64, so an
    empty weights array passed the length check and was read past its end)."""
    with pytest.raises(ValueError, match="weights must have kappa \\+ 1"):
        _weighted.weighted_round(np.array([3], np.uintp), np.arange(3, dtype=np.uint32), None, 2**64 - 1,
                                 np.zeros(0, np.int64), np.zeros(4, np.int64), state())


def test_weighted_round_negative_weight_overflow_is_refused_not_wrapped():
    """The overflow test INT64_MAX - w itself overflowed for a negative weight, and the sum then
    wrapped: -2**63 + 2 - 5 came back as 2**63 - 3."""
    histogram = np.array([-2**63 + 2], np.int64)
    with pytest.raises(ValueError, match="overflowed"):
        _weighted.weighted_round(np.array([1], np.uintp), np.zeros(1, np.uint32), None, 1,
                                 np.array([0, -5], np.int64), histogram, state())
    assert histogram[0] == -2**63 + 2
    ok = np.array([10], np.int64)
    _weighted.weighted_round(np.array([1], np.uintp), np.zeros(1, np.uint32), None, 1,
                             np.array([0, -5], np.int64), ok, state())
    assert ok[0] == 5


def test_weighted_round_refuses_an_excluded_mask_of_another_dtype():
    """An int16 mask of 4 entries was viewed as 8 uint8 flags, one per partition: each flag
    half of a number."""
    with pytest.raises(TypeError, match="excluded must have dtype uint8 or bool"):
        _weighted.weighted_round(np.array([1], np.uintp), np.zeros(1, np.uint32), np.zeros(4, np.int16), 1,
                                 np.array([0, 1], np.int64), np.zeros(8, np.int64), state())


def test_weighted_round_refuses_outputs_overlapping_inputs():
    """histogram is written while ends is read: sharing memory, a checked end could change into
    one past the end of grouped half-way."""
    buf = np.zeros(4, np.int64)
    ends = buf[:1].view(np.uintp)
    ends[0] = 1
    with pytest.raises(ValueError, match="histogram overlaps ends"):
        _weighted.weighted_round(ends, np.zeros(1, np.uint32), None, 1, np.array([0, 1], np.int64), buf, state())


# ------------------------------------------------------------------ _count: Arrow buffers

def test_keymap_encode_fixed_offset_cannot_wrap_the_size_check():
    """ASan: heap-buffer-overflow in load_word (csrc/keymap.c): (offset + n) * width was computed
    in size_t, so offset = 2**62 - 1 with width 4 needed "4 bytes" and the kernel read the 4
    bytes before the buffer."""
    keymap = _count.KeyMap("word", 1)
    with pytest.raises(ValueError, match="bad sizes|holds"):
        keymap.encode_fixed(2, 2**62 - 1, None, np.zeros(1, np.uint32), 4)
    with pytest.raises(ValueError, match="holds 4 bytes"):
        keymap.encode_fixed(2, 2**40, None, np.zeros(1, np.uint32), 4)


def test_dictionary_codes_offset_cannot_wrap_the_size_check():
    """ASan: heap-buffer-overflow in load_index (csrc/keymap.c), as for encode_fixed."""
    codes = _count.DictionaryCodes(4)
    with pytest.raises(ValueError, match="bad sizes|holds"):
        codes.encode(2, 2**62 - 1, None, np.zeros(1, np.uint32), 4)
    with pytest.raises(ValueError, match="holds 4 bytes"):
        codes.encode(2, 2**40, None, np.zeros(1, np.uint32), 4)


def test_keymap_encode_var_offset_cannot_wrap_the_size_check():
    keymap = _count.KeyMap("bytes", 1)
    with pytest.raises(ValueError, match="bad sizes|holds"):
        keymap.encode_var(2, 2**61 - 1, None, np.zeros(2, np.uint64), True, b"abc")


def test_keymap_encode_var_reads_offsets_at_any_address():
    """UBSan: csrc/keymap.c: load of misaligned address ... for type 'const int32_t' (a slice of
    a byte buffer as the offsets)."""
    aligned = np.array([0, 1, 3, 3], np.int32)
    expected = _count.KeyMap("bytes", 1).encode_var(3, 0, None, aligned, False, b"abc")
    for offsets in (misaligned(aligned), memoryview(misaligned(aligned)).cast("B")):
        got = _count.KeyMap("bytes", 1).encode_var(3, 0, None, offsets, False, b"abc")
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    wide = np.array([0, 1, 3, 3], np.int64)
    got = _count.KeyMap("bytes", 1).encode_var(3, 0, None, misaligned(wide), True, b"abc")
    np.testing.assert_array_equal(got[0], expected[0])


# ------------------------------------------------------------------ misaligned typed inputs

@pytest.mark.parametrize("name", ["bernoulli_fixed", "sample_cumulative", "feed", "normal_upper_tail",
                                  "add_discrete_laplace", "bound_rows", "weighted_round"])
def test_misaligned_inputs_give_the_aligned_answer(name):
    """UBSan: load of misaligned address ... for type 'const uint64_t' (dpselect/_rng.c),
    'const uint32_t' (csrc/count_pairset.c), 'const double' (csrc/weighted.c), 'const int64_t'
    (csrc/discrete_noise.c): a C-contiguous array at an odd address went to the kernel as is.
    Inputs are now copied into an aligned array (same dtype, same values)."""
    codes = np.array([0, 1, 1, 2, 0], np.uint32)

    def run(arrange):
        if name == "bernoulli_fixed":
            return _rng.bernoulli_fixed(arrange(np.array([0, 2**63, 2**64 - 1, 5], np.uint64)), state())
        if name == "sample_cumulative":
            return _rng.sample_cumulative(arrange(np.array([1, 2**40, 2**64 - 1], np.uint64)), 50, state())
        if name == "feed":
            counter = _count.PairCounter()
            counter.feed(arrange(codes), arrange(codes[::-1].copy()))
            return counter.finish(3, 1, None, state())
        if name == "normal_upper_tail":
            return _weighted.normal_upper_tail(arrange(np.array([-1.0, 0.0, 2.5])))
        if name == "add_discrete_laplace":
            return _noise.add_discrete_laplace(arrange(np.arange(6, dtype=np.int64)), 3, 2, None, state())
        if name == "bound_rows":
            return _bound.bound_rows(arrange(codes), arrange(codes), 3, 3, 1, 1, [arrange(np.arange(5, dtype=np.int64))],
                                     state())[:3]
        histogram = np.zeros(3, np.int64)
        _weighted.weighted_round(arrange(np.array([2, 3], np.uintp)), np.array([0, 1, 2], np.uint32), None, 1,
                                 arrange(np.array([0, 7], np.int64)), histogram, state())
        return histogram

    expected, got = run(lambda a: a), run(misaligned)
    for e, g in zip(expected if isinstance(expected, tuple) else [expected], got if isinstance(got, tuple) else [got]):
        np.testing.assert_array_equal(g, e)


def test_misaligned_outputs_are_refused():
    """An output cannot be copied: a misaligned one is refused (it was written through a
    misaligned int64_t pointer)."""
    values = np.arange(4, dtype=np.int64)
    with pytest.raises(ValueError, match="out must be a 1-D C-contiguous, aligned array"):
        _noise.add_discrete_laplace(values, 1, 1, misaligned(values), state())
    with pytest.raises(ValueError, match="histogram must be a C-contiguous, aligned array"):
        _weighted.weighted_round(np.array([1], np.uintp), np.zeros(1, np.uint32), None, 1,
                                 np.array([0, 1], np.int64), misaligned(np.zeros(2, np.int64)), state())


# ------------------------------------------------------------------ floats truncated to integers

@pytest.mark.parametrize("call", [
    lambda: _bound.bound_rows(np.zeros(2, np.uint32), np.zeros(2, np.uint32), 1, 1, 1.5, 1, [], None),
    lambda: _bound.bound_rows(np.zeros(2, np.uint32), np.zeros(2, np.uint32), 1, 1, 1, 1.9, [], None),
    lambda: _bound.bound_rows(np.zeros(2, np.uint32), np.zeros(2, np.uint32), 1.0, 1, 1, 1, [], None),
    lambda: _count.PairCounter().finish(2, 1.5, None, None),
    lambda: _count.PairCounter().finish(2, 1, 2.5, None),
    lambda: _count.PairCounter().feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32), 1.0),
    lambda: _count.KeyMap("word", 1.5),
    lambda: _noise._u128_mul64(1.5, 2),
    lambda: _weighted.weighted_round(np.array([1], np.uintp), np.zeros(1, np.uint32), None, 1.0,
                                     np.array([0, 1], np.int64), np.zeros(1, np.int64)),
    lambda: _rng.quarter_round(1.0, 2, 3, 4),
    lambda: _rng.chacha20_blocks(bytes(32), 1.0, bytes(12), 1),
], ids=["bound_rows kappa", "bound_rows linf", "bound_rows n_users", "finish kappa", "finish cap",
        "feed shard_mask", "KeyMap seed", "_u128_mul64", "weighted_round kappa", "quarter_round", "chacha20 counter"])
def test_float_parameters_are_refused_not_truncated(call):
    """uint32_t / uint64_t parameters (and kappa, linf, cap converted with a C cast) took a float
    and truncated it: bound_rows(kappa=1.5) ran with kappa 1."""
    with pytest.raises(TypeError, match="must be an integer|must be integers"):
        call()


# ------------------------------------------------------------------ _kernel outputs over the counts

def _keep_handle():
    return _kernel.KeepTableHandle(keep_table(validate_params(1.0, 1e-5, 1)).words)


def test_select_into_refuses_out_overlapping_counts():
    """Wrong answers: the tie path reads a count again after its decision was written, so with
    out=counts (uint8) about half of the seeds gave other decisions than with separate arrays."""
    counts = np.random.default_rng(0).integers(0, 30, 256).astype(np.uint8)
    with pytest.raises(ValueError, match="out overlaps counts"):
        _kernel.select_into(counts, _keep_handle(), counts, state())
    buf = np.zeros(512, np.uint8)
    with pytest.raises(ValueError, match="out overlaps counts"):
        _kernel.select_into(buf[::2], _keep_handle(), buf[1::2], state())  # interleaved: refused too


def test_release_into_refuses_outputs_overlapping_counts_or_each_other():
    table = tsgd_table(validate_params(1.0, 1e-5, 1))
    noise = _kernel.WeightTableHandle(table.cumulative)
    counts = np.arange(64, dtype=np.int64)
    keep = np.zeros(64, bool)
    with pytest.raises(ValueError, match="noisy overlaps counts"):
        _kernel.release_into(counts, noise, table.k, keep, counts, state())
    both = np.zeros(64, np.int64)
    with pytest.raises(ValueError, match="noisy overlaps keep"):
        _kernel.release_into(counts, noise, table.k, both.view(np.uint8)[:64].view(bool), both, state())


def test_weight_table_handle_refuses_other_dtypes_and_0d():
    """np.array(cumulative, dtype=uint64) converted silently (floats truncated, negative int64
    wrapped), and a 0-d array raised IndexError."""
    with pytest.raises(TypeError, match="cumulative .* must have dtype uint64"):
        _kernel.WeightTableHandle(np.array([1.0, 2.5, 2.0**64 - 2**11]))
    with pytest.raises(TypeError, match="cumulative .* must have dtype uint64"):
        _kernel.WeightTableHandle(np.array([-1, 2], np.int64))
    with pytest.raises(ValueError, match="1-D"):
        _kernel.WeightTableHandle(np.array(2**64 - 1, np.uint64))


def test_bound_rows_refuses_kept_overlapping_the_codes():
    """kept is written while partition codes are read: a kept flag written into a code already
    checked against n_partitions could turn it into an out-of-range index."""
    codes = np.zeros(8, np.uint32)
    with pytest.raises(ValueError, match="kept overlaps partitions"):
        _bound.bound_rows(np.zeros(8, np.uint32), codes, 1, 1, 1, 1, [], None, kept=codes.view(np.uint8)[:8])


# ------------------------------------------------------------------ found by the entry-point properties

def test_uniform_below_array_takes_a_numpy_bound():
    """np.uint64 bounds passed the type check, then bound % 2**64 overflowed in numpy
    (OverflowError: Python int too large to convert to C long)."""
    got = _rng.uniform_below_array(np.uint64(2**64 - 1), 5, state())
    assert got.dtype == np.uint64 and got.shape == (5,)
    np.testing.assert_array_equal(_rng.uniform_below_array(np.int64(3), 50, state()),
                                  _rng.uniform_below_array(3, 50, state()))


def test_a_wrong_test_state_is_named():
    """A wrong test_state said only "Cannot convert str to dpselect._rng.TestState"."""
    with pytest.raises(TypeError, match="test_state must be None"):
        _noise.add_discrete_laplace(np.zeros(2, np.int64), 1, 1, None, "seed")


def test_weighted_round_refuses_a_bad_code_before_adding_anything():
    """A code out of range was found while adding: the users before it had already been added."""
    histogram = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="partition code is out of range"):
        _weighted.weighted_round(np.array([2, 3], np.uintp), np.array([0, 1, 7], np.uint32), None, 2,
                                 np.array([0, 10, 20], np.int64), histogram, state())
    assert not histogram.any()

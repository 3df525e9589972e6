"""The package CSPRNG (docs/privacy/randomness.md).

* the fast-key-erasure construction, byte for byte against OpenSSL's ChaCha20 (through the
  deterministic test state, which runs the same refill code as production);
* the secure generator: lengths, refills across the 4064-byte edge, fresh output per call;
* exact samplers: uniform_below (any positive int), uniform_below_array, bernoulli,
  sample_cumulative, checked by range and chi-square frequency tests;
* argument errors name the parameter; resolve_rng refuses foreign generators.
"""
from __future__ import annotations

import random
import struct
from fractions import Fraction

import numpy as np
import pytest

from dpselect import _rng
from dpselect.rng import RNG, SecureRNG, resolve_rng
from dpselect.testing import InsecureDeterministicRNG

SERVED = 4064  # bytes served per refill: 64 blocks minus the 32-byte next key (fast key erasure)
P_MIN = 1e-6  # chi-square acceptance threshold

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _chisquare_p(observed: np.ndarray, expected: np.ndarray) -> float:
    from scipy.stats import chisquare

    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    expected = expected * observed.sum() / expected.sum()
    return float(chisquare(observed, expected).pvalue)


def _within_sigmas(successes: int, trials: int, p: float, sigmas: float = 5.0) -> bool:
    mean = trials * p
    sd = (trials * p * (1 - p)) ** 0.5
    return abs(successes - mean) <= sigmas * sd + 1e-9


# ------------------------------------------------------------------ fast key erasure, byte for byte

def _openssl_refills(key: bytes, nonce: bytes, count: int) -> list[bytes]:
    """The fast-key-erasure construction: 64 blocks (counter 0..63) under the key; bytes [0, 32) become the
    next key, bytes [32, 4096) are served."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    served = []
    for _ in range(count):
        enc = Cipher(algorithms.ChaCha20(key, bytes(4) + nonce), mode=None).encryptor()
        block = enc.update(bytes(4096))
        key, out = block[:32], block[32:]
        served.append(out)
    return served


@pytest.mark.parametrize("stream", [0, 1, 2**40 + 5])
def test_refill_is_fast_key_erasure_chacha20(stream: int) -> None:
    seed = bytes(range(1, 33))
    rng = InsecureDeterministicRNG(seed, stream=stream)
    nonce = struct.pack("<III", 0x54455354, stream & 0xFFFFFFFF, stream >> 32)  # "TEST", stream
    expected = b"".join(_openssl_refills(seed, nonce, 3))
    got = rng.random_bytes(SERVED - 1) + rng.random_bytes(2) + rng.random_bytes(2 * SERVED - 1)
    assert got == expected


def test_test_state_starts_empty_and_refills_exactly_at_the_edge() -> None:
    seed = bytes(32)
    nonce = struct.pack("<III", 0x54455354, 0, 0)
    first, second = _openssl_refills(seed, nonce, 2)
    rng = InsecureDeterministicRNG(seed)
    assert rng.random_bytes(0) == b""
    assert rng.random_bytes(SERVED) == first
    assert rng.random_bytes(1) == second[:1]
    # The key bytes (first 32 of each 4096) are never served.
    full = _rng.chacha20_blocks(seed, 0, nonce, 64, 0)
    assert full[32:] == first and full[:32] not in first


# ------------------------------------------------------------------ the secure generator

@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 4063, 4064, 4065, 10000, 3 * 4064 + 17])
def test_random_bytes_lengths(n: int) -> None:
    out = SecureRNG().random_bytes(n)
    assert isinstance(out, bytes) and len(out) == n


def test_random_bytes_calls_differ_and_do_not_repeat_within_a_call() -> None:
    rng = resolve_rng(None)
    a, b = rng.random_bytes(32), rng.random_bytes(32)
    assert a != b
    big = rng.random_bytes(10000)  # crosses two refills
    chunks = [big[i : i + 16] for i in range(0, len(big) - 15, 16)]
    assert len(set(chunks)) == len(chunks)
    assert a not in big and b not in big
    # The refill boundaries must not serve a zeroed (erased) key: no 32 zero bytes.
    assert bytes(32) not in big


def test_random_bytes_byte_frequencies() -> None:
    data = np.frombuffer(SecureRNG().random_bytes(1 << 20), dtype=np.uint8)
    counts = np.bincount(data, minlength=256)
    assert _chisquare_p(counts, np.ones(256)) > P_MIN
    # Each bit position is fair too (catches a stuck bit in the serialisation).
    for bit in range(8):
        ones = np.count_nonzero(data & np.uint8(1 << bit))
        assert _within_sigmas(int(ones), data.size, 0.5)


def test_secure_rng_is_the_default_and_is_private() -> None:
    rng = resolve_rng(None)
    assert isinstance(rng, SecureRNG) and isinstance(rng, RNG)
    assert rng.privacy_guaranteed is True
    assert resolve_rng(rng) is rng
    assert "SecureRNG" in repr(rng)


# ------------------------------------------------------------------ uniform_below

@pytest.mark.parametrize(
    "bound",
    [1, 2, 3, 255, 256, 257, 2**32 + 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 3 * 2**70 + 12345, 10**40],
)
def test_uniform_below_range(bound: int) -> None:
    rng = SecureRNG()
    values = [rng.uniform_below(bound) for _ in range(200)]
    assert all(isinstance(v, int) and 0 <= v < bound for v in values)
    if bound == 1:
        assert set(values) == {0}
    if bound >= 2**16:
        # 200 draws: the upper half of the range appears unless something truncates the draw.
        assert max(values) >= bound // 2
    if bound >= 2**60:
        assert len(set(values)) == len(values)  # a repeat has probability < 2^-44


def test_uniform_below_big_bound_is_uniform_over_thirds() -> None:
    """bound = 3·2^70: rejection on 9 bytes; each third of the range must get 1/3 of the draws."""
    bound = 3 * 2**70
    rng = SecureRNG()
    draws = [rng.uniform_below(bound) for _ in range(6000)]
    thirds = np.bincount([v // 2**70 for v in draws], minlength=3)
    assert thirds.size == 3
    assert _chisquare_p(thirds, np.ones(3)) > P_MIN


def test_uniform_below_2_pow_64_reaches_the_top_bits() -> None:
    values = SecureRNG().uniform_below_array(2**64, 4096)
    assert values.dtype == np.uint64
    top = (values >> np.uint64(63)).astype(np.int64)
    assert _within_sigmas(int(top.sum()), values.size, 0.5)


@pytest.mark.parametrize("bound", [10, 7, 2**32 + 3])
def test_uniform_below_array_chi_square(bound: int) -> None:
    draws = SecureRNG().uniform_below_array(bound, 1_000_000)
    assert draws.dtype == np.uint64 and draws.shape == (1_000_000,)
    assert int(draws.max()) < bound
    if bound <= 16:
        observed = np.bincount(draws.astype(np.int64), minlength=bound)
        assert _chisquare_p(observed, np.ones(bound)) > P_MIN
        return
    # 16 classes v * 16 // bound (no overflow: bound < 2^60); their sizes differ by at most one
    # value out of ~2^28, so equal expected counts are exact to far below the test's resolution.
    classes = (draws * np.uint64(16)) // np.uint64(bound)
    observed = np.bincount(classes.astype(np.int64), minlength=16)
    assert observed.size == 16
    assert _chisquare_p(observed, np.ones(16)) > P_MIN


def test_uniform_below_array_bound_one_and_empty() -> None:
    rng = SecureRNG()
    assert np.array_equal(rng.uniform_below_array(1, 100), np.zeros(100, np.uint64))
    empty = rng.uniform_below_array(5, 0)
    assert empty.shape == (0,) and empty.dtype == np.uint64


def test_uniform_below_array_is_exact_rejection_not_modulo() -> None:
    """bound = 3·2^62: a modulo reduction of 8 bytes would give the lowest 2^62 values twice the
    mass; exact rejection gives each third 1/3."""
    draws = SecureRNG().uniform_below_array(3 * 2**62, 300_000)
    thirds = np.bincount((draws >> np.uint64(62)).astype(np.int64), minlength=3)
    assert thirds.size == 3
    assert _chisquare_p(thirds, np.ones(3)) > P_MIN


# ------------------------------------------------------------------ bernoulli

@pytest.mark.slow
@pytest.mark.parametrize("numerator,denominator", [(1, 3), (2, 7), (1, 2), (5, 2**64 + 3)])
def test_bernoulli_frequency(numerator: int, denominator: int) -> None:
    rng = SecureRNG()
    trials = 20_000
    hits = sum(rng.bernoulli(numerator, denominator) for _ in range(trials))
    assert _within_sigmas(hits, trials, numerator / denominator)


def test_bernoulli_certain_and_impossible_events() -> None:
    rng = SecureRNG()
    assert all(rng.bernoulli(4, 4) for _ in range(100))
    assert not any(rng.bernoulli(0, 9) for _ in range(1000))
    assert not any(rng.bernoulli(0, 1) for _ in range(100))
    assert all(isinstance(rng.bernoulli(1, 2), bool) for _ in range(10))


def test_bernoulli_big_denominator_is_exact_at_the_edge() -> None:
    """numerator = denominator - 1 with a 100-bit denominator: essentially always True."""
    rng = SecureRNG()
    den = 2**100 + 7
    assert all(rng.bernoulli(den - 1, den) for _ in range(200))
    assert not any(rng.bernoulli(1, den) for _ in range(200))


# ------------------------------------------------------------------ sample_cumulative

def _check_cumulative(cumulative: list[int], size: int) -> None:
    draws = SecureRNG().sample_cumulative(np.array(cumulative, dtype=np.uint64), size)
    assert draws.dtype == np.int64 and draws.shape == (size,)
    assert draws.min() >= 0 and draws.max() < len(cumulative)
    weights = np.diff([0] + cumulative)
    observed = np.bincount(draws, minlength=len(cumulative))
    expected = np.array([Fraction(int(w), cumulative[-1]) for w in weights], dtype=np.float64)
    # Bins with an expected count below 5 are merged into their neighbour for chi-square.
    assert _chisquare_p(*_merge_small(observed, expected * size)) > P_MIN


def _merge_small(observed: np.ndarray, expected: np.ndarray, minimum: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    obs_out, exp_out = [], []
    acc_o, acc_e = 0.0, 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= minimum:
            obs_out.append(acc_o)
            exp_out.append(acc_e)
            acc_o, acc_e = 0.0, 0.0
    if acc_e > 0 or acc_o > 0:
        if exp_out:
            obs_out[-1] += acc_o
            exp_out[-1] += acc_e
        else:
            obs_out.append(acc_o)
            exp_out.append(acc_e)
    return np.array(obs_out), np.array(exp_out)


def test_sample_cumulative_small_total() -> None:
    _check_cumulative([1, 3, 6, 10], 400_000)  # weights 1, 2, 3, 4 (exact uniform draws below 10)


def test_sample_cumulative_small_odd_total_single_entry() -> None:
    draws = SecureRNG().sample_cumulative(np.array([7], dtype=np.uint64), 1000)
    assert np.array_equal(draws, np.zeros(1000, np.int64))


def test_sample_cumulative_total_near_2_pow_64() -> None:
    """Lazy 32-bit-first sampler: total S = 2^64 - 1, weights proportional to 1, 2, 3, 4, 0.5."""
    s = 2**64 - 1
    shares = [Fraction(1, 10), Fraction(2, 10), Fraction(3, 10), Fraction(35, 100), Fraction(5, 100)]
    cumulative, running = [], Fraction(0)
    for share in shares:
        running += share
        cumulative.append(int(running * s))
    cumulative[-1] = s
    _check_cumulative(cumulative, 1_000_000)


def test_sample_cumulative_tiny_weights_near_2_pow_64() -> None:
    """Entries whose weight is a few units of 2^-64 are (almost) never drawn; the big ones are."""
    s = 2**64 - 1
    cumulative = [1, 2, 2**63, s - 1, s]  # weights 1, 1, 2^63 - 2, 2^63 - 1, 1
    draws = SecureRNG().sample_cumulative(np.array(cumulative, dtype=np.uint64), 200_000)
    observed = np.bincount(draws, minlength=5)
    assert observed[0] == observed[1] == observed[4] == 0
    assert _within_sigmas(int(observed[2]), 200_000, 0.5)


# ------------------------------------------------------------------ argument errors

def test_argument_errors_name_the_parameter() -> None:
    rng = SecureRNG()
    with pytest.raises(ValueError, match="n"):
        rng.random_bytes(-1)
    with pytest.raises(TypeError, match="n must be an integer"):
        rng.random_bytes(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n must be an integer"):
        rng.random_bytes(True)
    with pytest.raises(ValueError, match="bound"):
        rng.uniform_below(0)
    with pytest.raises(ValueError, match="bound"):
        rng.uniform_below(-5)
    with pytest.raises(TypeError, match="bound"):
        rng.uniform_below(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bound"):
        rng.uniform_below_array(0, 3)
    with pytest.raises(ValueError, match="bound"):
        rng.uniform_below_array(2**64 + 1, 3)
    with pytest.raises(TypeError, match="bound"):
        rng.uniform_below_array("10", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        rng.uniform_below_array(10, -1)
    with pytest.raises(TypeError, match="size"):
        rng.uniform_below_array(10, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="numerator"):
        rng.bernoulli(3, 2)
    with pytest.raises(ValueError, match="numerator"):
        rng.bernoulli(-1, 2)
    with pytest.raises(ValueError, match="denominator"):
        rng.bernoulli(0, 0)
    with pytest.raises(TypeError, match="numerator"):
        rng.bernoulli(0.5, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="denominator"):
        rng.bernoulli(1, 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad,error",
    [
        ([3, 2, 5], ValueError),  # not increasing
        ([1, 1, 2], ValueError),  # not strictly increasing
        ([0, 1, 2], ValueError),  # first weight zero
        ([-1, 1, 2], ValueError),  # negative
        ([], ValueError),  # empty
        ([[1, 2], [3, 4]], ValueError),  # 2-D
        ([1.0, 2.0], TypeError),  # floats
        ([True, True], TypeError),  # bools
        ([1, 2**64], ValueError),  # above 2^64 - 1
    ],
)
def test_sample_cumulative_rejects_bad_tables(bad: list, error: type) -> None:
    arr = np.array(bad, dtype=object) if bad and bad[-1] == 2**64 else np.array(bad)
    with pytest.raises(error, match="cumulative"):
        SecureRNG().sample_cumulative(arr, 5)


def test_sample_cumulative_rejects_negative_size() -> None:
    with pytest.raises(ValueError, match="size"):
        SecureRNG().sample_cumulative(np.array([1, 2], dtype=np.uint64), -1)


@pytest.mark.parametrize(
    "foreign",
    [np.random.default_rng(0), np.random.RandomState(0), random.Random(0), random.SystemRandom(), 42, "secure"],
)
def test_resolve_rng_rejects_foreign_generators(foreign: object) -> None:
    with pytest.raises(TypeError, match="rng"):
        resolve_rng(foreign)


def test_resolve_rng_passes_the_test_rng_through() -> None:
    test_rng = InsecureDeterministicRNG(5)
    assert resolve_rng(test_rng) is test_rng

"""Statistical tests of the production kernels with the secure CSPRNG (docs/privacy/randomness.md,
pi-opt.md and tsgd-release.md).

Sampled frequencies must match the *certified* probabilities the kernel is supposed to realise:
keep rates of select around the crossovers (within 5 standard deviations, 10^6 draws per count),
the TSGD pmf of the release (chi-square against the exact table pmf), the release's output rule,
and the lazy Bernoulli at p in {2^-20, 1/2, 1 - 2^-20}. Thresholds: 5 sigma and p > 1e-6, so a
correct kernel fails a run of this file with probability below ~1e-4.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect import _rng
from dpselect.core.params import validate_params
from dpselect.core.tables import tsgd_table

DRAWS = 1_000_000
P_MIN = 1e-6


def _assert_binomial(successes: int, trials: int, p: float, what: str) -> None:
    mean = trials * p
    sd = (trials * p * (1 - p)) ** 0.5
    if p in (0.0, 1.0):
        assert successes == mean, f"{what}: {successes} of {trials} with p = {p}"
        return
    assert abs(successes - mean) <= 5 * sd, (
        f"{what}: {successes} of {trials}, expected {mean:.1f} ± {5 * sd:.1f} (p = {p:.6g})"
    )


def _chisquare_p(observed: np.ndarray, expected: np.ndarray, minimum: float = 20.0) -> float:
    """Chi-square p-value after merging neighbouring bins until each expects >= minimum."""
    from scipy.stats import chisquare

    obs_out, exp_out = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o += float(o)
        acc_e += float(e)
        if acc_e >= minimum:
            obs_out.append(acc_o)
            exp_out.append(acc_e)
            acc_o = acc_e = 0.0
    if not obs_out:
        raise ValueError("too few expected counts for a chi-square test")
    obs_out[-1] += acc_o
    exp_out[-1] += acc_e
    obs, exp = np.array(obs_out), np.array(exp_out)
    exp *= obs.sum() / exp.sum()
    return float(chisquare(obs, exp).pvalue)


# ------------------------------------------------------------------ select keep rates

KEEP_CASES = [
    # (kappa, counts around n1, n2 and the table length N)
    (1, [0, 1, 2, 7, 10, 11, 12, 13, 16, 21, 22, 23, 24, 10**6]),
    (3, [1, 20, 32, 33, 34, 35, 50, 64, 65, 66, 67]),
]


@pytest.mark.parametrize("kappa,counts", KEEP_CASES, ids=["kappa1", "kappa3"])
def test_select_keep_rates_match_certified_probabilities(kappa: int, counts: list[int]) -> None:
    crossovers = dpselect.crossovers(1.0, 1e-5, max_partitions_contributed=kappa)
    assert crossovers.n1 in counts and crossovers.n2 in counts and crossovers.table_length in counts
    for n in counts:
        p = dpselect.keep_probability(n, 1.0, 1e-5, max_partitions_contributed=kappa)
        keep = dpselect.select(np.full(DRAWS, n, dtype=np.int64), 1.0, 1e-5, max_partitions_contributed=kappa)
        assert keep.dtype == np.bool_ and keep.shape == (DRAWS,)
        _assert_binomial(int(keep.sum()), DRAWS, p, f"kappa={kappa}, n={n}")


def test_select_mixed_counts_total_matches_sum_of_probabilities() -> None:
    """Exactness of the lazy Bernoulli: the kept count over many mixed decisions matches sum pi(n_i)."""
    gen = np.random.Generator(np.random.PCG64(2024))  # input data only
    counts = gen.integers(0, 30, DRAWS).astype(np.uint8)
    probs = dpselect.keep_probability(counts, 1.0, 1e-5)
    kept = int(dpselect.select(counts, 1.0, 1e-5).sum())
    mean, sd = float(probs.sum()), float(np.sqrt((probs * (1 - probs)).sum()))
    assert abs(kept - mean) <= 5 * sd


def test_select_decisions_are_independent_between_neighbours() -> None:
    """Pairs of neighbouring decisions at p ~ 0.76 (n = 12): the four joint outcomes have the
    product frequencies (a byte reused for two decisions would correlate them)."""
    keep = dpselect.select(np.full(DRAWS, 12, dtype=np.int64), 1.0, 1e-5).reshape(-1, 2)
    p = dpselect.keep_probability(12, 1.0, 1e-5)
    joint = np.bincount(keep[:, 0] * 2 + keep[:, 1], minlength=4)
    expected = np.array([(1 - p) ** 2, (1 - p) * p, p * (1 - p), p * p]) * keep.shape[0]
    assert _chisquare_p(joint, expected) > P_MIN


# ------------------------------------------------------------------ release

@pytest.mark.parametrize("kappa", [1, 3])
def test_release_noise_follows_the_certified_tsgd_pmf(kappa: int) -> None:
    table = tsgd_table(validate_params(1.0, 1e-5, kappa))
    n = 10**6  # n > 2k: every partition is published, noisy - n is the raw noise
    keep, noisy = dpselect.release(np.full(DRAWS, n, dtype=np.int64), 1.0, 1e-5, max_partitions_contributed=kappa)
    assert keep.all()
    noise = noisy - n
    k = table.k
    assert noise.min() >= -k and noise.max() <= k
    observed = np.bincount(noise + k, minlength=2 * k + 1)
    expected = np.array([float(p) for p in table.pmf()]) * DRAWS
    assert _chisquare_p(observed, expected) > P_MIN
    # symmetric: the mean of X is 0
    assert abs(float(noise.mean())) <= 5 * float(noise.std()) / np.sqrt(DRAWS)


def test_release_output_rule() -> None:
    """Published iff n + X > k; published values are n + X (> k), unpublished ones are 0."""
    table = tsgd_table(validate_params(1.0, 1e-5))
    k = table.k
    gen = np.random.Generator(np.random.PCG64(7))  # input data only
    counts = gen.integers(0, 3 * k, 300_000).astype(np.int32)
    keep, noisy = dpselect.release(counts, 1.0, 1e-5)
    assert keep.dtype == np.bool_ and noisy.dtype == np.int64
    np.testing.assert_array_equal(keep, noisy > k)
    assert (noisy[~keep] == 0).all()
    assert (np.abs(noisy[keep] - counts[keep]) <= k).all()
    assert not keep[counts == 0].any()  # n + X <= k always for n = 0
    assert keep[counts > 2 * k].all()  # n + X > k always for n > 2k
    assert keep.any() and not keep.all()


@pytest.mark.parametrize("offset", [-5, 0, 1, 6])
def test_release_keep_rate_near_the_threshold(offset: int) -> None:
    """For n = k + offset the publish probability is P[X > -offset], exactly from the table."""
    table = tsgd_table(validate_params(1.0, 1e-5))
    k = table.k
    n = k + offset
    pmf = table.pmf()
    p = float(sum((pmf[x + k] for x in range(-k, k + 1) if n + x > k), Fraction(0)))
    keep, noisy = dpselect.release(np.full(DRAWS, n, dtype=np.int64), 1.0, 1e-5)
    _assert_binomial(int(keep.sum()), DRAWS, p, f"n = k + {offset}")
    # given publication, the published values follow the conditional pmf
    values = noisy[keep] - n
    observed = np.bincount(values + k, minlength=2 * k + 1)
    expected = np.array([float(pmf[x + k]) if n + x > k else 0.0 for x in range(-k, k + 1)])
    support = expected > 0
    assert observed[~support].sum() == 0
    if keep.sum() >= 100:  # enough published values for a chi-square
        assert _chisquare_p(observed[support], expected[support] / p * keep.sum()) > P_MIN


# ------------------------------------------------------------------ lazy Bernoulli

@pytest.mark.parametrize(
    "q",
    [2**44, 2**63, 2**64 - 2**44, 0x0101010101010101, 0xFF00000000000001],
    ids=["2^-20", "half", "1-2^-20", "bytes-all-one", "top-byte-ff"],
)
def test_bernoulli_fixed_frequency(q: int) -> None:
    draws = 1 << 23
    p = q / 2**64
    kept = 0
    for _ in range(4):
        kept += int(_rng.bernoulli_fixed(np.full(draws // 4, q, dtype=np.uint64)).sum())
    _assert_binomial(kept, draws, p, f"q = {q:#x}")


def test_bernoulli_fixed_extremes() -> None:
    assert not _rng.bernoulli_fixed(np.zeros(100_000, dtype=np.uint64)).any()  # U < 0 never
    # q = 2^64 - 1: dropped only when U = 2^64 - 1 (probability 2^-64)
    assert _rng.bernoulli_fixed(np.full(100_000, 2**64 - 1, dtype=np.uint64)).all()

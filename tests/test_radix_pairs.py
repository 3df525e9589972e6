"""The radix grouping of one in-memory input with integer privacy units (csrc/radix_pairs.h,
``dpselect._count.RadixPairs``): distinct pairs grouped by user exactly as a Python model says
(users bucket by bucket, a bucket being an unseeded function of the user's value; users and
partitions in order of first appearance), counts exact up to the cap, every user bounded to a
uniform subset of min(d, κ) partitions, and steps called out of order refused."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpselect._count import RadixPairs
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

MASK = 2**64 - 1
M1, M2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53


def fmix64(k: int) -> int:
    """murmur3's 64-bit finaliser (csrc/hashing.h)."""
    k ^= k >> 33
    k = (k * M1) & MASK
    k ^= k >> 33
    k = (k * M2) & MASK
    return k ^ (k >> 33)


def unfmix64(h: int) -> int:
    """The inverse of fmix64: the value whose hash is h (to put users in chosen buckets)."""
    def unxorshift33(x: int) -> int:
        return x ^ (x >> 33)  # x >> 33 has no bits left for a second round at 64 bits
    h = unxorshift33(h)
    h = (h * pow(M2, -1, 2**64)) & MASK
    h = unxorshift33(h)
    h = (h * pow(M1, -1, 2**64)) & MASK
    return unxorshift33(h)


def bucket_bits(n_rows: int) -> int:
    bits = 0
    while bits < 12 and (n_rows >> bits) > 16384:
        bits += 1
    return bits


def model(users: np.ndarray, parts: np.ndarray) -> tuple[list[int], list[list[int]]]:
    """(users in grouping order, each one's distinct partitions in order of first appearance)."""
    bits = bucket_bits(len(users))
    width = users.dtype.itemsize
    first: dict[int, int] = {}
    runs: dict[int, dict[int, None]] = {}  # an insertion-ordered set per user: first appearance
    for row, (u, p) in enumerate(zip(users.tolist(), parts.tolist())):
        word = u & ((1 << (8 * width)) - 1)  # zero-extended, as the kernel reads it
        first.setdefault(word, row)
        runs.setdefault(word, {}).setdefault(p, None)
    def bucket(word: int) -> int:
        return fmix64(word) >> (64 - bits) if bits else 0
    order = sorted(first, key=lambda w: (bucket(w), first[w]))
    return order, [list(runs[w]) for w in order]


def grouped(users: np.ndarray, parts: np.ndarray, *, seed: int = 7, splits: int = 1, shards: int = 2) -> RadixPairs:
    """Run every step; count and scatter in `splits` pieces; group in `shards` bucket ranges."""
    users = np.ascontiguousarray(users)
    parts = np.ascontiguousarray(parts, dtype=np.uint32)
    radix = RadixPairs(len(users), seed, "user")
    bounds = np.linspace(0, len(users), splits + 1).astype(int)
    width = users.dtype.itemsize
    for lo, hi in itertools.pairwise(bounds):
        radix.count(hi - lo, lo, users, width)
    radix.layout()
    for lo, hi in itertools.pairwise(bounds):
        radix.scatter_codes(radix.scatter_users(hi - lo, lo, users, width), parts[lo:hi])
    radix.ready()
    edges = np.linspace(0, radix.n_buckets, shards + 1).astype(int)
    for lo, hi in itertools.pairwise(edges):
        radix.group(lo, hi)
    radix.compact()
    return radix


def runs_of(radix: RadixPairs) -> list[list[int]]:
    ends, parts = radix.groups()
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return [parts[s:e].tolist() for s, e in zip(starts, ends.astype(np.int64))]


def data(seed: int, n: int, n_users: int, n_parts: int, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)  # input data only
    users = (gen.integers(0, n_users, n) * 7919 - 5000).astype(dtype)
    parts = (gen.zipf(1.2, n) % n_parts).astype(np.uint32)
    return users, parts


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("n", [0, 1, 17, 5_000, 70_000])
def test_groups_match_the_model(dtype, n):
    users, parts = data(n, n, max(1, n // 9), 300, dtype)
    radix = grouped(users, parts, splits=3)
    order, expected = model(users, parts)
    assert runs_of(radix) == expected
    assert radix.n_users == len(order) and radix.n_pairs == sum(map(len, expected))


def test_results_do_not_depend_on_the_seed_the_pieces_or_the_thread_split():
    users, parts = data(1, 60_000, 4_000, 500)
    reference = runs_of(grouped(users, parts))
    for seed, splits, shards in [(0, 1, 1), (2**64 - 1, 7, 2), (12345, 13, 5)]:
        assert runs_of(grouped(users, parts, seed=seed, splits=splits, shards=shards)) == reference


@pytest.mark.slow
def test_a_bucket_holding_every_user_and_users_with_long_runs():
    """Users crafted to share one bucket (the bucket function is unseeded: values can be chosen
    to collide) make that bucket large: slower, still exact. Users with more rows than the short
    runs compared pairwise take the hash set."""
    bits = bucket_bits(200_000)
    assert bits > 0
    gen = np.random.default_rng(5)  # input data only
    crafted = [unfmix64((7 << (64 - bits)) | int(x)) for x in gen.integers(0, 2**40, 3_000)]
    assert all(fmix64(v) >> (64 - bits) == 7 for v in crafted[:50])
    users = np.array(crafted, dtype=np.uint64)[gen.integers(0, 3_000, 200_000)]
    users[:5_000] = crafted[0]  # one user with 5,000 rows
    parts = gen.integers(0, 2_000, 200_000).astype(np.uint32)
    radix = grouped(users, parts, splits=4)
    assert runs_of(radix) == model(users, parts)[1]
    counts = sum(radix.finish(s, 2, 2_000, 10**9, None, None) for s in range(2))
    assert counts.sum() == radix.n_pairs


def exact_counts(users: np.ndarray, parts: np.ndarray, n_parts: int) -> np.ndarray:
    pairs = set(zip(users.tolist(), parts.tolist()))
    return np.bincount(np.array([p for _, p in pairs], dtype=np.int64), minlength=n_parts)


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_counts_are_exact_when_kappa_covers_everyone_and_saturate_at_the_cap(shards):
    users, parts = data(2, 40_000, 3_000, 400)
    exact = exact_counts(users, parts, 400)
    radix = grouped(users, parts)
    got = sum(radix.finish(s, shards, 400, 10**9, None, None) for s in range(shards))
    np.testing.assert_array_equal(got, exact)
    capped = grouped(users, parts)
    got = sum(capped.finish(s, shards, 400, 10**9, 5, None) for s in range(shards))
    assert np.all(got <= shards * 5)  # each shard saturates; the caller caps the sum again
    np.testing.assert_array_equal(np.minimum(got, 5), np.minimum(exact, 5))


def test_every_user_keeps_min_d_kappa_and_no_partition_gains():
    users, parts = data(3, 30_000, 2_000, 150)
    exact = exact_counts(users, parts, 150)
    per_user = [len(run) for run in model(users, parts)[1]]
    for kappa in (1, 2, 5, 40):
        radix = grouped(users, parts)
        rng = InsecureDeterministicRNG(seed=kappa)
        got = radix.finish(0, 2, 150, kappa, None, rng._test_state) + \
            radix.finish(1, 2, 150, kappa, None, InsecureDeterministicRNG(seed=kappa + 100)._test_state)
        assert got.sum() == np.minimum(per_user, kappa).sum()
        assert np.all(got <= exact) and np.all(got >= 0)


def test_same_test_seed_same_result():
    users, parts = data(4, 30_000, 2_000, 150)
    results = []
    for seed in (7, 8):  # the hash seed: placement in the tables only
        radix = grouped(users, parts, seed=seed)
        results.append(radix.finish(0, 1, 150, 2, None, InsecureDeterministicRNG(seed=1)._test_state))
    np.testing.assert_array_equal(results[0], results[1])


# ----------------------------------------------------------------------- uniform choice

def owned(n_users: int, d: int, kappa: int, repeat: np.ndarray | None = None,
          bound=None) -> np.ndarray:
    """Each user owns d partitions nobody else has, listed in the same order by every user (so
    that keeping "the first κ" is visible); rows are shuffled within each user only, keeping
    that order of first appearance. Returns which partitions each user kept (n_users × d)."""
    reps = np.ones(d, dtype=np.int64) if repeat is None else repeat
    local = np.repeat(np.arange(d), reps)
    users = np.repeat(np.arange(n_users, dtype=np.int64) * 7919 + 1, len(local))
    parts = (np.tile(local, n_users) + np.repeat(np.arange(n_users), len(local)) * d).astype(np.uint32)
    radix = grouped(users, parts)
    if bound is None:
        got = radix.finish(0, 2, n_users * d, kappa, None, None) + radix.finish(1, 2, n_users * d, kappa, None, None)
    else:
        got = bound(radix, n_users * d, kappa)
    return got.reshape(n_users, d)


def keep_first(radix: RadixPairs, n_parts: int, kappa: int) -> np.ndarray:
    """A deliberately broken bounding, for the tests below to catch: each user keeps the first κ
    of its partitions in order of first appearance (no randomness at all)."""
    counts = np.zeros(n_parts, dtype=np.int64)
    for run in runs_of(radix):
        counts[run[:kappa]] += 1
    return counts


def keep_by_row_weight(radix: RadixPairs, n_parts: int, kappa: int) -> np.ndarray:
    """Another broken bounding: a random subset, but drawn over rows rather than distinct
    partitions, so a partition listed in more rows is favoured. Here modelled on the groups:
    partition i of a user is weighted by i + 1 (its position), drawn with the test generator."""
    rng = InsecureDeterministicRNG(seed=3)
    counts = np.zeros(n_parts, dtype=np.int64)
    for run in runs_of(radix):
        weights = np.arange(1, len(run) + 1)
        pool = list(np.repeat(run, weights))
        kept: list[int] = []
        while len(kept) < min(kappa, len(run)):
            pick = pool[rng.uniform_below(len(pool))]
            kept.append(pick)
            pool = [p for p in pool if p != pick]
        counts[kept] += 1
    return counts


def subset_pvalue(chosen: np.ndarray, kappa: int) -> float:
    """Chi-square p-value of "every κ-subset of the d partitions equally likely"."""
    stats = pytest.importorskip("scipy.stats")
    d = chosen.shape[1]
    # Each row as a bit mask of the partitions it kept, against the masks of the κ-subsets.
    masks = chosen.astype(np.int64) @ (np.int64(1) << np.arange(d, dtype=np.int64))
    subsets = np.array([sum(1 << i for i in s) for s in itertools.combinations(range(d), kappa)])
    assert np.all(np.isin(masks, subsets)), "a user kept a set that is not a kappa-subset of its partitions"
    observed = (masks[:, None] == subsets[None, :]).sum(axis=0)
    return float(stats.chisquare(observed).pvalue)


def test_choice_is_uniform_over_subsets_and_a_broken_choice_is_caught():
    """d = 5, κ = 2, production CSPRNG: each of the 10 subsets equally likely. The same check
    refutes bounding that keeps the first κ partitions, and one that favours some partitions."""
    chosen = owned(20_000, 5, 2)
    assert np.all(chosen.sum(axis=1) == 2)
    assert subset_pvalue(chosen, 2) > 1e-6
    assert subset_pvalue(owned(2_000, 5, 2, bound=keep_first), 2) < 1e-30
    assert subset_pvalue(owned(2_000, 5, 2, bound=keep_by_row_weight), 2) < 1e-9


def test_choice_is_uniform_with_skewed_row_multiplicity():
    """A partition repeated in many rows is not favoured: the choice is among distinct ones."""
    stats = pytest.importorskip("scipy.stats")
    chosen = owned(20_000, 3, 1, repeat=np.array([10, 1, 1]))
    assert chosen.sum() == 20_000
    assert stats.chisquare(chosen.sum(axis=0)).pvalue > 1e-6


# ----------------------------------------------------------------------- misuse

def test_steps_out_of_order_and_mismatched_rows_are_refused():
    n = 40_000  # several buckets
    users = np.arange(n, dtype=np.int64)
    codes = np.zeros(n, dtype=np.uint32)
    radix = RadixPairs(n, 1, "user")
    assert radix.n_buckets > 1
    with pytest.raises(RuntimeError, match="out of order"):
        radix.layout()  # not every row counted
    with pytest.raises(RuntimeError, match="out of order"):
        radix.scatter_users(n, 0, users, 8)
    radix.count(n, 0, users, 8)
    with pytest.raises(RuntimeError, match="out of order"):
        radix.count(1, 0, users, 8)  # more rows than announced
    radix.layout()
    with pytest.raises(RuntimeError, match="out of order"):
        radix.ready()  # nothing scattered
    places = radix.scatter_users(n // 2, 0, users, 8)
    radix.scatter_codes(places, codes[: n // 2])
    with pytest.raises(RuntimeError, match="out of order"):
        radix.ready()  # half the rows
    with pytest.raises(ValueError, match="place is out of range"):
        radix.scatter_codes(np.array([n], dtype=np.uint64), codes[:1])
    more = np.arange(n // 2 + 1, dtype=np.uint64)
    with pytest.raises(RuntimeError, match="out of order"):  # the codes may not run past the rows
        radix.scatter_codes(more, np.zeros(len(more), dtype=np.uint32))
    one_user = np.zeros(n, dtype=np.int64)  # not the values counted: their bucket overflows
    with pytest.raises(RuntimeError, match="count\\(\\) and scatter_users\\(\\) differ"):
        radix.scatter_users(n // 2, 0, one_user, 8)
    with pytest.raises(RuntimeError, match="out of order"):  # nothing after that is valid
        radix.ready()
    with pytest.raises(RuntimeError, match="out of order"):
        radix.group(0, radix.n_buckets)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="n_rows must be >= 0"):
        RadixPairs(-1, 0)
    radix = RadixPairs(4, 0, "user")
    with pytest.raises(ValueError, match="integers of 1, 2, 4 or 8 bytes"):
        radix.count(4, 0, b"x" * 12, 3)
    with pytest.raises(ValueError, match="values buffer holds 8 bytes, 32 are needed"):
        radix.count(4, 0, b"x" * 8, 8)
    radix.count(4, 0, np.arange(4, dtype=np.int64), 8)
    radix.layout()
    places = radix.scatter_users(4, 0, np.arange(4, dtype=np.int64), 8)
    assert sorted(places.tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="one code per place"):
        radix.scatter_codes(places, np.zeros(3, dtype=np.uint32))
    radix.scatter_codes(places, np.array([0, 1, 2, 9], dtype=np.uint32))
    radix.ready()
    radix.group(0, radix.n_buckets)
    with pytest.raises(RuntimeError, match="already grouped"):
        radix.group(0, radix.n_buckets)
    with pytest.raises(RuntimeError, match="compact"):
        radix.finish(0, 1, 10, 1, None, None)
    radix.compact()
    with pytest.raises(ValueError, match="max_partitions_contributed must be >= 1"):
        radix.finish(0, 1, 10, 0, None, None)
    assert radix.groups()[1].tolist() == [0, 1, 2, 9]
    with pytest.raises(ValueError, match="partition code is out of range"):
        radix.finish(0, 1, 9, 1, None, None)  # code 9 is not below 9 partitions
    with pytest.raises(RuntimeError, match="already finished"):  # each shard once, even after an error
        radix.finish(0, 1, 10, 1, None, None)
    with pytest.raises(RuntimeError, match="no finish"):
        radix.groups()
    again = grouped(np.arange(4, dtype=np.int64), np.array([0, 1, 2, 9]))
    assert again.finish(1, 2, 10, 1, None, None).sum() == 4  # one bucket: the second half holds it
    with pytest.raises(RuntimeError, match="another split"):
        again.finish(0, 3, 10, 1, None, None)

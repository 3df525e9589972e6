"""The C counting kernel (csrc/count.{c,h}): dedup, κ-bounding, uniform choice, saturation."""
from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dpselect._count import CODE_LIMIT, PairCounter
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def data_gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def count(users, parts, n_partitions, kappa, cap=None, rng=None, batches=1, expected=0):
    counter = PairCounter(expected)
    users = np.asarray(users, dtype=np.uint32)
    parts = np.asarray(parts, dtype=np.uint32)
    for u, p in zip(np.array_split(users, batches), np.array_split(parts, batches)):
        counter.feed(u, p)
    state = None if rng is None else rng._test_state
    return counter.finish(n_partitions, kappa, cap, state)


def reference_distinct(users, parts, n_partitions):
    """Distinct users per partition, by a plain numpy route (no bounding)."""
    pairs = set(zip(np.asarray(users).tolist(), np.asarray(parts).tolist()))
    out = np.zeros(n_partitions, dtype=np.int64)
    for _, p in pairs:
        out[p] += 1
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("batches", [1, 7])
def test_counts_match_reference_when_kappa_covers_everyone(seed, batches):
    gen = data_gen(seed)
    n, n_users, n_parts = 20_000, 700, 300
    users = gen.integers(0, n_users, n)
    parts = gen.zipf(1.3, n) % n_parts
    got = count(users, parts, n_parts, kappa=n_parts, batches=batches)
    np.testing.assert_array_equal(got, reference_distinct(users, parts, n_parts))


def test_counts_match_pandas_groupby_nunique():
    pd = pytest.importorskip("pandas")
    gen = data_gen(11)
    users = gen.integers(0, 500, 30_000)
    parts = gen.integers(0, 2_000, 30_000)
    got = count(users, parts, 2_000, kappa=10**6)
    ref = pd.DataFrame({"u": users, "p": parts}).groupby("p")["u"].nunique()
    expected = np.zeros(2_000, dtype=np.int64)
    expected[ref.index.to_numpy()] = ref.to_numpy()
    np.testing.assert_array_equal(got, expected)


def test_bounding_total_is_sum_of_min_d_kappa():
    """Every user contributes exactly min(d_u, κ) to the total, and no partition gains users."""
    gen = data_gen(3)
    users = gen.integers(0, 400, 15_000)
    parts = gen.integers(0, 150, 15_000)
    distinct = reference_distinct(users, parts, 150)
    per_user = np.bincount(np.array(sorted(set(zip(users.tolist(), parts.tolist()))))[:, 0], minlength=400)
    for kappa in (1, 2, 5, 40):
        got = count(users, parts, 150, kappa, rng=InsecureDeterministicRNG(seed=kappa))
        assert got.sum() == np.minimum(per_user, kappa).sum()
        assert np.all(got <= distinct)
        assert np.all(got >= 0)


def owned_partitions(n_users, d, kappa, rng=None, repeat=1):
    """Each user owns d partitions nobody else has (user u owns u*d .. u*d + d - 1), every row
    repeated `repeat` times: the counts then show exactly which partitions each user kept."""
    users = np.repeat(np.arange(n_users), d * repeat)
    parts = np.tile(np.repeat(np.arange(d), repeat), n_users) + users * d
    order = data_gen(5).permutation(users.size)
    got = count(users[order], parts[order], n_users * d, kappa, rng=rng)
    return got.reshape(n_users, d)


@pytest.mark.parametrize("d,kappa", [(1, 1), (3, 1), (5, 2), (4, 4), (2, 5)])
def test_no_user_in_more_than_kappa_partitions_nor_counted_twice(d, kappa):
    chosen = owned_partitions(300, d, kappa, rng=InsecureDeterministicRNG(seed=7), repeat=3)
    assert chosen.max() <= 1  # duplicates rows never count a user twice
    np.testing.assert_array_equal(chosen.sum(axis=1), np.full(300, min(d, kappa)))


def test_choice_is_uniform_over_subsets():
    """d = 5, κ = 2: each of the C(5, 2) = 10 subsets must be equally likely (chi-square),
    drawn from the production CSPRNG."""
    stats = pytest.importorskip("scipy.stats")
    d, kappa, n_users = 5, 2, 20_000
    chosen = owned_partitions(n_users, d, kappa)
    # Each user's kept partitions as a bit mask, against the masks of the κ-subsets.
    masks = chosen.astype(np.int64) @ (np.int64(1) << np.arange(d, dtype=np.int64))
    subsets = np.array([sum(1 << i for i in s) for s in itertools.combinations(range(d), kappa)])
    observed = (masks[:, None] == subsets[None, :]).sum(axis=0)
    assert observed.sum() == n_users  # every user kept exactly one κ-subset
    p = stats.chisquare(observed).pvalue
    assert p > 1e-6, (observed, p)


def test_choice_is_uniform_kappa_one_positions():
    stats = pytest.importorskip("scipy.stats")
    chosen = owned_partitions(30_000, 3, 1)
    observed = chosen.sum(axis=0)
    assert stats.chisquare(observed).pvalue > 1e-6, observed


def test_choice_is_uniform_with_skewed_row_multiplicity():
    """A partition repeated in many rows must not be favoured: choice is among distinct ones."""
    stats = pytest.importorskip("scipy.stats")
    n_users = 20_000
    users = np.repeat(np.arange(n_users), 12)
    local = np.tile(np.array([0] * 10 + [1, 2]), n_users)  # partition 0 in 10 rows, 1 and 2 once
    got = count(users, local + 3 * users, 3 * n_users, 1).reshape(n_users, 3)
    assert stats.chisquare(got.sum(axis=0)).pvalue > 1e-6


def test_saturation_at_cap():
    gen = data_gen(9)
    users = gen.integers(0, 1000, 20_000)
    parts = gen.integers(0, 40, 20_000)
    exact = count(users, parts, 40, kappa=1000)
    for cap in (1, 5, 23, 10**9):
        np.testing.assert_array_equal(count(users, parts, 40, kappa=1000, cap=cap), np.minimum(exact, cap))


def test_same_seed_same_result_and_batches_do_not_matter_when_unbounded():
    gen = data_gen(2)
    users = gen.integers(0, 300, 10_000)
    parts = gen.integers(0, 100, 10_000)
    a = count(users, parts, 100, 2, rng=InsecureDeterministicRNG(seed=1))
    b = count(users, parts, 100, 2, rng=InsecureDeterministicRNG(seed=1))
    np.testing.assert_array_equal(a, b)
    # Growth of the hash set across many small batches keeps every pair (exact counts).
    np.testing.assert_array_equal(count(users, parts, 100, 10**6, batches=97), count(users, parts, 100, 10**6, expected=10**5))


def test_empty_and_single():
    assert count([], [], 0, 1).shape == (0,)
    np.testing.assert_array_equal(count([], [], 3, 1), [0, 0, 0])
    np.testing.assert_array_equal(count([4], [2], 3, 1), [0, 0, 1])


def test_memory_is_proportional_to_distinct_pairs():
    counter = PairCounter()
    users = np.zeros(200_000, dtype=np.uint32)
    parts = (np.arange(200_000) % 10).astype(np.uint32)
    counter.feed(users, parts)
    assert counter.n_pairs == 10
    assert counter.nbytes <= 8 * 1024  # the minimum table, not one slot per row
    counter.feed(np.arange(1000, dtype=np.uint32), np.arange(1000, dtype=np.uint32))
    assert counter.n_pairs == 1009  # (0, 0) was already there
    assert counter.nbytes <= 8 * math.ceil(1009 / 0.7) * 2


def test_errors():
    counter = PairCounter()
    with pytest.raises(ValueError, match="same length"):
        counter.feed(np.zeros(3, np.uint32), np.zeros(2, np.uint32))
    with pytest.raises(ValueError, match="row 1"):
        counter.feed(np.array([0, CODE_LIMIT], np.uint32), np.zeros(2, np.uint32))
    with pytest.raises(ValueError, match="max_partitions_contributed"):
        counter.finish(1, 0, None, None)
    with pytest.raises(ValueError, match="cap"):
        counter.finish(1, 1, 0, None)
    with pytest.raises(TypeError, match="users must have dtype uint32"):
        counter.feed(np.zeros(2, np.int64), np.zeros(2, np.int64))  # must be uint32 codes
    bad = PairCounter()
    bad.feed(np.zeros(1, np.uint32), np.full(1, 5, np.uint32))
    with pytest.raises(ValueError, match="out of range"):
        bad.finish(5, 1, None, None)  # partition code 5 with only 5 partitions
    done = PairCounter()
    done.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32))
    np.testing.assert_array_equal(done.finish(1, 1, None, None), [1])
    with pytest.raises(RuntimeError, match="already been finished"):
        done.finish(1, 1, None, None)
    with pytest.raises(RuntimeError, match="already been finished"):
        done.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32))


def test_caller_arrays_are_not_mutated():
    users = np.array([3, 1, 3, 2], np.uint32)
    parts = np.array([0, 1, 1, 0], np.uint32)
    keep = users.copy(), parts.copy()
    count(users, parts, 2, 1)
    np.testing.assert_array_equal(users, keep[0])
    np.testing.assert_array_equal(parts, keep[1])


from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12)), max_size=300),
    kappa=st.integers(1, 15),
    cap=st.none() | st.integers(1, 40),
    batches=st.integers(1, 4),
)
def test_laws_on_small_inputs(pairs, kappa, cap, batches):
    """For any rows: counts are within [0, min(distinct users, cap)], the total is exactly
    Σ_u min(d_u, κ) before the cap, and κ >= every d_u gives the exact distinct counts."""
    users = np.array([u for u, _ in pairs], dtype=np.int64)
    parts = np.array([p for _, p in pairs], dtype=np.int64)
    distinct = reference_distinct(users, parts, 13)
    per_user = np.bincount(np.array(sorted(set(pairs)), dtype=np.int64).reshape(-1, 2)[:, 0], minlength=31)
    got = count(users, parts, 13, kappa, rng=InsecureDeterministicRNG(seed=0), batches=batches)
    assert np.all(got >= 0) and np.all(got <= distinct)
    if cap is None:
        assert got.sum() == np.minimum(per_user, kappa).sum()
    capped = count(users, parts, 13, kappa, cap=cap, rng=InsecureDeterministicRNG(seed=0), batches=batches)
    assert np.all(capped <= (cap or 10**9))
    if kappa >= (per_user.max() if per_user.size else 0):
        np.testing.assert_array_equal(count(users, parts, 13, kappa, cap=cap), np.minimum(distinct, cap or 10**9))


# ------------------------------------------------------------------- counting kernel's memory

@pytest.mark.slow
@pytest.mark.not_under_sanitizers(
    reason="AddressSanitizer reserves terabytes of address space for its shadow memory, so a "
           "2 GiB RLIMIT_AS leaves it no room to allocate at all")
def test_a_huge_user_code_does_not_size_the_kernel():
    """One pair whose user code is near 2**32 used to make finish allocate one 8-byte offset per
    code value (32 GiB). Run under a 2 GiB address-space limit: it must simply work."""
    script = textwrap.dedent(f"""
        import resource, numpy as np
        from dpselect._count import PairCounter
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        c = PairCounter()
        c.feed(np.array([{CODE_LIMIT - 1}, 7, 7], np.uint32), np.array([0, 0, 1], np.uint32))
        print(c.finish(2, 5, None, None).tolist())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2, 1]"


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), min_size=1, max_size=120),
    stride=st.sampled_from([1, 1_000_003, 97_000_001]),
    kappa=st.integers(1, 4),
)
def test_sparse_user_codes_count_like_dense_ones(pairs, stride, kappa):
    """Renumbering sparse codes changes nothing but memory: with κ covering everyone the counts
    are the distinct users per partition, and in every case each user keeps min(d, κ)."""
    users = np.array([u * stride % CODE_LIMIT for u, _ in pairs], dtype=np.uint32)
    parts = np.array([p for _, p in pairs], dtype=np.uint32)
    distinct = sorted(set(zip(users.tolist(), parts.tolist())))
    exact = np.bincount([p for _, p in distinct], minlength=10)
    full = PairCounter()
    full.feed(users, parts)
    assert full.finish(10, 10**6, None, None).tolist() == exact.tolist()
    bounded = PairCounter()
    bounded.feed(users, parts)
    got = bounded.finish(10, kappa, None, InsecureDeterministicRNG(seed=kappa)._test_state)
    per_user = np.unique([u for u, _ in distinct], return_counts=True)[1]
    assert int(got.sum()) == int(np.minimum(per_user, kappa).sum())
    assert np.all(got <= exact)


def grouped_sets(counter: PairCounter, n_partitions: int) -> list[list[int]]:
    ends, parts = counter.group(n_partitions)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return [sorted(parts[s:e].tolist()) for s, e in zip(starts, ends.astype(np.int64))]


@pytest.mark.parametrize("n_users", [3, 257, 5_000, 70_000])
def test_grouping_by_user_matches_a_sort_at_every_bucket_width(n_users):
    # The grouping sorts by buckets of 2^shift users first (shift grows with the user count):
    # each width must give exactly each user's distinct partitions, users in code order.
    gen = data_gen(n_users)
    users = np.concatenate([np.arange(n_users), gen.integers(0, n_users, 40_000)]).astype(np.uint32)
    parts = gen.integers(0, 97, users.size).astype(np.uint32)
    counter = PairCounter()
    counter.feed(users, parts)
    ends, got = counter.group(97)
    ends = np.asarray(ends, dtype=np.int64)
    # Expected: the distinct (user, partition) pairs in sorted order, so user u's partitions are
    # expected_parts[expected_ends[u - 1]:expected_ends[u]], ascending.
    pairs = np.unique(users.astype(np.int64) * 97 + parts)
    expected_users, expected_parts = pairs // 97, pairs % 97
    np.testing.assert_array_equal(ends, np.searchsorted(expected_users, np.arange(n_users), side="right"))
    owner = np.repeat(np.arange(n_users), np.diff(ends, prepend=0))  # the kernel's order within a user is free
    got = np.asarray(got, dtype=np.int64)
    np.testing.assert_array_equal(got[np.lexsort((got, owner))], expected_parts)


def test_shards_split_the_users_and_keep_their_codes_dense():
    gen = data_gen(5)
    users = gen.integers(0, 1_000, 30_000).astype(np.uint32)
    parts = gen.integers(0, 50, 30_000).astype(np.uint32)
    whole = PairCounter()
    whole.feed(users, parts)
    n_pairs = whole.n_pairs
    everyone = grouped_sets(whole, 50)
    shards = [PairCounter(), PairCounter()]
    for shard, counter in enumerate(shards):
        counter.feed(users, parts, 1, shard)
    assert shards[0].n_pairs + shards[1].n_pairs == n_pairs
    for shard, counter in enumerate(shards):
        # User u of the shard is stored as u >> 1: its sets are the whole's, every other user.
        assert grouped_sets(counter, 50) == everyone[shard::2]


def test_shard_arguments_are_checked_and_every_row_is_checked_in_every_shard():
    counter = PairCounter()
    for mask, shard in [(1, 2), (2, 0), (5, 1)]:
        with pytest.raises(ValueError, match="shard_mask must be 2\\*\\*b - 1"):
            counter.feed(np.zeros(1, np.uint32), np.zeros(1, np.uint32), mask, shard)
    # A bad code in a row of the other shard is still refused.
    users = np.array([0, 1], dtype=np.uint32)
    parts = np.array([0, CODE_LIMIT], dtype=np.uint32)
    with pytest.raises(ValueError, match="row 1"):
        PairCounter().feed(users, parts, 1, 0)

"""Cumulative DP-SIPS (docs/privacy/cumulative-sips.md): the certificate recomputed in exact
arithmetic (and broken thresholds caught), the fixed per-user order the argument needs, the law
of the accumulated statistic, an empirical privacy test that catches a copy drawing a fresh order
every round, validation before any calibration, and the entry points."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect import _weighted
from dpselect.core.exact import normal_tail_bounds, sqrt_bounds
from dpselect.core.params import validate_params
from dpselect.mechanisms.cumulative import CELL_BITS, CumulativeSIPS
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

_HALF_CELL = Fraction(1, 1 << (CELL_BITS + 1))


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed)


# ------------------------------------------------------------------ the certificate

def _certified(strategy: CumulativeSIPS) -> bool:
    """Recompute, independently of the builder, what the argument needs:
    Σ 1/σ_j² <= 1/σ², δ̄_AGM + δ_t <= δ, and for every round j and set size m, with the spread s_j
    of C_j bounded above exactly, 1 − (1 − P[Z > (ρ_j − g/2 − w_m)/s_j])^m <= f_j δ_t."""
    from dpselect.mechanisms.gaussian import agm_delta_upper

    p = strategy.params
    delta_t = p.delta_exact / 2  # the default noise_share
    if sum(1 / s ** 2 for s in strategy.sigmas) > 1 / strategy.sigma ** 2:
        return False
    if agm_delta_upper(strategy.sigma, p.epsilon_exact, 1) + delta_t > p.delta_exact:
        return False
    a, total = strategy.combination, sum(strategy.combination)
    for j, rho in enumerate(strategy.rhos):
        mass = sum(a[:j + 1])
        variance = sum(Fraction(a_l, mass) ** 2 * s ** 2 for a_l, s in zip(a, strategy.sigmas[:j + 1]))
        spread = sqrt_bounds(variance, 80)[1]
        budget = Fraction(a[j], total) * delta_t
        for m in range(1, p.max_partitions_contributed + 1):
            w = Fraction(int(strategy.weights[m]), 1 << 32)
            tail = normal_tail_bounds((rho - _HALF_CELL - w) / spread, 200)[1]
            if 1 - (1 - tail) ** m > budget:
                return False
        if strategy.cut_offs[j] != math.floor(mass * rho * (1 << CELL_BITS)):
            return False
    return True


@pytest.mark.parametrize("epsilon,delta,kappa,rounds,ratio", [
    (1.0, 1e-5, 1, 5, 0.5), (1.0, 1e-5, 3, 5, 0.5), (3.0, math.exp(-10), 4, 3, 0.3), (0.5, 1e-8, 2, 1, 1.0),
    (1.0, 1e-5, 2, 8, 0.25)])
def test_the_thresholds_certify_what_the_argument_needs(epsilon, delta, kappa, rounds, ratio):
    strategy = CumulativeSIPS(validate_params(epsilon, delta, kappa), rounds=rounds, ratio=ratio)
    assert len(strategy.rhos) == rounds
    assert _certified(strategy)
    assert strategy.certified_delta <= Fraction(delta)


def test_the_certificate_check_catches_broken_thresholds():
    """Two broken copies: thresholds without the half cell the rounding may add, and every round
    thresholded as if its mean had the last round's (smallest) spread."""
    good = CumulativeSIPS(validate_params(1.0, 1e-5, 3))
    no_half_cell = CumulativeSIPS(validate_params(1.0, 1e-5, 3))
    no_half_cell.rhos = [r - _HALF_CELL for r in good.rhos]
    no_half_cell.cut_offs = [math.floor(sum(good.combination[:j + 1]) * r * (1 << CELL_BITS))
                             for j, r in enumerate(no_half_cell.rhos)]
    last_spread = CumulativeSIPS(validate_params(1.0, 1e-5, 3))
    last_spread.rhos = [min(r, good.rhos[-1]) for r in good.rhos]
    last_spread.cut_offs = [math.floor(sum(good.combination[:j + 1]) * r * (1 << CELL_BITS))
                            for j, r in enumerate(last_spread.rhos)]
    assert _certified(good)
    assert not _certified(no_half_cell)
    assert not _certified(last_spread)


def test_the_documented_values():
    """docs/privacy/cumulative-sips.md: ε = 1, δ = 1e-5, κ = 10 with the defaults."""
    s = CumulativeSIPS(validate_params(1.0, 1e-5, 10))
    assert s.combination == [1, 2, 4, 8, 16]
    assert [round(float(x), 2) for x in s.sigmas] == [21.63, 15.29, 10.81, 7.65, 5.41]
    assert [round(r, 2) for r in s.thresholds.values()] == [119.89, 67.82, 43.48, 29.09, 19.82]
    assert float(s.sigma) == pytest.approx(3.884, abs=1e-3)


# ------------------------------------------------------------------ the fixed order

def test_each_user_weights_the_first_kappa_keys_not_yet_released_in_one_fixed_order():
    strategy = CumulativeSIPS(validate_params(1.0, 1e-5, 2))
    ordered = np.array([5, 3, 7, 1, 2, 4], dtype=np.uint32)  # user 0: 5, 3, 7, 1; user 1: 2, 4
    ends = np.array([4, 6], dtype=np.uintp)
    w = strategy.weights
    released = np.zeros(8, dtype=bool)

    def weights_now() -> dict[int, int]:
        h = strategy.prefix_histogram(ends, ordered, released)
        return {int(x): int(h[x]) for x in np.flatnonzero(h)}

    assert weights_now() == {5: w[2], 3: w[2], 2: w[2], 4: w[2]}
    released[5] = True  # 3 stays weighted; 7 comes in
    assert weights_now() == {3: w[2], 7: w[2], 2: w[2], 4: w[2]}
    released[[3, 7, 4]] = True  # user 0 has one key left, user 1 one: full weight, never more keys
    assert weights_now() == {1: w[1], 2: w[1]}


def test_the_order_is_drawn_once_and_uniformly():
    """Each user's order is a uniformly random permutation: over 6,000 users with keys 0..3, each
    of the 24 orders appears about 250 times (chi-square, 23 degrees of freedom, p < 1e-5 fails),
    and the mechanism shuffles once, before its first round."""
    ends = np.arange(4, 4 * 6000 + 1, 4, dtype=np.uintp)
    ordered = np.tile(np.arange(4, dtype=np.uint32), 6000)
    _weighted.shuffle_sets(ends, ordered, _rng(2).test_state)
    runs = ordered.reshape(6000, 4).astype(np.int64)
    codes = runs @ np.array([64, 16, 4, 1])
    _, counts = np.unique(codes, return_counts=True)
    assert counts.size == 24 and np.sort(runs, axis=1).tolist() == [[0, 1, 2, 3]] * 6000
    assert float(((counts - 250) ** 2 / 250).sum()) < 55
    calls: list[int] = []
    original = _weighted.shuffle_sets
    strategy = CumulativeSIPS(validate_params(1.0, 1e-5, 2), rounds=3)
    users = np.repeat(np.arange(50), 4)
    try:
        _weighted.shuffle_sets = lambda *a: calls.append(1) or original(*a)  # type: ignore[assignment]
        strategy.select_rows(users, np.arange(200), rng=_rng(7))
    finally:
        _weighted.shuffle_sets = original  # type: ignore[assignment]
    assert calls == [1]


# ------------------------------------------------------------------ the law of the accumulation

def _two_round_release_probability(n: float, strategy: CumulativeSIPS) -> float:
    """P[C_0 > ρ_0 or C_1 > ρ_1] for a key of weighted count n in both rounds, by numerical
    integration over the first round's noisy value (rounding to 2^-6 moves it by < 1e-3)."""
    s0, s1 = (float(s) for s in strategy.sigmas)
    a0, a1 = strategy.combination
    r0, r1 = (float(r) for r in strategy.rhos)
    y = np.linspace(n - 12 * s0, r0, 400_001)
    density = np.exp(-((y - n) / s0) ** 2 / 2) / (s0 * math.sqrt(2 * math.pi))
    z = ((a0 + a1) * r1 - a0 * y - a1 * n) / (a1 * s1)  # C_1 > ρ_1 ⟺ Z_1 > z
    later = 0.5 * np.vectorize(math.erfc)(z / math.sqrt(2))
    first = 0.5 * math.erfc((r0 - n) / (s0 * math.sqrt(2)))
    return first + float(np.trapezoid(density * later, y))


def test_the_release_rate_is_that_of_the_accumulated_gaussian_walk():
    """4,000 keys, each held by its own 18 users of one key (weight 1 in both rounds): the share
    released matches the two-round walk's crossing probability (within 4.5 standard errors). A
    copy that decided on each round's histogram alone (DP-SIPS) would release far fewer here."""
    strategy = CumulativeSIPS(validate_params(1.0, 1e-5, 1), rounds=2, ratio=0.5)
    n, keys = 18, 4000
    users = np.arange(n * keys)
    released = strategy.select_rows(users, users // n, keys, rng=_rng(3))
    p = _two_round_release_probability(float(n), strategy)
    assert 0.2 < p < 0.8
    assert abs(released.mean() - p) < 4.5 * math.sqrt(p * (1 - p) / keys)


# ------------------------------------------------------------------ empirical privacy

class _FreshOrderEveryRound(CumulativeSIPS):
    """A deliberately broken copy: every round draws a new order, so a user's earlier keys stay
    candidates with accumulated noise though the user no longer weights them, outside the union
    bound of the argument (step 5)."""

    rng: object = None

    def select_sets(self, sets, rng=None):  # type: ignore[no-untyped-def]
        self.rng = rng
        return super().select_sets(sets, rng)

    def prefix_histogram(self, ends, ordered, released):  # type: ignore[no-untyped-def]
        _weighted.shuffle_sets(ends, ordered, self.rng.test_state)  # type: ignore[attr-defined]
        return super().prefix_histogram(ends, ordered, released)


def _exclusive_release_rate(mechanism: type[CumulativeSIPS], seed: int) -> tuple[int, int, float]:
    """Users each holding 30 keys nobody else holds, κ = 1, δ = 0.2, 8 rounds: any release of
    one of them is what the argument's event E′ bounds by δ_t = 0.1 per user (measured: 0.076;
    the broken copy 0.118)."""
    users_n, per_user = 20_000, 30
    strategy = mechanism(validate_params(1.0, 0.2, 1), rounds=8)
    users = np.repeat(np.arange(users_n), per_user)
    keys = np.arange(users_n * per_user)
    released = strategy.select_rows(users, keys, keys.size, rng=_rng(seed))
    hit_users = int(np.unique(users[released]).size)
    return hit_users, users_n, float(strategy.params.delta_exact / 2)


def _clopper_pearson_lower(k: int, n: int, alpha: float = 1e-6) -> float:
    stats = pytest.importorskip("scipy.stats")
    return 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


def test_a_users_own_keys_are_released_no_more_often_than_the_threshold_delta():
    hits, n, delta_t = _exclusive_release_rate(CumulativeSIPS, 4)
    assert _clopper_pearson_lower(hits, n) <= delta_t


def test_the_empirical_test_catches_a_fresh_order_every_round():
    hits, n, delta_t = _exclusive_release_rate(_FreshOrderEveryRound, 4)
    assert _clopper_pearson_lower(hits, n) > delta_t


def test_a_single_key_user_is_released_no_more_often_than_claimed():
    """As for the other row mechanisms: 200,000 users with one key each, nobody else's."""
    size = 200_000
    strategy = CumulativeSIPS(validate_params(1.0, 0.01, 1))
    released = int(strategy.select_rows(np.arange(size), np.arange(size), rng=_rng(5)).sum())
    assert _clopper_pearson_lower(released, size) <= float(strategy.params.delta_exact / 2)


# ------------------------------------------------------------------ validation and entry points

@pytest.mark.parametrize("options,error,match", [
    ({"rounds": 0}, ValueError, "rounds must be between 1 and 12"),
    ({"rounds": 13}, ValueError, "rounds must be between 1 and 12"),
    ({"rounds": 2.0}, TypeError, "rounds must be an int"),
    ({"ratio": 0}, ValueError, r"ratio must be in \(0, 1\]"),
    ({"ratio": 1.5}, ValueError, r"ratio must be in \(0, 1\]"),
    ({"ratio": "half"}, TypeError, "ratio must be a real number"),
    ({"ratio": 0.123456}, ValueError, "denominator of at most 64"),
    ({"rounds": 12, "ratio": 63 / 64}, ValueError, "combination weights that sum to"),
    ({"noise_share": 1.0}, ValueError, "noise_share"),
])
def test_options_are_refused_before_any_calibration(options, error, match, monkeypatch):
    from dpselect.mechanisms import registry, weighted

    registry._built.cache_clear()
    calls: list[str] = []
    original = weighted.certified_sigma
    monkeypatch.setattr(weighted, "certified_sigma", lambda *a, **k: calls.append("sigma") or original(*a, **k))
    with pytest.raises(error, match=match):
        dpselect.make_strategy("cumulative_sips", epsilon=1.0, delta=1e-5, **options)
    assert calls == []


def test_the_same_seed_gives_the_same_release_and_the_guarantee_says_what_ran():
    users = np.repeat(np.arange(3000), 5)
    keys = (np.arange(users.size) * 7919) % 400
    a = dpselect.select_rows(users, keys, 1.0, 1e-5, strategy="cumulative_sips", max_partitions_contributed=3,
                             rng=_rng(6))
    b = dpselect.select_rows(users, keys, 1.0, 1e-5, strategy="cumulative_sips", max_partitions_contributed=3,
                             rng=_rng(6))
    np.testing.assert_array_equal(a, b)
    g = dpselect.make_strategy("cumulative_sips", epsilon=1.0, delta=1e-5).guarantee
    assert g.certified and "docs/privacy/cumulative-sips.md" in g.reference
    assert "cumulative DP-SIPS (5 rounds" in str(g)


def test_select_partitions_and_the_cli_run_it(tmp_path):
    pa = pytest.importorskip("pyarrow")
    from dpselect.cli import main

    users = [f"u{i}" for i in range(3000) for _ in range(4)]
    items = ["a", "b", "c", "d"] * 3000
    out = dpselect.select_partitions(pa.table({"user": users, "item": items}), privacy_unit="user", by="item",
                                     epsilon=1.0, delta=1e-5, max_partitions_contributed=2,
                                     strategy="cumulative_sips", rounds=3, ratio=0.5)
    assert out.column("item").to_pylist() == ["a", "b", "c", "d"]
    source = tmp_path / "rows.csv"
    source.write_text("user,item\n" + "".join(f"{i},{'x' if i % 2 else 'y'}\n" for i in range(400)))
    target = tmp_path / "out.csv"
    assert main(["select", str(source), "--privacy-unit", "user", "--by", "item", "--epsilon", "1",
                 "--delta", "1e-5", "--strategy", "cumulative_sips", "--option", "rounds=3", "-o", str(target),
                 "-q"]) == 0
    assert [line.strip('"') for line in target.read_text().splitlines()] == ["item", "x", "y"]


# ------------------------------------------------------------------ the kernels

def test_the_prefix_kernel_matches_a_model_on_random_sets():
    generator = np.random.default_rng(11)  # input data only
    sizes = generator.integers(0, 9, 400)
    ends = np.cumsum(sizes).astype(np.uintp)
    grouped = np.concatenate([generator.permutation(50)[:s] for s in sizes]).astype(np.uint32)
    released = generator.random(50) < 0.3
    weights = np.arange(4, dtype=np.int64) * 1000 + 7
    histogram = np.zeros(50, dtype=np.int64)
    _weighted.weighted_prefix(ends, grouped, released, 3, weights, histogram)
    expected = np.zeros(50, dtype=np.int64)
    start = 0
    for end in ends:
        kept = [int(x) for x in grouped[start:int(end)] if not released[x]][:3]
        for x in kept:
            expected[x] += weights[len(kept)]
        start = int(end)
    np.testing.assert_array_equal(histogram, expected)


@pytest.mark.parametrize("call,match", [
    (lambda: _weighted.weighted_prefix(np.array([2, 1], np.uintp), np.zeros(2, np.uint32), None, 1,
                                       np.zeros(2, np.int64), np.zeros(3, np.int64)), "ends must be non-decreasing"),
    (lambda: _weighted.weighted_prefix(np.array([2], np.uintp), np.array([0, 5], np.uint32), None, 1,
                                       np.zeros(2, np.int64), np.zeros(3, np.int64)), "not a partition code"),
    (lambda: _weighted.weighted_prefix(np.array([2], np.uintp), np.zeros(2, np.uint32), None, 2,
                                       np.zeros(2, np.int64), np.zeros(3, np.int64)), "kappa \\+ 1 = 3 entries"),
    (lambda: _weighted.weighted_prefix(np.array([2], np.uintp), np.zeros(2, np.uint32), np.zeros(2, bool), 1,
                                       np.zeros(2, np.int64), np.zeros(3, np.int64)), "excluded must have one entry"),
    (lambda: _weighted.weighted_prefix(np.array([3], np.uintp), np.zeros(2, np.uint32), None, 1,
                                       np.zeros(2, np.int64), np.zeros(3, np.int64)), "ends and grouped disagree"),
    (lambda: _weighted.weighted_prefix(np.array([1], np.uintp), np.zeros(1, np.uint32), None, 1,
                                       np.array([0, 2**63 - 1], np.int64), np.ones(3, np.int64)), "overflowed"),
    (lambda: _weighted.shuffle_sets(np.array([2, 1], np.uintp), np.zeros(2, np.uint32)), "non-decreasing"),
    (lambda: _weighted.shuffle_sets(np.array([3], np.uintp), np.zeros(2, np.uint32)), "disagree"),
])
def test_the_kernels_refuse_bad_arguments_before_writing(call, match):
    with pytest.raises(ValueError, match=match):
        call()

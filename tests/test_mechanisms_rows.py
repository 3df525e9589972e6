"""Mechanisms on each user's set of partitions: weighted Gaussian and Laplace, DP-SIPS, the
policy reference implementations. Thresholds against the published values, the weighted
histogram and its bounding, exact tail draws (statistics, the refinement path), an empirical
privacy test that catches a lowered threshold, and the raw-rows and CLI entry points."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect import _weighted
from dpselect.mechanisms import tail_draws
from dpselect.mechanisms.weighted import DPSIPS, UserSets, WeightedGaussian, WeightedLaplace, set_weights
from dpselect.core.params import validate_params
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


# ------------------------------------------------------------------ thresholds and weights

@pytest.mark.parametrize("kappa,gauss,lap", [(1, 18.15692, 11.81978), (3, 18.63524, 12.25172),
                                             (10, 19.31604, 13.22236),
                                             pytest.param(50, 20.33638, 14.75180, marks=pytest.mark.slow)])
def test_weighted_thresholds_reproduce_the_published_values(kappa, gauss, lap):
    """ρ of Gopi et al. (ICML 2020, Theorem 5.1) at ε = 1, δ = 1e-5, recomputed at 60 digits."""
    g = WeightedGaussian(validate_params(1.0, 1e-5, kappa))
    assert g.threshold == pytest.approx(gauss, rel=2e-6)
    assert WeightedLaplace(validate_params(1.0, 1e-5, kappa)).threshold == pytest.approx(lap, rel=1e-6)
    assert g.certified_delta <= Fraction(1, 10**5)


@pytest.mark.parametrize("kappa", [1, 2, 7, 64])
def test_weights_never_give_a_user_more_than_norm_one(kappa):
    one = 1 << 32
    l2, l1 = set_weights(kappa, "l2"), set_weights(kappa, "l1")
    for m in range(1, kappa + 1):
        assert m * int(l2[m]) ** 2 <= one * one and (m * (int(l2[m]) + 1) ** 2 > one * one)
        assert m * int(l1[m]) <= one and m * (int(l1[m]) + 1) > one


def test_weighted_histogram_bounds_each_user_to_kappa_uniformly():
    sets = UserSets.from_codes([0] * 10 + [1, 1], list(range(10)) + [3, 4], n_partitions=10)
    w = set_weights(3, "l2")
    counts = np.zeros(10)
    rng = InsecureDeterministicRNG(5)
    for _ in range(3000):
        histogram = np.zeros(10, np.int64)
        fresh = UserSets(sets.ends.copy(), sets.partitions.copy(), 10)
        _weighted.weighted_round(fresh.ends, fresh.partitions, None, 3, w, histogram, rng._test_state)
        user0 = histogram.copy()
        user0[3] -= w[2]  # user 1 always keeps both of its 2 partitions, each with weight w_2
        user0[4] -= w[2]
        assert sorted(set(user0.tolist()) - {0}) == [int(w[3])] and np.count_nonzero(user0) == 3
        counts += user0 > 0
    # each of user 0's 10 partitions is kept with probability 3/10
    expected = 3000 * 0.3
    assert np.all(np.abs(counts - expected) <= 5 * math.sqrt(expected * 0.7))


def test_excluded_partitions_are_skipped_and_the_rest_resampled():
    sets = UserSets.from_codes([0, 0, 0], [0, 1, 2], n_partitions=3)
    histogram = np.zeros(3, np.int64)
    excluded = np.array([1, 1, 0], dtype=bool)
    _weighted.weighted_round(sets.ends, sets.partitions, excluded, 2, set_weights(2, "l2"), histogram, None)
    assert histogram.tolist() == [0, 0, int(set_weights(2, "l2")[1])]  # one partition left: full weight w_1


# ------------------------------------------------------------------ exact tail draws

@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_tail_draws_keep_at_the_exact_rate(kind):
    distances = np.repeat(np.array([-3 << 32, 0, 1 << 32, 3 << 32], dtype=np.int64), 100_000)
    draw = tail_draws.gaussian_tail_draws if kind == "gaussian" else tail_draws.laplace_tail_draws
    scale = Fraction(2) if kind == "gaussian" else Fraction(1, 2)
    keep = draw(distances, 32, scale)
    for i, d in enumerate((-3, 0, 1, 3)):
        if kind == "gaussian":
            p = 0.5 * math.erfc(d / 2 / math.sqrt(2))
        else:
            p = 0.5 * math.exp(-d / 2) if d >= 0 else 1 - 0.5 * math.exp(d / 2)
        got = keep[i * 100_000:(i + 1) * 100_000].mean()
        assert abs(got - p) <= 5 * math.sqrt(p * (1 - p) / 100_000), (d, got, p)


@pytest.mark.slow
def test_the_refinement_path_is_exact_too(monkeypatch):
    """With the float interval blown up to half the unit interval, most draws are finished by
    the integer-arithmetic refinement: the rate must still be exactly p."""
    monkeypatch.setattr(tail_draws, "_MARGIN", 0.9)
    size = 20_000
    keep = tail_draws.gaussian_tail_draws(np.full(size, 1 << 31, np.int64), 32, Fraction(1))  # d = 0.5
    p = 0.5 * math.erfc(0.5 / math.sqrt(2))
    assert abs(keep.mean() - p) <= 5 * math.sqrt(p * (1 - p) / size)


def test_tail_draws_follow_the_test_rng_exactly():
    d = np.arange(-50, 50, dtype=np.int64) << 28
    a = tail_draws.gaussian_tail_draws(d, 32, Fraction(3), InsecureDeterministicRNG(8))
    b = tail_draws.gaussian_tail_draws(d, 32, Fraction(3), InsecureDeterministicRNG(8))
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ empirical privacy

def _clopper_pearson_lower(k: int, n: int, alpha: float = 1e-6) -> float:
    stats = pytest.importorskip("scipy.stats")
    return 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


class _LoweredThreshold(WeightedGaussian):
    """A deliberately broken weighted Gaussian: its threshold is one unit of weight too low."""

    def __init__(self, params):  # type: ignore[no-untyped-def]
        super().__init__(params)
        self.rho_units -= 1 << 32


@pytest.mark.parametrize("mechanism", [WeightedGaussian, WeightedLaplace, DPSIPS])
def test_a_users_own_partition_is_released_no_more_often_than_claimed(mechanism):
    """200,000 users with one partition each that nobody else has: each release of such a
    partition is exactly what a neighbour without that user cannot produce, so the rate must
    stay below the certified δ (a lower confidence bound above it would refute the claim)."""
    size = 200_000
    strat = mechanism(validate_params(1.0, 0.01, 1))
    released = int(strat.select_rows(np.arange(size), np.arange(size)).sum())
    assert _clopper_pearson_lower(released, size) <= float(strat.certified_delta)


def test_the_empirical_test_catches_a_lowered_threshold():
    size = 200_000
    broken = _LoweredThreshold(validate_params(1.0, 0.01, 1))
    released = int(broken.select_rows(np.arange(size), np.arange(size)).sum())
    assert _clopper_pearson_lower(released, size) > float(broken.certified_delta)


# ------------------------------------------------------------------ entry points

def test_select_rows_and_guarantees():
    users = np.repeat(np.arange(2000), 3)
    parts = np.tile(np.array([0, 1, 2]), 2000)
    for name in ("weighted_gaussian", "weighted_laplace", "dp_sips"):
        keep = dpselect.select_rows(users, parts, 1.0, 1e-5, strategy=name, max_partitions_contributed=2)
        assert keep.tolist() == [True, True, True]
        g = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5).guarantee
        assert g.certified and "docs/privacy/weighted.md" in g.reference and "exact draw" in str(g)
    policy = dpselect.make_strategy("policy_gaussian", epsilon=1.0, delta=1e-5).guarantee
    assert not policy.certified and str(policy).startswith("NOT CERTIFIED BY DPSELECT (a reference")
    with pytest.raises(ValueError, match="strategy must be one of"):
        dpselect.select_rows(users, parts, 1.0, 1e-5, strategy="pi_opt")
    with pytest.raises(ValueError, match="rounds"):
        dpselect.make_strategy("dp_sips", epsilon=1.0, delta=1e-5, rounds=0)
    with pytest.raises(ValueError, match="add_remove"):
        dpselect.make_strategy("weighted_gaussian", epsilon=1.0, delta=1e-5, neighbours="replace")


@pytest.mark.parametrize("name", ["weighted_gaussian", "dp_sips", "policy_laplace"])
def test_select_partitions_runs_row_mechanisms_with_kappa_enforced(name):
    pa = pytest.importorskip("pyarrow")
    users = [f"u{i}" for i in range(3000) for _ in range(4)]
    items = ["a", "b", "c", "d"] * 3000
    table = pa.table({"user": users, "item": items})
    out = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1.0, delta=1e-5,
                                     max_partitions_contributed=2, strategy=name)
    released = out.column("item").to_pylist()
    if name.startswith("policy_"):
        # A policy mechanism caps each item's weight at its cutoff, so however many users an item
        # has, its noisy weight misses the threshold with a fixed probability (several percent
        # for 4 items here): only the order and the subset are certain.
        assert released == sorted(set(released)) and set(released) <= {"a", "b", "c", "d"} and released
    else:
        assert released == ["a", "b", "c", "d"]
    text = out.schema.metadata[b"dpselect.guarantee"].decode()
    assert "bounded by dpselect to at most 2 partition" in text


def test_cli_runs_a_row_mechanism(tmp_path):
    pytest.importorskip("pyarrow")
    from dpselect.cli import main

    source = tmp_path / "rows.csv"
    source.write_text("user,item\n" + "".join(f"{i},{'x' if i % 2 else 'y'}\n" for i in range(400)))
    out = tmp_path / "out.csv"
    assert main(["select", str(source), "--privacy-unit", "user", "--by", "item", "--epsilon", "1",
                  "--delta", "1e-5", "--strategy", "weighted_gaussian", "-o", str(out), "-q"]) == 0
    assert [line.strip('"') for line in out.read_text().splitlines()] == ["item", "x", "y"]


class _FixedBytes:
    """A stand-in generator serving chosen 64-bit values, to aim draws at the cut points."""

    privacy_guaranteed = False
    _test_state = None

    def __init__(self, values: list[int]) -> None:
        self.data = b"".join(v.to_bytes(8, "big") for v in values)

    def _announce(self) -> None:
        pass

    def random_bytes(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out + bytes(n - len(out))


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_draws_near_one_are_decided_by_integer_cut_points(kind, monkeypatch):
    """Where 1 − p is tiny (between 2^-53 and 2^-24), a complement taken in doubles rounded by
    more than the margin; the cut points are now integers. U just below p must keep, U just
    above must drop, for p computed in 60 digits."""
    import mpmath

    mpmath.mp.dps = 60
    distances = np.array([-(int(x * 2**32)) for x in (5.6, 6.3, 7.1, 7.9)], dtype=np.int64)
    sigma = Fraction(1)
    values, expected = [], []
    for d in distances.tolist():
        z = mpmath.mpf(d) / 2**32
        p = 1 - mpmath.ncdf(z) if kind == "gaussian" else 1 - mpmath.exp(z) / 2
        scaled = p * mpmath.mpf(2) ** 64
        values += [int(mpmath.floor(scaled)) - 2, int(mpmath.ceil(scaled)) + 1]
        expected += [True, False]
    stub = _FixedBytes(values)
    monkeypatch.setattr(tail_draws, "resolve_rng", lambda rng: stub)
    doubled = np.repeat(distances, 2)
    if kind == "gaussian":
        keep = tail_draws.gaussian_tail_draws(doubled, 32, sigma)
    else:
        keep = tail_draws.laplace_tail_draws(doubled, 32, Fraction(1))
    assert keep.tolist() == expected


@pytest.mark.slow
def test_auto_on_raw_rows_picks_cumulative_sips_and_a_count_release_when_counts_are_wanted():
    rec = dpselect.recommend(1.0, 1e-5, 4, rows=True)
    assert rec.strategy == "cumulative_sips" and rec.options["ratio"] == 0.5 and "cumulative DP-SIPS" in rec.reason
    assert dpselect.recommend(1.0, 1e-5, 4).strategy == "gaussian"  # counts alone: unchanged
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"user": list(range(600)), "item": ["a"] * 300 + ["b"] * 300})
    out = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1.0, delta=1e-5,
                                     max_partitions_contributed=4, strategy="auto")
    assert "cumulative DP-SIPS" in out.schema.metadata[b"dpselect.guarantee"].decode()
    single = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1.0, delta=1e-5,
                                        strategy="auto")  # κ = 1: pi_opt (tests/test_auto_rows.py)
    assert "pi_opt" in single.schema.metadata[b"dpselect.guarantee"].decode()
    counted = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1.0, delta=1e-5,
                                         strategy="auto", counts=True)
    assert "TSGD" in counted.schema.metadata[b"dpselect.guarantee"].decode()


# ------------------------------------------------------------------ parameters checked before calibration

ROW_MECHANISMS = ["weighted_gaussian", "weighted_laplace", "dp_sips", "cumulative_sips", "policy_gaussian", "policy_laplace"]


@pytest.fixture
def calibrations(monkeypatch):
    """Every calibration a row mechanism can start (σ, the Laplace threshold's e^{εt} bound, the
    weight table), counted: a refused parameter must raise before the first one."""
    from dpselect.mechanisms import registry, weighted

    registry._built.cache_clear()  # a strategy built by an earlier test would come from the cache
    calls: list[str] = []
    for name in ("certified_sigma", "exp_lower", "set_weights", "per_partition_delta"):
        original = getattr(weighted, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(weighted, name, counted)
    return calls


@pytest.mark.parametrize("strategy", ROW_MECHANISMS)
@pytest.mark.parametrize("kappa", [10 ** 6, 2 ** 64 + 1])
def test_an_absurd_kappa_is_refused_before_any_calibration(strategy, kappa, calibrations):
    """ε = 1e-6 and δ = 1e-300 with κ = 10^6: weighted Gaussian used to calibrate σ first (about
    ten minutes here) and then failed with "could not calibrate Gaussian noise", never naming κ."""
    with pytest.raises(ValueError, match=r"max_partitions_contributed up to 65536.*got " + str(kappa)):
        dpselect.make_strategy(strategy, epsilon=1e-6, delta=1e-300, max_partitions_contributed=kappa)
    assert calibrations == []


@pytest.mark.parametrize("strategy", ROW_MECHANISMS)
def test_replace_neighbours_are_refused_before_any_calibration(strategy, calibrations):
    with pytest.raises(ValueError, match="neighbours='add_remove' only"):
        dpselect.make_strategy(strategy, epsilon=1e-6, delta=1e-300, max_partitions_contributed=3,
                               neighbours="replace")
    assert calibrations == []


@pytest.mark.parametrize(("strategy", "option", "value", "error"), [
    ("weighted_gaussian", "noise_share", 1.5, ValueError),
    ("weighted_gaussian", "noise_share", float("nan"), ValueError),
    ("weighted_gaussian", "noise_share", "half", TypeError),
    ("weighted_gaussian", "noise_share", True, TypeError),
    ("dp_sips", "noise_share", 0, ValueError),
    ("dp_sips", "ratio", 0, ValueError),
    ("dp_sips", "ratio", "0.1", TypeError),
    ("dp_sips", "rounds", 0, ValueError),
    ("policy_gaussian", "alpha", -1.0, ValueError),
    ("policy_gaussian", "alpha", float("inf"), ValueError),
    ("policy_laplace", "alpha", 0, ValueError),
    ("policy_laplace", "alpha", "3", TypeError),
])
def test_bad_options_are_refused_before_any_calibration(strategy, option, value, error, calibrations):
    with pytest.raises(error, match=option):
        dpselect.make_strategy(strategy, epsilon=1e-6, delta=1e-300, max_partitions_contributed=3,
                               **{option: value})
    assert calibrations == []


def test_the_calibration_counter_sees_a_valid_build(calibrations):
    """The fixture does count: a valid build calibrates (so the tests above can fail)."""
    dpselect.make_strategy("policy_gaussian", epsilon=1.0, delta=1e-5, max_partitions_contributed=2, alpha=2.5)
    assert "certified_sigma" in calibrations and "set_weights" in calibrations

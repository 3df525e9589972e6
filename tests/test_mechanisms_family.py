"""The partition-selection family behind one interface: Laplace and Gaussian thresholding
against Google's definitions (PyDP) and their closed forms in 60-digit arithmetic, the paper's
vectors, statistical keep rates, an empirical privacy test that catches an off-by-one
threshold, pre-thresholds, public and mixed releases, bounded DP, and the recommender."""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import dpselect
from dpselect.mechanisms import GaussianThresholding, LaplaceThresholding, TabledSelection
from dpselect.mechanisms.gaussian import agm_delta_upper, google_sigma
from dpselect.core.params import validate_params
from dpselect.core.tables import KeepTable, read_only, verify_keep_table
from dpselect.testing import InsecureDeterministicRNG
from dpselect.core.verify import CertificationError

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")
mpmath.mp.dps = 60


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


# ------------------------------------------------------------------ Laplace

def _laplace_exact(eps: Fraction, delta_p: Fraction, n: int) -> mpmath.mpf:
    e, d = _mp(eps), _mp(delta_p)
    if d <= 0.5:
        u = d * mpmath.exp((n - 1) * e)
        return u if u <= 0.5 else 1 - 1 / (4 * u)
    return 1 - (1 - d) * mpmath.exp(-(n - 1) * e)


@pytest.mark.parametrize("eps,delta,kappa", [(1.0, 1e-5, 1), (0.1, 1e-10, 1), (1.0, 1e-5, 3), (2.0, 0.3, 2), (0.5, 0.7, 1)])
def test_laplace_table_is_below_and_within_1e12_of_the_closed_form(eps, delta, kappa):
    s = dpselect.make_strategy("laplace", epsilon=eps, delta=delta, max_partitions_contributed=kappa)
    p = s.params
    for n in range(1, s.table.length + 3):
        exact = _laplace_exact(p.partition_epsilon, p.partition_delta, n)
        ours = s.exact_keep_probability(n)
        assert _mp(ours) <= exact
        assert exact - _mp(ours) <= max(1e-12 * exact, mpmath.mpf(2) ** -79)


def test_laplace_matches_the_papers_figure_1_points():
    # Desfontaines et al., PoPETs 2022, Figure 1 (ε = 1, δ = 1e-5): π_Lap, recomputed at 60 digits
    points = {1: 1.0e-5, 2: 2.7182818285e-5, 5: 5.4598150033e-4, 10: 0.081030839276, 11: 0.22026465795,
              12: 0.58245748024, 13: 0.84639469117, 15: 0.97921178202, 20: 0.99985993009, 25: 0.99999905622}
    got = dpselect.keep_probability(np.array(list(points)), 1.0, 1e-5, strategy="laplace")
    np.testing.assert_allclose(got, list(points.values()), rtol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["laplace", "gaussian"])
@pytest.mark.parametrize("eps,delta,kappa", [(1.0, 1e-5, 1), (1.0, 1e-5, 3), (0.5, 1e-8, 10), (2.0, 1e-3, 4)])
def test_keep_probabilities_match_google_and_never_exceed_the_exact_value(name, eps, delta, kappa):
    partition_selection = pytest.importorskip("pydp.algorithms.partition_selection")
    google = partition_selection.create_partition_strategy(name, eps, delta, kappa)
    ours = dpselect.make_strategy(name, epsilon=eps, delta=delta, max_partitions_contributed=kappa)
    p = ours.params
    for n in range(1, int(ours.thresholds["threshold"] * 2) + 5):
        theirs = google.probability_of_keep(n)
        mine = float(ours.exact_keep_probability(n))
        if theirs <= 1e-300:
            continue
        # Google's double-precision δ_p, threshold and quantile can themselves be off their own
        # definition (by 3e-8 for Laplace and 8e-8 for Gaussian at n = 1, δ = 1e-8, κ = 10, the
        # latter *above* δ_p): we hold to the definition in 60 digits, and Google to its own error.
        exact = float(_laplace_exact(p.partition_epsilon, p.partition_delta, n) if name == "laplace"
                      else _gaussian_exact(ours, n))
        assert mine <= exact * (1 + 1e-15) and exact - mine <= 1e-12 * exact, (n, mine, exact)
        assert abs(mine - theirs) <= max(1e-9 * theirs, 2 * abs(theirs - exact)), (n, mine, theirs)


# ------------------------------------------------------------------ Gaussian

def _gaussian_exact(strategy: GaussianThresholding, n: int) -> mpmath.mpf:
    """Φ((n − T)/σ) with the strategy's σ and T = 1 + σ Φ⁻¹(1 − δ_p) in 60 digits."""
    sigma = _mp(strategy.sigma)
    z = -mpmath.sqrt(2) * mpmath.erfinv(2 * _mp(strategy.delta_p) - 1)
    return mpmath.ncdf((n - (1 + sigma * z)) / sigma)


@pytest.mark.parametrize("eps,delta,kappa,sigma,threshold", [
    (1.0, 1e-5, 1, 3.884141, 18.15692), (1.0, 1e-5, 3, 6.727529, 32.27718),
    pytest.param(0.1, 1e-5, 1, 32.48604, 144.4965, marks=pytest.mark.slow),
])
def test_gaussian_calibration_reproduces_the_analytic_gaussian_vectors(eps, delta, kappa, sigma, threshold):
    """σ and T at Balle–Wang precision (Google's own bisection stops at 1e-3 relative)."""
    s = GaussianThresholding(validate_params(eps, delta, kappa), sigma_accuracy=1e-12)
    assert float(s.sigma) == pytest.approx(sigma, rel=1e-6)
    assert s.threshold == pytest.approx(threshold, rel=1e-6)
    default = dpselect.make_strategy("gaussian", epsilon=eps, delta=delta, max_partitions_contributed=kappa)
    assert float(default.sigma) == google_sigma(eps, delta / 2, math.sqrt(kappa))


@pytest.mark.parametrize("kappa", [1, 3])
def test_gaussian_certificate_holds_in_60_digits(kappa):
    s = dpselect.make_strategy("gaussian", epsilon=1.0, delta=1e-5, max_partitions_contributed=kappa)
    mpmath.mp.dps = 100  # the bounds are far tighter than 60 digits
    sigma, t = _mp(s.sigma), _mp(s.threshold_exact)
    l2 = mpmath.sqrt(kappa)
    a, b = l2 / (2 * sigma), sigma / l2
    agm = mpmath.ncdf(a - b) - mpmath.e * mpmath.ncdf(-a - b)
    assert agm <= _mp(agm_delta_upper(s.sigma, Fraction(1), kappa)) <= mpmath.mpf(1e-5) / 2
    assert 1 - mpmath.ncdf((t - 1) / sigma) <= _mp(s.delta_p)
    assert s.certified_delta <= Fraction(1, 10**5)
    for n in range(1, s.table.length + 2):
        exact = mpmath.ncdf((n - t) / sigma)
        ours = _mp(s.exact_keep_probability(n))
        assert ours <= exact and exact - ours <= _mp(s.gap)
    assert s.gap < Fraction(1, 2**180)
    mpmath.mp.dps = 60


@pytest.mark.slow
def test_gaussian_optimal_split_lowers_the_threshold():
    half = dpselect.make_strategy("gaussian", epsilon=1.0, delta=1e-5, max_partitions_contributed=4)
    best = dpselect.make_strategy("gaussian", epsilon=1.0, delta=1e-5, max_partitions_contributed=4,
                                  noise_share="optimal")
    assert 0.5 < best.noise_share < 0.65 and best.threshold < half.threshold
    assert best.certified_delta <= Fraction(1, 10**5)


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-17), (5.0, 1e-14), (20.0, 1e-8), (40.0, 1e-20)])
def test_gaussian_at_extreme_parameters_is_certified_or_refused_quickly(eps, delta):
    """These hung: a float CDF lost the lower tail, and the threshold share could go negative."""
    try:
        s = dpselect.make_strategy("gaussian", epsilon=eps, delta=delta)
    except ValueError as exc:
        assert "pi_opt" in str(exc)
    else:
        assert s.certified_delta <= Fraction(repr(delta))


@pytest.mark.parametrize("eps,delta", [(38.0, 1e-23), (42.0, 1e-40)])
def test_laplace_at_extreme_epsilon_is_certified(eps, delta):
    s = dpselect.make_strategy("laplace", epsilon=eps, delta=delta)
    assert s.exact_keep_probability(1) <= s.params.partition_delta


def test_gaussian_refuses_what_it_cannot_certify():
    with pytest.raises(ValueError, match="epsilon up to 50"):
        dpselect.make_strategy("gaussian", epsilon=60, delta=1e-5)
    with pytest.raises(ValueError, match="noise_share"):
        dpselect.make_strategy("gaussian", epsilon=1, delta=1e-5, noise_share=1.5)
    with pytest.raises(TypeError, match="options"):
        dpselect.make_strategy("laplace", epsilon=1, delta=1e-5, noise_share=0.5)


# ------------------------------------------------------------------ statistics and empirical privacy

@pytest.mark.parametrize("name", ["laplace", "gaussian"])
def test_kernel_keep_rates_match_the_keep_probabilities(name):
    s = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5, max_partitions_contributed=3)
    size = 400_000
    for n in (int(s.thresholds["threshold"]) - 3, int(s.thresholds["threshold"]), int(s.thresholds["threshold"]) + 4):
        p = float(s.exact_keep_probability(n))
        kept = int(dpselect.select(np.full(size, n), 1.0, 1e-5, strategy=name, max_partitions_contributed=3).sum())
        assert abs(kept - size * p) <= 5 * math.sqrt(size * p * (1 - p)) + 1, (n, kept, size * p)


def _clopper_pearson_lower(k: int, n: int, alpha: float = 1e-6) -> float:
    """Lower end of the one-sided exact (Clopper–Pearson) confidence interval for a rate k/n."""
    stats = pytest.importorskip("scipy.stats")
    return 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


class _OffByOne(TabledSelection):
    """A deliberately broken Laplace rule: its table is the real one shifted by a count, as a
    threshold that is one user too low would give (the bug class of OpenDP's issue #2922)."""

    name = "broken"

    def __init__(self, real: TabledSelection) -> None:
        self.params = real.params
        words = np.asarray(real.table.words)
        shifted = np.concatenate([words[:1], words[2:], words[-1:]])
        self._load(KeepTable(read_only(shifted), real.table.partition_epsilon, real.table.partition_delta, False))
        self._claim = real.guarantee

    @property
    def guarantee(self):  # type: ignore[no-untyped-def]
        return self._claim


@pytest.mark.parametrize("name", ["pi_opt", "laplace", "gaussian", "release"])
def test_a_one_user_partition_is_released_no_more_often_than_the_claimed_delta(name):
    """Empirical privacy: the neighbour with zero users never releases, so P[release | n = 1]
    must be at most the per-partition δ. 200,000 one-user partitions at δ = 0.01: a lower
    confidence bound (1 − 1e-6) above δ would refute the claim."""
    s = dpselect.make_strategy(name, epsilon=1.0, delta=0.01)
    size = 200_000
    released = int(s.apply(np.ones(size, np.int64)).keep.sum())
    claimed = float(s.guarantee.delta_exact)
    assert _clopper_pearson_lower(released, size) <= claimed, (released, claimed)


def test_the_empirical_test_catches_an_off_by_one_threshold():
    real = dpselect.make_strategy("laplace", epsilon=1.0, delta=0.01)
    broken = _OffByOne(real)
    size = 200_000
    released = int(broken.apply(np.ones(size, np.int64)).keep.sum())
    assert _clopper_pearson_lower(released, size) > float(real.guarantee.delta_exact)
    with pytest.raises(CertificationError):  # and the exact verifier refuses its table outright
        verify_keep_table(broken.table.words, real.params.partition_epsilon, real.params.partition_delta, False)


# ------------------------------------------------------------------ options: pre-threshold, bounded, public

@pytest.mark.parametrize("name", ["pi_opt", "release", "laplace", "gaussian"])
def test_pre_threshold_drops_small_partitions_and_shifts_the_rest(name):
    plain = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5)
    shifted = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5, pre_threshold=5)
    ns = np.arange(0, 60)
    p_plain = plain.keep_probability(ns)
    p_shift = shifted.keep_probability(ns)
    assert not p_shift[:5].any()
    np.testing.assert_array_equal(p_shift[5:], p_plain[1:-4])
    kept = shifted.apply(np.full(50_000, 4), rng=InsecureDeterministicRNG(1)).keep
    assert not kept.any()
    assert "Pre-threshold 5" in str(shifted.guarantee)


def test_bounded_dp_splits_the_budget_over_twice_the_partitions():
    bounded = dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5, max_partitions_contributed=2,
                                     neighbours="replace")
    assert bounded.params.partition_epsilon == Fraction(1, 4)
    assert "replace all rows of one privacy unit" in str(bounded.guarantee)
    assert bounded.params.compose(bounded.params.partition_delta) <= Fraction(1, 10**5)
    with pytest.raises(ValueError, match="neighbours"):
        dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5, neighbours="swap")


def test_public_partitions_release_every_listed_key_present_or_not():
    s = dpselect.make_strategy("public", epsilon=1.0, delta=1e-5)
    counts = np.array([0, 0, 3, 50, 1000])
    result = s.apply(counts, rng=InsecureDeterministicRNG(2))
    assert result.keep.all()
    assert np.all(np.abs(result.noisy_counts - counts) <= s.k)
    assert s.keep_probability([0, 7]).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("t,no_fp,no_fn", [(None, True, False), (-20, False, True), (0, False, False)])
def test_mixed_release_thresholds_say_what_they_guarantee(t, no_fp, no_fn):
    s = dpselect.make_strategy("mixed", epsilon=1.0, delta=1e-5, public_threshold=t)
    assert (s.no_false_positives, s.no_false_negatives) == (no_fp, no_fn)
    size = 20_000
    counts = np.concatenate([np.zeros(size, np.int64), np.ones(size, np.int64), np.ones(size, np.int64)])
    public = np.concatenate([np.ones(2 * size, bool), np.zeros(size, bool)])
    keep, _ = s.release(counts, public)
    absent_public, present_public, private_one = keep[:size], keep[size:2 * size], keep[2 * size:]
    if no_fp:
        assert not absent_public.any()
    if no_fn:
        assert present_public.all()
    assert private_one.mean() < 1e-3  # private keys keep the TSGD rule (n + X > k)


# ------------------------------------------------------------------ the interface and the recommender

@pytest.mark.parametrize("name", ["pi_opt", "release", "laplace", "gaussian", "auto"])
def test_keep_probability_works_for_every_count_based_strategy(name):
    p = dpselect.keep_probability(np.arange(0, 80), 1.0, 1e-5, strategy=name, max_partitions_contributed=2)
    assert p[0] == 0 and np.all(np.diff(p) >= 0) and p[-1] > 0.99


def test_release_keep_probability_is_the_exact_tsgd_tail():
    s = dpselect.make_strategy("release", epsilon=1.0, delta=1e-5)
    pmf = s.table.pmf()
    for n in (1, 5, 11, 12, 20, 23, 30):
        expected = sum(p for x, p in zip(range(-s.k, s.k + 1), pmf) if n + x > s.k)
        assert s.exact_keep_probability(n) == expected
        assert dpselect.keep_probability(n, 1.0, 1e-5, strategy="release") == float(expected)


@pytest.mark.parametrize("kappa,best", [(1, "pi_opt"), (2, "pi_opt"), (4, "gaussian"),
                                        pytest.param(8, "gaussian", marks=pytest.mark.slow)])
def test_recommend_reproduces_the_papers_kappa_crossing(kappa, best):
    rec = dpselect.recommend(1.0, 1e-5, kappa)
    assert rec.strategy == best
    mids = {c.label: c.midpoint for c in rec.candidates}
    assert mids[rec.label] == min(mids.values())


@pytest.mark.slow
def test_recommend_at_kappa_3_finds_the_two_within_a_few_percent():
    mids = {c.label: c.midpoint for c in dpselect.recommend(1.0, 1e-5, 3).candidates}
    assert abs(mids["pi_opt"] - mids["gaussian (optimal split)"]) / mids["pi_opt"] < 0.05
    assert dpselect.recommend(1.0, 1e-5, 4, counts=True).strategy == "release"
    auto = dpselect.make_strategy("auto", epsilon=1.0, delta=1e-5, max_partitions_contributed=6)
    assert isinstance(auto, GaussianThresholding)


def test_select_takes_any_keep_drop_strategy_and_refuses_count_releases():
    counts = np.arange(100)
    for name in ("laplace", "gaussian", "auto"):
        keep = dpselect.select(counts, 1.0, 1e-5, strategy=name, rng=InsecureDeterministicRNG(3))
        assert keep.dtype == bool and not keep[0] and keep[90:].all()
    with pytest.raises(ValueError, match="dpselect.release"):
        dpselect.select(counts, 1.0, 1e-5, strategy="public")
    assert isinstance(dpselect.make_strategy("laplace", epsilon=1, delta=1e-5), LaplaceThresholding)


def test_explain_prints_every_mechanism_and_a_recommendation():
    from dpselect.explain import explain_text

    text = explain_text(1.0, 1e-5, 4)
    for label in ("pi_opt", "release", "laplace", "gaussian"):
        assert label in text
    assert "releases the most" in text and "strategy='gaussian'" in text


def test_select_partitions_with_public_partitions_end_to_end():
    pa = pytest.importorskip("pyarrow")
    rows = pa.table({"user": list(range(300)) + [1000], "key": ["big"] * 300 + ["rare"]})
    public = ["big", "never-seen", "rare"]
    out = dpselect.select_partitions(rows, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                     public_partitions=public, counts=True, rng=InsecureDeterministicRNG(4))
    assert sorted(out.column("key").to_pylist()) == sorted(public)  # exactly the public list
    mixed = dpselect.select_partitions(rows, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                       strategy="mixed", public_partitions=["never-seen"],
                                       rng=InsecureDeterministicRNG(4))
    assert mixed.column("key").to_pylist() == ["big"]  # no false positive at the default threshold
    with pytest.raises(ValueError, match="public_partitions"):
        dpselect.select_partitions(rows, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                   strategy="pi_opt", public_partitions=public)
    laplace = dpselect.select_partitions(rows, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                         strategy="laplace", pre_threshold=3)
    assert laplace.column("key").to_pylist() == ["big"]
    assert "Laplace thresholding" in laplace.schema.metadata[b"dpselect.guarantee"].decode()


def test_the_array_release_takes_public_partitions():
    rel = dpselect.release(np.array([0, 0, 5, 80]), 1.0, 1e-5, public=True, rng=InsecureDeterministicRNG(6))
    assert rel.keep.all()
    mask = np.array([True, True, False, False])
    mixed = dpselect.release(np.array([0, 1, 1, 80]), 1.0, 1e-5, public=mask, public_threshold=-20,
                             rng=InsecureDeterministicRNG(6))
    assert mixed.keep[:2].all() and mixed.keep[3] and not mixed.keep[2]
    with pytest.raises(ValueError, match="public_threshold"):
        dpselect.release([1], 1.0, 1e-5, public=True, public_threshold=3)

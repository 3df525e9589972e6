"""Quantile metrics of dpselect.aggregate: the tree's sensitivity and accounting checked exactly
(and a broken copy caught), the intervals' coverage and the rank error measured, the noise choice
made from the parameters, bad inputs refused naming the parameter."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.aggregation import quantile_release, quantile_tree, tree_inference
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpselect.aggregation.plan import plan_aggregate
from dpselect.aggregation.quantile_tree import KeyLeafCounts, leaves_for, sensitivities, shape_for, tree_noise
from dpselect.aggregation.quantiles import output_columns, suffix
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning",
                                        "ignore::dpselect.errors.DPSelectWarning")

NOISELESS = 1e5  # node noise 0 except with negligible probability


def delays(seed: int, keys: int = 6, sizes: tuple[int, int] = (200, 2000)) -> pd.DataFrame:
    """One row per user (so bounding at κ = L∞ = 1 keeps every row), integer delays."""
    gen = np.random.Generator(np.random.PCG64(seed))  # test data only
    n = gen.integers(*sizes, keys)
    key = np.repeat(np.arange(keys), n)
    value = np.rint(gen.gamma(2.0, 12.0, key.size) - 20 + 3 * key).astype(np.int64)
    return pd.DataFrame({"user": np.arange(key.size), "key": key, "delay": value})


def true_quantile(values: np.ndarray, q: float) -> float:
    s = np.sort(values)
    return float(s[max(1, math.ceil(q * s.size)) - 1])


def release(data, metrics, *, epsilon=1.0, level=None, seed=0, noise="auto", keys=None, **kw):
    return dpselect.aggregate(data, privacy_unit="user", by="key", metrics=metrics, epsilon=epsilon, delta=1e-6,
                              max_partitions_contributed=kw.pop("kappa", 1),
                              max_contributions_per_partition=kw.pop("linf", 1),
                              public_partitions=sorted(set(data["key"])) if keys is None else keys,
                              confidence_level=level, noise=noise, rng=InsecureDeterministicRNG(seed=seed), **kw)


# ------------------------------------------------------------------ the tree's sensitivity, exactly

def tree_counts(rows: list[tuple[int, int]], n_keys: int, b: int, h: int) -> np.ndarray:
    """Every node count of every key's tree, built independently of the library: a row in leaf
    k adds 1 to node k // b^(h − ℓ) of each level ℓ."""
    width = sum(b ** level for level in range(1, h + 1))
    out = np.zeros((n_keys, width), dtype=np.int64)
    for key, leaf in rows:
        offset = 0
        for level in range(1, h + 1):
            out[key, offset + leaf // b ** (h - level)] += 1
            offset += b ** level
    return out


@pytest.mark.parametrize("kappa,linf,m,law", [(1, 1, 64, "laplace"), (3, 2, 40, "laplace"), (2, 5, 64, "gaussian"),
                                              (4, 1, 7, "gaussian")])
def test_the_stated_sensitivities_bound_every_neighbour_and_are_attained(kappa, linf, m, law):
    shape = shape_for(m, law)
    b, h = shape.branching, shape.height
    l1, l2sq = sensitivities(kappa, linf, h)
    gen = np.random.Generator(np.random.PCG64(kappa * 100 + m))  # test data only
    others = [(int(k), int(v)) for k, v in zip(gen.integers(0, 6, 300), gen.integers(0, m, 300))]
    worst = (0, 0)
    for trial in range(60):
        # one user: at most κ keys, at most L∞ rows each (what bounding leaves)
        keys = gen.choice(6, size=int(gen.integers(1, kappa + 1)), replace=False)
        mine = [(int(k), int(gen.integers(0, m)) if trial % 2 else 0) for k in keys
                for _ in range(int(gen.integers(1, linf + 1)) if trial % 3 else linf)]
        diff = tree_counts(others + mine, 6, b, h) - tree_counts(others, 6, b, h)
        worst = (max(worst[0], int(np.abs(diff).sum())), max(worst[1], int((diff ** 2).sum())))
    assert worst[0] <= l1 and worst[1] <= l2sq
    # attained by a user with L∞ rows in one leaf of each of κ keys: the bounds are the sensitivities
    mine = [(k, 0) for k in range(kappa) for _ in range(linf)]
    diff = tree_counts(others + mine, 6, b, h) - tree_counts(others, 6, b, h)
    assert (int(np.abs(diff).sum()), int((diff ** 2).sum())) == (l1, l2sq)


def audit(noise, kappa: int, linf: int, height: int, epsilon: Fraction, rho: Fraction | None) -> bool:
    """Whether node noise certifies the share, from first principles: a user moves the counts by
    L1 ≤ κ·L∞·h and squared L2 ≤ κ·h·L∞² (the test above), so discrete Laplace of scale t is
    (L1/t)-DP and the discrete Gaussian of σ² is (L2²/(2σ²))-zCDP — exact rationals."""
    l1 = kappa * linf * height
    l2sq = kappa * height * linf * linf
    if isinstance(noise, DiscreteLaplaceNoise):
        return Fraction(l1) / noise.scale <= epsilon
    assert isinstance(noise, DiscreteGaussianNoise) and rho is not None
    return Fraction(l2sq) / (2 * noise.sigma2) <= rho


@pytest.mark.parametrize("law", ["laplace", "gaussian"])
def test_node_noise_certifies_the_share_exactly(law):
    eps, rho = Fraction(1, 3), Fraction(1, 50)
    for kappa, linf in [(1, 1), (4, 3), (16, 1)]:
        h = shape_for(64, law).height
        noise = tree_noise(law, eps, rho, kappa, linf, h)
        assert audit(noise, kappa, linf, h, eps, rho)
        if law == "laplace":
            assert noise.epsilon == Fraction(kappa * linf * h) / noise.scale <= eps
        else:
            assert noise.rho == Fraction(kappa * h * linf ** 2) / (2 * noise.sigma2) <= rho


def _record_noise(monkeypatch, make=tree_noise):
    used = []

    def recording(*args):
        noise = make(*args)
        used.append((args, noise))
        return noise
    monkeypatch.setattr(quantile_release, "tree_noise", recording)
    return used


@pytest.mark.parametrize("law", ["laplace", "gaussian"])
def test_a_release_spends_what_its_guarantee_states(monkeypatch, law):
    used = _record_noise(monkeypatch)
    data = delays(1)
    res = release(data, {"d": dpselect.quantile("delay", [0.5, 0.9], bounds=(-60, 300)), "n": dpselect.count()},
                  kappa=2, linf=3, noise=law)
    ((kind, eps, rho, kappa, linf, h), noise), = used
    assert (kind, kappa, linf) == (law, 2, 3)
    assert h == shape_for(leaves_for(-60, 300, True).count, law).height
    assert audit(noise, 2, 3, h, eps, rho)
    component = next(c for c in res.guarantee.components if c.what.startswith("d = "))
    if law == "laplace":
        assert component.epsilon_exact == noise.epsilon <= eps
    else:
        assert component.rho == noise.rho <= rho
    # the whole release, exactly: its ε is at most the request, and the shares sum to it
    assert res.guarantee.epsilon_exact <= Fraction(1)
    assert sum((c.epsilon_exact for c in res.guarantee.components), Fraction(0)) <= Fraction(1)


def test_a_tree_with_half_the_sensitivity_is_caught(monkeypatch):
    """Deliberately broken copies. (1) Node noise calibrated as if the tree were half as tall (a
    row touching h/2 levels): it states its share, so the release composes, but the audit of
    what it drew fails. (2) Noise of half the scale that states the true sensitivity: the
    release's own exact composition refuses it."""
    used = _record_noise(monkeypatch, lambda kind, e, r, k, lf, h: tree_noise(kind, e, r, k, lf, max(1, h // 2)))
    release(delays(2), {"d": dpselect.median("delay", bounds=(-60, 300))}, kappa=2, linf=2, noise="laplace")
    ((kind, eps, rho, kappa, linf, h), noise), = used
    assert h == 2 and audit(tree_noise(kind, eps, rho, kappa, linf, h), kappa, linf, h, eps, rho)
    assert not audit(noise, kappa, linf, h, eps, rho)

    def half_scale(kind, epsilon, rho, kappa, linf, height):
        return DiscreteLaplaceNoise(Fraction(kappa * linf * height, 2) / epsilon, linf * height, kappa)
    _record_noise(monkeypatch, half_scale)
    with pytest.raises(AssertionError, match="composed to more than its budget"):
        release(delays(2), {"d": dpselect.median("delay", bounds=(-60, 300))}, kappa=2, linf=2, noise="laplace")


# ------------------------------------------------------------------ accuracy and intervals

def test_noiseless_quantiles_are_the_exact_order_statistics():
    data = delays(3, sizes=(50, 400))
    data["delay"] = data["delay"].clip(0, 50)
    metrics = {"d": dpselect.quantile("delay", [0.0, 0.25, 0.5, 0.9, 1.0], bounds=(0, 50)),
               "lo": dpselect.min("delay", bounds=(0, 50)), "hi": dpselect.max("delay", bounds=(0, 50)),
               "med": dpselect.median("delay", bounds=(0, 50))}
    out = release(data, metrics, epsilon=NOISELESS).frame.set_index("key")
    assert list(out.columns) == ["d_p0", "d_p25", "d_p50", "d_p90", "d_p100", "lo", "hi", "med"]
    for key, group in data.groupby("key"):
        v = group["delay"].to_numpy()
        for q, column in [(0.0, "d_p0"), (0.25, "d_p25"), (0.5, "d_p50"), (0.9, "d_p90"), (1.0, "d_p100")]:
            assert out.loc[key, column] == true_quantile(v, q)
        assert (out.loc[key, "lo"], out.loc[key, "hi"], out.loc[key, "med"]) == (v.min(), v.max(),
                                                                                  true_quantile(v, 0.5))


@pytest.mark.parametrize("law", ["laplace", "gaussian"])
def test_intervals_cover_the_true_quantile_at_their_level(law):
    """Statistical: 5 releases of 40 keys, 3 quantiles: 600 intervals at level 0.9. Their
    argument (a union bound) makes them conservative; a coverage below 0.9 minus 3 binomial
    standard deviations (0.863) would refute the level."""
    covered = total = 0
    for seed in range(5):
        data = delays(10 + seed, keys=40, sizes=(30, 600))
        out = release(data, {"d": dpselect.quantile("delay", [0.1, 0.5, 0.9], bounds=(-60, 300))}, level=0.9,
                      seed=seed, noise=law).frame.set_index("key")
        for key, group in data.groupby("key"):
            v = np.clip(group["delay"].to_numpy(), -60, 300)
            for q in (0.1, 0.5, 0.9):
                c = f"d_{suffix(q)}"
                assert out.loc[key, f"{c}_ci_low"] <= out.loc[key, c] <= out.loc[key, f"{c}_ci_high"]
                covered += out.loc[key, f"{c}_ci_low"] <= true_quantile(v, q) <= out.loc[key, f"{c}_ci_high"]
                total += 1
    assert covered / total >= 0.863, covered / total


@pytest.mark.parametrize("broken", [False, True])
def test_intervals_without_their_rank_error_are_caught(monkeypatch, broken):
    """A broken copy whose intervals ignore the noise (E = E_n = 0) fails the coverage check that
    the true intervals pass. Level 0.99, 120 intervals: the check refutes a coverage below 0.99
    minus 3 binomial standard deviations (0.963). (The broken intervals, widened to the point
    estimate, still hold about 87 % of the medians: at level 0.9 the check could not tell.)"""
    if broken:
        monkeypatch.setattr(quantile_release, "rank_widths", lambda noise, shape, level: (0, 0))
    level, covered, total = 0.99, 0, 0
    for seed in range(3):
        data = delays(20 + seed, keys=40, sizes=(30, 600))
        out = release(data, {"d": dpselect.median("delay", bounds=(-60, 300))}, level=level, seed=seed,
                      noise="laplace").frame.set_index("key")
        for key, group in data.groupby("key"):
            covered += out.loc[key, "d_ci_low"] <= true_quantile(group["delay"].to_numpy(), 0.5) <= \
                out.loc[key, "d_ci_high"]
            total += 1
    threshold = level - 3 * math.sqrt(level * (1 - level) / total)
    assert (covered / total < threshold) == broken, covered / total


def test_rank_error_of_large_keys_is_small():
    """Statistical: at κ = L∞ = 1 and ε = 1 a key of 2,000 to 4,000 values has its median and
    90th percentile within 3% in rank (the noise of a prefix count is about 10 rows)."""
    errors = []
    for seed in range(3):
        data = delays(30 + seed, keys=10, sizes=(2000, 4000))
        out = release(data, {"d": dpselect.quantile("delay", [0.5, 0.9], bounds=(-60, 300))},
                      seed=seed).frame.set_index("key")
        for key, group in data.groupby("key"):
            v = np.sort(np.clip(group["delay"].to_numpy(), -60, 300))
            for q in (0.5, 0.9):
                x = out.loc[key, f"d_{suffix(q)}"]
                below, upto = np.searchsorted(v, x, "left"), np.searchsorted(v, x, "right")
                errors.append(max(0.0, below - q * v.size, q * v.size - upto) / v.size)
    assert np.median(errors) < 0.01 and max(errors) < 0.03, (np.median(errors), max(errors))


def test_public_keys_without_rows_get_an_answer_from_noise_alone():
    data = delays(4, keys=3)
    out = release(data, {"d": dpselect.median("delay", bounds=(-60, 300))}, keys=[0, 1, 2, 99],
                  level=0.9).frame.set_index("key")
    assert list(out.index) == [0, 1, 2, 99]
    assert -60 <= out.loc[99, "d"] <= 300 and out.loc[99, "d_ci_low"] <= out.loc[99, "d_ci_high"]


def test_bounds_found_privately_and_clamping_reported():
    data = delays(5, keys=4, sizes=(2000, 3000))
    res = release(data, {"d": dpselect.median("delay"), "m": dpselect.mean("delay", bounds=None)}, epsilon=2)
    lo, hi = res.bounds["delay"]
    assert lo <= data["delay"].median() <= hi
    assert ((res.frame["d"] >= lo) & (res.frame["d"] <= hi)).all()
    given = release(data, {"d": dpselect.median("delay", bounds=(0, 30))})
    clamping = given.report().clamping["delay"]
    assert (clamping.below, clamping.above) == (int((data["delay"] < 0).sum()), int((data["delay"] > 30).sum()))


def test_sorted_counts_give_the_dense_counts_answers(monkeypatch):
    """Many keys use sorted (key, leaf) codes instead of a dense array: same counts, same draws."""
    data = delays(9, keys=30, sizes=(20, 300))
    metrics = {"d": dpselect.quantile("delay", [0.2, 0.5, 0.95], bounds=(-60, 300))}
    dense = release(data, metrics, level=0.9, seed=3).frame
    monkeypatch.setattr(quantile_tree, "_DENSE_LIMIT", 0)
    sparse = release(data, metrics, level=0.9, seed=3).frame
    assert sparse.equals(dense)


def test_a_column_without_bounds_found_is_nan_and_spends_its_share():
    data = delays(11, keys=2, sizes=(3, 5))
    res = release(data, {"d": dpselect.median("delay"), "n": dpselect.count()}, epsilon=0.05, level=0.9)
    assert math.isnan(res.bounds["delay"][0])
    assert res.frame["d"].isna().all() and res.frame["d_ci_low"].isna().all()
    component = next(c for c in res.guarantee.components if c.what.startswith("d = "))
    assert component.epsilon_exact > 0 and "no bounds were found" in component.statement


# ------------------------------------------------------------------ consistency (constrained inference)

def level_counts(leaf: np.ndarray, b: int, h: int) -> list[np.ndarray]:
    """Each level's counts (keys, nodes holding leaves) of leaf counts (keys, m), built directly."""
    n, m = leaf.shape
    padded = np.zeros((n, b ** h), dtype=leaf.dtype)
    padded[:, :m] = leaf
    return [padded.reshape(n, b ** lv, b ** (h - lv)).sum(axis=2)[:, :-(-m // b ** (h - lv))] for lv in range(1, h + 1)]


def least_squares(levels: list[np.ndarray], b: int, h: int, m: int) -> np.ndarray:
    """The least-squares leaf counts of noisy levels, by numpy's solver (independent of the library)."""
    rows = []
    for lv in range(1, h + 1):
        width = b ** (h - lv)
        rows += [np.isin(np.arange(m), np.arange(s, s + width)).astype(float) for s in range(0, m, width)]
    return np.linalg.lstsq(np.array(rows), np.concatenate(levels, axis=1).T.astype(float), rcond=None)[0].T


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 64), law=st.sampled_from(["laplace", "gaussian"]), seed=st.integers(0, 2 ** 32 - 1))
def test_consistent_estimates_are_exact_without_noise_consistent_and_least_squares(m, law, seed):
    shape = shape_for(m, law)
    b, h = shape.branching, shape.height
    gen = np.random.Generator(np.random.PCG64(seed))  # test data only
    leaf = gen.integers(0, 1000, (3, m))
    exact = level_counts(leaf, b, h)
    clean = tree_inference.consistent_levels(exact, b, m)
    assert all(np.array_equal(clean.level(lv), exact[lv - 1]) for lv in range(1, h + 1))  # the true counts
    noisy = [c + gen.integers(-500, 500, c.shape) for c in exact]
    est = tree_inference.consistent_levels(noisy, b, m)
    for lv in range(1, h):  # children sum to their parent, exactly (numerators over one denominator)
        assert np.array_equal(level_counts(est.numerators[h - 1], b, h)[lv - 1], est.numerators[lv - 1])
    np.testing.assert_allclose(est.level(h), least_squares(noisy, b, h, m), atol=1e-7)


@pytest.mark.parametrize("law", ["laplace", "gaussian"])
def test_consistent_prefix_counts_are_unbiased_with_less_variance_than_the_raw_tree(law):
    """Statistical, with the release's own noise: 3,000 trees of 64 leaves. Every prefix count
    (leaves < k) read from the consistent estimates against the same prefix read from the raw
    nodes (the fewest nodes that tile it, as a descent reads it). Least squares is unbiased with
    the least variance (Gauss–Markov): on average over k 2/3 (b = 8, h = 2) or 0.53 (b = 4,
    h = 3) of the raw variance, at most 0.89 or 0.79 for each k; asserted: below 0.8 on average,
    each k below 1.1 (sample variances of 3,000 draws are within about 8 % of theirs), and the
    mean error within 4 standard errors of 0."""
    shape = shape_for(64, law)
    b, h, m = shape.branching, shape.height, shape.leaves
    noise = tree_noise(law, Fraction(1), Fraction(1, 20), 1, 1, h)
    truth = np.random.Generator(np.random.PCG64(5)).integers(0, 50, (3000, m))  # test data only
    rng = InsecureDeterministicRNG(seed=41)
    noisy = [noise.add(c.reshape(-1), rng=rng).reshape(c.shape) for c in level_counts(truth, b, h)]
    leaves = tree_inference.consistent_levels(noisy, b, m).level(h)
    consistent = np.cumsum(leaves, axis=1)[:, :-1] - np.cumsum(truth, axis=1)[:, :-1]
    raw = np.zeros_like(consistent)
    for k in range(1, m):  # leaves < k tiled greedily by the largest aligned nodes, as a descent reads them
        start = 0
        for lv in range(1, h + 1):
            width = b ** (h - lv)
            while start + width <= k:
                raw[:, k - 1] += noisy[lv - 1][:, start // width] - truth[:, start:start + width].sum(axis=1)
                start += width
    v_cons, v_raw = consistent.var(axis=0), raw.var(axis=0)
    assert v_cons.mean() / v_raw.mean() < 0.8, v_cons.mean() / v_raw.mean()
    assert (v_cons <= 1.1 * v_raw).all()
    assert np.all(np.abs(consistent.mean(axis=0)) <= 4 * np.sqrt(v_cons / consistent.shape[0]))


class _RecordingNoise:
    """The release's noise, recording every count it noised and what it added."""

    def __init__(self, noise) -> None:
        self.noise, self.draws = noise, []

    def add(self, values, *, rng=None):
        values = np.asarray(values, dtype=np.int64)
        noisy = self.noise.add(values, rng=rng)
        self.draws.append(noisy)
        return noisy

    def __getattr__(self, name):
        return getattr(self.noise, name)


@pytest.mark.parametrize("law,m,block", [("laplace", 64, None), ("gaussian", 40, None), ("laplace", 64, 7)])
def test_every_node_is_noised_once_and_points_descend_the_consistent_tree(monkeypatch, law, m, block):
    """Every node of every released key is noised, once, whether the descent reads it or not
    (b = 8, h = 2; b = 7, h = 2 with a partial last subtree; keys in blocks of 7); the point
    estimates are the clipped descent of the consistent estimates — checked against a descent
    written here over numpy's least squares of the drawn tree."""
    if block is not None:
        monkeypatch.setattr(quantile_tree, "_BLOCK", block)
    n_keys, qs = 25, np.array([0.1, 0.5, 0.9])
    shape = shape_for(m, law)
    b, h = shape.branching, shape.height
    assert h == 2
    truth = np.random.Generator(np.random.PCG64(8)).integers(0, 30, (n_keys, m))  # test data only
    noise = _RecordingNoise(tree_noise(law, Fraction(1, 2), Fraction(1, 50), 1, 1, h))

    def targets(nhat, clipped):
        return np.maximum(clipped[:, None] * qs[None, :], 1.0), np.ones(qs.size, bool), np.ones(qs.size, bool)
    ends = quantile_tree.descend(KeyLeafCounts.of_counts(truth), shape, noise, n_keys, targets,
                                 InsecureDeterministicRNG(seed=3))
    exact = level_counts(truth, b, h)
    step = block or n_keys
    # each node once: per block of keys, level by level
    assert [d.size for d in noise.draws] == [c[k:k + step].size for k in range(0, n_keys, step) for c in exact]
    noisy = [np.concatenate([noise.draws[i * h + lv].reshape(-1, c.shape[1]) for i in range(-(-n_keys // step))])
             for lv, c in enumerate(exact)]
    leaves = least_squares(noisy, b, h, m)
    for key in range(n_keys):
        est = [np.maximum(c, 0) for c in level_counts(leaves[key:key + 1], b, h)]
        for p, q in enumerate(qs):
            target, node, above = max(1.0, q * est[0].sum()), 0, 0.0
            for lv in range(1, h + 1):
                kids = [c for c in range(node * b, node * b + b) if c < est[lv - 1].shape[1]]
                sums = above + np.cumsum(est[lv - 1][0, kids])
                j = int(np.argmax(sums >= target - 1e-9)) if (sums >= target - 1e-9).any() else len(kids) - 1
                above, node = float(sums[j] - est[lv - 1][0, kids[j]]), kids[j]
            assert ends.low[key, p] == node, (key, q)


# ------------------------------------------------------------------ the noise choice

def test_auto_noise_choice_reads_no_data():
    metrics = {"d": dpselect.quantile("delay", [0.5, 0.9], bounds=(-60, 300)), "n": dpselect.count()}
    for kappa in (1, 8):
        plan = plan_aggregate(privacy_unit="user", by="key", metrics=metrics, epsilon=1, delta=1e-6,
                              max_partitions_contributed=kappa, max_contributions_per_partition=kappa, public=True)
        reasons = {release(delays(seed), metrics, kappa=kappa, linf=kappa, seed=seed).guarantee.noise_choice
                   for seed in (6, 7)}
        assert reasons == {plan.noise_reason}
    # more keys per user favour the Gaussian (its L2 sensitivity grows as √κ, the L1 as κ)
    noises = [plan_aggregate(privacy_unit="user", by="key", metrics=metrics, epsilon=1, delta=1e-6,
                             max_partitions_contributed=k, max_contributions_per_partition=1, public=True).noises["d"]
              for k in (1, 64)]
    assert noises == ["laplace", "gaussian"]


# ------------------------------------------------------------------ bad inputs

@pytest.mark.parametrize("q,error,match", [
    (1.5, ValueError, r"q=\): each q must be in \[0, 1\]"), (-0.1, ValueError, r"in \[0, 1\]"),
    (float("nan"), ValueError, r"in \[0, 1\]"), ([], ValueError, "empty sequence"),
    ([0.5, 0.9, 0.5], ValueError, "lists 0.5 twice"), ("0.5", TypeError, "a number in"),
    (True, TypeError, "a number in"), ([0.5, None], TypeError, "real number"), (None, TypeError, "a number in")])
def test_bad_quantiles_are_refused_naming_q(q, error, match):
    with pytest.raises(error, match=match):
        dpselect.quantile("delay", q)


def test_bad_metric_parameters_are_refused_before_any_work():
    with pytest.raises(ValueError, match="bounds are inverted"):
        dpselect.median("delay", bounds=(10, 0))
    with pytest.raises(TypeError, match="value column's name"):
        dpselect.quantile("", 0.5)
    with pytest.raises(TypeError, match="made by dpselect.quantile"):
        dpselect.Metric("quantile", "delay")
    data = delays(8)
    with pytest.raises(ValueError, match="a by column"):
        release(data, {"d": dpselect.median("key", bounds=(0, 10))})
    with pytest.raises(ValueError, match="privacy_unit column"):
        release(data, {"d": dpselect.median("user", bounds=(0, 10))})
    with pytest.raises(ValueError, match=r"bounds_scope='dataset'"):
        release(data, {"d": dpselect.median("delay")}, bounds_scope="partition")
    with pytest.raises(ValueError, match="interval column 'd_p50_ci_low'"):
        release(data, {"d": dpselect.quantile("delay", [0.5], bounds=(0, 9)), "d_p50_ci_low": dpselect.count()},
                level=0.9)


def test_output_names():
    assert [suffix(q) for q in (0.5, 0.9, 0.995, 0.0, 1.0, 0.07)] == ["p50", "p90", "p99_5", "p0", "p100", "p7"]
    assert output_columns("t", dpselect.quantile("x", [0.5, 0.9])) == ["t_p50", "t_p90"]
    assert output_columns("t", dpselect.quantile("x", 0.9)) == ["t"]
    assert str(dpselect.min("x", bounds=(0, 1))) == "min('x', bounds=(0, 1))"
    assert "q=[0.5, 0.9]" in str(dpselect.quantile("x", [0.5, 0.9]))

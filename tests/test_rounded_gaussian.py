"""The rounded continuous Gaussian (dpselect/mechanisms/rounded_gaussian.py): exact in law.

k = round((c + σZ)/g) has P[k = K] = Φ(((K + ½)g − c)/σ) − Φ(((K − ½)g − c)/σ). The draws are
checked against those probabilities computed in exact arithmetic (chi-square, mean, variance),
the checks are shown to reject a sampler that is slightly wrong, and the exact path (U within a
boundary's float margin) is aimed at with chosen uniform bits, the cell compared with the one
exact Fractions give."""
from __future__ import annotations

import math
import statistics
from fractions import Fraction

import mpmath
import numpy as np
import numpy.typing as npt
import pytest

from dpselect.core.exact import normal_cdf_bounds
from dpselect.mechanisms import rounded_gaussian
from dpselect.mechanisms.rounded_gaussian import normal_quantile, rounded_gaussian_draws
from dpselect.mechanisms.tail_draws import uniform_is_below
from dpselect.rng import SecureRNG
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

UNIT_BITS = 32
FINE = 1 << 26  # g = 2^-6: the cell the row mechanisms use
SIZE = 200_000
P_FAIL = 1e-6  # a chi-square p-value below this fails


# ------------------------------------------------------------------ exact references

def _boundary(m: int, centre: int, sigma: Fraction, cell: int) -> Fraction:
    """The lower boundary of cell m, in standard units: ((m − ½)g − c)/σ."""
    return Fraction((2 * m - 1) * cell - 2 * centre, 1 << (UNIT_BITS + 1)) / sigma


def _cdf(z: Fraction) -> Fraction:
    low, high = normal_cdf_bounds(z, 80)
    return (low + high) / 2


def _exact_cell(u: Fraction, centre: int, sigma: Fraction, cell: int) -> int:
    """The K with Φ(b_K) <= U < Φ(b_{K+1}), walked in exact arithmetic from a float guess."""
    def below(m: int) -> bool:  # U < Φ(b_m), certified
        low, high = normal_cdf_bounds(_boundary(m, centre, sigma, cell), 400)
        assert not low <= u <= high, "the reference cannot separate U from a boundary"
        return u < low

    inv_cdf = statistics.NormalDist().inv_cdf
    z = inv_cdf(float(u)) if u <= Fraction(1, 2) else -inv_cdf(float(1 - u))  # 1 − U keeps its bits
    m = round((float(sigma) * z * 2**UNIT_BITS + centre) / cell)
    while below(m):
        m -= 1
    while not below(m + 1):
        m += 1
    return m


def _bins(centre: int, sigma: Fraction, cell: int, per_sigma: float = 8, reach: float = 3.5) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Edges e_i (a cell K is in bin i when e_{i-1} <= K < e_i) over ±reach σ, and each bin's
    exact probability, the two tails included."""
    cells_per_sigma = sigma * (1 << UNIT_BITS) / cell
    width = max(1, round(cells_per_sigma / Fraction(per_sigma)))
    middle = round(Fraction(centre, cell))
    span = math.ceil(Fraction(reach) * cells_per_sigma)
    edges = list(range(middle - span, middle + span + 1, width))
    cdf = [_cdf(_boundary(e, centre, sigma, cell)) for e in edges]
    probabilities = [cdf[0]] + [b - a for a, b in zip(cdf, cdf[1:])] + [1 - cdf[-1]]
    return np.array(edges, np.int64), np.array([float(p) for p in probabilities])


def _chi_square_p(k: npt.NDArray[np.int64], centre: int, sigma: Fraction, cell: int, **bins: float) -> float:
    edges, probabilities = _bins(centre, sigma, cell, **bins)
    counts = np.bincount(np.searchsorted(edges, k, side="right"), minlength=probabilities.size)
    expected = probabilities * k.size
    assert expected.min() >= 5, "bins too thin for a chi-square"
    statistic = float(((counts - expected) ** 2 / expected).sum())
    df = probabilities.size - 1
    return float(mpmath.gammainc(df / 2, statistic / 2, mpmath.inf, regularized=True))


class _ChosenBits(SecureRNG):
    """A stand-in generator: chosen 64-bit values first, then one byte repeated for every
    further block, so that U = (u + f)/2^64 exactly with f = 0 (0x00), 1/3 (0x55), 2/3 (0xAA)."""

    def __init__(self, values: list[int], fill: int = 0x55) -> None:
        self.data = b"".join(v.to_bytes(8, "big") for v in values)
        self.fill = fill
        self.extra = 0  # bytes served past the chosen values: the exact path's refinements

    def random_bytes(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        self.extra += n - len(out)
        return out + bytes([self.fill]) * (n - len(out))


def _uniform(u: int, fill: int = 0x55) -> Fraction:
    return (u + Fraction(fill, 0xFF)) / 2**64  # 0.0101...b = 1/3, 0.1010...b = 2/3


# Centres (units of 2^-32) off the cell grid, one far from 0; σ's with and without a short binary
# expansion; the widest cell allowed (g/σ = 1/4).
LAWS = [
    (int(0.3 * 2**32), Fraction(1), FINE),
    ((1 << 45) + 12345, Fraction(3, 7), FINE),
    (-(1 << 40) - 777, Fraction(1, 4), 1 << 28),
    (12_345_678, Fraction(1000), FINE),
]


# ------------------------------------------------------------------ the law

@pytest.mark.parametrize(("centre", "sigma", "cell"), LAWS)
def test_cells_follow_the_exact_law(centre, sigma, cell):
    k = rounded_gaussian_draws(np.full(SIZE, centre, np.int64), UNIT_BITS, sigma, cell, InsecureDeterministicRNG(1))
    assert _chi_square_p(k, centre, sigma, cell) >= P_FAIL


@pytest.mark.parametrize(("centre", "sigma", "cell"), LAWS)
def test_mean_and_variance_are_the_centre_and_sigma_squared_plus_g_squared_over_12(centre, sigma, cell):
    """Sheppard: rounding to g adds g²/12 (up to terms in e^{−2π²σ²/g²}, below 10^-130 here)."""
    k = rounded_gaussian_draws(np.full(SIZE, centre, np.int64), UNIT_BITS, sigma, cell, InsecureDeterministicRNG(2))
    y = (k * cell - centre).astype(np.float64) / 2**UNIT_BITS  # Y − c in real units, exact in int64
    g, s = cell / 2**UNIT_BITS, float(sigma)
    variance = s * s + g * g / 12
    assert abs(y.mean()) <= 6 * math.sqrt(variance / SIZE)
    assert abs(y.var() - variance) <= 6 * variance * math.sqrt(2 / SIZE)


def test_each_draw_has_its_own_centre():
    centre = np.array([-(1 << 44), 0, 1 << 44, 5 << 30] * 50_000, np.int64)
    k = rounded_gaussian_draws(centre, UNIT_BITS, Fraction(2), FINE, InsecureDeterministicRNG(3))
    for i, c in enumerate((-(1 << 44), 0, 1 << 44, 5 << 30)):
        assert _chi_square_p(k[i::4], c, Fraction(2), FINE) >= P_FAIL


# ------------------------------------------------------------------ the checks can fail

def test_the_chi_square_rejects_floor_for_round():
    """floor(Y/g) = round((Y − g/2)/g): half a cell off, on the widest cells (on the row
    mechanisms' cells, g = σ/64, half a cell is σ/128: 200,000 draws cannot see it reliably)."""
    for centre, sigma, cell in (LAWS[2], (int(0.3 * 2**32), Fraction(1), 1 << 30)):
        shifted = np.full(SIZE, centre - cell // 2, np.int64)
        k = rounded_gaussian_draws(shifted, UNIT_BITS, sigma, cell, InsecureDeterministicRNG(1))
        assert _chi_square_p(k, centre, sigma, cell) < P_FAIL


@pytest.mark.slow
def test_the_chi_square_rejects_a_sigma_one_percent_too_large():
    """σ·1.01 moves each bin's probability by about 1% of its slope: 10^6 draws see it."""
    centre, sigma, cell = LAWS[2]
    size = 1_000_000
    centres = np.full(size, centre, np.int64)
    k = rounded_gaussian_draws(centres, UNIT_BITS, sigma * Fraction(101, 100), cell, InsecureDeterministicRNG(1))
    assert _chi_square_p(k, centre, sigma, cell, per_sigma=2) < P_FAIL
    right = rounded_gaussian_draws(centres, UNIT_BITS, sigma, cell, InsecureDeterministicRNG(1))
    assert _chi_square_p(right, centre, sigma, cell, per_sigma=2) >= P_FAIL  # the same test, passed


# ------------------------------------------------------------------ the exact path

def _draw_chosen(values: list[int], centre: int, sigma: Fraction, cell: int, fill: int = 0x55) -> tuple[
        list[int], _ChosenBits]:
    rng = _ChosenBits(values, fill)
    k = rounded_gaussian_draws(np.full(len(values), centre, np.int64), UNIT_BITS, sigma, cell, rng)
    return k.tolist(), rng


def _next_to_boundaries(centre: int, sigma: Fraction, cell: int, cells: range) -> list[int]:
    """U's first 64 bits at ⌊Φ(b)·2^64⌋ − 1, ⌊Φ(b)·2^64⌋, ⌊Φ(b)·2^64⌋ + 1 for boundaries b: the
    middle one's interval holds Φ(b)."""
    values = []
    for m in cells:
        low, _ = normal_cdf_bounds(_boundary(m, centre, sigma, cell), 200)
        at = math.floor(low * 2**64)
        values += [at - 1, at, at + 1]
    return values


@pytest.mark.parametrize("fill", [0x00, 0x55, 0xAA])
def test_u_at_a_boundary_is_settled_exactly(fill):
    centre, sigma, cell = (1 << 45) + 12345, Fraction(3, 7), FINE
    middle = round(Fraction(centre, cell))
    values = _next_to_boundaries(centre, sigma, cell, range(middle - 40, middle + 41, 8))
    k, rng = _draw_chosen(values, centre, sigma, cell, fill)
    assert rng.extra > 0  # the boundaries' own values could only be settled with more bits
    assert k == [_exact_cell(_uniform(v, fill), centre, sigma, cell) for v in values]


def test_the_exact_path_alone_gives_the_exact_cells(monkeypatch):
    """With the float margin blown up to 90%, nearly every draw is settled in integer arithmetic."""
    monkeypatch.setattr(rounded_gaussian, "_MARGIN", 0.9)
    centre, sigma, cell = int(0.3 * 2**32), Fraction(1), FINE
    values = [int(v) for v in np.random.default_rng(4).integers(1, 2**64 - 1, 150, dtype=np.uint64)]
    taken = []
    original = rounded_gaussian._exact_cell
    monkeypatch.setattr(rounded_gaussian, "_exact_cell", lambda *a: taken.append(a) or original(*a))
    k, _ = _draw_chosen(values, centre, sigma, cell)
    assert len(taken) >= 140
    assert k == [_exact_cell(_uniform(v), centre, sigma, cell) for v in values]


def test_the_exact_path_gives_the_same_law(monkeypatch):
    monkeypatch.setattr(rounded_gaussian, "_MARGIN", 0.5)
    centre, sigma, cell = LAWS[2]
    k = rounded_gaussian_draws(np.full(1500, centre, np.int64), UNIT_BITS, sigma, cell, InsecureDeterministicRNG(6))
    assert _chi_square_p(k, centre, sigma, cell, per_sigma=1, reach=2) >= P_FAIL


def test_a_guess_many_cells_off_is_walked_then_searched_exactly(monkeypatch):
    """The float guess only decides where to look: off by thousands of cells, it costs time."""
    monkeypatch.setattr(rounded_gaussian, "normal_quantile", lambda p: normal_quantile(p) + 0.7)
    centre, sigma, cell = 0, Fraction(5), FINE  # 0.7σ off: 224 cells
    values = [int(v) for v in np.random.default_rng(5).integers(1, 2**64 - 1, 40, dtype=np.uint64)]
    k, _ = _draw_chosen(values, centre, sigma, cell)
    assert k == [_exact_cell(_uniform(v), centre, sigma, cell) for v in values]


@pytest.mark.parametrize("side", ["low", "high"])
def test_the_far_tails_are_exact(side):
    """Boundaries 8σ to 9σ out: U within 2^-60 of 0 or 1, from the first bits to the exact path."""
    centre, sigma, cell = 777, Fraction(1), FINE
    # Φ(−8) 2^64 ≈ 11,450; Φ(−9) 2^64 ≈ 2.1
    small = [0, 1, 2, 3, 5, 17, 100, 175, 176, 1000, 5000, 11_000, 11_449, 11_450, 11_451, 20_000]
    values = small if side == "low" else [2**64 - 1 - v for v in small]
    for fill in (0x00, 0x55, 0xAA):
        if fill == 0x00 and side == "low":
            values = values[1:]  # U = 0 exactly: probability 0, and no cell (b = −∞)
        k, _ = _draw_chosen(values, centre, sigma, cell, fill)
        expected = [_exact_cell(_uniform(v, fill), centre, sigma, cell) for v in values]
        assert k == expected
        z = [float(_boundary(e, centre, sigma, cell)) for e in expected]
        assert all(7.5 < abs(b) < 10 for b in z)  # the cells are where the test says


def test_a_refined_uniform_keeps_its_bits_for_the_next_comparison():
    """uniform_is_below hands back the bits it drew: the next comparison is of the same U."""
    rng = _ChosenBits([7], fill=0x00)  # U = (5·2^64 + 7)/2^128 after the first block 5
    p = Fraction(5, 2**64) + Fraction(1, 2**100)  # inside [5, 6)/2^64: a second block decides
    below, prefix, width = uniform_is_below(5, 64, lambda bits: (p, p), rng)
    assert (below, prefix, width) == (True, (5 << 64) | 7, 128)
    q = Fraction((5 << 64) | 3, 2**128)  # below U; a U restarted from 5 and zeros would be below q
    assert uniform_is_below(prefix, width, lambda bits: (q, q), rng) == (False, prefix, width)
    assert rng.extra == 0  # no bits drawn for the second


# ------------------------------------------------------------------ determinism, shapes

def test_the_test_rng_gives_the_same_draws():
    centre = np.arange(-500, 500, dtype=np.int64) << 30
    a = rounded_gaussian_draws(centre, UNIT_BITS, Fraction(7, 3), FINE, InsecureDeterministicRNG(8))
    b = rounded_gaussian_draws(centre, UNIT_BITS, Fraction(7, 3), FINE, InsecureDeterministicRNG(8))
    c = rounded_gaussian_draws(centre, UNIT_BITS, Fraction(7, 3), FINE, InsecureDeterministicRNG(9))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_empty_and_shaped_inputs():
    empty = rounded_gaussian_draws(np.zeros(0, np.int64), UNIT_BITS, Fraction(1), FINE)
    assert empty.dtype == np.int64 and empty.shape == (0,)
    grid = rounded_gaussian_draws(np.zeros((3, 4), np.int32), UNIT_BITS, Fraction(1), FINE)
    assert grid.dtype == np.int64 and grid.shape == (3, 4)


def test_normal_quantile_is_close():
    p = np.concatenate([np.logspace(-19.5, -0.302, 400), [0.5]])
    expected = np.array([statistics.NormalDist().inv_cdf(float(x)) for x in p])
    np.testing.assert_allclose(normal_quantile(p), expected, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ arguments

@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"centre": [1, 2]}, TypeError, "centre"),
    ({"centre": np.array([1.0])}, TypeError, "centre"),
    ({"centre": np.array([(1 << 62) + 1], np.int64)}, ValueError, "centre"),
    ({"centre": np.array([2**64 - 1], np.uint64)}, ValueError, "centre"),
    ({"unit_bits": 32.0}, TypeError, "unit_bits"),
    ({"unit_bits": True}, TypeError, "unit_bits"),
    ({"unit_bits": -1}, ValueError, "unit_bits"),
    ({"unit_bits": 63}, ValueError, "unit_bits"),
    ({"sigma": 1.5}, TypeError, "sigma"),
    ({"sigma": Fraction(0)}, ValueError, "sigma"),
    ({"sigma": Fraction(-1)}, ValueError, "sigma"),
    ({"sigma": Fraction(1 << 23)}, ValueError, "sigma"),  # σ·2^32 above 2^54
    ({"cell": 2.0**26}, TypeError, "cell"),
    ({"cell": 0}, ValueError, "cell"),
    ({"cell": 1 << 59}, ValueError, "cell"),
    ({"cell": (1 << 30) + 1}, ValueError, "cell"),  # g > σ/4 at σ = 1
    ({"rng": np.random.default_rng(0)}, TypeError, "rng"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, name):
    arguments = {"centre": np.zeros(3, np.int64), "unit_bits": UNIT_BITS, "sigma": Fraction(1), "cell": FINE}
    arguments.update(kwargs)
    with pytest.raises(error, match=name):
        rounded_gaussian_draws(**arguments)


def test_the_widest_cell_is_accepted():
    k = rounded_gaussian_draws(np.zeros(10, np.int64), UNIT_BITS, Fraction(1), 1 << 30)
    assert k.shape == (10,)

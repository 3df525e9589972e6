"""The one home of certified exact arithmetic (dpselect.core.exact): every shared bound brackets
mpmath at high precision on the side it promises, the e^x rounding is the tightest its
denominator allows, and no other module defines its own e^x, square-root or normal-tail bound
(dpselect.core.verify keeps its own e^x bound on purpose, and shares nothing with core.exact)."""
from __future__ import annotations

import ast
import functools
import math
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.aggregation.noise import zcdp_delta
from dpselect.core import exact
from dpselect.mechanisms.tail_draws import laplace_tail_draws
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

PACKAGE = Path(exact.__file__).resolve().parents[1]


def mpf(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def dyadic(x: Fraction, bits: int) -> bool:
    return (x * 2**bits).denominator == 1


# ------------------------------------------------------------------ e^x

@given(st.fractions(min_value=-300, max_value=300, max_denominator=10**12), st.integers(0, 320))
@settings(max_examples=150, deadline=None)
def test_exp_bounds_are_e_to_the_x_rounded_down_and_up(x: Fraction, bits: int) -> None:
    """exp_bounds(x, bits) = (⌊e^x 2^bits⌋, ⌈e^x 2^bits⌉) / 2^bits: both sides hold and no
    multiple of 2^-bits lies strictly between them and e^x (e^x is irrational for x ≠ 0)."""
    low, high = exact.exp_bounds(x, bits)
    assert (low, high) == (exact.exp_lower(x, bits), exact.exp_upper(x, bits))
    assert dyadic(low, bits) and dyadic(high, bits)
    with mpmath.workprec(bits + 1200):  # e^300 < 2^433: far more bits than the gap needs
        value = mpmath.exp(mpf(x))
        assert mpf(low) <= value <= mpf(high)
        if x == 0:
            assert low == high == 1
        else:
            assert high - low == Fraction(1, 2**bits)


@pytest.mark.parametrize(("x", "bits"), [(Fraction(-29, 40), 128), (Fraction(-26, 25), 64), (Fraction(-9, 10), 192),
                                         (Fraction(-1, 3), 64), (Fraction(-41, 100), 224), (Fraction(-54, 25), 288)])
def test_exp_lower_is_the_largest_multiple_below_e_to_the_x(x: Fraction, bits: int) -> None:
    """The Taylor sums that core.exact used to round (for x < 0 through 1/e^(−x)) were one unit
    of 2^-bits short of the floor or the ceiling for about one x in fifteen (each of these):
    valid, but a second, looser family of e^x bounds beside the aggregation's."""
    with mpmath.workprec(bits + 200):
        value = mpmath.exp(mpf(x))
        assert mpf(exact.exp_lower(x, bits)) <= value < mpf(exact.exp_lower(x, bits) + Fraction(1, 2**bits))
        assert mpf(exact.exp_upper(x, bits) - Fraction(1, 2**bits)) < value <= mpf(exact.exp_upper(x, bits))


@pytest.mark.slow
@given(st.fractions(min_value=0, max_value=2**16, max_denominator=10**9), st.integers(1, 400))
@settings(max_examples=150, deadline=None)
def test_exp_neg_bounds_bracket_e_to_the_minus_y_to_a_relative_precision(y: Fraction, bits: int) -> None:
    low, high = exact.exp_neg_bounds(y, bits)
    with mpmath.workprec(2 * bits + 200):
        value = mpmath.exp(-mpf(y))
        assert mpf(low) <= value <= mpf(high)
        assert mpf(high - low) <= value * mpmath.mpf(2) ** -bits


@given(st.fractions(min_value=0, max_value=10**6, max_denominator=10**9), st.integers(1, 600))
@settings(max_examples=150, deadline=None)
def test_exp_neg_interval_brackets_e_to_the_minus_y_to_an_absolute_precision(y: Fraction, bits: int) -> None:
    low, high = exact.exp_neg_interval(y, bits)
    assert 0 <= high - low <= Fraction(1, 2**bits)
    with mpmath.workprec(bits + 200):
        value = mpmath.exp(-mpf(y))
        assert mpf(low) <= value <= mpf(high)


# ------------------------------------------------------------------ powers, roots, logarithms

@given(st.fractions(min_value=0, max_value=1, max_denominator=10**15), st.integers(0, 10**6), st.integers(64, 300))
@settings(max_examples=150, deadline=None)
def test_fixed_powers_bracket_the_exact_power(base: Fraction, exponent: int, bits: int) -> None:
    low = exact.fixed_power(base, exponent, bits, upper=False)
    high = exact.fixed_power(base, exponent, bits, upper=True)
    assert low == exact.power_lower(base, exponent, bits)
    with mpmath.workprec(bits + 200):
        value = mpf(base) ** exponent
        assert mpf(low) <= value <= mpf(high)
        # Each product's error is at most its factors' errors plus one unit (all values <= 1), and a
        # node of the squaring tree is used at most `exponent` times: at most (nodes + 1) * exponent
        # units apart, nodes <= 2 * bit_length (seen: 23 units at exponent 12).
        assert mpf(high - low) <= ((2 * exponent.bit_length() + 1) * exponent + 2) * mpmath.mpf(2) ** -bits


@given(st.fractions(min_value=0, max_value=10**12, max_denominator=10**12), st.integers(0, 300))
@settings(max_examples=200, deadline=None)
def test_sqrt_bounds_are_the_root_rounded_down_and_up(x: Fraction, bits: int) -> None:
    low, high = exact.sqrt_bounds(x, bits)
    assert dyadic(low, bits) and dyadic(high, bits)
    assert low * low <= x <= high * high
    assert high - low in (0, Fraction(1, 2**bits))
    assert (high - low == 0) == (low * low == x)
    with mpmath.workprec(bits + 200):
        assert mpf(low) <= mpmath.sqrt(mpf(x)) <= mpf(high)


@pytest.mark.parametrize("x", [Fraction(0), Fraction(4), Fraction(9, 16), Fraction(2**40)])
def test_sqrt_bounds_of_an_exact_square_are_the_root_itself(x: Fraction) -> None:
    root = Fraction(math.isqrt(x.numerator), math.isqrt(x.denominator))
    assert exact.sqrt_bounds(x, 64) == (root, root)


@given(st.fractions(min_value=Fraction(1, 10**9), max_value=Fraction(999_999, 10**6), max_denominator=10**9))
@settings(max_examples=100, deadline=None)
def test_atanh_lower_is_below_atanh(u: Fraction) -> None:
    with mpmath.workprec(400):
        value = mpmath.atanh(mpf(u))
        bound = exact.atanh_lower(u)
        assert mpf(bound) <= value
        # short of atanh by the 4000-term series' tail and the floors (a few units of 2^-256 each)
        tail = mpf(u) ** 8001 / (8001 * (1 - mpf(u) ** 2))
        assert value - mpf(bound) <= tail + mpmath.mpf(2) ** -230


# ------------------------------------------------------------------ the normal distribution

@pytest.mark.parametrize("bits", [0, 1, 64, 200, 512])
def test_inv_sqrt_2pi_bounds_bracket_the_constant(bits: int) -> None:
    low, high = exact.inv_sqrt_2pi_bounds(bits)
    with mpmath.workprec(bits + 200):
        value = 1 / mpmath.sqrt(2 * mpmath.pi)
        assert mpf(low) <= value <= mpf(high)
        assert mpf(high - low) <= mpmath.mpf(2) ** -bits


@pytest.mark.slow
@given(st.fractions(min_value=-45, max_value=45, max_denominator=10**6), st.sampled_from([64, 128, 256, 300]))
@settings(max_examples=100, deadline=None)
def test_normal_cdf_and_tail_bounds_bracket_mpmath(z: Fraction, bits: int) -> None:
    cdf_low, cdf_high = exact.normal_cdf_bounds(z, bits)
    tail_low, tail_high = exact.normal_tail_bounds(z, bits)
    assert (tail_low, tail_high) == (1 - cdf_high, 1 - cdf_low)
    assert exact.normal_tail_upper(z, bits) == tail_high
    with mpmath.workprec(bits + 1800):  # the tail at 45 is about 2^-1470
        point = mpf(z)
        cdf = mpmath.ncdf(point)
        tail = mpmath.ncdf(-point)
        assert mpf(cdf_low) <= cdf <= mpf(cdf_high)
        assert mpf(tail_low) <= tail <= mpf(tail_high)
        if abs(z) <= 40:
            assert mpf(cdf_high - cdf_low) <= mpmath.mpf(2) ** -bits


# ------------------------------------------------------------------ callers that asked too much of a series

def test_a_laplace_tail_draw_far_from_the_threshold_settles_at_once() -> None:
    """A partition 10^6 units of 1/ε above the threshold whose first 64 random bits fall in the
    (tiny) interval of the float bounds: the exact comparison needs bounds on e^(−10^6). It used
    to ask for e^(10^6) rounded to 2^-136 (a Taylor series of millions of ever longer fractions:
    no answer after minutes); an absolute interval on e^(−10^6) is immediate."""

    class FirstDrawAllOnes(InsecureDeterministicRNG):  # U's first 64 bits are 2^64 − 1, the next 0
        calls = 0

        def random_bytes(self, n: int) -> bytes:
            self.calls += 1
            return (b"\xff" if self.calls == 1 else b"\x00") * n

    distance = np.array([-(10**6 << 32)], dtype=np.int64)  # the count is far above the threshold
    rng = FirstDrawAllOnes(1)
    keep = laplace_tail_draws(distance, 32, Fraction(1), rng=rng)
    assert rng.calls == 2  # the float bounds did not decide: U was extended by 64 bits
    assert keep.tolist() == [True]  # p = 1 − e^(−10^6)/2 > U = 1 − 2^-64


def test_zcdp_delta_at_an_alpha_whose_bound_is_above_one_is_one_at_once() -> None:
    """With α = 1000 and ρ = 40 the exponent of CKS's bound is about 4·10^7: e^exponent was
    summed as a Taylor series (no answer after minutes), where e^exponent ≥ 2^⌊exponent/0.69315⌋ ≥ α − 1 already
    proves δ = 1."""
    assert zcdp_delta(40, 0, 1000) == 1
    assert zcdp_delta(Fraction(1, 10), Fraction(1, 10), 1000) == 1  # exponent ≈ 10^5
    assert zcdp_delta(Fraction(1, 10**9), Fraction(9999, 10**4), 10**9) == 1  # ≈ 10^5, beside α = 10^9


# ------------------------------------------------------------------ one home

# What a bound's name looks like: e^x, square roots, the normal distribution, atanh, powers.
_BOUND_NAME = ("exp_lower", "exp_upper", "exp_neg", "exp_bounds", "exp_fixed", "exp_units", "sqrt", "normal_cdf",
               "normal_tail", "upper_tail_upper", "tail_upper", "atanh", "power_lower", "power_bounds", "fixed_power")
# math.isqrt outside core.exact, each for an integer the kernel is handed, not a bound:
_ISQRT_ALLOWED = {
    "representable_sigma2": "the discrete Gaussian's parameter ⌊σ⌋ + 1, as the kernel computes it",
    "set_weights": "the weighted mechanisms' integer weights ⌊2^32/√m⌋, one per m up to κ",
}


@functools.lru_cache(maxsize=1)
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        out.append((relative, ast.parse(path.read_text(encoding="utf-8"), relative)))
    return tuple(out)


def _exact_names(tree: ast.Module) -> set[str]:
    """The names a module imports from dpselect.core.exact (or the module itself)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dpselect.core.exact":
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "dpselect.core" \
                and any(alias.name == "exact" for alias in node.names):
            names.add("exact")
    return names


def _calls(function: ast.AST) -> set[str]:
    called = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            target = node.func
            while isinstance(target, ast.Attribute):
                target = target.value
            if isinstance(target, ast.Name):
                called.add(target.id)
    return called


def _functions_called(function: ast.AST) -> set[str]:
    """The last name of everything called: isqrt for math.isqrt(...) and for isqrt(...)."""
    calls = [node.func for node in ast.walk(function) if isinstance(node, ast.Call)]
    return ({call.attr for call in calls if isinstance(call, ast.Attribute)}
            | {call.id for call in calls if isinstance(call, ast.Name)})


@pytest.mark.slow
def test_only_core_exact_defines_exponential_root_and_normal_tail_bounds() -> None:
    """Outside core.exact (and core.verify, by design), a function named like an e^x, square-root
    or normal-tail bound must be a front end of core.exact's (call one of its functions): a
    second implementation would be a second thing to prove."""
    offenders = []
    for name, tree in _modules():
        if name in ("dpselect/core/exact.py", "dpselect/core/verify.py"):
            continue
        exact_names = _exact_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(marker in node.name for marker in _BOUND_NAME) and not _calls(node) & exact_names:
                offenders.append(f"{name}: {node.name} (not a front end of dpselect.core.exact)")
            if node.name not in _ISQRT_ALLOWED and "isqrt" in _functions_called(node):
                offenders.append(f"{name}: {node.name} calls math.isqrt (use dpselect.core.exact.sqrt_bounds)")
    assert offenders == []


def test_the_verifier_keeps_its_own_exponential_bound() -> None:
    """core.verify re-checks the tables built with core.exact's bounds: it must not use them (nor
    any other dpselect arithmetic; only the exception base, dpselect.errors, which computes nothing)."""
    trees = dict(_modules())
    verify = trees["dpselect/core/verify.py"]
    imported = {node.module for node in ast.walk(verify) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(verify) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(module and module.startswith("dpselect") and module != "dpselect.errors" for module in imported), imported
    assert "exp_lower_by_squaring" in {node.name for node in ast.walk(verify) if isinstance(node, ast.FunctionDef)}


def test_the_old_homes_of_the_bounds_are_gone() -> None:
    assert not (PACKAGE / "aggregation" / "_expbounds.py").exists()
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.endswith("_expbounds"), name

"""Integer noise with its privacy statement (docs/privacy/discrete-noise.md).

Counts, and sums of values snapped to a grid (:mod:`dpselect.aggregation.grid`), are integers,
so they get integer noise: no floating-point value is ever added to data (Mironov, CCS 2012).
Two laws, both sampled exactly by the C kernel (csrc/discrete_noise.c; Canonne, Kamath,
Steinke, NeurIPS 2020):

* :class:`DiscreteLaplaceNoise`, P[X = x] ∝ exp(−|x|/t): (L0·Δ/t, 0)-DP for a query where one
  user changes at most L0 coordinates by at most Δ each (L1 sensitivity L0·Δ);
* :class:`DiscreteGaussianNoise`, P[X = x] ∝ exp(−x²/(2σ²)): ρ-zCDP with ρ = L0·Δ²/(2σ²)
  (squared L2 sensitivity L0·Δ²), and (ε, δ)-DP with δ from CKS's conversion, certified here
  with rational bounds.

Scales are exact rationals: what the statement is about is what the kernel samples. A scale that
does not fit the kernel's integers is refused when given explicitly, and rounded *up* (more
noise, more privacy) when derived from a budget.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral
from typing import Callable, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpselect import _noise
from dpselect._arrays import chunks, run_all
from dpselect.core.checks import (
    check_delta,
    check_epsilon,
    check_max_partitions_contributed,
    check_positive_int,
    check_positive_real,
)
from dpselect.core.exact import atanh_lower, exp_neg_bounds, exp_upper
from dpselect.core.guarantee import delta_upper_float, format_delta
from dpselect.aggregation.intervals import (
    discrete_gaussian_half_width,
    discrete_laplace_half_width,
    interval,
)
from dpselect.rng import resolve_rng

__all__ = [
    "IntegerNoise",
    "NoiseGuarantee",
    "DiscreteLaplaceNoise",
    "DiscreteGaussianNoise",
    "representable_scale",
    "representable_sigma2",
    "zcdp_delta",
    "log_zcdp_delta_estimate",
    "rho_for_epsilon_delta",
]

REFERENCE = "docs/privacy/discrete-noise.md"
_CKS = "Canonne, Kamath, Steinke, \"The Discrete Gaussian for Differential Privacy\", NeurIPS 2020"
_MAX = _noise.MAX_PARAM


# ------------------------------------------------------------------ the privacy statement

@dataclass(frozen=True)
class NoiseGuarantee:
    """What adding the noise to a query promises, in the shape of
    :class:`dpselect.core.guarantee.PrivacyGuarantee` (``epsilon``, ``delta``, ``delta_exact``,
    ``is_dp``, ``under_test_rng()``), plus the exact ε and, for the Gaussian, ρ.

    The neighbouring relation is the package's: add or remove all rows of one privacy unit, who
    changes at most ``max_partitions_contributed`` (L0) coordinates of the query by at most
    ``sensitivity`` (Δ) each. That bound is *assumed*: the caller bounds contributions first.
    ``epsilon_exact`` is None for a ρ-zCDP statement without an (ε, δ) conversion."""

    mechanism: str
    epsilon_exact: Fraction | None
    delta_exact: Fraction
    sensitivity: int
    max_partitions_contributed: int
    rho: Fraction | None = None
    reference: str = REFERENCE
    privacy_guaranteed: bool = True
    notes: str = ""

    @property
    def epsilon(self) -> float | None:
        """ε as a float rounded up (never below the exact value)."""
        return None if self.epsilon_exact is None else delta_upper_float(self.epsilon_exact)

    @property
    def delta(self) -> float:
        """δ as a float rounded up (never below the exact value)."""
        return delta_upper_float(self.delta_exact)

    @property
    def is_dp(self) -> bool:
        return self.privacy_guaranteed

    def under_test_rng(self) -> NoiseGuarantee:
        """The same statement for noise drawn by the deterministic test generator: NOT DP."""
        return dataclasses.replace(self, privacy_guaranteed=False)

    def __str__(self) -> str:
        parts = []
        if self.epsilon_exact is not None:
            parts.append(f"({self.epsilon:.6g}, {format_delta(self.delta_exact)})-differentially private")
        if self.rho is not None:
            parts.append(f"{float(self.rho):.6g}-zCDP")
        head = "" if self.privacy_guaranteed else ("NOT DP: deterministic test RNG. Were it drawn with the "
                                                  "secure generator, ")
        text = (f"{head}{self.mechanism} is {' and '.join(parts)} (computational, ChaCha20 CSPRNG) for "
                "neighbouring datasets that add or remove all rows of one privacy unit (user), each "
                f"user assumed to change at most {self.max_partitions_contributed} coordinate(s) of the "
                f"query by at most {self.sensitivity} unit(s) each (bound contributions first). "
                f"See {self.reference}.")
        return f"{text} {self.notes}".strip()


@runtime_checkable
class IntegerNoise(Protocol):
    """What the aggregation layer needs from a noise: add it, state it, give its intervals."""

    @property
    def guarantee(self) -> NoiseGuarantee: ...

    def add(self, values: npt.ArrayLike, *, out: np.ndarray | None = None, rng: object | None = None) -> np.ndarray: ...

    def sample(self, size: int, *, rng: object | None = None) -> np.ndarray: ...

    def confidence_interval(self, level: float | Fraction) -> int: ...

    def interval(self, noisy: npt.ArrayLike, level: float) -> tuple[np.ndarray, np.ndarray]: ...


# ------------------------------------------------------------------ argument checks

def _positive_int(name: str, value: object) -> int:
    return check_positive_int(value, name=name)


def _epsilon(value: object) -> Fraction:
    return check_epsilon(value, positive=True)[1]


def _delta(value: object) -> Fraction:
    return check_delta(value, positive=True)[1]


def _size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 0:
        raise ValueError(f"size must be a non-negative int, got {value!r}")
    return int(value)


def _fits(value: Fraction) -> bool:
    return value.numerator <= _MAX and value.denominator <= _MAX


# ------------------------------------------------------------------ representable parameters

def representable_scale(target: object) -> Fraction:
    """The smallest rational ≥ ``target`` that the discrete Laplace kernel takes (numerator and
    denominator below 2^63): ``target`` itself when it fits, else ⌈target·2^k⌉/2^k for the
    largest k that fits. A larger scale is more noise, so rounding up only adds privacy."""
    value = check_positive_real("scale", target)
    if _fits(value):
        return value
    if value >= _MAX:
        raise ValueError(f"scale = {float(value):.6g} is too large for the noise kernel (at most 2**63 - 1): "
                         "the noise would not fit in int64; use a coarser grid or a larger epsilon")
    for k in range(62, -1, -1):
        candidate = Fraction(math.ceil(value * 2**k), 2**k)
        if _fits(candidate):
            return candidate
    raise AssertionError("unreachable: k = 0 gives an integer below 2**63")


def representable_sigma2(target: object) -> Fraction:
    """The smallest σ² ≥ ``target`` of the form m·μ, with m = ⌊√target⌋ + 1 and μ a multiple of
    2^-k, that the discrete Gaussian kernel takes (``target`` itself when it already fits). More
    variance only adds privacy. ValueError when σ is above about 2^49 (the kernel's limit)."""
    value = check_positive_real("sigma2", target)
    try:
        _noise.gaussian_parameters(value.numerator, value.denominator)
        return value
    except ValueError:
        pass
    m = math.isqrt(value.numerator // value.denominator) + 1
    # gamma_den ≈ 2σ²·4^k must stay below 2^100.
    start = max(0, min(62, (99 - math.ceil(2 * value).bit_length()) // 2))
    for k in range(start, -1, -1):
        candidate = m * Fraction(math.ceil(value * 2**k / m), 2**k)
        try:
            _noise.gaussian_parameters(candidate.numerator, candidate.denominator)
            return candidate
        except ValueError:
            continue
    raise ValueError(f"sigma2 = {float(value):.6g} is too large for exact sampling (sigma at most about 2**49): "
                     "use a coarser grid")


# ------------------------------------------------------------------ zCDP to (ε, δ)

_ALPHA_BITS = 24  # α is rounded to a multiple of 2^-24 before it is certified


def _log_delta_float(rho: float, eps: float, alpha: float) -> float:
    """ln of CKS's bound exp((α−1)(αρ−ε)) (1 − 1/α)^α / (α − 1), in floating point."""
    return (alpha - 1) * (alpha * rho - eps) + alpha * math.log1p(-1 / alpha) - math.log(alpha - 1)


def _best_alpha(rho: float, eps: float) -> float:
    """The α > 1 minimising the bound: its derivative (2α − 1)ρ − ε + ln(1 − 1/α) increases in
    α, so bisect on its sign (as in CKS 2020, §2.3)."""
    lo, hi = 1.0 + 1e-9, max(2.0, (eps + 1.0) / (2.0 * rho) + 2.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (2 * mid - 1) * rho - eps + math.log1p(-1 / mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def log_zcdp_delta_estimate(rho: float, epsilon: float) -> float:
    """ln of CKS's δ for ρ-zCDP at ε, at the best α, in floating point: a starting point for an
    exact search (a value relied on is certified with :func:`zcdp_delta`)."""
    return _log_delta_float(rho, epsilon, _best_alpha(rho, epsilon))


@functools.lru_cache(maxsize=1024)
def _zcdp_delta(rho: Fraction, eps: Fraction, alpha: Fraction) -> Fraction:
    # ln(1 − 1/α) = −2 atanh(1/(2α − 1)) ≤ −2·(a lower bound of the atanh series)
    log_upper = -2 * atanh_lower(1 / (2 * alpha - 1))
    exponent = (alpha - 1) * (alpha * rho - eps) + alpha * log_upper
    if exponent <= 0:
        bound = exp_neg_bounds(-exponent, 128)[1]
    elif math.floor(exponent / Fraction("0.69315")) >= (alpha - 1).numerator.bit_length():
        # e^exponent ≥ 2^⌊exponent/0.69315⌋ ≥ α − 1 (0.69315 > ln 2): δ = 1, without e^exponent
        # (which would cost 1.44·exponent bits: hours for an α far from the best one)
        return Fraction(1)
    else:
        bound = exp_upper(Fraction(math.ceil(exponent * 2**160), 2**160), 128)  # short dyadic ≥ exponent
    return min(Fraction(1), bound / (alpha - 1))


def zcdp_delta(rho: object, epsilon: object, alpha: object | None = None) -> Fraction:
    """A certified rational δ such that ρ-zCDP implies (ε, δ)-DP.

    CKS 2020 (Corollary 13): δ = exp((α−1)(αρ−ε)) · (1 − 1/α)^α / (α − 1) for every α > 1. The
    α minimising it is found in floating point and rounded to a rational; the value is then an
    upper bound computed in rational arithmetic (atanh series below, exp bound above), so it is
    valid whatever α the float search returned."""
    r = check_positive_real("rho", rho)
    eps = check_epsilon(epsilon)[1]  # 0 allowed: δ for ε = 0
    if alpha is None:
        best = _best_alpha(float(r), float(eps))
        a = Fraction(max(round(best * 2**_ALPHA_BITS), 2**_ALPHA_BITS + 1), 2**_ALPHA_BITS)
    else:
        a = check_positive_real("alpha", alpha)
        if a <= 1:
            raise ValueError(f"alpha must be > 1, got {alpha!r}")
    return _zcdp_delta(r, eps, a)


@functools.lru_cache(maxsize=256)
def _rho_for(eps: Fraction, delta: Fraction) -> Fraction:
    log_target = math.log(float(delta))
    e = float(eps)

    def ok(rho: float) -> bool:  # δ(ρ) grows with ρ
        return _log_delta_float(rho, e, _best_alpha(rho, e)) <= log_target

    hi = max(1.0, e)
    while ok(hi):
        hi *= 2
    lo = hi / 2
    while not ok(lo):
        lo /= 2
        if lo < 1e-300:
            raise ValueError(f"no rho > 0 certifies delta = {float(delta):.3g} at epsilon = {float(eps):.3g}")
    for _ in range(100):  # bisection in log space: ok(lo), not ok(hi)
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    # Certify in rationals; step down until the certificate holds (it almost always does at once).
    rho = Fraction(lo).limit_denominator(2**64)
    for _ in range(200):
        if zcdp_delta(rho, eps) <= delta:
            return rho
        rho *= 1 - Fraction(1, 2**20)
    raise ValueError(f"could not certify delta = {float(delta):.3g} at epsilon = {float(eps):.3g}")


def rho_for_epsilon_delta(epsilon: object, delta: object) -> Fraction:
    """The largest ρ (found by bisection, then certified with :func:`zcdp_delta`) such that
    ρ-zCDP implies (ε, δ)-DP."""
    eps = _epsilon(epsilon)
    dlt = _delta(delta)
    return _rho_for(eps, dlt)


# ------------------------------------------------------------------ running the kernel

def _as_int64(values: npt.ArrayLike, name: str) -> np.ndarray:
    """``values`` as a C-ordered int64 array (a copy only when needed). Integers only: floats,
    booleans, objects that are not ints, and values outside int64 are refused, naming ``name``."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    if isinstance(values, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array: its mask would be ignored")
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuO":
        raise TypeError(f"{name} must be integers (counts or grid units), got dtype {arr.dtype}; "
                        "snap floats to a grid first (dpselect.aggregation.Grid)")
    if arr.dtype.kind == "O":
        flat = arr.ravel().tolist()
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in flat):
            raise TypeError(f"{name} must hold integers only")
        if flat and (min(flat) < -2**63 or max(flat) >= 2**63):
            raise OverflowError(f"{name} has values outside int64; noise cannot be added to them exactly")
        return np.array(flat, dtype=np.int64).reshape(arr.shape)
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise OverflowError(f"{name} has values above 2**63 - 1")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _add(kernel: Callable[..., np.ndarray], values: npt.ArrayLike, out: np.ndarray | None,
         rng: object | None) -> np.ndarray:
    arr = _as_int64(values, "values")
    if out is None:
        out = np.empty(arr.shape, dtype=np.int64)
    elif not isinstance(out, np.ndarray) or out.dtype != np.int64 or out.shape != arr.shape:
        raise TypeError(f"out must be an int64 array of shape {arr.shape}")
    elif not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writable")
    generator = resolve_rng(rng)
    generator.announce()
    state = generator.test_state
    # Big batches run on several cores, each thread on its own secure state (never the test
    # generator, whose single stream must stay in order).
    pieces = chunks((arr.reshape(-1), out.reshape(-1)), parallel=state is None)
    try:
        run_all(lambda v, o: kernel(v, o, state), pieces, parallel=state is None)
    except BaseException:
        out[...] = 0  # another piece may have finished: nothing noisy is left behind
        raise
    return out


# ------------------------------------------------------------------ the two noises

@dataclass(frozen=True)
class DiscreteLaplaceNoise:
    """Discrete Laplace noise of scale t: P[X = x] = (1 − q)/(1 + q) · q^|x|, q = exp(−1/t).

    Added to an integer query where one user changes at most L0 = ``max_partitions_contributed``
    coordinates by at most Δ = ``sensitivity`` each, it is ε-DP with ε = L0·Δ/t, exactly (the
    ratio of the two output probabilities is at most exp(Σ_i |f_i − f'_i| / t))."""

    scale: Fraction
    sensitivity: int = 1
    max_partitions_contributed: int = 1

    def __post_init__(self) -> None:
        scale = check_positive_real("scale", self.scale)
        if not _fits(scale):
            raise ValueError(
                f"scale = {scale} does not fit the noise kernel: its numerator and denominator must be "
                "below 2**63 (DiscreteLaplaceNoise.for_epsilon rounds the scale up to one that fits)")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "sensitivity", _positive_int("sensitivity", self.sensitivity))
        object.__setattr__(self, "max_partitions_contributed",
                           check_max_partitions_contributed(self.max_partitions_contributed))

    @classmethod
    def for_epsilon(cls, epsilon: object, *, sensitivity: int = 1,
                    max_partitions_contributed: int = 1) -> DiscreteLaplaceNoise:
        """Scale t = L0·Δ/ε, rounded up to a rational the kernel takes (so the ε of the
        statement, L0·Δ/t, is at most the ε asked for)."""
        eps = _epsilon(epsilon)
        delta1 = _positive_int("sensitivity", sensitivity) * check_max_partitions_contributed(
            max_partitions_contributed)
        return cls(representable_scale(Fraction(delta1) / eps), sensitivity, max_partitions_contributed)

    @property
    def epsilon(self) -> Fraction:
        """L0·Δ/t, exactly."""
        return Fraction(self.sensitivity * self.max_partitions_contributed) / self.scale

    @property
    def guarantee(self) -> NoiseGuarantee:
        return NoiseGuarantee(
            mechanism=f"discrete Laplace noise of scale {self.scale}",
            epsilon_exact=self.epsilon,
            delta_exact=Fraction(0),
            sensitivity=self.sensitivity,
            max_partitions_contributed=self.max_partitions_contributed,
            notes=f"Exact sampler: {_CKS}, Algorithms 1-2.",
        )

    def variance(self) -> float:
        """2q/(1 − q)², q = exp(−1/t) (for display)."""
        q = math.exp(-1 / float(self.scale))
        return 2 * q / (1 - q) ** 2

    def add(self, values: npt.ArrayLike, *, out: np.ndarray | None = None, rng: object | None = None) -> np.ndarray:
        """values + independent noise, as int64 (``out=values`` adds it in place). Raises
        OverflowError, with ``out`` zeroed, if a sum leaves int64."""
        num, den = self.scale.numerator, self.scale.denominator
        return _add(lambda v, o, s: _noise.add_discrete_laplace(v, num, den, o, s), values, out, rng)

    def sample(self, size: int, *, rng: object | None = None) -> np.ndarray:
        """``size`` independent draws."""
        return self.add(np.zeros(_size(size), dtype=np.int64), rng=rng)

    def confidence_interval(self, level: float | Fraction) -> int:
        """Half-width h: P[|X| ≤ h] ≥ level (docs/privacy/confidence-intervals.md)."""
        return int(discrete_laplace_half_width(self.scale, level))

    def interval(self, noisy: npt.ArrayLike, level: float) -> tuple[np.ndarray, np.ndarray]:
        """[noisy − h, noisy + h] for every noisy value."""
        return interval(noisy, self.confidence_interval(level))


@dataclass(frozen=True)
class DiscreteGaussianNoise:
    """Discrete Gaussian noise of variance parameter σ²: P[X = x] ∝ exp(−x²/(2σ²)).

    For a query where one user changes at most L0 coordinates by at most Δ each (squared L2
    sensitivity L0·Δ²), independent noise on every coordinate is ρ-zCDP with ρ = L0·Δ²/(2σ²)
    (CKS 2020: the Rényi divergence of two discrete Gaussians shifted by an integer d is at most
    α d²/(2σ²), and it adds up over coordinates). It is then (ε, δ)-DP for every ε, with the
    certified δ of :meth:`delta_for_epsilon`. ``epsilon`` is the ε at which the guarantee states
    (ε, δ) (set by :meth:`for_epsilon_delta`); None states ρ only."""

    sigma2: Fraction
    sensitivity: int = 1
    max_partitions_contributed: int = 1
    epsilon: Fraction | None = None

    def __post_init__(self) -> None:
        sigma2 = check_positive_real("sigma2", self.sigma2)
        if max(sigma2.numerator, sigma2.denominator) >= 2**256:
            raise ValueError(f"sigma2 = {sigma2} does not fit the noise kernel; representable_sigma2 rounds it "
                             "up to one that fits")
        _noise.gaussian_parameters(sigma2.numerator, sigma2.denominator)  # ValueError naming sigma2
        object.__setattr__(self, "sigma2", sigma2)
        object.__setattr__(self, "sensitivity", _positive_int("sensitivity", self.sensitivity))
        object.__setattr__(self, "max_partitions_contributed",
                           check_max_partitions_contributed(self.max_partitions_contributed))
        if self.epsilon is not None:
            object.__setattr__(self, "epsilon", _epsilon(self.epsilon))

    @classmethod
    def for_rho(cls, rho: object, *, sensitivity: int = 1, max_partitions_contributed: int = 1) -> DiscreteGaussianNoise:
        """σ² = L0·Δ²/(2ρ), rounded up to a value the kernel takes (so the stated ρ is at most
        the ρ asked for)."""
        r = check_positive_real("rho", rho)
        l2sq = _positive_int("sensitivity", sensitivity) ** 2 * check_max_partitions_contributed(
            max_partitions_contributed)
        return cls(representable_sigma2(Fraction(l2sq) / (2 * r)), sensitivity, max_partitions_contributed)

    @classmethod
    def for_epsilon_delta(cls, epsilon: object, delta: object, *, sensitivity: int = 1,
                          max_partitions_contributed: int = 1) -> DiscreteGaussianNoise:
        """The smallest σ² (up to the search's 2^-20 relative steps and the rounding of
        :func:`representable_sigma2`, both toward privacy) whose certified (ε, δ) conversion is
        within the target: ρ from :func:`rho_for_epsilon_delta`, then σ² = L0·Δ²/(2ρ)."""
        eps = _epsilon(epsilon)
        rho = rho_for_epsilon_delta(eps, delta)
        noise = cls.for_rho(rho, sensitivity=sensitivity, max_partitions_contributed=max_partitions_contributed)
        noise = dataclasses.replace(noise, epsilon=eps)
        if noise.delta_for_epsilon(eps) > _delta(delta):
            raise AssertionError("the certified delta exceeds the target")  # ρ only went down
        return noise

    @property
    def rho(self) -> Fraction:
        """L0·Δ²/(2σ²), exactly."""
        return Fraction(self.sensitivity ** 2 * self.max_partitions_contributed) / (2 * self.sigma2)

    def delta_for_epsilon(self, epsilon: object) -> Fraction:
        """The certified δ of the (ε, δ) statement this noise satisfies (:func:`zcdp_delta`)."""
        return zcdp_delta(self.rho, epsilon)

    @property
    def guarantee(self) -> NoiseGuarantee:
        delta = Fraction(0) if self.epsilon is None else self.delta_for_epsilon(self.epsilon)
        return NoiseGuarantee(
            mechanism=f"discrete Gaussian noise of variance parameter {self.sigma2}",
            epsilon_exact=self.epsilon,
            delta_exact=delta,
            sensitivity=self.sensitivity,
            max_partitions_contributed=self.max_partitions_contributed,
            rho=self.rho,
            notes=(f"Exact sampler: {_CKS}, Algorithm 3; (epsilon, delta) by their zCDP conversion "
                   "(Corollary 13), certified in rational arithmetic."),
        )

    def add(self, values: npt.ArrayLike, *, out: np.ndarray | None = None, rng: object | None = None) -> np.ndarray:
        """values + independent noise, as int64 (``out=values`` adds it in place). Raises
        OverflowError, with ``out`` zeroed, if a sum leaves int64."""
        num, den = self.sigma2.numerator, self.sigma2.denominator
        return _add(lambda v, o, s: _noise.add_discrete_gaussian(v, num, den, o, s), values, out, rng)

    def sample(self, size: int, *, rng: object | None = None) -> np.ndarray:
        """``size`` independent draws."""
        return self.add(np.zeros(_size(size), dtype=np.int64), rng=rng)

    def confidence_interval(self, level: float | Fraction) -> int:
        """Half-width h: P[|X| ≤ h] ≥ level (certified bound; docs/privacy/confidence-intervals.md)."""
        return int(discrete_gaussian_half_width(self.sigma2, level))

    def interval(self, noisy: npt.ArrayLike, level: float) -> tuple[np.ndarray, np.ndarray]:
        """[noisy − h, noisy + h] for every noisy value."""
        return interval(noisy, self.confidence_interval(level))

"""Gaussian thresholding as Google's libraries define it, with the analytic Gaussian mechanism
of Balle and Wang (ICML 2018, Theorem 8); docs/privacy/gaussian-threshold.md.

A partition with n users is kept iff n + Z > T, Z ~ N(0, σ²), where δ is split between the
noise (δ_n) and the threshold (δ_t): σ is the smallest standard deviation (found by Google's
bisection) for which the Gaussian mechanism with L2 sensitivity √κ is (ε, δ_n)-DP, and
T = 1 + σ Φ⁻¹(1 − δ_p), δ_p the per-partition share of δ_t. Keep probability:
π(n) = Φ((n − T)/σ).

What runs: a fixed-point table of lower bounds of π (192-bit entries, Φ bounded in integer
arithmetic by :func:`dpselect.core.exact.normal_cdf_bounds`). What is certified, with rational
bounds at construction: (1) the analytic-Gaussian δ of σ is at most δ_n; (2) the tail
P[Z > T − 1] is at most δ_p; (3) every entry is within g of π(n), so the table's decisions are
within total variation g per partition of the exact Gaussian rule's — which adds at most
(1 + e^ε) · 2^63 · g to δ over any batch (2^63 partitions at most), with g <= 2^-184: about
1e-36 at ε = 1 and 4e-15 at ε = 50, set aside from the threshold's share and included in the
certified δ. For κ = 1 the table additionally passes the four-inequality verifier
at (ε, δ) exactly, like pi_opt's.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from statistics import NormalDist

from dpselect.core.exact import exp_lower, exp_upper, normal_cdf_bounds, normal_tail_upper, sqrt_bounds
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.mechanisms.base import TabledSelection
from dpselect.core.params import PrivacyParams, composed_delta_upper, composition_delta
from dpselect.core.limits import MAX_GAUSSIAN_ENTRIES, epsilon_too_small
from dpselect.core.tables import KeepTable, read_only, to_words, pre_thresholded, verify_keep_table

__all__ = ["GaussianThresholding", "google_sigma", "agm_delta_upper", "certified_sigma", "gaussian_threshold",
           "float_threshold", "optimal_noise_share"]

BALLE_WANG = ("Balle, Wang, \"Improving the Gaussian mechanism for differential privacy: analytical "
              "calibration and optimal denoising\", ICML 2018, Theorem 8")
_LIMBS = 3
_WIDTH = 64 * _LIMBS
# Largest ε for which the total-variation term stays negligible at 192 bits.
MAX_GAUSSIAN_EPSILON = 50.0
# Entries stop once 1 − π is below 2^-(w − 8): larger counts keep the last entry.
_TAIL_GAP = Fraction(1, 2 ** (_WIDTH - 8))
_SQRT_BITS = 256
_TOO_LONG = "the Gaussian keep table would be too long: raise epsilon or lower max_partitions_contributed"


# ------------------------------------------------------------------ calibration (floats, as Google)

def _float_agm_delta(epsilon: float, l2: float, sigma: float) -> float:
    """Theorem 8 of Balle and Wang in floating point (Google's CalculateDeltaForGaussianStddev)."""
    a = l2 / (2 * sigma)
    b = epsilon * sigma / l2
    c = math.exp(epsilon) if epsilon < 709 else math.inf
    if math.isnan(b) or math.isinf(c):
        return 0.0

    def cdf(x: float) -> float:  # erfc keeps its relative precision deep in the lower tail
        return math.erfc(-x / math.sqrt(2.0)) / 2

    return cdf(a - b) - c * cdf(-a - b)


def google_sigma(epsilon: float, delta: float, l2: float, accuracy: float = 1e-3) -> float:
    """The noise σ Google's libraries use: exponential search, then bisection until the bracket
    is within ``accuracy`` relative, returning its upper end (``CalculateGaussianStddev``)."""
    lower, upper = 2.2250738585072014e-308, l2
    while _float_agm_delta(epsilon, l2, upper) > delta:
        lower, upper = upper, upper * 2
    while upper - lower > accuracy * lower:
        middle = (lower + upper) / 2
        if _float_agm_delta(epsilon, l2, middle) > delta:
            lower = middle
        else:
            upper = middle
    return upper


# ------------------------------------------------------------------ certificates (rational bounds)

def agm_delta_upper(sigma: Fraction, epsilon: Fraction, kappa: int) -> Fraction:
    """A rational upper bound on the exact δ of the Gaussian mechanism with noise σ and L2
    sensitivity √κ at ε (Balle–Wang Theorem 8): Φ(a − b) − e^ε Φ(−a − b), a = √κ/(2σ),
    b = εσ/√κ, each term bounded on the safe side."""
    s_lo, s_hi = sqrt_bounds(Fraction(kappa), _SQRT_BITS)
    a_hi = s_hi / (2 * sigma)
    b_lo, b_hi = epsilon * sigma / s_hi, epsilon * sigma / s_lo
    first = normal_cdf_bounds(a_hi - b_lo)[1]
    second = normal_cdf_bounds(-a_hi - b_hi)[0]
    return max(Fraction(0), first - exp_lower(epsilon, 256) * second)


def certified_sigma(epsilon: Fraction, delta_noise: Fraction, kappa: int, accuracy: float) -> Fraction:
    """Google's σ for L2 sensitivity √κ at (ε, δ_noise), then raised in small steps until the
    rational bound proves its analytic-Gaussian δ is at most δ_noise (float rounding in the
    bisection can leave it a hair short). ValueError when that cannot be proven."""
    sigma = Fraction(google_sigma(float(epsilon), float(delta_noise), math.sqrt(kappa), accuracy))
    for _ in range(400):
        if agm_delta_upper(sigma, epsilon, kappa) <= delta_noise:
            return sigma
        sigma *= 1 + Fraction(1, 2**16)
    raise ValueError(f"could not calibrate Gaussian noise for delta {float(delta_noise):.3g} at epsilon "
                     f"{float(epsilon):.3g}: use strategy='pi_opt'")


def predicted_threshold(epsilon: float, delta_noise: float, delta_p: float, kappa: int,
                        accuracy: float = 1e-3) -> tuple[float, float]:
    """(T, σ) in floating point, in microseconds: what the certified σ and T will be, to a few
    parts in a thousand, so that a table too long to build is refused before any exact work."""
    sigma = google_sigma(epsilon, delta_noise, math.sqrt(kappa), accuracy)
    z = -NormalDist().inv_cdf(delta_p) if delta_p > 0 else 38.0
    return 1 + sigma * z, sigma


def gaussian_threshold(sigma: Fraction, delta_p: Fraction) -> Fraction:
    """T = 1 + σ z with z a dyadic rational just above Φ⁻¹(1 − δ_p), proven: P[Z > z] <= δ_p."""
    guess = -NormalDist().inv_cdf(float(delta_p)) if float(delta_p) > 0 else 38.0
    scale = 1 << 64
    z = Fraction(math.ceil(guess * (1 + 1e-12) * scale) + 1, scale)
    while normal_tail_upper(z) > delta_p:  # the float guess was short: step up
        z += Fraction(max(1, int(abs(z) * scale) >> 30), scale)
    low = Fraction(math.floor(guess * (1 - 1e-12) * scale) - 1, scale)
    if normal_tail_upper(low) <= delta_p:
        low = z  # nothing to refine
    while z - low > Fraction(1, 1 << 52):  # bisect: z stays proven, low stays unproven
        middle = Fraction(math.floor((low + z) / 2 * scale), scale)
        if middle <= low:
            break
        if normal_tail_upper(middle) <= delta_p:
            z = middle
        else:
            low = middle
    return 1 + sigma * z


def float_threshold(epsilon: float, delta: float, kappa: int, share: float) -> float:
    """The threshold T with ``share`` of δ calibrating the noise, in floating point: where the keep
    probability reaches 1/2. An estimate to compare mechanisms by (the table that runs is
    certified); no table is built."""
    sigma = google_sigma(epsilon, share * delta, math.sqrt(kappa), 1e-9)
    d_t = (1 - share) * delta
    d_p = -math.expm1(math.log1p(-d_t) / kappa)
    return 1 + sigma * -NormalDist().inv_cdf(d_p)


def optimal_noise_share(epsilon: float, delta: float, kappa: int) -> float:
    """The share of δ given to the noise that minimises the threshold T (Desfontaines et al.,
    PoPETs 2022, Figure 4): golden-section search in floating point (a public choice; the
    result is then certified like any other split)."""

    def threshold(share: float) -> float:
        return float_threshold(epsilon, delta, kappa, share)

    lo, hi = 0.02, 0.98
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = threshold(a), threshold(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = threshold(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = threshold(b)
    return round((lo + hi) / 2, 6)


# ------------------------------------------------------------------ the table

@functools.lru_cache(maxsize=32)
def _gaussian_table(sigma: Fraction, threshold: Fraction) -> tuple[KeepTable, Fraction]:
    """Lower bounds of Φ((n − T)/σ) for n = 0 .. N − 1, and the largest gap g between an entry
    (or the saturated tail) and the exact value."""
    # The table ends once 1 − Φ((n − T)/σ) <= 2^-(w − 8), which needs (n − T)/σ > 15 (1 − Φ(15) >
    # 2^-167): refuse at once a table that cannot fit, rather than after computing millions of
    # exact entries (hours at a tiny epsilon).
    if threshold + 15 * sigma > MAX_GAUSSIAN_ENTRIES:
        raise ValueError(_TOO_LONG)
    scale = 1 << _WIDTH
    values = [0]
    gap = Fraction(0)
    n = 1
    while True:
        z = (n - threshold) / sigma
        if z < -40:  # Φ(z) < 2^-1000: the entry is 0, the gap negligible
            values.append(0)
            gap = max(gap, Fraction(1, 2**1000))
        else:
            lo, hi = normal_cdf_bounds(z, _WIDTH + 16)
            q = min(math.floor(lo * scale), scale - 1)
            values.append(max(q, values[-1]))
            gap = max(gap, hi - Fraction(values[-1], scale))
            if 1 - Fraction(values[-1], scale) <= _TAIL_GAP:
                break
        n += 1
        if n > MAX_GAUSSIAN_ENTRIES + 64:  # T + 15σ was checked: a safety net only
            raise ValueError(_TOO_LONG)
    gap = max(gap, 1 - Fraction(values[-1], scale))  # counts beyond the table keep the last entry
    words = to_words(values, _LIMBS)
    table = KeepTable(words=read_only(words), partition_epsilon=Fraction(0), partition_delta=Fraction(0),
                      tail_certain=False)
    return table, gap


class GaussianThresholding(TabledSelection):
    """Gaussian thresholding (Google's ``GaussianPartitionSelection``): keep iff n + Z > T.

    ``noise_share``: the share of δ that calibrates the noise (Google: 0.5); "optimal" picks the
    share that minimises T (Desfontaines et al., PoPETs 2022, Figure 4). ``sigma_accuracy``:
    the relative accuracy of σ's bisection (Google: 1e-3, the default, so that keep
    probabilities agree with Google's to ~1e-12; smaller values release slightly more).

    Guarantee: with at most κ partitions per user, the released key set is (ε, δ̂)-DP with
    δ̂ = δ_AGM(σ) + [1 − (1 − δ_p)^κ] + (1 + e^ε) 2^63 g ≤ δ, every term certified with rational
    bounds at construction (module docstring; docs/privacy/gaussian-threshold.md)."""

    name = "gaussian"

    def __init__(self, params: PrivacyParams, pre_threshold: int = 1, noise_share: float | str = 0.5,
                 sigma_accuracy: float = 1e-3) -> None:
        if params.epsilon_exact == 0 or params.delta_exact == 0:
            raise ValueError("Gaussian thresholding needs epsilon > 0 and delta > 0")
        if params.epsilon > MAX_GAUSSIAN_EPSILON:
            raise ValueError(f"Gaussian thresholding supports epsilon up to {MAX_GAUSSIAN_EPSILON:g}; "
                             "at larger epsilon use strategy='pi_opt'")
        if noise_share == "optimal":
            noise_share = optimal_noise_share(params.epsilon, params.delta, params.affected_partitions)
        if isinstance(noise_share, bool) or not isinstance(noise_share, (int, float)) or not 0 < noise_share < 1:
            raise ValueError(f"noise_share must be in (0, 1) or 'optimal', got {noise_share!r}")
        if not isinstance(sigma_accuracy, float) or not 1e-15 <= sigma_accuracy <= 0.1:
            raise ValueError(f"sigma_accuracy must be a float in [1e-15, 0.1], got {sigma_accuracy!r}")
        self.params = params
        self.pre_threshold = pre_threshold
        self.noise_share = float(noise_share)
        kappa = params.affected_partitions
        eps = params.epsilon_exact
        delta = params.delta_exact
        e_upper = exp_upper(eps, 64)  # e^ε <= e_upper, rationally
        # What the table's rounding may add to δ, set aside from the threshold's share.
        self._tv_reserve = (1 + e_upper) * 2**63 * Fraction(1, 2 ** (_WIDTH - 9))
        delta_noise = delta * Fraction(self.noise_share)
        delta_threshold = delta - delta_noise - self._tv_reserve
        if delta_threshold <= 0:
            raise ValueError(f"delta = {params.delta:g} is too small for Gaussian thresholding at epsilon = "
                             f"{params.epsilon:g}: use strategy='pi_opt', or raise delta")
        self.delta_p = composition_delta(delta_threshold, kappa) if params.delta_split == "composition" \
            else delta_threshold / kappa
        self._check_table_size(float(delta_noise), float(self.delta_p), sigma_accuracy)
        sigma = certified_sigma(eps, delta_noise, kappa, sigma_accuracy)
        self.sigma = sigma
        self.threshold_exact = gaussian_threshold(sigma, self.delta_p)
        table, gap = _gaussian_table(sigma, self.threshold_exact)
        self.gap = gap
        self.certified_delta = (agm_delta_upper(sigma, eps, kappa)
                                + composed_delta_upper(self.delta_p, kappa, params.delta_split)
                                + (1 + e_upper) * 2**63 * gap)
        if self.certified_delta > delta:
            raise AssertionError("Gaussian thresholding certified a delta above the budget (a bug)")
        if kappa == 1:  # the exact per-partition certificate, as for pi_opt
            verify_keep_table(table.words, eps, self.certified_delta, tail_certain=False)
            table = KeepTable(words=table.words, partition_epsilon=eps, partition_delta=self.certified_delta,
                              tail_certain=False)
        self._load(pre_thresholded(table, pre_threshold))

    def _check_table_size(self, delta_noise: float, delta_p: float, accuracy: float) -> None:
        """Refuse, from the parameters alone, a table that needs more than MAX_GAUSSIAN_ENTRIES
        exact normal-CDF bounds (one per count up to T + 15σ, ~3 ms each): at ε = 1e-30 σ is
        set by δ alone (~8e4 at δ = 1e-5) and the table would take an hour to build."""
        params = self.params
        kappa = params.affected_partitions

        def entries(epsilon: float) -> float:
            threshold, sigma = predicted_threshold(epsilon, delta_noise, delta_p, kappa, accuracy)
            return threshold + 15 * sigma

        # the float prediction is within a few parts in a thousand of the certified values
        limit = MAX_GAUSSIAN_ENTRIES * 0.99
        if entries(params.epsilon) > limit:
            threshold, sigma = predicted_threshold(params.epsilon, delta_noise, delta_p, kappa, accuracy)
            raise epsilon_too_small(
                params, self.name,
                f"a key would need about {threshold:,.0f} users to be released with probability 1/2 (noise sigma "
                f"{sigma:,.4g}), and the certified keep table would be too long: one exact normal-CDF bound per "
                f"count up to T + 15 sigma, about {threshold + 15 * sigma:,.0f}, more than {MAX_GAUSSIAN_ENTRIES:,} "
                "(about 3 ms each)",
                fits=lambda e: entries(float(e)) <= limit, advice="or use strategy='pi_opt'",
                top=Fraction(MAX_GAUSSIAN_EPSILON))

    @property
    def threshold(self) -> float:
        """T (plus τ − 1): the noisy count a partition must exceed."""
        return float(self.threshold_exact) + self.pre_threshold - 1

    @property
    def thresholds(self) -> dict[str, float]:
        return {"threshold": self.threshold, "sigma": float(self.sigma), "noise_share": self.noise_share}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        notes = f"Pre-threshold {self.pre_threshold}: partitions with fewer users are never released." \
            if self.pre_threshold > 1 else ""
        return PrivacyGuarantee(
            mechanism=f"Gaussian thresholding (noise sigma {float(self.sigma):.6g}, threshold {self.threshold:.6g})",
            epsilon=float(p.epsilon_exact),
            delta_exact=self.certified_delta,
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{BALLE_WANG}; Desfontaines et al., PoPETs 2022, §4; docs/privacy/gaussian-threshold.md",
            requested_delta=p.delta,
            certificate="with rational bounds on the analytic Gaussian delta of the noise, on the threshold's "
                        "tail and on the table's rounding",
            neighbours=p.neighbour_text,
            notes=notes,
        )

    def __repr__(self) -> str:
        tau = f", pre_threshold={self.pre_threshold}" if self.pre_threshold > 1 else ""
        return (f"GaussianThresholding({self.params!r}, sigma={float(self.sigma):.6g}, "
                f"threshold={self.threshold:.6g}{tau})")

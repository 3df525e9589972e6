"""Regression tests for the core findings of the independent audit: each fails on the code the
audit read (commit 3e98fb3) and passes now. Kernel byte use, table width, immutability, the
verifier's independence, the test RNG's gates, the guarantee's text, exact crossovers, and every
array edge (masked, unaligned, strided, timedelta, tiny dtypes, extreme parameters)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect import _kernel, _rng
from dpselect.core.guarantee import PrivacyGuarantee, format_delta
from dpselect.core.params import validate_params
from dpselect.core.tables import CertificationError, keep_table, tsgd_table
from dpselect.testing import InsecureDeterministicRNG, InsecureRNGWarning

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

mpmath.mp.dps = 60


# ------------------------------------------------------------------ tables: width and accuracy

def _pi_opt_reference(eps: Fraction, delta: Fraction, n_max: int) -> list[mpmath.mpf]:
    e, d = mpmath.mpf(eps.numerator) / eps.denominator, mpmath.mpf(delta.numerator) / delta.denominator
    pis = [mpmath.mpf(0)]
    for _ in range(n_max):
        p = pis[-1]
        pis.append(min(mpmath.exp(e) * p + d, 1 - mpmath.exp(-e) * (1 - p - d), mpmath.mpf(1)))
    return pis


@pytest.mark.parametrize("delta", [1e-10, 1e-15, 1e-19, 1e-24, 1e-30])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_keep_probabilities_equal_pi_opt_to_1e12_relative_down_to_1e30(eps, delta):
    """64-bit tables floored δ' to units of 2^-64: 5e-5 short at δ' = 1e-15, refused below 2^-64."""
    params = validate_params(eps, delta)
    table = keep_table(params)
    ref = _pi_opt_reference(params.partition_epsilon, params.partition_delta, table.length + 1)
    for n in range(1, table.length + 1):
        exact = table.exact_probability(n)
        reference = ref[n]
        assert exact <= Fraction(mpmath.nstr(reference, 55)) * (1 + Fraction(1, 10**40))  # never above
        if reference < 1:
            assert abs(float(exact) - float(reference)) <= 1e-12 * float(reference)


def test_table_words_are_immutable_and_the_kernel_keeps_its_own_copy():
    table = keep_table(validate_params(1.0, 1e-5))
    with pytest.raises(ValueError):
        table.words.setflags(write=True)  # backed by immutable bytes
    with pytest.raises(ValueError):
        table.words[1] = 2**63
    with pytest.raises(ValueError):
        tsgd_table(validate_params(1.0, 1e-5)).cumulative.setflags(write=True)
    # a handle built from a writable array is not affected by later writes to that array
    words = np.array(table.words)
    handle = _kernel.KeepTableHandle(words)
    counts = np.full(20000, 1, np.int64)  # keep probability 1e-5
    words[1:] = np.uint64(2**64 - 1)  # would keep everything if the kernel still read it
    out = np.zeros(counts.size, bool)
    _kernel.select_into(counts, handle, out, InsecureDeterministicRNG(3)._test_state)
    assert out.sum() <= 3


def test_the_verifier_catches_a_builder_with_a_wrong_exponential(monkeypatch):
    """A deliberately broken builder (its bound on e^ε is e^{2ε}) yields a table that is not DP;
    the verifier has its own bound, so it must refuse the table (with a shared bound it would not)."""
    import dpselect.core.exact
    import dpselect.core.tables as tables

    real = dpselect.core.exact.exp_lower
    monkeypatch.setattr(tables, "exp_lower", lambda x, bits=128: real(2 * x, bits))
    tables._keep_table_cached.cache_clear()
    tables._tsgd_cached.cache_clear()
    try:
        with pytest.raises(CertificationError):
            keep_table(validate_params(0.7771, 1e-5))
        with pytest.raises(CertificationError):
            tsgd_table(validate_params(0.7771, 1e-5))
    finally:
        tables._keep_table_cached.cache_clear()
        tables._tsgd_cached.cache_clear()


# ------------------------------------------------------------------ strategies and guarantees

class _HomeMadeStrategy:
    """A user-written strategy that claims to be certified."""

    name = "home made"
    releases_counts = False
    count_cap = None
    max_partitions_contributed = 1

    def __init__(self) -> None:
        self.params = validate_params(1.0, 1e-5)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee("home made (trust me)", 1.0, Fraction(1, 10**5), 1, "my blog")

    def apply(self, counts, *, rng=None):
        keep = np.asarray(counts) > 10
        return dpselect.SelectionResult(keep, None, self.guarantee, True)


def test_a_strategy_dpselect_did_not_build_is_never_called_certified():
    strategy = dpselect.make_strategy(_HomeMadeStrategy())
    assert not strategy.guarantee.certified
    text = str(strategy.guarantee)
    assert "USER-SUPPLIED, NOT CERTIFIED BY DPSELECT" in text and "Certified in exact" not in text
    result = strategy.apply(np.array([5, 50]))
    assert not result.guarantee.certified and "NOT CERTIFIED" in str(result.guarantee)
    assert "not certified" in repr(result)
    assert dpselect.make_strategy(strategy) is strategy
    built = dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5)
    assert built.guarantee.certified and "certified in exact rational arithmetic" in str(built.guarantee)


def test_results_made_with_the_test_rng_say_not_dp():
    for name in ("pi_opt", "release"):
        result = dpselect.make_strategy(name, epsilon=1, delta=1e-5).apply([3, 40], rng=InsecureDeterministicRNG(1))
        assert not result.privacy_guaranteed and not result.guarantee.privacy_guaranteed
        assert str(result.guarantee).startswith("NOT DP: deterministic test RNG")
        assert "NOT DP" in repr(result) and "NOT DP" in repr(result.guarantee)
        secure = dpselect.make_strategy(name, epsilon=1, delta=1e-5).apply([3, 40])
        assert "NOT DP" not in str(secure.guarantee)


def _assert_printed_delta_is_tight_above(value: Fraction, digits: int) -> None:
    printed = Fraction(format_delta(value, digits))
    assert value <= printed <= value * (1 + Fraction(1, 10 ** (digits - 1))), (value, digits, printed)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**300), max_value=Fraction(1)), st.integers(1, 8))
def test_printed_delta_is_never_below_the_exact_value(value, digits):
    _assert_printed_delta_is_tight_above(value, digits)


@pytest.mark.parametrize("digits", [1, 2, 4, 8])
def test_printed_delta_at_powers_of_ten_and_just_around_them(digits):
    """Where rounding up is delicate: exact powers of ten (log10 of the float exact), a hair below
    (the mantissa rounds up to 10^digits and carries into the exponent) and a hair above (log10
    of the float may land on the power below), from 1 down to 10^-300, and mantissas of all
    nines."""
    hair = Fraction(1, 10**40)
    for exponent in (0, -1, -5, -17, -100, -299, -300):
        power = Fraction(10) ** exponent
        values = [power, power * (1 + hair), power * Fraction(999_999_999, 10**9), power * 9 * (1 + hair) / 10]
        if exponent < 0:
            values.append(power * (1 - hair))
        for value in values:
            if Fraction(1, 10**300) <= value <= 1:
                _assert_printed_delta_is_tight_above(value, digits)


def test_guarantee_delta_is_rounded_up_and_kappa_is_described_as_assumed():
    strategy = dpselect.make_strategy("release", epsilon=1, delta=1e-5, max_partitions_contributed=3)
    g = strategy.guarantee
    assert Fraction(g.delta) >= g.delta_exact and g.delta_exact <= Fraction(1, 10**5)
    text = str(g)
    printed = text.split("(1, ")[1].split(")")[0]
    assert Fraction(printed) >= g.delta_exact
    assert "assumed to contribute to at most 3" in text and "requested delta was 1e-05" in text
    assert "enforced" not in text and "bounded by dpselect" in str(g.enforced())
    for stale in ("spec ", "seed 00", ".md §", "issue "):
        assert stale not in text


def test_reprs_are_readable():
    assert "table_length=23" in repr(dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5))
    assert "release_threshold=11" in repr(dpselect.make_strategy("release", epsilon=1, delta=1e-5))
    assert "delta=0" in repr(dpselect.make_strategy("pi_opt", epsilon=1, delta=0, allow_no_release=True))
    assert "KeepTable(N=23, bits=128" in repr(keep_table(validate_params(1.0, 1e-5)))
    assert "TSGDTable(k=11" in repr(tsgd_table(validate_params(1.0, 1e-5)))
    assert "max_partitions_contributed=2" in repr(validate_params(1.0, 1e-5, 2))


# ------------------------------------------------------------------ the test RNG's gates

def test_the_private_test_state_is_gated_too(monkeypatch):
    monkeypatch.delenv("DPSELECT_ALLOW_INSECURE_RNG", raising=False)
    with pytest.raises(RuntimeError, match="DPSELECT_ALLOW_INSECURE_RNG"):
        _rng.TestState(b"\0" * 32, 0, _rng.ACK_INSECURE)
    with pytest.raises(RuntimeError, match="DPSELECT_ALLOW_INSECURE_RNG"):
        InsecureDeterministicRNG(1)


def test_the_test_rng_warns_on_every_use_even_from_one_line():
    rng = InsecureDeterministicRNG(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own default: once per location and text
        for _ in range(5):
            dpselect.select([1, 2, 3], 1.0, 1e-5, rng=rng)
    assert sum(issubclass(w.category, InsecureRNGWarning) for w in caught) == 5


# ------------------------------------------------------------------ parameters

@pytest.mark.parametrize("kappa", [3, 10**4, 10**5, 10**6])
@pytest.mark.parametrize("delta", [1e-10, 0.5, 0.999999, 1 - 2**-52])
def test_validate_params_is_exact_and_instant_for_any_delta_and_kappa(delta, kappa):
    """Both used exact powers of fractions with 2^80 denominators: minutes for these κ."""
    params = validate_params(1.0, delta, kappa)
    assert 0 < params.partition_delta and params.compose(params.partition_delta) <= params.delta_exact
    conservative = validate_params(1.0, delta, kappa, "conservative")
    assert conservative.partition_delta <= params.partition_delta  # the split is the larger one


def test_huge_kappa_is_a_clear_error_not_delta_zero():
    params = validate_params(1.0, 1e-5, 10**30)
    assert params.partition_delta > 0  # was rounded to 0 ("delta = 0" error) before
    for kappa in (10**9, 10**30):
        with pytest.raises(ValueError, match="max_partitions_contributed"):
            dpselect.select([5], 1.0, 1e-5, max_partitions_contributed=kappa)


@pytest.mark.parametrize("epsilon,delta,name", [
    (2**2000, 1e-5, "epsilon"), (float("inf"), 1e-5, "epsilon"), (1.0, 5e-324, "delta"),
    (1.0, 1e-45, "delta"), (-1e-300, 1e-5, "epsilon"), (1.0, float("nan"), "delta"),
])
def test_extreme_parameters_are_value_errors_naming_the_parameter(epsilon, delta, name):
    with pytest.raises(ValueError, match=name):
        dpselect.select([5], epsilon, delta)


def test_tiny_and_subnormal_epsilon_work_like_epsilon_zero():
    for eps in (1e-30, 5e-324):
        probabilities = dpselect.keep_probability(np.arange(1, 50), eps, 0.02)
        np.testing.assert_allclose(probabilities, np.minimum(1, np.arange(1, 50) * 0.02), rtol=1e-9)


def test_release_refuses_deltas_its_noise_cannot_certify_with_advice():
    with pytest.raises(ValueError, match="strategy='pi_opt'"):
        dpselect.release([5], 1.0, 1e-25)
    assert dpselect.select([10**6], 1.0, 1e-25).all()


def test_huge_sizes_for_the_rng_are_value_errors():
    rng = dpselect.SecureRNG()
    with pytest.raises(ValueError, match="size"):
        rng.uniform_below_array(10, 2**62)
    with pytest.raises(ValueError, match="n must"):
        rng.random_bytes(2**62)


def test_out_is_validated_with_delta_zero_too():
    with pytest.raises(ValueError, match="shape"):
        dpselect.select([1, 2], 1.0, 0.0, allow_no_release=True, out=np.zeros(3, bool))
    with pytest.raises(TypeError, match="tuple"):
        dpselect.release([1, 2], 1.0, 0.0, allow_no_release=True, out=np.zeros(2, bool))


# ------------------------------------------------------------------ exact crossovers

@pytest.mark.parametrize("epsilon,delta,n1,n2", [
    (math.log(2), 0.1, 3, 5),    # float n1 = 2: the log term is an integer in the reals
    (math.log(3), 0.2, 1, 2),    # the log term is 1 − 4.9e-17: float n2 = 3, where pi is already 1
    (1e-20, 0.02, 25, 49),       # float n1 = 1
    (1.0, 1e-5, 11, 22), (0.1, 1e-10, 201, 401), (0.5, 0.02, 6, 11),
])
def test_crossovers_are_exact(epsilon, delta, n1, n2):
    c = dpselect.crossovers(epsilon, delta)
    assert (c.n1, c.n2) == (n1, n2)
    assert c.table_length == n2 + 1
    params = validate_params(epsilon, delta)
    table = keep_table(params)
    assert table.exact_probability(n2) < 1 == table.exact_probability(n2 + 1)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-8, 1e-5, 0.01, 0.3])
def test_table_length_is_n2_plus_one_on_a_grid(eps, delta):
    c = dpselect.crossovers(eps, delta)
    assert c.table_length == c.n2 + 1 and c.n1 <= c.n2 and c.k >= c.n1


# ------------------------------------------------------------------ arrays

def test_masked_arrays_are_refused_not_unmasked():
    masked = np.ma.array([5, 1000, 0], mask=[0, 1, 0])
    for call in (lambda: dpselect.select(masked, 1.0, 1e-5), lambda: dpselect.release(masked, 1.0, 1e-5),
                 lambda: dpselect.keep_probability(masked, 1.0, 1e-5)):
        with pytest.raises(TypeError, match="masked"):
            call()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_keep_probability_of_small_integer_dtypes(dtype):
    n = np.arange(0, 100, dtype=dtype)
    np.testing.assert_array_equal(dpselect.keep_probability(n, 1.0, 1e-5),
                                  dpselect.keep_probability(n.astype(np.int64), 1.0, 1e-5))


def test_timedelta_counts_are_refused_everywhere():
    durations = np.array([1, 2, 3], dtype="m8[s]")
    for call in (lambda: dpselect.select(durations, 1.0, 1e-5), lambda: dpselect.release(durations, 1.0, 1e-5),
                 lambda: dpselect.keep_probability(durations, 1.0, 1e-5)):
        with pytest.raises(TypeError, match="time"):
            call()


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint64])
def test_unaligned_counts_give_the_aligned_decisions(dtype):
    counts = np.arange(300, dtype=dtype) % 40
    raw = bytearray(b"\0") + bytearray(counts.tobytes())
    unaligned = np.frombuffer(raw, dtype=dtype, offset=1)
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(dpselect.select(unaligned, 1.0, 1e-5, rng=InsecureDeterministicRNG(5)),
                                  dpselect.select(counts, 1.0, 1e-5, rng=InsecureDeterministicRNG(5)))
    for got, want in zip(dpselect.release(unaligned, 1.0, 1e-5, rng=InsecureDeterministicRNG(5)),
                         dpselect.release(counts, 1.0, 1e-5, rng=InsecureDeterministicRNG(5))):
        np.testing.assert_array_equal(got, want)


def test_a_sliced_column_is_one_strided_batch():
    """np.zeros((10**6, 2))[:, :1] ran one kernel call per row (76 s); now one strided batch."""
    column = np.zeros((10**6, 2), np.int64)[:, :1]
    column[::1000] = 100
    keep = dpselect.select(column, 1.0, 1e-5, rng=InsecureDeterministicRNG(6))
    np.testing.assert_array_equal(keep, dpselect.select(np.ascontiguousarray(column), 1.0, 1e-5,
                                                        rng=InsecureDeterministicRNG(6)))
    assert keep.sum() == 1000
    out = np.zeros((10**6, 2), bool)[:, 1:]  # an out= with no single-stride view is filled too
    dpselect.select(column, 1.0, 1e-5, out=out)
    assert out.sum() == 1000


def test_negative_count_in_a_copied_layout_names_its_index():
    grid = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    grid[2, 1] = -7
    with pytest.raises(ValueError, match=r"counts\[2, 1\] = -7"):
        dpselect.select(grid, 1.0, 1e-5)


# ------------------------------------------------------------------ process-level faults

def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_select_from_an_atexit_handler_runs_on_the_calling_thread():
    done = _run("""
        import atexit
        import numpy as np
        import dpselect
        counts = np.full(2**20, 100, np.int64)
        dpselect.select(counts, 1.0, 1e-5)  # the worker pool exists
        atexit.register(lambda: print("kept", int(dpselect.select(counts, 1.0, 1e-5).sum()),
                                      int(dpselect.release(counts, 1.0, 1e-5).keep.sum())))
    """)
    assert done.returncode == 0, done.stderr
    assert "kept 1048576" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None,
                    reason="needs Linux and a C compiler to interpose syscall()")
def test_getrandom_returning_zero_bytes_is_an_error_not_a_hang(tmp_path):
    source = tmp_path / "zero_getrandom.c"
    source.write_text(textwrap.dedent("""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <stdarg.h>
        #include <sys/syscall.h>
        long syscall(long number, ...) {
            va_list ap; va_start(ap, number);
            long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
            va_end(ap);
            if (number == SYS_getrandom) return 0;   /* "success", zero bytes */
            long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
            return real(number, a, b, c);
        }
    """))
    library = tmp_path / "libzero.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"], check=True)
    # Libraries already preloaded (the sanitizer runtimes under tools/sanitize.sh) stay first.
    preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD", ""), str(library)]))
    done = _run("import dpselect; dpselect.select([5], 1.0, 1e-5)", env={"LD_PRELOAD": preload})
    assert done.returncode != 0
    assert "random number generator failed" in done.stderr

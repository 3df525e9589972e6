"""Fuzz target: the selection kernels (dpselect.select, dpselect.release, keep_probability).

Random count arrays (int64 mostly; other integer dtypes, negative and huge values, 2-D and
strided views, empty) with random (ε, δ, κ), inside and outside the valid range, and a random
strategy. Properties: a bad argument raises ValueError or TypeError only (nothing else, no
crash); otherwise select returns a bool array of the counts' shape, release a bool keep mask
and int64 noisy counts of that shape (0 where not kept, above the pre-threshold where kept), and
keep_probability values in [0, 1]. For parameters well inside the valid range (pi_opt and
release, 1e-3 <= ε <= 20, 1e-12 <= δ <= 0.5, κ <= 1000 with ε / κ >= 1e-4, counts >= 0) no
exception is allowed. Smaller per-partition budgets are refused from the parameters alone, by
design: a key would need millions of users, and the certified table as many entries.

Gaussian thresholding and "auto" build an exactly certified table whose cost grows with the
noise scale σ (seconds at ε/√κ ≈ 0.01), and the weighted mechanisms certify a threshold for
every set size up to κ (about 10 ms each): they are fuzzed at ε >= 0.5 and κ <= 3, and κ <= 10
or beyond the limit, only, to keep the throughput up."""
from __future__ import annotations

import math
import warnings

import _harness  # noqa: F401  (sys.path, environment)
import atheris

with atheris.instrument_imports(include=["dpselect"]):
    import dpselect

import numpy as np

EPSILONS = [0.0, -0.0, 5e-324, 1e-300, 1e-9, 1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 20.0, 50.0, 51.0, 1e3, 1e6,
            1e300, math.inf, -math.inf, math.nan, -1.0, True, None, "1", 1, 3]
DELTAS = [0.0, 5e-324, 1e-300, 1e-100, 1e-30, 1e-12, 1e-9, 1e-5, 1e-3, 0.1, 0.5, 0.9, 1 - 1e-16, 1.0, 1.5,
          math.inf, math.nan, -1e-5, None, False, "1e-5", 1]
KAPPAS = [1, 2, 3, 10, 100, 1000, 10 ** 6, 2 ** 31, 2 ** 32, 2 ** 63, 2 ** 64, 0, -1, True, 1.0, 1.5, None, "2",
          np.int64(4), np.uint8(2)]
STRATEGIES = ["pi_opt", "pi_opt", "laplace", "release", "release", "gaussian", "auto", "public", "bogus", "",
              "weighted_gaussian"]
DTYPES = [np.int64, np.int64, np.int64, np.int32, np.int8, np.uint8, np.uint16, np.uint32, np.uint64, np.int16,
          np.dtype(">i8"), np.float64, np.bool_, object]
SPECIAL_COUNTS = [0, 1, 2, 10, 11, 12, 100, 1000, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 62, 2 ** 63 - 1, -1,
                  -(2 ** 63)]


def pick(fdp: atheris.FuzzedDataProvider, options: list) -> object:
    return options[fdp.ConsumeIntInRange(0, len(options) - 1)]


def number(fdp: atheris.FuzzedDataProvider, options: list) -> object:
    return fdp.ConsumeRegularFloat() if fdp.ConsumeIntInRange(0, 7) == 0 else pick(fdp, options)


def counts_array(fdp: atheris.FuzzedDataProvider) -> np.ndarray:
    n = fdp.ConsumeIntInRange(0, 64)
    values = [pick(fdp, SPECIAL_COUNTS) if fdp.ConsumeIntInRange(0, 5) == 0 else fdp.ConsumeIntInRange(0, 40)
              for _ in range(n)]
    dtype = pick(fdp, DTYPES)
    if dtype is object:
        arr = np.array(values, dtype=object)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.array([v for v in values], dtype=np.int64 if np.dtype(dtype).kind in "iu" else dtype) \
                if dtype is not np.bool_ else np.array(values, dtype=np.int64) > 5
            if np.dtype(dtype).kind in "iu" and arr.dtype != dtype:
                arr = arr.astype(dtype)  # wraps: huge counts become other counts, still integers
    shape = fdp.ConsumeIntInRange(0, 3)
    if shape == 1 and arr.size >= 2:
        arr = arr[:: 1 + fdp.ConsumeIntInRange(0, 2)]  # strided
    elif shape == 2 and arr.size % 2 == 0 and arr.size:
        arr = arr.reshape(2, -1)
        if fdp.ConsumeBool():
            arr = arr.T  # Fortran order
    elif shape == 3 and arr.size:
        arr = arr[::-1]  # negative stride
    return arr


def well_inside(strategy: str, eps: object, delta: object, kappa: object, counts: np.ndarray) -> bool:
    """Parameters for which nothing may go wrong."""
    return (strategy in ("pi_opt", "release") and type(eps) is float and 1e-3 <= eps <= 20
            and type(delta) is float and 1e-12 <= delta <= 0.5 and type(kappa) is int and 1 <= kappa <= 1000
            and eps / kappa >= 1e-4
            and counts.dtype.kind in "iu" and counts.dtype.isnative and bool(np.all(counts >= 0)))


@atheris.instrument_func  # the target's own branches guide the search too (the C kernel is not instrumented)
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    counts = counts_array(fdp)
    eps, delta, kappa = number(fdp, EPSILONS), number(fdp, DELTAS), pick(fdp, KAPPAS)
    strategy = pick(fdp, STRATEGIES)
    if strategy in ("gaussian", "auto") and not (isinstance(eps, float) and eps >= 0.5 and kappa in (1, 2, 3)):
        strategy = "pi_opt"  # see the module docstring
    if strategy == "weighted_gaussian" and kappa in (100, 1000, 10 ** 6):
        strategy = "pi_opt"  # certified for every set size up to κ: seconds per 1000
    call = fdp.ConsumeIntInRange(0, 2)
    pre = 1 if fdp.ConsumeIntInRange(0, 3) else pick(fdp, [0, 2, 5, 2 ** 40])
    snapshot = counts.copy()
    try:
        if call == 0:
            if strategy == "release":
                result = dpselect.release(counts, eps, delta, max_partitions_contributed=kappa, pre_threshold=pre)
                keep, noisy = result
                assert keep.dtype == np.bool_ and keep.shape == counts.shape, (keep.dtype, keep.shape)
                assert noisy.dtype == np.int64 and noisy.shape == counts.shape, (noisy.dtype, noisy.shape)
                assert np.all(noisy[~keep] == 0), "a partition not kept has a noisy count"
                assert np.all(noisy[keep] > 0), "a kept partition has a noisy count <= 0"
                if pre > 1 and counts.dtype.kind in "iu" and counts.size:
                    assert not np.any(keep & (counts.astype(object) < pre)), "kept below the pre-threshold"
            else:
                options = {"pre_threshold": pre} if pre != 1 else {}
                keep = dpselect.select(counts, eps, delta, strategy=strategy, max_partitions_contributed=kappa,
                                       **options)
                assert keep.dtype == np.bool_ and keep.shape == counts.shape, (keep.dtype, keep.shape)
                if pre > 1 and counts.dtype.kind in "iu" and counts.size:
                    assert not np.any(keep & (counts.astype(object) < pre)), "kept below the pre-threshold"
        elif call == 1:
            p = dpselect.keep_probability(counts, eps, delta, strategy=strategy, max_partitions_contributed=kappa)
            p = np.asarray(p)
            assert p.shape == counts.shape, (p.shape, counts.shape)
            assert np.all((p >= 0) & (p <= 1)), "a keep probability outside [0, 1]"
            if p.size and counts.dtype.kind in "iu" and strategy == "pi_opt":
                order = np.argsort(counts.reshape(-1), kind="stable")
                assert np.all(np.diff(p.reshape(-1)[order]) >= 0), "keep probability not monotone in n"
        else:
            out = np.empty(counts.shape, dtype=np.bool_)
            keep = dpselect.select(counts, eps, delta, max_partitions_contributed=kappa, out=out)
            assert keep is out
    except (ValueError, TypeError) as exc:
        if well_inside(strategy, eps, delta, kappa, counts) and call != 2 and pre == 1:
            raise AssertionError(f"valid parameters refused: {strategy} {eps!r} {delta!r} {kappa!r}") from exc
    assert np.array_equal(counts, snapshot) or counts.dtype == object, "the counts were modified"


if __name__ == "__main__":
    _harness.main(TestOneInput)

"""Laws of ``dpselect.aggregate`` over generated calls (hypothesis), as the hostile test campaign
checked them: whether a release succeeds depends on the parameters only, never on the data; a
refusal is a ValueError or TypeError raised before the budget is charged; a release has exactly
the planned columns, each once, in dpselect's own types, with finite values inside their
intervals."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation.plan import plan_aggregate
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

def _mostly(common: list, rare: list) -> st.SearchStrategy:
    """Common values nine times in ten: most generated calls are releases, a few probe the edges."""
    return st.one_of(*([st.sampled_from(common)] * 9), st.sampled_from(rare))


NAMES = _mostly(["a", "b", "c"], ["a_ci_low", "b_ci_high", "k", "u", "x", "y"])
BOUND = st.one_of(st.floats(-1e6, 1e6), st.integers(-(2**40), 2**40), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=True, allow_infinity=True),
                  st.sampled_from([0, 1, -1, 1e300, -1e300, 2**62, 2.0**-1000]))
BOUNDS = st.one_of(st.none(), st.tuples(st.floats(-1e6, 0), st.floats(0, 1e6)), st.tuples(BOUND, BOUND))
METRIC = st.one_of(
    st.just(("count_distinct_units",)), st.just(("count",)),
    st.tuples(st.sampled_from(["sum", "mean"]), _mostly(["x", "y"], ["u", "k", "missing"]), BOUNDS),
)
PARAMS = st.fixed_dictionaries({
    "metrics": st.dictionaries(NAMES, METRIC, min_size=1, max_size=3),
    "epsilon": st.one_of(*([st.floats(0.05, 1e3)] * 4), st.floats(1e-30, 1e3),
                         st.sampled_from([1e-320, 10**400, 0.0, -1.0])),
    "delta": _mostly([1e-6, 1e-3], [0.0, 0.5]),
    "max_partitions_contributed": _mostly([1, 2, 3, 4], [0, 2**31, 2**64]),
    "max_contributions_per_partition": _mostly([1, 2, 3, 4], [0, 2**31, 2**40]),
    "confidence_level": st.sampled_from([None, 0.9]),
    "precision_bits": st.sampled_from([1, 30, 30, 52]),
    "public": st.booleans(),
})


def _metric(spec: tuple) -> dpselect.Metric:
    if spec[0] in ("count_distinct_units", "count"):
        return getattr(dpselect, spec[0])()
    return getattr(dpselect, spec[0])(spec[1], bounds=spec[2])


def _data(seed: int) -> pd.DataFrame:
    gen = np.random.default_rng(seed)  # input data for the test, not noise
    n = int(gen.integers(1, 400))
    return pd.DataFrame({"u": gen.integers(0, 50, n), "k": gen.choice(["p", "q", "r"], n),
                         "x": gen.normal(0, 10.0 ** float(gen.integers(0, 12)), n),
                         "y": gen.integers(-(2**62), 2**62, n, dtype=np.int64)})


def _call(params: dict, data: pd.DataFrame, budget: dpselect.Budget) -> object:
    try:
        metrics = {name: _metric(spec) for name, spec in params["metrics"].items()}
    except (TypeError, ValueError) as exc:
        return ("metric", type(exc).__name__)
    kwargs = {k: v for k, v in params.items() if k not in ("metrics", "public")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return dpselect.aggregate(data, privacy_unit="u", by="k", metrics=metrics, budget=budget,
                                      public_partitions=["p", "q"] if params["public"] else None,
                                      rng=InsecureDeterministicRNG(seed=1), **kwargs)
        except (TypeError, ValueError) as exc:
            return ("refused", type(exc).__name__, str(exc))


@pytest.mark.slow
@given(params=PARAMS, seeds=st.tuples(st.integers(0, 2**16), st.integers(0, 2**16)))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_success_depends_on_the_parameters_only_and_a_release_is_well_formed(params, seeds):
    outcomes = []
    for seed in seeds:
        budget = dpselect.Budget(10**6, 0.9)
        outcome = _call(params, _data(seed), budget)
        if isinstance(outcome, tuple):
            assert budget.spent == (0, 0), "a refused release charged the budget"
            outcomes.append(outcome)
            continue
        outcomes.append("released")
        frame = outcome.frame  # type: ignore[attr-defined]
        plan = plan_aggregate(privacy_unit="u", by="k", metrics={n: _metric(s) for n, s in params["metrics"].items()},
                              epsilon=params["epsilon"], delta=params["delta"],
                              max_partitions_contributed=params["max_partitions_contributed"],
                              max_contributions_per_partition=params["max_contributions_per_partition"],
                              public=params["public"], confidence_level=params["confidence_level"],
                              precision_bits=params["precision_bits"])
        assert list(frame.columns) == plan.output_columns
        assert len(set(frame.columns)) == len(frame.columns)
        for name, metric in plan.metrics.items():
            values = frame[name].to_numpy(dtype=float)
            assert np.isfinite(values).all() or metric.kind in ("sum", "mean"), name
            assert not np.isinf(values).any(), name
            if metric.kind in ("count", "count_distinct_units"):
                assert frame[name].dtype == np.int64
            if params["confidence_level"] is not None:
                low = frame[f"{name}_ci_low"].to_numpy(dtype=float)
                high = frame[f"{name}_ci_high"].to_numpy(dtype=float)
                ok = ~np.isnan(values)
                assert (low[ok] <= values[ok]).all() and (values[ok] <= high[ok]).all(), name
                assert np.isfinite(low[ok]).all() and np.isfinite(high[ok]).all(), name
            if metric.kind == "mean" and metric.bounds is not None:
                lo, hi = metric.bounds
                ok = ~np.isnan(values)
                assert (values[ok] >= float(lo)).all() and (values[ok] <= float(hi)).all(), name
    # Two different datasets, same parameters: both released, or both refused the same way.
    assert outcomes[0] == outcomes[1], outcomes

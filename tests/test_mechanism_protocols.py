"""Every mechanism implements one of two interfaces (a count or a row mechanism), and every front
end that accepts a mechanism's name accepts the object make_strategy builds for it: the object and
the name give the same release under the same deterministic test generator. One plan
(``plan_selection``) checks a selection's parameters for the Python API, the CLI and Spark."""
from __future__ import annotations

import os
import pickle
import re
import shutil
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpselect
from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES
from dpselect.testing import InsecureDeterministicRNG

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

PARAMS = dict(epsilon=1.0, delta=1e-5, max_partitions_contributed=2)
# Options valid for each mechanism of the registry (most take none).
OPTIONS: dict[str, dict[str, object]] = {"laplace": {"pre_threshold": 2}, "mixed": {"public_threshold": 0},
                                         "dp_sips": {"rounds": 2}, "policy_laplace": {"alpha": 2.0}}
EVERY = [*STRATEGIES, *ROW_STRATEGIES]
PUBLIC = ["a", "z"]  # "z" is absent from the data
# The count-based selections aggregate takes (dpselect.aggregation.plan.SELECTION_STRATEGIES).
AGGREGATE_SELECTIONS = ["pi_opt", "release", "laplace", "gaussian"]
SPARK_SELECTIONS = ["release", "pi_opt", "laplace", "gaussian", "public", "mixed"]


def _rows() -> tuple[np.ndarray, np.ndarray]:
    """Keys a (300 users), b (40), c (3); the users of b and c also have rows in a, and some
    rows twice (distinct counting must see one user)."""
    users = [*range(300), *range(40), *range(3), *range(10)]
    keys = ["a"] * 300 + ["b"] * 40 + ["c"] * 3 + ["a"] * 10
    return np.array(users, dtype=np.int64), np.array(keys, dtype=object)


def _arrow() -> pa.Table:
    users, keys = _rows()
    return pa.table({"u": pa.array(users, pa.int64()), "k": pa.array(list(keys), pa.string())})


def _pandas() -> pd.DataFrame:
    users, keys = _rows()
    return pd.DataFrame({"u": users, "k": list(keys)})


def _built(name: str) -> object:
    return dpselect.make_strategy(name, **PARAMS, **OPTIONS.get(name, {}))


def _public(name: str) -> dict[str, object]:
    return {"public_partitions": PUBLIC} if name in ("public", "mixed") else {}


def _same(a: object, b: object) -> None:
    """Two releases (Arrow tables or pandas frames) with the same rows, columns and statement."""
    if isinstance(a, pa.Table):
        assert a.equals(b) and a.schema.metadata == b.schema.metadata, (a, b)
    else:
        pd.testing.assert_frame_equal(a, b)
        assert a.attrs == b.attrs


# ------------------------------------------------------------------ the documented call

def test_the_documented_call_with_a_row_mechanism_object():
    """make_strategy returns a row mechanism; select_partitions refused it (TypeError: not a
    SelectionStrategy) although the same mechanism by name ran."""
    df = _pandas()
    s = dpselect.make_strategy("weighted_gaussian", epsilon=1.0, delta=1e-5)
    out = dpselect.select_partitions(df, privacy_unit="u", by="k", strategy=s)
    assert "weighted Gaussian" in out.attrs["dpselect_guarantee"] and out.attrs["dpselect_privacy_guaranteed"]
    assert set(out["k"]) <= {"a", "b", "c"}


# ------------------------------------------------------------------ the interfaces

@pytest.mark.parametrize("name", EVERY)
def test_every_registry_entry_implements_exactly_one_interface(name):
    from dpselect.mechanisms import CountMechanism, IndependentSelection, RowMechanism, SelectionMechanism

    built = _built(name)
    assert isinstance(built, SelectionMechanism)
    assert isinstance(built, CountMechanism) != isinstance(built, RowMechanism)
    assert isinstance(built, RowMechanism) == (name in ROW_STRATEGIES)
    assert isinstance(built, STRATEGIES.get(name) or ROW_STRATEGIES[name])
    # Whose decision is an independent draw on the count alone: all count mechanisms but mixed.
    assert isinstance(built, IndependentSelection) == (name in STRATEGIES and name != "mixed")
    assert built.public_partitions == {"public": "only", "mixed": "mixed"}.get(name, "none")
    assert built.max_partitions_contributed == 2 and built.params.max_partitions_contributed == 2
    assert dpselect.make_strategy(built) is built  # passed through, never wrapped


def test_the_release_of_nothing_keeps_the_interface_of_the_mechanism_it_stands_for():
    from dpselect.mechanisms import IndependentSelection

    for name, use, counts in (("pi_opt", "none", False), ("public", "only", True), ("mixed", "mixed", True)):
        nothing = dpselect.make_strategy(name, epsilon=1.0, delta=0.0, allow_no_release=True)
        assert isinstance(nothing, IndependentSelection)
        assert (nothing.public_partitions, nothing.releases_counts) == (use, counts)


def test_a_strategy_written_elsewhere_is_wrapped_as_a_count_mechanism():
    from dpselect.core.guarantee import PrivacyGuarantee
    from dpselect.core.params import validate_params
    from dpselect.mechanisms import CountMechanism, UserSuppliedStrategy

    class Mine:
        name = "mine"
        releases_counts = False
        count_cap = None
        max_partitions_contributed = 1
        params = validate_params(1.0, 1e-5)
        guarantee = PrivacyGuarantee("mine", 1.0, Fraction(1, 10**5), 1, "my notes")

        def apply(self, counts, *, rng=None):  # type: ignore[no-untyped-def]
            keep = np.asarray(counts) > 100
            return dpselect.SelectionResult(keep, None, self.guarantee, True)

    wrapped = dpselect.make_strategy(Mine())
    assert isinstance(wrapped, UserSuppliedStrategy) and isinstance(wrapped, CountMechanism)
    assert wrapped.public_partitions == "none"
    out = dpselect.select_partitions(_arrow(), privacy_unit="u", by="k", strategy=wrapped)
    assert out.column("k").to_pylist() == ["a"]
    with pytest.raises(ValueError, match="takes no public partitions"):
        wrapped.apply(np.array([5]), public=np.array([True]))


def test_public_keys_reach_only_the_mechanisms_that_take_them():
    """The public release publishes every count it is given: a key not on the list must never
    reach it (it would be published without any selection)."""
    counts = np.array([0, 50, 3])
    public = dpselect.make_strategy("public", epsilon=1.0, delta=1e-5)
    assert public.apply(counts, public=np.ones(3, bool), rng=InsecureDeterministicRNG(1)).keep.all()
    with pytest.raises(ValueError, match="each must be a public key"):
        public.apply(counts, public=np.array([True, False, True]))
    with pytest.raises(ValueError, match="takes no public partitions"):
        dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5).apply(counts, public=np.array([False, True, False]))
    with pytest.raises(TypeError, match="bool array"):
        dpselect.make_strategy("release", epsilon=1.0, delta=1e-5).apply(counts, public=[0, 1, 0])
    mixed = dpselect.make_strategy("mixed", epsilon=1.0, delta=1e-5, public_threshold=-100)
    assert mixed.apply(counts, public=np.array([True, False, False]), rng=InsecureDeterministicRNG(1)).keep[0]


@pytest.mark.parametrize("name", EVERY)
def test_a_pickled_mechanism_is_built_again_and_decides_alike(name):
    """Spark ships mechanisms to its executors pickled: the copy is built again from the same
    parameters (kernel handles do not pickle) and draws the same decisions."""
    from dpselect.mechanisms import RowMechanism
    from dpselect.mechanisms.weighted import UserSets

    built = _built(name)
    copy = pickle.loads(pickle.dumps(built))
    assert type(copy) is type(built) and repr(copy) == repr(built) and str(copy.guarantee) == str(built.guarantee)
    if isinstance(built, RowMechanism):
        users, keys = _rows()
        sets = UserSets.from_codes(users, np.unique(keys, return_inverse=True)[1])
        a, b = (m.select_sets(sets, rng=InsecureDeterministicRNG(4)) for m in (built, copy))
    else:
        counts = np.array([1, 5, 20, 80, 300])
        public = np.ones(5, bool) if name == "public" else None
        a, b = (m.apply(counts, rng=InsecureDeterministicRNG(4), public=public).keep for m in (built, copy))
    assert np.array_equal(a, b)


# ------------------------------------------------------------------ every front end

@pytest.mark.parametrize("frame", ["arrow", "pandas"])
@pytest.mark.parametrize("name", EVERY)
def test_select_partitions_takes_every_mechanism_object_as_its_name(name, frame):
    data = _arrow() if frame == "arrow" else _pandas()
    built = _built(name)
    counts = built.releases_counts
    by_object = dpselect.select_partitions(data, privacy_unit="u", by="k", strategy=built, counts=counts,
                                           rng=InsecureDeterministicRNG(11), **_public(name))
    by_name = dpselect.select_partitions(data, privacy_unit="u", by="k", strategy=name, counts=counts,
                                         rng=InsecureDeterministicRNG(11), **PARAMS, **OPTIONS.get(name, {}),
                                         **_public(name))
    _same(by_object, by_name)


def test_select_partitions_checks_an_object_as_its_name():
    built = _built("mixed")
    with pytest.raises(ValueError, match="strategy='mixed' needs public_partitions"):
        dpselect.select_partitions(_arrow(), privacy_unit="u", by="k", strategy=built)
    with pytest.raises(ValueError, match="public_partitions needs strategy='public' or 'mixed'"):
        dpselect.select_partitions(_arrow(), privacy_unit="u", by="k", strategy=_built("dp_sips"),
                                   public_partitions=PUBLIC)
    with pytest.raises(ValueError, match="report=True needs a count-based strategy"):
        dpselect.select_partitions(_arrow(), privacy_unit="u", by="k", strategy=_built("dp_sips"), report=True)
    with pytest.raises(ValueError, match="counts=True needs a strategy that releases noisy counts"):
        dpselect.select_partitions(_arrow(), privacy_unit="u", by="k", strategy=_built("policy_gaussian"), counts=True)


@pytest.mark.parametrize("name", AGGREGATE_SELECTIONS)
def test_aggregate_takes_a_selection_object_as_its_name(name):
    """An object built at the selection's share (half of ε here, by the default weights) gives
    the release of the name: the other steps share the rest of ε."""
    built = dpselect.make_strategy(name, epsilon=0.5, delta=1e-5, max_partitions_contributed=2)
    kw = dict(privacy_unit="u", by="k", metrics={"n": dpselect.count(), "users": dpselect.count_distinct_units()},
              epsilon=1.0, delta=1e-5, max_partitions_contributed=2, max_contributions_per_partition=1,
              noise="laplace")  # the object leaves no delta for Gaussian noise; by name "auto" could use some
    by_object = dpselect.aggregate(_arrow(), strategy=built, rng=InsecureDeterministicRNG(5), **kw)
    # With "release" the selection's noisy user counts are the users metric: it has no weight then.
    weights = {"selection": 1, "n": 1} if name == "release" else {"selection": 2, "n": 1, "users": 1}
    by_name = dpselect.aggregate(_arrow(), strategy=name, weights=weights,
                                 rng=InsecureDeterministicRNG(5), **kw)
    assert by_object.frame.equals(by_name.frame) and str(by_object.guarantee) == str(by_name.guarantee)


def test_aggregate_refuses_what_it_refuses_by_name_and_a_selection_that_does_not_fit():
    kw = dict(privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=1.0, delta=1e-5,
              max_partitions_contributed=2, max_contributions_per_partition=1)
    for name in ("public", "mixed", *ROW_STRATEGIES):
        with pytest.raises(ValueError, match="strategy must be one of pi_opt, release, laplace, gaussian"):
            dpselect.aggregate(_arrow(), strategy=_built(name), **kw)
    with pytest.raises(ValueError, match="disagrees with the strategy's 1"):
        dpselect.aggregate(_arrow(), strategy=dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-5), **kw)
    with pytest.raises(ValueError, match="leaves nothing"):
        dpselect.aggregate(_arrow(), strategy=_built("pi_opt"), **kw)
    half = dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-5, max_partitions_contributed=2)
    with pytest.raises(ValueError, match="leave 'selection' out of weights"):
        dpselect.aggregate(_arrow(), strategy=half, weights={"selection": 1, "n": 1}, **kw)
    with pytest.raises(ValueError, match="above delta"):
        dpselect.aggregate(_arrow(), strategy=dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-3,
                                                                     max_partitions_contributed=2), **kw)
    with pytest.raises(ValueError, match="nothing to do"):
        dpselect.aggregate(_arrow(), strategy=half, public_partitions=PUBLIC, **kw)


# ------------------------------------------------------------------ one plan for every front end

@pytest.mark.parametrize("cli,api", [
    (["--by", "k"], dict(by=["k", "k"])),
    (["--counts"], dict(counts=True)),
    (["--public-partitions", "PUBLIC"], dict(public_partitions=True)),
    (["--strategy", "mixed"], dict(strategy="mixed")),
    (["--counts", "--count-column", "u"], dict(counts=True, count_column="u")),
])
def test_the_cli_reports_the_plans_refusals_with_its_flags(tmp_path, capsys, cli, api):
    from dpselect.cli import main
    from dpselect.cli.common import EXIT_USAGE, api_flags
    from dpselect.ingest.plan import plan_selection

    kw = dict(privacy_unit="u", by=["k"], epsilon=1.0, delta=1e-5, max_partitions_contributed=2, strategy="pi_opt")
    kw.update(api)
    with pytest.raises(ValueError) as refused:
        plan_selection(**kw)
    public = tmp_path / "public.csv"
    public.write_text("k\na\n")
    args = [str(public) if a == "PUBLIC" else a for a in cli]
    code = main(["select", str(tmp_path / "in.csv"), "-u", "u", "-b", "k", "-e", "1", "-d", "1e-5",
                 "--max-partitions-contributed", "2", *(["--strategy", "pi_opt"] if "--strategy" not in cli else []),
                 *args, "-o", str(tmp_path / "out.csv")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and api_flags(str(refused.value)) in err, err
    assert not re.search(r"\b(count_column|privacy_unit|public_partitions|max_partitions_contributed)\b", err)


def test_the_plan_resolves_a_name_and_passes_an_object_through():
    from dpselect.ingest.plan import plan_selection

    by_name = plan_selection(privacy_unit="u", by="k", strategy="release", counts=True, confidence_level=0.9, **PARAMS)
    assert by_name.strategy is dpselect.make_strategy("release", **PARAMS)
    assert by_name.output_columns == ["k", "noisy_count", "noisy_count_ci_low", "noisy_count_ci_high"]
    built = _built("dp_sips")
    by_object = plan_selection(privacy_unit="u", by=["k"], strategy=built)
    assert by_object.strategy is built and by_object.rows and by_object.kappa == 2
    assert (by_object.epsilon, by_object.delta) == (built.params.epsilon_exact, built.params.delta_exact)
    assert plan_selection(privacy_unit="u", by="k", public_partitions=True, epsilon=1.0, delta=1e-5).only_public


# ------------------------------------------------------------------ no probing of mechanisms

_PROBE = re.compile(r"\b(?:hasattr|getattr)\(\s*(?:self\.|target\.)?"
                    r"(?:strategy|strat|built|mechanism|inner|base|s)\b\s*,")


def test_no_module_probes_a_mechanism_for_attributes():
    """Front ends tell the kinds of mechanism apart with isinstance against
    dpselect.mechanisms.protocols, never by probing for attributes."""
    root = Path(dpselect.__file__).resolve().parent
    found = [f"{path.relative_to(root.parent)}:{n}: {line.strip()}"
             for path in sorted(root.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if _PROBE.search(line)]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ Spark (slow: a local session)

@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java")
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    source = str(Path(dpselect.__file__).resolve().parents[1])  # the Python workers import this dpselect
    path = os.pathsep.join(p for p in (source, saved["PYTHONPATH"]) if p)
    os.environ["PYTHONPATH"] = path
    session = (SparkSession.builder.master("local[2]").appName("dpselect-protocols")
               .config("spark.sql.shuffle.partitions", "1").config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false").config("spark.executorEnv.PYTHONPATH", path)
               .config("spark.executorEnv.DPSELECT_ALLOW_INSECURE_RNG", "1").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
def test_spark_takes_every_count_mechanism_object_as_its_name(spark):
    from dpselect import spark as ds

    df = spark.createDataFrame(_arrow())
    for name in SPARK_SELECTIONS:  # one Spark job each: the object runs with its own statement
        built = _built(name)
        out = ds.select_partitions(df, privacy_unit="u", by="k", strategy=built, counts=built.releases_counts,
                                   rng=InsecureDeterministicRNG(3), **_public(name))
        assert ds.guarantee_of(out) == str(built.guarantee.enforced().under_test_rng()), name
        assert {row[0] for row in out.collect()} <= {"a", "b", "c", "z"}, name
    # and the same release as its name
    by_name = ds.select_partitions(df, privacy_unit="u", by="k", strategy="mixed", counts=True,
                                   rng=InsecureDeterministicRNG(3), public_partitions=PUBLIC, **PARAMS,
                                   **OPTIONS["mixed"])
    assert sorted(map(tuple, out.collect())) == sorted(map(tuple, by_name.collect()))
    assert ds.guarantee_of(out) == ds.guarantee_of(by_name)
    for name in ROW_STRATEGIES:
        with pytest.raises(NotImplementedError, match=f"strategy='{name}' is a row mechanism"):
            ds.select_partitions(df, privacy_unit="u", by="k", strategy=_built(name))
    with pytest.raises(NotImplementedError, match="dpselect did not build"):
        ds.select_partitions(df, privacy_unit="u", by="k",
                             strategy=dpselect.make_strategy(_WrittenElsewhere()))
    half = dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-5, max_partitions_contributed=2)
    kw = dict(privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=1.0, delta=1e-5,
              max_partitions_contributed=2, max_contributions_per_partition=1)
    result = ds.aggregate(df, strategy=half, rng=InsecureDeterministicRNG(6), **kw)
    assert "(1) selection of keys (pi_opt): (0.5, 1e-05); (2) n = count(): (0.5, 0)" in str(result.guarantee)
    assert {row[0] for row in result.frame.collect()} <= {"a", "b", "c"}


class _WrittenElsewhere:
    name = "elsewhere"
    releases_counts = False
    count_cap = None
    max_partitions_contributed = 2

    def __init__(self) -> None:
        from dpselect.core.params import validate_params

        self.params = validate_params(1.0, 1e-5, 2)

    @property
    def guarantee(self):  # type: ignore[no-untyped-def]
        from dpselect.core.guarantee import PrivacyGuarantee

        return PrivacyGuarantee("elsewhere", 1.0, Fraction(1, 10**5), 2, "its notes")

    def apply(self, counts, *, rng=None):  # type: ignore[no-untyped-def]
        return dpselect.SelectionResult(np.asarray(counts) > 100, None, self.guarantee, True)

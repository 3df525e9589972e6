"""dpselect.sql and `dpselect sql`: BigQuery's SELECT WITH DIFFERENTIAL_PRIVACY, its FROM run by
DuckDB, released by dpselect.aggregate (docs/sql.md): each clause's mapping, each refusal (named
by its clause), the same release as aggregate on the same rows and seed, BigQuery's examples and
the docs' examples as written, and the command."""
from __future__ import annotations

import contextlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

import dpselect  # noqa: E402
from dpselect.sql.release import plan_sql  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = "OPTIONS (epsilon = 1, delta = 1e-6, max_groups_contributed = 2, privacy_unit_column = uid)"
ROWS = OPTIONS[:-1] + ", max_contributions_per_partition = 3)"


@pytest.fixture(autouse=True)
def _insecure_rng_allowed(monkeypatch):
    monkeypatch.setenv("DPSELECT_ALLOW_INSECURE_RNG", "1")


def _rows(n: int = 3000, users: int = 400, seed: int = 0):
    gen = np.random.Generator(np.random.PCG64(seed))  # test data only
    return pa.table({"uid": gen.integers(0, users, n), "k": gen.choice(["a", "b", "c"], n),
                     "x": np.round(gen.gamma(2.0, 10.0, n), 2)})


def _seed(s: int = 7):
    return InsecureDeterministicRNG(seed=s)


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test RNG's and the data holder's warnings
        yield


# --- mapping ---------------------------------------------------------------------------------

def test_per_group_mapping_is_bigquerys_clamping_of_each_units_total():
    mapping, args = plan_sql(f"""SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS}
        k AS key, COUNT(*, contribution_bounds_per_group => (0, 5)) AS n,
        SUM(x, contribution_bounds_per_group => (0, 100)) AS s, AVG(x, contribution_bounds_per_group => (0, 50)) a,
        COUNT(x, contribution_bounds_per_group => (0, 4)) AS nx, COUNT(DISTINCT uid) AS users
        FROM t WHERE x > 1 GROUP BY key""")
    assert mapping.per_group and args["max_contributions_per_partition"] == 1
    assert args["max_partitions_contributed"] == 2 and args["epsilon"] == 1 and args["delta"] == 1e-6
    assert args["privacy_unit"] == "uid" and args["by"] == ["key"]
    m = args["metrics"]
    assert m["n"] == dpselect.sum("COUNT(*)", bounds=(0, 5))
    assert m["s"] == dpselect.sum("SUM(x)", bounds=(0, 100))
    assert m["a"] == dpselect.mean("AVG(x)", bounds=(0, 50))
    assert m["nx"] == dpselect.sum("COUNT(x)", bounds=(0, 4))
    assert m["users"] == dpselect.count_distinct_units()
    sql = mapping.relation_sql
    assert "*" not in sql.replace("COUNT(*)", "") and "GROUP BY uid, k" in sql and "WHERE x > 1" in sql
    assert mapping.columns == ["key", "n", "s", "a", "nx", "users"]


def test_per_row_mapping_bounds_rows_and_clamps_each():
    mapping, args = plan_sql(f"""SELECT WITH DIFFERENTIAL_PRIVACY {ROWS}
        COUNT(*) AS n, k, SUM(x, contribution_bounds_per_row => (0, 100)) AS s, AVG(x) AS a,
        PERCENTILE_CONT(x, 0.9, contribution_bounds_per_row => (0, 100)) AS p90,
        VAR_POP(x, contribution_bounds_per_row => (0, 100)) AS v, STDDEV_POP(x, contribution_bounds_per_row => (0, 100)) sd,
        COUNT(x) AS nx, COUNT(DISTINCT k2) AS kinds FROM t GROUP BY k""")
    assert not mapping.per_group and args["max_contributions_per_partition"] == 3
    m = args["metrics"]
    assert m["n"] == dpselect.count() and m["s"] == dpselect.sum("x", bounds=(0, 100)) and m["a"] == dpselect.mean("x")
    assert m["p90"] == dpselect.quantile("x", 0.9, bounds=(0, 100))
    assert m["v"] == dpselect.variance("x", bounds=(0, 100)) and m["sd"] == dpselect.stddev("x", bounds=(0, 100))
    assert m["nx"] == dpselect.sum("x IS NOT NULL", bounds=(0, 1)) and m["kinds"] == dpselect.count_distinct("k2")
    assert "GROUP BY" not in mapping.relation_sql and "*" not in mapping.relation_sql
    assert mapping.columns == ["n", "k", "s", "a", "p90", "v", "sd", "nx", "kinds"]


def test_the_per_row_bound_may_be_a_parameter_and_an_input_named_like_an_output_is_renamed():
    mapping, args = plan_sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, SUM(x, contribution_bounds_per_row "
                             "=> (0, 1)) AS x FROM t GROUP BY 1", max_contributions_per_partition=2)
    assert args["max_contributions_per_partition"] == 2
    assert args["metrics"]["x"] == dpselect.sum("x (input)", bounds=(0, 1))


def test_plan_errors_name_the_option():
    with pytest.raises(TypeError, match="^OPTIONS max_groups_contributed .* is required"):
        plan_sql("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6, privacy_unit_column = uid) "
                 "k, COUNT(*) FROM t GROUP BY k")
    with pytest.raises(ValueError, match="^OPTIONS epsilon"):  # BigQuery's noise-free demonstration
        plan_sql("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1e20, delta = .01, max_groups_contributed = 1, "
                 "privacy_unit_column = uid) k, COUNT(*) FROM t GROUP BY k")


def test_the_clause_is_found_by_tokens_not_by_text():
    # The words inside a string literal are not the clause; the real one is cut out.
    mapping, _ = plan_sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(DISTINCT uid) u FROM t "
                          "WHERE note <> 'SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 9)' GROUP BY k")
    assert "'SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 9)'" in mapping.relation_sql


# --- refusals ---------------------------------------------------------------------------------

REFUSED = [
    ("SELECT k, COUNT(*) FROM t GROUP BY k", "SELECT: the query has no SELECT WITH DIFFERENTIAL_PRIVACY"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, x, COUNT(*) FROM t GROUP BY k", "SELECT: 'x' is neither"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} * FROM t GROUP BY k", "SELECT: SELECT *"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, MAX(x) FROM t GROUP BY k", "SELECT: 'MAX\\(x\\)' is not a differentially"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, ROUND(AVG(x, contribution_bounds_per_group => (0, 1))) FROM t GROUP BY k",
     "SELECT: .*an expression over a DP aggregate"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY k HAVING COUNT(*) > 5", "HAVING:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY k ORDER BY SUM(x)", "ORDER BY:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY k LIMIT 3", "LIMIT:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM (SELECT * FROM t LIMIT 10) GROUP BY k",
     "LIMIT before aggregation:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM (SELECT uid, k, ROW_NUMBER() OVER () r FROM t) "
     "GROUP BY k", "window function:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t WHERE x > (SELECT AVG(x) FROM t) GROUP BY k",
     "WHERE: a subquery"),
    ("SELECT k FROM (SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY k) WHERE c > 3",
     "SELECT WITH DIFFERENTIAL_PRIVACY: the DP SELECT is inside parentheses"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY k UNION ALL SELECT 'x', 1", "UNION:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} COUNT(*) c FROM t", "GROUP BY: is required"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c FROM t GROUP BY ROLLUP (k)", "GROUP BY: ROLLUP"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} DISTINCT k, COUNT(*) c FROM t GROUP BY k", "SELECT DISTINCT:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6, max_rows_contributed = 5, "
     "privacy_unit_column = uid) k, COUNT(*) c FROM t GROUP BY k", "OPTIONS max_rows_contributed:"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6, max_groups_contributed = 1) "
     "k, COUNT(*) c FROM t GROUP BY k", "OPTIONS privacy_unit_column: is required"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, PERCENTILE_CONT(x, 0.5) p FROM t GROUP BY k",
     r"SELECT PERCENTILE_CONT\(x, 0.5\): .*max_contributions_per_partition"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(DISTINCT x) d FROM t GROUP BY k",
     r"SELECT COUNT\(DISTINCT x\): .*max_contributions_per_partition"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {r} k, SUM(x, contribution_bounds_per_group => (0, 1)) s FROM t GROUP BY k",
     r"SELECT SUM\(x, .*contribution_bounds_per_group clamps each privacy unit's total"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, SUM(x, contribution_bounds_per_row => (0, 1)) s FROM t GROUP BY k",
     r"SELECT SUM\(x, .*contribution_bounds_per_row clamps each row"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY {o} k, COUNT(*) c, COUNT(*) c FROM t GROUP BY k", "SELECT: two items"),
]


@pytest.mark.parametrize("query, message", REFUSED)
def test_what_is_not_a_bounded_dp_aggregation_is_refused_naming_the_clause(query, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        plan_sql(query.format(o=OPTIONS, r=ROWS))


def test_a_refusal_charges_no_budget_and_runs_nothing():
    budget = dpselect.Budget(epsilon=2, delta=1e-5)
    with pytest.raises(ValueError, match="^HAVING"):
        dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(*) c FROM t GROUP BY k HAVING c > 1",
                     {"t": _rows()}, budget=budget)
    with pytest.raises(ValueError, match="^FROM/WHERE"):  # DuckDB's binding error, before the charge
        dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(DISTINCT uid) c FROM nowhere GROUP BY k",
                     budget=budget)
    assert budget.spent[0] == 0


# --- the same release as aggregate -------------------------------------------------------------

def test_per_row_release_equals_aggregate_on_the_same_rows_and_seed():
    table = _rows()
    query = f"""SELECT WITH DIFFERENTIAL_PRIVACY {ROWS} k, COUNT(*) AS n, COUNT(DISTINCT uid) AS users,
        SUM(x, contribution_bounds_per_row => (0, 50)) AS s, PERCENTILE_CONT(x, 0.5, contribution_bounds_per_row
        => (0, 50)) AS med FROM t GROUP BY k"""
    with _quiet():
        got = dpselect.sql(query, {"t": table}, rng=_seed(), confidence_level=0.9)
        want = dpselect.aggregate(table, privacy_unit="uid", by="k", metrics={
            "n": dpselect.count(), "users": dpselect.count_distinct_units(), "s": dpselect.sum("x", bounds=(0, 50)),
            "med": dpselect.quantile("x", 0.5, bounds=(0, 50))}, epsilon=1, delta=1e-6,
            max_partitions_contributed=2, max_contributions_per_partition=3, rng=_seed(), confidence_level=0.9)
    assert got.frame.equals(want.frame) and str(got.guarantee) == str(want.guarantee)
    assert got.bounds == want.bounds and str(got.report()) == str(want.report())
    with _quiet():  # the threads change the speed, never the release
        for threads in (1, 3):
            again = dpselect.sql(query, {"t": table}, rng=_seed(), confidence_level=0.9, threads=threads)
            assert again.frame.equals(want.frame)


def test_a_bad_threads_is_refused_before_duckdb_runs():
    budget = dpselect.Budget(epsilon=2, delta=1e-5)
    with pytest.raises(ValueError, match="threads"):  # the table does not exist: DuckDB never ran
        dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(*) c FROM nowhere GROUP BY k",
                     budget=budget, threads=0)
    assert budget.spent[0] == 0


def test_per_group_release_equals_aggregate_on_each_units_totals():
    table = _rows(seed=1)
    query = f"""SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, SUM(x, contribution_bounds_per_group => (0, 200)) s,
        AVG(x, contribution_bounds_per_group => (0, 50)) a, COUNT(*, contribution_bounds_per_group => (0, 8)) n
        FROM t GROUP BY k"""
    totals = table.to_pandas().groupby(["uid", "k"], as_index=False).agg(
        s=("x", "sum"), a=("x", "mean"), n=("x", "size")).sort_values(["uid", "k"], kind="stable")
    totals = pa.table({"uid": totals["uid"].to_numpy(), "k": totals["k"].to_numpy(),
                       "SUM(x)": totals["s"].to_numpy(), "AVG(x)": totals["a"].to_numpy(),
                       "COUNT(*)": totals["n"].to_numpy().astype(np.int64)})
    with _quiet():
        got = dpselect.sql(query, {"t": table}, rng=_seed(3))
        want = dpselect.aggregate(totals, privacy_unit="uid", by="k", metrics={
            "s": dpselect.sum("SUM(x)", bounds=(0, 200)), "a": dpselect.mean("AVG(x)", bounds=(0, 50)),
            "n": dpselect.sum("COUNT(*)", bounds=(0, 8))}, epsilon=1, delta=1e-6, max_partitions_contributed=2,
            max_contributions_per_partition=1, rng=_seed(3))
    assert got.frame.column_names == ["k", "s", "a", "n"]
    assert got.frame.column("k").equals(want.frame.column("k"))
    for column in ("s", "a", "n"):  # the per-unit sums of floats may differ in the last bits by summation order
        np.testing.assert_allclose(got.frame.column(column).to_numpy(), want.frame.column(column).to_numpy(),
                                   rtol=1e-9)
    assert str(got.guarantee) == str(want.guarantee)


def test_a_join_that_repeats_a_units_rows_is_still_bounded():
    # Every row of the survey is tripled by the join: with L∞ = 1 each unit still adds one row per key.
    units = pa.table({"uid": np.arange(3000) % 1000, "k": np.array(["a", "b", "c"])[np.arange(3000) % 3]})
    triple = pd.DataFrame({"k": ["a", "a", "a", "b", "b", "b", "c", "c", "c"]})
    query = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 100000, delta = 1e-6, max_groups_contributed = 3, "
             "privacy_unit_column = uid, max_contributions_per_partition = 1) t.k AS k, COUNT(*) AS n "
             "FROM t JOIN triple USING (k) GROUP BY t.k")
    with _quiet():
        out = dpselect.sql(query, {"t": units, "triple": triple}).frame.to_pandas()
    # 1000 units, each in every key (uid % 3 runs through all keys over its 3 rows): ~1000 per key, not 3000.
    assert out["n"].between(990, 1010).all(), out


def test_a_null_value_is_refused_with_advice_in_sql():
    table = pa.table({"uid": [1, 2, 3], "k": ["a", "a", "b"], "x": [1.0, None, 3.0]})
    with _quiet(), pytest.raises(ValueError, match=r"null value.*WHERE \(\.\.\. IS NOT NULL\)"):
        dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, AVG(x, contribution_bounds_per_group => (0, 5)) a "
                     "FROM t GROUP BY k", {"t": table})


def test_python_variables_are_not_read_by_name():
    secret = _rows()  # noqa: F841  (DuckDB's replacement scan would find it by its name)
    with pytest.raises(ValueError, match="^FROM/WHERE"):
        dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(DISTINCT uid) u FROM secret GROUP BY k")


def test_the_budget_is_charged_once_and_order_by_sorts_released_values():
    budget = dpselect.Budget(epsilon=2, delta=1e-5)
    with _quiet():
        out = dpselect.sql(f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} COUNT(DISTINCT uid) AS u, k FROM t "
                           "GROUP BY k ORDER BY u DESC", {"t": _rows(20000, 4000)}, budget=budget, rng=_seed())
    assert budget.spent[0] == 1 and out.frame.column_names == ["u", "k"]
    u = out.frame.column("u").to_pylist()
    assert u == sorted(u, reverse=True)


# --- BigQuery's examples and the docs ------------------------------------------------------------

PROFESSORS = pd.DataFrame({"id": [101, 123, 123, 123, 101, 101, 130, 150],
                           "item": ["pencil", "pen", "pencil", "pencil", "pen", "pen", "scissors", "pencil"],
                           "quantity": [24, 16, 10, 38, 19, 23, 8, 72]})
BIGQUERY = """SELECT
  WITH DIFFERENTIAL_PRIVACY
    OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1, privacy_unit_column=id)
    item,
    {call}
FROM professors
GROUP BY item;"""


@pytest.mark.parametrize("call, linf", [
    ("AVG(quantity, contribution_bounds_per_group => (0,100)) average_quantity", None),
    ("COUNT(*, contribution_bounds_per_group=>(0, 100)) times_requested", None),
    ("COUNT(item, contribution_bounds_per_group => (0,100)) times_requested", None),
    ("SUM(quantity, contribution_bounds_per_group => (0,100)) quantity", None),
    ("PERCENTILE_CONT(quantity, 0.5, contribution_bounds_per_row => (0,100)) percentile_requested", 1),
    ("VAR_POP(quantity, contribution_bounds_per_row => (0,100)) pop_variance", 1),
])
def test_bigquerys_examples_run_unchanged(call, linf):
    with _quiet():
        out = dpselect.sql(BIGQUERY.format(call=call), {"professors": PROFESSORS},
                           max_contributions_per_partition=linf, rng=_seed())
    assert out.frame.column_names == ["item", call.split()[-1]]


@pytest.mark.slow
def test_the_docs_examples_run_as_written():
    path = ROOT / "docs" / "sql.md"
    if not path.is_file():
        pytest.skip("no docs/sql.md beside the tests (an installed wheel)")
    namespace: dict = {}
    with _quiet():
        for block in re.findall(r"```python\n(.*?)\n```", path.read_text(encoding="utf-8"), flags=re.S):
            exec(compile(block, str(path), "exec"), namespace)
    assert namespace["result"].frame.column_names == ["country", "users", "reports", "ios_share"]
    assert "US" not in namespace["result"].frame.column("country").to_pylist()
    assert namespace["rows"].frame.column_names[:2] == ["os", "reports"]
    assert namespace["by_region"].frame.column_names == ["region", "users"]


# --- the command ------------------------------------------------------------------------------

def test_the_command_writes_the_release_and_its_guarantee(tmp_path, capsys):
    from dpselect.cli import main

    data = tmp_path / "rows.parquet"
    import pyarrow.parquet as pq

    pq.write_table(_rows(20000, 4000), data)
    out = tmp_path / "out.csv"
    query = (f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} k, COUNT(DISTINCT uid) AS users, "
             "SUM(x, contribution_bounds_per_group => (0, 100)) AS total FROM rows GROUP BY k")
    assert main(["sql", query, "--table", f"rows={data}", "-o", str(out), "--quiet", "--threads", "3"]) == 0
    released = pd.read_csv(out)
    assert list(released.columns) == ["k", "users", "total"] and len(released) == 3
    sidecar = json.loads((tmp_path / "out.csv.guarantee.json").read_text())
    assert sidecar["query"] == query and "epsilon" in json.dumps(sidecar)
    capsys.readouterr()
    assert main(["sql", query.replace("GROUP BY k", "GROUP BY k HAVING users > 3"), "--table", f"rows={data}"]) == 2
    assert "dpselect sql: error: HAVING:" in capsys.readouterr().err

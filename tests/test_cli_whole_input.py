"""`dpselect select` on an input that fits in memory: held and counted whole (radix grouping of
integer privacy units, CSV ids read as text converted to int64 when every one is canonical), and
streamed when it does not fit (the size rule, tested with a small DPSELECT_IN_MEMORY_BYTES).
Both paths give the same distinct users, pairs and exact counts, refuse null privacy units the
same way, and write the same release."""
from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pcsv = pytest.importorskip("pyarrow.csv")

from dpselect import cli  # noqa: E402  (after the skip without pyarrow)
from dpselect.cli import select as cli_select  # noqa: E402
from dpselect.io.files import IN_MEMORY_ENV, coalesce, decimal_ids, in_memory_budget, open_batches  # noqa: E402
from dpselect.ingest.rows import RowCounter  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402
from file_formats import read_rows, write_table  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


# ------------------------------------------------------------------- text ids as int64

@pytest.mark.slow
@settings(deadline=None)  # the first call imports pyarrow's compute kernels
@given(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=1, max_size=50))
def test_canonical_decimal_text_becomes_the_same_numbers(values):
    ids = decimal_ids(pa.array([str(v) for v in values], pa.string()))
    assert ids is not None and ids.type == pa.int64()
    assert ids.to_pylist() == values


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="0123456789-+ x.e", max_size=21), min_size=1, max_size=8))
def test_a_conversion_is_one_to_one(texts):
    """Whenever text ids convert, the numbers written back are the very texts: no two texts
    ("7" and "007") can become one person."""
    ids = decimal_ids(pa.array(texts, pa.large_string()))
    if ids is not None:
        assert [str(v) for v in ids.to_pylist()] == texts


@pytest.mark.parametrize("text", ["007", "+7", "-0", "00", " 7", "7 ", "0x1F", "0x174876E800", "1e3", "7.0",
                                  "", "-", "--7", "7-", "9223372036854775808", "-9223372036854775809",
                                  "12345678901234567890123"])
def test_text_that_is_not_a_canonical_int64_stays_text(text):
    assert decimal_ids(pa.array(["1", text, "2"])) is None


def test_extremes_slices_chunks_nulls_and_other_types():
    edges = ["0", "-1", str(INT64_MIN), str(INT64_MAX), "10", "-10", "999999999999999999"]
    assert decimal_ids(pa.array(edges)).to_pylist() == [int(t) for t in edges]
    sliced = pa.array(["007", *edges, "x"]).slice(1, len(edges))
    assert decimal_ids(sliced).to_pylist() == [int(t) for t in edges]
    chunked = pa.chunked_array([pa.array(["1", "2"]), pa.array([], pa.string()), pa.array(["3"])])
    assert decimal_ids(chunked).to_pylist() == [1, 2, 3]
    assert decimal_ids(pa.chunked_array([pa.array(["1"]), pa.array(["01"])])) is None
    assert decimal_ids(pa.array(["1", None])) is None  # nulls: left to the counter, as text
    assert decimal_ids(pa.array([1, 2])) is None  # not text


# ------------------------------------------------------------------- the size rule

def test_the_budget_is_half_the_available_memory_unless_overridden(monkeypatch):
    monkeypatch.delenv(IN_MEMORY_ENV, raising=False)
    monkeypatch.setattr("dpselect.io._memory._meminfo_available", lambda: 8 << 30)
    monkeypatch.setattr("dpselect.io._memory._cgroup_room", lambda: None)
    assert in_memory_budget() == 4 << 30
    monkeypatch.setattr("dpselect.io._memory._cgroup_room", lambda: 1 << 30)  # a container's limit
    assert in_memory_budget() == 1 << 29
    monkeypatch.setattr("dpselect.io._memory._meminfo_available", lambda: None)
    monkeypatch.setattr("dpselect.io._memory._cgroup_room", lambda: None)
    assert in_memory_budget() == 0  # unknown: stream
    monkeypatch.setenv(IN_MEMORY_ENV, "12345")
    assert in_memory_budget() == 12345
    for bad in ("-1", "1G", "x"):
        monkeypatch.setenv(IN_MEMORY_ENV, bad)
        with pytest.raises(ValueError, match=IN_MEMORY_ENV):
            in_memory_budget()


def rows_table(n: int = 6_000, seed: int = 3, n_users: int = 700) -> pa.Table:
    gen = np.random.default_rng(seed)  # input data only
    return pa.table({"user": pa.array(gen.integers(-10**12, 10**12, n_users)[gen.integers(0, n_users, n)]),
                     "key": pa.array([f"k{v}" for v in gen.zipf(1.4, n) % 150])})


def count(path: str, fmt: str, budget: int, kappa: int = 10**9, batch_rows: int = 500,
          block_size: int = 4096) -> tuple[RowCounter, list[bool], dict]:
    """Count a file as the CLI does with ``budget``: the counter, the ``final`` flag of each feed,
    and the exact counts (test RNG)."""
    source = open_batches(path, fmt, ["user", "key"], batch_rows, block_size)
    counter = RowCounter("user", ["key"])
    counter.check_schema(source.schema)
    finals: list[bool] = []
    feed = counter.feed

    def spy(batch, *, final=False):
        finals.append(final)
        feed(batch, final=final)

    counter.feed = spy  # type: ignore[method-assign]
    progress = types.SimpleNamespace(update=lambda *a: None)
    whole = cli_select._count_batches(counter, coalesce(source.batches, lambda: batch_rows), source, budget, progress)
    if whole is not None:
        cli_select._count_whole(counter, whole)
    sizes = (counter.n_users, counter.n_pairs, counter.n_partitions)
    result = counter.finish(kappa, None, rng=InsecureDeterministicRNG(7))
    counter.sizes = sizes  # type: ignore[attr-defined]
    return counter, finals, dict(zip(result.keys.column("key").to_pylist(), result.counts.tolist()))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_whole_and_streamed_give_the_same_counts(tmp_path, fmt):
    path = write_table(tmp_path / f"in.{fmt}", rows_table(), fmt, row_group_size=500)
    whole, whole_finals, expected = count(path, fmt, budget=1 << 40)
    streamed, streamed_finals, got = count(path, fmt, budget=0)
    assert whole_finals == [True] and whole._radix_sizes is not None  # CSV ids too: converted
    assert len(streamed_finals) > 1 and not any(streamed_finals) and streamed._radix_sizes is None
    assert got == expected
    assert whole.sizes == streamed.sizes


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_file_over_the_budget_is_streamed_from_where_it_passed_it(tmp_path, fmt):
    """A budget of about two batches: those are held, then counted in order, and the rest
    streamed; the counts are the whole input's."""
    table = rows_table()
    path = write_table(tmp_path / f"in.{fmt}", table, fmt, row_group_size=500)
    _, _, expected = count(path, fmt, budget=1 << 40)
    budget = 2 * (table.slice(0, 500).nbytes + cli_select._WHOLE_ROW_BYTES * 500)
    counter, finals, got = count(path, fmt, budget=budget)
    assert len(finals) > 2 and not any(finals) and counter._radix_sizes is None
    assert got == expected


@pytest.mark.parametrize("budget", [0, 1 << 40])
def test_bounding_keeps_min_d_kappa_pairs_per_user_on_both_paths(tmp_path, budget):
    table = rows_table()
    path = write_table(tmp_path / "in.parquet", table, "parquet", row_group_size=500)
    _, _, got = count(path, "parquet", budget=budget, kappa=2)
    per_user: dict[int, set] = {}
    for u, k in zip(table.column("user").to_pylist(), table.column("key").to_pylist()):
        per_user.setdefault(u, set()).add(k)
    assert sum(got.values()) == sum(min(len(keys), 2) for keys in per_user.values())


def test_text_ids_canonical_at_first_then_not_stay_text_and_distinct(tmp_path):
    """"7" and "007" are two people: the tables converted before a non-canonical id is seen are
    turned back into their very text, in the whole input and when the budget is passed."""
    rows = [(str(u), "early") for u in range(1, 900)] + [("7", "late"), ("007", "late"), ("-0", "late")]
    path = tmp_path / "ids.csv"
    path.write_text("user,key\n" + "".join(f"{u},{k}\n" for u, k in rows))
    counts = []
    for budget in (1 << 40, 30_000, 0):
        counter, _, got = count(str(path), "csv", budget=budget, batch_rows=200, block_size=1024)
        assert counter._radix_sizes is None  # text units: the pair sets
        counts.append(got)
    assert counts[0] == counts[1] == counts[2] == {"early": 899, "late": 3}


# ------------------------------------------------------------------- the command, both paths

BASE = ["--privacy-unit", "user", "--by", "key", "--epsilon", "1", "--delta", "1e-5", "--strategy", "pi_opt"]


def popular_rows(n_users: int = 400) -> pa.Table:
    """Two keys with hundreds of users (kept with probability 1 by pi_opt), one with a single user."""
    users = list(range(n_users)) * 2 + [10**9]
    keys = ["a"] * n_users + ["b"] * n_users + ["rare"]
    return pa.table({"user": pa.array(users, pa.int64()), "key": keys})


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("budget", ["0", "2000", str(1 << 40)])
def test_the_command_writes_the_same_release_whatever_the_path(tmp_path, monkeypatch, capsys, fmt, budget):
    monkeypatch.setenv(IN_MEMORY_ENV, budget)
    src = write_table(tmp_path / f"in.{fmt}", popular_rows(), fmt, row_group_size=97)
    out = tmp_path / "out.csv"
    assert cli.main(["select", src, *BASE, "--batch-size", "100", "-o", str(out)]) == 0
    assert sorted(r["key"] for r in read_rows(str(out), "csv")) == ["a", "b"]


@pytest.mark.parametrize("budget", ["0", str(1 << 40)])
def test_null_privacy_units_are_refused_on_both_paths(tmp_path, monkeypatch, capsys, budget):
    monkeypatch.setenv(IN_MEMORY_ENV, budget)
    src = tmp_path / "in.csv"
    src.write_text("user,key\n" + "".join(f"{u},a\n" for u in range(300)) + ",a\n")
    out = tmp_path / "out.csv"
    assert cli.main(["select", str(src), *BASE, "-o", str(out)]) == cli.EXIT_DATA
    assert "1 row(s)" in capsys.readouterr().err and not out.exists()
    assert cli.main(["select", str(src), *BASE, "--drop-null-privacy-units", "-o", str(out)]) == 0
    assert [r["key"] for r in read_rows(str(out), "csv")] == ["a"]


def test_a_bad_budget_variable_is_a_usage_error_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(IN_MEMORY_ENV, "lots")
    src = write_table(tmp_path / "in.csv", popular_rows(), "csv", row_group_size=97)
    out = tmp_path / "out.csv"
    assert cli.main(["select", src, *BASE, "-o", str(out)]) == cli.EXIT_USAGE
    assert IN_MEMORY_ENV in capsys.readouterr().err and not out.exists()

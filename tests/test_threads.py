"""Threads: one validated resolution (``threads=``, ``--threads``, ``DPSELECT_MAX_THREADS``, CPU
affinity and cgroup quota, one thread in a Spark task), and results that do not depend on the
number of threads: the work is split into shards fixed by the input, each with its own CSPRNG
stream, so with the deterministic test generator the output is identical for 1, 2, 3 and 8
threads (more threads than this machine's cores still run the parallel code: the pool grows to
what a call asks for)."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpselect
from dpselect import _threads
from dpselect.ingest import _counter
from dpselect.testing import InsecureDeterministicRNG

THREADS = (1, 2, 3, 8)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_threads.ENV_VAR, raising=False)


# ------------------------------------------------------------------ resolution


def test_an_explicit_number_wins() -> None:
    assert _threads.resolve_threads(3) == 3
    assert _threads.resolve_threads(np.int64(5)) == 5


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-2, ValueError), (10**6, ValueError), (True, TypeError),
                                       (2.0, TypeError), ("4", TypeError)])
def test_a_bad_threads_value_names_the_parameter(bad: object, kind: type[Exception]) -> None:
    with pytest.raises(kind, match="^threads"):
        _threads.resolve_threads(bad)
    with pytest.raises(kind, match="^--threads"):
        _threads.resolve_threads(bad, name="--threads")


def test_the_environment_variable_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_threads.ENV_VAR, " 6 ")
    assert _threads.resolve_threads() == 6
    assert _threads.resolve_threads(2) == 2  # the argument still wins


@pytest.mark.parametrize("bad", ["zero", "0", "-1", "1.5", "99999"])
def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(_threads.ENV_VAR, bad)
    with pytest.raises(ValueError, match=_threads.ENV_VAR):
        _threads.resolve_threads()


def test_the_default_is_the_cores_this_process_may_use() -> None:
    cores = _threads.resolve_threads()
    assert cores == _threads.available_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))


def test_the_cgroup_v2_quota_is_read_and_rounded_up(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert _threads.cgroup_cpu_limit(str(tmp_path)) == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _threads.cgroup_cpu_limit(str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("5000 100000\n")
    assert _threads.cgroup_cpu_limit(str(tmp_path)) == 1


def test_the_cgroup_v1_quota_is_read(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("400000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert _threads.cgroup_cpu_limit(str(tmp_path)) == 4
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    assert _threads.cgroup_cpu_limit(str(tmp_path)) is None
    assert _threads.cgroup_cpu_limit(str(tmp_path / "nothing")) is None


def test_the_quota_caps_the_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "cgroup_cpu_limit", lambda root=None: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert _threads.available_cores() == 1
    monkeypatch.setattr(_threads, "cgroup_cpu_limit", lambda root=None: None)
    assert _threads.available_cores() == 4


def test_a_spark_task_defaults_to_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    task = types.SimpleNamespace(get=lambda: object())
    monkeypatch.setitem(sys.modules, "pyspark", types.SimpleNamespace(TaskContext=task))
    monkeypatch.setattr(_threads, "available_cores", lambda: 16)
    assert _threads.in_spark_task()
    assert _threads.resolve_threads() == 1
    assert _threads.resolve_threads(4) == 4  # asked for explicitly
    monkeypatch.setenv(_threads.ENV_VAR, "3")
    assert _threads.resolve_threads() == 3
    monkeypatch.delenv(_threads.ENV_VAR)
    task.get = lambda: None  # the driver: no task context
    assert _threads.resolve_threads() == 16


# ------------------------------------------------------------------ the same output for any T


def _frame(n: int = 40_000, users: int = 3_000, seed: int = 3) -> pd.DataFrame:
    g = np.random.default_rng(seed)  # the data only; the noise comes from the test CSPRNG
    return pd.DataFrame({
        "user": g.integers(0, users, n),
        "ikey": g.integers(0, 300, n),
        "skey": np.array([f"k{v}" for v in g.integers(0, 300, n)], dtype=object),
        "other": g.integers(0, 4, n),
        "small": np.array([f"s{v}" for v in g.integers(0, 30, n)], dtype=object),
        "value": g.random(n),
    })


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of 4096 rows, so that a small input has many, and the helpers have work."""
    monkeypatch.setattr(_counter, "_PIECE_ROWS", 4096)


def _select(df: pd.DataFrame, by: object, threads: int, privacy_unit: str = "user") -> pd.DataFrame:
    return dpselect.select_partitions(df, privacy_unit=privacy_unit, by=by, epsilon=2.0, delta=1e-6,
                                      max_partitions_contributed=3, counts=True,
                                      rng=InsecureDeterministicRNG(seed=11), threads=threads)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("by", ["ikey", "skey", ["small", "other"]], ids=["int", "string", "composite"])
def test_select_partitions_is_identical_for_any_number_of_threads(small_pieces: None, by: object) -> None:
    df = _frame()
    first = _select(df, by, 1)
    assert len(first) > 0
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(_select(df, by, threads), first)


@pytest.mark.filterwarnings("ignore")
def test_select_partitions_with_string_users_is_identical_for_any_number_of_threads(small_pieces: None) -> None:
    df = _frame().assign(user=lambda d: d["user"].map("u{}".format))
    first = _select(df, "ikey", 1)
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(_select(df, "ikey", threads), first)


@pytest.mark.filterwarnings("ignore")
def test_more_radix_shards_than_threads_still_bound_every_user_once(small_pieces: None) -> None:
    """Without the cap and with κ above every user's keys, the bounded counts are the exact
    distinct-user counts: no shard is bounded twice or skipped, whatever T."""
    df = _frame(n=60_000, users=20_000)
    exact = df.groupby("ikey")["user"].nunique().sort_index()
    for threads in (1, 3):
        counter = _counter.RowCounter("user", ["ikey"], expected_rows=len(df))
        import pyarrow as pa

        with _threads.using(threads):
            counter.feed(pa.Table.from_pandas(df[["user", "ikey"]], preserve_index=False), final=True)
            assert counter._radix is not None and counter._radix.n_buckets >= 4  # the radix path, several shards
            counts = counter.finish(1000, None, InsecureDeterministicRNG(seed=1))
        got = pd.Series(counts.counts, index=counts.keys.column("ikey").to_pylist()).sort_index()
        pd.testing.assert_series_equal(got, exact, check_names=False, check_index_type=False)


def _aggregate(df: pd.DataFrame, by: object, threads: int) -> pd.DataFrame:
    metrics = {"n": dpselect.count(), "users": dpselect.count_distinct_units(),
               "total": dpselect.sum("value", bounds=(0.0, 1.0))}
    result = dpselect.aggregate(df, privacy_unit="user", by=by, metrics=metrics, epsilon=2.0, delta=1e-6,
                                max_partitions_contributed=3, max_contributions_per_partition=2,
                                rng=InsecureDeterministicRNG(seed=11), threads=threads)
    return result.frame


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The value columns converted in steps of 4096 rows (on every thread), and from 4 threads
    the users and keys coded on every thread from 1,000 rows on (chunks of 500)."""
    from dpselect.aggregation import values
    from dpselect.ingest import parallel_codes

    monkeypatch.setattr(values, "_STEP_ROWS", 4096)
    monkeypatch.setattr(parallel_codes, "MIN_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "_CHUNK_ROWS", 500)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("by", ["ikey", "skey", ["small", "other"]], ids=["int", "string", "composite"])
def test_aggregate_is_identical_for_any_number_of_threads(small_steps: None, by: object) -> None:
    df = _frame()
    first = _aggregate(df, by, 1)
    assert len(first) > 0
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(_aggregate(df, by, threads), first)


@pytest.mark.filterwarnings("ignore")
def test_aggregate_shards_bound_every_user_once() -> None:
    """κ and L∞ above every user's keys and rows: the bounded counts are exact, whatever T."""
    df = _frame(n=20_000, users=5_000)
    for threads in (1, 3, 8):
        result = dpselect.aggregate(df, privacy_unit="user", by="ikey", metrics={"n": dpselect.count()},
                                    epsilon=1.0, delta=1e-6, max_partitions_contributed=100,
                                    max_contributions_per_partition=100, public_partitions=list(range(300)),
                                    rng=InsecureDeterministicRNG(seed=2), threads=threads)
        report = result.report()
        assert (report.rows, report.rows_kept, report.users) == (len(df), len(df), df["user"].nunique())
        assert report.pairs_kept == report.pairs == len(df[["user", "ikey"]].drop_duplicates())


@pytest.mark.parametrize("call", ["select", "aggregate"])
@pytest.mark.parametrize("bad, kind", [(0, ValueError), (True, TypeError), (1.5, TypeError)])
def test_a_bad_threads_argument_fails_before_any_budget_is_charged(call: str, bad: object,
                                                                   kind: type[Exception]) -> None:
    budget = dpselect.Budget(epsilon=10.0, delta=1e-3)
    df = _frame(n=100)
    with pytest.raises(kind, match="threads"):
        if call == "select":
            dpselect.select_partitions(df, privacy_unit="user", by="ikey", epsilon=1.0, delta=1e-6,
                                       budget=budget, threads=bad)
        else:
            dpselect.aggregate(df, privacy_unit="user", by="ikey", metrics={"n": dpselect.count()}, epsilon=1.0,
                               delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1,
                               budget=budget, threads=bad)
    assert budget.spent == (0, 0)


# ------------------------------------------------------------------ the CLI


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The dpselect this test session imports (the install under test, or the source tree where
    # it is built in place), from the session's own directory: never the source tree forced.
    return subprocess.run([sys.executable, "-m", "dpselect.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.fixture
def rows_csv(tmp_path: Path) -> Path:
    path = tmp_path / "rows.csv"
    _frame(n=2_000)[["user", "ikey", "value"]].to_csv(path, index=False)
    return path


@pytest.mark.parametrize("command", ["select", "aggregate"])
@pytest.mark.parametrize("value, message", [("0", "between 1 and"), ("two", "whole number")])
def test_the_cli_refuses_a_bad_threads_flag(rows_csv: Path, command: str, value: str, message: str) -> None:
    extra = ["-m", "count()", "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1"] \
        if command == "aggregate" else []
    done = _cli([command, str(rows_csv), "-u", "user", "-b", "ikey", "-e", "1", "-d", "1e-6", *extra,
                 "--threads", value])
    assert done.returncode == 2
    assert "--threads" in done.stderr and message in done.stderr


@pytest.mark.parametrize("command", ["select", "aggregate"])
def test_the_cli_names_a_bad_environment_variable(rows_csv: Path, command: str) -> None:
    extra = ["-m", "count()", "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1"] \
        if command == "aggregate" else []
    done = _cli([command, str(rows_csv), "-u", "user", "-b", "ikey", "-e", "1", "-d", "1e-6", *extra],
                env={_threads.ENV_VAR: "lots"})
    assert done.returncode == 2
    assert _threads.ENV_VAR in done.stderr


def test_the_cli_runs_with_more_threads_than_cores(rows_csv: Path) -> None:
    done = _cli(["select", str(rows_csv), "-u", "user", "-b", "ikey", "-e", "5", "-d", "1e-6", "--threads", "5",
                 "-q"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].strip('"') == "ikey"

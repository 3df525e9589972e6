"""The `dpselect aggregate` command: output, guarantee sidecar and report; --metric parsing; value
column types; errors naming flags, with nothing written when a run fails.

The command draws from the secure generator only (there is no test seed on the command line),
so the checks on released numbers use partitions far above the selection threshold and budgets
large enough that a noise draw beyond the tolerance has probability below 1e-9."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pcsv = pytest.importorskip("pyarrow.csv")

import dpselect
from dpselect import cli
from dpselect.cli import aggregate as cli_aggregate
from dpselect.cli import common as cli_common
from file_formats import read_rows, write_table

# Three keys of 400, 300 and 200 users; every user has 1 to 3 rows in one key, with amounts in
# [0, 100]. Key "c" is mentioned by a public-partitions file but absent from the data.
SIZES = {"a": 400, "b": 300, "x, with comma": 200}
SIDECAR_KEYS = {"differentially_private", "epsilon", "delta", "components", "statement", "bounds"}
ACCEPTED = "sum:COL:LO:HI"  # part of the list of accepted forms every --metric error shows


def make_table() -> pa.Table:
    users, keys, amounts, labels = [], [], [], []
    n = 0
    for key, size in SIZES.items():
        for i in range(size):
            for r in range(1 + (i % 3)):
                users.append(f"u{n}")
                keys.append(key)
                amounts.append(float((7 * n + 13 * r) % 101))  # 0..100
                labels.append("text")
            n += 1
    return pa.table({"user": users, "key": keys, "amount": amounts, "label": labels})


def write(path, table: pa.Table, fmt: str) -> str:
    return write_table(path, table, fmt, row_group_size=101)


read = read_rows


def run(*args: str) -> int:
    return cli.main(["aggregate", *args])


def leftovers(tmp_path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.name.startswith(".dpselect-")]


def one_error(err: str) -> str:
    """The single error line, checked to be the only output and free of a traceback."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert err.startswith("dpselect aggregate: error: "), err
    return err


PRIVACY = ["--privacy-unit", "user", "--by", "key", "--epsilon", "40", "--delta", "1e-5"]
# κ and L∞ have no default on the command line: one key and one row per user, as these tests' data have.
BOUNDS = ["--max-partitions-contributed", "1", "--max-contributions-per-partition", "1"]
BASE = [*PRIVACY, *BOUNDS]


# ------------------------------------------------------------------------ a run and its files

@pytest.mark.parametrize("in_fmt,out_fmt", [("csv", "csv"), ("csv.gz", "jsonl"), ("parquet", "parquet"),
                                            ("jsonl", "csv")])
def test_run_writes_release_sidecar_and_report(tmp_path, capsys, in_fmt, out_fmt):
    table = make_table()
    src = write(tmp_path / f"in.{in_fmt}", table, in_fmt)
    out = str(tmp_path / f"out.{out_fmt}")
    report = str(tmp_path / "holder-report.json")
    code = run(src, *PRIVACY, "--max-partitions-contributed", "1", "--max-contributions-per-partition", "3",
               "--metric", "users", "--metric", "rows",
               "--metric", "spend=sum:amount:0:100", "--metric", "mean:amount:0:100", "--report", report, "-o", out)
    err = capsys.readouterr().err
    assert code == 0, err
    rows = read(out, out_fmt)
    assert [r["key"] for r in rows] == sorted(SIZES)  # every key, sorted
    assert list(rows[0]) == ["key", "users", "count", "spend", "mean_amount"]
    truth = _truth(table)
    for r in rows:
        t = truth[r["key"]]
        # 5 steps of epsilon 8: users scale 1/8, rows scale 3/8, sum scale 300/8 (grid units aside)
        assert abs(r["users"] - t["users"]) <= 4
        assert abs(r["count"] - t["rows"]) <= 10
        assert abs(r["spend"] - t["sum"]) <= 1_000
        assert abs(r["mean_amount"] - t["sum"] / t["rows"]) <= 2

    with open(out + ".guarantee.json") as f:
        sidecar = json.load(f)
    assert SIDECAR_KEYS <= set(sidecar)
    assert sidecar["differentially_private"] is True
    assert 0 < sidecar["epsilon"] <= 40 + 1e-9 and 0 < sidecar["delta"] <= 1e-5
    assert sidecar["bounds"] == {"amount": [0, 100]}
    assert [c["what"].split(" = ")[0] for c in sidecar["components"]][1:] == ["users", "count", "spend", "mean_amount"]
    assert sidecar["release"] == os.path.basename(out)
    assert "differentially private" in sidecar["statement"]

    with open(report) as f:
        holder = json.load(f)
    assert holder["differentially_private"] is False and "NOT differentially private" in holder["note"]
    assert holder["rows"] == table.num_rows and holder["users"] == sum(SIZES.values())
    assert holder["released"] == len(SIZES)

    assert "differentially private" in err and f"released {len(SIZES)} partitions" in err
    assert "NOT differentially private" in err and "holder-report.json" in err
    assert leftovers(tmp_path) == []


def _truth(table: pa.Table) -> dict[str, dict[str, float]]:
    """Exact users, rows and sums per key (every row is kept: one key per user, at most 3 rows)."""
    out: dict[str, dict[str, float]] = {}
    users: dict[str, set] = {}
    for row in table.to_pylist():
        t = out.setdefault(row["key"], {"users": 0, "rows": 0, "sum": 0.0})
        users.setdefault(row["key"], set()).add(row["user"])
        t["rows"] += 1
        t["sum"] += row["amount"]
    for key, t in out.items():
        t["users"] = len(users[key])
    return out


def test_confidence_intervals_and_bounds_found_privately(tmp_path, capsys):
    src = write(tmp_path / "in.parquet", make_table(), "parquet")
    out = str(tmp_path / "out.parquet")
    assert run(src, *BASE, "--metric", "users", "--metric", "mean:amount", "--confidence-level", "0.95",
               "-o", out) == 0
    rows = read(out, "parquet")
    assert list(rows[0]) == ["key", "users", "users_ci_low", "users_ci_high", "mean_amount", "mean_amount_ci_low",
                             "mean_amount_ci_high"]
    for r in rows:
        assert r["users_ci_low"] <= r["users"] <= r["users_ci_high"]
        assert r["mean_amount_ci_low"] <= r["mean_amount"] <= r["mean_amount_ci_high"]
    with open(out + ".guarantee.json") as f:
        sidecar = json.load(f)
    lo, hi = sidecar["bounds"]["amount"]  # found with APPROX_BOUNDS: a step of its own
    assert lo <= 1 and hi >= 100  # power-of-two edges around the values, 0 to 100
    assert any("APPROX_BOUNDS" in c["what"] for c in sidecar["components"])
    capsys.readouterr()


@pytest.mark.parametrize("strategy", ["release", "laplace", "gaussian"])
def test_other_selection_strategies(tmp_path, capsys, strategy):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    out = tmp_path / "out.csv"
    assert run(src, *BASE, "--metric", "users", "--strategy", strategy, "-o", str(out)) == 0
    assert [r["key"] for r in read(str(out), "csv")] == sorted(SIZES)
    sidecar = json.loads((tmp_path / "out.csv.guarantee.json").read_text())
    assert sidecar["components"][0]["what"] == f"selection of keys ({strategy})"
    capsys.readouterr()


def test_value_type_int64_releases_whole_sums(tmp_path, capsys):
    table = make_table()
    table = table.set_column(2, "amount", pa.array([str(int(v)) for v in table.column("amount").to_pylist()]))
    src = write(tmp_path / "in.csv", table, "csv")
    out = str(tmp_path / "out.csv")
    assert run(src, *BASE, "--metric", "sum:amount:0:100", "--value-type", "amount=int64", "-o", out) == 0
    for r in read(out, "csv"):
        assert float(r["sum_amount"]).is_integer()
    capsys.readouterr()
    # A float read as int64 is refused, not truncated (Parquet declares float64 here).
    src = write(tmp_path / "in.parquet", make_table().set_column(2, "amount", pa.array([0.5] * make_table().num_rows)),
                "parquet")
    assert run(src, *BASE, "--metric", "sum:amount:0:1", "--value-type", "amount=int64",
               "-o", str(tmp_path / "other.csv")) == cli.EXIT_DATA
    err = one_error(capsys.readouterr().err)
    assert "'amount'" in err and "int64" in err
    assert not (tmp_path / "other.csv").exists()


def test_report_to_stderr_and_release_to_stdout(tmp_path, capfd):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    assert run(src, *BASE, "--metric", "users", "--report", "-") == 0
    captured = capfd.readouterr()
    assert captured.out.splitlines()[0] == '"key","users"' and len(captured.out.splitlines()) == 1 + len(SIZES)
    assert "NOT differentially private" in captured.err and "Bounding" in captured.err
    assert not any(p.name.endswith(".guarantee.json") for p in tmp_path.iterdir())  # no sidecar for stdout
    # --guarantee-json names one for standard output.
    sidecar = tmp_path / "release.guarantee.json"
    assert run(src, *BASE, "--metric", "users", "--guarantee-json", str(sidecar), "--quiet") == 0
    captured = capfd.readouterr()
    assert captured.err == "" and SIDECAR_KEYS <= set(json.loads(sidecar.read_text()))


def test_report_file_is_private_to_its_owner(tmp_path, capsys):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    report = tmp_path / "report.json"
    assert run(src, *BASE, "--metric", "users", "--report", str(report), "-o", str(tmp_path / "out.csv")) == 0
    assert stat.S_IMODE(os.stat(report).st_mode) & 0o077 == 0
    capsys.readouterr()


def test_public_partitions_release_exactly_the_list(tmp_path, capsys):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    public = tmp_path / "public.csv"
    public.write_text("key\na\nc\n")
    out = str(tmp_path / "out.csv")
    assert run(src, "-u", "user", "-b", "key", "-e", "40", "-d", "0", *BOUNDS, "--metric", "users",
               "--public-partitions", str(public), "-o", out) == 0
    rows = read(out, "csv")
    assert [r["key"] for r in rows] == ["a", "c"]
    assert abs(rows[0]["users"] - 400) <= 4 and abs(rows[1]["users"]) <= 4
    sidecar = json.loads((tmp_path / "out.csv.guarantee.json").read_text())
    assert sidecar["delta"] == 0 and not any("selection" in c["what"] for c in sidecar["components"])
    capsys.readouterr()
    assert run(src, *BASE, "--metric", "users", "--public-partitions", str(public), "--strategy", "pi_opt",
               "-o", str(tmp_path / "other.csv")) == cli.EXIT_USAGE
    assert "--strategy" in one_error(capsys.readouterr().err)


def test_dropped_null_privacy_units(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("user,key\n" + "".join(f"u{i},a\n" for i in range(300)) + ",a\n,b\n")
    out = tmp_path / "out.csv"
    assert run(str(src), *BASE, "--metric", "users", "-o", str(out)) == cli.EXIT_DATA
    err = one_error(capsys.readouterr().err)
    assert "2 row(s)" in err and "--drop-null-privacy-units" in err and "null_privacy_units" not in err
    assert not out.exists()
    assert run(str(src), *BASE, "--metric", "users", "--drop-null-privacy-units", "-o", str(out)) == 0
    err = capsys.readouterr().err
    assert "dropped 2 row(s)" in err and "NOT differentially private" in err and "Warning" not in err
    assert [r["key"] for r in read(str(out), "csv")] == ["a"]


def test_fifo_output_is_written_through(tmp_path, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    src = write(tmp_path / "in.csv", make_table(), "csv")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert run(src, *BASE, "--metric", "users", "-o", str(fifo)) == 0
    reader.join(timeout=60)
    assert got and got[0].decode().splitlines()[0] == '"key","users"'
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # not replaced by a regular file
    assert not (tmp_path / "pipe.guarantee.json").exists() and leftovers(tmp_path) == []
    capsys.readouterr()


@pytest.mark.slow
def test_shipped_example_data(tmp_path, capsys):
    """The tutorial's command on the shipped survey (no value column: user and row counts)."""
    from importlib import resources

    path = str(resources.files("dpselect") / "data" / "device_survey.csv.gz")
    out = str(tmp_path / "by_country.csv")
    code = run(path, "--privacy-unit", "user_id", "--by", "country", "--epsilon", "1", "--delta", "1e-5",
               "--max-partitions-contributed", "1", "--max-contributions-per-partition", "3",
               "--metric", "users", "--metric", "count",
               "--confidence-level", "0.95", "--report", str(tmp_path / "report.json"), "-o", out)
    err = capsys.readouterr().err
    assert code == 0, err
    table = pcsv.read_csv(path)
    exact_users = {r["country"]: r["user_id_count_distinct"]
                   for r in table.group_by("country").aggregate([("user_id", "count_distinct")]).to_pylist()}
    rows = read(out, "csv")
    # Every country has thousands of users (each user in one country): all are released, and
    # the user counts (noise scale 3) are near the truth.
    assert [r["country"] for r in rows] == sorted(exact_users)
    for r in rows:
        assert abs(r["users"] - exact_users[r["country"]]) <= 80
        assert r["users_ci_low"] <= r["users"] <= r["users_ci_high"]
        assert r["count"] >= r["users"] - 200  # up to 3 rows per user
    sidecar = json.loads((tmp_path / "by_country.csv.guarantee.json").read_text())
    assert SIDECAR_KEYS <= set(sidecar) and sidecar["bounds"] == {}
    assert json.loads((tmp_path / "report.json").read_text())["rows"] == table.num_rows


# ------------------------------------------------------------------------ --metric parsing

@pytest.mark.parametrize("spec,name,metric", [
    ("users", "users", dpselect.count_distinct_units()),
    ("count_distinct_units", "users", dpselect.count_distinct_units()),
    ("count", "count", dpselect.count()),
    ("rows", "count", dpselect.count()),
    ("sum:amount", "sum_amount", dpselect.sum("amount")),
    ("sum:amount:0:500", "sum_amount", dpselect.sum("amount", bounds=(0, 500))),
    ("mean:amount:-1.5:2e3", "mean_amount", dpselect.mean("amount", bounds=(-1.5, 2000.0))),
    ("spend=sum:amount:0:500", "spend", dpselect.sum("amount", bounds=(0, 500))),
    ("n users=users", "n users", dpselect.count_distinct_units()),
    ("avg=mean:amount", "avg", dpselect.mean("amount")),
    ("sum:a=b", "sum_a=b", dpselect.sum("a=b")),  # '=' after ':' is part of the column name
    ("p90=quantile:amount:0.9:0:500", "p90", dpselect.quantile("amount", 0.9, bounds=(0, 500))),
    ("quantile:amount:0.995", "p99_5_amount", dpselect.quantile("amount", 0.995)),
    ("median:amount", "median_amount", dpselect.median("amount")),
    ("MEDIAN:amount:0:500", "median_amount", dpselect.median("amount", bounds=(0, 500))),
    ("min:amount:0:500", "min_amount", dpselect.min("amount", bounds=(0, 500))),
    ("top=max:amount", "top", dpselect.max("amount")),
    ("quantile:amount:0.5,0.9", "quantiles_amount", dpselect.quantile("amount", [0.5, 0.9])),
    ("tail=quantile:amount:0.9, 0.99:0:500", "tail", dpselect.quantile("amount", [0.9, 0.99], bounds=(0, 500))),
])
def test_metric_specs(spec, name, metric):
    assert cli_aggregate._parse_metric(spec) == (name, metric)


def test_integer_bounds_stay_integers():
    _, metric = cli_aggregate._parse_metric("sum:amount:0:500")
    assert metric.bounds == (0, 500) and all(type(b) is int for b in metric.bounds)


@pytest.mark.parametrize("spec,why", [
    ("", "empty"),
    ("mode:amount", "unknown metric 'mode'"),
    ("quantile:amount", "quantile:COL:Q or quantile:COL:Q:LO:HI"),
    ("quantile:amount:0.5:0", "quantile:COL:Q or quantile:COL:Q:LO:HI"),
    ("quantile:amount:1.5", "must be in [0, 1]"),
    ("quantile:amount:nan", "must be in [0, 1]"),
    ("quantile:amount:half", "must be a number in [0, 1]"),
    ("quantile::0.5", "needs a value column and a quantile"),
    ("quantile:amount:0.5,0.5", "list one twice"),
    ("quantile:amount:0.5,", "must be a number in [0, 1]"),
    ("quantile:amount:0.5,1.5", "must be in [0, 1]"),
    ("quantile:amount:0.5,0.50000000000000001", "list one twice"),
    ("median:amount:5:1", "inverted"),
    ("max:amount:0", "two bounds"),
    ("sum", "needs a value column"),
    ("sum:", "needs a value column"),
    ("mean:amount:0", "two bounds"),
    ("sum:amount:0:1:2", "two bounds"),
    ("sum:amount:low:high", "must be numbers"),
    ("sum:amount:5:1", "inverted"),
    ("sum:amount:0:inf", "finite"),
    ("sum:amount:nan:1", "finite"),
    ("users:amount", "takes no column"),
    ("=users", "NAME before '=' is empty"),
])
def test_bad_metric_specs(spec, why):
    with pytest.raises(cli_common.Fail) as exc:
        cli_aggregate._parse_metric(spec)
    assert exc.value.code == cli.EXIT_USAGE
    message = str(exc.value)
    assert message.startswith(f"--metric {spec!r}") and why in message and ACCEPTED in message


@pytest.mark.parametrize("args,message", [
    (["-m", "sum:amount:5:1"], "inverted"),
    (["-m", "mode:amount"], ACCEPTED),
    (["-m", "users", "-m", "count_distinct_units"], "two metrics would be written to the column 'users'"),
    (["-m", "key=users"], "'key' is also an input column"),
    (["-m", "users", "-m", "users_ci_low=count", "--confidence-level", "0.9"], "'users_ci_low'"),
    (["-m", "sum:amount:0:1", "-m", "mean:amount:0:2"], "two different bounds"),
    (["-m", "sum:key"], "also a --by column"),
    (["-m", "sum:user"], "also --privacy-unit"),
    (["-m", "users", "--value-type", "amount=int64"], "is not the column of a sum or mean --metric"),
    (["-m", "sum:amount", "--value-type", "amount=int32"], "--value-type expects COL=TYPE"),
])
def test_metric_errors_exit_2_before_reading(tmp_path, capsys, args, message):
    src = tmp_path / "in.csv"  # never read: it does not even exist
    out = tmp_path / "out.csv"
    assert run(str(src), *BASE, *args, "-o", str(out)) == cli.EXIT_USAGE
    err = one_error(capsys.readouterr().err)
    assert message in err
    assert not out.exists() and not (tmp_path / "out.csv.guarantee.json").exists()


# ------------------------------------------------------------------------ errors

@pytest.mark.parametrize("extra,code,message", [
    (["--epsilon", "0"], cli.EXIT_USAGE, "--epsilon must be a finite number > 0"),
    (["--delta", "0"], cli.EXIT_USAGE, "--delta must be > 0"),
    (["--delta", "1"], cli.EXIT_USAGE, "--delta must be in (0, 1)"),
    (["--confidence-level", "1"], cli.EXIT_USAGE, "--confidence-level"),
    (["--by", "user"], cli.EXIT_USAGE, "--privacy-unit 'user' cannot also be a --by column"),
    (["--by", "key"], cli.EXIT_USAGE, "--by names 'key' more than once"),
    (["--by", "nope"], cli.EXIT_DATA, "'nope' not found"),
    (["--privacy-unit", "who"], cli.EXIT_DATA, "'who' not found"),
    (["--metric", "sum:missing:0:1"], cli.EXIT_DATA, "'missing' not found"),
    (["--metric", "sum:label:0:1"], cli.EXIT_DATA, "value column 'label'"),
])
def test_errors_name_flags_and_write_nothing(tmp_path, capsys, extra, code, message):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    out = tmp_path / "out.csv"
    assert run(src, *BASE, "--metric", "users", *extra, "-o", str(out)) == code
    err = one_error(capsys.readouterr().err)
    assert message in err
    assert not out.exists() and not (tmp_path / "out.csv.guarantee.json").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("given,missing", [
    ([], ["--max-partitions-contributed", "--max-contributions-per-partition"]),
    (["--max-partitions-contributed", "2"], ["--max-contributions-per-partition"]),
    (["--max-contributions-per-partition", "5"], ["--max-partitions-contributed"]),
])
def test_both_contribution_bounds_are_required(tmp_path, capsys, given, missing):
    """κ and L∞ defaulted to 1, which on real data silently keeps one row of each user. They
    must be given, and the message says how to choose them (never from the private data's own
    exact report). A usage error, before the input (missing here) is read."""
    out = tmp_path / "out.csv"
    assert run(str(tmp_path / "missing.csv"), *PRIVACY, *given, "--metric", "users", "-o", str(out)) == cli.EXIT_USAGE
    err = one_error(capsys.readouterr().err)
    for flag in missing:
        assert f"{flag} " in err
    assert "required" in err and "held-out sample" in err and "--report" in err
    assert not out.exists()


def _raises_overflow(message: str, exception: type = ValueError, read_first: bool = False):
    """A stand-in for dpselect.aggregate that raises ``exception(message)``, before or after
    it asks for its data (as the library checks its parameters before it reads the data)."""
    from dpselect.ingest.frames import to_arrow

    def aggregate(data, **kwargs):
        if read_first:
            to_arrow(data, kwargs["privacy_unit"], kwargs["by"])
        raise exception(message)

    return aggregate


@pytest.mark.parametrize("extra,message", [
    # The library's own check of the budget split, now made before the input is read.
    (["--max-partitions-contributed", "2147483648", "--max-contributions-per-partition", "2147483648",
      "--strategy", "pi_opt"], "is too small for strategy 'pi_opt'"),
    (["--max-partitions-contributed", "2147483648", "--max-contributions-per-partition", "2147483648"],
     "no mechanism can run at these parameters"),
    (["--epsilon", "1e-320"], "argument --epsilon/-e: '1e-320' is too close to 0 for a float64"),
    (["--epsilon", "1" + "0" * 400], "argument --epsilon/-e: '1000"),
    (["--metric", "sum:amount:0:1" + "0" * 400], "the bounds must be at most 1.797"),
    (["--metric", f"mean:amount:-{10**30}:{10**30}"], "is not exactly representable as a float"),
    (["--max-contributions-per-partition", "1" + "0" * 400], "argument --max-contributions-per-partition: expected a "
                                                           "positive integer of at most 2**63 - 1"),
])
def test_parameter_errors_exit_2_before_the_input_is_read(tmp_path, capsys, extra, message):
    """Found after reading (exit 4, as if the data were wrong) or as a raw OverflowError: every
    error that depends on the command line alone is a usage error, before the input (missing
    here) is read."""
    out = tmp_path / "out.csv"
    try:
        code = run(str(tmp_path / "missing.csv"), *BASE, "--metric", "users", *extra, "-o", str(out))
    except SystemExit as exc:  # argparse's own errors: the usage, then the error line
        code = exc.code
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    last = err.strip("\n").split("\n")[-1]
    assert last.startswith("dpselect aggregate: error: ") and message in last and "Traceback" not in err, err
    assert not out.exists()


def test_library_errors_before_the_data_are_usage_errors_after_it_data_errors(tmp_path, capsys, monkeypatch):
    """The library refusing a noise scale up front (a ValueError before it touches the data) is
    a usage error naming the CLI's flags, found before the input is read; what it raises once it
    has the data is a data error (exit 4); an OverflowError is a clean line too, not a traceback."""
    from dpselect.aggregation import plan

    up_front = "max_contributions_per_partition=2147483648 makes the noise scale exceed 2**62"

    def refuse(**kwargs):
        raise ValueError(up_front)

    with monkeypatch.context() as patch:  # the library's one plan refuses: a usage error, input unread
        patch.setattr(plan, "plan_aggregate", refuse)
        assert run(str(tmp_path / "missing.csv"), *BASE, "--metric", "users", "-o", str(tmp_path / "o.csv")) \
            == cli.EXIT_USAGE
    err = one_error(capsys.readouterr().err)
    assert "--max-contributions-per-partition 2147483648 makes the noise scale" in err and "_" not in err.split(": ", 2)[2]
    # The real plan refuses such a scale itself, before the (missing) input is opened.
    assert run(str(tmp_path / "missing.csv"), *PRIVACY, "--max-partitions-contributed", "1",
               "--max-contributions-per-partition", "2147483648", "--metric", "s=sum:amount:0:1",
               "-o", str(tmp_path / "o.csv")) == cli.EXIT_USAGE
    assert "noise scale" in one_error(capsys.readouterr().err)

    src = write(tmp_path / "in.csv", make_table(), "csv")
    monkeypatch.setattr(dpselect, "aggregate", _raises_overflow("value column 'amount' has 2 NaN values", read_first=True))
    assert run(src, *BASE, "--metric", "users", "-o", str(tmp_path / "o.csv")) == cli.EXIT_DATA
    assert "'amount' has 2 NaN values" in one_error(capsys.readouterr().err)
    kernel = ("values[2] + noise does not fit in int64; nothing was released (out was zeroed). Keep |values| and the "
              "noise scale well below 2**62 (use a coarser grid)")
    monkeypatch.setattr(dpselect, "aggregate", _raises_overflow(kernel, OverflowError, read_first=True))
    assert run(src, *BASE, "--metric", "users", "-o", str(tmp_path / "o.csv")) == cli.EXIT_DATA
    err = one_error(capsys.readouterr().err)
    assert "values[2] + noise does not fit in int64; nothing was released" in err and "out was zeroed" not in err
    assert "--max-contributions-per-partition" in err
    assert not (tmp_path / "o.csv").exists() and leftovers(tmp_path) == []


def test_a_huge_row_bound_never_ends_in_a_traceback(tmp_path, capsys):
    """The campaign's case: L∞ = 2**31 made a noisy sum overflow int64 in the kernel, raised as
    a raw OverflowError. Whatever the draw, the run succeeds or fails in one line naming the flag."""
    src = write(tmp_path / "in.csv", make_table(), "csv")
    code = run(src, *PRIVACY, "--max-partitions-contributed", "1", "--max-contributions-per-partition", "2147483648",
               "--metric", "sum:amount:0:10", "-o", str(tmp_path / "o.csv"))
    err = capsys.readouterr().err
    assert code in (cli.EXIT_OK, cli.EXIT_USAGE, cli.EXIT_DATA), err
    if code != cli.EXIT_OK:
        assert "--max-contributions-per-partition" in one_error(err)


def _with_missing_values(real):
    """dpselect.aggregate whose first released key has no value (NaN) for every statistic and
    interval end, as a sum or mean whose bounds were not found for the key gets."""
    import dataclasses

    def aggregate(data, **kwargs):
        result = real(data, **kwargs)
        frame = result.frame
        for i, name in enumerate(frame.column_names):
            if name != "key":
                values = [float("nan")] + [float(v) for v in frame.column(i).to_pylist()[1:]]
                frame = frame.set_column(i, name, pa.array(values, pa.float64()))
        return dataclasses.replace(result, frame=frame)

    return aggregate


def test_a_statistic_without_a_value_is_empty_in_every_format(tmp_path, capsys, monkeypatch):
    """JSON lines had a bare NaN token (not JSON) where --help promises an empty value: every
    line now parses as strict JSON, with null; CSV has an empty cell, Parquet a null."""
    monkeypatch.setattr(dpselect, "aggregate", _with_missing_values(dpselect.aggregate))
    src = write(tmp_path / "in.csv", make_table(), "csv")
    for fmt in ("jsonl", "csv", "parquet"):
        out = str(tmp_path / f"out.{fmt}")
        assert run(src, *BASE, "--metric", "users", "--metric", "mean:amount:0:100", "--confidence-level", "0.9",
                   "-o", out) == 0, capsys.readouterr().err
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) for line in lines]
    assert rows[0] == {"key": rows[0]["key"], **{c: None for c in list(rows[0])[1:]}} and len(rows[0]) == 7
    assert all(isinstance(v, float) for r in rows[1:] for k, v in r.items() if k != "key")
    assert (tmp_path / "out.csv").read_text().splitlines()[1].endswith(",,,,,,")
    assert list(pq.read_table(str(tmp_path / "out.parquet")).to_pylist()[0].values())[1:] == [None] * 6
    capsys.readouterr()


def test_non_numeric_value_columns(tmp_path, capsys):
    table = make_table()
    # Text in a CSV value column: the column is named, with the offending value.
    csv_src = write(tmp_path / "in.csv", table, "csv")
    assert run(csv_src, *BASE, "--metric", "sum:label:0:1", "-o", str(tmp_path / "a.csv")) == cli.EXIT_DATA
    err = one_error(capsys.readouterr().err)
    assert "--metric value column 'label'" in err and "'text' in data row 1" in err and "--value-type" in err
    # int64 reads decimal integers as written: no hexadecimal, no fraction.
    src = tmp_path / "ints.csv"
    for bad, row in (("0x10", 2), ("2.5", 2)):
        src.write_text(f"user,key,amount\nu1,a,7\nu2,a,{bad}\n")
        assert run(str(src), *BASE, "--metric", "sum:amount:0:10", "--value-type", "amount=int64",
                   "-o", str(tmp_path / "a.csv")) == cli.EXIT_DATA
        assert f"the value {bad!r} in data row {row}" in one_error(capsys.readouterr().err)
    # A Parquet text column is refused from its declared type, before any row is read.
    pq_src = write(tmp_path / "in.parquet", table, "parquet")
    assert run(pq_src, *BASE, "--metric", "mean:label", "-o", str(tmp_path / "b.csv")) == cli.EXIT_DATA
    err = one_error(capsys.readouterr().err)
    assert "'label'" in err and "type string" in err and "--value-type label=float64" in err
    # A JSON true is not a number.
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"user": "u1", "key": "a", "amount": 1}\n{"user": "u2", "key": "a", "amount": true}\n')
    assert run(str(jsonl), *BASE, "--metric", "sum:amount:0:1", "-o", str(tmp_path / "c.csv")) == cli.EXIT_DATA
    assert "value column 'amount'" in one_error(capsys.readouterr().err)
    # Empty cells, NaN and infinity are refused (not skipped, not summed).
    for cell, word in (("", "null"), ("nan", "NaN"), ("inf", "infinite")):
        src = tmp_path / "holes.csv"
        src.write_text("user,key,amount\n" + "".join(f"u{i},a,1\n" for i in range(300)) + f"z,a,{cell}\n")
        assert run(str(src), *BASE, "--metric", "sum:amount:0:1", "-o", str(tmp_path / "d.csv")) == cli.EXIT_DATA
        assert word in one_error(capsys.readouterr().err)
    assert not any((tmp_path / n).exists() for n in ("a.csv", "b.csv", "c.csv", "d.csv"))


def test_failed_run_leaves_previous_outputs_as_they_were(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("user,key,amount\n" + "".join(f"u{i},a,{i % 7}\n" for i in range(300)))
    out = tmp_path / "out.csv"
    report = tmp_path / "report.json"
    assert run(str(src), *BASE, "--metric", "sum:amount:0:10", "--report", str(report), "-o", str(out)) == 0
    before = {p: p.read_bytes() for p in (out, tmp_path / "out.csv.guarantee.json", report)}
    capsys.readouterr()
    # A NaN found only once the data is aggregated: nothing of the three files changes.
    with open(src, "a") as f:
        f.write("late,a,nan\n")
    assert run(str(src), *BASE, "--metric", "sum:amount:0:10", "--report", str(report), "-o", str(out)) == cli.EXIT_DATA
    one_error(capsys.readouterr().err)
    assert {p: p.read_bytes() for p in before} == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("target", ["output", "sidecar", "guarantee", "input", "symlink"])
def test_report_refuses_the_paths_of_other_files(tmp_path, capsys, target):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    out = tmp_path / "out.csv"
    extra = []
    if target == "output":
        report = str(out)
    elif target == "sidecar":
        report = str(out) + ".guarantee.json"
    elif target == "guarantee":
        report = str(tmp_path / "g.json")
        extra = ["--guarantee-json", report]
    elif target == "input":
        report = src
    else:
        out.write_text("previous\n")
        report = str(tmp_path / "link.json")
        os.symlink(out, report)
    assert run(src, *BASE, "--metric", "users", *extra, "--report", report, "-o", str(out)) == cli.EXIT_USAGE
    err = one_error(capsys.readouterr().err)
    assert "--report" in err and "NOT differentially private" in err
    assert out.exists() == (target == "symlink")
    if target == "symlink":
        assert out.read_text() == "previous\n"
    assert not (tmp_path / "out.csv.guarantee.json").exists() and leftovers(tmp_path) == []


def test_output_and_sidecar_never_replace_the_input(tmp_path, capsys):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    before = open(src, "rb").read()
    assert run(src, *BASE, "--metric", "users", "-o", src) == cli.EXIT_OUTPUT
    assert "refusing to overwrite the input" in one_error(capsys.readouterr().err)
    assert run(src, *BASE, "--metric", "users", "--guarantee-json", src, "-o", str(tmp_path / "o.csv")) == cli.EXIT_OUTPUT
    assert "--guarantee-json" in one_error(capsys.readouterr().err)
    assert open(src, "rb").read() == before and not (tmp_path / "o.csv").exists()


def test_argparse_errors_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        run("x.csv", *BASE)  # no --metric
    assert exc.value.code == cli.EXIT_USAGE
    assert "dpselect aggregate: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run("--help")
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for phrase in ("--metric", "sum:COL:LO:HI", "users", "guarantee.json", "NOT differentially private",
                   "larger than memory", "--value-type"):
        assert phrase in text


@pytest.mark.slow
def test_console_entry_point(tmp_path):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    out = tmp_path / "out.parquet"
    proc = subprocess.run([sys.executable, "-m", "dpselect.cli", "aggregate", src, *BASE, "--metric", "users",
                           "--metric", "count", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).column_names == ["key", "users", "count"]
    assert (tmp_path / "out.parquet.guarantee.json").exists()
    bad = subprocess.run([sys.executable, "-m", "dpselect.cli", "aggregate", src, *BASE, "--metric", "sum:label",
                          "-o", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == cli.EXIT_DATA and bad.stderr.startswith("dpselect aggregate: error:")
    assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1


def test_noise_flag_reaches_the_plan_and_its_errors_name_the_flag(tmp_path, capsys):
    src = write(tmp_path / "in.csv", make_table(), "csv")
    public = tmp_path / "public.csv"
    public.write_text("key\na\nc\n")
    out = tmp_path / "out.csv"
    common = [src, "-u", "user", "-b", "key", "-e", "4", *BOUNDS, "--metric", "users", "--metric", "rows",
              "--public-partitions", str(public)]
    assert run(*common, "-d", "1e-6", "--noise", "gaussian", "-o", str(out)) == 0
    sidecar = json.loads((tmp_path / "out.csv.guarantee.json").read_text())
    assert all("rho" in c for c in sidecar["components"]) and sidecar["gaussian_group"]["delta"] <= 1e-6
    assert "noise='gaussian'" in sidecar["noise_choice"]
    assert run(*common, "-d", "1e-6", "--noise", "laplace", "-o", str(out)) == 0
    assert json.loads((tmp_path / "out.csv.guarantee.json").read_text())["gaussian_group"] is None
    capsys.readouterr()
    assert run(*common, "-d", "0", "--noise", "gaussian", "-o", str(tmp_path / "other.csv")) == cli.EXIT_USAGE
    err = one_error(capsys.readouterr().err)
    assert "delta = 0" in err and "--noise laplace" in err and "noise=" not in err


def test_quantile_metrics_run_with_intervals(tmp_path, capsys):
    table = make_table()
    src = write(tmp_path / "in.csv", table, "csv")
    out = str(tmp_path / "out.csv")
    code = run(src, *BASE, "--metric", "p90=quantile:amount:0.9:0:100", "--metric", "median:amount:0:100",
               "--metric", "max:amount", "--confidence-level", "0.9", "-o", out)
    err = capsys.readouterr().err
    assert code == 0, err
    rows = read(out, "csv")
    assert list(rows[0]) == ["key", "p90", "p90_ci_low", "p90_ci_high", "median_amount", "median_amount_ci_low",
                             "median_amount_ci_high", "max_amount", "max_amount_ci_low", "max_amount_ci_high"]
    for r in rows:
        assert 0 <= r["median_amount_ci_low"] <= r["median_amount"] <= r["median_amount_ci_high"] <= 100
    assert "p90 = quantile('amount', q=0.9, bounds=(0, 100))" in err


def test_several_quantiles_of_one_metric_are_one_tree_and_one_share(tmp_path, capsys):
    table = make_table()
    src = write(tmp_path / "in.csv", table, "csv")
    out = str(tmp_path / "out.csv")
    code = run(src, *BASE, "--metric", "quantile:amount:0.5,0.9:0:100", "--metric", "count", "-o", out)
    err = capsys.readouterr().err
    assert code == 0, err
    rows = read(out, "csv")
    assert list(rows[0]) == ["key", "quantiles_amount_p50", "quantiles_amount_p90", "count"]
    for r in rows:
        assert 0 <= r["quantiles_amount_p50"] <= 100 and 0 <= r["quantiles_amount_p90"] <= 100
    # one step of the composition for both quantiles: selection + the tree + the count
    assert "quantiles_amount = quantile('amount', q=[0.5, 0.9], bounds=(0, 100))" in err
    assert "(3) count" in err and "(4)" not in err


@pytest.mark.parametrize("quiet", [False, True])
def test_library_warnings_are_said_with_the_cli_flags_and_silenced_by_quiet(tmp_path, capsys, quiet):
    # every user has 3 rows in one key: L = 1 keeps a third of them, which the library warns about
    table = pa.table({"user": [f"u{i // 3}" for i in range(900)], "key": ["a"] * 900, "amount": [1.0] * 900})
    src = write(tmp_path / "in.csv", table, "csv")
    code = run(src, *PRIVACY, "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1",
               "--metric", "count", "-o", str(tmp_path / "out.csv"), *(["--quiet"] if quiet else []))
    err = capsys.readouterr().err
    assert code == 0, err
    if quiet:
        assert err == ""
    else:
        assert "dpselect: warning: contribution bounding kept 300 of 900 rows" in err
        assert "--max-partitions-contributed 1 and --max-contributions-per-partition 1" in err
        assert "max_partitions_contributed" not in err and "BoundingDroppedMostRows" not in err

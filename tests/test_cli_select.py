"""The `dpselect select` command: round trips through every format, batches, every error path."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pcsv = pytest.importorskip("pyarrow.csv")

from dpselect import cli
from file_formats import read_rows, write_table
from dpselect.io.progress import Progress

BIG = {"alpha": 300, "beta": 200, "gamma, with comma": 150, "": 0}
EXPECTED = {"alpha", "beta", "gamma, with comma"}


def make_rows(n_tiny: int = 0) -> pa.Table:
    """Partitions with hundreds of users (kept with probability 1 by pi_opt: count > n2) and
    optional single-user ones, shuffled, with duplicate rows."""
    users, keys = [], []
    next_user = 0
    for key, size in BIG.items():
        for _ in range(size):
            users += [f"u{next_user}"] * 2  # every row twice: duplicates count once
            keys += [key] * 2
            next_user += 1
    for i in range(n_tiny):
        users.append(f"t{i}")
        keys.append(f"tiny{i}")
    order = np.random.Generator(np.random.PCG64(0)).permutation(len(users))
    return pa.table({"user": [users[i] for i in order], "model": [keys[i] for i in order],
                     "other": list(range(len(users)))})


def write_input(path, table: pa.Table, fmt: str) -> str:
    return write_table(path, table, fmt, row_group_size=97)


read_output = read_rows


def run(*args: str) -> int:
    return cli.main(list(args))


BASE = ["--privacy-unit", "user", "--by", "model", "--epsilon", "1", "--delta", "1e-5", "--strategy", "pi_opt"]


@pytest.mark.parametrize("in_fmt,out_fmt", [("csv", "csv"), ("csv.gz", "parquet"), ("parquet", "jsonl"), ("jsonl", "csv")])
def test_round_trip(tmp_path, in_fmt, out_fmt, capsys):
    src = write_input(tmp_path / f"in.{in_fmt}", make_rows(), in_fmt)
    dst = str(tmp_path / f"out.{out_fmt}")
    assert run("select", src, *BASE, "-o", dst) == 0
    rows = read_output(dst, out_fmt)
    assert {r["model"] for r in rows} == EXPECTED
    assert [r["model"] for r in rows] == sorted(r["model"] for r in rows)
    err = capsys.readouterr().err
    assert "released 3 partitions" in err and "differentially private" in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dpselect-")] == []


def test_counts_to_stdout_and_two_key_columns(tmp_path, capfd):
    src = write_input(tmp_path / "in.csv", make_rows(), "csv")
    args = ["--privacy-unit", "user", "--by", "model", "--by", "other", "-e", "1", "-d", "1e-5", "--max-partitions-contributed", "2"]
    assert run("select", src, *args, "--counts", "--quiet") == 0
    captured = capfd.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines()[0] == '"model","other","noisy_count"'
    assert run("select", src, *BASE[:-2], "--counts", "-q") == 0  # TSGD release by default
    lines = capfd.readouterr().out.splitlines()
    assert lines[0] == '"model","noisy_count"'
    released = {line.rsplit(",", 1)[0].strip('"'): int(line.rsplit(",", 1)[1]) for line in lines[1:]}
    assert set(released) == EXPECTED
    assert abs(released["alpha"] - 300) <= 11  # |TSGD noise| <= k = 11 at (1, 1e-5)


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet", "jsonl"])
def test_file_larger_than_batch_size(tmp_path, fmt, capsys):
    """Hundreds of batches, with tiny partitions spread through the file: same release."""
    table = make_rows(n_tiny=300)
    src = write_input(tmp_path / f"in.{fmt}", table, fmt)
    dst = str(tmp_path / "out.csv")
    assert run("select", src, *BASE, "--batch-size", "37", "-o", dst) == 0
    kept = {r["model"] for r in read_output(dst, "csv")}
    # tiny partitions (one user) are kept with probability delta' = 1e-5 each
    assert EXPECTED <= kept and len(kept - EXPECTED) <= 1


def test_shipped_example_data(capsys):
    from importlib import resources

    path = resources.files("dpselect") / "data" / "device_survey.csv.gz"
    assert path.is_file() and os.path.getsize(str(path)) < 3 * 2**20
    code = run("select", str(path), "-u", "user_id", "-b", "device_model", "-e", "1", "-d", "1e-5", "--counts")
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert lines[0] == '"device_model","noisy_count"' and 100 < len(lines) < 2_000


@pytest.mark.parametrize(
    "extra,code,message",
    [
        (["--epsilon", "-1"], cli.EXIT_USAGE, "epsilon"),
        (["--delta", "2"], cli.EXIT_USAGE, "delta"),
        (["--strategy", "nope"], cli.EXIT_USAGE, "strategy"),
        (["--strategy", "pi_opt", "--counts"], cli.EXIT_USAGE, "counts"),
        (["--by", "user"], cli.EXIT_USAGE, "--privacy-unit 'user' cannot also be a --by column"),
        (["--by", "nope"], cli.EXIT_DATA, "'nope' not found"),
        (["--privacy-unit", "who"], cli.EXIT_DATA, "'who' not found"),
        (["--count-column", "model", "--counts"], cli.EXIT_USAGE, "--count-column"),
    ],
)
def test_bad_parameters_and_columns(tmp_path, capsys, extra, code, message):
    src = write_input(tmp_path / "in.csv", make_rows(), "csv")
    args = ["-u", "user", "-b", "model", "-e", "1", "-d", "1e-5", *extra]
    assert run("select", src, *args, "-o", str(tmp_path / "out.csv")) == code
    err = capsys.readouterr().err
    assert err.startswith("dpselect: error:") and message in err
    assert not (tmp_path / "out.csv").exists()


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        run("select", "x.csv", "-u", "user", "-b", "k", "-e", "one", "-d", "1e-5")
    assert exc.value.code == cli.EXIT_USAGE
    with pytest.raises(SystemExit) as exc:
        run("select", "x.csv", "-b", "k", "-e", "1", "-d", "1e-5")
    assert exc.value.code == cli.EXIT_USAGE
    assert "--privacy-unit" in capsys.readouterr().err


def test_input_errors(tmp_path, capsys):
    out = str(tmp_path / "out.csv")
    args = ["-u", "user", "-b", "model", "-e", "1", "-d", "1e-5", "-o", out]
    assert run("select", str(tmp_path / "missing.csv"), *args) == cli.EXIT_INPUT
    assert "does not exist" in capsys.readouterr().err
    assert run("select", str(tmp_path), *args, "--input-format", "csv") == cli.EXIT_INPUT
    assert "directory" in capsys.readouterr().err
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"this is not parquet")
    assert run("select", str(bad), *args) == cli.EXIT_INPUT
    assert "cannot read" in capsys.readouterr().err
    gz = tmp_path / "bad.csv.gz"
    gz.write_bytes(b"not gzip at all")
    assert run("select", str(gz), *args) == cli.EXIT_INPUT
    capsys.readouterr()
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("user,model\n" + "u1,a\n" * 5000 + "u2,b,extra,fields\n")
    assert run("select", str(ragged), *args, "--batch-size", "100") == cli.EXIT_INPUT
    assert "cannot read" in capsys.readouterr().err
    unknown = tmp_path / "data.txt"
    unknown.write_text("user,model\n")
    assert run("select", str(unknown), *args) == cli.EXIT_USAGE
    assert "--input-format" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_output_errors_never_touch_the_input(tmp_path, capsys):
    src = write_input(tmp_path / "in.csv", make_rows(), "csv")
    with open(src, "rb") as f:
        before = f.read()
    args = ["-u", "user", "-b", "model", "-e", "1", "-d", "1e-5"]
    assert run("select", src, *args, "-o", src) == cli.EXIT_OUTPUT
    assert "refusing to overwrite the input" in capsys.readouterr().err
    link = tmp_path / "link.csv"
    os.symlink(src, link)
    assert run("select", src, *args, "-o", str(link)) == cli.EXIT_OUTPUT
    with open(src, "rb") as f:
        assert f.read() == before
    assert run("select", src, *args, "-o", str(tmp_path / "no" / "such" / "dir.csv")) == cli.EXIT_OUTPUT
    assert "does not exist" in capsys.readouterr().err
    assert run("select", src, *args, "-o", str(tmp_path / "out.xlsx")) == cli.EXIT_USAGE
    assert "--output-format" in capsys.readouterr().err


def test_existing_output_replaced_atomically(tmp_path, capsys):
    src = write_input(tmp_path / "in.csv", make_rows(), "csv")
    dst = tmp_path / "out.jsonl"
    dst.write_text("old content\n")
    os.chmod(dst, 0o640)
    assert run("select", src, *BASE, "-o", str(dst)) == 0
    assert {r["model"] for r in read_output(str(dst), "jsonl")} == EXPECTED
    assert os.stat(dst).st_mode & 0o777 == 0o640
    # A failing run leaves the previous output as it was.
    assert run("select", src, *BASE, "--by", "nope", "-o", str(dst)) == cli.EXIT_DATA
    assert {r["model"] for r in read_output(str(dst), "jsonl")} == EXPECTED


def test_progress_bar():
    now = [0.0]
    stream = io.StringIO()
    bar = Progress(True, stream=stream, delay=1.0, interval=0.2, clock=lambda: now[0])
    bar.update(10, 0.1)
    assert stream.getvalue() == ""  # short runs print nothing
    now[0] = 2.0
    bar.update(5_000, 0.5)
    bar.close()
    assert "50.0%" in stream.getvalue() and "5,000 rows" in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    quiet = io.StringIO()
    Progress(False, stream=quiet).update(1, 1.0)
    assert quiet.getvalue() == ""


@pytest.mark.slow
def test_console_entry_point(tmp_path):
    src = write_input(tmp_path / "in.csv", make_rows(), "csv")
    proc = subprocess.run(
        [sys.executable, "-m", "dpselect.cli", "select", src, *BASE, "--progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ['"model"', '"alpha"', '"beta"', '"gamma, with comma"']

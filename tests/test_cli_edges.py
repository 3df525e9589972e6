"""The `dpselect` command at its edges: null and float privacy units, NaN keys, fixed input
types, flags and messages, progress, malformed CSV, unusual outputs, signals, and failures of
standard output and of the random source."""
from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pcsv = pytest.importorskip("pyarrow.csv")

from dpselect import cli
from dpselect.io._csv import _LineTally
from dpselect.io.progress import Progress
from dpselect.mechanisms import make_strategy

BASE = ["--privacy-unit", "user", "--by", "key", "--epsilon", "1", "--delta", "1e-5"]
PI_OPT = [*BASE, "--strategy", "pi_opt"]


def run(*args: str) -> int:
    return cli.main(list(args))


def run_process(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([sys.executable, "-m", "dpselect.cli", *args], text=True, timeout=300,
                          check=False, env={**os.environ, **(env or {})}, **streams)


def csv_text(rows: list[tuple[str, str]]) -> str:
    return "user,key\n" + "".join(f"{u},{k}\n" for u, k in rows)


def popular(n: int = 300, key: str = "popular", prefix: str = "u") -> list[tuple[str, str]]:
    return [(f"{prefix}{i}", key) for i in range(n)]


def leftovers(tmp_path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.name.startswith(".dpselect-")]


# ------------------------------------------------------------------ null and float privacy units

def test_null_privacy_units_fail_the_run_before_any_output(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular() + [("", "popular"), ("", "other")]))  # nulls in the last batch
    out = tmp_path / "out.csv"
    assert run("select", str(src), *PI_OPT, "--batch-size", "50", "-o", str(out)) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert "2 row(s)" in err and "null privacy unit" in err and "--drop-null-privacy-units" in err
    assert "null_privacy_units=" not in err  # CLI advice names CLI flags
    assert not out.exists() and leftovers(tmp_path) == []


def test_dropped_null_privacy_units_are_reported_on_stderr(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular() + [("", "popular")] * 3))
    out = tmp_path / "out.csv"
    assert run("select", str(src), *PI_OPT, "--drop-null-privacy-units", "-o", str(out)) == 0
    err = capsys.readouterr().err
    assert "dropped 3 row(s) with a null privacy unit" in err and "NOT differentially private" in err
    assert pcsv.read_csv(out).column("key").to_pylist() == ["popular"]


def test_float_privacy_unit_column_is_refused(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"user": [0.0, -0.0, 1.0] * 100, "key": ["a"] * 300}), src)
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "out.csv")) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert "--privacy-unit column 'user'" in err and "integer, string or bytes" in err


# ---------------------------------------------------------------------------------------- NaN

def test_a_nan_key_in_a_parquet_file_is_one_key(tmp_path, capsys):
    keys = [1.5] * 200 + [float("nan")] * 150
    table = pa.table({"user": pa.array(range(350), pa.int64()), "key": keys})
    src = tmp_path / "in.parquet"
    pq.write_table(table, src, row_group_size=60)  # NaN in several row groups and batches
    out = tmp_path / "out.parquet"
    assert run("select", str(src), *PI_OPT, "--batch-size", "40", "-o", str(out)) == 0, capsys.readouterr().err
    released = pq.read_table(out).column("key").to_pylist()
    assert released[0] == 1.5 and np.isnan(released[1]) and len(released) == 2


def test_nan_privacy_unit_in_parquet_is_refused_by_type_not_value(tmp_path, capsys):
    for name, units in (("clean", [1.0, 2.0] * 150), ("nan", [1.0, float("nan")] * 150)):
        src = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"user": units, "key": ["a"] * 300}), src)
        assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == cli.EXIT_DATA
        assert "--privacy-unit column 'user'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_nan_text_keys_from_text_formats(tmp_path, suffix, capsys):
    rows = popular(200, "NaN") + popular(200, "1", prefix="v")
    src = tmp_path / f"in.{suffix}"
    if suffix == "csv":
        src.write_text(csv_text(rows))
    else:
        src.write_text("".join(f'{{"user": "{u}", "key": {k}}}\n' for u, k in rows))
    assert run("select", str(src), *PI_OPT, "-q", "--output-format", "jsonl", "-o", str(tmp_path / "o.jsonl")) == 0
    released = [json.loads(line)["key"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert released == ["1", "NaN"]


def _strict(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_json_lines_output_is_strict_json_for_float_keys(tmp_path, capsys):
    """A NaN or infinite float key was written as a bare NaN / Infinity token, which is not
    JSON: every line must parse strictly; such a key is a string, a null key stays null."""
    keys = [float("nan"), float("inf"), float("-inf"), None, 1.5]
    table = pa.table({"user": pa.array(range(300 * len(keys)), pa.int64()),
                      "key": pa.array([k for k in keys for _ in range(300)], pa.float64())})
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    out = tmp_path / "out.jsonl"
    assert run("select", str(src), *PI_OPT, "-q", "-o", str(out)) == 0, capsys.readouterr().err
    rows = [json.loads(line, parse_constant=_strict) for line in out.read_text().splitlines()]
    assert sorted(rows, key=repr) == sorted([{"key": "NaN"}, {"key": "Infinity"}, {"key": "-Infinity"}, {"key": None},
                                             {"key": 1.5}], key=repr)


@pytest.mark.parametrize("extra,message", [
    (["--max-partitions-contributed", "1" + "0" * 400], "argument --max-partitions-contributed: expected a positive "
                                                       "integer of at most 2**63 - 1"),
    (["--epsilon", "1e-320"], "argument --epsilon/-e: '1e-320' is too close to 0 for a float64"),
    (["--delta", "0." + "0" * 400 + "1"], "argument --delta/-d: "),
    (["--strategy", "policy_gaussian", "--option", "alpha=1" + "0" * 400], "lower --max-partitions-contributed or the --option values"),
    (["--strategy", "mixed", "--public-partitions", "public.csv", "--public-threshold", str(2**62 + 1)],
     "argument --public-threshold: expected an integer of at most 2**62"),
])
def test_parameters_out_of_range_exit_2_before_reading(tmp_path, capsys, extra, message):
    """These ended in an OverflowError or ValueError traceback, some only after the input was
    read; the input here does not even exist."""
    out = tmp_path / "o.csv"
    try:
        code = run("select", str(tmp_path / "missing.csv"), *BASE, *extra, "-o", str(out))
    except SystemExit as exc:  # argparse's own errors: the usage, then the error line
        code = exc.code
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    last = err.strip("\n").split("\n")[-1]
    assert last.startswith("dpselect") and message in last and "Traceback" not in err, err
    assert not out.exists()


# ----------------------------------------------------------------- fixed types in JSON lines

def test_json_lines_keys_keep_their_text_whatever_other_rows_hold(tmp_path, capsys):
    """An unreleased 2.5 and an unreleased string must not change how the released 1 is
    written, nor fail the run."""
    lines = [json.dumps({"user": f"u{i}", "key": 1, "other": i}) for i in range(300)]
    lines += [json.dumps({"user": "lonely", "key": 2.5}), json.dumps({"user": "odd", "key": "text", "other": "x"})]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    assert run("select", str(src), *PI_OPT, "--batch-size", "7", "-o", str(out)) == 0, capsys.readouterr().err
    assert out.read_text() == '{"key": "1"}\n'


def test_json_lines_units_are_text_and_bad_lines_are_input_errors(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"user": 1, "key": true}\n{"user": "1", "key": [1, 2]}\nnot json\n')
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == cli.EXIT_INPUT
    assert "line 3: not valid JSON" in capsys.readouterr().err
    lines = [json.dumps({"user": i, "key": "k"}) for i in range(1000)]
    lines[10], lines[776] = "", '{"user": 5, "key": '
    src.write_text("\n".join(lines) + "\n")
    assert run("select", str(src), *PI_OPT, "--block-size", "1K", "-o", str(tmp_path / "o.csv")) == cli.EXIT_INPUT
    assert "line 777: not valid JSON" in capsys.readouterr().err


# --------------------------------------------------------------------------- guarantee text

def test_stderr_states_the_bound_as_enforced(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    assert run("select", str(src), *BASE, "--max-partitions-contributed", "2", "-o", str(tmp_path / "o.csv")) == 0
    err = capsys.readouterr().err
    strategy = make_strategy("release", epsilon=1.0, delta=1e-5, max_partitions_contributed=2)
    assert f"dpselect: {strategy.guarantee.enforced()}\n" in err
    assert "k = " not in err.replace(str(strategy.guarantee.enforced()), "")


# -------------------------------------------------------------------------------- progress

@pytest.fixture()
def instant_progress(monkeypatch):
    """Progress that draws at every update (no delay, no interval), so a test sees each line."""
    monkeypatch.setattr(Progress.__init__, "__defaults__", (None, 0.0, 0.0, time.monotonic))


def percentages(err: str) -> list[float]:
    return [float(p) for p in re.findall(r"\]\s+([0-9.]+)%", err)]


@pytest.mark.parametrize("compressed", [False, True])
def test_progress_follows_what_the_parser_consumed(tmp_path, capsys, instant_progress, compressed):
    gen = np.random.Generator(np.random.PCG64(5))
    pad = gen.integers(0, 2**62, 60_000)  # hard to compress: the .gz file has many blocks too
    text = ("user,key,pad\n" + "".join(f"u{i % 500},k{i % 50},{p:x}\n" for i, p in enumerate(pad))).encode()
    src = tmp_path / ("in.csv.gz" if compressed else "in.csv")
    if compressed:
        import gzip

        src.write_bytes(gzip.compress(text, compresslevel=1))
    else:
        src.write_bytes(text)
    args = ["select", str(src), *PI_OPT, "--progress", "--block-size", "4K", "--batch-size", "100",
            "-o", str(tmp_path / "o.csv")]
    assert run(*args) == 0
    err = capsys.readouterr().err
    seen = percentages(err)
    assert len(seen) > 10
    assert seen[0] < 10.0  # not 100 % from the first redraw: read-ahead is not progress
    assert seen == sorted(seen) and seen[-1] <= 100.0 and seen[-1] > 90.0
    assert "bounding contributions and counting" in err


def test_quiet_wins_over_progress(tmp_path, capsys, instant_progress):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    assert run("select", str(src), *PI_OPT, "--progress", "-q", "-o", str(tmp_path / "o.csv")) == 0
    assert capsys.readouterr().err == ""


def test_progress_phase_is_drawn_only_when_enabled():
    stream = io.StringIO()
    bar = Progress(True, stream=stream, delay=0.0, interval=0.0, clock=lambda: 5.0)
    bar.update(1234, None)
    bar.phase("writing")
    bar.close()
    assert "1,234 rows read; writing" in stream.getvalue()
    silent = io.StringIO()
    Progress(False, stream=silent).phase("writing")
    assert silent.getvalue() == ""


# ------------------------------------------------------------------------- flags and messages

def test_help_names_every_flag_once_and_lists_strategies(capsys):
    with pytest.raises(SystemExit) as exc:
        run("select", "--help")
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--max-partitions-contributed" in text and not re.search(r"(^|\s)-k[\s,]", text)
    from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES

    listed = re.search(r"--strategy \{([a-z_,]+)\}", text).group(1).split(",")
    assert set(listed) == set(STRATEGIES) | set(ROW_STRATEGIES) | {"auto"}
    assert "--block-size" in text and "--drop-null-privacy-units" in text


def test_by_does_not_swallow_the_input_file(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    with pytest.raises(SystemExit) as exc:
        run("select", "--by", "key", "user", str(src), "--privacy-unit", "user", "-e", "1", "-d", "1e-5")
    assert exc.value.code == cli.EXIT_USAGE
    assert "unrecognized arguments" in capsys.readouterr().err
    assert run("select", "--by", "key", str(src), "-u", "user", "-e", "1", "-d", "1e-5", "-q") == 0


def test_bare_command_prints_help_with_an_example_and_version(capsys):
    assert run() == 0
    out = capsys.readouterr().out
    assert "example:" in out and "dpselect select" in out
    with pytest.raises(SystemExit) as exc:
        run("--version")
    assert exc.value.code == 0
    from dpselect import __version__

    assert capsys.readouterr().out.strip() == f"dpselect {__version__}"


@pytest.mark.parametrize("extra,message", [
    (["--delta", "0"], "--delta must be > 0: with delta = 0 no key can be released (Theorem 2"),
    (["--delta", "nan"], "--delta must be in (0, 1)"),
    (["--epsilon", "inf"], "--epsilon must be a finite number"),
    (["--strategy", "pi_opt", "--counts"], "--counts needs a strategy that releases noisy counts (--strategy release, public or mixed)"),
    (["--counts", "--count-column", "user"], "--count-column 'user' clashes"),
    (["--by", "key"], "--by names 'key' more than once"),
])
def test_parameter_errors_name_the_flags(tmp_path, capsys, extra, message):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    assert run("select", str(src), *BASE, *extra, "-o", str(tmp_path / "o.csv")) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert not re.search(r"\b(allow_no_release|count_column|privacy_unit|max_partitions_contributed)\b", err)


# ------------------------------------------------------------------------------ CSV content

def test_an_unterminated_quote_is_an_input_error(tmp_path, capsys):
    lines = [f"u{i},k{i % 3}" for i in range(450)] + ['u450,"k0'] + [f"u{i},k{i % 3}" for i in range(451, 900)]
    src = tmp_path / "in.csv"
    src.write_text("user,key\n" + "\n".join(lines) + "\n")
    out = tmp_path / "out.csv"
    assert run("select", str(src), *PI_OPT, "-o", str(out)) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert "read 451 rows but the file has 900" in err and "unterminated quote" in err
    assert not out.exists()


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.one_of(st.just(""), st.tuples(st.sampled_from(["u1", "u2", '"u,3"', "x"]),
                                                    st.sampled_from(["a", "", '"b"', 'c"d']))),
                   min_size=0, max_size=40),
    endings=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=3),
    final=st.booleans(),
    cut=st.integers(1, 7),
)
def test_line_tally_agrees_with_pyarrow_on_well_formed_csv(lines, endings, final, cut):
    """For CSV without line breaks inside quotes: rows parsed + header + empty lines = lines,
    however the bytes are cut into pieces."""
    ending = endings[0]  # pyarrow reads one convention per file; mixed \r and \n are ambiguous
    body = ["user,key"] + ["" if line == "" else f"{line[0]},{line[1]}" for line in lines]
    text = ending.join(body) + (ending if final else "")
    data = text.encode()
    try:
        rows = pcsv.read_csv(io.BytesIO(data), convert_options=pcsv.ConvertOptions(
            column_types={"user": pa.string(), "key": pa.string()})).num_rows
    except pa.ArrowInvalid:  # e.g. a header without a line break and nothing else
        assume(False)
    tally = _LineTally()
    for start in range(0, len(data), cut):
        tally.feed(data[start:start + cut])
    tally.finish()
    assert rows + 1 + tally.empty == tally.lines


def test_header_longer_than_64k_is_read(tmp_path, capsys):
    extra = [f"column_{i:06d}" for i in range(8_000)]
    header = ",".join(["user", "key", *extra])
    assert len(header) > 64 * 1024
    filler = "," * len(extra)
    src = tmp_path / "wide.csv"
    src.write_text(header + "\n" + "".join(f"u{i},popular{filler}\n" for i in range(300)))
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == 0, capsys.readouterr().err


def test_a_row_larger_than_a_block_names_the_flag(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular() + [("big", "x" * 20_000)] + popular(50, prefix="w")))
    assert run("select", str(src), *PI_OPT, "--block-size", "4K", "-o", str(tmp_path / "o.csv")) == cli.EXIT_INPUT
    assert "--block-size" in capsys.readouterr().err
    assert run("select", str(src), *PI_OPT, "--block-size", "64K", "-o", str(tmp_path / "o.csv")) == 0


@pytest.mark.parametrize("codec,suffix", [("bz2", "bz2"), ("zstd", "zst"), ("lz4", "lz4"), ("gzip", "gz")])
def test_tsv_under_any_compression_is_tab_separated(tmp_path, capsys, codec, suffix):
    if not pa.Codec.is_available(codec):
        pytest.skip(f"{codec} not built into this pyarrow")
    text = csv_text(popular(300, "a, with comma")).replace(",", "\t", 1).encode()
    text = b"user\tkey\n" + b"".join(f"u{i}\ta, with comma\n".encode() for i in range(300))
    src = tmp_path / f"in.tsv.{suffix}"
    with pa.CompressedOutputStream(str(src), codec) as f:
        f.write(text)
    out = tmp_path / "o.jsonl"
    assert run("select", str(src), *PI_OPT, "-o", str(out)) == 0, capsys.readouterr().err
    assert out.read_text() == '{"key": "a, with comma"}\n'


def test_duplicate_header_names_are_refused(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("user,key,key\n" + "".join(f"u{i},a,b\n" for i in range(300)))
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == cli.EXIT_DATA
    assert "'key' appear more than once" in capsys.readouterr().err


def test_binary_keys_with_csv_output_fail_before_the_work(tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"user": list(range(300)), "key": [b"\xff\x00"] * 300}), src)
    from dpselect.ingest import rows

    def no_work(*args, **kwargs):
        raise AssertionError("the rows were read")

    monkeypatch.setattr(rows.RowCounter, "feed", no_work)
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == cli.EXIT_USAGE
    assert "--output-format parquet" in capsys.readouterr().err
    monkeypatch.undo()
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.parquet")) == 0
    assert pq.read_table(tmp_path / "o.parquet").column("key").to_pylist() == [b"\xff\x00"]


# ---------------------------------------------------------------------------- unusual outputs

def test_a_fifo_output_is_written_through_not_replaced(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    fifo = tmp_path / "released"  # no extension: like standard output, CSV
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        code = run("select", str(src), *PI_OPT, "-o", str(fifo))
    finally:
        # After a successful write the reader is finishing on its own: wait for it. Only a reader
        # still blocked in open() (the writer never opened the pipe) needs a writer to come and
        # go. That open must not block: a blocking open for writing after the reader has left
        # would wait forever for a reader that never comes.
        reader.join(timeout=30)
        if reader.is_alive():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader has the pipe open any more
                pass
            reader.join(timeout=30)
    assert not reader.is_alive(), "the reader of the FIFO never finished"
    assert code == 0, capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got == [b'"key"\n"popular"\n'] and leftovers(tmp_path) == []


def test_a_symlinked_output_replaces_its_target(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    os.symlink(real, link)
    assert run("select", str(src), *PI_OPT, "-q", "-o", str(link)) == 0
    assert os.path.islink(link) and os.readlink(link) == str(real)
    assert real.read_text() == '"key"\n"popular"\n'
    dangling = tmp_path / "dangling.csv"
    os.symlink(tmp_path / "new.csv", dangling)
    assert run("select", str(src), *PI_OPT, "-q", "-o", str(dangling)) == 0
    assert os.path.islink(dangling) and (tmp_path / "new.csv").read_text() == '"key"\n"popular"\n'


def test_a_read_only_output_is_never_replaced(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    os.chmod(out, 0o444)
    assert run("select", str(src), *PI_OPT, "-o", str(out)) == cli.EXIT_OUTPUT
    assert "read-only" in capsys.readouterr().err
    assert out.read_text() == "keep me\n" and leftovers(tmp_path) == []


@pytest.mark.slow
def test_sigterm_while_writing_removes_the_temporary_file(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    out = tmp_path / "out.csv"
    proc = run_process("select", str(src), *PI_OPT, "-o", str(out), env={"DPSELECT_TEST_SIGTERM_AT": "write"})
    assert proc.returncode == cli.EXIT_TERMINATED, proc.stderr
    assert "terminated" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.slow
def test_closed_standard_output_is_an_output_error(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    proc = subprocess.run(["sh", "-c", f'exec "$0" -m dpselect.cli select "$1" {" ".join(PI_OPT)} >&-',
                           sys.executable, str(src)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == cli.EXIT_OUTPUT, proc.stderr
    assert "standard output is closed" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_full_standard_output_is_an_output_error(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    with open("/dev/full", "wb") as full:
        proc = run_process("select", str(src), *PI_OPT, stdout=full)
    assert proc.returncode == cli.EXIT_OUTPUT, proc.stderr
    assert "cannot write to standard output" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------- random source fails

RNG_FAILURE = "the operating system's random number generator failed; dpselect refuses to continue without it"


def test_rng_failure_before_the_work_exits_with_its_own_code(tmp_path, capsys, monkeypatch):
    from dpselect.rng import SecureRNG

    def broken(self, n):
        raise RuntimeError(RNG_FAILURE)

    monkeypatch.setattr(SecureRNG, "random_bytes", broken)
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    assert run("select", str(src), *PI_OPT, "-o", str(tmp_path / "o.csv")) == cli.EXIT_RNG
    err = capsys.readouterr().err
    assert "secure randomness is unavailable" in err and "nothing was released" in err


def test_rng_failure_during_bounding_releases_nothing(tmp_path, capsys, monkeypatch):
    from dpselect.ingest import rows

    def broken(self, *args, **kwargs):
        raise RuntimeError(RNG_FAILURE)

    monkeypatch.setattr(rows.RowCounter, "finish", broken)
    src = tmp_path / "in.csv"
    src.write_text(csv_text(popular()))
    out = tmp_path / "o.csv"
    assert run("select", str(src), *PI_OPT, "-o", str(out)) == cli.EXIT_RNG
    assert "nothing was released" in capsys.readouterr().err
    assert not out.exists()

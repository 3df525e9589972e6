"""Inputs the fuzz targets (fuzz/, docs/fuzzing.md) found to crash, hang or misbehave, minimized
and kept here as plain tests, each with the fix's expected behaviour."""
from __future__ import annotations

import base64
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpselect

pa = pytest.importorskip("pyarrow")


# ------------------------------------------------------------------ fuzz_rows

@pytest.mark.parametrize("view", ["string_view", "binary_view"])
@pytest.mark.parametrize("column", ["u", "k"])
def test_view_columns_with_dropped_null_privacy_units(view: str, column: str) -> None:
    """fuzz_rows: a string/binary view column in a batch with null privacy units, rows dropped
    (null_privacy_units="drop"), raised ArrowNotImplementedError: pyarrow cannot filter views."""
    from dpselect.ingest.rows import RowCounter

    typ = getattr(pa, view)()
    wrap = (lambda v: v) if view == "string_view" else (lambda v: None if v is None else v.encode())
    users = pa.array([wrap(v) for v in ["a", None, "b", "a"]], typ if column == "u" else pa.string())
    keys = pa.array([wrap(v) for v in ["x", "y", "x", "z"]], typ if column == "k" else pa.string())
    counter = RowCounter("u", ["k"], null_privacy_units="drop")
    counter.feed(pa.table({"u": users, "k": keys}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = counter.finish(2 ** 63, None)
    assert counter.null_unit_rows == 1
    key = wrap if column == "k" else (lambda v: v)
    expected = {key("x"): 2, key("z"): 1}
    assert dict(zip(result.keys.column("k").to_pylist(), result.counts.tolist())) == expected


def test_select_partitions_on_a_view_table_with_dropped_null_units() -> None:
    """The same through the public API, and through aggregate (its encoding path)."""
    table = pa.table({"u": pa.array(["a", None, "b"] * 200, pa.string_view()),
                      "k": pa.array(["x", "y", "z"] * 200, pa.string_view())})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = dpselect.select_partitions(table, privacy_unit="u", by="k", epsilon=1.0, delta=1e-5,
                                         null_privacy_units="drop")
        agg = dpselect.aggregate(table, privacy_unit="u", by="k", metrics={"n": dpselect.count()},
                                 epsilon=1.0, delta=1e-5, null_privacy_units="drop", max_partitions_contributed=1, max_contributions_per_partition=1)
    assert set(out.column("k").to_pylist()) <= {"x", "z"}
    assert set(agg.frame.column("k").to_pylist()) <= {"x", "z"}


# ------------------------------------------------------------------ fuzz_select

def test_gaussian_thresholding_with_a_tiny_epsilon_is_refused_at_once() -> None:
    """fuzz_select (hang): ε = 1e-3, δ = 1e-12, κ = 1000 made Gaussian thresholding compute exact
    normal-CDF bounds for millions of table entries (hours) before refusing the table as too long.
    The table cannot end before n = T + 15σ: beyond MAX_TABLE_ENTRIES it is refused before any."""
    from dpselect.mechanisms import gaussian

    calls = []
    original = gaussian.normal_cdf_bounds

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    gaussian.normal_cdf_bounds = counted
    try:
        with pytest.raises(ValueError, match="too long"):
            dpselect.select(np.arange(10), 0.001, 1e-12, strategy="gaussian", max_partitions_contributed=1000)
    finally:
        gaussian.normal_cdf_bounds = original
    assert len(calls) < 1000, f"{len(calls)} exact CDF evaluations before the refusal"


@pytest.mark.parametrize(("epsilon", "kappa", "shown"), [(5e-324, 10 ** 6, "5e-330"), (5e-324, 2 ** 64, "2.71e-343"),
                                                       (1e-300, 10 ** 30, "1e-330")])
def test_laplace_thresholding_at_an_epsilon_per_partition_below_the_floats_is_refused(epsilon, kappa, shown) -> None:
    """fuzz_select (ZeroDivisionError): ε = 5e-324 with κ = 10^6 made ε/κ a positive rational whose
    float is 0, and the table-length estimate divided by it. Such a table is endless: refused
    like any too long, with ε/κ printed as it is."""
    for call in (lambda: dpselect.select(np.array([], np.int64), epsilon, 1e-5, strategy="laplace",
                                         max_partitions_contributed=kappa),
                 lambda: dpselect.keep_probability(np.arange(3), epsilon, 1e-5, strategy="laplace",
                                                   max_partitions_contributed=kappa)):
        with pytest.raises(ValueError, match=rf"epsilon per partition {shown} is too small .* more than 1e308"):
            call()


def test_laplace_thresholding_just_above_the_refusal_still_builds() -> None:
    strategy = dpselect.make_strategy("laplace", epsilon=0.05, delta=1e-5, max_partitions_contributed=1)
    assert strategy.table.length > 100


@pytest.mark.parametrize("strategy", ["weighted_gaussian", "weighted_laplace", "dp_sips", "policy_gaussian",
                                      "policy_laplace"])
@pytest.mark.parametrize("kappa", [10 ** 6, 2 ** 63])
def test_weighted_mechanisms_refuse_a_huge_kappa_at_once(strategy: str, kappa: int) -> None:
    """fuzz_select (hang): κ = 10^6 made the weighted mechanisms certify a threshold for every set
    size 1..κ (about 10 ms each: hours), and κ = 2^63 tried to build a weight table of 2^63 entries."""
    from dpselect.mechanisms.weighted import MAX_KAPPA

    assert kappa > MAX_KAPPA
    with pytest.raises(ValueError, match="max_partitions_contributed up to"):
        dpselect.make_strategy(strategy, epsilon=1.0, delta=1e-5, max_partitions_contributed=kappa)
    users = np.array([0, 1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="max_partitions_contributed up to"):
        dpselect.select_rows(users, users, 1.0, 1e-5, strategy=strategy, max_partitions_contributed=kappa)


@pytest.mark.parametrize("strategy", ["weighted_gaussian", "dp_sips", "policy_gaussian"])
def test_weighted_gaussian_mechanisms_refuse_a_delta_they_cannot_certify_at_once(strategy: str, monkeypatch) -> None:
    """fuzz_select (timeout): keep_probability(strategy="weighted_gaussian") at ε = 20, δ = 1e-300,
    κ = 10 calibrated σ for minutes. The rational bounds on Φ are 2^-256 wide, so no σ could be
    proven at that δ: each of the 400 steps failed, on ever longer fractions, before a ValueError
    about the noise. Such a δ is refused before σ is calibrated."""
    from dpselect.mechanisms import registry, weighted

    registry._built.cache_clear()
    calls = []
    monkeypatch.setattr(weighted, "certified_sigma", lambda *args: calls.append(args))
    with pytest.raises(ValueError, match=r"delta = 1e-300 is too small for .* at least 2\*\*-160"):
        dpselect.make_strategy(strategy, epsilon=20.0, delta=1e-300, max_partitions_contributed=10)
    with pytest.raises(ValueError, match="too small"):
        dpselect.keep_probability(np.array([], np.int64), 20.0, 1e-300, strategy=strategy,
                                  max_partitions_contributed=10)
    assert calls == []


def test_weighted_gaussian_still_takes_a_delta_above_the_floor() -> None:
    from dpselect.mechanisms.weighted import MIN_GAUSSIAN_DELTA

    strat = dpselect.make_strategy("weighted_gaussian", epsilon=50.0, delta=1e-44, max_partitions_contributed=1)
    assert strat.certified_delta <= Fraction(1, 10**44) and 1e-44 / 2 > MIN_GAUSSIAN_DELTA


def test_weighted_mechanisms_still_take_a_moderate_kappa() -> None:
    strat = dpselect.make_strategy("weighted_laplace", epsilon=1.0, delta=1e-5, max_partitions_contributed=20)
    assert strat.max_partitions_contributed == 20


@pytest.mark.parametrize("strategy", ["weighted_gaussian", "weighted_laplace", "dp_sips", "policy_gaussian",
                                      "policy_laplace", "mixed"])
def test_keep_probability_of_a_strategy_without_one_is_a_value_error(strategy: str) -> None:
    """fuzz_select: keep_probability(strategy="weighted_gaussian") raised AttributeError (the row
    mechanisms and the mixed release have no keep probability of a count alone)."""
    with pytest.raises(ValueError, match="count-based strategies"):
        dpselect.keep_probability(np.array([], dtype=np.uint16), 10.0, 0.5, strategy=strategy)


@pytest.mark.parametrize("strategy", ["pi_opt", "release", "laplace", "gaussian", "auto", "public"])
def test_keep_probability_of_count_based_strategies_still_works(strategy: str) -> None:
    p = dpselect.keep_probability(np.array([0, 5, 50, 500]), 1.0, 1e-5, strategy=strategy)
    assert p.shape == (4,) and np.all((p >= 0) & (p <= 1))


@pytest.mark.parametrize("strategy", ["weighted_gaussian", "weighted_laplace", "dp_sips", "policy_gaussian",
                                      "policy_laplace"])
@pytest.mark.parametrize("epsilon", [50.5, 1e3, 1e300])
def test_weighted_mechanisms_refuse_a_huge_epsilon_at_once(strategy: str, epsilon: float) -> None:
    """fuzz_select (out of memory, hang): ε = 1e300 made the weighted mechanisms' exact arithmetic
    (e^ε's series, the analytic Gaussian bound's tails) grow without end."""
    from dpselect.mechanisms.weighted import MAX_EPSILON

    assert epsilon > MAX_EPSILON
    with pytest.raises(ValueError, match="epsilon up to"):
        dpselect.make_strategy(strategy, epsilon=epsilon, delta=0.1, max_partitions_contributed=2)


def test_weighted_mechanisms_take_epsilon_up_to_the_limit() -> None:
    from dpselect.mechanisms.weighted import MAX_EPSILON

    strat = dpselect.make_strategy("weighted_laplace", epsilon=MAX_EPSILON, delta=0.1, max_partitions_contributed=2)
    assert strat.params.epsilon == MAX_EPSILON


# ------------------------------------------------------------------ fuzz_files

# A small Parquet file (columns u, k, k2, v) with one byte of a page header changed: pyarrow opens
# it, then fails on the first batch with a two-line message ("...No more data to read.\n
# Deserializing page header failed.").
CORRUPT_PARQUET = (
    "eNqVVb9vUkEcv7v3wCchhja9y3sJA0N7waStUtMOhqQ9KLRGiEjSGBMXeEFqiIIPS2njYIxDhw7+AQ4Ojp2MYwcHRwcHR4f+EQ4d"
    "HLzvvQc85JD0G3I/vnffz+dzH76BiqhmqEkXqF2SE5pHKLaIEUI1GOoU0XnKluVJgkZpNLmB0rhu49rcnDy9niJyNDE2iA6hD8OR"
    "DuHI9voahARdGCBYSSiGw3/rbROytgnnDKVDOw1iii4OEBNZpOJy05/R1gSyNTgZrC43JYMmq2GK0RslShRTJAFq3ImHkzR2beyG"
    "ig2CCdIV93XFfRuHXTOwXzzmmgGStK6ZyicjcG20m/Y9kADRf3NyqlvJrdGKkbQmO/lg58k6sqNdd7/xvEYtRONLxMYHS6gEbP6u"
    "NdgRuSOtNURjkO4hZjnLTomjJI076yiacGQlJcxkr9k7zLPcCveoA3olBviRkFOWmU7U4cqiMYjWCOIr5qc4aFNl+CwQEoBIlQrl"
    "A2afJAzh78n/u3UC+GYYNjbQ1lOo3zH7iflvg38xrtap01nYhclMbrE3EaR11GPH/HOEn0TCvTvpBgE3CNFbChhnUf52rIVnYegd"
    "PbvG/8zo5Cs5eo7ZN8x/WPyjdbVu1rIo8ewcHD2JsF8mcpJ2XFSrDx7d9RvdviC3IA5FTgjxUPhxXwiZaIqiEE2Rb6pcTl4owyIv"
    "xD2VGM1Bab4FqzoM2wqqAMPTisKXV8oquTO8HwQsdx8Dn8RTsx/NfBukKYp9lXFHfCKQIkTtGGQ0xbbS4/pJFQWFdGfIv6dIizr+"
    "nS6ILgOfFL0HeFLHLvigbgxJC0X1KF9kYQQCy1wm0FcI4yM71al5Lw8ar1bcTmel5nntw1Sv4XWftV+k1jZWb69mHPhVGX7QqeyN"
    "ivwH/At+TOVn"
)


def test_a_corrupt_parquet_page_is_a_one_line_input_error(tmp_path, capsys) -> None:
    """fuzz_files: the CLI printed pyarrow's multi-line message as is: the error took three lines."""
    import zlib

    from dpselect import cli

    src = tmp_path / "in.parquet"
    src.write_bytes(zlib.decompress(base64.b64decode("".join(CORRUPT_PARQUET))))
    before = src.read_bytes()
    out = tmp_path / "out" / "released.parquet"
    out.parent.mkdir()
    code = cli.main(["select", str(src), "--privacy-unit", "u", "--by", "k", "--epsilon", "1", "--delta", "1e-5",
                     "--counts", "-q", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INPUT, err
    assert err.count("\n") == 1 and err.startswith("dpselect: error: cannot read "), repr(err)
    assert "Deserializing page header failed" in err
    assert list(out.parent.iterdir()) == [] and src.read_bytes() == before


def test_a_reader_failing_while_iterating_gives_a_one_line_input_error(tmp_path) -> None:
    from dpselect.io import files

    src = tmp_path / "in.csv"
    src.write_text("u,k\n1,a\n")
    source = files.open_batches(str(src), "csv", ["u", "k"], 10)

    def failing():
        yield from []
        raise pa.ArrowInvalid("first line\nsecond line\n")

    source.batches = files._reading(str(src), "csv", failing())
    with pytest.raises(files.InputError) as info:
        list(source.batches)
    assert str(info.value) == f"cannot read {str(src)!r} as csv: first line; second line"


# ------------------------------------------------------------------ fuzz_rows, fuzz_select (second run)

@pytest.mark.parametrize("policy", ["error", "drop"])
def test_a_null_dictionary_value_is_a_null_privacy_unit(policy: str) -> None:
    """fuzz_rows: a dictionary privacy-unit column whose *dictionary* holds a null (an index
    pointing at it: dictionary_encode(null_encoding="encode")) has null_count 0, so those rows
    were neither refused nor dropped: they were counted as one user, the "null" person."""
    units = pa.array(["a", None, "b", None, None]).dictionary_encode(null_encoding="encode")
    assert units.null_count == 0  # what made the rows slip through
    table = pa.table({"u": units, "k": ["x", "y", "x", "y", "z"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if policy == "error":
            from dpselect.ingest.rows import NullPrivacyUnitError

            with pytest.raises(NullPrivacyUnitError, match="3 row"):
                dpselect.select_partitions(table, privacy_unit="u", by="k", epsilon=1.0, delta=1e-5)
            return
        from dpselect.ingest.rows import RowCounter

        counter = RowCounter("u", ["k"], null_privacy_units="drop")
        counter.feed(table)
        result = counter.finish(2 ** 63, None)
    assert counter.null_unit_rows == 3
    assert dict(zip(result.keys.column("k").to_pylist(), result.counts.tolist())) == {"x": 2}


def test_a_null_dictionary_value_is_refused_in_aggregate_too() -> None:
    from dpselect.ingest.rows import NullPrivacyUnitError

    units = pa.array(["a", None] * 50).dictionary_encode(null_encoding="encode")
    table = pa.table({"u": units, "k": ["x"] * 100})
    with pytest.raises(NullPrivacyUnitError):
        dpselect.aggregate(table, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=1.0,
                           delta=1e-5, max_partitions_contributed=1, max_contributions_per_partition=1)


@pytest.mark.parametrize("strategy", ["weighted_gaussian", "weighted_laplace", "dp_sips", "policy_laplace"])
def test_select_with_a_row_strategy_is_a_value_error(strategy: str) -> None:
    """fuzz_select: dpselect.select(counts, strategy="weighted_gaussian") raised AttributeError
    ('WeightedGaussian' object has no attribute 'apply')."""
    with pytest.raises(ValueError, match="select_rows"):
        dpselect.select(np.arange(5), 1.0, 1e-5, strategy=strategy)


@pytest.mark.parametrize("where", ["first block", "later block"])
@pytest.mark.parametrize("command", ["select", "aggregate"])
def test_csv_bytes_that_are_not_utf8_are_a_one_line_input_error(tmp_path, capsys, where: str, command: str) -> None:
    """fuzz_files: a key or privacy-unit cell that is not UTF-8 made pyarrow report a "conversion
    error", which the CSV reader took for a bad *value column* (ValueColumnError naming 'u'): it
    escaped `dpselect select` as a traceback."""
    from dpselect import cli

    src = tmp_path / "in.csv"
    bad = b"a\xff\xff,x,1\n"
    rows = b"".join(b"u%d,k,1\n" % i for i in range(3000))
    src.write_bytes(b"u,k,v\n" + (bad + rows if where == "first block" else rows + bad))
    before = src.read_bytes()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    extra = ["--max-partitions-contributed", "1", "--max-contributions-per-partition", "1", "--metric", "sum:v:0:2"] \
        if command == "aggregate" else []
    code = cli.main([command, str(src), "--privacy-unit", "u", "--by", "k", "--epsilon", "1", "--delta", "1e-5",
                     "--block-size", "1K", *extra, "-o", str(out_dir / "o.parquet")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INPUT, err
    assert err.count("\n") == 1 and "column 'u'" in err and "UTF-8" in err, err
    assert list(out_dir.iterdir()) == [] and src.read_bytes() == before


def test_a_value_column_that_is_not_a_number_is_still_a_value_error(tmp_path, capsys) -> None:
    from dpselect import cli

    src = tmp_path / "in.csv"
    src.write_text("u,k,v\n" + "".join(f"u{i},k,1\n" for i in range(50)) + "x,k,abc\n")
    code = cli.main(["aggregate", str(src), "--privacy-unit", "u", "--by", "k", "--epsilon", "1", "--delta", "1e-5",
                     "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1",
                     "--metric", "sum:v:0:2", "-o", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_DATA and "value column 'v'" in err, err


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_the_csv_header_is_parsed_from_arrow_memory_not_a_python_object(tmp_path, monkeypatch, suffix: str) -> None:
    """fuzz_files once ran all its inputs and then never exited: libFuzzer's C exit() (the GIL
    held) shut pyarrow's thread pool down while one of its threads was freeing the header
    reader's buffer, which was a Python bytes object, and needed the GIL for it. The buffer
    handed to pyarrow's CSV reader must be Arrow's own (no Python parent)."""
    import gzip

    from dpselect.io import _csv as files

    path = tmp_path / f"rows.csv{suffix}"
    text = b"user,key\n1,a\n2,b\n"
    path.write_bytes(gzip.compress(text) if suffix else text)
    given: list[object] = []
    real = pa.BufferReader

    def recording(obj: object) -> object:
        given.append(obj)
        return real(obj)

    monkeypatch.setattr(pa, "BufferReader", recording)
    assert files._csv_header(str(path), ",", 1 << 20) == ["user", "key"]
    assert given, "the header was not read through a BufferReader"
    for obj in given:
        while obj is not None:  # a slice's parent is the buffer it was cut from, and so on
            assert isinstance(obj, pa.Buffer), f"the reader's buffer is backed by a {type(obj).__name__}"
            obj = obj.parent


# ------------------------------------------------------------------ the targets themselves

FUZZ_DIR = Path(__file__).resolve().parents[1] / "fuzz"


@pytest.mark.skipif(not (FUZZ_DIR / "run.sh").is_file(), reason="runs on a source checkout with fuzz/")
@pytest.mark.parametrize("target", ["rows", "select", "bound", "files"])
def test_fuzz_target_passes_on_its_seed_corpus(target: str) -> None:
    """Each fuzz target, run by libFuzzer on its committed seeds only (-runs=0: no mutation), so a
    change that breaks a target's property or the target itself shows up in the test suite."""
    pytest.importorskip("atheris")
    seeds = sorted((FUZZ_DIR / "corpus" / target).iterdir())
    assert seeds, f"no seeds in fuzz/corpus/{target}"
    # -rss_limit_mb as fuzz/run.sh gives it: room for pyarrow. libFuzzer's default of 2048 MB is
    # too tight under the sanitizers (every Python allocation through ASan's malloc and its
    # quarantine), where a seed run reached 2066 MB on its first input.
    proc = subprocess.run([sys.executable, str(FUZZ_DIR / f"fuzz_{target}.py"), "-runs=0", "-timeout=120",
                           "-rss_limit_mb=4096", *map(str, seeds)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=FUZZ_DIR.parent)
    tail = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("INFO: Instrumenting"))[-3000:]
    assert proc.returncode == 0, tail
    assert "Executed" in proc.stderr or "Done" in proc.stderr, tail

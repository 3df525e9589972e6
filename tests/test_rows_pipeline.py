"""The fast raw-rows path keeps the results of the plain one: the two-thread encoding pipeline
(pieces of a batch), the pair-set size hint, the CLI's read-ahead of batches, and Arrow arrays
made from numpy without importing pandas."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from dpselect.ingest import _counter as rows  # noqa: E402
from dpselect.io.files import read_ahead  # noqa: E402
from dpselect.ingest.rows import RowCounter, arrow_from_numpy  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402


def table(n: int = 5_000) -> pa.Table:
    index = np.arange(n)
    return pa.table({
        "user": pa.array([f"u{(i * 7) % 900}" for i in index]),
        "key": pa.array([f"k{(i * 13) % 37}" if i % 11 else None for i in index]),
        "region": pa.array((index % 3).astype(np.int16)),
    })


def counts(t: pa.Table, by: list[str], *, hint: int = 0, seed: int = 5) -> tuple[list, list]:
    counter = RowCounter("user", by)
    counter.expect_rows(hint)
    counter.feed(t)
    with pytest.warns(UserWarning):  # the test RNG announces itself
        result = counter.finish(2, None, rng=InsecureDeterministicRNG(seed))
    return result.keys.to_pylist(), result.counts.tolist()


@pytest.mark.parametrize("by", [["key"], ["key", "region"]])
def test_pieces_of_a_batch_give_the_counts_of_one_piece(monkeypatch, by):
    t = table()
    whole = counts(t, by)
    monkeypatch.setattr(rows, "_PIECE_ROWS", 7)  # hundreds of pieces, overlapping on two threads
    assert counts(t, by) == whole
    # and with the pair set sized from a hint instead of growing
    assert counts(t, by, hint=t.num_rows) == whole


@pytest.mark.slow
def test_the_size_hint_is_capped_and_ignored_after_the_first_feed():
    counter = RowCounter("user", ["key"])
    counter.expect_rows(10**12)
    assert counter._expected_rows == rows._PRESIZE_CAP
    counter.feed(table(10))
    counter.expect_rows(5)  # too late: the pair set exists
    assert counter._expected_rows == rows._PRESIZE_CAP


def test_an_error_in_the_key_thread_reaches_the_caller(monkeypatch):
    counter = RowCounter("user", ["key"])

    def broken(self, column):
        raise ValueError("column 'key' is broken")

    monkeypatch.setattr(rows.KeyFactorizer, "encode", broken)
    with pytest.raises(ValueError, match="is broken"):
        counter.feed(table(10))


def test_read_ahead_yields_every_batch_then_the_reader_error():
    def source():
        yield 1
        yield 2
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for item in read_ahead(source()):
            got.append(item)
    assert got == [1, 2]


def test_read_ahead_stops_the_reader_when_the_caller_stops():
    produced = []

    def source():
        for i in range(1000):
            produced.append(i)
            yield i

    batches = read_ahead(source())
    assert next(batches) == 0
    batches.close()
    assert len(produced) <= 3  # the current item, one in the queue, one waiting to be put


@pytest.mark.parametrize("values", [np.arange(5, dtype=np.uint32), np.array([True, False, True] * 5),
                                    np.arange(-3, 3, dtype=np.int64)[::2]])
def test_arrow_from_numpy_matches_pa_array(values):
    assert arrow_from_numpy(values).equals(pa.array(values))


@pytest.mark.slow
def test_the_cli_path_does_not_import_pandas(tmp_path):
    """pa.array(ndarray) imports pandas (a third of a second a run): the rows path avoids it."""
    src = tmp_path / "in.csv"
    src.write_text("user,key\n" + "".join(f"u{i},k{i % 3}\n" for i in range(300)))
    code = textwrap.dedent(f"""
        import sys
        from dpselect import cli
        cli.main(["select", {str(src)!r}, "--privacy-unit", "user", "--by", "key", "--epsilon", "1",
                  "--delta", "1e-5", "--counts", "-q", "-o", {str(tmp_path / "out.csv")!r}])
        print("pandas" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

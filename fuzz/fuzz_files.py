"""Fuzz target: the file readers, through the command line (dpselect.cli.command).

The input's first byte picks a format and a command; the rest is the file: CSV (plain, TSV,
gzip-compressed), JSON lines, or Parquet (raw bytes, or a small valid Parquet file with a few
bytes overwritten by the input). The file is run through `dpselect select` (and, for some
inputs, `dpselect aggregate` with a sum over a value column) with -o to a fresh directory.

Properties: main() returns (never raises: a traceback is a crash); success (0) writes the
output and nothing else; a failure returns one of the documented codes for input and data
errors (3 input, 4 data; 2 usage, 5 output never, as the flags and output are fixed), prints
exactly one line starting "dpselect: error:" (or "dpselect aggregate: error:") on stderr, and
leaves no output and no temporary file; the input file is byte-identical afterwards."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import tempfile

import _harness  # noqa: F401  (sys.path, environment)
import atheris

with atheris.instrument_imports(include=["dpselect"]):
    from dpselect import cli
    import dpselect.io.files  # noqa: F401

import pyarrow as pa
import pyarrow.parquet as pq

WORK = tempfile.mkdtemp(prefix="dpselect-fuzz-files-")
FLAGS = ["--privacy-unit", "u", "--by", "k", "--epsilon", "1", "--delta", "1e-5", "-q"]
SELECT_OPTIONS = [[], ["--strategy", "pi_opt"], ["--counts"], ["--by", "k2"], ["--drop-null-privacy-units"],
                  ["--batch-size", "3"], ["--block-size", "1K"], ["--strategy", "weighted_laplace"]]
AGGREGATE_FLAGS = ["--max-partitions-contributed", "1", "--max-contributions-per-partition", "2",
                   "--metric", "users", "--metric", "sum:v:0:10", "--metric", "mean:v"]


def _parquet_seed() -> bytes:
    sink = io.BytesIO()
    table = pa.table({"u": pa.array(["a", "b", None, "c"]), "k": pa.array(["x", "y", "x", None]),
                      "k2": pa.array([1, 2, 3, 4], pa.int32()), "v": pa.array([1.5, 2.0, None, 7.0])})
    pq.write_table(table, sink, row_group_size=2)
    return sink.getvalue()


PARQUET = _parquet_seed()
ERROR_CODES = {cli.EXIT_INPUT, cli.EXIT_DATA}


def _file_bytes(fdp: atheris.FuzzedDataProvider, fmt: int) -> bytes:
    if fmt == 5:  # a valid Parquet file with bytes overwritten at chosen offsets
        content = bytearray(PARQUET)
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            at = fdp.ConsumeIntInRange(0, len(content) - 1)
            patch = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 4))
            content[at:at + len(patch)] = patch
        if fdp.ConsumeIntInRange(0, 4) == 0:
            content = content[: fdp.ConsumeIntInRange(0, len(content))]
        return bytes(content)
    return fdp.ConsumeBytes(fdp.remaining_bytes())


@atheris.instrument_func
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    head = fdp.ConsumeIntInRange(0, 255)
    fmt = head % 6  # csv, tsv, csv.gz, jsonl, parquet (raw), parquet (patched)
    aggregate = (head // 6) % 4 == 0
    option = SELECT_OPTIONS[(head // 24) % len(SELECT_OPTIONS)]
    name = ["in.csv", "in.tsv", "in.csv.gz", "in.jsonl", "in.parquet", "in.parquet"][fmt]
    content = _file_bytes(fdp, fmt)
    if fmt == 2:
        content = gzip.compress(content, mtime=0) if not content.startswith(b"\x1f\x8b") else content
    shutil.rmtree(WORK, ignore_errors=True)
    out_dir = os.path.join(WORK, "out")
    os.makedirs(out_dir)
    path = os.path.join(WORK, name)
    with open(path, "wb") as f:
        f.write(content)
    digest = hashlib.sha256(content).hexdigest()
    out = os.path.join(out_dir, "released.parquet")
    if aggregate:
        argv = ["aggregate", path, *FLAGS, *AGGREGATE_FLAGS, "-o", out]
    else:
        argv = ["select", path, *FLAGS, *option, "-o", out]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    message = err.getvalue()
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest, "the input file changed"
    left = sorted(os.listdir(out_dir))
    if code == cli.EXIT_OK:
        expected = ["released.parquet", "released.parquet.guarantee.json"] if aggregate else ["released.parquet"]
        assert left == expected, left
        pq.read_table(out)  # a complete, readable file
        return
    assert code in ERROR_CODES, (code, message)
    assert left == [], f"a failed run left {left}"
    lines = message.strip("\n").split("\n")
    prog = "dpselect aggregate" if aggregate else "dpselect"
    errors = [line for line in lines if line.startswith(f"{prog}: error: ")]
    assert len(errors) == 1 and "Traceback" not in message, message
    assert len(lines) == 1, f"more than one line on stderr: {message!r}"


if __name__ == "__main__":
    _harness.main(TestOneInput)

"""Writing a table in each input format the command line reads, and reading an output back:
shared by the tests of `dpselect select` and `dpselect aggregate`."""
from __future__ import annotations

import gzip
import io
import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq


def write_table(path, table: pa.Table, fmt: str, row_group_size: int) -> str:
    """Write `table` to `path` as csv, csv.gz, parquet (small row groups, so the reader streams
    several batches) or JSON lines; return the path as a string."""
    if fmt == "csv":
        pcsv.write_csv(table, str(path))
    elif fmt == "csv.gz":
        buf = io.BytesIO()
        pcsv.write_csv(table, buf)
        with gzip.open(path, "wb") as f:
            f.write(buf.getvalue())
    elif fmt == "parquet":
        pq.write_table(table, str(path), row_group_size=row_group_size)
    else:
        with open(path, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in table.to_pylist())
    return str(path)


def read_rows(path: str, fmt: str) -> list[dict]:
    """The rows of an output written as csv, parquet or JSON lines."""
    if fmt == "csv":
        return pcsv.read_csv(path).to_pylist()
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    with open(path) as f:
        return [json.loads(line) for line in f]

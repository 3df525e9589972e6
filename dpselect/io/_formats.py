"""Which file format an input or output is in: named, or told by its file name (``x.csv.gz`` is
CSV, compressed). Public names are re-exported by :mod:`dpselect.io.files`."""
from __future__ import annotations

__all__ = ["INPUT_FORMATS", "OUTPUT_FORMATS", "csv_delimiter", "detect_format", "strip_compression"]

INPUT_FORMATS = ("csv", "parquet", "jsonl")
OUTPUT_FORMATS = ("csv", "parquet", "jsonl")
_COMPRESSED = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def strip_compression(name: str) -> tuple[str, str | None]:
    """(name without a compression suffix, pyarrow codec name or None)."""
    lower = name.lower()
    for suffix, codec in _COMPRESSED.items():
        if lower.endswith(suffix):
            return lower[: -len(suffix)], codec
    return lower, None


def detect_format(path: str, explicit: str | None, role: str) -> str:
    """The format named explicitly, or the one the file name says (``x.csv.gz`` is csv)."""
    allowed = INPUT_FORMATS if role == "input" else OUTPUT_FORMATS
    if explicit is not None:
        if explicit not in allowed:
            raise ValueError(f"--{role}-format must be one of {', '.join(allowed)}; got {explicit!r}")
        return explicit
    name, _ = strip_compression(path)
    for suffix, fmt in ((".csv", "csv"), (".tsv", "csv"), (".parquet", "parquet"), (".pq", "parquet"),
                        (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the {role} format from the name {path!r}; "
        f"pass --{role}-format with one of {', '.join(allowed)}"
    )


def csv_delimiter(path: str) -> str:
    """Tab for ``.tsv`` (under any compression suffix), else comma."""
    name, _ = strip_compression(path)
    return "\t" if name.endswith(".tsv") else ","

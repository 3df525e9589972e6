"""Example data shipped inside the package, found wherever dpselect is installed.

Both data sets are synthetic: generated with a fixed seed by the scripts in the repository's
``scripts/`` directory, they describe no real person.

``device_survey`` (``device_survey.csv.gz``, made by ``scripts/make_example_data.py``)
    Raw rows, the input of :func:`dpselect.select_partitions` and the ``dpselect`` CLI: one row
    per report that a user owns or used a device. 299,895 rows from 60,000 users, columns
    ``user_id`` (6-digit integer, the privacy unit), ``device_model`` (e.g. "Google Pixel 7",
    the partition key; Zipf-distributed, 4,944 distinct models), ``os`` and ``country``. A user has
    2 to 30 rows and may repeat a device, so contribution bounding matters.

``demo_counts`` (``demo_counts.csv``, made by ``scripts/make_demo_counts.py``)
    Precomputed counts, the input of the array API: columns ``query`` (two words, e.g.
    "taxi concert") and ``users`` (distinct users who searched it, Zipf-distributed, 1 to 1,823);
    650 rows.

Use::

    dpselect.datasets.path("device_survey")           # a filesystem path, for the CLI or pandas
    dpselect.datasets.device_survey(kind="pandas")     # or "polars", "arrow"
    dpselect.datasets.demo_counts()                    # numpy int64 array of the users column

From a shell, ``python -m dpselect.datasets device_survey`` prints the path, so
``dpselect select "$(python -m dpselect.datasets device_survey)" ...`` works from any directory.
"""
from __future__ import annotations

import atexit
import contextlib
import csv
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dpselect._optional import require

__all__ = ["Dataset", "names", "info", "path", "device_survey", "demo_counts"]


@dataclass(frozen=True)
class Dataset:
    """What a shipped data set is; the test suite checks these facts against the file."""

    name: str
    filename: str
    columns: tuple[str, ...]
    rows: int
    generator: str
    description: str


_DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="device_survey",
            filename="device_survey.csv.gz",
            columns=("user_id", "device_model", "os", "country"),
            rows=299_895,
            generator="scripts/make_example_data.py",
            description="synthetic survey: one row per (user, device model) report; "
            "privacy unit user_id, partition key device_model",
        ),
        Dataset(
            name="demo_counts",
            filename="demo_counts.csv",
            columns=("query", "users"),
            rows=650,
            generator="scripts/make_demo_counts.py",
            description="synthetic search queries with their distinct-user counts",
        ),
    )
}

# Files extracted from a zipped install live until the interpreter exits (see `path`).
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def names() -> list[str]:
    """The names of the shipped data sets, sorted."""
    return sorted(_DATASETS)


def info(name: str) -> Dataset:
    """What the data set ``name`` is: file, columns, rows, and the script that generated it."""
    try:
        return _DATASETS[name]
    except KeyError:
        raise ValueError(
            f"no example data set named {name!r}; the shipped ones are: {', '.join(names())}"
        ) from None


def path(name: str) -> Path:
    """A filesystem path to the shipped data set ``name``, valid until the interpreter exits.

    Installed as regular files (pip's way), this is the file inside the package. Imported from a
    zip archive, the file is extracted to a temporary file, removed at exit.
    """
    resource = resources.files("dpselect") / "data" / info(name).filename
    if isinstance(resource, Path):
        return resource
    return _extracted.enter_context(resources.as_file(resource))


def device_survey(kind: Literal["pandas", "polars", "arrow"] = "pandas") -> Any:
    """The raw rows of the synthetic device survey as a pandas, Polars or pyarrow table.

    pandas and Polars come with ``pip install "dpselect[frames]"``, pyarrow with
    ``"dpselect[arrow]"``.
    """
    file = path("device_survey")
    feature = f"dpselect.datasets.device_survey(kind={kind!r})"
    if kind == "pandas":
        return require("pandas", feature=feature, extra="frames").read_csv(file)
    if kind == "polars":
        return require("polars", feature=feature, extra="frames").read_csv(file)
    if kind == "arrow":
        # pyarrow.csv decompresses by the .gz suffix.
        return require("pyarrow.csv", feature=feature, extra="arrow").read_csv(file)
    raise ValueError(f"kind must be 'pandas', 'polars' or 'arrow', not {kind!r}")


def demo_counts() -> np.ndarray:
    """The ``users`` column of the demo counts: distinct users per query, as an int64 array."""
    with path("demo_counts").open(newline="") as fh:
        return np.array([int(row["users"]) for row in csv.DictReader(fh)], dtype=np.int64)


def main(argv: list[str] | None = None) -> int:
    """``python -m dpselect.datasets [path] NAME`` prints the path; without NAME, the list."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["path"]:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m dpselect.datasets [path] NAME   (prints the file's path)")
        for name in names():
            print(f"  {name:<14} {info(name).description}")
        return 0 if args else 2
    if len(args) != 1:
        print("dpselect.datasets: give one data set name", file=sys.stderr)
        return 2
    name = args[0]
    if name not in _DATASETS:
        print(f"dpselect.datasets: no data set {name!r}; shipped: {', '.join(names())}", file=sys.stderr)
        return 2
    resource = resources.files("dpselect") / "data" / info(name).filename
    if not isinstance(resource, Path):
        # An extracted copy would be deleted when this process exits, before the caller uses it.
        print("dpselect.datasets: dpselect is installed in a zip archive, so its data has no "
              "lasting path; use dpselect.datasets.path() from Python", file=sys.stderr)
        return 1
    print(resource)
    return 0


if __name__ == "__main__":
    sys.exit(main())

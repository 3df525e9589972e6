"""dpselect.datasets: the shipped example data, reachable by name from any directory."""
from __future__ import annotations

import csv
import gzip
import io
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dpselect
from dpselect import datasets


def read_rows(name: str) -> tuple[list[str], Iterator[list[str]]]:
    """Header and rows of a shipped CSV, read with the standard library only. The rows come one
    at a time: device_survey has 300 000, and a list of them all would leave the garbage
    collector hundreds of thousands of objects to scan in every later collection."""
    file = datasets.path(name)
    raw = file.read_bytes()
    text = gzip.decompress(raw).decode() if file.suffix == ".gz" else raw.decode()
    reader = csv.reader(io.StringIO(text))
    return next(reader), reader


def test_names_are_the_shipped_data_sets():
    assert datasets.names() == ["demo_counts", "device_survey"]
    assert dpselect.datasets is datasets  # reachable as an attribute of the package too


@pytest.mark.parametrize("name", ["device_survey", "demo_counts"])
def test_path_is_a_file_inside_the_package_from_any_directory(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    file = datasets.path(name)
    assert file.is_absolute() and file.is_file()
    assert file.parent == Path(dpselect.__file__).resolve().parent / "data"


@pytest.mark.parametrize("name", ["device_survey", "demo_counts"])
def test_documented_columns_and_rows_match_the_file(name):
    header, rows = read_rows(name)
    assert tuple(header) == datasets.info(name).columns
    count = 0
    for row in rows:
        assert len(row) == len(header), (count, row)
        count += 1
    assert count == datasets.info(name).rows


def test_generator_scripts_are_named():
    for name in datasets.names():
        assert datasets.info(name).generator.startswith("scripts/make_")


def test_demo_counts_is_the_users_column_as_int64():
    counts = datasets.demo_counts()
    header, rows = read_rows("demo_counts")
    assert counts.dtype == np.int64
    np.testing.assert_array_equal(counts, [int(r[header.index("users")]) for r in rows])
    assert counts.min() >= 1


def test_unknown_name_lists_the_shipped_ones():
    with pytest.raises(ValueError, match="demo_counts, device_survey"):
        datasets.path("device_surveys")


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind must be"):
        datasets.device_survey(kind="csv")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind, module", [("pandas", "pandas"), ("polars", "polars"), ("arrow", "pyarrow")])
def test_device_survey_loaders(kind, module):
    pytest.importorskip(module)
    table = datasets.device_survey(kind=kind)
    info = datasets.info("device_survey")
    assert table.shape == (info.rows, len(info.columns))
    assert tuple(table.column_names if kind == "arrow" else table.columns) == info.columns


@pytest.mark.parametrize("kind, blocked, extra", [
    ("pandas", "pandas", "frames"),
    ("polars", "polars", "frames"),
    ("arrow", "pyarrow.csv", "arrow"),
])
def test_missing_optional_dependency_names_the_extra(kind, blocked, extra, monkeypatch):
    monkeypatch.setitem(sys.modules, blocked, None)  # makes `import blocked` raise ImportError
    with pytest.raises(ImportError, match=rf'pip install "dpselect\[{extra}\]"'):
        datasets.device_survey(kind=kind)


def zipped_package(tmp_path: Path) -> zipfile.Path:
    """The package's data directory as it would look inside a zip archive."""
    archive = tmp_path / "dpselect.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in datasets.names():
            zf.write(datasets.path(name), f"dpselect/data/{datasets.info(name).filename}")
    return zipfile.Path(archive, "dpselect/")


def test_path_extracts_from_a_zip_archive(tmp_path, monkeypatch):
    original = datasets.path("demo_counts").read_bytes()
    root = zipped_package(tmp_path)
    monkeypatch.setattr(datasets.resources, "files", lambda package: root)
    file = datasets.path("demo_counts")
    assert file.is_file() and not str(file).startswith(str(tmp_path / "dpselect.zip"))
    assert file.read_bytes() == original
    np.testing.assert_array_equal(datasets.demo_counts()[:3], [int(line.split(b",")[-1]) for line in original.splitlines()[1:4]])


def test_command_line_refuses_a_path_that_would_vanish_from_a_zip(tmp_path, monkeypatch, capsys):
    root = zipped_package(tmp_path)
    monkeypatch.setattr(datasets.resources, "files", lambda package: root)
    assert datasets.main(["device_survey"]) == 1
    assert "zip" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["device_survey"], ["path", "device_survey"]])
def test_command_line_prints_the_path(argv, capsys):
    assert datasets.main(argv) == 0
    assert capsys.readouterr().out.strip() == str(datasets.path("device_survey"))


def test_command_line_errors(capsys):
    assert datasets.main(["nope"]) == 2
    assert "demo_counts, device_survey" in capsys.readouterr().err
    assert datasets.main([]) == 2
    assert "device_survey" in capsys.readouterr().out


@pytest.mark.slow
def test_python_dash_m_from_another_directory(tmp_path):
    """The README's `dpselect select "$(python -m dpselect.datasets device_survey)"` from anywhere."""
    out = subprocess.run([sys.executable, "-m", "dpselect.datasets", "device_survey"], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()) == datasets.path("device_survey")


@pytest.mark.slow
def test_demo_runs_from_another_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpselect.demo"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{datasets.info('demo_counts').rows} partitions")

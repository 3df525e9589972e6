"""The `dpselect` command stopped by a signal, or unable to write standard error: whenever the
signal comes (while the package is imported, while the arguments are parsed, while several
outputs are renamed into place, while standard output is written), the run ends in one line and
an exit code that say exactly what was written; once the release is written, neither a signal
nor a full or closed stderr turns the run into a failure.

Signals are delivered at chosen points (an import hook, a wrapped os.replace), never after a
sleep: every test is deterministic."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from dpselect import cli
from dpselect.cli import command as cli_command

AGGREGATE = ["--privacy-unit", "user", "--by", "key", "--epsilon", "1", "--delta", "1e-5",
             "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1", "--metric", "count"]
SELECT = ["--privacy-unit", "user", "--by", "key", "--epsilon", "1", "--delta", "1e-5"]
STOPS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM"),
         pytest.param(signal.SIGHUP, id="SIGHUP")]


@pytest.fixture
def stop_signals_as_at_a_terminal():
    """The handlers a command started from a terminal has (Python's for SIGINT, the default
    action for SIGTERM and SIGHUP), whatever the test runner was started with (a background
    job ignores SIGINT, nohup SIGHUP); the runner's own come back after."""
    wanted = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
    previous = {signum: signal.signal(signum, handler) for signum, handler in wanted.items()}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.fixture
def src(tmp_path) -> Path:
    path = tmp_path / "in.csv"
    path.write_text("user,key\n" + "".join(f"u{i},popular\n" for i in range(300)))
    return path


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".dpselect-")]


def main(argv: list[str]) -> int:
    """cli.main, with an interrupt that escapes it a failure of the test (not of the session)."""
    try:
        return cli.main(argv)
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped cli.main")


def one_line(err: str) -> str:
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ the renames of several outputs

def _old_outputs(tmp_path: Path) -> dict[Path, str]:
    files = {tmp_path / "out.csv": "old release\n", tmp_path / "out.csv.guarantee.json": "old guarantee\n",
             tmp_path / "report.json": "old report\n"}
    for path, text in files.items():
        path.write_text(text)
    return files


@pytest.mark.usefixtures("stop_signals_as_at_a_terminal")
@pytest.mark.parametrize("signum", STOPS)
def test_a_signal_during_the_renames_is_held_until_every_output_is_in_place(tmp_path, src, capsys, monkeypatch,
                                                                             signum: int) -> None:
    """The signal arrives right after the first rename (the guarantee sidecar): it is held
    until the report and the release are renamed too, so the three files are the new ones, and
    the run says the release stands (exit 0), never that nothing was written."""
    files = _old_outputs(tmp_path)
    real_replace = os.replace
    renamed: list[str] = []

    def replace_then_signal(source, target) -> None:
        real_replace(source, target)
        renamed.append(os.path.basename(target))
        if len(renamed) == 1:
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(os, "replace", replace_then_signal)
    code = main(["aggregate", str(src), *AGGREGATE, "--report", str(tmp_path / "report.json"),
                     "-o", str(tmp_path / "out.csv")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK, err
    assert renamed == ["out.csv.guarantee.json", "report.json", "out.csv"]
    assert all(path.read_text() != old for path, old in files.items())
    assert (tmp_path / "out.csv").read_text().startswith('"key","count"')
    assert json.loads((tmp_path / "out.csv.guarantee.json").read_text())["differentially_private"] is True
    assert "after every output was written in full" in err and "the release stands" in err, err
    assert "no output was written" not in err and "Traceback" not in err
    assert leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_interrupt_that_could_not_be_held_is_reported_exactly(tmp_path, src, capsys, monkeypatch) -> None:
    """Should an interrupt still cut the renames (one Python cannot hold), the message names
    what was replaced and what was left as it was, and never says that nothing was written."""
    files = _old_outputs(tmp_path)
    real_replace = os.replace

    def replace_then_interrupt(source, target) -> None:
        real_replace(source, target)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    code = main(["aggregate", str(src), *AGGREGATE, "--report", str(tmp_path / "report.json"),
                     "-o", str(tmp_path / "out.csv")])
    line = one_line(capsys.readouterr().err)
    assert code == cli.EXIT_INTERRUPTED
    assert line.startswith("dpselect aggregate: error: interrupted while writing the outputs; "), line
    assert "written in full: '" in line and "out.csv.guarantee.json'" in line
    assert "not written (left as they were): '" in line and "report.json'" in line and "no output was written" not in line
    assert (tmp_path / "out.csv").read_text() == files[tmp_path / "out.csv"]
    assert (tmp_path / "report.json").read_text() == files[tmp_path / "report.json"]
    assert leftovers(tmp_path) == []


def test_an_interrupt_while_standard_output_is_written_says_it_got_part(src, capsys, monkeypatch) -> None:
    from dpselect.io import outputs

    def partial(content, fmt) -> None:
        sys.stdout.write('"key"\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs, "_write_stdout", partial)
    assert main(["select", str(src), *SELECT]) == cli.EXIT_INTERRUPTED
    line = one_line(capsys.readouterr().err)
    assert "written in part: standard output" in line and "no output was written" not in line, line


def test_an_interrupt_while_the_arguments_are_parsed(capsys, monkeypatch) -> None:
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_command, "build_parser", interrupted)
    assert main(["select", "in.csv", *SELECT]) == cli.EXIT_INTERRUPTED
    assert one_line(capsys.readouterr().err) == "dpselect: error: interrupted; no output was written"


def test_a_signal_the_command_was_told_to_ignore_stays_ignored(tmp_path, src, capsys, monkeypatch) -> None:
    """Under nohup SIGHUP is ignored; the CLI replaced that with its own handler, so a hangup
    still stopped a long run. An ignored signal stays ignored, while reading and while renaming."""
    from dpselect.io import files

    def hang_up_then(real):
        def call(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGHUP)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(files, "open_batches", hang_up_then(files.open_batches))
    monkeypatch.setattr(os, "replace", hang_up_then(os.replace))
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        code = main(["select", str(src), *SELECT, "-o", str(tmp_path / "out.csv")])
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK and "terminated" not in err, err
    assert (tmp_path / "out.csv").read_text().startswith('"key"')


# ------------------------------------------------------------------ while the package is imported

def _entry_point() -> tuple[str, str]:
    """The `dpselect` command's module and function (what pip's console-script wrapper imports
    and calls): as pyproject.toml declares it in a source checkout, else as the installed
    distribution does (a wheel's test run has no pyproject.toml beside the tests)."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        scripts = pyproject.read_text().split("[project.scripts]", 1)[1]
        found = re.search(r'^dpselect\s*=\s*"([\w.]+):(\w+)"', scripts, re.M)
        assert found, "no dpselect entry in [project.scripts]"
        return found.group(1), found.group(2)
    from importlib.metadata import entry_points

    values = {e.value for e in entry_points(group="console_scripts") if e.name == "dpselect"}
    assert len(values) == 1, f"the installed dpselect declares the 'dpselect' command as {sorted(values)}"
    module, _, function = values.pop().partition(":")
    return module.strip(), function.strip()


# The console-script wrapper pip writes, with an import hook that sends the signal to the
# process when the named module starts to be imported.
_WRAPPER = """
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, whatever the test runner ignores
signal.signal(signal.SIGTERM, signal.SIG_DFL)
module, signame, entry, function = sys.argv[1:5]
class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), getattr(signal, signame))
        return None
sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["dpselect", *sys.argv[5:]]
from importlib import import_module
sys.exit(getattr(import_module(entry), function)())
"""


@pytest.mark.parametrize("module", [
    "dpselect._version",  # the first module of the package
    pytest.param("dpselect.aggregation.aggregate", marks=pytest.mark.slow),  # the package half imported
    pytest.param("dpselect.cli.signals", marks=pytest.mark.slow),  # the CLI's own imports
    pytest.param("pyarrow.csv", marks=pytest.mark.slow),  # inside the command
])
@pytest.mark.parametrize("signum", STOPS[:2])
def test_a_signal_while_the_command_starts(tmp_path, src, module: str, signum: int) -> None:
    """Ctrl-C while `dpselect` imports numpy, the C kernel and the mechanisms (a few tenths of a
    second) ended in a KeyboardInterrupt traceback, SIGTERM in a silent kill: both end in the
    command's one line and 128 + the signal."""
    entry, function = _entry_point()
    out = tmp_path / "out.csv"
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, module, signal.Signals(signum).name, entry, function,
                           "aggregate", str(src), *AGGREGATE, "-o", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 128 + signum, proc.stderr
    line = one_line(proc.stderr)
    assert re.fullmatch(r"dpselect( aggregate)?: error: (interrupted|terminated by signal \d+); no output was written",
                        line), line
    assert not out.exists() and leftovers(tmp_path) == []


# ------------------------------------------------------------------ standard error cannot be written

def _run(args: list[str], **streams) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpselect.cli", *args], timeout=300, check=False, **streams)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["select", "aggregate"])
def test_a_full_standard_error_does_not_fail_a_written_release(tmp_path, src, command: str) -> None:
    """The release written, printing the guarantee to a full stderr raised OSError: the run
    ended in a traceback (lost in the full stderr) and exit 1, telling the caller nothing was
    released. The release stands: exit 0."""
    out = tmp_path / "out.csv"
    extra = [*AGGREGATE, "--report", "-"] if command == "aggregate" else [*SELECT, "--progress"]
    with open("/dev/full", "w") as full:
        proc = _run([command, str(src), *extra, "-o", str(out)], stderr=full, stdout=subprocess.DEVNULL)
    assert proc.returncode == cli.EXIT_OK
    assert out.read_text().startswith('"key"')
    assert (tmp_path / "out.csv.guarantee.json").exists() == (command == "aggregate")
    assert leftovers(tmp_path) == []
    # A failure keeps its own code when it cannot be printed either.
    with open("/dev/full", "w") as full:
        proc = _run([command, str(src), *extra, "--epsilon", "nan", "-o", str(tmp_path / "other.csv")], stderr=full)
    assert proc.returncode == cli.EXIT_USAGE and not (tmp_path / "other.csv").exists()


@pytest.mark.slow
def test_a_closed_standard_error_does_not_fail_a_written_release(tmp_path, src) -> None:
    out = tmp_path / "out.csv"
    proc = subprocess.run(["sh", "-c", 'exec "$0" -m dpselect.cli "$@" 2>&-', sys.executable, "aggregate", str(src),
                           *AGGREGATE, "--report", "-", "-o", str(out)], capture_output=True, timeout=300, check=False)
    assert proc.returncode == cli.EXIT_OK and proc.stdout == b""
    assert out.read_text().startswith('"key"') and (tmp_path / "out.csv.guarantee.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_explain_to_a_full_standard_output_is_an_output_error() -> None:
    with open("/dev/full", "w") as full:
        proc = _run(["explain", *SELECT[4:]], stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == cli.EXIT_OUTPUT, proc.stderr
    assert one_line(proc.stderr) == "dpselect: error: cannot write to standard output: No space left on device"

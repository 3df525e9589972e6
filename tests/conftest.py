"""Test-suite settings. The deterministic test RNG is allowed here, and only here.

Markers (registered in pyproject.toml, and here for a copy of tests/ run without it):

* ``slow``: a test that takes a second or more on an idle machine. ``pytest -m "not slow"`` is
  the inner loop; the suite runs them all by default (tests/README.md). ``--slow-too NODE_ID``
  runs a slow test even so: CI's sanitizer and sdist runs leave slow tests out except the few
  that alone reach some C path (.ci/run).
* ``not_under_sanitizers(reason=...)``: ``tools/sanitize.sh`` runs the suite against an
  AddressSanitizer build with ``DPSELECT_SANITIZED=1``; such a test is then skipped with that
  reason (docs/testing.md, "Sanitizers": keep the list short and say why).
"""
import os

import pytest

os.environ.setdefault("DPSELECT_ALLOW_INSECURE_RNG", "1")

SANITIZED = os.environ.get("DPSELECT_SANITIZED", "") not in ("", "0")

# Registered where the configuration lacks them: pyproject.toml's `markers` is the home of the
# first two (keep the lines equal); `slow_too` is this file's own.
MARKERS = {
    "slow": "slow: a second or more on an idle machine (statistics, exact arithmetic, subprocesses, Spark); "
            '`pytest -m "not slow"` is the inner loop (tests/README.md)',
    "not_under_sanitizers": "not_under_sanitizers(reason): skipped by tools/sanitize.sh (DPSELECT_SANITIZED=1)",
    "slow_too": "slow_too: given by --slow-too to the slow tests it names (tests/conftest.py)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow-too", action="append", default=[], metavar="NODE_ID",
        help='run this slow test even where -m leaves slow tests out (-m "not slow"): a node id '
             "(tests/test_x.py::test_y), or one without its [parameters] for every case. Repeatable. "
             "A node id that matches no collected test is an error.")


def pytest_configure(config: pytest.Config) -> None:
    registered = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
    for name, line in MARKERS.items():
        if name not in registered:
            config.addinivalue_line("markers", line)
    # pytest-xdist's --dist loadfile hands each file to one worker, by default in order of their
    # number of tests; keep the order the workers collect instead (_slowest_files_first).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which reads what this changes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_slow_too(config, items)
    if SANITIZED:
        _skip_under_sanitizers(items)
    if hasattr(config, "workerinput"):
        _slowest_files_first(items)


def _slowest_files_first(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the files with the most slow tests go first: Spark's file alone is over a
    third of the suite's time, and started late (by its number of tests) it ran on one worker long
    after the other had finished everything else. Within a file the order is unchanged."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    slow: dict[str, int] = {}
    for item in items:
        slow[file_of(item)] = slow.get(file_of(item), 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[file_of(item)])  # a stable sort: each file's tests stay together


def _matches(node_id: str, wanted: str) -> bool:
    return node_id == wanted or node_id.startswith(wanted + "[")


def _select_slow_too(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests --slow-too names ``slow_too`` and widens -m to ``(EXPR) or slow_too``."""
    wanted: list[str] = config.getoption("slow_too")
    if not wanted:
        return
    for item in items:
        if any(_matches(item.nodeid, node_id) for node_id in wanted):
            item.add_marker(pytest.mark.slow_too)
    if config.option.markexpr:
        config.option.markexpr = f"({config.option.markexpr}) or slow_too"
    if not hasattr(config, "workerinput"):  # a pytest-xdist worker leaves the check to the controller
        _check_slow_too(wanted, [item.nodeid for item in items])


def _check_slow_too(wanted: list[str], node_ids: list[str]) -> None:
    """A name that matches no test is an error: a renamed test would silently drop out of CI's list."""
    unmatched = [w for w in wanted if not any(_matches(node_id, w) for node_id in node_ids)]
    if unmatched:
        raise pytest.UsageError(f"--slow-too: no collected test matches {', '.join(unmatched)} "
                                "(renamed or removed? fix the list)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """pytest-xdist's controller: each worker's collected tests, the same list for every worker.
    (An error raised in a worker's collection loses its message.)"""
    _check_slow_too(node.config.getoption("slow_too"), ids)


def _skip_under_sanitizers(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("not_under_sanitizers")
        if marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else None)
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: not_under_sanitizers needs a reason")
            item.add_marker(pytest.mark.skip(reason=f"under the sanitizers: {reason}"))


@pytest.fixture(autouse=True)
def _mpmath_precision_is_restored_after_each_test():
    """Some test modules set mpmath's global precision when imported, and some tests set it for
    themselves: restoring it after every test keeps each test's precision independent of which
    tests ran before it in the same process (pytest-xdist changes that order)."""
    try:
        import mpmath
    except ImportError:  # only some tests need it
        yield
        return
    precision = mpmath.mp.dps
    yield
    mpmath.mp.dps = precision

"""Test-suite settings. The deterministic test RNG is allowed here, and only here.

``tools/sanitize.sh`` runs the suite against an AddressSanitizer build with
``DPSELECT_SANITIZED=1``; a test marked ``not_under_sanitizers(reason=...)`` is then skipped with
that reason (docs/testing.md, "Sanitizers": keep the list short and say why).
"""
import os

import pytest

os.environ.setdefault("DPSELECT_ALLOW_INSECURE_RNG", "1")

SANITIZED = os.environ.get("DPSELECT_SANITIZED", "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "not_under_sanitizers(reason): skipped by tools/sanitize.sh (DPSELECT_SANITIZED=1)")
    config.addinivalue_line("markers", "slow: starts a local Spark session or runs long (deselect with -m 'not slow')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SANITIZED:
        return
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

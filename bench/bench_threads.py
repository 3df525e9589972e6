"""Two threads against one: what releasing the GIL in the batch loops buys.

For each family of batch entry points, the same two calls are made by one thread one after the
other (the baseline) and by two threads at once, one call each, in the same run and through the
same two-thread pool (so both pay the same hand-off). With the GIL released the two calls
overlap: on an idle machine with two free cores the ratio approaches 0.5x; a kernel that held the
GIL would stay at 1x. (tests/test_gil_release.py proves the release itself, without timing.)

The inputs are sized to stay in each core's 1 MiB L2 cache (a few hundred KiB per call), so that
the ratio shows what the GIL allows, not the memory bus: two threads streaming 30 MB each share
one memory bandwidth whoever holds the GIL (at 4e6 counts select_into measured 1.0-1.3x on this
machine, at 1.7 ns per element, while its compute-bound neighbours gave 0.6x).

Run: python -m pytest bench/bench_threads.py --benchmark-only
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dpselect
from dpselect import _bound, _kernel, _noise, _rng, _weighted
from dpselect.mechanisms.weighted import UserSets, _weights

SEED = 7  # bench input data only (never noise): a seeded numpy generator is fine here
USERS = 20_000


def _rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.Generator(np.random.PCG64(SEED))
    return gen.integers(0, USERS, n).astype(np.uint32), gen.integers(0, 5_000, n).astype(np.uint32)


def _select() -> tuple[Callable[[], object], int]:
    counts = np.full(100_000, 12, np.int64)
    out = np.empty(counts.size, np.bool_)
    handle = dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5)._handle
    return (lambda: _kernel.select_into(counts, handle, out)), counts.size


def _release() -> tuple[Callable[[], object], int]:
    counts = np.full(50_000, 12, np.int64)
    keep, noisy = np.empty(counts.size, np.bool_), np.empty(counts.size, np.int64)
    release = dpselect.make_strategy("release", epsilon=1.0, delta=1e-5)
    return (lambda: _kernel.release_into(counts, release._noise, release.k, keep, noisy)), counts.size


def _bound_rows() -> tuple[Callable[[], object], int]:
    users, partitions = _rows(40_000)
    values = [np.arange(users.size, dtype=np.int64)]
    return (lambda: _bound.bound_rows(users, partitions, USERS, 5_000, 4, 2, values, None)), users.size


def _weighted_round() -> tuple[Callable[[], object], int]:
    sets = UserSets.from_codes(*_rows(100_000), 5_000)
    weights, histogram = _weights(8, "l2"), np.zeros(5_000, np.int64)
    return (lambda: _weighted.weighted_round(sets.ends, sets.partitions, None, 8, weights, histogram)), \
        int(sets.partitions.size)


def _laplace_noise() -> tuple[Callable[[], object], int]:
    values = np.zeros(50_000, np.int64)
    return (lambda: _noise.add_discrete_laplace(values, 3, 1)), values.size


def _random_bytes() -> tuple[Callable[[], object], int]:
    n = 256 << 10
    return (lambda: _rng.random_bytes(n)), n


FAMILIES: dict[str, Callable[[], tuple[Callable[[], object], int]]] = {
    "select_into": _select,
    "release_into": _release,
    "bound_rows": _bound_rows,
    "weighted_round": _weighted_round,
    "add_discrete_laplace": _laplace_noise,
    "random_bytes": _random_bytes,
}


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        executor.submit(lambda: None).result()  # both runs find the pool started
        yield executor


# Each timed call repeats its kernel on the same cache-resident data, so a call lasts some
# milliseconds and the pool's hand-off (tens of microseconds) does not decide the ratio.
REPEATS = 20


def _repeated(call: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        for _ in range(REPEATS):
            call()
    return run


@pytest.fixture(scope="module", params=list(FAMILIES))
def calls(request) -> tuple[str, Callable[[], object], Callable[[], object], int]:
    """Two independent calls (each with its own outputs) of one family."""
    first, elements = FAMILIES[request.param]()
    second, _ = FAMILIES[request.param]()
    first()  # warm up: tables built, pages touched
    second()
    return request.param, _repeated(first), _repeated(second), REPEATS * elements


def test_one_thread_two_calls(benchmark, record, pool, calls) -> None:
    name, first, second, elements = calls
    benchmark(lambda: pool.submit(lambda: (first(), second())).result())
    record(f"threads {name}", "baseline", 2 * elements)


def test_two_threads_one_call_each(benchmark, record, pool, calls) -> None:
    name, first, second, elements = calls

    def both() -> None:
        futures = [pool.submit(first), pool.submit(second)]
        for future in futures:
            future.result()

    benchmark(both)
    record(f"threads {name}", "two threads", 2 * elements)

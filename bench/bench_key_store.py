"""A column streamed in batches, coded by the shards' maps kept across batches (``KeyStore``, the
rows path from ``parallel_codes.MIN_THREADS`` threads) against the one-thread code map
(``KeyMap``, the baseline) in the same run: the CPU price of coding on several threads.

Data (numpy's seeded PCG64, input only): ``DPSELECT_BENCH_ROWS`` rows (default 4e6) of int64 values
Zipf(1.1) over ~1e6 values, and their decimal text, in 8 batches. The store runs at
``DPSELECT_BENCH_THREADS`` threads (default 2): on a 2-core machine its time over the map's is
about the ratio of their CPU work over two, and on T idle cores the store's wall time falls with T
while the map's does not.

    pytest bench/bench_key_store.py --benchmark-only -p no:cacheprovider
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dpselect import _count
from dpselect.ingest import parallel_codes

pa = pytest.importorskip("pyarrow")

ROWS = int(os.environ.get("DPSELECT_BENCH_ROWS", 4_000_000))
THREADS = int(os.environ.get("DPSELECT_BENCH_THREADS", 2))
BATCHES = 8


@pytest.fixture(scope="module", params=["int64", "string"])
def batches(request: pytest.FixtureRequest) -> tuple[str, list[pa.Array]]:
    values = np.random.default_rng(1).zipf(1.1, ROWS) % 1_000_000
    column = pa.array(values) if request.param == "int64" else pa.array(values.astype(str).astype(object))
    step = -(-ROWS // BATCHES)
    return request.param, [column.slice(i, step) for i in range(0, ROWS, step)]


def _map(kind: str, arrays: list[pa.Array]) -> None:
    code_map = _count.KeyMap("word" if kind == "int64" else "bytes", 7)
    for array in arrays:
        buffers = array.buffers()
        if kind == "int64":
            code_map.encode_fixed(len(array), array.offset, buffers[0], buffers[1], 8)
        else:
            code_map.encode_var(len(array), array.offset, buffers[0], buffers[1], False, buffers[2])


def _store(kind: str, arrays: list[pa.Array]) -> None:
    store = _count.KeyStore("word" if kind == "int64" else "bytes", 7)
    for array in arrays:
        buffers = array.buffers()
        if kind == "int64":
            parallel_codes.encode_fixed(len(array), array.offset, buffers[0], buffers[1], 8, THREADS, 0, store=store)
        else:
            parallel_codes.encode_var(len(array), array.offset, buffers[0], buffers[1], False, buffers[2], THREADS, 0,
                                      store=store)


@pytest.mark.parametrize("coder", ["map", "store"])
def test_streamed_column_codes(benchmark, record, batches, coder):
    kind, arrays = batches
    benchmark.pedantic(_map if coder == "map" else _store, args=(kind, arrays), rounds=3, iterations=1)
    record(f"{kind} codes, {BATCHES} batches", "baseline" if coder == "map" else f"store, {THREADS} threads", ROWS)

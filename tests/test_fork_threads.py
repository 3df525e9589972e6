"""Fork safety and per-thread states (docs/privacy/randomness.md).

A forked child must never replay its parent's stream: neither through os.fork(), nor through
multiprocessing's "fork" start method, nor through the selection kernel. A deterministic test
RNG used across fork() must fail loudly. Two threads draw from independent states.

Children talk to the parent through a pipe and leave with os._exit (no pytest teardown in the
child). The parent waits with a generous deadline only to turn a deadlock into a failure.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import select
import threading
from collections.abc import Callable

import numpy as np
import pytest

import dpselect
from dpselect import _rng
from dpselect.rng import SecureRNG
from dpselect.testing import InsecureDeterministicRNG

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # fork() with threads (3.12+)
]

CHILD_DEADLINE_S = 20.0  # only a deadlock guard; a healthy child answers in milliseconds

# Entries of about one half: n = 11 has keep probability 0.348, n = 12 has 0.760 (ε=1, δ=1e-5).
HALF_COUNTS = np.array([11, 12] * 500, dtype=np.int64)


def _run_in_child(work: Callable[[], bytes], deadline: float = CHILD_DEADLINE_S) -> bytes:
    """fork(); the child runs work() and sends its result (or b"ERR:" + message) back."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read_fd)
            try:
                payload = work()
            except BaseException as exc:  # noqa: BLE001 - the child reports anything, never returns into pytest
                payload = b"ERR:" + f"{type(exc).__name__}: {exc}".encode()
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(payload)
        except BaseException:  # noqa: BLE001 - the child must reach os._exit whatever happens
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], deadline)
        if not ready:
            os.kill(pid, 9)
            pytest.fail(f"forked child did not answer within {deadline} s (deadlock)")
        chunks = []
        while True:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)


# ------------------------------------------------------------------ secure generator across fork

def test_forked_child_does_not_repeat_parent_bytes() -> None:
    rng = SecureRNG()
    rng.random_bytes(100)  # the parent's state exists and holds buffered bytes
    child = _run_in_child(lambda: SecureRNG().random_bytes(32))
    parent = rng.random_bytes(32)
    assert len(child) == 32 and not child.startswith(b"ERR:")
    assert child != parent


def test_forked_child_bumps_the_fork_generation() -> None:
    """The atfork handlers (pthread_atfork and os.register_at_fork) run in the child, so a state
    keyed before the fork is re-keyed from the OS (the pthread_atfork generation check)."""
    SecureRNG().random_bytes(8)
    before = _rng.fork_generation()
    child = _run_in_child(lambda: str(_rng.fork_generation()).encode())
    assert int(child) > before
    assert _rng.fork_generation() == before  # the parent is not affected


def _mp_child(conn: mp.connection.Connection) -> None:
    conn.send_bytes(SecureRNG().random_bytes(32))
    conn.send_bytes(dpselect.select(HALF_COUNTS, 1.0, 1e-5).tobytes())
    conn.close()


def test_multiprocessing_fork_context_child_differs() -> None:
    ctx = mp.get_context("fork")
    SecureRNG().random_bytes(64)
    dpselect.select(HALF_COUNTS, 1.0, 1e-5)
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_mp_child, args=(child_conn,))
    proc.start()
    child_conn.close()
    try:
        assert parent_conn.poll(CHILD_DEADLINE_S), "multiprocessing child did not answer"
        child_bytes = parent_conn.recv_bytes()
        assert parent_conn.poll(CHILD_DEADLINE_S), "multiprocessing child did not answer"
        child_keep = np.frombuffer(parent_conn.recv_bytes(), dtype=np.bool_)
    finally:
        proc.join(CHILD_DEADLINE_S)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    assert child_bytes != SecureRNG().random_bytes(32)
    parent_keep = dpselect.select(HALF_COUNTS, 1.0, 1e-5)
    assert child_keep.shape == parent_keep.shape
    assert not np.array_equal(child_keep, parent_keep)


def test_selection_kernel_differs_between_parent_and_child() -> None:
    dpselect.select(HALF_COUNTS, 1.0, 1e-5)  # parent state in use before the fork
    child = _run_in_child(lambda: dpselect.select(HALF_COUNTS, 1.0, 1e-5).tobytes())
    parent = dpselect.select(HALF_COUNTS, 1.0, 1e-5)
    assert not child.startswith(b"ERR:"), child
    child_keep = np.frombuffer(child, dtype=np.bool_)
    assert child_keep.shape == parent.shape
    assert not np.array_equal(child_keep, parent)
    # both are real draws: neither is all-kept or all-dropped
    assert 0 < child_keep.sum() < child_keep.size and 0 < parent.sum() < parent.size


def test_release_kernel_differs_between_parent_and_child() -> None:
    counts = np.full(1000, 100, dtype=np.int64)
    dpselect.release(counts, 1.0, 1e-5)
    child = _run_in_child(lambda: dpselect.release(counts, 1.0, 1e-5).noisy_counts.tobytes())
    parent = dpselect.release(counts, 1.0, 1e-5).noisy_counts
    assert not child.startswith(b"ERR:"), child
    assert not np.array_equal(np.frombuffer(child, dtype=np.int64), parent)


def test_large_parallel_batch_works_in_forked_child() -> None:
    """A batch big enough to be split across the worker pool (>= 2^19 counts, 2+ cores) must also
    run in a child forked after the parent used the pool: the pool's threads do not survive
    fork(), so reusing the parent's executor in the child hangs."""
    counts = np.full(1 << 20, 12, dtype=np.int64)
    parent = dpselect.select(counts, 1.0, 1e-5)  # starts the parent's worker threads
    # the child needs ~10 ms; a short guard keeps a hang from eating the suite's time budget
    child = _run_in_child(lambda: dpselect.select(counts, 1.0, 1e-5).tobytes(), deadline=5.0)
    assert not child.startswith(b"ERR:"), child
    child_keep = np.frombuffer(child, dtype=np.bool_)
    assert child_keep.shape == parent.shape and not np.array_equal(child_keep, parent)


# ------------------------------------------------------------------ deterministic RNG across fork

def _use_test_rng_in_child(action: Callable[[InsecureDeterministicRNG], object]) -> bytes:
    rng = InsecureDeterministicRNG(99)
    rng.random_bytes(10)  # used in the parent first
    result = _run_in_child(lambda: repr(action(rng)).encode())
    rng.random_bytes(10)  # still fine in the parent
    return result


@pytest.mark.parametrize(
    "action",
    [
        lambda r: r.random_bytes(8),
        lambda r: r.uniform_below(1000),
        lambda r: dpselect.select(HALF_COUNTS, 1.0, 1e-5, rng=r),
        lambda r: dpselect.release(np.arange(50), 1.0, 1e-5, rng=r),
    ],
    ids=["random_bytes", "uniform_below", "select", "release"],
)
def test_test_rng_used_in_forked_child_raises(action: Callable[[InsecureDeterministicRNG], object]) -> None:
    result = _use_test_rng_in_child(action)
    assert result.startswith(b"ERR:RuntimeError"), result
    assert b"fork" in result


def test_fresh_test_rng_in_forked_child_is_allowed() -> None:
    """Creating a new deterministic RNG in the child is the documented remedy."""
    expected = InsecureDeterministicRNG(7, stream=3).random_bytes(16)
    child = _run_in_child(lambda: InsecureDeterministicRNG(7, stream=3).random_bytes(16))
    assert child == expected


# ------------------------------------------------------------------ threads

def test_two_threads_get_different_streams() -> None:
    barrier = threading.Barrier(2)
    results: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []

    def worker(slot: int) -> None:
        try:
            rng = SecureRNG()
            barrier.wait(timeout=CHILD_DEADLINE_S)
            results[slot] = [rng.random_bytes(32) for _ in range(200)]
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=CHILD_DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock)"
    assert not errors, errors
    a, b = results[0], results[1]
    assert len(set(a)) == len(a) and len(set(b)) == len(b)
    assert not set(a) & set(b)


def test_two_threads_running_the_kernel_concurrently_get_different_decisions() -> None:
    barrier = threading.Barrier(2)
    counts = np.tile(HALF_COUNTS, 20)
    results: dict[int, np.ndarray] = {}

    def worker(slot: int) -> None:
        barrier.wait(timeout=CHILD_DEADLINE_S)
        results[slot] = dpselect.select(counts, 1.0, 1e-5)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=CHILD_DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock)"
    assert not np.array_equal(results[0], results[1])


def test_test_rng_is_one_stream_across_threads() -> None:
    """A deterministic RNG used from two threads in turn stays one deterministic stream (it is a
    per-object state, not a per-thread one); the secure draws in between do not disturb it."""
    reference = InsecureDeterministicRNG(3)
    expected = reference.random_bytes(64)
    rng = InsecureDeterministicRNG(3)
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.append(rng.random_bytes(32)), daemon=True)
    t.start()
    t.join(timeout=CHILD_DEADLINE_S)
    assert not t.is_alive(), "the thread did not finish (deadlock)"
    SecureRNG().random_bytes(100)
    out.append(rng.random_bytes(32))
    assert b"".join(out) == expected


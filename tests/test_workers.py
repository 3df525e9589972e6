"""The package's worker threads (dpselect._workers): one pool, one fork hook, one owner.

A lane runs its tasks one at a time in the order given; pieces come back in order with the
first error; a forked child builds its own pool and leaves its parent's as it was; and no module
but dpselect._workers starts a thread or registers a fork hook.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dpselect import _workers
from dpselect.testing import ALLOW_ENV

PACKAGE = Path(__file__).resolve().parent.parent / "dpselect"
# Where the dpselect under test was imported from (the source tree, or an install): child
# interpreters must import the same one.
IMPORTED_FROM = Path(_workers.__file__).resolve().parent.parent


def test_a_lane_runs_its_tasks_one_at_a_time_in_order() -> None:
    order: list[int] = []
    active = [0]
    overlap: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        with lock:
            active[0] += 1
            overlap.append(active[0])
        order.append(i)
        with lock:
            active[0] -= 1
        return i * i

    with _workers.Lane() as lane:
        futures = [lane.submit(task, i) for i in range(200)]
        results = [f.result() for f in futures]
    assert order == list(range(200)) and results == [i * i for i in range(200)]
    assert max(overlap) == 1


def test_leaving_a_lane_cancels_what_has_not_started() -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def first() -> None:
        started.set()
        release.wait(timeout=30)
        ran.append(0)

    with pytest.raises(KeyError), _workers.Lane() as lane:
        lane.submit(first)
        later = lane.submit(ran.append, 1)
        assert started.wait(timeout=30)
        release.set()
        raise KeyError("the caller failed")
    assert later.cancelled() or ran == [0, 1]
    assert ran[0] == 0  # the running task was waited for before the error came out


def test_pieces_come_back_in_order_and_the_first_error_wins() -> None:
    pieces = [(i,) for i in range(9)]
    assert _workers.run_pieces(lambda i: i + 1, pieces, parallel=True) == list(range(1, 10))
    done: list[int] = []

    def work(i: int) -> int:
        done.append(i)
        if i in (3, 5):
            raise ValueError(f"piece {i}")
        return i

    with pytest.raises(ValueError, match="piece 3"):
        _workers.run_pieces(work, pieces, parallel=True)
    assert sorted(done) == list(range(9))  # every piece finished before the error came out


def test_work_started_on_a_pool_thread_runs_there() -> None:
    """A pool thread that waited on the pool could wait on itself: its jobs run in place."""
    def nested() -> tuple[bool, list[int], list[int]]:
        with _workers.Lane() as lane:
            inner = lane.submit(lambda: 7).result()
        return _workers.on_worker(), _workers.run_pieces(lambda i: i, [(1,), (2,)], parallel=True), [inner]

    with _workers.Lane() as lane:
        assert lane.submit(nested).result() == (True, [1, 2], [7])
    assert not _workers.on_worker()


def test_the_pool_has_one_thread_per_core_besides_the_caller() -> None:
    """Many pieces never grow the pool beyond the cores (or what an earlier call asked for)."""
    before = _workers.pool_size()
    _workers.run_pieces(lambda i: i, [(i,) for i in range(4 * _workers.cores())], parallel=True)
    assert 1 <= len(_workers.threads()) <= _workers.pool_size() == before >= max(1, _workers.cores() - 1)
    assert all(t.name.startswith("dpselect-worker") for t in _workers.threads())


def test_a_call_asking_for_more_threads_than_cores_gets_a_pool_for_them() -> None:
    """threads=N above the cores: the pool grows to N - 1 threads besides the caller's, so the
    parallel code runs on N threads even on a small machine (and tests exercise it)."""
    from dpselect._threads import using

    wanted = _workers.cores() + 3
    seen: set[str] = set()
    barrier = threading.Barrier(wanted, timeout=30)

    def piece(_: int) -> None:
        seen.add(threading.current_thread().name)
        barrier.wait()  # every piece at once: only N threads can get here together

    with using(wanted):
        _workers.run_pieces(piece, [(i,) for i in range(wanted)], parallel=True)
    assert len(seen) == wanted
    assert _workers.pool_size() >= wanted - 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_uses_a_pool_of_its_own_and_the_parent_keeps_its_own() -> None:
    """Forked in a fresh interpreter (not the test runner's process): the parent's pool threads
    exist when it forks; the child finds no pool thread, runs a lane and parallel pieces on a pool
    it builds, and the parent's pool, its threads untouched, still runs work afterwards."""
    script = textwrap.dedent("""
        import os, signal, sys
        from dpselect import _workers

        def work():
            with _workers.Lane() as lane:
                lane_results = [lane.submit(pow, i, 2) for i in range(50)]
                pieces = _workers.run_pieces(lambda i: -i, [(i,) for i in range(8)], parallel=True)
                return [f.result() for f in lane_results], pieces

        expected = work()
        parent_threads = set(_workers.threads())
        assert parent_threads, "the parent's pool has no thread"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a child waiting on a thread it does not have dies, and says nothing
            code = 1
            try:
                before = _workers.threads()
                got = work()
                after = _workers.threads()
                ok = before == () and got == expected and len(after) >= 1
                os.write(write, b"child ok" if ok else repr((before, got, after)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            child = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert child == "child ok", child
        assert set(_workers.threads()) >= parent_threads  # the parent's threads are alive
        assert work() == expected
        print("parent ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(IMPORTED_FROM), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "parent ok"


def test_rows_are_counted_from_an_atexit_handler() -> None:
    """After the interpreter's threads are shut down (atexit handlers run then), no pool takes new
    work: the counter's two-thread steps run on the calling thread instead of failing ("cannot
    schedule new futures after interpreter shutdown")."""
    script = textwrap.dedent("""
        import atexit, warnings
        import pyarrow as pa
        from dpselect.ingest.rows import RowCounter
        from dpselect.testing import InsecureDeterministicRNG

        warnings.simplefilter("ignore")
        t = pa.table({"user": pa.array([i % 5000 for i in range(40_000)]),
                      "key": pa.array([i % 37 for i in range(40_000)])})

        def count(final):
            counter = RowCounter("user", ["key"])
            counter.feed(t, final=final)
            result = counter.finish(2, None, rng=InsecureDeterministicRNG(1))
            return result.counts.tolist()

        expected = [count(False), count(True)]
        atexit.register(lambda: print("at exit", [count(False), count(True)] == expected, flush=True))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(IMPORTED_FROM), os.environ.get("PYTHONPATH", "")]),
           ALLOW_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "at exit True", out.stderr


# Ways to start a thread, a pool or a process, or to hook fork(), anywhere in the package.
_THREAD_MAKERS = re.compile(
    r"\bThreadPoolExecutor\b|\bProcessPoolExecutor\b|\bthreading\s*\.\s*Thread\b|\bfrom\s+threading\s+import\b[^\n]*\bThread\b"
    r"|\b_thread\b|\bstart_new_thread\b|\bmultiprocessing\b|\bos\s*\.\s*fork\b|\bregister_at_fork\b|\bpthread_create\b"
)


def test_only_the_workers_module_starts_threads_or_hooks_fork() -> None:
    """Every worker thread and pool of the package comes from dpselect._workers, which alone
    registers a fork hook for them. The CSPRNG's fork detection (_rng.pyx, the C state's fork
    counter) is the one other fork hook, and it starts no thread."""
    allowed = {"_workers.py": None, "_rng.pyx": {"register_at_fork"}}
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in {".py", ".pyx", ".pxd"}:
            continue
        hits = sorted({m.group(0) for m in _THREAD_MAKERS.finditer(path.read_text(encoding="utf-8"))})
        if not hits or path.name in allowed and (allowed[path.name] is None or set(hits) <= allowed[path.name]):
            continue
        found[str(path.relative_to(PACKAGE))] = hits
    assert found == {}
    assert _THREAD_MAKERS.search(Path(_workers.__file__).read_text(encoding="utf-8"))  # the scan does see them

"""Concurrency and faults: every public entry point from many threads at once, multiprocessing
with each start method, fork() while another thread is in a kernel call, memory that stays flat
over many calls, the CLI killed mid-run, and outputs that cannot be written (a read-only
directory or file system, /dev/full, a full file system).

tests/test_fork_threads.py covers fork() from a single thread, the "fork" start method and two
threads; this file goes further without repeating them. tests/test_gil_release.py shows that every
batch entry point releases the GIL in its C loop. No test sleeps or measures time: every
wait is on an event (a barrier, a pipe, a process exit, an inotify event), with a generous
deadline only to turn a deadlock into a failure.
"""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing as mp
import os
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable

import numpy as np
import pytest

import dpselect
from dpselect.rng import SecureRNG

pa = pytest.importorskip("pyarrow")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # fork() with threads (3.12+)
    pytest.mark.filterwarnings("ignore::dpselect.ingest.rows.NullPrivacyUnitsDropped"),
]

DEADLINE_S = 60.0  # only a deadlock guard: every wait below normally ends in milliseconds
EPS, DELTA = 1.0, 1e-5
# Counts of about one half: n = 11 is kept with probability 0.348, n = 12 with 0.760 (ε=1, δ=1e-5).
HALF_COUNTS = np.array([11, 12] * 1000, dtype=np.int64)
CLI_FLAGS = ["--privacy-unit", "u", "--by", "k", "--epsilon", "1", "--delta", "1e-5"]


def _half_table(partitions: int = 200) -> pa.Table:
    """Rows of partitions with 11 or 12 distinct users each (one row per user): every partition
    is kept with a probability near one half, so two independent selections differ."""
    keys, users = [], []
    for p in range(partitions):
        for i in range(11 + p % 2):
            keys.append(f"k{p}")
            users.append(f"u{p}-{i}")
    return pa.table({"u": users, "k": keys})


def _join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(timeout=DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock)"


# ------------------------------------------------------------------ many threads, every entry point

def _every_entry_point(table: pa.Table) -> dict[str, object]:
    """One call of each public entry point; the results that must be random (a fresh stream per
    thread) as bytes, the others as they are."""
    from dpselect.personalized import pdp_count
    from dpselect.rainbow import line_mechanism

    out: dict[str, object] = {}
    keep = dpselect.select(HALF_COUNTS, EPS, DELTA)
    assert keep.dtype == np.bool_ and keep.shape == HALF_COUNTS.shape
    out["select"] = keep.tobytes()
    # a strategy no thread has built yet: every thread builds and caches it at once
    keep = dpselect.select(HALF_COUNTS, 1.2345, 1e-6, max_partitions_contributed=3)
    assert keep.shape == HALF_COUNTS.shape
    counts = np.full(1000, 100, dtype=np.int64)
    keep, noisy = dpselect.release(counts, EPS, DELTA)
    assert keep.shape == noisy.shape == counts.shape and np.all(noisy[keep] > 0) and np.all(noisy[~keep] == 0)
    out["release"] = noisy.tobytes()
    selected = dpselect.select_partitions(table, privacy_unit="u", by="k", epsilon=EPS, delta=DELTA,
                                          strategy="pi_opt")
    kept = selected.column("k").to_pylist()
    assert set(kept) <= set(table.column("k").to_pylist()) and len(set(kept)) == len(kept)
    out["select_partitions"] = "\n".join(sorted(kept)).encode()
    users = np.repeat(np.arange(2000), 2)
    parts = np.tile(np.arange(2), 2000) + 2 * (users % 50)
    keep = dpselect.select_rows(users, parts, EPS, DELTA, strategy="weighted_laplace", max_partitions_contributed=2)
    assert keep.dtype == np.bool_ and keep.shape == (100,)
    agg = dpselect.aggregate(table, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=EPS,
                             delta=DELTA, max_partitions_contributed=1, max_contributions_per_partition=1)
    assert set(agg.frame.column("k").to_pylist()) <= set(table.column("k").to_pylist())
    assert all(n is not None for n in agg.frame.column("n").to_pylist())
    probability = dpselect.keep_probability(np.arange(40), EPS, DELTA)
    out["keep_probability"] = probability  # deterministic: the same in every thread
    estimate = pdp_count(np.ones(300, dtype=np.int64), np.full(300, 0.7)).estimate
    assert 0 <= estimate <= 300
    answers = line_mechanism([0.1, 0.9], 0.5, 6).sample(np.zeros(2000, dtype=np.int64)).answers
    assert set(np.unique(answers).tolist()) <= {0, 1}
    out["rainbow"] = np.asarray(answers).tobytes()
    out["bytes"] = SecureRNG().random_bytes(32)
    return out


def test_every_entry_point_from_eight_threads_at_once() -> None:
    table = _half_table()
    barrier = threading.Barrier(8)
    results: dict[int, dict[str, object]] = {}
    errors: list[BaseException] = []

    def worker(slot: int) -> None:
        try:
            barrier.wait(timeout=DEADLINE_S)
            results[slot] = _every_entry_point(table)
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    _join(threads)
    assert not errors, errors
    assert len(results) == 8
    for name in ("select", "release", "select_partitions", "rainbow", "bytes"):
        outputs = [results[i][name] for i in range(8)]
        assert len(set(outputs)) == 8, f"two threads drew the same {name} output: a shared stream"
    reference = dpselect.keep_probability(np.arange(40), EPS, DELTA)
    for i in range(8):
        np.testing.assert_array_equal(results[i]["keep_probability"], reference)


# ------------------------------------------------------------------ multiprocessing, every start method

def _mp_select_partitions(conn: "mp.connection.Connection") -> None:
    """A child: select_partitions on the half table, and 32 bytes of its secure generator."""
    try:
        result = dpselect.select_partitions(_half_table(), privacy_unit="u", by="k", epsilon=EPS, delta=DELTA,
                                            strategy="pi_opt")
        conn.send(("ok", sorted(result.column("k").to_pylist()), SecureRNG().random_bytes(32)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}", b""))
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["fork", pytest.param("forkserver", marks=pytest.mark.slow),
                                    pytest.param("spawn", marks=pytest.mark.slow)])
def test_multiprocessing_children_select_with_their_own_streams(method: str) -> None:
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = mp.get_context(method)
    # the parent's own state exists and was used before the children start
    parent_keys = sorted(dpselect.select_partitions(_half_table(), privacy_unit="u", by="k", epsilon=EPS,
                                                    delta=DELTA, strategy="pi_opt").column("k").to_pylist())
    parent_bytes = SecureRNG().random_bytes(32)
    children = []
    for _ in range(2):
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_mp_select_partitions, args=(sender,))
        proc.start()
        sender.close()
        children.append((proc, receiver))
    answers = []
    for proc, receiver in children:
        try:
            assert receiver.poll(DEADLINE_S), f"a {method} child did not answer"
            answers.append(receiver.recv())
        finally:
            proc.join(DEADLINE_S)
            if proc.is_alive():
                proc.kill()
        assert proc.exitcode == 0, proc.exitcode
    all_keys = {f"k{p}" for p in range(200)}
    for status, keys, random_bytes in answers:
        assert status == "ok", keys
        assert set(keys) <= all_keys and 0 < len(keys) < len(all_keys)
        assert len(random_bytes) == 32
    selections = [tuple(keys) for _, keys, _ in answers] + [tuple(parent_keys)]
    streams = [b for _, _, b in answers] + [parent_bytes]
    assert len(set(selections)) == 3, "two processes made the same selection: a shared stream"
    assert len(set(streams)) == 3, "two processes drew the same bytes"


# ------------------------------------------------------------------ fork() while a kernel call runs

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_another_thread_is_inside_a_kernel_call() -> None:
    """One thread runs selections back to back (each inside the kernel, the GIL released, its
    state locked); another forks as soon as the first has started. The child must still draw
    fresh randomness (no lock left held by the vanished thread, no replay of either parent
    thread's stream)."""
    counts = np.tile(HALF_COUNTS, 100)  # 2e5 counts: one kernel call on the calling thread
    started = threading.Event()
    stop = threading.Event()
    busy_results: list[bytes] = []

    def busy() -> None:
        while not stop.is_set():
            started.set()
            busy_results.append(dpselect.select(counts, EPS, DELTA).tobytes())

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    assert started.wait(DEADLINE_S)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread exists here
        code = 0
        try:
            os.close(read_fd)
            payload = SecureRNG().random_bytes(32) + dpselect.select(HALF_COUNTS, EPS, DELTA).tobytes()
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(payload)
        except BaseException:  # noqa: BLE001 - the child must reach os._exit whatever happens
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        parent = SecureRNG().random_bytes(32) + dpselect.select(HALF_COUNTS, EPS, DELTA).tobytes()
        ready, _, _ = select.select([read_fd], [], [], DEADLINE_S)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the forked child did not answer (deadlock after fork)")
        chunks = []
        while True:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        child = b"".join(chunks)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        stop.set()
        _join([worker])
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child) == len(parent) == 32 + HALF_COUNTS.size
    assert child[:32] != parent[:32], "the child repeated the parent's bytes"
    assert child[32:] != parent[32:], "the child repeated the parent's selection"
    keep = np.frombuffer(child[32:], dtype=np.bool_)
    assert 0 < int(keep.sum()) < keep.size
    assert all(child[32:] not in r for r in busy_results)


# ------------------------------------------------------------------ memory stays flat

@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm")
@pytest.mark.not_under_sanitizers(reason="AddressSanitizer keeps freed memory in its quarantine (256 MB by "
                                         "default) instead of reusing it, so the RSS grows by design")
def test_memory_stays_flat_over_ten_thousand_small_calls() -> None:
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    table = _half_table(20)
    counts = np.array([3, 11, 12, 40, 1000], dtype=np.int64)

    def calls(i: int) -> None:
        dpselect.select(counts, EPS, DELTA)
        dpselect.release(counts, EPS, DELTA)
        dpselect.keep_probability(counts, EPS, DELTA)
        if i % 10 == 0:
            dpselect.select_partitions(table, privacy_unit="u", by="k", epsilon=EPS, delta=DELTA)
        if i % 50 == 0:
            dpselect.aggregate(table, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=EPS,
                               delta=DELTA, max_partitions_contributed=1, max_contributions_per_partition=1)

    for i in range(1000):  # warm-up: caches, pools, allocator arenas
        calls(i)
    before = rss()
    for i in range(10_000):
        calls(i)
    grown = rss() - before
    assert grown < 20 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 10^4 calls"


# ------------------------------------------------------------------ the CLI killed mid-run

def _default_stop_signals() -> None:
    """Run in the child before exec: a run started as a background job of a shell without job
    control inherits SIGINT ignored, and the CLI (rightly) keeps ignoring a signal its parent told
    it to ignore, so these tests would see a release instead of an interrupt."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dpselect.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_default_stop_signals, **kwargs)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the CLI did not exit after the signal")
    return proc.returncode, err.decode(errors="replace")


def _leftovers(directory) -> list[str]:
    return sorted(os.listdir(directory))


SIGNALS = [pytest.param(signal.SIGINT, 130, "interrupted", id="SIGINT"),
           pytest.param(signal.SIGTERM, 143, "terminated", id="SIGTERM")]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_input_is_refused_without_waiting_for_a_writer(tmp_path) -> None:
    """The readers seek in their input: a FIFO used to block the CLI until a writer came, then
    fail with "lseek failed". It is refused at once, before it is opened."""
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _cli("select", str(fifo), *CLI_FLAGS, "-o", str(out_dir / "released.parquet"))
    returncode, err = _finish(proc)  # no writer ever opens the FIFO: a hang fails here
    assert returncode == 3, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and "not a regular file" in lines[0] and repr(str(fifo)) in lines[0], err
    assert _leftovers(out_dir) == []


class _Inotify:
    """inotify(7) through libc: wait, without polling, until a process opens and reads a file."""

    IN_ACCESS, IN_OPEN = 0x1, 0x20

    def __init__(self, path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_ACCESS | self.IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), "inotify unavailable")

    def wait(self, predicate: Callable[[list[int]], bool]) -> None:
        masks: list[int] = []
        while not predicate(masks):
            ready, _, _ = select.select([self.fd], [], [], DEADLINE_S)
            assert ready, "the CLI never read its input"
            data = os.read(self.fd, 1 << 16)
            offset = 0
            while offset < len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                masks.append(mask)
                offset += 16 + length

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory):
    """A CSV of 4 million rows (~80 MB): reading and counting it takes seconds, the signal
    arrives within microseconds of the CLI starting to read."""
    path = tmp_path_factory.mktemp("big") / "big.csv"
    rng = np.random.default_rng(12345)
    users = rng.integers(0, 1_000_000, size=4_000_000)
    keys = rng.integers(0, 5000, size=users.size)
    with open(path, "wb") as f:
        f.write(b"u,k\n")
        for start in range(0, users.size, 500_000):
            u, k = users[start:start + 500_000], keys[start:start + 500_000]
            f.write("".join(f"{a},key{b}\n" for a, b in zip(u.tolist(), k.tolist())).encode())
    return path


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs inotify")
@pytest.mark.parametrize(("signum", "code", "word"), SIGNALS)
def test_cli_killed_while_reading_a_big_csv(tmp_path, big_csv, signum: int, code: int, word: str) -> None:
    """The CLI reads the CSV's header, closes it, opens it again and streams it: the signal is
    sent at the first read of that second opening (inotify). Nothing is written, no temporary
    file is left, and the input is byte-identical."""
    digest = hashlib.sha256(big_csv.read_bytes()).hexdigest()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "released.parquet"
    try:
        watch = _Inotify(big_csv)
    except OSError as exc:
        pytest.skip(str(exc))
    try:
        proc = _cli("select", str(big_csv), *CLI_FLAGS, "--batch-size", "20000", "-o", str(out))
        try:
            # the second IN_OPEN (the streaming reader), then an IN_ACCESS after it
            def streaming(masks: list[int]) -> bool:
                opens = [i for i, m in enumerate(masks) if m & _Inotify.IN_OPEN]
                return len(opens) >= 2 and any(m & _Inotify.IN_ACCESS for m in masks[opens[1]:])

            watch.wait(streaming)
            assert proc.poll() is None, "the CLI finished before the signal: make the input bigger"
            proc.send_signal(signum)
            returncode, err = _finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        watch.close()
    assert returncode == code, err
    assert word in err and "no output was written" in err and "Traceback" not in err, err
    assert _leftovers(out_dir) == []
    assert hashlib.sha256(big_csv.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("interrupted", [False, True])
def test_the_command_skips_finalization_only_after_an_interrupt(monkeypatch, interrupted: bool) -> None:
    """A run stopped by a signal leaves at once (os._exit) after its cleanup: finalizing the
    interpreter while pyarrow's reader threads are mid-read could abort the process (exit -6
    instead of 128 + the signal, seen about once in a hundred runs of the test above). A run
    that ended normally exits through sys.exit, so its buffered output and atexit hooks run."""
    from dpselect.cli import command as cli

    code = 143 if interrupted else 0

    def fake_main(argv=None, *, exiting: bool = False) -> int:
        assert exiting  # the command's own run: it leaves the signal handlers in place
        cli._interrupted = interrupted
        return code

    exits: list[tuple[str, int]] = []

    def fake_os_exit(status: int) -> None:
        exits.append(("os._exit", status))
        raise SystemExit(status)

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setattr(cli, "_interrupted", False)
    monkeypatch.setattr(cli.os, "_exit", fake_os_exit)
    with pytest.raises(SystemExit) as stopped:
        cli.console_main()
    assert stopped.value.code == code
    assert exits == ([("os._exit", code)] if interrupted else [])


# ------------------------------------------------------------------ outputs that cannot be written

@pytest.fixture
def small_csv(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("u,k\n" + "".join(f"u{i},popular\n" for i in range(300)))
    return path


def _run_cli(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "dpselect.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)
    return proc.returncode, proc.stderr


def _one_line_output_error(code: int, err: str, output: str) -> None:
    from dpselect import cli

    assert code == cli.EXIT_OUTPUT, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("dpselect: error: "), err
    assert repr(output) in lines[0], f"the error does not name the output: {err!r}"
    assert "Traceback" not in err


def test_unwritable_output_directory(tmp_path, small_csv) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        probe = locked / "probe"
        try:
            probe.write_text("")
        except PermissionError:
            pass
        else:
            probe.unlink()
            pytest.skip("permissions are not enforced here (running as root)")
        out = str(locked / "out.csv")
        before = small_csv.read_bytes()
        code, err = _run_cli("select", str(small_csv), *CLI_FLAGS, "-o", out)
        _one_line_output_error(code, err, out)
        assert "not writable" in err
        assert os.listdir(locked) == [] and small_csv.read_bytes() == before
    finally:
        os.chmod(locked, 0o700)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_dev_full_as_the_output(small_csv) -> None:
    """Writing to /dev/full fails with ENOSPC (a character device: written through)."""
    code, err = _run_cli("select", str(small_csv), *CLI_FLAGS, "-o", "/dev/full")
    _one_line_output_error(code, err, "/dev/full")
    assert "No space left on device" in err


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (needs root and mount privileges; skipped otherwise), unmounted after."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                                capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=60, check=False)


@pytest.mark.slow
def test_full_file_system(tiny_tmpfs, small_csv) -> None:
    filler = tiny_tmpfs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:  # ENOSPC: the file system is full
        pass
    finally:
        os.close(fd)
    size = filler.stat().st_size
    out = str(tiny_tmpfs / "out.csv")
    before = small_csv.read_bytes()
    code, err = _run_cli("select", str(small_csv), *CLI_FLAGS, "-o", out)
    _one_line_output_error(code, err, out)
    assert "No space left on device" in err
    assert os.listdir(tiny_tmpfs) == ["filler"] and filler.stat().st_size == size
    assert small_csv.read_bytes() == before


@pytest.mark.slow
def test_read_only_file_system(tiny_tmpfs, small_csv) -> None:
    result = subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True, text=True,
                            timeout=60, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot remount read-only: {result.stderr.strip()}")
    out = str(tiny_tmpfs / "out.csv")
    code, err = _run_cli("select", str(small_csv), *CLI_FLAGS, "-o", out)
    _one_line_output_error(code, err, out)
    assert "not writable" in err and os.listdir(tiny_tmpfs) == []

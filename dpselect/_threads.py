"""How many threads a call of dpselect may use: one validated resolution for ``threads=`` (Python),
``--threads`` (CLI) and the environment variable ``DPSELECT_MAX_THREADS``.

The default is every core the process may run on: the CPUs of its affinity mask
(``os.sched_getaffinity``), and no more than its cgroup CPU quota (cgroup v2 ``cpu.max``, v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, rounded up), the smaller of the two: a container
limited to 2 CPUs on a 64-core host gets 2, not 64, so its threads are not descheduled in turn by
the quota. Inside a Spark task (``pyspark.TaskContext.get()`` is not None) the default is one
thread: Spark already runs one task per core, and more threads per task would only compete with
the other tasks of the executor.

Order of precedence: the explicit argument, then ``DPSELECT_MAX_THREADS``, then the Spark rule,
then the cores. The chosen number changes only how fast a job runs, never its result or its
privacy: the work is split into shards fixed by the input alone, each with its own CSPRNG stream,
and the threads take shards (docs/rows.md, "Threads").

The number in force for the current call is kept in a context variable (:func:`using`), so the
places that split work (the rows path, the bounding of :func:`dpselect.aggregate`, the metrics'
noise) read it with :func:`current` instead of every signature passing it along.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["ENV_VAR", "MAX_THREADS", "available_cores", "cgroup_cpu_limit", "current", "for_call", "in_spark_task",
           "requested", "resolve_threads", "using"]

ENV_VAR = "DPSELECT_MAX_THREADS"

# More threads than this is a mistake (a row count passed as threads, say), not a machine.
MAX_THREADS = 1024

_CGROUP_ROOT = "/sys/fs/cgroup"

_CURRENT: ContextVar[int | None] = ContextVar("dpselect_threads", default=None)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def cgroup_cpu_limit(root: str = _CGROUP_ROOT) -> int | None:
    """The CPUs the cgroup quota allows (quota / period, rounded up, at least 1), or None where
    there is no quota (or no cgroup file to read): v2 ``cpu.max`` ("max 100000" or
    "200000 100000"), else v1 ``cpu/cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (quota -1: none)."""
    v2 = _read(os.path.join(root, "cpu.max"))
    if v2 is not None:
        parts = v2.split()
        if len(parts) >= 1 and parts[0] == "max":
            return None
        try:
            quota, period = int(parts[0]), int(parts[1]) if len(parts) > 1 else 100_000
        except (ValueError, IndexError):
            return None
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    for base in (os.path.join(root, "cpu"), os.path.join(root, "cpu,cpuacct"), root):
        quota_text = _read(os.path.join(base, "cpu.cfs_quota_us"))
        period_text = _read(os.path.join(base, "cpu.cfs_period_us"))
        if quota_text is None or period_text is None:
            continue
        try:
            quota, period = int(quota_text), int(period_text)
        except ValueError:
            return None
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    return None


def available_cores() -> int:
    """The CPUs this process may run on: its affinity mask, capped by the cgroup quota (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, limit) if limit is not None else cpus)


def in_spark_task() -> bool:
    """Whether this code runs inside a Spark task (pyspark imported and a task context set); never
    imports pyspark itself."""
    import sys

    module = sys.modules.get("pyspark")
    if module is None:
        return False
    try:
        return module.TaskContext.get() is not None
    except Exception:  # noqa: BLE001 - an odd pyspark: not a task we can see
        return False


def _check(value: object, what: str, advice: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        import numpy as np

        if not isinstance(value, np.integer) or isinstance(value, np.bool_):
            raise TypeError(f"{what} must be a whole number of threads (an int >= 1), got "
                            f"{type(value).__name__} {value!r}; {advice}")
    number = int(value)
    if not 1 <= number <= MAX_THREADS:
        raise ValueError(f"{what} must be between 1 and {MAX_THREADS}, got {number}; {advice}")
    return number


def resolve_threads(threads: object = None, *, name: str = "threads") -> int:
    """The number of threads for a call: ``threads`` when given (an int in [1, 1024]; ``name`` is
    how the caller spells the parameter, e.g. "--threads" on the CLI), else the environment
    variable ``DPSELECT_MAX_THREADS``, else 1 inside a Spark task, else :func:`available_cores`.
    A bad value raises TypeError or ValueError naming ``name`` or the environment variable."""
    if threads is not None:
        return _check(threads, name, f"leave {name} out to use every available core "
                                     f"({available_cores()} here)")
    env = os.environ.get(ENV_VAR)
    if env is not None and env.strip():
        text = env.strip()
        try:
            number = int(text, 10)
        except ValueError:
            raise ValueError(f"environment variable {ENV_VAR}={env!r} must be a whole number of threads "
                             f"(an int >= 1); unset it to use every available core") from None
        return _check(number, f"environment variable {ENV_VAR}", "unset it to use every available core")
    if in_spark_task():
        return 1
    return available_cores()


def for_call(threads: object = None, *, name: str = "threads") -> int:
    """The threads of a call given ``threads``: the argument when given, else the number in force
    around the call (:func:`using`: the CLI's ``--threads``), else :func:`resolve_threads`'s
    default."""
    if threads is None:
        value = _CURRENT.get()
        if value is not None:
            return value
    return resolve_threads(threads, name=name)


def requested() -> int | None:
    """The threads of the call in progress on this thread (:func:`using`), None outside one."""
    return _CURRENT.get()


def current() -> int:
    """The threads of the call in progress on this thread (:func:`using`), else the default."""
    value = _CURRENT.get()
    return resolve_threads() if value is None else value


@contextmanager
def using(threads: int) -> Iterator[int]:
    """Make ``threads`` (already resolved) the number :func:`current` gives inside the block."""
    token = _CURRENT.set(threads)
    try:
        yield threads
    finally:
        _CURRENT.reset(token)

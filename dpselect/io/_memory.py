"""How much memory the command line may hold to count an input whole rather than stream it
(:func:`in_memory_budget`). Public names are re-exported by :mod:`dpselect.io.files`."""
from __future__ import annotations

import os

__all__ = ["IN_MEMORY_ENV", "in_memory_budget"]

# Overrides the memory an input may take to be counted whole (bytes; 0: always stream), see
# in_memory_budget. For tests and for hosts whose available memory the kernel misreports.
IN_MEMORY_ENV = "DPSELECT_IN_MEMORY_BYTES"


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux), None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) may still allocate, when it has a memory limit: a
    container's limit is not in /proc/meminfo, which shows the host's memory."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.strip().split(":", 2)[2] for line in f if line.startswith("0::")), None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as f:
            used = int(f.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError, IndexError):
        return None


def in_memory_budget() -> int:
    """Bytes the CLI may hold to count an input whole (the needed columns in Arrow layout plus
    the grouping's bytes a row), rather than streaming it: half of the memory available when the
    run starts (the smaller of MemAvailable and what a cgroup limit leaves), so the whole-input
    path never pushes a job into swap or the OOM killer; 0 (always stream) where neither can be
    read. ``DPSELECT_IN_MEMORY_BYTES`` overrides it (0 streams every input)."""
    override = os.environ.get(IN_MEMORY_ENV)
    if override is not None:
        try:
            value = int(override)
        except ValueError:
            raise ValueError(f"{IN_MEMORY_ENV} must be a whole number of bytes >= 0, got {override!r}") from None
        if value < 0:
            raise ValueError(f"{IN_MEMORY_ENV} must be a whole number of bytes >= 0, got {override!r}")
        return value
    rooms = [room for room in (_meminfo_available(), _cgroup_room()) if room is not None]
    return min(rooms) // 2 if rooms else 0

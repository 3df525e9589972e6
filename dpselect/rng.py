"""The package's random number generators (docs/privacy/randomness.md).

Every random decision dpselect makes, in C or in Python, comes from a ChaCha20
fast-key-erasure generator keyed from the operating system, with one state per thread and
fork detection (a forked child never repeats its parent's bytes). There is no global seed and
no ``random_state=`` parameter: the only deterministic generator is
:class:`dpselect.testing.InsecureDeterministicRNG`, which must be created explicitly, warns on
every use, and marks results as not private.

Guarantee: computational DP. Probabilities of outputs differ from those of ideal randomness by
at most the advantage of an attacker distinguishing ChaCha20 from random.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
from __future__ import annotations

import hashlib

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpselect import _rng

__all__ = ["RNG", "SecureRNG", "resolve_rng"]

_U64_LIMIT = 2**64


@runtime_checkable
class RNG(Protocol):
    """What mechanisms need from a generator; see :class:`SecureRNG`.

    ``test_state`` is the C state the compiled kernels draw from: None for the secure CSPRNG
    (each thread's own OS-keyed state), a deterministic stream for the test generator.
    ``announce()`` is called once per use, before any draw the kernels make with ``test_state``
    (the test generator warns there that its result is not private)."""

    privacy_guaranteed: bool

    @property
    def test_state(self) -> _rng.TestState | None: ...

    def announce(self) -> None: ...

    def random_bytes(self, n: int) -> bytes: ...

    def uniform_below(self, bound: int) -> int: ...

    def uniform_below_array(self, bound: int, size: int) -> npt.NDArray[np.uint64]: ...

    def bernoulli(self, numerator: int, denominator: int) -> bool: ...

    def sample_cumulative(self, cumulative: npt.ArrayLike, size: int) -> npt.NDArray[np.int64]: ...


class SecureRNG:
    """The OS-keyed ChaCha20 CSPRNG. Stateless on the Python side: each thread draws from its
    own C state, so one instance may be shared freely between threads."""

    # The C state to use; None selects this thread's secure state.
    _test_state: _rng.TestState | None = None

    @property
    def privacy_guaranteed(self) -> bool:
        """False whenever a deterministic state is in use, however it got there."""
        return self._test_state is None

    @property
    def test_state(self) -> _rng.TestState | None:
        """The C state the kernels draw from: None (this thread's secure state) unless this is the
        deterministic test generator."""
        return self._test_state

    def announce(self) -> None:
        """Called once per use of the generator, before its draws: the test RNG's warning; nothing
        to do for the secure generator."""

    def _announce(self) -> None:
        """The former name of :meth:`announce`."""
        self.announce()

    def random_bytes(self, n: int) -> bytes:
        """n bytes from the CSPRNG."""
        self.announce()
        return _rng.random_bytes(_check_count("n", n), self._test_state)

    def uniform_below(self, bound: int) -> int:
        """Exact uniform integer in [0, bound), for any positive Python int."""
        bound = _check_int("bound", bound)
        if bound < 1:
            raise ValueError(f"bound must be >= 1, got {bound}")
        if bound <= _U64_LIMIT:
            return int(self.uniform_below_array(bound, 1)[0])
        # Big bound: rejection on the fewest whole bytes that cover bound - 1 (no modulo bias).
        bits = (bound - 1).bit_length()
        nbytes = (bits + 7) // 8
        mask = (1 << bits) - 1
        while True:
            value = int.from_bytes(self.random_bytes(nbytes), "big") & mask
            if value < bound:
                return value

    def uniform_below_array(self, bound: int, size: int) -> npt.NDArray[np.uint64]:
        """uint64 array of exact uniform integers in [0, bound), 1 <= bound <= 2**64."""
        bound = _check_int("bound", bound)
        if not 1 <= bound <= _U64_LIMIT:
            raise ValueError(f"bound must be in [1, 2**64], got {bound}")
        self.announce()
        return _rng.uniform_below_array(bound, _check_count("size", size), self._test_state)

    def bernoulli(self, numerator: int, denominator: int) -> bool:
        """True with probability numerator / denominator exactly (0 <= numerator <= denominator)."""
        numerator = _check_int("numerator", numerator)
        denominator = _check_int("denominator", denominator)
        if denominator < 1 or not 0 <= numerator <= denominator:
            raise ValueError(
                f"need 0 <= numerator <= denominator and denominator >= 1, got {numerator}/{denominator}"
            )
        if numerator == denominator:
            self.announce()  # no randomness needed for a certain event, but still a use
            return True
        return self.uniform_below(denominator) < numerator

    def sample_cumulative(self, cumulative: npt.ArrayLike, size: int) -> npt.NDArray[np.int64]:
        """Exact inverse-CDF sampling from integer weights.

        ``cumulative`` is a strictly increasing array of non-negative integers C[0] < ... <
        C[m-1] = S <= 2**64 - 1 with C[0] >= 1; returns indices i with probability
        (C[i] - C[i-1]) / S exactly (C[-1] read as 0)."""
        table = _as_cumulative(cumulative)
        self.announce()
        return _rng.sample_cumulative(table, _check_count("size", size), self._test_state)

    def __repr__(self) -> str:
        return "SecureRNG(ChaCha20, OS-seeded, per-thread, fork-safe)"


_SECURE = SecureRNG()


def shard_test_state(test_state: _rng.TestState | None, shard: int) -> _rng.TestState | None:
    """The deterministic state of one shard of a job split over threads: None (each thread's
    own CSPRNG state) for the secure generator; for the test generator, a stream derived from
    the seed and the shard, so a job's results do not depend on which thread ran first."""
    if test_state is None or shard == 0:
        return test_state
    seed = hashlib.sha256(b"dpselect shard %d\x00" % shard + test_state.seed).digest()
    return _rng.TestState(seed, test_state.stream, _rng.ACK_INSECURE)


def resolve_rng(rng: object | None) -> SecureRNG:
    """The generator a mechanism should use: None means the secure CSPRNG; only dpselect's own
    generators are accepted, so numpy or ``random`` generators can never slip in."""
    if rng is None:
        return _SECURE
    if isinstance(rng, SecureRNG):
        return rng
    raise TypeError(
        f"rng must be None (the secure CSPRNG) or a dpselect.testing.InsecureDeterministicRNG, "
        f"got {type(rng).__name__}; numpy and `random` generators are not secure for DP noise"
    )


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return int(value)


# Larger requests cannot be served in memory anyway; refuse them with a message, not an
# OverflowError from the binding or a MemoryError after a long wait.
MAX_DRAWS = 2**40


def _check_count(name: str, value: object) -> int:
    value = _check_int(name, value)
    if not 0 <= value <= MAX_DRAWS:
        raise ValueError(f"{name} must be between 0 and 2**40, got {value}")
    return value


def _as_cumulative(cumulative: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    arr = np.asarray(cumulative)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("cumulative must be a non-empty 1-D array")
    if arr.dtype == object:
        values = [int(v) for v in arr]
        if min(values) < 0 or max(values) >= _U64_LIMIT:
            raise ValueError("cumulative weights must lie in [1, 2**64 - 1]")
        arr = np.array(values, dtype=np.uint64)
    elif not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        raise TypeError(f"cumulative must hold integers, got dtype {arr.dtype}")
    elif np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 1:
        raise ValueError("cumulative weights must be >= 1")
    table = np.ascontiguousarray(arr, dtype=np.uint64)
    if table[0] < 1 or np.any(table[1:] <= table[:-1]):
        raise ValueError("cumulative must be strictly increasing with cumulative[0] >= 1")
    return table

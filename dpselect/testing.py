"""Test-only tools. Nothing here is private; everything here says so loudly.

:class:`InsecureDeterministicRNG` reproduces a ChaCha20 stream from a seed so that tests can
check exact outputs (docs/privacy/randomness.md, "The test generator"):

* it cannot be created unless the environment variable ``DPSELECT_ALLOW_INSECURE_RNG=1`` is set
  (the test suite's conftest sets it), so it cannot be switched on silently;
* every use emits :class:`InsecureRNGWarning`, not just the first (each warning's text carries
  a use counter, so Python's default once-per-location filter cannot swallow the later ones);
* it reports ``privacy_guaranteed = False``; results computed with it carry that flag, and their
  guarantee (and its printed text, in frame metadata too) says "NOT DP";
* using it after ``fork()`` raises instead of repeating its stream in two processes.
It runs the same C generator as production, with the seed as key and the stream as nonce.
"""
from __future__ import annotations

import hashlib
import os
import warnings

from dpselect import _rng
from dpselect.errors import DPSelectWarning
from dpselect.rng import SecureRNG

__all__ = ["InsecureDeterministicRNG", "InsecureRNGWarning", "ALLOW_ENV"]

ALLOW_ENV = "DPSELECT_ALLOW_INSECURE_RNG"


class InsecureRNGWarning(DPSelectWarning):
    """A deterministic RNG was used: the result is NOT differentially private."""


class InsecureDeterministicRNG(SecureRNG):
    """A seeded ChaCha20 stream for tests. NOT DP: anyone with the seed knows all the noise."""

    def __init__(self, seed: bytes | int, stream: int = 0) -> None:
        if os.environ.get(ALLOW_ENV) != "1":
            raise RuntimeError(
                f"InsecureDeterministicRNG is for tests only; set {ALLOW_ENV}=1 to allow it. "
                "Results computed with it are not differentially private."
            )
        if isinstance(seed, bool) or not isinstance(seed, (bytes, int)):
            raise TypeError(f"seed must be bytes or int, got {type(seed).__name__}")
        if isinstance(seed, int):
            if seed < 0:
                raise ValueError(f"seed must be >= 0, got {seed}")
            key = hashlib.sha256(b"dpselect-test-seed" + seed.to_bytes(64, "big")).digest()
        elif len(seed) == 32:
            key = seed
        else:
            raise ValueError(f"a bytes seed must be 32 bytes long, got {len(seed)}")
        if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 2**64:
            raise ValueError(f"stream must be an int in [0, 2**64), got {stream!r}")
        self._seed = seed
        self._stream = stream
        self._uses = 0
        self._test_state = _rng.TestState(key, stream, _rng.ACK_INSECURE)

    def announce(self) -> None:
        self._uses += 1
        warnings.warn(
            f"dpselect is using InsecureDeterministicRNG (use {self._uses} of this generator): "
            "NOT DP, deterministic test RNG",
            InsecureRNGWarning,
            stacklevel=3,
        )

    def __repr__(self) -> str:
        return f"InsecureDeterministicRNG(seed={self._seed!r}, stream={self._stream}) [NOT DP: deterministic test RNG]"

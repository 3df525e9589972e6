"""The keyed PRF of dpselect.spark's bounding (csrc/keyed_prf.h): each output is the first 8 bytes
of the RFC 8439 ChaCha20 block under the key, with block counter ``b >> 32`` and nonce
(``a``, ``b & 0xFFFFFFFF``). Checked against the scalar block function (itself checked against
the RFC's vectors and OpenSSL in test_chacha20.py), in the 8-lane path and the remainder alike."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect import _rng

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def _reference(key: bytes, a: int, b: int) -> int:
    nonce = struct.pack("<3I", a & 0xFFFFFFFF, a >> 32, b & 0xFFFFFFFF)
    return int.from_bytes(_rng.chacha20_blocks(key, b >> 32, nonce, 1, 0)[:8], "little")


def test_the_rfc_8439_block_gives_the_first_output():
    # RFC 8439 §2.3.2: key 00..1f, counter 1, nonce 00:00:00:09:00:00:00:4a:00:00:00:00; the
    # block's first bytes are 10 f1 e7 e4 d1 3b 59 15.
    key = bytes(range(32))
    a = 0x09000000 | (0x4A000000 << 32)
    out = _rng.keyed_prf_u64(key, np.array([a], np.uint64), np.array([1 << 32], np.uint64))
    assert int(out[0]).to_bytes(8, "little") == bytes.fromhex("10f1e7e4d13b5915")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(key=st.binary(min_size=32, max_size=32), inputs=st.lists(st.tuples(U64, U64), min_size=0, max_size=20))
def test_every_lane_and_the_remainder_equal_the_block_function(key, inputs):
    a = np.array([x for x, _ in inputs], dtype=np.uint64)
    b = np.array([y for _, y in inputs], dtype=np.uint64)
    out = _rng.keyed_prf_u64(key, a, b)
    assert out.dtype == np.uint64 and out.shape == (len(inputs),)
    assert [int(v) for v in out] == [_reference(key, x, y) for x, y in inputs]


def test_deterministic_and_keyed():
    a = np.arange(1000, dtype=np.uint64)
    b = a * np.uint64(7919)
    key, other = bytes(32), bytes([1]) + bytes(31)
    first = _rng.keyed_prf_u64(key, a, b)
    assert np.array_equal(first, _rng.keyed_prf_u64(key, a.copy(), b.copy()))
    assert np.unique(first).size == 1000
    assert not np.intersect1d(first, _rng.keyed_prf_u64(other, a, b)).size
    # A strided view is read as its values, not in place.
    assert np.array_equal(_rng.keyed_prf_u64(key, a[::2], b[::2]), first[::2])


def test_bad_arguments_are_refused():
    a = np.zeros(3, np.uint64)
    with pytest.raises(ValueError, match="key must be 32 bytes"):
        _rng.keyed_prf_u64(bytes(31), a, a)
    with pytest.raises(TypeError, match="a must have dtype uint64"):
        _rng.keyed_prf_u64(bytes(32), a.astype(np.int64), a)
    with pytest.raises(ValueError, match="one length"):
        _rng.keyed_prf_u64(bytes(32), a, a[:2])
    assert _rng.keyed_prf_u64(bytes(32), a[:0], a[:0]).size == 0

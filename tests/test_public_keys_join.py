"""The public-partitions join: Arrow's vectorised match equals the key-by-key match it stands
in for, on the keys where they could differ (nulls, NaNs of any sign, -0.0, duplicates)."""
from __future__ import annotations

import math
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.ingest import public_keys
from dpselect.ingest.rows import PartitionCounts

NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]  # a NaN with sign and payload


def _data_keys(values: list) -> list:
    """Distinct data keys the way counting makes them: one NaN, one zero, one null."""
    seen, out = set(), []
    for v in values:
        c = public_keys._canonical(v)
        if c not in seen:
            seen.add(c)
            out.append(v)
    return out


def _both(data: list, listed: list, typ: pa.DataType):
    keys = pa.table({"k": pa.array(_data_keys(data), type=typ)})
    table = pa.table({"k": pa.array(listed, type=typ)})
    fast = public_keys._match_in_arrow(keys, table)
    slow = public_keys._match_in_python(keys, table)
    assert fast is not None
    return fast, slow


floats = st.sampled_from([0.0, -0.0, 1.5, -2.0, math.nan, NEG_NAN, None, math.inf, 7.0])


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, max_size=8), st.lists(floats, max_size=12))
def test_float_keys_match_as_the_counting_does(data, listed):
    (fast_public, fast_absent), (slow_public, slow_absent) = _both(data, listed, pa.float64())
    assert fast_public.tolist() == slow_public.tolist()
    assert fast_absent == slow_absent


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=8),
       st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=12))
def test_string_keys_match_as_the_counting_does(data, listed):
    (fast_public, fast_absent), (slow_public, slow_absent) = _both(data, listed, pa.string())
    assert fast_public.tolist() == slow_public.tolist()
    assert fast_absent == slow_absent


def test_nan_and_negative_zero_are_one_key_each():
    (is_public, absent), _ = _both([math.nan, 0.0, 1.0], [NEG_NAN, -0.0, 2.0, 2.0, None, None], pa.float64())
    assert is_public.tolist() == [True, True, False]
    assert absent == [2, 4]  # the first 2.0 and the first null


def test_several_by_columns_are_matched_key_by_key():
    keys = pa.table({"a": [1, 2], "b": ["x", "y"]})
    assert public_keys._match_in_arrow(keys, pa.table({"a": [1], "b": ["x"]})) is None
    counts = PartitionCounts(keys=keys, counts=np.array([3, 4], dtype=np.int64))
    joined, mask = public_keys.with_public_partitions(counts, [(1, "x"), (5, "z")], only_public=True)
    assert joined.keys.to_pylist() == [{"a": 1, "b": "x"}, {"a": 5, "b": "z"}]
    assert joined.counts.tolist() == [3, 0] and mask.tolist() == [True, True]


@pytest.mark.parametrize("only_public", [False, True])
def test_the_joined_partitions_are_the_same_either_way(monkeypatch, only_public):
    keys = pa.table({"k": pa.array([3, 1, None, 7], type=pa.int64())})
    counts = PartitionCounts(keys=keys, counts=np.array([5, 6, 7, 8], dtype=np.int64))
    listed = [7, 9, None, 9, 4]
    fast = public_keys.with_public_partitions(counts, listed, only_public=only_public)
    monkeypatch.setattr(public_keys, "_match_in_arrow", lambda keys, listed: None)
    slow = public_keys.with_public_partitions(counts, listed, only_public=only_public)
    assert fast[0].keys.equals(slow[0].keys) and fast[0].counts.tolist() == slow[0].counts.tolist()
    assert fast[1].tolist() == slow[1].tolist()
    assert fast[0].keys.column(0).to_pylist() == ([None, 7, 9, 4] if only_public else [3, 1, None, 7, 9, 4])

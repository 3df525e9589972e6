"""κ and L∞ chosen privately on Spark (``max_partitions_contributed="auto"``,
``max_contributions_per_partition="auto"``; docs/privacy/auto-bounds.md, "On Spark").

The executors compute, per user, c_u (its number of distinct keys) and r_u (the rows of ONE of
its (user, key) pairs, chosen uniformly at random), and bin them with the single machine's
:func:`~dpselect.ingest.auto_bounds.histogram`; only the exact histograms (at most 33 bins each)
reach the driver, where the noise, the rule and the statement are the single machine's
(:func:`~dpselect.ingest.auto_bounds.choose_from_histograms`).

The one pair is the user's pair of smallest rank, the ranks being ``PRF(K, (user, key))`` under
a key of this step derived from the release's secret (:class:`~dpselect.spark._bounding.ReleaseKey`,
drawn from the package CSPRNG), as the bounding ranks pairs (``_bounding``): under a fresh
uniformly random key the ranks of distinct pairs are indistinguishable from independent uniform
values, so the smallest is a uniform pair of the user's, and a task Spark re-runs picks the same
one. Each user's choice reads only its own pairs, which is all the sensitivity argument needs
(each user is in one bin of each histogram).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dpselect.ingest.auto_bounds import choose_from_histograms, histogram, plan_at_chosen, plan_request
from dpselect.spark._bounding import ReleaseKey, keep_first, with_ranks
from dpselect.spark._common import RANK, ROWS_ALL, USER_PAIRS, collected, column, columns, spark

__all__ = ["choose_for_plan", "exact_histograms", "ranked_pairs"]

_WHICH, _BIN, _COUNT = "__dpselect_hist", "__dpselect_bin", "__dpselect_count"


def ranked_pairs(data: Any, privacy_unit: str, keys: Sequence[str], key: ReleaseKey, null_unit_check: bool,
                 unit_label: str | None = None) -> Any:
    """The lazy plan of every (user, key) pair of ``data`` (null units already dropped, or
    refused here with ``null_unit_check``): its rows (``ROWS_ALL``), its place among its user's
    pairs by PRF rank (``RANK``: 1 for the user's one uniformly chosen pair), and its user's
    number of pairs (``USER_PAIRS``, c_u)."""
    sql = spark()
    F = sql.functions
    pair = [privacy_unit, *keys]
    pairs = data.select(*columns(pair)).repartition(column(privacy_unit)).groupBy(*columns(pair)).agg(
        F.count(F.lit(1)).alias(ROWS_ALL))
    # Its own step key: the choice is independent of the bounding's ranks, as on one machine.
    ranked = with_ranks(pairs, key.for_step(b"auto bounds: one pair per user"), pair, null_unit_check,
                        privacy_unit, unit_label=unit_label)
    ordered = keep_first(ranked, [privacy_unit], keys, 1, rank=RANK)
    return ordered.withColumn(USER_PAIRS, F.count(F.lit(1)).over(sql.Window.partitionBy(column(privacy_unit))))


def exact_histograms(pairs: Any, kappa_cap: int | None, linf_cap: int | None
                     ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The exact histograms of the c_u up to ``kappa_cap`` and of the r_u up to ``linf_cap``
    (None where the cap is None) over the users of ``pairs`` (:func:`ranked_pairs`), each user
    once: the row of its chosen pair (``RANK`` 1) holds both. Each Arrow batch is binned on the
    executors by :func:`~dpselect.ingest.auto_bounds.histogram` and Spark adds the bins."""
    sql = spark()
    F, types = sql.functions, sql.types
    caps = [kappa_cap, linf_cap]
    users = pairs.filter(F.col(RANK) == 1).select(F.col(USER_PAIRS), F.col(ROWS_ALL))
    schema = types.StructType([types.StructField(_WHICH, types.IntegerType(), False),
                               types.StructField(_BIN, types.IntegerType(), False),
                               types.StructField(_COUNT, types.LongType(), False)])

    def bins(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            which, at, counts = [], [], []
            for i, cap in enumerate(caps):
                if cap is None:
                    continue
                values = batch.column(i).to_numpy(zero_copy_only=False).astype(np.int64)
                # A count above the cap is in the last bin, as the cap itself is (a pair's rows may
                # exceed 2^32 on a cluster, beyond what bin_of reads).
                h = histogram(np.minimum(values, cap), cap)
                which += [i] * h.size
                at += list(range(h.size))
                counts += [int(x) for x in h]
            yield pa.RecordBatch.from_arrays([pa.array(which, pa.int32()), pa.array(at, pa.int32()),
                                              pa.array(counts, pa.int64())], names=schema.names)

    partial = users.mapInArrow(bins, schema).groupBy(_WHICH, _BIN).agg(F.sum(_COUNT).alias(_COUNT))
    out: list[np.ndarray | None] = [None if cap is None else histogram(np.zeros(0, np.int64), cap) for cap in caps]
    for row in collected(partial):
        target = out[row[_WHICH]]
        assert target is not None
        target[row[_BIN]] += int(row[_COUNT])
    return out[0], out[1]


def choose_for_plan(plan: Any, pairs: Any, generator: Any, n_public_keys: int | None = None) -> tuple[Any, Any]:
    """For ``dpselect.spark.aggregate``, as :func:`dpselect.ingest.auto_bounds.choose_for_plan`
    on one machine: the plan at the privately chosen κ / L∞ and the step's component of the
    statement, from the exact histograms of ``pairs`` (:func:`ranked_pairs`), with the plan's
    "contribution_bounds" share, caps and rule (with public partitions, ``n_public_keys`` of
    them, the ε-aware rule), the noise drawn on the driver by ``generator``."""
    request = plan_request(plan, n_public_keys)
    exact_kappa, exact_linf = exact_histograms(pairs, request.kappa_cap, request.linf_cap)
    found = choose_from_histograms(exact_kappa, exact_linf, epsilon=request.epsilon, kappa_cap=request.kappa_cap,
                                   linf_cap=request.linf_cap, rng=generator, kappa_quantile=request.kappa_quantile,
                                   linf_quantile=request.linf_quantile, by_error=request.by_error)
    return plan_at_chosen(plan, found)

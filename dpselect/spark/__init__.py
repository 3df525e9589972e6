"""dpselect on Apache Spark: the same partition selection and grouped release, run by Spark
(tutorial and design: docs/spark.md).

:func:`select_partitions` and :func:`aggregate` take a Spark DataFrame and return one, with the
parameters, semantics and privacy statement of :func:`dpselect.select_partitions` and
:func:`dpselect.aggregate` (docs/privacy/contribution-bounding.md, docs/privacy/aggregate.md).

What runs where:

* in Spark SQL (the JVM): deduplicating (user, key) pairs, the contribution bounding (a window
  ``row_number() over (partition by user order by r, key) <= κ``, r a 64-bit pseudo-random rank
  per pair; likewise ``<= L∞`` over a user's rows in one key), every per-key aggregate (sums
  exact, as 38-digit decimals), the join to ``public_partitions``, and the log histogram of
  APPROX_BOUNDS (a count per cell);
* in vectorised Arrow UDFs (``mapInArrow``) on the executors: computing r, a keyed PRF of the
  row's content under a secret drawn per release from the package CSPRNG (so that a task or a
  stage Spark re-runs keeps the same rows: :mod:`._bounding`), converting value columns to grid
  units (:meth:`dpselect.aggregation.grid.Grid.to_units`),
  binning values for APPROX_BOUNDS and, with a bound "auto", each user's distinct keys and the
  rows of its one uniformly ranked pair (:mod:`._auto_bounds`), and, on the per-key aggregates
  only, the selection
  (``strategy.apply``) and the metrics' noise
  (:func:`dpselect.aggregation.metric_noise.noisy_metric`) in the C kernel;
* on the driver: argument checks, the budget charge and split, the guarantee, the noise and
  thresholds of APPROX_BOUNDS over the histogram's cells, the noise and rule that choose κ / L∞
  over their two small histograms (docs/privacy/auto-bounds.md), and the data holder's report from
  per-key totals. No row reaches it.

The result is materialised once (``localCheckpoint(eager=True)``) before it is returned: a lazy
plan would draw new noise on every action, and two draws of a release are two releases. The
checkpointed blocks are never recomputed (a lost block fails the query instead), and a session
with speculative execution is refused (two attempts could store two draws of one partition).
The caller's columns are read once under dpselect's own names, so any column name works.

PySpark is an optional dependency (``pip install "dpselect[spark]"``), imported on first use.
The modules: :mod:`._common` (column references, checks, the per-key steps' randomness, exact
sums, materialisation), :mod:`._bounding` (the release key, ranks and bounding windows),
:mod:`._select` and :mod:`._aggregate` (the two entry points), :mod:`._release` (the per-key
step of aggregate),
:mod:`._public` (public partitions), :mod:`._bounds` (APPROX_BOUNDS) and :mod:`._report` (the
data holder's reports).
"""
from __future__ import annotations

from dpselect.spark._aggregate import SparkAggregateResult, aggregate
from dpselect.spark._common import guarantee_of
from dpselect.spark._select import select_partitions

__all__ = ["SparkAggregateResult", "aggregate", "guarantee_of", "select_partitions"]

"""The per-key step of ``dpselect.spark.aggregate``: the selection and every metric's noise,
run by ``mapInArrow`` on the executors over the per-key aggregates, and the release's guarantee,
computed on the driver from the same parameters (docs/spark.md, "What runs where")."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.aggregation.quantiles import output_columns
from dpselect.core.exact import as_fraction
from dpselect.rng import resolve_rng
from dpselect.mechanisms.protocols import CountMechanism
from dpselect.spark._common import KEEP, ERROR_MARK, executor_rng, spark, wide_of
from dpselect.spark._more_stats import SQUARE

__all__ = ["Release", "release_guarantee"]


class Release:
    """The per-key step, run by ``mapInArrow`` on the executors over batches of per-key
    aggregates (the ``by`` columns, ``USERS``, ``ROWS``, one ``SUM<i>`` per value column, exact
    decimals): the selection (none with public partitions) and every metric's noise, in the C
    kernel; a quantile metric reads the key's kept rows per leaf of its tree (``HIST<i>_<k>``,
    ``_quantiles``), a variance its column's Σq (``SQUARE<i>``) and a count_distinct its distinct
    count (``DCOUNT<k>``, ``_more_stats``). Each key's decision and noise depend on its own aggregates and fresh randomness only,
    so batch by batch is the same mechanism as all keys at once. Its output is read once: the
    caller stores it as a local checkpoint in the same job (docs/spark.md, "Drawn once")."""

    def __init__(self, names: list[str], value_columns: list[str], metrics: Mapping[str, Any],
                 noises: Mapping[str, Any], grids: Mapping[str, Any], kappa: int, linf: int,
                 level: float | None, selection: CountMechanism | None, spec: tuple[bytes, int] | None,
                 public: bool = False, report: bool = False, labels: Mapping[str, str] | None = None,
                 unbounded: tuple[str, ...] = (), means: Mapping[str, Any] | None = None,
                 selection_counts: str | None = None, leaves: Mapping[str, Any] | None = None,
                 spreads: Mapping[str, Any] | None = None, squares: Mapping[str, int] | None = None,
                 distinct: Sequence[Any] = ()) -> None:
        self.names, self.value_columns, self.metrics = names, value_columns, dict(metrics)
        # How the guarantee names each metric; columns where APPROX_BOUNDS found no bounds (their
        # sums and means are NaN, as on one machine).
        self.labels = dict(labels) if labels is not None else {n: f"{n} = {m}" for n, m in self.metrics.items()}
        self.unbounded = tuple(unbounded)
        # Each metric's noise (AggregatePlan.metric_noise) and where each mean takes a released count or sum.
        self.noises, self.means = dict(noises), dict(means or {})
        # The user-count metric that the TSGD release's own noisy counts serve (AggregatePlan.selection_counts).
        self.selection_counts = selection_counts
        self.grids, self.kappa, self.linf = dict(grids), kappa, linf
        # Each quantile metric's column: the leaves of its tree (None: no bounds found, NaN as on one machine).
        self.leaves = dict(leaves or {})
        self._hists = {c: names for c in self.leaves if (names := self.hist_columns(c))}  # read per batch
        # Where each variance takes released values (AggregatePlan.spreads), the variances' columns
        # (column -> its index among the value columns) and the count_distinct metrics (DistinctSpec).
        self.spreads, self.squares, self.distinct = dict(spreads or {}), dict(squares or {}), tuple(distinct)
        # The selection (None with public partitions) is pickled for the executors and built again there.
        self.level, self.selection, self.spec, self.public, self.report = level, selection, spec, public, report

    def schema(self, key_fields: list[Any]) -> Any:
        types = spark().types
        out = list(key_fields)
        for name, m in self.metrics.items():
            typ = types.LongType() if m.kind in ("count", "count_distinct_units", "count_distinct") else types.DoubleType()
            for column in output_columns(name, m):  # a quantile metric of several q: one column each
                out.append(types.StructField(column, typ, False))
                if self.level is not None:
                    out.append(types.StructField(f"{column}_ci_low", typ, True))
                    out.append(types.StructField(f"{column}_ci_high", typ, True))
        return types.StructType(out)

    def hist_columns(self, column: str) -> list[str]:
        """The per-leaf count columns of a quantile metric's column (none without bounds)."""
        from dpselect.spark._quantiles import hist_columns

        tree = self.leaves[column]
        return [] if tree is None else hist_columns(self.value_columns.index(column), tree.count)

    def release_metrics(self, users: np.ndarray, rows: np.ndarray, sums: Mapping[str, Any], rng: Any,
                        selected: np.ndarray | None = None, hists: Mapping[str, np.ndarray] | None = None,
                        squares: Mapping[str, Any] | None = None, distinct: Mapping[str, np.ndarray] | None = None
                        ) -> dict[str, tuple[dict[str, tuple[Any, Any, Any]], Component]]:
        """Every metric's output columns (column → values, interval low, high) over keys with
        these statistics, and its component, in the metrics' order; ``sums``: each value
        column's exact sums (:class:`~dpselect.aggregation.wide.Wide`), clamped to ±2^62 grid
        units before noise, as on one machine
        (:func:`~dpselect.aggregation.metric_noise.release_metrics`); ``hists``: each quantile
        column's (keys, leaves) counts of kept rows, read by the single machine's
        :func:`~dpselect.aggregation.quantile_release.quantile_metric`; ``squares``: each variance
        column's Σq (:class:`~dpselect.aggregation.wide.Wide`) and ``distinct``: each
        count_distinct's counts, read by the single machine's
        :func:`~dpselect.aggregation.more_stats.release_more` (zeros where not given)."""
        from dpselect.aggregation.metric_noise import PartitionGrids, release_metrics, selection_counts_metric
        from dpselect.aggregation.quantile_release import in_metric_order, quantile_metric
        from dpselect.aggregation.quantile_tree import KeyLeafCounts

        grids = {c: PartitionGrids.none(users.size) if c in self.unbounded
                 else PartitionGrids.of(self.grids[c], users.size) for c in self.value_columns}
        given = {}
        if self.selection_counts is not None:  # ``selected``: the release's noisy user counts of these keys
            from dpselect.mechanisms.tsgd import TSGDRelease

            assert isinstance(self.selection, TSGDRelease)
            noisy = selected if selected is not None else np.zeros(users.size, np.int64)
            given[self.selection_counts] = selection_counts_metric(self.labels[self.selection_counts], noisy,
                                                                   self.selection.table, self.level)
        trees = {}
        for name, m in self.metrics.items():
            if m.kind == "quantile":
                tree = self.leaves[m.column]
                counts = None if tree is None else KeyLeafCounts.of_counts((hists or {})[m.column])
                trees[name] = quantile_metric(name, self.labels[name], m, self.noises[name], counts, users.size, tree,
                                              self.level, rng)
        extra = self.more_statistics(users.size, squares or {}, distinct or {})
        others = release_metrics(self.labels, {n: m for n, m in self.metrics.items() if n not in trees}, self.noises,
                                 self.means, users, rows, dict(sums), grids, self.level, rng, given, extra)
        return in_metric_order(self.metrics, trees, others)

    def more_statistics(self, n: int, squares: Mapping[str, Any], distinct: Mapping[str, np.ndarray]) -> Any:
        """What the single machine's release of variances and distinct counts reads, for n keys."""
        from dpselect.aggregation.metric_noise import PartitionGrids
        from dpselect.aggregation.wide import Wide
        from dpselect.spark._more_stats import more_statistics

        # The shift of each variance column's squares: from its grid, as the executors squared them.
        one = {c: PartitionGrids.none(1) if c in self.unbounded else PartitionGrids.of(self.grids[c], 1)
               for c in self.squares}
        return more_statistics(self.spreads, one, {c: squares.get(c, Wide.zeros(n)) for c in self.squares},
                               {s.name: distinct.get(s.name, np.zeros(n, np.int64)) for s in self.distinct})

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        strategy = self.selection
        rng = executor_rng(self.spec, b"release")
        n_keys = len(self.names)
        for batch in batches:
            def count(col: Any) -> np.ndarray:
                if col.null_count:  # a count of a group is never null
                    raise ValueError(f"{ERROR_MARK}internal error: a null count in the per-key aggregates")
                return col.to_numpy(zero_copy_only=False).astype(np.int64)

            users = count(batch.column(n_keys))
            listed = (batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(bool)
                      if self.public else None)
            selected = None
            if strategy is None:  # public partitions: every listed key, nothing selected
                keep = listed if listed is not None else np.ones(users.size, dtype=bool)
            else:
                candidate = users > 0  # with a report every key of the data comes, some bounded away
                keep = np.zeros(users.size, dtype=bool)
                result = strategy.apply(users[candidate], rng=rng)
                keep[candidate] = np.asarray(result.keep, dtype=bool)
                if self.selection_counts is not None:  # the TSGD release's noisy user counts
                    assert result.noisy_counts is not None
                    noisy = np.zeros(users.size, np.int64)
                    noisy[candidate] = result.noisy_counts
                    selected = noisy[keep]
            rows = count(batch.column(n_keys + 1))[keep]
            sums = {c: wide_of(batch.column(n_keys + 2 + i))[keep] for i, c in enumerate(self.value_columns)}
            hists = {c: np.stack([count(batch.column(batch.schema.get_field_index(h)))[keep] for h in names], axis=1)
                     for c, names in self._hists.items()}
            squares = {c: wide_of(batch.column(batch.schema.get_field_index(f"{SQUARE}{i}")))[keep]
                       for c, i in self.squares.items()}
            distinct = {s.name: count(batch.column(batch.schema.get_field_index(s.count)))[keep] for s in self.distinct}
            if self.report:  # every key, KEEP saying which are released (the others' metrics are 0)
                out = [batch.column(i) for i in range(n_keys)]
            else:
                out = [batch.column(i).filter(pa.array(keep)) for i in range(n_keys)]
            for columns, _ in self.release_metrics(users[keep], rows, sums, rng, selected, hists, squares,
                                                   distinct).values():
                for values in columns.values():
                    for array in values[:3 if self.level is not None else 1]:
                        out.append(pa.array(self._spread(np.asarray(array), keep) if self.report
                                            else np.asarray(array)))
            names = [*self.names, *self._metric_columns()]
            if self.report:
                out.append(pa.array(keep))
                out += [batch.column(i) for i in range(n_keys, batch.num_columns - self.public)]
                names += [KEEP, *batch.schema.names[n_keys:batch.num_columns - self.public]]
            yield pa.RecordBatch.from_arrays(out, names=names)

    @staticmethod
    def _spread(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """The released keys' values at their rows, 0 elsewhere (those rows are filtered out)."""
        full = np.zeros(keep.size, dtype=values.dtype)
        full[keep] = values
        return full

    def _metric_columns(self) -> list[str]:
        suffixes = ("", "_ci_low", "_ci_high") if self.level is not None else ("",)
        return [f"{column}{s}" for name, m in self.metrics.items() for column in output_columns(name, m)
                for s in suffixes]


def release_guarantee(release: Release, strat: Any, components: list[Component], generator: Any, epsilon: Fraction,
                      delta: Fraction, noise_choice: str = "", first: Sequence[Component] = ()) -> AggregateGuarantee:
    """The statement, computed on the driver from the same parameters and grids (a metric's
    component depends on them only; the throwaway draw on one zero is discarded). Components in
    the single machine's order: ``first`` (the contribution bounds chosen privately), the
    selection, the bounds found, the metrics."""
    from dpselect.aggregation.wide import Wide

    steps = list(first)
    selection_dp = True
    if strat is not None:
        selection = strat.guarantee.enforced()
        if not generator.privacy_guaranteed:
            selection = selection.under_test_rng()
        steps.append(Component(f"selection of keys ({strat.name})", as_fraction(selection.epsilon),
                               selection.delta_exact, str(selection)))
        selection_dp = selection.is_dp
    steps += components
    one = np.zeros(1, np.int64)
    sums = {c: Wide.zeros(1) for c in release.value_columns}
    hists = {c: np.zeros((1, len(release.hist_columns(c))), np.int64) for c in release.leaves}
    steps += [component for _, component in release.release_metrics(one, one, sums, resolve_rng(None),
                                                                     hists=hists).values()]
    return AggregateGuarantee(components=tuple(steps), requested_epsilon=epsilon, requested_delta=delta,
                              kappa=release.kappa, linf=release.linf, noise_choice=noise_choice,
                              privacy_guaranteed=generator.privacy_guaranteed and selection_dp)

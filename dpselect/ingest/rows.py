"""Raw rows → distinct users per partition, each user bounded to κ partitions.

The expensive part of a real job is not the decision but what comes before it. Here:

1. **Check the column types** (:func:`check_column_types`), from the schema alone, before any
   row is read: whether a job can run must never depend on one person's values. Keys may be of
   any scalar Arrow type that compares exactly (strings, integers, dates, decimals, …); privacy
   units are integers, strings or bytes (a float id could merge ``0.0`` and ``-0.0``, two people).
2. **Factorize** every column to dense integer codes in C, reading the Arrow buffers
   directly (:class:`KeyFactorizer`, csrc/keymap.h): one persistent code map per column, so
   that rows can arrive in any number of batches. **A null is a key like any other** (all
   nulls of a column form one partition) and so is NaN (every NaN of a column is one key).
   Several ``by`` columns form one composite key (GROUP BY a, b), factorized pairwise.
3. **A null privacy unit is not a person.** Treating all such rows as one user would let a new
   person with a missing id change which partitions that merged "user" keeps, moving up to 2κ
   counts. By default the rows are counted and :meth:`RowCounter.finish` refuses to go on
   (:class:`NullPrivacyUnitError`, raised before any randomness is drawn or output exists);
   with ``null_privacy_units="drop"`` they are left out and counted in
   :attr:`RowCounter.null_unit_rows` (an exact count, for the data holder, not for publication).
4. **Count** in C (:class:`dpselect._count.PairCounter`, csrc/count.h): duplicate (user,
   partition) rows count once; each user keeps at most κ of their distinct partitions, chosen
   uniformly at random with the package CSPRNG (partial Fisher–Yates on exact uniform
   integers); counts saturate at the strategy's cap (π_opt(n) = 1 above the second crossover,
   Desfontaines et al., PoPETs 2022, Theorem 1; see docs/privacy/contribution-bounding.md).
5. Partitions whose count is 0 (every contribution dropped by bounding) are removed here: they
   are indistinguishable from partitions absent from the data and must never be released.

A whole input already in memory (``feed(batch, final=True)``, as ``select_partitions`` does) whose
privacy units are integers skips the user codes and the pair sets of steps 2 and 4: its rows are
grouped by user through radix buckets in cache-sized pieces (:mod:`dpselect.ingest.radix`,
csrc/radix_pairs.h), then bounded the same way. The key columns still go through their code maps.

Memory: the C pair set holds the distinct (user, partition) pairs, 8 bytes per slot at ≤ 80 %
load (10–20 bytes per distinct pair); the code maps hold each distinct key value once (a hash slot and a copy of its bytes).
Neither depends on the number of rows, which is what lets the CLI stream files larger than memory.

The counts returned by :meth:`RowCounter.finish` are **exact and not private**: they are the
input of a selection mechanism, never something to publish.

The pieces are modules of one purpose, whose public names this module re-exports (import them
from here): the column types (``dpselect.ingest._types``), rows with a null privacy unit
(``dpselect.ingest._nulls``), the code maps (``dpselect.ingest._encode``), the counter
(``dpselect.ingest._counter``) and the radix grouping (``dpselect.ingest.radix``).
"""
from __future__ import annotations

from dpselect.ingest._counter import MAX_CODES, PartitionCounts, RowCounter
from dpselect.ingest._encode import KeyFactorizer, arrow_from_numpy
from dpselect.ingest._nulls import NULL_PRIVACY_UNITS, NullPrivacyUnitError, NullPrivacyUnitsDropped
from dpselect.ingest._types import ColumnTypeError, check_column_types, import_pyarrow, key_type

__all__ = [
    "MAX_CODES",
    "NULL_PRIVACY_UNITS",
    "ColumnTypeError",
    "KeyFactorizer",
    "NullPrivacyUnitError",
    "NullPrivacyUnitsDropped",
    "PartitionCounts",
    "RowCounter",
    "arrow_from_numpy",
    "check_column_types",
    "import_pyarrow",
    "key_type",
]

# Named after the module they are imported from (in tracebacks, reprs, pickles and the docs), as
# they were before the split.
for _public in (ColumnTypeError, KeyFactorizer, NullPrivacyUnitError, NullPrivacyUnitsDropped, PartitionCounts,
                RowCounter, arrow_from_numpy, check_column_types, import_pyarrow, key_type):
    _public.__module__ = __name__
del _public

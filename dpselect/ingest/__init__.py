"""Raw rows to a selection: the path from (privacy unit, key) rows to released keys.

- :mod:`dpselect.ingest.pipeline`: :func:`dpselect.select_partitions`, for pandas, Polars,
  Arrow tables and numpy arrays;
- :mod:`dpselect.ingest.rows`: encode keys and privacy units, bound each user's contributions
  and count distinct users per key in C (:class:`RowCounter` for streamed batches); its pieces
  are ``_types`` (column types), ``_nulls`` (null privacy units), ``_encode`` (the code maps)
  and ``_counter`` (the counter), whose public names it re-exports;
- :mod:`dpselect.ingest.frames`: DataFrame libraries in and out (pandas, Polars, Arrow);
- :mod:`dpselect.ingest.public_keys`: a public list of keys, checked and cast to the keys' type;
- ``dpselect.ingest.radix``: the radix-sort grouping of (user, key) pairs used for big inputs.

Contribution bounding is argued in docs/privacy/contribution-bounding.md; the data path is drawn
in docs/architecture.md.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""

"""Files in and out, for the command line and :func:`dpselect.select_partitions` on paths.

- :mod:`dpselect.io.files`: CSV (optionally compressed), Parquet and JSON lines read in streamed
  batches with pyarrow, and outputs written atomically; one reader per format (``_csv``,
  ``_jsonl``, ``_parquet``) and their helpers (``_formats``, ``_source``, ``_batches``, ``_ids``,
  ``_memory``) are modules of their own, whose public names it re-exports;
- :mod:`dpselect.io.outputs`: what a run has written, so an interrupt can say it exactly;
- :mod:`dpselect.io.progress`: the progress line on stderr for long inputs.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""

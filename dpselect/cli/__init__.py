"""The ``dpselect`` command line: differentially private partition selection on files.

    dpselect select INPUT --privacy-unit COL --by COL [--by COL ...] --epsilon E --delta D [options]
    dpselect aggregate INPUT --privacy-unit COL --by COL ... --epsilon E --delta D --metric SPEC ... [options]

Reads CSV (optionally .gz/.bz2/.zst/.lz4), Parquet or JSON lines in streamed batches (files
larger than memory work: memory grows with distinct (user, partition) pairs, not rows, plus a
bounded number of read blocks), bounds each user to κ partitions and counts distinct users per
partition in C, applies the selection strategy (Desfontaines, Voss, Gipson, Mandayam,
"Differentially private partition selection", PoPETs 2022), and writes the kept keys, sorted,
to a file (atomically) or standard output. The privacy guarantee is printed on stderr.
Everything that can be checked before reading the input is: parameters, the output, the
columns' presence and types, and the output format's fit to them.

``dpselect aggregate`` is a DP GROUP BY (:func:`dpselect.aggregate`, :mod:`dpselect.cli.aggregate`):
the released keys and, per key, user counts, row counts, sums and means, with the guarantee also
written as a JSON sidecar next to the output and, on request, the data holder's report (exact,
NOT differentially private). It reads the needed columns of the whole input into memory.

Every error and every interrupt ends in one line on stderr and an exit code (see
``dpselect --help``); the installed command starts in ``_dpselect_command``, which takes the
signals before the package is imported.

The command (its commands, flags, outputs and exit codes) is public; :func:`main` and the exit
codes here are its Python face. Internal: the modules of this package (``dpselect.cli.select``,
``...parser`` and the others), which may change in any release.
"""
from __future__ import annotations

# The exit codes are the command's interface, re-exported here with the entry points.
from dpselect.cli.common import EXIT_DATA, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK  # noqa: F401
from dpselect.cli.common import EXIT_OUTPUT, EXIT_RNG, EXIT_TERMINATED, EXIT_USAGE  # noqa: F401

__all__ = [name for name in dir() if name.startswith("EXIT_")] + ["build_parser", "console_main", "main"]


def __getattr__(name: str) -> object:
    # The entry points load on first use: modules below the command (``dpselect.io.outputs``
    # holds signals through ``dpselect.cli.signals``) import this package, and must not pull
    # in the whole command, which imports them back.
    if name in ("main", "console_main"):
        from dpselect.cli import command

        return getattr(command, name)
    if name == "build_parser":
        from dpselect.cli.parser import build_parser

        return build_parser
    raise AttributeError(f"module 'dpselect.cli' has no attribute {name!r}")

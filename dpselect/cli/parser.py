"""The ``dpselect`` command's argument parser: its commands, their options and help texts."""
from __future__ import annotations

import argparse

from dpselect.cli import aggregate as cli_aggregate
from dpselect.cli import sql as cli_sql
from dpselect.cli.common import (
    EXIT_CODES,
    add_privacy_arguments,
    add_threads_argument,
    byte_size,
    positive_int,
    shown,
    strategy_names,
)

__all__ = ["build_parser"]

_EXAMPLE = """\
example:
  dpselect select visits.csv --privacy-unit user_id --by country --by city \\
      --epsilon 1 --delta 1e-6 --max-partitions-contributed 3 --counts -o released.csv
"""

_EPILOG = _EXAMPLE + "\n" + EXIT_CODES + """
Keys and privacy units are read as text from CSV and JSON lines (as written: "007" and "7"
differ), with their declared types from Parquet. A null key (empty CSV cell, JSON null or
missing field, Parquet null) is a key like any other value. A null privacy unit is not a
person: such rows are an error unless --drop-null-privacy-units. Output rows are sorted by key.
Counts (--counts) are noisy: only partitions whose noisy count passed the release threshold
are shown, so those near it lean high. JSON lines output is strict JSON: a float NaN or
infinite key is written as the string "NaN", "Infinity" or "-Infinity" (a null key as null).
See docs/rows.md and docs/privacy/.
"""


def _threshold(text: str) -> int:
    """--public-threshold: an integer up to 2**62, the largest the release kernel compares to."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {shown(text)}") from None
    if value > 2**62:
        raise argparse.ArgumentTypeError(f"expected an integer of at most 2**62, got {shown(text)}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from dpselect import __version__

    parser = argparse.ArgumentParser(
        prog="dpselect",
        description="Differentially private partition selection: release the keys of a GROUP BY\n"
        "that are safe to publish (select), or the keys and their statistics (aggregate).",
        epilog=_EXAMPLE + "\nRun 'dpselect select --help' or 'dpselect aggregate --help' for every option;\n"
        "'dpselect audit --help' checks the mechanisms' guarantees (certificates and empirical audits).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dpselect {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sel = commands.add_parser(
        "select",
        help="release the partitions (distinct keys) of a file under (epsilon, delta)-DP",
        description="Release the partitions (GROUP BY keys) of INPUT that pass a differentially\n"
        "private selection, optionally with noisy distinct-user counts.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    strategies = strategy_names()
    sel.add_argument("input", metavar="INPUT",
                     help="CSV (.csv, .tsv, optionally .gz/.bz2/.zst/.lz4), Parquet, or JSON lines file")
    sel.add_argument("--privacy-unit", "-u", required=True, metavar="COL", help="column identifying the user")
    sel.add_argument("--by", "-b", required=True, action="append", metavar="COL",
                     help="a partition column; repeat it for a key over several columns "
                     "(--by a --by b is GROUP BY a, b)")
    add_privacy_arguments(sel, required=True)
    sel.add_argument("--strategy", default=None, metavar="{" + ",".join(strategies) + "}",
                     help="selection mechanism: 'release' (TSGD thresholded release, default; can "
                     "publish noisy counts), 'pi_opt' (optimal keep probability, keys only), 'laplace' "
                     "or 'gaussian' (thresholding, keys only), 'auto' (the one 'dpselect explain' "
                     "ranks first), 'public' or 'mixed' (with --public-partitions), or a mechanism on "
                     "each user's set: 'weighted_gaussian', 'weighted_laplace', 'dp_sips', "
                     "'cumulative_sips', 'policy_gaussian', 'policy_laplace' (keys only)")
    sel.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                     help="a mechanism option, repeatable: noise_share=0.6 (gaussian, weighted_gaussian, "
                     "dp_sips, cumulative_sips), sigma_accuracy=1e-9 (gaussian), rounds=4 and ratio=0.5 (dp_sips, "
                     "cumulative_sips), alpha=2 "
                     "(policy_*)")
    sel.add_argument("--public-partitions", metavar="FILE",
                     help="a file (CSV, Parquet, JSON lines) listing keys known without the data, in the "
                     "--by columns: released with noisy counts whether or not they occur (--strategy "
                     "public, the default with this flag) or beside the data's own keys (--strategy mixed)")
    sel.add_argument("--public-threshold", type=_threshold, default=None, metavar="T",
                     help="with --strategy mixed: release a public key when its noisy count exceeds T "
                     "(default: the release threshold k, so no absent public key is released; T at most "
                     "minus k releases every public key present in the data)")
    sel.add_argument("--counts", action="store_true", help="also output the noisy distinct-user counts")
    sel.add_argument("--count-column", default="noisy_count", metavar="NAME",
                     help="name of the count column (default noisy_count)")
    sel.add_argument("--drop-null-privacy-units", action="store_true",
                     help="leave out rows whose privacy unit is null (default: refuse them); their "
                     "number is reported on stderr, for you only (it is exact, not private)")
    sel.add_argument("--output", "-o", default="-", metavar="FILE", help="output file (default: standard output)")
    sel.add_argument("--output-format", choices=("csv", "parquet", "jsonl"),
                     help="output format (default: from the output name; csv on standard output, "
                     "pipes and devices)")
    sel.add_argument("--input-format", choices=("csv", "parquet", "jsonl"), help="input format (default: from the name)")
    sel.add_argument("--batch-size", type=positive_int, default=1 << 20, metavar="ROWS",
                     help="rows counted per step (default 1048576)")
    sel.add_argument("--block-size", type=byte_size, default=None, metavar="BYTES",
                     help="bytes read per block of CSV or JSON lines (default 1M); a CSV row must fit "
                     "in one block, and memory holds about 40 blocks")
    progress = sel.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show it")
    add_threads_argument(sel)
    sel.add_argument("--quiet", "-q", action="store_true",
                     help="print nothing on stderr but errors (no progress, summary or warnings)")
    cli_aggregate.add_parser(commands)
    cli_sql.add_parser(commands)
    exp = commands.add_parser(
        "explain",
        help="compare the selection mechanisms at given (epsilon, delta, N) and recommend one",
        description="Print each count-based mechanism's threshold and the partition sizes at which it "
        "releases with probability 5 %%, 50 %% and 95 %%, side by side, and the one that releases the most. "
        "Depends on the parameters only, never on data.",
        epilog="example:\n  dpselect explain --epsilon 1 --delta 1e-5 --max-partitions-contributed 4 "
        "--plot mechanisms.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_privacy_arguments(exp, required=True)
    exp.add_argument("--plot", metavar="FILE", help="also draw the keep-probability curves and the paper's "
                     "midpoint figures to FILE (PNG, SVG or PDF; needs the [plot] extra)")
    return parser

"""``dpselect select``: release the partitions (GROUP BY keys) of a file that pass a DP selection.

Everything the user typed is checked before the input is touched (:func:`check_parameters`);
the input is then read in streamed batches, bounded and counted in C, and the kept keys written
atomically (docs/rows.md)."""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dpselect.cli.common import (
    EXIT_DATA,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_RNG,
    EXIT_USAGE,
    PAPER,
    Fail,
    deliver,
    api_flags,
    check_output_types,
    is_rng_failure,
    note,
    output_format,
    probe_rng,
    rng_message,
    strategy_names,
)

if TYPE_CHECKING:  # pragma: no cover
    from dpselect.ingest.plan import SelectionPlan

__all__ = ["check_parameters", "run"]


def check_parameters(args: argparse.Namespace) -> SelectionPlan:
    """The selection's plan (:func:`dpselect.ingest.plan.plan_selection`, the checks of every
    front end), after checking every value typed, with errors naming the flags."""
    from dpselect.ingest.plan import plan_selection
    from dpselect.mechanisms.registry import strategy_options

    if not math.isfinite(args.epsilon) or args.epsilon < 0:
        raise Fail(EXIT_USAGE, f"--epsilon must be a finite number >= 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or args.delta < 0 or args.delta >= 1:
        raise Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    if args.delta == 0:
        raise Fail(EXIT_USAGE, f"--delta must be > 0: with delta = 0 no key can be released (Theorem 2 of "
                               f"{PAPER}: under pure DP the set of released keys cannot depend on the data)")
    if args.strategy is None:
        args.strategy = "public" if args.public_partitions else "release"
    options: dict[str, Any] = {"neighbours": args.neighbours}
    # --pre-threshold and --public-threshold are the options of some strategies, given as flags.
    known = args.strategy in strategy_names()
    for flag, name, value, unset in (("--pre-threshold", "pre_threshold", args.pre_threshold, 1),
                                     ("--public-threshold", "public_threshold", args.public_threshold, None)):
        if value != unset:
            if known and name not in strategy_options(args.strategy):
                raise Fail(EXIT_USAGE, f"{flag} does not apply to --strategy {args.strategy}")
            options[name] = value
    for item in args.option:
        name, sep, text = item.partition("=")
        if not sep or not name or name in options:
            raise Fail(EXIT_USAGE, f"--option expects NAME=VALUE, once per name; got {item!r}")
        try:
            options[name] = int(text) if text.lstrip("-").isdigit() else float(text) if text != "optimal" else text
        except ValueError:
            raise Fail(EXIT_USAGE, f"--option {name}: expected a number, got {text!r}") from None
    try:
        return plan_selection(privacy_unit=args.privacy_unit, by=list(args.by), epsilon=args.epsilon, delta=args.delta,
                              max_partitions_contributed=args.max_partitions_contributed, strategy=args.strategy,
                              counts=args.counts, count_column=args.count_column if args.counts else None,
                              null_privacy_units="drop" if args.drop_null_privacy_units else "error",
                              public_partitions=bool(args.public_partitions), **options)
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, api_flags(str(exc))) from exc
    except OverflowError as exc:  # a number too large for a computation of the strategy
        raise Fail(EXIT_USAGE, f"the parameters are out of range for --strategy {args.strategy} ({exc}): lower "
                               "--max-partitions-contributed or the --option values") from exc


def run(args: argparse.Namespace) -> int:
    from dpselect.io.files import (
        DEFAULT_BLOCK_SIZE,
        ColumnError,
        InputError,
        OutputError,
        check_destination,
        coalesce,
        detect_format,
        in_memory_budget,
        open_batches,
        read_ahead,
    )
    from dpselect.ingest.frames import result_schema
    from dpselect.ingest.pipeline import release_table
    from dpselect.io.progress import Progress
    from dpselect.mechanisms.protocols import RowMechanism
    from dpselect.ingest.rows import (
        ColumnTypeError,
        NullPrivacyUnitError,
        RowCounter,
        check_column_types,
        import_pyarrow,
    )

    pa = import_pyarrow()
    # Everything the user typed is checked before the input is touched.
    plan = check_parameters(args)
    strat = plan.strategy
    by = plan.by
    try:
        in_fmt = detect_format(args.input, args.input_format, "input")
    except ValueError as exc:
        raise Fail(EXIT_USAGE, str(exc)) from exc
    to_stdout = args.output in (None, "-")
    out_fmt = output_format(args, to_stdout)
    try:
        check_destination(None if to_stdout else args.output, out_fmt, protected=[args.input])
    except OutputError as exc:
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    probe_rng()

    try:
        budget = in_memory_budget()  # a parameter (an environment variable): checked before the input is read
    except ValueError as exc:
        raise Fail(EXIT_USAGE, str(exc)) from exc

    columns = [args.privacy_unit, *by]
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    try:
        source = open_batches(args.input, in_fmt, columns, args.batch_size, block_size)
    except InputError as exc:
        raise Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise Fail(EXIT_DATA, str(exc)) from exc
    try:
        check_column_types(source.schema, args.privacy_unit, by)
    except ColumnTypeError as exc:
        role = "--privacy-unit" if exc.role == "privacy_unit" else "--by"
        raise Fail(EXIT_DATA, f"{role} column {exc.column!r} of {args.input!r} has type {exc.type}: {exc.reason}") from exc
    schema = result_schema(source.schema, by, args.count_column if args.counts else None)
    check_output_types(schema, out_fmt)

    show = not args.quiet and (args.progress if args.progress is not None else _isatty(sys.stderr))
    progress = Progress(enabled=bool(show))
    counter = RowCounter(args.privacy_unit, by,
                         null_privacy_units="drop" if args.drop_null_privacy_units else "error")
    counter.check_schema(source.schema)

    # The next batch is read while this one is counted. Encoding a batch costs O(its rows)
    # whatever was seen before (csrc/keymap.h), so batches stay at --batch-size rows.
    batches = read_ahead(source.batches)
    try:
        whole = _count_batches(counter, coalesce(batches, lambda: args.batch_size), source, budget, progress)
        if whole is not None:
            progress.phase("counting the whole input")
            _count_whole(counter, whole)
    except InputError as exc:
        raise Fail(EXIT_INPUT, str(exc)) from exc
    except TypeError as exc:
        raise Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc
    except ValueError as exc:
        raise Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except BaseException:
        progress.close()
        raise
    finally:
        batches.close()  # stops the reader thread if counting ended early

    try:
        counter.check_null_units()
    except NullPrivacyUnitError as exc:
        progress.close()
        raise Fail(EXIT_DATA, (
            f"{exc.rows} row(s) of {args.input!r} have a null privacy unit (column {exc.column!r}); a null "
            "is not one person. Fill in the ids, or pass --drop-null-privacy-units to leave these rows "
            "out. Nothing was released."
        )) from exc
    try:
        if isinstance(strat, RowMechanism):  # every user's set, weighted
            from dpselect.ingest.pipeline import release_rows

            progress.phase("bounding and weighting")
            sets, keys_of = counter.user_sets()
            released = release_rows(sets, keys_of, strat, schema=schema)
        else:
            chosen = None
            if plan.auto_kappa is not None:  # --max-partitions-contributed auto: κ chosen privately
                from dpselect.ingest.auto_bounds import select_with_auto_kappa
                from dpselect.rng import resolve_rng

                progress.phase("choosing the bound privately, bounding contributions and counting")
                partitions, strat, _, chosen = select_with_auto_kappa(counter, plan.auto_kappa, resolve_rng(None))
            else:
                progress.phase("bounding contributions and counting")
                partitions = counter.finish(strat.max_partitions_contributed, strat.count_cap)
            public = None
            if args.public_partitions:
                partitions, public = _with_public(args, partitions, plan.only_public)
            progress.phase("selecting")
            released = release_table(partitions, strat, counts=args.counts, count_column=args.count_column,
                                     schema=schema, public=public, chosen=chosen)
        progress.phase("writing")
    except RuntimeError as exc:
        if is_rng_failure(exc):
            raise Fail(EXIT_RNG, rng_message(exc)) from exc
        raise
    finally:
        progress.close()
    return _finish_output(args, counter, released, to_stdout, out_fmt)


# Bytes a row of a whole input takes beyond its Arrow columns: the radix grouping's 12
# (dpselect.ingest.radix.ROW_BYTES), and 8 for the pieces in flight and the allocator's slack.
_WHOLE_ROW_BYTES = 12 + 8


class _HeldInput:
    """Tables of the input held in memory, in order, to be counted whole. Text privacy units
    (as the CSV reader gives them) are kept as int64 while every table's are canonical decimal
    int64 text (see decimal_ids): 8 bytes a row instead of the text, converted while the reader
    parses the next block, and the radix grouping applies. Converting back gives the very text
    read (canonical text and numbers correspond one to one): once a table's ids are not
    canonical, or the input is streamed after all, the converted tables are turned back."""

    def __init__(self, privacy_unit: str, schema: Any) -> None:
        from dpselect.ingest.rows import import_pyarrow

        pa = import_pyarrow()
        self.unit = privacy_unit
        self.text_type = schema.field(privacy_unit).type
        self.converting = pa.types.is_string(self.text_type) or pa.types.is_large_string(self.text_type)
        self.tables: list[Any] = []
        self.rows = 0
        self.bytes = 0

    def add(self, table: Any) -> None:
        from dpselect.io.files import decimal_ids

        if self.converting:
            ids = decimal_ids(table.column(self.unit))
            if ids is None:
                self.converting = False
            else:
                table = table.set_column(table.schema.get_field_index(self.unit), self.unit, ids)
        self.tables.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes + _WHOLE_ROW_BYTES * table.num_rows

    def take(self, whole: bool) -> list[Any]:
        """The tables held, none held after: with int64 privacy units if every table's were
        converted and they are the ``whole`` input, else with the units' text as read (the
        batches streamed after them are text)."""
        tables, self.tables = self.tables, []
        if whole and self.converting:
            return tables
        return [t if t.schema.field(self.unit).type == self.text_type else
                t.set_column(t.schema.get_field_index(self.unit), self.unit, t.column(self.unit).cast(self.text_type))
                for t in tables]


def _count_batches(counter: Any, tables: Iterator[Any], source: Any, budget: int, progress: Any) -> Any:
    """Count the input's tables, or hold them while they fit in ``budget`` bytes (their Arrow
    size plus _WHOLE_ROW_BYTES a row): the whole input, as one table, when every table was held
    (to be counted by :func:`_count_whole`), else None once everything is counted. The tables
    held when the budget is passed are counted then, in order, and the rest streamed: a file
    larger than the budget costs no more memory than the budget, and its counts are the same."""
    from dpselect.ingest.rows import import_pyarrow

    held = _HeldInput(counter.privacy_unit, source.schema)
    streaming = budget <= 0
    for table in tables:
        if not streaming:
            held.add(table)
            if held.bytes <= budget:
                progress.update(held.rows, source.progress())
                continue
            streaming = True
            pending = held.take(whole=False)
        else:
            pending = [table]
        for piece in pending:
            if counter.rows == 0:  # size the pair set once: from the metadata, or extrapolated
                fraction = source.progress()
                counter.expect_rows(source.rows or (int(piece.num_rows / fraction) if fraction else 0))
            counter.feed(piece)
            progress.update(counter.rows, source.progress())
    if streaming:
        return None
    pa = import_pyarrow()
    held_tables = held.take(whole=True)
    return pa.concat_tables(held_tables) if held_tables else None


def _count_whole(counter: Any, table: Any) -> None:
    """Count an input held whole: with integer privacy units (a Parquet integer column, or CSV
    ids converted by _HeldInput), grouped by radix buckets (RowCounter.feed with final=True, as
    select_partitions does), about half the work of the streaming pair sets, with the same
    results in distribution; other inputs go through the pair sets, as when streaming."""
    counter.expect_rows(table.num_rows)  # for the pair sets, if the radix grouping does not apply
    counter.feed(table, final=True)


def _finish_output(args: argparse.Namespace, counter: Any, released: Any, to_stdout: bool, out_fmt: str) -> int:
    """Report dropped rows (to the data holder), write the release, print the guarantee."""
    from dpselect.io.files import write_table
    from dpselect.ingest.pipeline import GUARANTEE_METADATA_KEY

    if counter.null_unit_rows:
        note(args, f"warning: dropped {counter.null_unit_rows} row(s) with a null privacy unit "
                   f"(column {args.privacy_unit!r}). This count is exact and NOT differentially "
                   "private: it is for you, the data holder; do not publish it.")
    if not deliver(lambda: write_table(released, None if to_stdout else args.output, out_fmt, protected=[args.input],
                                       log=args.write_log), to_stdout):
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    note(args, f"released {released.num_rows} partitions to {where}.")
    note(args, (released.schema.metadata or {}).get(GUARANTEE_METADATA_KEY, b"").decode())
    return EXIT_OK


def _with_public(args: argparse.Namespace, partitions: Any, only_public: bool) -> Any:
    """Join the --public-partitions file's keys to the counted partitions."""
    from dpselect.io.files import ColumnError, InputError, detect_format, open_batches
    from dpselect.ingest.public_keys import with_public_partitions
    from dpselect.ingest.rows import import_pyarrow

    pa = import_pyarrow()
    by = list(args.by)
    try:
        fmt = detect_format(args.public_partitions, None, "input")
        source = open_batches(args.public_partitions, fmt, by, args.batch_size, args.block_size or 1 << 20)
        table = pa.Table.from_batches(list(source.batches), schema=source.schema)
        return with_public_partitions(partitions, table, only_public=only_public)
    except (InputError, OSError, pa.ArrowException) as exc:
        raise Fail(EXIT_INPUT, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
    except (ColumnError, ValueError, TypeError) as exc:
        raise Fail(EXIT_DATA, f"--public-partitions {args.public_partitions!r}: {exc}") from exc


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False

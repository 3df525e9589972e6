"""``dpselect explain``: the mechanisms side by side for (epsilon, delta, kappa), and the figures."""
from __future__ import annotations

import argparse
import math
import sys

from dpselect.cli.common import (
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_USAGE,
    Fail,
    api_flags,
    quiet,
    write_err,
)

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """`dpselect explain`: the mechanisms side by side, the recommendation, optional figures."""
    from dpselect.explain import explain_text, plot_mechanisms

    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or not 0 < args.delta < 1:
        raise Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    try:
        text = explain_text(args.epsilon, args.delta, args.max_partitions_contributed,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
        if args.plot:
            plot_mechanisms(args.epsilon, args.delta, args.max_partitions_contributed, args.plot,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
    except ImportError as exc:
        raise Fail(EXIT_USAGE, f"{exc} (for --plot: pip install 'dpselect[plot]')") from exc
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, api_flags(str(exc))) from exc
    except OverflowError as exc:
        raise Fail(EXIT_USAGE, f"the parameters are out of range ({exc}): lower --max-partitions-contributed "
                               "or --pre-threshold") from exc
    except OSError as exc:  # the figure's file
        raise Fail(EXIT_OUTPUT, f"cannot write --plot {args.plot!r}: {exc.strerror or exc}") from exc
    if sys.stdout is None:
        raise Fail(EXIT_OUTPUT, "standard output is closed: nothing to print the comparison to")
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): not an error
        quiet(sys.stdout)
        return EXIT_OK
    except OSError as exc:
        quiet(sys.stdout)
        raise Fail(EXIT_OUTPUT, f"cannot write to standard output: {exc.strerror or exc}") from exc
    if args.plot:
        write_err(f"dpselect: figures written to {args.plot}")
    return EXIT_OK

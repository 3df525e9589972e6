"""Which mechanism releases the most on real (user, key) data, and what ``strategy="auto"`` picks.

Every mechanism goes through the public API on raw rows, with the secure CSPRNG:

    dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=ε, delta=δ,
                               max_partitions_contributed=κ, strategy=S)

for S in pi_opt, release (TSGD, keys and noisy counts), laplace, gaussian, weighted_gaussian,
weighted_laplace, dp_sips, cumulative_sips and auto; each cell is the mean number of released keys over
``--repeat`` runs (± the standard error of that mean). "auto loss" is how many fewer keys auto
released than the best of the other columns, in percent of the best (0 where auto is the best or
ties it). Real data found on this machine, each built once and cached (``--cache``):

stdlib   every ``*.py`` file of the running interpreter's standard library
         (``sysconfig.get_paths()["stdlib"]``, without ``site-packages`` and ``__pycache__``) is a
         user; its keys are its distinct identifiers (``tokenize`` NAME tokens that are not
         keywords).
python   the same over the standard library's directory *with* its ``site-packages`` (every
         third-party package installed for that interpreter): many more users, the same kind of
         keys.
man      every English manual page (``/usr/share/man/man*/*.gz``) is a user; its keys are its
         distinct lower-case words of 3 letters or more (roff escapes removed).
dpkg     every installed Debian package (``/var/lib/dpkg/status``) is a user; its keys are the
         packages it Depends / Pre-Depends on or Recommends.

A data set that is absent on a machine is skipped (and said so). The input data are real files;
the only randomness is the mechanisms' own (the package CSPRNG).

    python bench/bench_auto.py                                   # every data set, default grid
    python bench/bench_auto.py --datasets stdlib --repeat 3      # quick
    python bench/bench_auto.py --epsilons 1 --kappas 1,2,4,16,100 --datasets python,man --repeat 3
"""
from __future__ import annotations

import argparse
import gzip
import keyword
import math
import os
import re
import statistics
import sys
import sysconfig
import time
import tokenize
from pathlib import Path

MECHANISMS = ("pi_opt", "release", "laplace", "gaussian", "weighted_gaussian", "weighted_laplace", "dp_sips",
              "cumulative_sips", "auto")
SKIP_DIRS = {"__pycache__"}
_ROFF_ESCAPE = re.compile(r"\\(?:f(?:\[[^\]]*\]|\(..|.)|\(..|\[[^\]]*\]|[*n]\(?..|.)")
_WORD = re.compile(r"[a-z]{3,}")
_DEP_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9+.-]*)")


# ---------------------------------------------------------------------------------------------
# real data: (user, key) string pairs


def _identifiers(path: Path) -> set[str] | None:
    try:
        with tokenize.open(path) as f:
            return {t.string for t in tokenize.generate_tokens(f.readline)
                    if t.type == tokenize.NAME and not keyword.iskeyword(t.string)}
    except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, OSError, ValueError):
        return None


def python_pairs(with_site_packages: bool) -> tuple[list[str], list[str], str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    # the interpreter's own site-packages lies under the standard library's directory (a
    # virtual environment's does not: it is the base interpreter's that is read)
    skip = set(SKIP_DIRS) if with_site_packages else SKIP_DIRS | {"site-packages"}
    users: list[str] = []
    keys: list[str] = []
    seen: set[Path] = set()
    skipped = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            path = Path(dirpath, name).resolve()
            if not name.endswith(".py") or path in seen:
                continue
            seen.add(path)
            names = _identifiers(path)
            if names is None:
                skipped += 1
                continue
            users.extend([str(path)] * len(names))
            keys.extend(sorted(names))
    where = f"{root}{'' if with_site_packages else ' without site-packages'}"
    return users, keys, f"*.py files under {where} ({skipped} did not tokenize); key = identifier"


def man_pairs() -> tuple[list[str], list[str], str]:
    users: list[str] = []
    keys: list[str] = []
    root = Path("/usr/share/man")
    for section in sorted(root.glob("man*")):
        for path in sorted(section.glob("*.gz")):
            try:
                text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
            except (OSError, EOFError):
                continue
            words = set(_WORD.findall(_ROFF_ESCAPE.sub(" ", text).lower()))
            users.extend([str(path)] * len(words))
            keys.extend(sorted(words))
    return users, keys, "English manual pages /usr/share/man/man*/*.gz; key = word of >= 3 letters"


def dpkg_pairs() -> tuple[list[str], list[str], str]:
    users: list[str] = []
    keys: list[str] = []
    text = Path("/var/lib/dpkg/status").read_text(errors="replace")
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        current = None
        for line in stanza.splitlines():
            if line[:1].isspace() and current:
                fields[current] += " " + line.strip()
            elif ":" in line:
                current, _, value = line.partition(":")
                fields[current] = value.strip()
        package = fields.get("Package")
        if not package:
            continue
        deps = set()
        for field in ("Depends", "Pre-Depends", "Recommends"):
            for alternative in fields.get(field, "").split(","):
                for choice in alternative.split("|"):
                    match = _DEP_NAME.match(choice)
                    if match:
                        deps.add(match.group(1))
        users.extend([package] * len(deps))
        keys.extend(sorted(deps))
    return users, keys, "installed Debian packages (/var/lib/dpkg/status); key = package depended on"


BUILDERS = {
    "stdlib": lambda: python_pairs(False),
    "python": lambda: python_pairs(True),
    "man": man_pairs,
    "dpkg": dpkg_pairs,
}


def load(name: str, cache: Path):
    """The data set as an Arrow table of int64 codes (user, key), built once and cached."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache / f"dpselect_bench_auto_{name}_py{sys.version_info[0]}{sys.version_info[1]}.parquet"
    if path.exists():
        table = pq.read_table(path)
        return table, table.schema.metadata[b"description"].decode()
    users, keys, description = BUILDERS[name]()
    if not users:
        raise FileNotFoundError(f"no data for {name}")
    user_codes = np.unique(np.array(users, dtype=object), return_inverse=True)[1].astype(np.int64)
    key_codes = np.unique(np.array(keys, dtype=object), return_inverse=True)[1].astype(np.int64)
    table = pa.table({"user": user_codes, "key": key_codes}).replace_schema_metadata(
        {"description": description})
    cache.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table, description


def describe(table) -> str:
    import numpy as np

    users = np.bincount(table["user"].to_numpy())
    return (f"{users.size:,} users, {table.num_rows:,} (user, key) pairs, "
            f"{np.unique(table['key'].to_numpy()).size:,} keys, median {int(np.median(users))} keys per user")


# ---------------------------------------------------------------------------------------------
# runs


def released(table, epsilon: float, delta: float, kappa: int, strategy: str) -> int | None:
    import dpselect

    try:
        out = dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=epsilon, delta=delta,
                                         max_partitions_contributed=kappa, strategy=strategy)
    except ValueError:  # not available at these parameters
        return None
    return out.num_rows


def auto_choice(epsilon: float, delta: float, kappa: int) -> str:
    import dpselect

    return dpselect.recommend(epsilon, delta, kappa, rows=True).label


def loss(runs: dict[str, list[int | None]]) -> str:
    """auto's shortfall against the best other mechanism's mean, in percent of it."""
    means = {m: statistics.fmean(v) for m, v in runs.items() if v and all(x is not None for x in v)}  # type: ignore[misc]
    others = [x for m, x in means.items() if m != "auto"]
    if "auto" not in means or not others or max(others) == 0:
        return "-"
    return f"{100 * max(0.0, 1 - means['auto'] / max(others)):.1f} %"


def cell(values: list[int | None]) -> str:
    if any(v is None for v in values):
        return "n/a"
    mean = statistics.fmean(values)  # type: ignore[arg-type]
    if len(values) < 2:
        return f"{mean:,.1f}"
    sem = statistics.stdev(values) / math.sqrt(len(values))  # type: ignore[arg-type]
    return f"{mean:,.1f} ± {sem:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="stdlib,python,man,dpkg")
    parser.add_argument("--epsilons", default="0.5,1,2,4")
    parser.add_argument("--kappas", default="1,2,3,4,8,16,100")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell (the mean is shown)")
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    args = parser.parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    kappas = [int(k) for k in args.kappas.split(",")]
    mechanisms = args.mechanisms.split(",")

    import dpselect

    t_start = time.perf_counter()
    out = [f"dpselect {getattr(dpselect, '__version__', '?')}, Python {sys.version.split()[0]}, δ = {args.delta:g}, "
           f"mean of {args.repeat} runs per cell (± standard error), secure CSPRNG", ""]
    for name in args.datasets.split(","):
        try:
            table, description = load(name, args.cache)
        except (FileNotFoundError, OSError) as err:
            out += [f"### {name}: skipped ({err})", ""]
            continue
        out += [f"### {name}: {describe(table)}", "", description, ""]
        out.append("| ε | κ | " + " | ".join(mechanisms) + " | auto chose | auto loss |")
        out.append("|---" * (len(mechanisms) + 4) + "|")
        for epsilon in epsilons:
            for kappa in kappas:
                runs = {mechanism: [released(table, epsilon, args.delta, kappa, mechanism) for _ in range(args.repeat)]
                        for mechanism in mechanisms}
                cells = [cell(values) for values in runs.values()]
                row = (f"| {epsilon:g} | {kappa} | " + " | ".join(cells)
                       + f" | {auto_choice(epsilon, args.delta, kappa)} | {loss(runs)} |")
                out.append(row)
                print(f"[{name}] {row}", file=sys.stderr, flush=True)
        out.append("")
    out.append(f"Total wall time: {time.perf_counter() - t_start:.0f} s. Command: "
               + " ".join(["python bench/bench_auto.py", *sys.argv[1:]]))
    print("\n".join(out))


if __name__ == "__main__":
    main()

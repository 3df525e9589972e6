"""Utility: how many partitions each mechanism releases, at ε = 1, δ = 1e-5, κ ∈ {1, 2, 4, 8, 16, 100}.

Every mechanism goes through the public API on raw rows, with the secure CSPRNG (no ``rng``):

    dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1, delta=1e-5,
                               max_partitions_contributed=κ, strategy=S)

* count-based (bound each user to κ partitions uniformly, count distinct users, select):
  ``pi_opt`` (the plain ε/κ, δ' budget split), ``release`` (TSGD: keys and noisy counts),
  ``laplace``, ``gaussian``, ``auto`` (what ``strategy="auto"`` picks on raw rows);
* row mechanisms (each user's set is weighted): ``weighted_gaussian``, ``weighted_laplace``,
  ``dp_sips``, ``cumulative_sips`` (parallel, certified) and ``policy_gaussian``, ``policy_laplace`` (sequential
  Python reference implementations, not certified).

"Parallel" mechanisms are all of them but the two policy ones.

Datasets:

(a) synthetic: N users (default 1,000,000). User u has m_u item draws, m_u uniform on
    {1, ..., 50} (mean 25.5 draws); each draw is an item rank from the Zipf law truncated to
    the vocabulary, P(r) ∝ r^-1.1 for r = 1..1,000,000 (inverse-CDF sampling). Repeated draws
    of one item by one user are one (user, item) pair, so a user holds 1–50 distinct items.
    Columns: user int64, item int64. The generator is numpy's seeded PCG64: it makes the
    *input data* only, it is not privacy noise (every mechanism draws its noise from the
    package CSPRNG).
    The policy mechanisms are timed on a 100,000-user subsample (the first 100,000 users, which
    is a uniform subsample since users are i.i.d.) for the smallest and largest κ; if the
    projected full-size run exceeds ``--policy-budget`` seconds (default 60) they are reported
    on that 100,000-user subsample instead, marked "(100k)" in the table.

(b) Python standard library: every ``*.py`` file under the running interpreter's
    ``sysconfig.get_paths()["stdlib"]``, recursively, skipping directories named
    ``site-packages`` (third-party code) and ``__pycache__``. The test suites (``test``,
    ``tests``, ``idle_test``) are kept by default, since they more than double the number of
    users (CPython 3.11: ~1,790 files instead of ~720); ``--no-stdlib-tests`` leaves them out. Each
    file is a user (its path relative to the stdlib root, a string); its items are its distinct
    identifiers: ``tokenize`` NAME tokens that are not keywords (``keyword.iskeyword``; soft
    keywords such as ``match`` count as identifiers). Files that do not tokenize are skipped
    and counted. Small (a few to a few dozen keys released), so each (κ, mechanism) runs
    ``--repeat`` times (default 11) and the mean is shown, with its standard error below the
    table: the mean estimates the expected number of keys, which is what ``auto`` is compared on.

Each cell is one draw of a random variable: the released count of a count-based mechanism is
a sum of independent keep decisions, with standard deviation at most √(released) and usually
much less (only partitions near the threshold are uncertain). Differences of a few √(released)
between mechanisms are within the noise of one run.

    python bench/bench_utility.py                 # full run (1e6 synthetic users, κ 1..100)
    python bench/bench_utility.py --quick         # 100,000 users, κ ∈ {1, 4}
    python bench/bench_utility.py --users 100000 --repeat 5 --no-policy --kappas 1,2,4,16,100
                                                  # auto against every parallel mechanism, in minutes
    python bench/bench_utility.py --skip synthetic,stdlib --real python,man --no-policy --repeat 3
                                                  # the real corpora of bench/bench_auto.py (many keys per
                                                  # user, Zipfian frequencies), every mechanism

The last column, "auto loss", is how many fewer partitions ``auto`` released than the best
parallel mechanism, in percent of the best (0 where auto is the best or ties it).
"""
from __future__ import annotations

import argparse
import keyword
import os
import statistics
import sys
import sysconfig
import time
import tokenize
from pathlib import Path

EPSILON, DELTA = 1.0, 1e-5
COUNT_BASED = ("pi_opt", "release", "laplace", "gaussian", "auto")
ROW_PARALLEL = ("weighted_gaussian", "weighted_laplace", "dp_sips", "cumulative_sips")
POLICY = ("policy_gaussian", "policy_laplace")
MECHANISMS = COUNT_BASED + ROW_PARALLEL + POLICY
PARALLEL = ("pi_opt", "release", "laplace", "gaussian") + ROW_PARALLEL
SKIP_DIRS = {"site-packages", "__pycache__"}
TEST_DIRS = {"test", "tests", "idle_test"}
SUBSAMPLE = 100_000


# ---------------------------------------------------------------------------------------------
# data


def synthetic_table(users: int, vocabulary: int, zipf_s: float, max_items: int, seed: int):
    import numpy as np
    import pyarrow as pa

    gen = np.random.Generator(np.random.PCG64(seed))  # input data only, not privacy noise
    per_user = gen.integers(1, max_items + 1, users)  # uniform on {1, ..., max_items}
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -zipf_s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    rows = int(per_user.sum())
    ranks = np.searchsorted(cdf, gen.random(rows), side="right")  # 0-based truncated-Zipf rank
    np.minimum(ranks, vocabulary - 1, out=ranks)
    user = np.repeat(np.arange(users, dtype=np.int64), per_user)
    return pa.table({"user": pa.array(user, pa.int64()), "item": pa.array(ranks.astype(np.int64), pa.int64())})


def stdlib_table(skip_dirs: set[str]):
    import pyarrow as pa

    root = Path(sysconfig.get_paths()["stdlib"])
    users: list[str] = []
    items: list[str] = []
    files = skipped = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = Path(dirpath, name)
            try:
                with tokenize.open(path) as f:
                    names = {t.string for t in tokenize.generate_tokens(f.readline)
                             if t.type == tokenize.NAME and not keyword.iskeyword(t.string)}
            except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, OSError, ValueError):
                skipped += 1
                continue
            if not names:
                continue
            files += 1
            rel = str(path.relative_to(root))
            users.extend([rel] * len(names))
            items.extend(sorted(names))
    table = pa.table({"user": pa.array(users, pa.string()), "item": pa.array(items, pa.string())})
    return table, {"root": str(root), "files": files, "skipped": skipped}


def cached_stdlib_table(skip_dirs: set[str], cache: Path | None):
    """stdlib_table, read once and kept as Parquet under ``cache`` (tokenizing takes minutes)."""
    import pyarrow.parquet as pq

    if cache is None:
        return stdlib_table(skip_dirs)
    tag = "_".join(sorted(skip_dirs))
    path = cache / f"dpselect_bench_utility_stdlib_py{sys.version_info[0]}{sys.version_info[1]}_{tag}.parquet"
    if path.exists():
        table = pq.read_table(path)
        meta = table.schema.metadata
        info = {"root": meta[b"root"].decode(), "files": int(meta[b"files"]), "skipped": int(meta[b"skipped"])}
        return table.replace_schema_metadata(None), info
    table, info = stdlib_table(skip_dirs)
    cache.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({k: str(v) for k, v in info.items()}), path)
    return table, info


def describe(table) -> str:
    import pyarrow.compute as pc

    return (f"{pc.count_distinct(table['user']).as_py():,} users, {table.num_rows:,} (user, item) rows, "
            f"{pc.count_distinct(table['item']).as_py():,} distinct items")


# ---------------------------------------------------------------------------------------------
# runs


def run_once(table, kappa: int, strategy: str) -> tuple[int, float]:
    import dpselect

    for attempt in range(3):  # the package may be rebuilt under us: retry a transient import error
        try:
            t0 = time.perf_counter()
            out = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=EPSILON, delta=DELTA,
                                             max_partitions_contributed=kappa, strategy=strategy)
            return out.num_rows, time.perf_counter() - t0
        except ImportError:
            if attempt == 2:
                raise
            time.sleep(60)
    raise AssertionError("unreachable")


def run_grid(table, kappas, mechanisms, repeat: int, label: str):
    """{(κ, mechanism): (mean released, list of released, median seconds)}."""
    res = {}
    for kappa in kappas:
        for mech in mechanisms:
            released, seconds = zip(*(run_once(table, kappa, mech) for _ in range(repeat)))
            res[kappa, mech] = (statistics.fmean(released), list(released), statistics.median(seconds))
            print(f"  [{label}] κ={kappa:<2} {mech:<17} released {res[kappa, mech][0]:>9,.0f} "
                  f"in {res[kappa, mech][2]:7.2f} s", file=sys.stderr, flush=True)
    return res


# ---------------------------------------------------------------------------------------------
# report


def fmt(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def report(title: str, res: dict, kappas, note: dict[str, str], repeat: int, timings: bool = True,
           mechanisms: tuple[str, ...] = MECHANISMS) -> list[str]:
    lines = [f"### {title}", ""]
    if repeat > 1:
        lines += [f"Partitions released (mean of {repeat} runs):", ""]
    else:
        lines += ["Partitions released (one run each):", ""]
    header = [m + note.get(m, "") for m in mechanisms]
    lines.append("| κ | " + " | ".join(header) + " | best parallel | (1) max(dp_sips, wG) > pi_opt | "
                 "(2) auto / best parallel | auto / best count-based | auto loss |")
    lines.append("|---" * (len(mechanisms) + 6) + "|")
    for k in kappas:
        cells = [fmt(res[k, m][0]) for m in mechanisms]
        best = max(PARALLEL, key=lambda m: res[k, m][0])
        best_n = res[k, best][0]
        if k >= 4:
            row = max(res[k, "dp_sips"][0], res[k, "weighted_gaussian"][0])
            q1 = f"{'yes' if row > res[k, 'pi_opt'][0] else 'no'} ({fmt(row)} vs {fmt(res[k, 'pi_opt'][0])})"
        else:
            q1 = "(κ < 4)"
        ratio = res[k, "auto"][0] / best_n if best_n else float("nan")
        gap = best_n - res[k, "auto"][0]
        if ratio >= 0.98:
            q2 = f"{ratio:.3f} ok"
        else:  # one standard deviation of a released count is at most √(released)
            q2 = f"{ratio:.3f} > 2 % worse" + (" (gap ≤ 2√best: noise)" if gap <= 2 * best_n ** 0.5 else "")
        best_count = max(res[k, m][0] for m in COUNT_BASED if m != "auto")
        q3 = f"{res[k, 'auto'][0] / best_count:.3f}" if best_count else "-"
        loss = f"{100 * max(0.0, 1 - res[k, 'auto'][0] / best_n):.1f} %" if best_n else "-"
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {best} ({fmt(best_n)}) | {q1} | {q2} | {q3} | {loss} |")
    if not timings:
        return lines + [""]
    lines += ["", "Wall time per call (s" + (", median" if repeat > 1 else "") + "):", ""]
    lines.append("| κ | " + " | ".join(header) + " |")
    lines.append("|---" * (len(mechanisms) + 1) + "|")
    for k in kappas:
        lines.append(f"| {k} | " + " | ".join(f"{res[k, m][2]:.2f}" for m in mechanisms) + " |")
    lines.append("| total | " + " | ".join(f"{sum(res[k, m][2] for k in kappas):.1f}" for m in mechanisms) + " |")
    if repeat > 1:
        lines += ["", "Standard error of each mean: " + "; ".join(
            f"κ={k} {m} {statistics.stdev(res[k, m][1]) / len(res[k, m][1]) ** 0.5:.2f}"
            for k in kappas for m in mechanisms)]
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=None, help="synthetic users (default 1,000,000; --quick 100,000)")
    parser.add_argument("--quick", action="store_true", help="100,000 synthetic users, κ ∈ {1, 4}")
    parser.add_argument("--vocabulary", type=int, default=1_000_000)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--max-items", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1, help="input-data seed (not privacy noise)")
    parser.add_argument("--repeat", type=int, default=11,
                        help="runs per cell on the stdlib corpus, mean shown (default 11: each takes < 1 s)")
    parser.add_argument("--policy-budget", type=float, default=60.0,
                        help="seconds a policy run on the full synthetic data may take, projected")
    parser.add_argument("--no-stdlib-tests", action="store_true",
                        help="leave the stdlib's test/tests/idle_test directories out")
    parser.add_argument("--skip", default="", help="comma-separated datasets to skip: synthetic,stdlib")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder to keep the tokenized stdlib corpus in, as Parquet (default: not kept)")
    parser.add_argument("--kappas", default=None, help="comma-separated κ (default 1,2,4,8,16,100; --quick 1,4)")
    parser.add_argument("--real", default="",
                        help="comma-separated corpora of bench/bench_auto.py to run as well (python: identifiers of "
                             "the interpreter's files with site-packages; man: words of the manual pages; dpkg), "
                             "each --repeat times; built once and kept in --cache (default $TMPDIR)")
    parser.add_argument("--no-policy", action="store_true",
                        help="leave out the sequential policy mechanisms (reference implementations, slow)")
    args = parser.parse_args()
    if args.users is None:
        args.users = SUBSAMPLE if args.quick else 1_000_000
    if args.kappas is not None:
        kappas: tuple[int, ...] = tuple(int(k) for k in args.kappas.split(","))
    else:
        kappas = (1, 4) if args.quick else (1, 2, 4, 8, 16, 100)
    mechanisms = COUNT_BASED + ROW_PARALLEL + (() if args.no_policy else POLICY)
    skip = set(filter(None, args.skip.split(",")))

    import dpselect
    import pyarrow as pa
    import pyarrow.compute as pc

    t_start = time.perf_counter()
    out = [f"dpselect {getattr(dpselect, '__version__', '?')}, Python {sys.version.split()[0]}, "
           f"pyarrow {pa.__version__}, cores={os.cpu_count()}, ε={EPSILON:g}, δ={DELTA:g}, κ ∈ {set(kappas)}, "
           "secure CSPRNG", ""]

    if "synthetic" not in skip:
        t0 = time.perf_counter()
        table = synthetic_table(args.users, args.vocabulary, args.zipf, args.max_items, args.seed)
        print(f"synthetic data built in {time.perf_counter() - t0:.1f} s: {describe(table)}", file=sys.stderr)
        res = run_grid(table, kappas, COUNT_BASED + ROW_PARALLEL, 1, "synthetic")
        # Policy mechanisms: time them on a 100k-user subsample first (first users = uniform subsample).
        sub = table.filter(pc.less(table["user"], SUBSAMPLE)) if args.users > SUBSAMPLE else table
        policy = () if args.no_policy else POLICY
        probe = run_grid(sub, (kappas[0], kappas[-1]), policy, 1, "synthetic 100k probe")
        projected = {m: max(probe[k, m][2] for k in (kappas[0], kappas[-1])) * args.users / min(args.users, SUBSAMPLE)
                     for m in policy}  # linear in users: one Python step per user
        note: dict[str, str] = {}
        for m in policy:
            if args.users <= SUBSAMPLE:
                res.update({(k, m): probe[k, m] for k in (kappas[0], kappas[-1])})
                res.update(run_grid(sub, [k for k in kappas if (k, m) not in res], (m,), 1, "synthetic"))
            elif projected[m] <= args.policy_budget:
                res.update(run_grid(table, kappas, (m,), 1, "synthetic"))
            else:
                note[m] = " (100k)"
                res.update({(k, m): probe[k, m] for k in (kappas[0], kappas[-1])})
                res.update(run_grid(sub, [k for k in kappas if (k, m) not in res], (m,), 1, "synthetic 100k"))
        title = (f"(a) Synthetic: {describe(table)}; items per user uniform on 1..{args.max_items} draws, "
                 f"truncated Zipf s={args.zipf:g} over {args.vocabulary:,} items, seed {args.seed}")
        out += report(title, res, kappas, note, 1, mechanisms=mechanisms)
        if note:
            out.append("(100k) = run on the 100,000-user subsample (" + describe(sub) + "): projected full-size "
                       "time per run " + ", ".join(f"{m} {projected[m]:.0f} s" for m in note)
                       + f" > {args.policy_budget:g} s. Not comparable with the other columns: the table below "
                       "runs every mechanism on that subsample.")
            out.append("")
            sub_res = {key: val for key, val in res.items() if key[1] in note}
            sub_res.update(run_grid(sub, kappas, [m for m in mechanisms if m not in note], 1, "synthetic 100k"))
            out += report(f"(a') Synthetic, 100,000-user subsample: {describe(sub)}", sub_res, kappas, {}, 1,
                          timings=False, mechanisms=mechanisms)
        del table, sub

    if "stdlib" not in skip:
        t0 = time.perf_counter()
        skip_dirs = SKIP_DIRS | (TEST_DIRS if args.no_stdlib_tests else set())
        table, info = cached_stdlib_table(skip_dirs, args.cache)
        print(f"stdlib corpus read in {time.perf_counter() - t0:.1f} s: {describe(table)}", file=sys.stderr)
        res = run_grid(table, kappas, mechanisms, args.repeat, "stdlib")
        title = (f"(b) Python {sys.version.split()[0]} standard library ({info['root']}, *.py without "
                 f"{'/'.join(sorted(skip_dirs))} dirs; {info['skipped']} files failed to tokenize): "
                 f"{describe(table)}; user = file, item = distinct non-keyword NAME token")
        out += report(title, res, kappas, {}, args.repeat, mechanisms=mechanisms)

    for name in filter(None, args.real.split(",")):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_auto import load  # one loader per corpus, shared with bench_auto.py

        table, description = load(name, args.cache or Path(os.environ.get("TMPDIR", "/tmp")))
        table = table.rename_columns(["user", "item"])
        print(f"{name} corpus: {describe(table)}", file=sys.stderr)
        res = run_grid(table, kappas, mechanisms, args.repeat, name)
        out += report(f"({name}) {description}: {describe(table)}", res, kappas, {}, args.repeat,
                      mechanisms=mechanisms)

    out.append("Caveat: each cell is one random draw (secure CSPRNG; the stdlib cells are means). A count is "
               "a sum of independent keep decisions: its noise is at most ±√(released) per standard deviation, "
               "usually less; differences within a few √(released) are not significant.")
    out.append(f"Total wall time: {time.perf_counter() - t_start:.0f} s. Command: "
               + " ".join(["python bench/bench_utility.py", *sys.argv[1:]]))
    print("\n".join(out))


if __name__ == "__main__":
    main()

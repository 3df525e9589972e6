#!/usr/bin/env bash
# The scaling table of docs/rows.md ("Threads"), in one run on a many-core machine: dpselect at
# 1, 2, 4, 8 and 16 threads (or $THREADS) against Polars at its default threads, same data, same
# script, interleaved rounds (bench_rows.py, bench_aggregate.py), and the streaming path (a
# RowCounter fed 8 batches, string and integer privacy units: bench_streaming_rows.py, which also
# prints the CPU seconds). Every command is bounded by `timeout`, and the output goes to
# $OUT/scaling.txt as it comes, so a run cut short still reports what it measured.
#
#   OUT=/tmp/out ROWS=10000000 bash bench/device_scaling.sh          # the table (about 8 minutes on 16 cores)
#   OUT=/tmp/out ROWS=200000 THREADS="1 2 4" bash bench/device_scaling.sh   # a quick check of the script
#   LARGE_ROWS=50000000 ...   # also the speed-up from 2 to 16 threads at 5e7 rows (select, int64
#                             # keys; aggregate): about 4 more minutes on 16 cores
#
# Needs the in-place build and pyarrow; Polars (bench extra) for the comparisons (without it the
# Polars columns are left out).
set -u
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-.}
rows=${ROWS:-10000000}
threads=${THREADS:-"1 2 4 8 16"}
limit=${LIMIT_S:-120}
python=${PYTHON:-python3}
engines=dpselect
if "$python" -c 'import polars' 2>/dev/null; then engines=dpselect,polars; fi
log="$out/scaling.txt"
mkdir -p "$out"
{
    echo "# $(nproc) CPUs: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/.*: *//')"
    echo "# rows=$rows threads=[$threads] engines=$engines"
    for t in $threads; do
        for key in int string; do
            echo "## select_partitions, $key keys, threads=$t"
            timeout "$limit" "$python" "$here/bench_rows.py" --rows "$rows" --repeat 3 --engines "$engines" \
                --key-type "$key" --threads "$t" 2>&1 | tail -n 8
        done
        echo "## aggregate, threads=$t"
        timeout "$limit" "$python" "$here/bench_aggregate.py" --rows "$rows" --repeat 3 --threads "$t" 2>&1 | tail -n 8
        for users in "" "--int-users"; do
            echo "## streaming rows (8 batches) $users, threads=$t"
            timeout "$limit" "$python" "$here/bench_streaming_rows.py" --rows "$rows" --users $((rows / 10)) \
                --batches 8 --repeat 3 --threads "$t" $users 2>&1 | tail -n 2
        done
    done
    large=${LARGE_ROWS:-0}
    if [ "$large" -gt 0 ]; then
        for t in 2 16; do
            echo "## select_partitions, int keys, $large rows, threads=$t"
            timeout "$limit" "$python" "$here/bench_rows.py" --rows "$large" --repeat 2 --engines "$engines" \
                --key-type int --threads "$t" 2>&1 | tail -n 8
            echo "## aggregate, $large rows, threads=$t"
            timeout "$limit" "$python" "$here/bench_aggregate.py" --rows "$large" --repeat 2 --threads "$t" 2>&1 \
                | tail -n 8
        done
    fi
} 2>&1 | tee "$log"

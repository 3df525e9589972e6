#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 60), one after the other, niced.
#   fuzz/run.sh 300            # five minutes per target
#   fuzz/run.sh 60 rows files  # only these targets
# Needs the in-place build (python setup.py build_ext --inplace) and atheris (pip install atheris);
# FUZZ_ASAN=1 for a tree built by fuzz/build_asan.sh.
# The committed seeds in fuzz/corpus/<target>/ are read, never written: inputs the fuzzer finds
# go to $FUZZ_WORK/corpus/<target>/ (default: a directory under /tmp, kept between runs), and
# crashes, timeouts and out-of-memory inputs to $FUZZ_WORK/artifacts/<target>-*. Each target's
# execution count is printed at the end; the exit code is 1 if any target found something.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(rows select bound files)
python=${PYTHON:-python3}
work=${FUZZ_WORK:-${TMPDIR:-/tmp}/dpselect-fuzz}
mkdir -p "$work/artifacts" "$work/logs"
# FUZZ_ASAN=1: the C kernel was built with AddressSanitizer (fuzz/build_asan.sh); load its runtime
# first. Python itself leaks by design: no leak report.
preload=()
if [ "${FUZZ_ASAN:-0}" = 1 ]; then
    preload=(env "LD_PRELOAD=$(gcc -print-file-name=libasan.so)"
             "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}")
fi

status=0
summary=()
for target in "${targets[@]}"; do
    script="$here/fuzz_$target.py"
    if [ ! -f "$script" ]; then
        echo "no target $target (fuzz/fuzz_$target.py)" >&2
        exit 2
    fi
    mkdir -p "$work/corpus/$target"
    log="$work/logs/$target.log"
    echo "== fuzz_$target: ${seconds}s (log: $log)"
    # -timeout: one input running that long is a hang; -rss_limit_mb: room for pyarrow.
    (cd "$root" && nice -n 19 ${preload[@]+"${preload[@]}"} "$python" "$script" \
        -max_total_time="$seconds" -timeout=120 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$target-" \
        "$work/corpus/$target" "$here/corpus/$target") >"$log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        status=1
        echo "   FOUND something (exit $rc): see $log and $work/artifacts/$target-*"
        grep -A 12 -m 1 '=== Uncaught Python exception\|ERROR: libFuzzer\|=== Timeout' "$log" | sed 's/^/   /'
    fi
    summary+=("$target: ${runs:-?} executions in ${seconds}s ($cov) exit $rc")
done
echo
printf '%s\n' "${summary[@]}"
exit $status

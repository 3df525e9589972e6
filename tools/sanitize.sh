#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer (docs/testing.md,
# "Sanitizers").
#
#   tools/sanitize.sh [pytest arguments]      (default: the whole suite, tests/)
#
# 1. Copies the working tree (tracked files and untracked ones that git does not ignore, so
#    uncommitted changes are tested; no build products) into a new temporary directory, so the
#    developer's in-place build is never overwritten.
# 2. Builds the extension modules there with DPSELECT_SANITIZE=1 (setup.py: -fsanitize=address,
#    undefined, every undefined-behaviour report fatal, -O1 -g).
# 3. Runs pytest there with the sanitizer runtimes preloaded into the (uninstrumented) Python,
#    PYTHONMALLOC=malloc (so Python's own objects are checked too, not hidden in pymalloc's
#    arenas) and PYTHONPATH pointing at the copy (so the tests' child processes import the
#    sanitized build too, never an installed dpselect).
# Exits non-zero if the build fails, a test fails, or a sanitizer reports anything: a report
# aborts the process that made it (pytest itself, or a child process) and is kept in a file,
# printed at the end; any report fails the run, even one from a child whose test passed.
#
# Environment: PYTHON (default python3) needs Cython, numpy, setuptools and the test extras;
# CC (default gcc) is the compiler whose runtimes are preloaded; DPSELECT_SANITIZE_KEEP=1 keeps
# the temporary directory; DPSELECT_SANITIZE_JOBS (default 2) parallel compile jobs.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
cc=${CC:-gcc}
jobs=${DPSELECT_SANITIZE_JOBS:-2}

case "$(uname -s)" in
Linux) ;;
*) echo "sanitize.sh: Linux only (the runtimes are preloaded with LD_PRELOAD)" >&2; exit 2 ;;
esac

# The runtimes of the compiler that builds the modules; Python is not instrumented, so ASan must be
# the first library loaded into the process.
asan=$("$cc" -print-file-name=libasan.so)
ubsan=$("$cc" -print-file-name=libubsan.so)
for lib in "$asan" "$ubsan"; do
    if [ ! -e "$lib" ]; then
        echo "sanitize.sh: $cc has no $(basename "$lib") (Debian: apt-get install libasan8 libubsan1)" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/dpselect-sanitize.XXXXXX")
work=$(cd "$work" && pwd -P)
if [ "${DPSELECT_SANITIZE_KEEP:-0}" = 1 ]; then
    echo "sanitize.sh: keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi
tree="$work/tree"
mkdir "$tree"

echo "sanitize.sh: copying $repo into $tree"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Files deleted in the work tree but still in the index are skipped.
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -xf - -C "$tree"
else
    # Not a git checkout (an unpacked sdist, say): everything but build products.
    cp -a "$repo/." "$tree/"
    rm -rf "$tree/build" "$tree"/dpselect/*.so
fi

cd "$tree"
started=$SECONDS
echo "sanitize.sh: building the sanitized extension with $("$cc" --version | head -n 1)"
CC="$cc" DPSELECT_SANITIZE=1 "$python" setup.py -q build_ext --inplace -j "$jobs" >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "sanitize.sh: the sanitized build failed (log above)" >&2
    exit 1
}
echo "sanitize.sh: built in $((SECONDS - started)) s"

# detect_leaks=0: CPython keeps many objects alive until exit, by design.
# abort_on_error=1: a report kills the process (no pytest summary can hide it).
# log_path: every report also goes to a file (report.<pid>), because pytest captures the file
# descriptors of a running test (and a test captures its child processes' stderr), so a report
# printed only to stderr would be lost with the aborted process. They are printed at the end.
reports="$work/reports"
mkdir "$reports"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:print_summary=1:log_path=$reports/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1:log_path=$reports/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LD_PRELOAD="$asan $ubsan${LD_PRELOAD:+ $LD_PRELOAD}"
export PYTHONMALLOC=malloc
export PYTHONPATH="$tree"
export PYTHONFAULTHANDLER=1
# Tests that cannot run under the sanitizers skip themselves when this is set (tests/conftest.py).
export DPSELECT_SANITIZED=1

# The copy's modules must be the ones imported, and they must be the sanitized ones.
"$python" - <<'EOF'
import os, sys
import dpselect, dpselect._rng as rng
tree = os.environ["PYTHONPATH"]
assert dpselect.__file__.startswith(tree + os.sep), dpselect.__file__
with open(rng.__file__, "rb") as module:
    assert b"__asan_init" in module.read(), f"{rng.__file__} is not built with AddressSanitizer"
print(f"sanitize.sh: importing {os.path.dirname(dpselect.__file__)} (sanitized)", file=sys.stderr)
EOF

if [ "$#" -eq 0 ]; then set -- tests; fi
started=$SECONDS
status=0
"$python" -m pytest -q -p no:cacheprovider "$@" || status=$?
echo "sanitize.sh: pytest exited $status after $((SECONDS - started)) s"
found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
    for report in $found; do
        echo "sanitize.sh: ---------------- $(basename "$report") ----------------" >&2
        cat "$report" >&2
    done
    echo "sanitize.sh: FAILED: $(echo "$found" | wc -l) sanitizer report(s), above" >&2
    exit 1
fi
if [ "$status" -eq 5 ]; then
    echo "sanitize.sh: no test was collected" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "sanitize.sh: FAILED: pytest exited $status" >&2
fi
exit "$status"

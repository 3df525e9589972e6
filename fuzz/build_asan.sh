#!/usr/bin/env bash
# Build a copy of the committed tree with AddressSanitizer in the C kernel, for fuzzing:
#   fuzz/build_asan.sh /tmp/dpselect-asan && FUZZ_ASAN=1 /tmp/dpselect-asan/fuzz/run.sh 300
# libFuzzer's coverage does not reach the C code (that needs clang's -fsanitize=fuzzer-no-link),
# but every out-of-bounds access or use after free in it is caught as the Python-guided inputs
# run. The copy is HEAD (git archive): commit what you want fuzzed first.
set -euo pipefail
dest=${1:?usage: fuzz/build_asan.sh DIRECTORY}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
rm -rf "$dest"
mkdir -p "$dest"
git -C "$here/.." archive HEAD | tar -x -C "$dest"
cd "$dest"
CFLAGS="-fsanitize=address -fno-omit-frame-pointer" LDFLAGS="-fsanitize=address" DPSELECT_DEBUG_BUILD=1 \
    nice -n 19 "$python" setup.py build_ext --inplace -j 2
echo "built in $dest; run: FUZZ_ASAN=1 $dest/fuzz/run.sh SECONDS"

#!/usr/bin/env bash
# The whole 16-core measurement in one call of the device machine (see bench/device_scaling.sh
# for what it measures): install the Polars wheels carried in .whl/, build in place on every
# core, then the scaling table, all output under $OUT. From the repository root:
#
#   run  command: "OUT=$OUT LARGE_ROWS=50000000 bash bench/device.sh"   carry: [".whl"]   timeout_s: 560
#
# .whl/ holds polars==2.1.0 and polars-runtime-32==2.1.0 for CPython 3.12 manylinux x86-64
# (pip download --no-deps --only-binary=:all: --python-version 3.12 ...); without it the table
# has dpselect's columns only.
set -u
export PYTHONUNBUFFERED=1
out=${OUT:?set OUT}
mkdir -p "$out"
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
python3 setup.py -q build_ext --inplace -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
PYTHON=python3 OUT="$out" bash "$(dirname "$0")/device_scaling.sh"

#!/usr/bin/env bash
# build.sh [PRESET]: install what the build needs (scripts/setup.sh), configure and build a preset
# (default: release, or cpu on a machine without nvcc). Prints the build folder on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
preset=${1:-release}
cmake --preset "$preset" >&2
jobs=$(nproc)
cmake --build --preset "$preset" -j "$jobs" >&2
build=build/$preset
[ "$preset" = gpu-host ] && build=build-gpu
echo "$build"

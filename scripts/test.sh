#!/usr/bin/env bash
# README command (2): set up, build, and run the whole test suite (CPU tests; the GPU test executable
# reports itself skipped without a GPU). Also builds and tests the CPU-only configuration (no CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
for preset in release cpu; do
  echo "== $preset: build"
  bash scripts/build.sh "$preset"
  echo "== $preset: test"
  ctest --preset "$preset" -j "$(nproc)"
done

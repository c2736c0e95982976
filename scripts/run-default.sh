#!/usr/bin/env bash
# README command (1): set up, build what the default pipeline runs, and run it on the built-in test source.
# Installs only the packages the build needs (scripts/setup.sh build) and builds `sluiced` and `sluicectl` alone
# (the `local` preset, into build/local): CUDA for this machine's GPU when it has one and nvcc is installed,
# otherwise the CPU path. The whole suite (every target, every GPU architecture) is command (2): scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build >&2
cuda=(-DSLUICE_WITH_CUDA=OFF)
if command -v nvidia-smi >/dev/null; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)
  [[ $cap =~ ^[0-9]+$ ]] && cuda=(-DSLUICE_WITH_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cap-real")
fi
cmake --preset local "${cuda[@]}" >&2
cmake --build --preset local -j "$(nproc)" >&2
exec build/local/sluiced run config/pipelines/default.yaml

#!/usr/bin/env bash
# Device call 9a (session 22): the GPU test cases that call 8a failed, after their fixes (a B-frame-free clip for
# whole-picture feeding, exact-at-every-precision inputs for the index test, the grid's size, the stretch case's
# bound), and every [nvdec] test again with the context lock off by default. Bundle: sluice_gpu_tests in .gpu-t,
# the detection references (tests/detect/make_detect_reference.py) in .gpu-t/detect-ref.
set -u
O=${OUT:-/tmp/out}; L=$O/c9a; mkdir -p "$L"
trap 'cd "$O" && tar czf c9a.tgz c9a && rm -rf c9a' EXIT TERM
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
SLUICE_DETECT_REFERENCE_DIR=$(pwd)/.gpu-t/detect-ref timeout 240 .gpu-t/run bin/sluice_gpu_tests \
  "[nvdec],[container],[detect],[nn_cuda]" >"$L/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
tail -2 "$L/gpu_tests.log"; grep -B4 -A12 "FAILED" "$L/gpu_tests.log" | head -60

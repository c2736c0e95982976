#!/usr/bin/env bash
# device-check.sh OUT_DIR: on a GPU host, run the bundled GPU tests and the shipped pipelines
# (made by: cmake --preset gpu-host && cmake --build build-gpu && ../shared/gpu-bundle.sh .gpu
#  build-gpu/sluice_gpu_tests build-gpu/sluiced). Logs go to OUT_DIR; exits non-zero on any failure.
set -uo pipefail
out=${1:?usage: device-check.sh OUT_DIR}
mkdir -p "$out"
status=0
step_tail=25
. "$(dirname "$0")/device-step.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
step gpu-tests .gpu/run bin/sluice_gpu_tests --durations yes
step devices .gpu/run bin/sluiced devices
step default .gpu/run bin/sluiced run config/pipelines/default.yaml
step throughput-pipelined .gpu/run bin/sluiced run config/pipelines/throughput-1080p.yaml
sed 's/^execution: pipelined/execution: serial/' config/pipelines/throughput-1080p.yaml >"$out/throughput-serial.yaml"
step throughput-serial .gpu/run bin/sluiced run "$out/throughput-serial.yaml"
step camera-leaky .gpu/run bin/sluiced run config/pipelines/camera-leaky.yaml
exit $status

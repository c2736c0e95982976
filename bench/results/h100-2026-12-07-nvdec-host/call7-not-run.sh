#!/usr/bin/env bash
# Device call 7 (prepared in session 20, not run: no machine came): the GPU tests of what changed (NVDEC whole-picture feeding, the container
# path, infer's one GPU enqueue with the detection chain and the default model), one density run with the
# latency now counted from each packet's arrival.
set -u
O=${OUT:-/tmp/out}; L=$O/c7; mkdir -p "$L"
trap 'cd "$O" && tar czf c7.tgz c7 && rm -rf c7' EXIT TERM
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$L/gpu.txt"
SLUICE_DETECT_REFERENCE_DIR=$(pwd)/.gpu/detect-ref timeout 100 .gpu/run bin/sluice_gpu_tests "[nvdec],[container],[detect],[infer],[pipeline]" >"$L/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
tail -2 "$L/gpu_tests.log"; grep -A10 "FAILED" "$L/gpu_tests.log" | head -30
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$models" >"$L/models.log" 2>&1
LATENCY_BUDGET_MS=100 timeout 60 bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 32 15 "$L/detect32" tcp gpu "$models/yolov8s-like.onnx" detect 2>&1 | head -1

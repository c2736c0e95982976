#!/usr/bin/env bash
# Device call 2: A/B of the density bench's new knobs (latency budget, thread sampler) against plain runs.
set -u
O=${OUT:-/tmp/out}; L=$O/c2; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"; nproc >>"$L/gpu.txt"
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$models" >"$L/models.log" 2>&1
run() {  # NAME N MODEL HEAD [ENV...]
  local name=$1 n=$2 model=$3 head=$4; shift 4
  env "$@" timeout 80 bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$n" 20 "$L/$name" tcp gpu "$model" "$head" 2>&1 | grep -v "^  dropped" | head -1 | sed "s/^/$name: /"
}
nvidia-smi dmon -s u -d 1 >"$L/dmon.txt" 2>&1 & DMON=$!
run detect32-plain 32 "$models/yolov8s-like.onnx" detect X=1
run detect32-budget 32 "$models/yolov8s-like.onnx" detect LATENCY_BUDGET_MS=100
run detect96-sample 96 "$models/yolov8s-like.onnx" detect THREAD_SAMPLE=5 LATENCY_BUDGET_MS=100
run resnet128-plain 128 "$models/resnet50.onnx" classify X=1
run detect32-plain2 32 "$models/yolov8s-like.onnx" detect X=1
kill $DMON
timeout 40 .gpu/run bin/track_bench --sources 64 --frames 50 --repeats 3 --threads 1 >"$L/track_bench.txt" 2>&1; tail -4 "$L/track_bench.txt"
cd "$O" && tar czf c2.tgz c2 && rm -rf c2

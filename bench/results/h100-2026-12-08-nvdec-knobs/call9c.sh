#!/usr/bin/env bash
# Device call 9c (session 22): what the device time left allowed of call9b.sh: the context lock on and off and 16
# feeders at 96 paced sources, and 96 cameras through sluiced with the lock off (the new default).
# Bundle: sluiced and sluice_nvdec_bench in .gpu, the clip in .gpu/cam1080.h264 (bench/README.md).
set -u
O=${OUT:-/tmp/out}; L=$O/c9c; mkdir -p "$L"
trap 'cd "$O" && tar czf c9c.tgz c9c && rm -rf c9c' EXIT TERM
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
S="$(pwd)/.gpu/run bin/sluiced"
B() { local tag=$1; shift; timeout 30 .gpu/run bin/sluice_nvdec_bench .gpu/cam1080.h264 "$@" >"$L/m-$tag.txt" 2>&1; echo "$tag $(head -c 330 "$L/m-$tag.txt")"; }
B 96-lock1 96 5 nv12 stream 0 30 au lock=1
B 96-nolock 96 5 nv12 stream 0 30 au
B 96-nolock-feeders16 96 5 nv12 stream 0 30 au feeders=16
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$S" .gpu/cam1080.h264 "$models" >"$L/models.log" 2>&1
LATENCY_BUDGET_MS=100 timeout 45 bash bench/live_density.sh "$S" .gpu/cam1080.h264 96 12 \
  "$L/detect96" tcp gpu "$models/yolov8s-like.onnx" detect 2>&1 | head -2
sed -n '/^stage /,/^frames:/p' "$L/detect96/run.log"

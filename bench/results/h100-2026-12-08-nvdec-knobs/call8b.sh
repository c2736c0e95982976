#!/usr/bin/env bash
# Device call 8 (prepared in sessions 20 and 21, not run: no machine was lent): the GPU tests of what changed
# (NVDEC whole-picture feeding, the container path, infer's one GPU enqueue, the NvdecTuning knobs, rotation and
# fit on NVDEC, the new nn ops, the detr head), the RT-DETR and MaxViT exports for issue 31, density runs at 32
# and 96 cameras (latency from each packet's arrival, the simulators spread over processes) and the NVDEC knob
# matrix at 96 paced sources.
# Run from the checkout's root with the bundle in .gpu (bench/README.md: sluiced, sluice_gpu_tests,
# sluice_nvdec_bench), .gpu/cam1080.h264 and .gpu/detect-ref as there. gpu-bundle.sh empties .gpu: copy these in
# after bundling.
set -u
O=${OUT:-/tmp/out}; L=$O/c8b; mkdir -p "$L"
trap 'cd "$O" && tar czf c8b.tgz c8b && rm -rf c8b' EXIT TERM
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$models" >"$L/models.log" 2>&1
LATENCY_BUDGET_MS=100 timeout 60 bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 32 15 \
  "$L/detect32" tcp gpu "$models/yolov8s-like.onnx" detect 2>&1 | head -3
# NVDEC knob matrix: 96 and 32 paced 1080p30 sources, whole access units, display delay 0 (a camera's settings)
B() { local tag=$1; shift; timeout 40 .gpu/run bin/sluice_nvdec_bench .gpu/cam1080.h264 "$@" >"$L/m-$tag.txt" 2>&1; echo "$tag $(tr '\n' ' ' < "$L/m-$tag.txt" | cut -c1-900)"; }
for round in 1 2; do
  B "96-base-$round" 96 5 nv12 stream 0 30 au
  B "96-deferred-$round" 96 5 nv12 stream 0 30 au unmap=deferred
  B "96-feeders8-$round" 96 5 nv12 stream 0 30 au feeders=8
done
B 96-cuda 96 5 nv12 stream 0 30 au creation=cuda
B 96-default 96 5 nv12 stream 0 30 au creation=default
B 96-surf 96 5 nv12 stream 0 30 au output_surfaces=4 extra_surfaces=8
B 96-nolock 96 5 nv12 stream 0 30 au lock=0
B 96-feeders16 96 5 nv12 stream 0 30 au feeders=16
B 96-combo 96 5 nv12 stream 0 30 au unmap=deferred feeders=8 output_surfaces=4
B 32-base 32 5 nv12 stream 0 30 au
B 32-deferred 32 5 nv12 stream 0 30 au unmap=deferred
# 96 cameras with the simulators spread over 6 processes (session 20's 96-camera run had one simulator)
LATENCY_BUDGET_MS=100 timeout 70 bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 96 20 \
  "$L/detect96" tcp gpu "$models/yolov8s-like.onnx" detect 2>&1 | head -3
for r in detect32 detect96; do
  echo "== $r"; sed -n '/^stage /,/^frames:/p' "$L/$r/run.log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('camsim'), d.get('threads_cores'))" "$L/$r/summary.json"
done

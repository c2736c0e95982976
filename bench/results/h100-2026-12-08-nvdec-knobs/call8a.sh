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
O=${OUT:-/tmp/out}; L=$O/c8a; mkdir -p "$L"
trap 'cd "$O" && tar czf c8a.tgz c8a && rm -rf c8a' EXIT TERM
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"

# The exports run on the CPU beside the GPU tests (done before the timed runs).
( PYTHONUNBUFFERED=1 timeout 200 python3 bench/export_rtdetr.py "$L/rtdetr" --size small >"$L/export.log" 2>&1
  timeout 200 python3 bench/export_rtdetr.py "$L/rtdetr" --size default --ops-only >>"$L/export.log" 2>&1
  timeout 150 python3 bench/export_rtdetr.py "$L/rtdetr" --maxvit-ops >>"$L/export.log" 2>&1 ) &
exp=$!
# [nn_cuda]: session 21's ops (Einsum, GatherElements, GridSample, Sin/Cos); [container][rotation]: rotation and
# fit on NVDEC; [detect]: the detr head's kernel twin; [tuning]: the NVDEC knobs.
SLUICE_DETECT_REFERENCE_DIR=$(pwd)/.gpu-t/detect-ref timeout 240 .gpu-t/run bin/sluice_gpu_tests \
  "[nvdec],[container],[detect],[infer],[pipeline],[tuning],[nn_cuda]" >"$L/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
tail -2 "$L/gpu_tests.log"; grep -B2 -A12 "FAILED" "$L/gpu_tests.log" | head -40
wait $exp; echo "export rc=$?"; tail -5 "$L/export.log"; ls -la "$L/rtdetr"

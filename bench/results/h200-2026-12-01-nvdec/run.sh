#!/usr/bin/env bash
# One device call: the NVDEC GPU tests, the NVDEC bound (1/4/16/32 sources, H.264 and HEVC 1080p), OpenCV's CPU
# decode of the same files (1 and 16 processes), and NVDEC sources through a sluiced pipeline (decode -> null).
# Run from the checkout root on the GPU host with the bundle in .gpu-nvdec (see README.md); logs go to $OUT.
set -u
B=.gpu-nvdec
L=$OUT/logs
mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$L/gpu.txt"
nproc >> "$L/gpu.txt"
SLUICE_SOURCE_DIR=$PWD/$B/src timeout 120 $B/run bin/sluice_gpu_tests "[nvdec]" > "$L/gpu_tests.log" 2>&1
echo "gpu_tests rc=$?" >> "$L/gpu_tests.log"
loops_for() { case $1 in 1) echo 10 ;; 4) echo 6 ;; 16) echo 3 ;; *) echo 2 ;; esac; }
for codec in h264 hevc; do
  f=$B/media/bench_1080p.$codec
  for n in 1 4 16 32; do
    for r in 1 2 3; do
      timeout 60 $B/run bin/sluice_nvdec_bench "$f" "$n" "$(loops_for $n)" nv12 >> "$L/nvdec_bound.jsonl" 2>> "$L/nvdec_bound.err"
    done
  done
  for p in 1 16; do
    loops=$([ $p = 1 ] && echo 5 || echo 2)
    for r in 1 2 3; do
      timeout 90 python3 $B/opencv_decode_baseline.py "$f" "$p" "$loops" >> "$L/opencv_cpu.jsonl" 2>> "$L/opencv_cpu.err"
    done
  done
done
# NVDEC sources in a pipeline: decode (nv12 1920x1080, host frames: converted on the GPU, copied to pinned memory)
# -> null sink, 16 sources on one file (symlinks), H.264.
mkdir -p /tmp/nvsrc
uris=""
for i in $(seq 1 16); do ln -sf "$PWD/$B/media/bench_1080p.h264" /tmp/nvsrc/s$i.h264; uris="$uris${uris:+, }/tmp/nvsrc/s$i.h264"; done
cat > /tmp/nvdec16.yaml <<YAML
name: nvdec16
device: cuda
batch_size: 32
stages:
  - kind: decode
    decoder: gpu
    width: 1920
    height: 1080
    format: nv12
    uri: [$uris]
  - kind: sink
    type: null
YAML
for r in 1 2 3; do
  s=$(date +%s.%N)
  timeout 90 $B/run bin/sluiced run /tmp/nvdec16.yaml > "$L/pipeline16_$r.log" 2>&1
  rc=$?; echo "rc=$rc seconds=$(echo "$s $(date +%s.%N)" | awk '{print $2 - $1}')" >> "$L/pipeline16_$r.log"
done
tar -C "$OUT" -czf "$OUT/logs.tgz" logs

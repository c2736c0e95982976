#!/usr/bin/env bash
# run-density-gpu.sh (from the checkout's root, on a GPU host, with the bundle in .gpu: bench/README.md): the
# density table of issue 29 part 8 in one run, logs in $OUT/density-gpu.tgz (default OUT=/tmp/out):
#   - N simulated RTSP cameras (1080p30 H.264 from .gpu/cam1080.h264, RTP over TCP) -> NVDEC -> the
#     YOLOv8-s-shaped detector f16 -> NMS -> track -> JSON lines, for N in DETECT_N (default "32 64 96 128");
#   - the same cameras -> ResNet-50 f16 -> top-5, for N in CLASSIFY_N (default "32 64 128");
#   - track_bench (typical and crowded scenes).
# Each run lasts DENSITY_S seconds (default 20; the first 5 are warm-up and not in the window).
set -u
O=${OUT:-/tmp/out}; L=$O/density-gpu; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$L/gpu.txt"; nproc >>"$L/gpu.txt"
cat "$L/gpu.txt"
S=${DENSITY_S:-20}
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$models" 2>&1 | tee "$L/models.log"
density() {  # NAME N MODEL HEAD
  timeout $((S + 60)) bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$2" "$S" \
    "$L/$1" tcp gpu "$3" "$4" 2>&1 | grep -v "^  dropped" | sed "s/^/$1: /"
}
nvidia-smi dmon -s u -d 1 >"$L/dmon.txt" 2>&1 & DMON=$!
if [ -s "$models/yolov8s-like.onnx" ]; then
  for n in ${DETECT_N:-32 64 96 128}; do density "detect$n" "$n" "$models/yolov8s-like.onnx" detect; done
fi
if [ -s "$models/resnet50.onnx" ]; then
  for n in ${CLASSIFY_N:-32 64 128}; do density "resnet$n" "$n" "$models/resnet50.onnx" classify; done
fi
kill $DMON
timeout 60 .gpu/run bin/track_bench --sources 64 --frames 100 --repeats 3 --threads 1,8,16 >"$L/track_bench.txt" 2>&1
timeout 60 .gpu/run bin/track_bench --sources 64 --frames 50 --repeats 3 --threads 1,8,16 --crowd >"$L/track_bench_crowd.txt" 2>&1
tail -q -n 5 "$L/track_bench.txt" "$L/track_bench_crowd.txt"
rm -rf "$models"
tar czf "$O/density-gpu.tgz" -C "$O" density-gpu && rm -rf "$L"

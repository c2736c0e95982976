#!/usr/bin/env bash
# run-live-gpu.sh (from the checkout's root, on a GPU host, with the bundle in .gpu: bench/README.md): the live
# path's checks in one run, logs in $OUT/live-gpu.tgz (default OUT=/tmp/out):
#   - the NVDEC stream reader's GPU tests;
#   - 4 simulated RTSP cameras (tools/camsim.py, 1080p H.264 from .gpu/cam1080.h264) over TCP and UDP on NVDEC,
#     and over TCP on libavcodec, through bench/live_density.sh (fps per camera, capture-to-sink latency, CPU);
#   - bench/live_decode.sh: where paced, looping NVDEC sources spend the decode stage's time (issue 29 part 4);
#   - the density run at 32 and 64 cameras without a model, and the NVDEC bound (sluice_nvdec_bench);
#   - track_bench (typical and crowded scenes, 1/8/16 threads);
#   - with LIVE_DETECT=1 and a CUDA PyTorch on the host: the YOLOv8-s-shaped detector (bench/yolov8s_like.py)
#     + track at 32 cameras (about 100 s more; bench/run-density-gpu.sh runs the whole density table).
# Each step has its own time limit, so one that hangs costs only its own share. Shorter runs: RTSP_S (seconds of
# each 4-camera run, default 10), DENSITY_S (each density run, 15), DECODE_BATCHES (live_decode's, 120).
set -u
O=${OUT:-/tmp/out}; L=$O/live-gpu; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$L/gpu.txt"; nproc >>"$L/gpu.txt"
cat "$L/gpu.txt"
timeout 90 .gpu/run bin/sluice_gpu_tests "[stream],[timer]" >"$L/gpu_stream_tests.log" 2>&1
echo "gpu stream+timer tests: rc $?"; tail -3 "$L/gpu_stream_tests.log"
density() {  # NAME N SECONDS TRANSPORT DECODER [MODEL]
  timeout $(($3 + 40)) bash bench/live_density.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$2" "$3" "$L/$1" "$4" "$5" ${6:-} 2>&1 |
    sed "s/^/$1: /"
}
density rtsp4-tcp-nvdec 4 "${RTSP_S:-10}" tcp gpu
density rtsp4-udp-nvdec 4 "${RTSP_S:-10}" udp gpu
density rtsp4-tcp-cpu 4 "${RTSP_S:-10}" tcp cpu
nvidia-smi dmon -s u -d 1 >"$L/dmon.txt" 2>&1 & DMON=$!
timeout 150 bash bench/live_decode.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$L/decode" 32 "${DECODE_BATCHES:-120}" 2>&1 | tee "$L/live_decode.txt"
density density32 32 "${DENSITY_S:-15}" tcp gpu
density density64 64 "${DENSITY_S:-15}" tcp gpu
kill $DMON
timeout 60 .gpu/run bin/sluice_nvdec_bench .gpu/cam1080.h264 32 2 nv12 >"$L/nvdec_bench32.txt" 2>&1; tail -1 "$L/nvdec_bench32.txt"
timeout 60 .gpu/run bin/track_bench --sources 64 --frames 100 --repeats 3 --threads 1,8,16 >"$L/track_bench.txt" 2>&1
timeout 60 .gpu/run bin/track_bench --sources 64 --frames 50 --repeats 3 --threads 1,8,16 --crowd >"$L/track_bench_crowd.txt" 2>&1
tail -q -n 5 "$L/track_bench.txt" "$L/track_bench_crowd.txt"

if [ "${LIVE_DETECT:-0}" = 1 ]; then
  models=$(mktemp -d)
  bash bench/prepare_live_models.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 "$models" 2>&1 | tee "$L/model.log"
  [ -s "$models/yolov8s-like.onnx" ] && density detect32 32 25 tcp gpu "$models/yolov8s-like.onnx"
  rm -rf "$models"
fi
tar czf "$O/live-gpu.tgz" -C "$O" live-gpu && rm -rf "$L"

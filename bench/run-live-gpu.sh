#!/usr/bin/env bash
# run-live-gpu.sh (from the checkout's root, on a GPU host, with the bundle in .gpu: bench/README.md): the live
# path's checks in one run, logs under $OUT (default /tmp/out): the NVDEC/nvJPEG/container GPU tests (the NVDEC
# stream reader's included), track_bench (typical and crowded scenes, 1/8/16 threads), 4 simulated RTSP cameras
# (tools/camsim.py, 1080p H.264 from .gpu/cam1080.h264) into sluiced over TCP and UDP with capture-to-sink
# latency, the NVDEC bound at 32 sources (sluice_nvdec_bench), and bench/live_decode.sh: where paced, looping
# NVDEC sources spend the decode stage's time (issue 29 part 4), with nvidia-smi dmon beside it.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O/logs
L=$O/logs
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $L/gpu.txt; nproc >> $L/gpu.txt
( time .gpu/run bin/sluice_gpu_tests "[nvdec],[nvjpeg],[container]" ) > $L/gpu_tests.log 2>&1
tail -5 $L/gpu_tests.log
.gpu/run bin/track_bench --sources 64 --frames 100 --repeats 3 --threads 1,8,16 > $L/track_bench.txt 2>&1; tail -6 $L/track_bench.txt
.gpu/run bin/track_bench --sources 64 --frames 50 --repeats 3 --threads 1,8,16 --crowd > $L/track_bench_crowd.txt 2>&1; tail -6 $L/track_bench_crowd.txt
python3 tools/camsim.py .gpu/cam1080.h264 --streams 4 --port 8554 --ready-file /tmp/camsim.ready > $L/camsim.log 2>&1 &
CS=$!
for i in $(seq 50); do [ -f /tmp/camsim.ready ] && break; sleep 0.2; done
for tr in tcp udp; do
cat > /tmp/rtsp-$tr.yaml <<Y
name: rtsp-$tr
device: cuda
batch_size: 4
batch_timeout_ms: 15
stages:
  - kind: decode
    uri: [rtsp://127.0.0.1:8554/cam0, rtsp://127.0.0.1:8554/cam1, rtsp://127.0.0.1:8554/cam2, rtsp://127.0.0.1:8554/cam3]
    decoder: gpu
    rtsp_transport: $tr
    format: nv12
    width: 1920
    height: 1080
  - kind: upload
  - kind: preprocess
    width: 640
    height: 640
    dtype: f16
  - kind: download
  - kind: sink
    type: jsonl
    path: /tmp/rtsp-$tr.jsonl
Y
timeout -s INT 12 .gpu/run bin/sluiced run /tmp/rtsp-$tr.yaml --no-progress > $L/rtsp-$tr.log 2>&1
echo "rtsp $tr: rc $? records $(wc -l < /tmp/rtsp-$tr.jsonl)"; grep -iE 'NVDEC|decoding on the CPU|delivered|failed' $L/rtsp-$tr.log | head -6
python3 - /tmp/rtsp-$tr.jsonl <<'P' | tee -a $L/rtsp-$tr.log
import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
lat=sorted(x.get('latency_ms',0) for x in r)
if lat: print('latency_ms p50 %.1f p99 %.1f max %.1f n %d'%(lat[len(lat)//2],lat[int(len(lat)*.99)],lat[-1],len(lat)))
P
done
kill $CS
.gpu/run bin/sluice_nvdec_bench .gpu/cam1080.h264 32 2 nv12 > $L/nvdec_bench32.txt 2>&1; tail -3 $L/nvdec_bench32.txt
nvidia-smi dmon -s u -d 1 > $L/dmon.txt 2>&1 & DMON=$!
bash bench/live_decode.sh "$(pwd)/.gpu/run bin/sluiced" .gpu/cam1080.h264 $O/live 32 120 2>&1 | tee $L/live.txt
kill $DMON
tar czf $O/live.tgz -C $O live && rm -rf $O/live
tar czf $O/logs.tgz -C $O logs

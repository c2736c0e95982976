#!/usr/bin/env bash
# One device call (issue 12): the GPU tests, then compressed 1080p H.264 files -> 224x224 f16 -> ResNet-50 f16 ->
# top-5 -> JSON lines, side by side: the NVDEC bound (decode only), sluice with NVDEC frames in device memory
# (frame_memory: device), sluice with NVDEC frames through pinned host memory (frame_memory: pinned, the path
# before this change), sluice decoding straight to 224x224 on the GPU, and the hand-written loop a user would
# write (bench/video_chain_baseline.py: cv2.VideoCapture in 16 processes + PyTorch ResNet-50 f16).
# Run from the checkout root on the GPU host with the bundle in .gpu and the clip in .gpu/media; logs to $OUT.
set -u
B=.gpu
L=$OUT/logs
mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$L/gpu.txt"
nproc >> "$L/gpu.txt"
TIMEFORMAT='wall %R user %U sys %S'
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  { time SLUICE_SOURCE_DIR=$PWD timeout 420 $B/run bin/sluice_gpu_tests ${TEST_TAGS:-} --durations yes; } > "$L/gpu_tests.log" 2>&1
  echo "gpu_tests rc=$?" >> "$L/gpu_tests.log"
  tail -3 "$L/gpu_tests.log"
fi
python3 bench/torch_infer.py --export /tmp/r50.onnx > "$L/export.log" 2>&1 || echo "export failed" >> "$L/export.log"
clip=$PWD/$B/media/bench_1080p.h264
mkdir -p /tmp/clips
for i in $(seq -w 1 96); do ln -sf "$clip" /tmp/clips/c$i.h264; done
chain() {  # NAME MEMORY WIDTH HEIGHT FORMAT
  cat > "/tmp/$1.yaml" <<YAML
name: $1
device: cuda
batch_size: 32
batch_timeout_ms: 100
stages:
  - kind: decode
    uri: [/tmp/clips]
    resume: false
    decode_threads: 16
    decoder: gpu
    frame_memory: $2
    width: $3
    height: $4
    format: $5
  - kind: upload
  - kind: preprocess
    width: 224
    height: 224
    order: rgb
    layout: nhwc
    dtype: f16
  - kind: infer
    model: /tmp/r50.onnx
    precision: f16
    output: classes
    top_k: 5
  - kind: download
  - kind: sink
    type: jsonl
    path: /tmp/$1.jsonl
YAML
}
chain device1080 device 1920 1080 nv12
chain pinned1080 pinned 1920 1080 nv12
chain device224 device 224 224 bgr8
for r in 1 2 3; do
  for sessions in stream reopen pool; do
    [ "$r" = 3 ] && continue
    { time timeout 60 $B/run bin/sluice_nvdec_bench "$clip" 16 6 nv12 $sessions; } >> "$L/nvdec_bound.log" 2>&1
  done
  for c in device1080 pinned1080 device224; do
    [ "$r" = 3 ] && [ "$c" != device1080 ] && continue
    rm -f /tmp/$c.jsonl
    { time timeout 120 $B/run bin/sluiced bench /tmp/$c.yaml --pipelined --warmup 20 --json "$L/$c-$r.json"; } > "$L/$c-$r.log" 2>&1
    echo "rc=$? records=$(wc -l < /tmp/$c.jsonl)" >> "$L/$c-$r.log"
    grep -E "^pipelined:|^wall|^rc" "$L/$c-$r.log" | sed "s/^/$c $r: /"
  done
  if [ "$r" -le 2 ]; then
    timeout 100 python3 bench/video_chain_baseline.py /tmp/py.jsonl 16 /tmp/clips/c[0-3]*.h264 >> "$L/python16.jsonl" 2>> "$L/python16.err"
    tail -1 "$L/python16.jsonl"
  fi
done
grep -h '"fps"' "$L/nvdec_bound.log" | cut -c1-220
tar -C "$OUT" -czf "$OUT/logs.tgz" logs

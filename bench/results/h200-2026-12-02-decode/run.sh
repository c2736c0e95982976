#!/usr/bin/env bash
# One device call (issue 12, 2026-12-02): every GPU test, then a folder of 1080p JPEGs -> 224x224 f16 ->
# ResNet-50 f16 -> top-5 -> JSON lines, side by side: sluice with nvJPEG (frames in device memory, decoded straight
# to 224x224 or to 1920x1080 and resized by preprocess) and the loop a user would write
# (bench/jpeg_chain_baseline.py: torchvision.io.decode_jpeg(device="cuda") in batches of 32 + PyTorch ResNet-50
# f16). Then the video chain from 96 links to one 1080p H.264 clip with decoder: gpu and decoder: cpu in the same
# binary. Bundle in .gpu, clip in .gpu/media; the 24 distinct 1080p JPEGs (gradients, shapes and noise, quality
# 90, ~0.3-0.5 MB each) are made on the GPU host with OpenCV, since the bundle with FFmpeg leaves no room to carry
# them. REPS (default 3) repeats the JPEG rows; TEST_TAGS narrows the GPU tests.
set -u
B=.gpu
L=$OUT/logs
mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$L/gpu.txt"
TIMEFORMAT='wall %R user %U sys %S'
{ time SLUICE_SOURCE_DIR=$PWD timeout 300 $B/run bin/sluice_gpu_tests ${TEST_TAGS:-} --durations yes; } > "$L/gpu_tests.log" 2>&1
echo "gpu_tests rc=$?" >> "$L/gpu_tests.log"
grep -E "nvjpeg .* via|test cases|FAILED|WARN|identical" "$L/gpu_tests.log" | head -30
python3 bench/torch_infer.py --export /tmp/r50.onnx > "$L/export.log" 2>&1 || echo "export failed" >> "$L/export.log"
mkdir -p /tmp/jpegs /tmp/jpeg24
python3 - <<'PY'
import cv2, numpy as np
rng = np.random.default_rng(1)
h, w = 1080, 1920
y, x = np.mgrid[0:h, 0:w]
for i in range(24):
    img = np.stack([(x * 255 // w + 10 * i) % 256, (y * 255 // h + 7 * i) % 256, ((x + y) * 255 // (w + h)) % 256], -1)
    img = img.astype(np.float32)
    for _ in range(12):
        cx, cy, r = rng.integers(0, w), rng.integers(0, h), rng.integers(20, 200)
        cv2.circle(img, (int(cx), int(cy)), int(r), [float(v) for v in rng.integers(0, 256, 3)], -1)
    img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    cv2.putText(img, "frame %02d" % i, (80, 200), cv2.FONT_HERSHEY_SIMPLEX, 5, (255, 255, 255), 12)
    cv2.imwrite("/tmp/jpeg24/img%02d.jpg" % i, img, [cv2.IMWRITE_JPEG_QUALITY, 90])
PY
du -sh /tmp/jpeg24
imgs=(/tmp/jpeg24/*.jpg)
for i in $(seq 0 3071); do ln -sf "${imgs[$((i % ${#imgs[@]}))]}" "/tmp/jpegs/i$(printf %04d "$i").jpg"; done
chain() {  # NAME WIDTH HEIGHT URI
  cat > "/tmp/$1.yaml" <<YAML
name: $1
device: cuda
batch_size: 32
batch_timeout_ms: 100
stages:
  - kind: decode
    uri: [$4]
    resume: false
    decode_threads: 16
    decoder: gpu
    width: $2
    height: $3
    format: bgr8
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
chain jpeg224 224 224 /tmp/jpegs
chain jpeg1080 1920 1080 /tmp/jpegs
mkdir -p /tmp/clips
for i in $(seq -w 1 96); do ln -sf "$PWD/$B/media/bench_1080p.h264" /tmp/clips/c$i.h264; done
chain video1080 1920 1080 /tmp/clips
sed -i 's/format: bgr8/format: nv12/' /tmp/video1080.yaml
for r in $(seq 1 "${REPS:-3}"); do
  for c in jpeg224 jpeg1080; do
    rm -f /tmp/$c.jsonl
    { time timeout 120 $B/run bin/sluiced bench /tmp/$c.yaml --pipelined --warmup 20 --json "$L/$c-$r.json"; } > "$L/$c-$r.log" 2>&1
    echo "rc=$? records=$(wc -l < /tmp/$c.jsonl)" >> "$L/$c-$r.log"
    grep -E "^pipelined:|^wall|^rc" "$L/$c-$r.log" | sed "s/^/$c $r: /"
  done
  timeout 120 python3 bench/jpeg_chain_baseline.py /tmp/py.jsonl /tmp/jpegs/*.jpg >> "$L/torchvision.jsonl" 2>> "$L/torchvision.err"
  tail -1 "$L/torchvision.jsonl"
done
# The video chain with each decoder in the same binary: NVDEC (frames stay on the GPU) and libavcodec on the CPU
# (16 files at once, one codec thread each: one per core of this host).
sed -e 's/decoder: gpu/decoder: cpu/' -e 's/decode_threads: 16/decode_threads: 16\n    codec_threads: 1/' \
  /tmp/video1080.yaml > /tmp/video1080cpu.yaml
for r in 1 2; do
  [ -f "$B/media/bench_1080p.h264" ] || { echo "no clip in $B/media: video chain skipped"; break; }
  for c in video1080 video1080cpu; do
    rm -f /tmp/$c.jsonl
    { time timeout 120 $B/run bin/sluiced bench /tmp/$c.yaml --pipelined --warmup 20 --json "$L/$c-$r.json"; } > "$L/$c-$r.log" 2>&1
    echo "rc=$? records=$(wc -l < /tmp/$c.jsonl)" >> "$L/$c-$r.log"
    grep -E "^pipelined:|^wall|^rc|warn|error" "$L/$c-$r.log" | cut -c1-300 | sed "s/^/$c $r: /"
  done
done
$B/run bin/sluiced check /tmp/jpeg224.yaml > "$L/check.log" 2>&1; tail -4 "$L/check.log"
tar -C "$OUT" -czf "$OUT/logs.tgz" logs

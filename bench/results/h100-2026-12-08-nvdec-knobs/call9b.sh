#!/usr/bin/env bash
# Device call 9b (session 22): RT-DETR (transformers' RTDetrForObjectDetection, random weights) exported on the
# host and run by sluiced's engine against PyTorch; the NVDEC knobs that call 8 found paying, combined, at 96
# paced sources; density at 32 and 96 cameras with the context lock off (the new default).
# Bundle: sluiced and sluice_nvdec_bench in .gpu, the clip in .gpu/cam1080.h264 (bench/README.md).
set -u
O=${OUT:-/tmp/out}; L=$O/c9b; mkdir -p "$L"
trap 'cd "$O" && tar czf c9b.tgz c9b && rm -rf c9b' EXIT TERM
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
S="$(pwd)/.gpu/run bin/sluiced"
# In order of value, as device time may run out: the knobs, density, RT-DETR.
# NVDEC knobs at 96 paced 1080p30 sources (display delay 0, whole access units); the lock is off by default now
B() { local tag=$1; shift; timeout 40 .gpu/run bin/sluice_nvdec_bench .gpu/cam1080.h264 "$@" >"$L/m-$tag.txt" 2>&1; echo "$tag $(head -c 330 "$L/m-$tag.txt")"; }
B 96-lock1 96 5 nv12 stream 0 30 au lock=1
B 96-nolock 96 5 nv12 stream 0 30 au
B 96-nolock-feeders16 96 5 nv12 stream 0 30 au feeders=16
B 96-nolock-feeders24 96 5 nv12 stream 0 30 au feeders=24
B 128-nolock-feeders16 128 5 nv12 stream 0 30 au feeders=16
models=$(mktemp -d)
bash bench/prepare_live_models.sh "$S" .gpu/cam1080.h264 "$models" >"$L/models.log" 2>&1
for n in 96 32; do
  # where the source threads wait (at 32 cameras call 8b's sources ran 25 fps of the simulators' 30 while their
  # threads used 0.05 cores each: waiting, not working)
  THREAD_SAMPLE=$([ $n = 32 ] && echo 5) LATENCY_BUDGET_MS=100 timeout 60 bash bench/live_density.sh "$S" .gpu/cam1080.h264 $n 15 \
    "$L/detect$n" tcp gpu "$models/yolov8s-like.onnx" detect 2>&1 | head -2
  sed -n '/^stage /,/^frames:/p' "$L/detect$n/run.log"; [ -f "$L/detect$n/threads.txt" ] && head -40 "$L/detect$n/threads.txt"
done
R=/tmp/rtdetr; mkdir -p $R
timeout 120 python3 bench/export_rtdetr.py $R --size small >"$L/export.log" 2>&1; echo "export small rc=$?"
timeout 150 python3 bench/export_rtdetr.py $R --size default >>"$L/export.log" 2>&1; echo "export default rc=$?"
grep -v Warn "$L/export.log" | grep -v "^  " | tail -4; cp $R/*.json "$L/" 2>/dev/null
for dev in cpu cuda; do
  timeout 120 $S model $R/rtdetr-small.onnx --device $dev --input $R/rtdetr-small-input.npy \
    --output $R/small-$dev-logits.npy --output $R/small-$dev-boxes.npy >"$L/small-$dev.log" 2>&1; echo "small $dev rc=$?"
  tail -3 "$L/small-$dev.log"
done
python3 - $R <<'PY' 2>&1 | tee "$L/small-compare.txt"
import sys, numpy as np, os
r = sys.argv[1]
want = {k: np.load(f"{r}/rtdetr-small-{k}.npy") for k in ("logits", "boxes")}
for dev in ("cpu", "cuda"):
    for k in ("logits", "boxes"):
        p = f"{r}/small-{dev}-{k}.npy"
        if not os.path.exists(p): print(dev, k, "missing"); continue
        got = np.load(p); w = want[k]
        print(dev, k, got.shape, "max abs diff %.3g" % float(np.abs(got - w).max()), "rel %.3g" % float(np.abs(got - w).max() / (np.abs(w).max() + 1e-12)))
PY
timeout 150 $S model $R/rtdetr-default.onnx --device cuda --precision f16 --bench --iterations 30 >"$L/default-f16.log" 2>&1
echo "default f16 rc=$?"; tail -8 "$L/default-f16.log"
# the same model in PyTorch, eager f16 on the GPU, batch 1 (what a user would run instead), same call
timeout 120 python3 - <<'PY' 2>&1 | grep -v Warn | tail -3 | tee "$L/torch-default-f16.txt"
import sys, time, statistics, torch
sys.path.insert(0, "bench")
from export_rtdetr import build
m = build("default").half().cuda()
x = torch.rand(1, 3, 640, 640, device="cuda", dtype=torch.half)
with torch.no_grad():
    for _ in range(10): m(pixel_values=x)
    ts = []
    for _ in range(50):
        torch.cuda.synchronize(); t = time.perf_counter(); m(pixel_values=x); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
print("torch eager f16 batch 1: median %.2f ms, min %.2f, max %.2f" % (statistics.median(ts), min(ts), max(ts)))
PY

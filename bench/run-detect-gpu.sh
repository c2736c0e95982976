#!/usr/bin/env bash
# run-detect-gpu.sh OUT_DIR [REPEATS]: the detection chain (issue 14 part 8) on a GPU host, sluice and the PyTorch
# loop side by side in one run (bundle first: bench/README.md). 1080p frames -> 640x640 letterbox -> a YOLOv8-s-shaped
# network f16 -> decode + NMS -> ByteTrack -> JSON lines, batch 16 and 32, alternating sluice and the loop.
set -uo pipefail
out=${1:?usage: run-detect-gpu.sh OUT_DIR [REPEATS]}; repeats=${2:-2}
mkdir -p "$out" bench/models
py=
for cand in python3 /opt/*/.venv/bin/python3; do
  "$cand" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && { py=$cand; break; }
done
[ -n "$py" ] || { echo "run-detect-gpu: no python with CUDA torch found" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt"
bench=config/pipelines/bench-1080p-yolov8s.yaml
work=$(mktemp -d)

# The benchmark's frames as sluice renders them (animate: false: every slot holds the same picture), for the
# loop's ring and for calibrating the network's BatchNorm and class bias.
sed -e 's/frames: 6400/frames: 16/' -e 's/batch_size: 32/batch_size: 16/' -e 's/device: cuda/device: cpu/' \
    -e '/- kind: upload/,$d' "$bench" >"$work/dump.yaml"
printf '  - kind: sink\n    type: npy\n    path: %s/frames\n' "$work" >>"$work/dump.yaml"
.gpu/run bin/sluiced run "$work/dump.yaml" >"$out/dump.log" 2>&1 || { tail "$out/dump.log"; exit 1; }
"$py" -c "import numpy as np, glob, sys; np.save(sys.argv[1], np.concatenate([np.load(f) for f in sorted(glob.glob(sys.argv[2] + '/batch-*.npy'))]))" \
  "$work/frames.npy" "$work/frames" || exit 1
"$py" bench/yolov8s_like.py bench/models/yolov8s-like.onnx "$work/frames.npy" --state "$work/yolov8s-like.pt" \
  2>&1 | grep -v Warning | tail -2 | tee "$out/model.log"

# Post-processing share: the infer stage alone (serial) with detections out vs the raw head out.
sed -e 's/output: detections/output: tensor/' -e '/detect:/,/max_detections/d' -e '/- kind: track/d' \
    -e 's/type: jsonl/type: null/' "$bench" >"$work/raw-head.yaml"
sed -i "s#\.\./\.\./bench/models#$PWD/bench/models#" "$work/raw-head.yaml"
status=0
for b in 32 16; do
  sed -e "s/batch_size: 32/batch_size: $b/" "$bench" >"$work/bench-$b.yaml"
  sed -i "s#\.\./\.\./bench/models#$PWD/bench/models#" "$work/bench-$b.yaml"
  for r in $(seq 1 "$repeats"); do
    .gpu/run bin/sluiced bench "$work/bench-$b.yaml" --batches $((3200 / b)) --warmup 20 --json "$out/sluice-b$b-$r.json" \
      >"$out/sluice-b$b-$r.log" 2>&1 || status=1
    grep -E "fps|bound" "$out/sluice-b$b-$r.log" | tail -4
    "$py" bench/detect_loop.py "$work/yolov8s-like.pt" "$work/frames.npy" "$work/loop.jsonl" --batch $b \
      --batches $((3200 / b)) --repeats 1 --json "$out/loop-b$b-$r.json" 2>>"$out/loop-b$b.log" | tail -1 || status=1
    "$py" bench/detect_loop.py "$work/yolov8s-like.pt" "$work/frames.npy" "$work/loop-notrack.jsonl" --batch $b \
      --batches $((3200 / b)) --repeats 1 --no-track --json "$out/loop-notrack-b$b-$r.json" 2>>"$out/loop-b$b.log" | tail -1 || status=1
  done
done
.gpu/run bin/sluiced bench "$work/raw-head.yaml" --batches 100 --warmup 10 --serial --json "$out/sluice-rawhead-b32.json" \
  >"$out/sluice-rawhead-b32.log" 2>&1 || status=1
head -c 2000 /tmp/sluice-bench-yolov8s.jsonl >"$out/sluice-records-head.jsonl"
head -c 2000 "$work/loop.jsonl" >"$out/loop-records-head.jsonl"
rm -rf "$work"
exit $status

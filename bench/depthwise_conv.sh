#!/usr/bin/env bash
# depthwise_conv.sh OUT_DIR [BATCH]: on a GPU host (bundle first: see bench/README.md), one-node depthwise Conv
# models (ConvNeXt-T's four 7x7 stages, a MobileNet 3x3 and a stride-2 one) timed with sluice's depthwise kernel
# allowed (measured against cuDNN, the faster kept) and with cuDNN only, f16 and f32, with per-layer profiles.
# The models are written by bench/depthwise_models.py (numpy + onnx; run it here first if the GPU host has no onnx).
set -uo pipefail
out=${1:?usage: depthwise_conv.sh OUT_DIR [BATCH]}; batch=${2:-64}
mkdir -p "$out"
[ -f "$out/dw_c96_56_k7.onnx" ] || python3 "$(dirname "$0")/depthwise_models.py" "$out" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt"
for model in "$out"/dw_*.onnx; do
  name=$(basename "$model" .onnx)
  for precision in f16 f32; do
    .gpu/run bin/sluiced model "$model" --device cuda --batch "$batch" --precision "$precision" --bench \
      --profile --iterations 100 >"$out/$name.$precision.own.log" 2>&1
    .gpu/run bin/sluiced model "$model" --device cuda --batch "$batch" --precision "$precision" --bench \
      --profile --iterations 100 --conv-modes fused --conv-modes separate >"$out/$name.$precision.cudnn.log" 2>&1
    for way in own cudnn; do
      echo "== $name $precision $way"
      grep -E "median|Conv" "$out/$name.$precision.$way.log" | head -6
    done
  done
done

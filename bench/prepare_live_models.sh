#!/usr/bin/env bash
# prepare_live_models.sh SLUICE_CMD CLIP DIR: the live benchmarks' models, on a host with a CUDA PyTorch:
#   DIR/yolov8s-like.onnx  bench/yolov8s_like.py calibrated on 16 frames of CLIP (decoded by sluiced);
#   DIR/resnet50.onnx      bench/resnet50_reference.py's ResNet-50 (random weights, seeded).
# SLUICE_CMD runs sluiced (".gpu/run bin/sluiced"). Prints the Python used, or exits 1 when none has CUDA.
set -u
sluiced=${1:?usage: prepare_live_models.sh SLUICE_CMD CLIP DIR}; clip=$(readlink -f "${2:?clip}"); dir=${3:?dir}
mkdir -p "$dir"
py=
for cand in python3 /opt/*/.venv/bin/python3; do
  "$cand" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && { py=$cand; break; }
done
[ -n "$py" ] || { echo "prepare_live_models: no Python with a CUDA PyTorch"; exit 1; }
echo "prepare_live_models: $py"
# Frames for the detector's calibration: what the camera clip decodes to (1080p BGR), 16 of them.
cat >"$dir/dump.yaml" <<YAML
name: dump
device: cpu
batch_size: 16
stages:
  - kind: decode
    uri: $clip
    format: bgr8
    width: 1920
    height: 1080
  - kind: sink
    type: npy
    path: $dir/frames
YAML
timeout 60 $sluiced run "$dir/dump.yaml" --no-progress >"$dir/dump.log" 2>&1
timeout 30 "$py" -c "import numpy as np, glob, sys; np.save(sys.argv[1], np.concatenate([np.load(f) for f in sorted(glob.glob(sys.argv[2] + '/batch-*.npy'))])[:16])" \
  "$dir/frames.npy" "$dir/frames" >>"$dir/dump.log" 2>&1
here=$(cd "$(dirname "$0")" && pwd)
timeout 120 "$py" "$here/yolov8s_like.py" "$dir/yolov8s-like.onnx" "$dir/frames.npy" 2>&1 | grep -v Warning | tail -1
timeout 120 "$py" "$here/resnet50_reference.py" "$dir" 1 2>&1 | grep -v Warning | tail -1
ls "$dir"/*.onnx

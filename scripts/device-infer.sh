#!/usr/bin/env bash
# device-infer.sh OUT_DIR: on a GPU host, the inference checks and benchmarks, sluice and PyTorch side by side in
# one run (bundle first: bench/README.md). Needs python3 with torch + torchvision there (the references).
#   correctness: GPU tests (ops and models vs the CPU backend and PyTorch), ResNet-50 vs PyTorch f32/f16,
#                the default pipeline on the GPU
#   speed:       ResNet-50 f16 batch 256 and batch 1 (sluiced model --bench, alternating with bench/torch_infer.py),
#                a per-layer profile, and the whole chain (bench-1080p-resnet50.yaml vs torch_recipe.py --model)
set -uo pipefail
out=${1:?usage: device-infer.sh OUT_DIR}; repeats=${2:-3}
mkdir -p "$out" bench/models
export XDG_CACHE_HOME=/tmp/sluice-cache  # measured convolution algorithms, shared by the runs below
status=0
step_tail=${TAIL:-8}
. "$(dirname "$0")/device-step.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
step reference python3 tests/nn/export_reference.py /tmp/nn-reference
step r50-reference python3 bench/resnet50_reference.py bench/models 8
export SLUICE_NN_REFERENCE_DIR=/tmp/nn-reference
TAIL=30 step gpu-tests .gpu/run bin/sluice_gpu_tests --durations yes
model=bench/models/resnet50.onnx
for p in f32 f16; do
  step "r50-$p" .gpu/run bin/sluiced model $model --precision $p --input bench/models/resnet50.input.npy \
    --output "$out/r50-$p.npy"
  step "r50-$p-compare" python3 bench/compare_npy.py "$out/r50-$p.npy" bench/models/resnet50.output.npy \
    "$([ $p = f32 ] && echo 1e-3 || echo 1e-2)"
done
step default .gpu/run bin/sluiced run config/pipelines/default.yaml
for r in $(seq 1 "$repeats"); do  # alternated, so drift hits both alike
  step "sluice-b256-$r" .gpu/run bin/sluiced model $model --batch 256 --bench --iterations 30 --json "$out/sluice-b256-$r.json"
  step "torch-$r" python3 bench/torch_infer.py --json "$out/torch-$r.json"
done
step sluice-b1 .gpu/run bin/sluiced model $model --batch 1 --bench --iterations 300 --json "$out/sluice-b1.json"
TAIL=70 step profile-b256 .gpu/run bin/sluiced model $model --batch 256 --profile --iterations 10 --json "$out/profile-b256.json"
TAIL=16 step chain-sluice .gpu/run bin/sluiced bench config/pipelines/bench-1080p-resnet50.yaml --batches 150 --warmup 20 \
  --json "$out/chain-sluice.json"
TAIL=12 step chain-torch python3 bench/torch_recipe.py --model resnet50 --format bgr8 --batch 32 --streams 2 --repeats 3 \
  --batches 100 --jsonl /tmp/torch-chain.jsonl --json "$out/chain-torch.json"
exit $status

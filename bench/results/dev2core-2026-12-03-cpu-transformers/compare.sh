#!/bin/bash
# Alternating, per model: ONNX Runtime (bench/ort_node_bench.js, npm's onnxruntime-node), this tree's sluiced, and
# BEFORE (a sluiced of the tree before these changes), THREADS threads each (OMP_NUM_THREADS, ORT's intra-op
# threads), ROUNDS rounds, batch 8, medians of 5 runs after 1 warm-up; then sluice's outputs against ORT's.
# Models and inputs in D from bench/cpu_infer_baseline.py --export D --model M --batch 8.
#   D=/work/models BEFORE=/work/sluiced-before NODE_PATH=/work/ortnode/node_modules THREADS=1 ROUNDS=3 bash compare.sh
cd "$(dirname "$0")/../../.."
D=${D:-/work/models}
BEFORE=${BEFORE:-/work/sluiced-before}
for t in ${THREADS:-1 2}; do
for r in $(seq 1 ${ROUNDS:-2}); do
for m in vit_b_16 swin_t resnet50; do
  o=$(node bench/ort_node_bench.js $D/$m.onnx $D/$m.input.npy --threads $t --warmup 1 --iterations 5 --output /tmp/$m.ort.npy | grep -o '[0-9.]* ms per batch' | cut -d' ' -f1)
  n=$(OMP_NUM_THREADS=$t build/cpu/sluiced model $D/$m.onnx --batch 8 --device cpu --input $D/$m.input.npy --output /tmp/$m.sluice.npy --bench --warmup 1 --iterations 5 | grep '^cpu f32' | grep -o '[0-9.]* ms per batch' | cut -d' ' -f1)
  b=$(OMP_NUM_THREADS=$t $BEFORE model $D/$m.onnx --batch 8 --device cpu --input $D/$m.input.npy --bench --warmup 1 --iterations 5 | grep '^cpu f32' | grep -o '[0-9.]* ms per batch' | cut -d' ' -f1)
  echo "threads=$t round=$r $m ort=$o new=$n before=$b load=$(cut -d' ' -f1 /proc/loadavg)"
done; done; done
for m in vit_b_16 swin_t resnet50; do /usr/bin/python3 bench/compare_npy.py /tmp/$m.sluice.npy /tmp/$m.ort.npy 1e-4; done

#!/usr/bin/env bash
# Session 14, call 4: the CPU backend against ONNX Runtime 1.30 on the host's 16 cores, batch 8.
cd "$(dirname "$0")/.."
MODELS="vit_b_16 swin_t resnet50 mobilenet_v2" REPS=2 timeout 330 bash bench/results/h200-2026-12-02-cpu-infer/run.sh
mv $OUT/logs.tgz $OUT/cpu-default.tgz 2>/dev/null; rm -rf $OUT/logs
OMP_WAIT_POLICY=passive MODELS="vit_b_16 swin_t" REPS=1 timeout 200 bash bench/results/h200-2026-12-02-cpu-infer/run.sh
mv $OUT/logs.tgz $OUT/cpu-passive.tgz 2>/dev/null

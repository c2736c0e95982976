#!/usr/bin/env bash
# Session 15, call D: the attention GPU tests again (the bf16 products bound), then the CPU backend against
# ONNX Runtime 1.30 on the host's 16 cores (batch 8, alternating rounds; the move rewrites apply on the CPU too).
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
mkdir -p $OUT/logs
(cd /tmp && timeout 120 $R bin/sluice_gpu_tests "[attention]" > $OUT/logs/D-attention-tests.log 2>&1; echo "rc=$?" >> $OUT/logs/D-attention-tests.log)
tail -3 $OUT/logs/D-attention-tests.log
(cd $OUT && tar -czf attention.tgz logs && rm -rf logs)
MODELS="vit_b_16 swin_t resnet50 mobilenet_v2" REPS=3 timeout 420 bash .gpu/cpu-run.sh

#!/usr/bin/env bash
# Session 15, call F: the kernel tests after the test-helper merge, and issue 13's acceptance numbers for the
# models the move rewrites change (patch embeddings, attention layouts, shifted windows): CPU f32, CUDA f32/f16
# against PyTorch f32.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
mkdir -p $OUT/logs
(cd /tmp && timeout 100 $R bin/sluice_gpu_tests "[copy],[depthwise],[layer_norm]" > $OUT/logs/F-kernel-tests.log 2>&1; echo "rc=$?" >> $OUT/logs/F-kernel-tests.log)
tail -3 $OUT/logs/F-kernel-tests.log
timeout 230 python3 bench/model_acceptance.py $R /tmp/acc vit_b_16 swin_t convnext_tiny detr_encoder > $OUT/logs/F-acceptance.log 2>&1
echo "acceptance rc=$?"; cp /tmp/acc/acceptance.json $OUT/logs/F-acceptance.json 2>/dev/null; cut -c1-500 $OUT/logs/F-acceptance.log
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

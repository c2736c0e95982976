#!/usr/bin/env bash
# GPU tests again (stages linked), then sluice's CPU backend on ViT-B/16 and Swin-T against ONNX Runtime.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
mkdir -p $OUT/logs
python3 tests/detect/make_detect_reference.py /tmp/detref > $OUT/logs/detref.log 2>&1
export SLUICE_DETECT_REFERENCE_DIR=/tmp/detref SLUICE_SOURCE_DIR=$PWD
(cd /tmp && timeout 240 $R bin/sluice_gpu_tests "[classify_boxes],[detect],[tee],[pipeline],[infer],[nvdec],[nvjpeg],[container]" > $OUT/logs/gpu-tests.log 2>&1; echo "gpu tests rc=$?" >> $OUT/logs/gpu-tests.log)
tail -4 $OUT/logs/gpu-tests.log
mkdir -p $OUT/cpu
OUT=$OUT/cpu MODELS="vit_b_16 swin_t" REPS=3 timeout 330 bash bench/results/h200-2026-12-02-cpu-infer/run.sh
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

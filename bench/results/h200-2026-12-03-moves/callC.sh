#!/usr/bin/env bash
# Session 15, call C: all four helpers' and my changes merged: the whole GPU test executable, attention timings,
# ViT/Swin/ConvNeXt vs torch.compile (3 alternating rounds), profiles.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
python3 tests/detect/make_detect_reference.py /tmp/detref > $L/C-detref.log 2>&1
python3 tests/nn/export_reference.py /tmp/nnref > $L/C-nnref.log 2>&1; tail -1 $L/C-nnref.log
export SLUICE_DETECT_REFERENCE_DIR=/tmp/detref SLUICE_NN_REFERENCE_DIR=/tmp/nnref
(cd /tmp && timeout 300 $R bin/sluice_gpu_tests > $L/C-gpu-tests.log 2>&1; echo "gpu tests rc=$?" >> $L/C-gpu-tests.log)
grep -E "FAILED|failed|passed|rc=" $L/C-gpu-tests.log | tail -8
(cd /tmp && timeout 60 $R bin/sluice_gpu_tests "[attention_bench]" 2>&1 | grep -v "^\[" > $L/C-attention-bench.log)
ROUNDS=3 timeout 330 python3 bench/transformer_speed.py $R /tmp/xf 64 vit_b_16 swin_t convnext_tiny > $L/C-speed.log 2>&1; echo "speed rc=$?"
cp /tmp/xf/speed.json $L/C-speed.json 2>/dev/null; cat $L/C-speed.log | cut -c1-420
for m in vit_b_16 swin_t convnext_tiny; do
  timeout 60 $R bin/sluiced model /tmp/xf/$m.onnx --device cuda --precision f16 --batch 64 --profile > $L/C-$m-profile.log 2>&1
done
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

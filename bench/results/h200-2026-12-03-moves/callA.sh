#!/usr/bin/env bash
# Session 15, call A: patchify + collapse_moves on the H200: nn GPU tests, ViT/Swin/ConvNeXt vs torch.compile, profiles.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
python3 tests/nn/export_reference.py /tmp/nnref > $L/A-nnref.log 2>&1; tail -1 $L/A-nnref.log
export SLUICE_NN_REFERENCE_DIR=/tmp/nnref
(cd /tmp && timeout 200 $R bin/sluice_gpu_tests "[nn_cuda]" > $L/A-nn-tests.log 2>&1; echo "tests rc=$?" >> $L/A-nn-tests.log)
tail -3 $L/A-nn-tests.log
ROUNDS=2 timeout 300 python3 bench/transformer_speed.py $R /tmp/xf 64 vit_b_16 swin_t convnext_tiny > $L/A-speed.log 2>&1; echo "speed rc=$?"
cp /tmp/xf/speed.json $L/A-speed.json 2>/dev/null; cat $L/A-speed.log | cut -c1-400
for m in vit_b_16 swin_t convnext_tiny; do
  timeout 60 $R bin/sluiced model /tmp/xf/$m.onnx --device cuda --precision f16 --batch 64 --profile > $L/A-$m-profile.log 2>&1
done
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

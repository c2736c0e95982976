#!/usr/bin/env bash
# Session 15, call B: + LayerNorm in registers, packed Pad/remap, Concat reading Slices in place, sink_reshapes on the H200: nn GPU tests, ViT/Swin/ConvNeXt vs torch.compile, profiles.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
python3 tests/nn/export_reference.py /tmp/nnref > $L/B-nnref.log 2>&1; tail -1 $L/B-nnref.log
export SLUICE_NN_REFERENCE_DIR=/tmp/nnref
(cd /tmp && timeout 200 $R bin/sluice_gpu_tests "[nn_cuda],[layer_norm],[copy]" > $L/B-nn-tests.log 2>&1; echo "tests rc=$?" >> $L/B-nn-tests.log)
tail -3 $L/B-nn-tests.log
(cd /tmp && timeout 60 $R bin/sluice_gpu_tests "[copy_bench]" > $L/B-copy-bench.log 2>&1); grep -v "^\[" $L/B-copy-bench.log | tail -12
ROUNDS=2 timeout 300 python3 bench/transformer_speed.py $R /tmp/xf 64 vit_b_16 swin_t convnext_tiny > $L/B-speed.log 2>&1; echo "speed rc=$?"
cp /tmp/xf/speed.json $L/B-speed.json 2>/dev/null; cat $L/B-speed.log | cut -c1-400
for m in vit_b_16 swin_t convnext_tiny; do
  timeout 60 $R bin/sluiced model /tmp/xf/$m.onnx --device cuda --precision f16 --batch 64 --profile > $L/B-$m-profile.log 2>&1
done
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

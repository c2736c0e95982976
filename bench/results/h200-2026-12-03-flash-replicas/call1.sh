#!/usr/bin/env bash
# Session 14, call 1: flash attention tests + per-path timing, replicas on the GPU, ViT/Swin vs torch.compile.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/host.txt 2>&1
(cd /tmp && timeout 200 $R bin/sluice_gpu_tests "[attention]" > $L/attention-tests.log 2>&1; echo "attention tests rc=$?" >> $L/attention-tests.log)
tail -3 $L/attention-tests.log
(cd /tmp && timeout 100 $R bin/sluice_gpu_tests "[replicas]" > $L/replica-tests.log 2>&1; echo "replica tests rc=$?" >> $L/replica-tests.log)
tail -3 $L/replica-tests.log
(cd /tmp && timeout 100 $R bin/sluice_gpu_tests "[attention_bench]" > $L/attention-bench.log 2>&1; echo "rc=$?" >> $L/attention-bench.log)
grep -v "^\[" $L/attention-bench.log | tail -30
ROUNDS=2 timeout 260 python3 bench/transformer_speed.py $R /tmp/xf 64 vit_b_16 swin_t > $L/speed.log 2>&1; echo "speed rc=$?"
cp /tmp/xf/*.json $L/ 2>/dev/null; tail -12 $L/speed.log
timeout 60 $R bin/sluiced model /tmp/xf/vit_b_16.onnx --device cuda --precision f16 --batch 64 --profile > $L/vit-profile.log 2>&1
grep -iE "attention|total" $L/vit-profile.log | head -8
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

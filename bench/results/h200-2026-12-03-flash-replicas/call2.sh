#!/usr/bin/env bash
# Session 14, call 2: attention (with packed q/k/v views) tests, ViT/Swin vs torch.compile, replicas on one GPU
# (1080p -> ResNet-50 f16 -> JSON: gpus [0] vs [0, 0], alternating).
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
(cd /tmp && timeout 200 $R bin/sluice_gpu_tests "[attention],[replicas]" > $L/2-attention-replica-tests.log 2>&1; echo "tests rc=$?" >> $L/2-attention-replica-tests.log)
tail -3 $L/2-attention-replica-tests.log
(cd /tmp && timeout 60 $R bin/sluice_gpu_tests "[attention_bench]" 2>&1 | grep -v "^\[" > $L/2-attention-bench.log)
ROUNDS=2 timeout 240 python3 bench/transformer_speed.py $R /tmp/xf 64 vit_b_16 swin_t > $L/2-speed.log 2>&1; echo "speed rc=$?"
cp /tmp/xf/speed.json $L/2-speed.json 2>/dev/null; tail -2 $L/2-speed.log
timeout 60 $R bin/sluiced model /tmp/xf/vit_b_16.onnx --device cuda --precision f16 --batch 64 --profile > $L/2-vit-profile.log 2>&1
timeout 60 $R bin/sluiced model /tmp/xf/swin_t.onnx --device cuda --precision f16 --batch 64 --profile > $L/2-swin-profile.log 2>&1
timeout 120 python3 bench/torch_infer.py --export bench/models/resnet50.onnx > $L/2-export.log 2>&1
for n in 1 2; do
  g=$([ $n = 1 ] && echo "[0]" || echo "[0, 0]")
  sed "s/^device: cuda/device: cuda\ngpus: $g/; s#^    path: .*#    path: /tmp/rep-$n.jsonl#" config/pipelines/bench-1080p-resnet50.yaml > config/pipelines/rep-$n.yaml
done
for r in 1 2; do for n in 1 2; do
  rm -f /tmp/rep-$n.jsonl
  timeout 120 $R bin/sluiced bench config/pipelines/rep-$n.yaml --pipelined --batches 300 --warmup 30 --json $L/2-rep$n-$r.json > $L/2-rep$n-$r.log 2>&1
  echo "replicas $n round $r rc=$?: $(grep -E '^pipelined' $L/2-rep$n-$r.log)"
done; done
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

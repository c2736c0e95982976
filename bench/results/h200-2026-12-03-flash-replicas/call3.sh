#!/usr/bin/env bash
# Session 14, call 3: the whole GPU test executable (every tag), then the CPU backend against ONNX Runtime on the
# host's cores (ViT-B/16, Swin-T, ResNet-50, MobileNetV2, batch 8), default OpenMP waiting and passive.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD
python3 tests/detect/make_detect_reference.py /tmp/detref > $L/3-detref.log 2>&1
python3 tests/nn/export_reference.py /tmp/nnref > $L/3-nnref.log 2>&1; tail -1 $L/3-nnref.log
export SLUICE_DETECT_REFERENCE_DIR=/tmp/detref SLUICE_NN_REFERENCE_DIR=/tmp/nnref
(cd /tmp && timeout 300 $R bin/sluice_gpu_tests > $L/3-gpu-tests.log 2>&1; echo "gpu tests rc=$?" >> $L/3-gpu-tests.log)
tail -4 $L/3-gpu-tests.log
mkdir -p bench/models; timeout 120 python3 bench/torch_infer.py --export bench/models/resnet50.onnx > $L/2-export.log 2>&1
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

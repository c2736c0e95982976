#!/usr/bin/env bash
# classify_boxes against the PyTorch way (roi_align + ResNet-18 f16 in a CUDA graph) on the same weights and boxes.
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
mkdir -p $OUT/logs
python3 bench/sgie_baseline.py --export /tmp/r18.onnx > $OUT/logs/export.log 2>&1
sed "s|ROOT|$PWD|g; s|#CLASSIFY|  - kind: classify_boxes\n    attribute: kind\n    model: /tmp/r18.onnx\n    width: 224\n    height: 224\n    top_k: 1\n    crop_batch: 32|" .gpu/detect-classify.yaml > /tmp/classify.yaml
for round in 1 2 3; do
  timeout 120 $R bin/sluiced bench /tmp/classify.yaml --pipelined --batches 200 --warmup 20 > $OUT/logs/sluice-$round.log 2>&1
  echo "sluice $round: $(grep -E '^  classify_boxes ' $OUT/logs/sluice-$round.log)"
  timeout 120 python3 bench/sgie_baseline.py --time --batch 16 --boxes-per-frame 2 > $OUT/logs/torch-$round.log 2>&1
  echo "torch $round: $(tail -1 $OUT/logs/torch-$round.log)"
done
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

#!/usr/bin/env bash
# GPU check of classify_boxes: tests, then the detect chain at 1080p with and without a ResNet-18 on every box.
cd "$(dirname "$0")/.."
R=.gpu/run
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/logs/gpu.txt
python3 tests/detect/make_detect_reference.py /tmp/detref > $OUT/logs/detref.log 2>&1
export SLUICE_DETECT_REFERENCE_DIR=/tmp/detref SLUICE_SOURCE_DIR=$PWD
cd /tmp && timeout 300 $OLDPWD/$R bin/sluice_gpu_tests "[classify_boxes],[scatter_scores],[roi_crop],[detect],[tee],[preprocess],[topk],[infer],[pipeline]" > $OUT/logs/gpu-tests.log 2>&1; echo "gpu tests rc=$?" >> $OUT/logs/gpu-tests.log; cd - >/dev/null
tail -3 $OUT/logs/gpu-tests.log
python3 - <<'PY' > $OUT/logs/export.log 2>&1
import torch, torchvision
m = torchvision.models.resnet18(num_classes=10).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), "/tmp/r18.onnx", input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17, dynamo=False)
print("exported")
PY
tail -1 $OUT/logs/export.log
sed "s|ROOT|$PWD|g; /#CLASSIFY/d" .gpu/detect-classify.yaml > /tmp/base.yaml
sed "s|ROOT|$PWD|g; s|#CLASSIFY|  - kind: classify_boxes\n    attribute: kind\n    model: /tmp/r18.onnx\n    width: 224\n    height: 224\n    top_k: 1\n    crop_batch: 32|" .gpu/detect-classify.yaml > /tmp/classify.yaml
for round in 1 2 3; do
  for v in base classify; do
    timeout 120 $R bin/sluiced bench /tmp/$v.yaml --pipelined --batches 200 --warmup 20 --json $OUT/logs/$v-$round.json > $OUT/logs/$v-$round.log 2>&1
    echo "$v round $round rc=$? $(grep -i 'frames/s' $OUT/logs/$v-$round.log | head -2 | tr '\n' ' ')"
  done
done
head -c 600 /tmp/detect-classify.jsonl > $OUT/logs/sample.jsonl
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

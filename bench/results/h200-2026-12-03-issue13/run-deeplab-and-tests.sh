#!/usr/bin/env bash
# GPU check after the merge: GPU tests (classify_boxes, the runner's step split, nn/cuda handles), then DeepLabV3's
# f16 error located (issue 13), then the CPU backend on ViT-B/16 and Swin-T against ONNX Runtime (issue 13 part 3).
cd "$(dirname "$0")/.."
R=$PWD/.gpu/run
mkdir -p $OUT/logs
python3 tests/detect/make_detect_reference.py /tmp/detref > $OUT/logs/detref.log 2>&1
python3 tests/nn/export_reference.py /tmp/nnref > $OUT/logs/nnref.log 2>&1; tail -1 $OUT/logs/nnref.log
export SLUICE_DETECT_REFERENCE_DIR=/tmp/detref SLUICE_NN_REFERENCE_DIR=/tmp/nnref SLUICE_SOURCE_DIR=$PWD
(cd /tmp && timeout 240 $R bin/sluice_gpu_tests "[classify_boxes],[scatter_scores],[roi_crop],[detect],[tee],[pipeline],[nn_cuda],[infer],[preprocess],[topk]" > $OUT/logs/gpu-tests.log 2>&1; echo "gpu tests rc=$?" >> $OUT/logs/gpu-tests.log)
tail -4 $OUT/logs/gpu-tests.log
if [ "${DEEPLAB:-1}" = 1 ]; then
  DIAG=deeplabv3_resnet50,deeplabv3_resnet50:backbone,deeplabv3_resnet50:head timeout 200 python3 bench/model_acceptance.py $R /tmp/acc \
    deeplabv3_resnet50 deeplabv3_resnet50:backbone deeplabv3_resnet50:head > $OUT/logs/deeplab.log 2>&1
  cp /tmp/acc/acceptance.json $OUT/logs/deeplab-acceptance.json 2>/dev/null; cat $OUT/logs/deeplab.log | cut -c1-600
fi
cd $OUT && tar -czf logs.tgz logs && rm -rf logs

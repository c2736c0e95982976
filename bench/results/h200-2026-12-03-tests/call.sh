# One device call (twelfth session): the new GPU tests first, then the GPU mAP, then the wider GPU suites.
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export SLUICE_SOURCE_DIR=$PWD SLUICE_DETECT_REFERENCE_DIR=$PWD/.gpu/detref
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
t() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim .gpu/run bin/sluice_gpu_tests "$@" > $L/$name.log 2>&1; rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s )) s: $(tail -2 $L/$name.log | tr '\n' ' ')"; grep -B2 -A14 "FAILED" $L/$name.log | head -50; }
t new 90 "[roi_crop],[tee],[op_table]"
printf '#!/bin/sh\nexec %s/.gpu/run bin/sluiced "$@"\n' "$PWD" > /tmp/sluiced-gpu; chmod +x /tmp/sluiced-gpu
s=$(date +%s); timeout 120 python3 models/eval_shapes_detector.py /tmp/sluiced-gpu --scenes 200 --video --device cuda > $L/map-gpu.log 2>&1
echo "map rc=$? $(( $(date +%s) - s )) s"; tail -6 $L/map-gpu.log
t pre 90 "[preprocess],[detect]"
t nn 150 "[nn_cuda]~[models]"
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $L

#!/usr/bin/env bash
# One device call (issue 13, 2026-12-02): sluice's CPU backend (oneDNN) against ONNX Runtime's CPU provider on
# the GPU host's cores, the same ONNX files and inputs, batch 8, run alternately (REPS rounds) so that drift in
# the host's load hits both. Then the outputs compared. Also the nn tests on this CPU (its oneDNN kernels differ
# from the dev machine's). Bundle in .gpu (sluiced, sluice_nn_tests).
#   MODELS="vit_b_16 swin_t resnet50" REPS=3 PROFILE=1 bash bench/results/h200-2026-12-02-cpu-infer/run.sh
# PROFILE=1 also times each layer of sluice's CPU backend (`sluiced model --profile`, median of 5) on all cores
# and on one, summed per op by bench/profile_by_op.py: where a model's time goes, and what does not scale.
# OMP_WAIT_POLICY=passive in the environment changes how sluice's OpenMP threads wait between layers (ORT's own
# pool ignores it): run once with and once without to compare (bench/results/dev2core-2026-12-03-cpu-transformers).
set -u
B=.gpu
L=$OUT/logs
D=/tmp/cpuinfer
mkdir -p "$L" "$D"
{ nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|Flags" | cut -c1-300; python3 -c "import onnxruntime, torch; print('onnxruntime', onnxruntime.__version__, 'torch', torch.__version__)"; } > "$L/host.txt" 2>&1
MODELS=${MODELS:-resnet50 mobilenet_v2}
for m in $MODELS; do
  python3 bench/cpu_infer_baseline.py --model "$m" --batch 8 --export "$D" > "$L/export-$m.log" 2>&1 || echo "export $m failed"
done
for r in $(seq 1 "${REPS:-3}"); do
  for m in $MODELS; do
    timeout 200 $B/run bin/sluiced model "$D/$m.onnx" --batch 8 --device cpu --input "$D/$m.input.npy" \
      --output "$D/$m.sluice.npy" --bench --warmup 5 --iterations 30 --json "$L/$m-sluice-$r.json" > "$L/$m-sluice-$r.log" 2>&1
    echo "sluice $m $r rc=$?: $(grep -E '^cpu f32' "$L/$m-sluice-$r.log")"
    timeout 200 python3 bench/cpu_infer_baseline.py --model "$m" --ort "$D" --warmup 5 --iterations 30 > "$L/$m-ort-$r.log" 2>&1
    echo "ort    $m $r rc=$?: $(tail -1 "$L/$m-ort-$r.log")"
    cp "$D/$m.ort.json" "$L/$m-ort-$r.json" 2>/dev/null
  done
done
for m in $MODELS; do python3 bench/compare_npy.py "$D/$m.sluice.npy" "$D/$m.ort.npy" 1e-4; done 2>&1 | tee "$L/compare.log"
# Scaling with cores: one thread each, same file.
OMP_NUM_THREADS=1 timeout 200 $B/run bin/sluiced model "$D/resnet50.onnx" --batch 8 --device cpu \
  --input "$D/resnet50.input.npy" --bench --warmup 2 --iterations 5 > "$L/resnet50-sluice-1thread.log" 2>&1
echo "sluice resnet50 1 thread: $(grep -E '^cpu f32' "$L/resnet50-sluice-1thread.log")"
timeout 200 python3 bench/cpu_infer_baseline.py --model resnet50 --ort "$D" --threads 1 --warmup 2 --iterations 5 \
  > "$L/resnet50-ort-1thread.log" 2>&1
echo "ort    resnet50 1 thread: $(tail -1 "$L/resnet50-ort-1thread.log")"
if [ -n "${PROFILE:-}" ]; then
  for m in $MODELS; do
    for t in all 1; do
      threads=$([ "$t" = all ] && echo "" || echo "OMP_NUM_THREADS=$t")
      env $threads timeout 200 $B/run bin/sluiced model "$D/$m.onnx" --batch 8 --device cpu --input "$D/$m.input.npy" \
        --profile --iterations 5 > "$L/$m-profile-$t.log" 2>&1
      python3 bench/profile_by_op.py "$L/$m-profile-$t.log" | head -12
    done
  done
fi
if [ -n "${NN_TESTS:-}" ]; then
  { time OMP_NUM_THREADS=16 timeout 240 $B/run bin/sluice_nn_tests "[cpu_ops]" > "$L/nn_tests.log" 2>&1; } 2>> "$L/nn_tests.log"
  tail -3 "$L/nn_tests.log"
fi
tar -C "$OUT" -czf "$OUT/logs.tgz" logs

#!/usr/bin/env bash
# Device call 1 (session 19): engine warm-up + graphs per count; interference test; density with warm-up.
set -u
O=${OUT:-/tmp/out}; L=$O/c1; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$L/gpu.txt"
timeout 120 .gpu/run bin/sluice_gpu_tests "[engine]" >"$L/engine_tests.log" 2>&1; echo "engine tests rc=$?" | tee -a "$L/summary.txt"
pass=0; fail=0
for i in $(seq 10); do
  if timeout 60 .gpu/run bin/sluice_gpu_tests "CUDA engine survives captures invalidated by another thread" >"$L/interf.log" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); cp "$L/interf.log" "$L/interf-fail-$i.log"; fi
done
echo "interference alone: $pass passed, $fail failed" | tee -a "$L/summary.txt"
SLUICE_DETECT_REFERENCE_DIR=$(pwd)/.gpu/detect-ref timeout 240 .gpu/run bin/sluice_gpu_tests >"$L/gpu_tests-full.log" 2>&1; echo "full suite rc=$?" | tee -a "$L/summary.txt"
tail -4 "$L/gpu_tests-full.log" | tee -a "$L/summary.txt"
OUT=$L THREAD_SAMPLE=5 LATENCY_BUDGET_MS=100 DETECT_N="${DETECT_N:-32 64}" CLASSIFY_N="${CLASSIFY_N:-128}" DENSITY_S=20 timeout 330 bash bench/run-density-gpu.sh 2>&1 | tee "$L/density.txt" | grep -v "^$" | tail -30
cd "$O" && tar czf c1.tgz c1 && rm -rf c1

#!/usr/bin/env bash
# Device call 3 (session 20): where the source threads' host CPU goes. NVDEC step costs (bench, unpaced and
# paced, display delay 4 and 0), and perf profiles of the bench.
set -u
O=${OUT:-/tmp/out}; L=$O/c3; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"; nproc >>"$L/gpu.txt"
cat /proc/sys/kernel/perf_event_paranoid /proc/sys/kernel/kptr_restrict >>"$L/gpu.txt" 2>&1; id >>"$L/gpu.txt"
B=".gpu/run bin/sluice_nvdec_bench"; C=.gpu/cam1080.h264
for n in 1 32 96; do
  $B $C $n 8 nv12 stream 4 0 2>&1 | sed "s/^/n$n unpaced d4: /" | tee -a "$L/bench.txt"
  $B $C $n 4 nv12 stream 0 30 2>&1 | sed "s/^/n$n paced d0: /" | tee -a "$L/bench.txt"
  $B $C $n 4 nv12 stream 4 30 2>&1 | sed "s/^/n$n paced d4: /" | tee -a "$L/bench.txt"
done
# perf of the bench, 96 paced live-like sources
P=".gpu/run bin/perf"
$B $C 96 4 nv12 stream 0 30 >"$L/bench96-perf.txt" 2>&1 & sleep 3
bp=$(pgrep -f "bin/sluice_nvdec_bench" | head -1)
$P record -F 499 -g -p "$bp" -o "$L/bench.perf" -- sleep 4 >"$L/perf-rec1.log" 2>&1
wait
$P report -i "$L/bench.perf" --no-children --sort dso --stdio 2>&1 | head -40 >"$L/bench-dso.txt"
$P report -i "$L/bench.perf" --no-children --sort dso,sym --stdio -g none 2>&1 | grep -v "^$" | head -80 >"$L/bench-sym.txt"
# strace syscall counts, 32 paced live-like sources
$B $C 32 4 nv12 stream 0 30 >"$L/bench32-strace.txt" 2>&1 & sleep 3
bp=$(pgrep -f "bin/sluice_nvdec_bench" | head -1)
timeout -s INT 4 .gpu/run bin/strace -c $(ls /proc/$bp/task | sed "s/^/-p /") -o "$L/strace32.txt" >/dev/null 2>&1
wait
head -30 "$L/bench-dso.txt"; head -25 "$L/strace32.txt"
rm -f "$L"/*.perf
cd "$O" && tar czf c3.tgz c3 && rm -rf c3

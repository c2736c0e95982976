#!/usr/bin/env bash
# Device call 4 (session 20): NAL-by-NAL feeding against whole access units marked complete; who takes the
# kernel time (perf call chains of the driver's register reads and the rwsem spinning).
set -u
O=${OUT:-/tmp/out}; L=$O/c4; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
B=".gpu/run bin/sluice_nvdec_bench"; C=.gpu/cam1080.h264
for n in 1 32 96; do for f in nal au; do
  $B $C $n 4 nv12 stream 0 30 $f 2>&1 | tr '\n' ' ' | sed "s/^/n$n paced d0 $f: /; s/\$/\n/" | tee -a "$L/bench.txt"
done; done
$B $C 32 8 nv12 stream 4 0 au 2>&1 | tr '\n' ' ' | sed "s/^/n32 unpaced d4 au: /; s/\$/\n/" | tee -a "$L/bench.txt"
P=".gpu/run bin/perf"
for f in nal au; do
  $B $C 96 4 nv12 stream 0 30 $f >"$L/bench96-perf-$f.txt" 2>&1 & sleep 3
  bp=$(pgrep -f "bin/sluice_nvdec_bench" | head -1)
  $P record -F 999 -g -p "$bp" -o "$L/b-$f.perf" -- sleep 4 >"$L/perf-rec-$f.log" 2>&1
  wait
  $P report -i "$L/b-$f.perf" --no-children --sort sym --stdio -g caller,0.5,callee --percent-limit 4 2>&1 | grep -v "^$" | head -300 >"$L/callers-$f.txt"
  $P report -i "$L/b-$f.perf" --no-children --sort dso,sym --stdio -g none 2>&1 | grep -v "^$" | head -50 >"$L/sym-$f.txt"
done
cd "$O" && tar czf c4.tgz c4 && rm -rf c4

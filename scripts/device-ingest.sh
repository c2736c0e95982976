#!/usr/bin/env bash
# device-ingest.sh OUT_DIR: on a GPU host (gpu-host build, bundled into .gpu/), check the ingestion path on the
# GPU: the GPU tests (managed sources with pinned rings among them), a run over several managed sources, and
# bench-1080p-4sources (four managed sources) against bench-1080p-bgr8 (the direct test pattern) alternated in
# pairs, so the price of the per-source machinery is a ratio from one run. Logs go to OUT_DIR.
set -uo pipefail
out=${1:?usage: device-ingest.sh OUT_DIR}
pairs=${PAIRS:-3}
mkdir -p "$out"
status=0
step_tail=12
. "$(dirname "$0")/device-step.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
nproc | tee "$out/nproc.txt"
step gpu-tests .gpu/run bin/sluice_gpu_tests --durations yes
# Without OpenCV (left out of GPU-host builds) an image source fails with a message that says so, and the test
# pattern runs.
printf 'name: no-media\ndevice: cuda\nstages:\n  - kind: decode\n    uri: [testsrc:bars, /data/missing.png]\n    frames: 64\n    width: 320\n    height: 240\n  - kind: upload\n  - kind: download\n  - kind: sink\n    type: "null"\n' >"$out/no-media.yaml"
echo "== no-media (expect exit 1 and OpenCV named)"
.gpu/run bin/sluiced run "$out/no-media.yaml" --no-progress >"$out/no-media.log" 2>&1; rc=$?
tail -n 6 "$out/no-media.log"
if [ $rc -ne 1 ] || ! grep -q "needs OpenCV" "$out/no-media.log" || ! grep -q "produced 64" "$out/no-media.log"; then
  echo "== no-media: unexpected (exit $rc)"; status=1
fi
for i in $(seq 1 "$pairs"); do
  step "direct-$i" .gpu/run bin/sluiced bench config/pipelines/bench-1080p-bgr8.yaml --batches 150 --json "$out/direct-$i.json"
  step "sources-$i" .gpu/run bin/sluiced bench config/pipelines/bench-1080p-4sources.yaml --batches 150 --json "$out/sources-$i.json"
done
exit $status

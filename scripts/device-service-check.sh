#!/usr/bin/env bash
# device-service-check.sh OUT_DIR: on a GPU host, run sluiced as a service on the GPU for a few seconds
# and exercise it with sluicectl (status, trace, stop) and a metrics scrape. Logs go to OUT_DIR.
set -uo pipefail
out=${1:?usage: device-service-check.sh OUT_DIR}
mkdir -p "$out"
sock=$(mktemp -u /tmp/sluice-XXXXXX.sock)
sed 's/^device: auto/device: cuda/' config/sluice.yaml >"$out/service.yaml"
.gpu/run bin/sluiced --config "$out/service.yaml" --socket "$sock" --metrics 127.0.0.1:19464 >"$out/service.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
sleep 3
status=0
.gpu/run bin/sluicectl --socket "$sock" status | tee "$out/status.txt" || status=1
.gpu/run bin/sluicectl --socket "$sock" trace 1 -o "$out/trace.json" || status=1
python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:19464/metrics').read().decode())" \
  >"$out/metrics.txt" || status=1
grep -E '^sluice_(frames_(produced|ended)_total|stage_gpu_busy_seconds_total)' "$out/metrics.txt"
.gpu/run bin/sluicectl --socket "$sock" stop || status=1
wait $pid || status=1
tail -n 12 "$out/service.log"
exit $status

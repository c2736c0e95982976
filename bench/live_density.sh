#!/usr/bin/env bash
# live_density.sh SLUICED CLIP N SECONDS OUT_DIR [tcp|udp] [gpu|cpu] [MODEL.onnx]: the density benchmark's run
# (issue 29 part 8): N simulated RTSP cameras (tools/camsim.py serving CLIP, an Annex-B H.264 file without
# B-frames, at 30 fps) -> decode (NVDEC or libavcodec, NV12 1080p) -> 640x640 letterbox f16 -> [MODEL as a
# YOLO-style detector f16 -> NMS -> track] -> JSON lines, `sluiced run` for SECONDS. Writes OUT_DIR/run.log (the
# daemon's summary), OUT_DIR/camsim.log and OUT_DIR/summary.json, and prints the summary: per-camera delivered
# frames/s over the steady window (the last SECONDS - 5 s), capture-to-sink latency p50/p99/max over that window,
# drops and failures, and the host CPU of sluiced (cores in all and per camera).
# SLUICED may be a command of several words (".gpu/run bin/sluiced").
set -uo pipefail
sluiced=${1:?usage: live_density.sh SLUICED CLIP N SECONDS OUT_DIR [tcp|udp] [gpu|cpu] [MODEL.onnx]}
clip=${2:?clip}; n=${3:?cameras}; seconds=${4:?seconds}; out=${5:?out}
transport=${6:-tcp}; decoder=${7:-gpu}; model=${8:-}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
work=$(mktemp -d)
cleanup() { [ -n "${camsim:-}" ] && kill "$camsim" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

python3 "$here/tools/camsim.py" "$clip" --streams "$n" --port 0 --ready-file "$work/ready" \
  >"$out/camsim.log" 2>&1 &
camsim=$!
for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.1; done
[ -s "$work/ready" ] || { echo "live_density: camsim did not start"; tail "$out/camsim.log"; exit 1; }
port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$work/ready" 2>/dev/null ||
       sed -n 's/.*:\([0-9][0-9]*\).*/\1/p' "$work/ready" | head -1)

{
  echo "name: density-$n"
  echo "device: auto"
  echo "batch_size: 64"
  echo "batch_timeout_ms: 15"
  echo "stages:"
  echo "  - kind: decode"
  echo "    uri:"
  for i in $(seq 0 $((n - 1))); do echo "      - rtsp://127.0.0.1:$port/cam$i"; done
  echo "    decoder: $decoder"
  echo "    rtsp_transport: $transport"
  echo "    format: nv12"
  echo "    width: 1920"
  echo "    height: 1080"
  echo "  - kind: upload"
  echo "  - kind: preprocess"
  echo "    width: 640"
  echo "    height: 640"
  echo "    letterbox: true"
  echo "    pad_value: 114"
  echo "    layout: nchw"
  echo "    dtype: f16"
  echo "    mean: [0, 0, 0]"
  echo "    std: [1, 1, 1]"
  if [ -n "$model" ]; then
    echo "  - kind: infer"
    echo "    model: $(readlink -f "$model")"
    echo "    precision: f16"
    echo "    output: detections"
    echo "    detect: {head: yolo_anchor_free, reg_max: 16, strides: [8, 16, 32], activation: sigmoid, score_threshold: 0.25, iou_threshold: 0.45, pre_nms_top_k: 1000, max_detections: 100}"
    echo "  - kind: download"
    echo "  - kind: track"
  else
    echo "  - kind: download"
  fi
  echo "  - kind: sink"
  echo "    type: jsonl"
  echo "    path: $work/records.jsonl"
} >"$work/density.yaml"
cp "$work/density.yaml" "$out/pipeline.yaml"

# CPU of sluiced alone: its process's utime + stime from /proc, sampled at the steady window's start and end.
$sluiced run "$work/density.yaml" --no-progress >"$out/run.log" 2>&1 &
pid=$!
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
target=$pid  # .gpu/run execs sluiced
sleep 5
t0=$(date +%s.%N); c0=$(cpu_ticks "$target")
sleep $((seconds - 5))
t1=$(date +%s.%N); c1=$(cpu_ticks "$target")
kill -INT "$target" 2>/dev/null
wait "$pid"; rc=$?
python3 - "$work/records.jsonl" "$n" "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" "$out/summary.json" "$rc" <<'PY'
import json, sys, collections, datetime
path, n, t0, t1, c0, c1, tck, out, rc = sys.argv[1:]
n = int(n); t0, t1 = float(t0), float(t1)
per = collections.Counter(); lat = []
for line in open(path):
    r = json.loads(line)
    when = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    if t0 <= when < t1:
        per[r["source_name"]] += 1
        lat.append(r["latency_ms"])
window = t1 - t0
fps = sorted(per.get(k, 0) / window for k in per) + [0.0] * (n - len(per))
fps.sort()
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
cores = (float(c1) - float(c0)) / float(tck) / window
s = {"cameras": n, "window_s": round(window, 2), "fps_total": round(sum(fps), 1),
     "fps_per_camera_min": round(fps[0], 2), "fps_per_camera_median": round(fps[len(fps) // 2], 2),
     "latency_ms_p50": round(q(0.5), 1), "latency_ms_p99": round(q(0.99), 1), "latency_ms_max": round(lat[-1], 1) if lat else None,
     "records": len(lat), "sluiced_cores": round(cores, 2), "cores_per_camera": round(cores / n, 4), "rc": int(rc)}
json.dump(s, open(out, "w"), indent=1)
print(json.dumps(s))
PY
grep -E "^frames:|dropped [0-9]+:|failed [0-9]+:" "$out/run.log" | head -8

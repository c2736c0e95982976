#!/usr/bin/env bash
# live_density.sh SLUICED CLIP N SECONDS OUT_DIR [tcp|udp] [gpu|cpu] [MODEL.onnx [detect|classify]]: the density
# benchmark's run (issue 29 part 8): N simulated RTSP cameras (tools/camsim.py serving CLIP, an Annex-B H.264 file
# without B-frames, at 30 fps) -> decode (NVDEC or libavcodec, NV12 1080p) -> then
#   no MODEL:        640x640 letterbox f16 -> JSON lines of the tensor (the sink bounds this one: a check of
#                    the path, not a density figure);
#   MODEL detect:    640x640 letterbox f16 -> MODEL as a YOLO-style detector f16 -> NMS -> track -> JSON lines;
#   MODEL classify:  224x224 RGB f16 -> MODEL as a classifier f16 -> top-5 -> JSON lines;
# `sluiced run` for SECONDS. Writes OUT_DIR/run.log (the daemon's summary), OUT_DIR/camsim.log and
# OUT_DIR/summary.json, and prints the summary: per-camera delivered frames/s over the steady window (the last
# SECONDS - 5 s), capture-to-sink latency p50/p99/max over that window (from each frame's arrival in sluiced) and
# p99 over each camera's first second (warm-up), the latency from the simulator's send (`from_send_ms_*`: also
# counts frames waiting in the socket while a source is behind) and how far the furthest camera is behind its
# stream's clock at the end (`behind_at_end_ms_max`), drops and failures, the host CPU of sluiced (cores in all and per camera) and its busiest threads
# (cores by thread name, summed over threads of one name).
# SLUICED may be a command of several words (".gpu/run bin/sluiced"). LATENCY_BUDGET_MS (environment) sets the
# pipeline's latency_budget_ms; the summary then counts the frames delivered past it ("late", from the run's report).
# THREAD_SAMPLE=S samples where sluiced's threads are for S seconds of the window (tools/thread_sample.py) into
# OUT_DIR/threads.txt. CAMERAS_PER_CAMSIM (default 16) cameras are served by each camsim process (one Python
# thread each: one process for 96 cameras falls behind, and the figure would be the simulator's); the summary
# holds what the simulators report (frames sent, their busiest one's CPU, frames sent later than a frame period).
set -uo pipefail
sluiced=${1:?usage: live_density.sh SLUICED CLIP N SECONDS OUT_DIR [tcp|udp] [gpu|cpu] [MODEL.onnx]}
clip=${2:?clip}; n=${3:?cameras}; seconds=${4:?seconds}; out=${5:?out}
transport=${6:-tcp}; decoder=${7:-gpu}; model=${8:-}; head=${9:-detect}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
work=$(mktemp -d)
camsims=()
stop_camsims() {
  [ ${#camsims[@]} -gt 0 ] && kill "${camsims[@]}" 2>/dev/null && wait "${camsims[@]}" 2>/dev/null
  camsims=()
}
cleanup() { stop_camsims; rm -rf "$work"; }
trap cleanup EXIT

# Cameras 0..n-1 spread over ceil(n / CAMERAS_PER_CAMSIM) simulators; camera i is simulator i / per's cam(i % per).
per=${CAMERAS_PER_CAMSIM:-16}
sims=$(((n + per - 1) / per))
: >"$out/camsim.log"
for j in $(seq 0 $((sims - 1))); do
  k=$((n - j * per < per ? n - j * per : per))
  python3 "$here/tools/camsim.py" "$clip" --streams "$k" --port 0 --ready-file "$work/ready$j" >>"$out/camsim.log" 2>&1 &
  camsims+=($!)
done
ports=()
for j in $(seq 0 $((sims - 1))); do
  for _ in $(seq 100); do [ -s "$work/ready$j" ] && break; sleep 0.1; done
  [ -s "$work/ready$j" ] || { echo "live_density: camsim $j did not start"; tail "$out/camsim.log"; exit 1; }
  ports+=("$(sed -n 's/.*:\([0-9][0-9]*\).*/\1/p' "$work/ready$j" | head -1)")
done

{
  echo "name: density-$n"
  echo "device: auto"
  echo "batch_size: 64"
  echo "batch_timeout_ms: 15"
  [ -n "${LATENCY_BUDGET_MS:-}" ] && echo "latency_budget_ms: $LATENCY_BUDGET_MS"
  echo "stages:"
  echo "  - kind: decode"
  echo "    uri:"
  for i in $(seq 0 $((n - 1))); do echo "      - rtsp://127.0.0.1:${ports[$((i / per))]}/cam$((i % per))"; done
  echo "    decoder: $decoder"
  echo "    rtsp_transport: $transport"
  echo "    format: nv12"
  echo "    width: 1920"
  echo "    height: 1080"
  echo "  - kind: upload"
  echo "  - kind: preprocess"
  if [ -n "$model" ] && [ "$head" = classify ]; then
    echo "    width: 224"
    echo "    height: 224"
    echo "    order: rgb"
    echo "    layout: nhwc"
    echo "    dtype: f16"
    echo "  - kind: infer"
    echo "    model: $(readlink -f "$model")"
    echo "    precision: f16"
    echo "    output: classes"
    echo "    top_k: 5"
    echo "  - kind: download"
  else
    echo "    width: 640"
    echo "    height: 640"
    echo "    letterbox: true"
    echo "    pad_value: 114"
    echo "    layout: nchw"
    echo "    dtype: f16"
    echo "    mean: [0, 0, 0]"
    echo "    std: [1, 1, 1]"
  fi
  if [ -n "$model" ] && [ "$head" = classify ]; then
    :
  elif [ -n "$model" ]; then
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
# Per thread: "name ticks" lines (the name is /proc's comm, without spaces: sluice names its threads).
thread_ticks() {
  for t in /proc/$1/task/*; do
    printf '%s %s\n' "$(tr ' ' _ <"$t/comm" 2>/dev/null)" "$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}')"
  done >"$2"
}
target=$pid  # .gpu/run execs sluiced
sleep 5
t0=$(date +%s.%N); c0=$(cpu_ticks "$target"); thread_ticks "$target" "$work/threads0"
[ -n "${THREAD_SAMPLE:-}" ] && python3 "$here/tools/thread_sample.py" "$target" "$THREAD_SAMPLE" >"$out/threads.txt" 2>&1 &
sleep $((seconds - 5))
t1=$(date +%s.%N); c1=$(cpu_ticks "$target"); thread_ticks "$target" "$work/threads1"
kill -INT "$target" 2>/dev/null
wait "$pid"; rc=$?
stop_camsims  # each prints its summary line as it exits
python3 - "$work/records.jsonl" "$n" "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" "$out/summary.json" "$rc" \
  "$work/threads0" "$work/threads1" "$out/camsim.log" <<'PY'
import json, sys, collections, datetime, re
path, n, t0, t1, c0, c1, tck, out, rc, th0, th1, camsim_log = sys.argv[1:]
n = int(n); t0, t1 = float(t0), float(t1)
per = collections.Counter(); lat = []
first = {}; early = []; boxes = 0  # each camera's first record time; latencies of its first second
# latency_ms counts from the frame's arrival in sluiced (its decode), so a source thread that falls behind hides
# the wait in its socket's buffer. The simulators send on the stream's clock, so arrival - pts is constant per
# camera while it keeps up and grows while it falls behind: a frame's latency plus that growth over the camera's
# earliest arrival is its latency from the simulator's send ("from send"; a lower bound: the earliest frame may
# have waited too).
offsets = collections.defaultdict(list)  # camera -> [(arrival - pts in ms, latency_ms, in window)]
for line in open(path):
    r = json.loads(line)
    when = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    name = r["source_name"]
    first.setdefault(name, when)
    if when < first[name] + 1.0:
        early.append(r["latency_ms"])
    if "pts_ns" in r:
        offsets[name].append((when * 1e3 - r["pts_ns"] / 1e6, r["latency_ms"], t0 <= when < t1))
    if t0 <= when < t1:
        per[name] += 1
        lat.append(r["latency_ms"])
        boxes += len(r.get("detections", []))
from_send = []; behind = []
for rows in offsets.values():
    earliest = min(o for o, _, _ in rows)
    from_send += [latency + o - earliest for o, latency, inside in rows if inside]
    behind.append(max(o for o, _, _ in rows[-30:]) - earliest)  # at the end of the run
from_send.sort()
def ticks(f):
    by = collections.Counter()
    for line in open(f):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            by[parts[0]] += int(parts[1])
    return by
a, b = ticks(th0), ticks(th1)
threads = {k: round((b[k] - a.get(k, 0)) / float(tck) / (t1 - t0), 3) for k in b}
threads = dict(sorted(((k, v) for k, v in threads.items() if v >= 0.01), key=lambda kv: -kv[1])[:12])
window = t1 - t0
fps = sorted(per.get(k, 0) / window for k in per) + [0.0] * (n - len(per))
fps.sort()
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
cores = (float(c1) - float(c0)) / float(tck) / window
s = {"cameras": n, "window_s": round(window, 2), "fps_total": round(sum(fps), 1),
     "fps_per_camera_min": round(fps[0], 2), "fps_per_camera_median": round(fps[len(fps) // 2], 2),
     "latency_ms_p50": round(q(0.5), 1), "latency_ms_p99": round(q(0.99), 1), "latency_ms_max": round(lat[-1], 1) if lat else None,
     "first_second_p99_ms": round(sorted(early)[min(len(early) - 1, int(0.99 * len(early)))], 1) if early else None,
     "boxes_per_frame": round(boxes / len(lat), 1) if lat else None,
     "from_send_ms_p50": round(from_send[len(from_send) // 2], 1) if from_send else None,
     "from_send_ms_p99": round(from_send[min(len(from_send) - 1, int(0.99 * len(from_send)))], 1) if from_send else None,
     "from_send_ms_max": round(from_send[-1], 1) if from_send else None,
     "behind_at_end_ms_max": round(max(behind), 1) if behind else None,
     "records": len(lat), "sluiced_cores": round(cores, 2), "cores_per_camera": round(cores / n, 4),
     "threads_cores": threads, "rc": int(rc)}
import os
sims = re.findall(r"ran [0-9.]+ s: (\d+) streams, (\d+) frames, .*CPU [0-9.]+ s \((\d+)% of one core\), "
                  r"frames later than one frame period: (\d+), max lag ([0-9.]+) ms", open(camsim_log).read())
if sims:
    s["camsim"] = {"processes": len(sims), "frames_sent": sum(int(x[1]) for x in sims),
                   "busiest_cpu_pct": max(int(x[2]) for x in sims), "late_frames": sum(int(x[3]) for x in sims),
                   "max_lag_ms": max(float(x[4]) for x in sims)}
late = re.search(r"late: (\d+) delivered past their latency budget", open(os.path.join(os.path.dirname(out), "run.log")).read())
if late: s["late_frames"] = int(late.group(1))
json.dump(s, open(out, "w"), indent=1)
print(json.dumps(s))
PY
grep -E "^frames:|dropped [0-9]+:|failed [0-9]+:" "$out/run.log" | head -8

#!/usr/bin/env bash
# live_decode.sh SLUICED CLIP OUT_DIR [N] [BATCHES]: where paced, looping NVDEC sources spend the decode stage's
# time (issue 29 part 4). N "cameras" (links to one clip) -> decode (NVDEC, NV12 1080p, device frames) ->
# 640x640 letterbox f16 -> null sink, in four shapes, each `sluiced bench --pipelined` with a trace:
#   paced-loop      rate_limit: 30, loop: true   (what the density benchmark runs)
#   paced-once      rate_limit: 30, loop: false  (pacing alone)
#   unpaced-loop    rate_limit: 0,  loop: true   (the re-open at each loop alone)
#   unpaced-once    rate_limit: 0,  loop: false  (the decoders' pace)
# SLUICED may be a command of several words (".gpu/run bin/sluiced"). Writes OUT_DIR/SHAPE.json, .log, .trace.json; prints one line per shape.
set -uo pipefail
sluiced=${1:?usage: live_decode.sh SLUICED CLIP OUT_DIR [N] [BATCHES]}
clip=${2:?clip}; out=${3:?out}; n=${4:-32}; batches=${5:-120}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clip=$(readlink -f "$clip")
uris=""
for i in $(seq 1 "$n"); do
  ln -s "$clip" "$work/cam$i.${clip##*.}"
  uris+="      - $work/cam$i.${clip##*.}"$'\n'
done
for shape in paced-loop paced-once unpaced-loop unpaced-once; do
  rate=0; loop=false
  case $shape in paced-*) rate=30 ;; esac
  case $shape in *-loop) loop=true ;; esac
  cat >"$work/$shape.yaml" <<EOF
name: live-$shape
device: cuda
batch_size: 64
batch_timeout_ms: 15
stages:
  - kind: decode
    uri:
$uris    decoder: gpu
    format: nv12
    width: 1920
    height: 1080
    rate_limit: $rate
    loop: $loop
    resume: false
  - kind: upload
  - kind: preprocess
    width: 640
    height: 640
    letterbox: true
    layout: nchw
    dtype: f16
  - kind: download
  - kind: sink
    type: "null"
EOF
  $sluiced bench "$work/$shape.yaml" --pipelined --warmup 10 --batches "$batches" --json "$out/$shape.json" \
    --trace "$out/$shape.trace.json" >"$out/$shape.log" 2>&1
  echo "$shape (rc $?): $(grep -E 'frames/s|cpu' "$out/$shape.log" | tr '\n' ' ' | cut -c1-300)"
done

#!/usr/bin/env bash
# sluiced's command line end to end: exit codes, messages, the default pipeline, draining on SIGINT.
set -uo pipefail
sluiced=$1; src=$(cd "$2" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME EXPECTED_STATUS GREP_PATTERN -- COMMAND...
  local name=$1 want=$2 pattern=$3; shift 4
  "$@" >"$tmp/out" 2>&1; local got=$?
  if [ "$got" != "$want" ] || ! grep -qE -- "$pattern" "$tmp/out"; then
    echo "FAIL $name: exit $got (want $want), output:"; sed 's/^/  | /' "$tmp/out"; fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

check help 0 'usage: sluiced' -- "$sluiced" --help
check no-args 2 'usage: sluiced' -- "$sluiced"
check unknown-command 2 "unknown command 'frobnicate' \(sluiced --help lists the commands\)" -- "$sluiced" frobnicate
# A usage error is one line naming the problem, not the whole help.
lines_of() { "$@" 2>&1 | wc -l; }
[ "$(lines_of "$sluiced" frobnicate)" -eq 1 ] && echo "ok   unknown-command-one-line" ||
  { echo "FAIL unknown-command-one-line: $(lines_of "$sluiced" frobnicate) lines"; fails=$((fails + 1)); }
check run-bad-option-one-line 2 "^sluiced: unknown option '--nope' \(sluiced run --help shows its usage\)$" -- \
  "$sluiced" run --nope
# Every command's --help prints its own usage and exits 0.
for c in run bench model check inspect devices; do
  check "help-$c" 0 "^usage: sluiced $c " -- "$sluiced" "$c" --help
done
check help-model-after-file 0 '^usage: sluiced model .*--precision' -- "$sluiced" model x.onnx --help
check help-command 0 '^usage: sluiced bench ' -- "$sluiced" help bench
check help-service 0 'commands:' -- "$sluiced" --config x.yaml --help
check version 0 '^sluiced [0-9]+\.[0-9]+' -- "$sluiced" --version
check inspect-list 0 'preprocess' -- "$sluiced" inspect
check inspect-stage 0 'pattern .*testsrc picture' -- "$sluiced" inspect decode
check inspect-pipeline 0 'batch_timeout_ms' -- "$sluiced" inspect pipeline
check inspect-unknown 2 "unknown stage kind 'nope'" -- "$sluiced" inspect nope
check check-default 0 'memory: pinned host' -- "$sluiced" check "$src/config/pipelines/default.yaml"

printf 'stages:\n  - kind: decode\n    frames: ten\n  - kind: sink\n' >"$tmp/bad.yaml"
check check-bad 2 "bad.yaml:3:13: stage 'decode' \(decode\): key 'frames': expected an integer, got 'ten'" -- \
  "$sluiced" check "$tmp/bad.yaml"
check run-bad 2 "bad.yaml:3:13" -- "$sluiced" run "$tmp/bad.yaml"
check check-missing 2 'cannot open pipeline file' -- "$sluiced" check "$tmp/none.yaml"

# check names each source's decoder on this host: an Annex-B file goes to NVDEC where it is usable, else to the
# CPU decoder with NVDEC's reason; a directory job is described per extension; an input that cannot be read (a
# missing file, a job's folder that is not there) is named and fails the check, as it would fail the run.
mkdir -p "$tmp/clips"
cp "$src/tests/data/nvdec/h264_320x240.h264" "$tmp/clips/a.h264"
cp "$src/tests/data/nvdec/hevc_320x240.hevc" "$tmp/clips/b.hevc"
cp "$src/tests/data/nvdec/hevc_320x240.hevc" "$tmp/clips/c.hevc"
printf 'device: cpu\nstages:\n  - kind: decode\n    uri: [%s, %s]\n  - kind: sink\n' \
  "$tmp/clips/a.h264" "$tmp/clips" >"$tmp/decoders.yaml"
check check-decoders 0 "a.h264: (libavcodec h264 \(not the GPU decoder: NVDEC unavailable|NVDEC H\.264)" -- \
  "$sluiced" check "$tmp/decoders.yaml"
check check-decoders-job 0 '\.hevc \(2\): (libavcodec hevc|NVDEC HEVC)' -- "$sluiced" check "$tmp/decoders.yaml"
printf 'device: cpu\nstages:\n  - kind: decode\n    uri: [%s, %s]\n  - kind: sink\n' \
  "$tmp/clips/none.h264" "$tmp/clips/a.h264" >"$tmp/missing-file.yaml"
check check-decoders-missing 2 'none.h264: cannot be read' -- "$sluiced" check "$tmp/missing-file.yaml"
printf 'device: cpu\nstages:\n  - kind: decode\n    uri: [%s]\n  - kind: sink\n' "$tmp/no-such-folder/" >"$tmp/missing-dir.yaml"
check check-job-folder-missing 2 'missing-dir.yaml: 1 input\(s\) cannot be read' -- "$sluiced" check "$tmp/missing-dir.yaml"

# Copies of the default pipeline live in $tmp: point its model paths (relative to the file) at the repo's models.
default_copy() { sed "s#\.\./\.\./models/#$src/models/#" "$src/config/pipelines/default.yaml" | sed "$@"; }
default_copy 's/type: stdout/type: "null"/; s/frames: 64/frames: 40/' >"$tmp/default.yaml"
check run-default 0 'produced 40 = delivered 40 \+ dropped 0 \+ failed 0' -- "$sluiced" run "$tmp/default.yaml"
# Issue 33 (a): a short run reports a true rate, never 0.0 fps for frames it delivered; (d) its source has one name
# (the decode stage's, for the directly rendered pattern) in the ledger and the source line.
check run-short-rate 0 '^decode +eos +[0-9]*[1-9][0-9]*\.[0-9] fps' -- "$sluiced" run "$tmp/default.yaml"
check run-one-source-name 0 '^  decode +40 +40 ' -- "$sluiced" run "$tmp/default.yaml"

# A sink that cannot write: the run reports the stage and exits 1 with every frame accounted for.
default_copy 's#type: stdout#type: jsonl\n    path: /nonexistent/x.jsonl#' >"$tmp/nowrite.yaml"
check run-sink-fails 1 "failed [0-9]+ \+ in flight 0" -- "$sluiced" run "$tmp/nowrite.yaml"
# Issue 33 (f): a sink that fails mid-run (a file size limit: EFBIG) is logged once with its path and error, the
# run stops at once (exit 1), the input is not blamed, and the file holds exactly the frames counted delivered.
# Frames enough that the run could not end before it stops (64 ended within one poll on a loaded machine).
default_copy "s#type: stdout#type: jsonl\n    path: $tmp/full.jsonl#; s/frames: 64/frames: 200000/" >"$tmp/full.yaml"
(trap '' XFSZ; ulimit -f 4; exec "$sluiced" run "$tmp/full.yaml") >"$tmp/full.out" 2>&1; status=$?
delivered=$(sed -nE 's/.*= delivered ([0-9]+) .*/\1/p' "$tmp/full.out")
produced=$(sed -nE 's/^frames: produced ([0-9]+) .*/\1/p' "$tmp/full.out")
if [ $status -eq 1 ] && [ "$(grep -c "on frame .*full.jsonl' failed: File too large" "$tmp/full.out")" = 1 ] &&
   [ -n "$produced" ] && [ "$produced" -lt 200000 ] &&
   ! grep -q 'could not be read' "$tmp/full.out" && [ -n "$delivered" ] && [ "$(wc -l <"$tmp/full.jsonl")" = "$delivered" ] &&
   grep -q 'stopping the run' "$tmp/full.out"; then
  echo "ok   sink-fails-mid-run"
else
  echo "FAIL sink-fails-mid-run: exit $status (want 1), $(wc -l <"$tmp/full.jsonl") records for delivered '$delivered'"
  grep -v '^\(decode\|upload\|preprocess\|infer\|download\) ' "$tmp/full.out" | sed 's/^/  | /' | tail -20; fails=$((fails + 1))
fi

# check refuses a sink path that cannot be written here, naming the place, the stage and the path; a directory
# output that can be created passes, and check creates nothing.
check check-sink-no-dir 2 "nowrite.yaml:[0-9]+:[0-9]+: stage 'sink' \(sink\): path '/nonexistent/x.jsonl': its directory '/nonexistent': No such file" -- \
  "$sluiced" check "$tmp/nowrite.yaml"
touch "$tmp/plainfile"
default_copy "s#type: stdout#type: npy\n    path: $tmp/plainfile/sub/out#" >"$tmp/underfile.yaml"
check check-sink-under-file 2 "stage 'sink' \(sink\): path '$tmp/plainfile/sub/out': cannot create it: '$tmp/plainfile' is not a directory" -- \
  "$sluiced" check "$tmp/underfile.yaml"
default_copy "s#type: stdout#type: jsonl\n    path: $tmp#" >"$tmp/dirasfile.yaml"
check check-sink-dir-as-file 2 "path '$tmp': it is a directory" -- "$sluiced" check "$tmp/dirasfile.yaml"
default_copy "s#type: stdout#type: directory\n    path: $tmp/new/results#" >"$tmp/creatable.yaml"
check check-sink-creatable 0 'creatable.yaml: ok' -- "$sluiced" check "$tmp/creatable.yaml"
[ ! -e "$tmp/new" ] && echo "ok   check-creates-nothing" || { echo "FAIL check-creates-nothing: $tmp/new exists"; fails=$((fails + 1)); }


# The default pipeline prints the shipped model's predictions: the source draws shapes.
check run-default-predicts 0 '^source decode seq 0 .* shapes 0\.[0-9]+' -- "$sluiced" run "$src/config/pipelines/default.yaml"

# The one-liner: the shipped default pipeline (found above the executable) with its source, model, sink and keys
# replaced from the command line. records FILE SOURCE_NAME... prints "COUNT LABEL,..." of a JSON-lines file
# (or fails when a record is not JSON, misses a field, or names another source).
records() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, sys
path, names = sys.argv[1], sys.argv[2:]
labels, ks, n = set(), set(), 0
for line in open(path, "rb").read().decode().splitlines():
    r = json.loads(line)
    n += 1
    name = r["source_name"]
    if name not in names or os.path.splitext(os.path.basename(r["input"]))[0] != name:
        sys.exit(f"a record of another source: {line}")
    labels.add(r["classes"][0]["label"])
    ks.add(len(r["classes"]))
print(n, ",".join(sorted(labels)), "k=" + ",".join(map(str, sorted(ks))))
PY
}
clip="$src/tests/data/nvdec/h264_320x240.mp4"  # 30 frames; the model's classes are testsrc patterns (any label)
oneliner() {  # oneliner NAME WANT_RECORDS WANT_STATUS -- sluiced run ARGS...: stdout -> $tmp/NAME.jsonl
  local name=$1 want=$2 want_status=$3; shift 4
  "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"; local got=$?
  local summary; summary=$(records "$tmp/$name.jsonl" h264_320x240 hevc_320x240 2>&1)
  if [ "$got" = "$want_status" ] && [[ "$summary" =~ ^$want ]] && grep -qE 'delivered [0-9]+ \+ dropped 0 \+ failed 0' "$tmp/$name.err"; then
    echo "ok   $name ($summary)"
  else
    echo "FAIL $name: exit $got (want $want_status), records: '$summary' (want '$want'), stderr:"
    sed 's/^/  | /' "$tmp/$name.err" | tail -15; fails=$((fails + 1))
  fi
}
oneliner oneliner-stdout '30 [a-z]+' 0 -- "$sluiced" run --uri "$clip" --output -
oneliner oneliner-two-uris '60 ' 0 -- "$sluiced" run --uri "$clip" --uri "$src/tests/data/nvdec/hevc_320x240.mkv" \
  --output - --device cpu --batch-size 4
grep -q '"source_name":"hevc_320x240"' "$tmp/oneliner-two-uris.jsonl" && grep -q '"source_name":"h264_320x240"' "$tmp/oneliner-two-uris.jsonl" &&
  echo "ok   oneliner-two-sources" || { echo "FAIL oneliner-two-sources: not both source names"; fails=$((fails + 1)); }
oneliner oneliner-top-k '30 .* k=4' 0 -- "$sluiced" run --uri "$clip" --output - --top-k 4
# --output PATH: the records go to the file, nothing to stdout; without --output: the pipeline's own sink (text).
check oneliner-to-file 0 'delivered 30 \+ dropped 0' -- "$sluiced" run --uri "$clip" --output "$tmp/out.jsonl"
[ "$(records "$tmp/out.jsonl" h264_320x240 | cut -d' ' -f1)" = 30 ] && ! grep -q '"sequence"' "$tmp/out" &&
  echo "ok   oneliner-file-records" || { echo "FAIL oneliner-file-records: $(wc -l <"$tmp/out.jsonl") lines in the file"; fails=$((fails + 1)); }
"$sluiced" run --uri "$clip" 2>/dev/null | grep -cE '^source h264_320x240 seq [0-9]+ .* [a-z]+ 0\.[0-9]+' >"$tmp/text-lines"
[ "$(cat "$tmp/text-lines")" = 30 ] && echo "ok   oneliner-default-sink" ||
  { echo "FAIL oneliner-default-sink: $(cat "$tmp/text-lines") text lines (want 30)"; fails=$((fails + 1)); }
check oneliner-check 0 'h264_320x240.mp4: libavcodec h264|NVDEC H\.264' -- "$sluiced" check --uri "$clip"
# Issue 33 (g): check on a job whose folder does not exist fails (exit 2), from a file and from --uri.
check oneliner-check-folder-missing 2 "^sluiced: --uri '$tmp/no-such-folder/': No such file" -- "$sluiced" check --uri "$tmp/no-such-folder/"
# Issue 33 (a): the one-liner's last lines give the source's true rate, not 0.0 fps.
check oneliner-rate 0 '^total +files 1/1 +30 frames +[0-9]*[1-9][0-9]*\.[0-9] fps +done' -- \
  "$sluiced" run --uri "$clip" --output "$tmp/rate.jsonl"
# A one-liner run over a folder is not a resumable job unless asked: run twice, it delivers every input twice;
# an --output that holds records is refused (never overwritten, not added to without a word); with --resume
# the second run skips what the first finished and adds to the file.
mkdir -p "$tmp/folder"
cp "$clip" "$tmp/folder/a.mp4"
for run in 1 2; do
  check "oneliner-folder-run-$run" 0 'delivered 30 \+ dropped 0' -- \
    "$sluiced" run --uri "$tmp/folder" --output - --state-dir "$tmp/state" --no-progress
done
check oneliner-output-exists 2 "^sluiced: --output '$tmp/out.jsonl': it holds [0-9]+ bytes of an earlier run" -- \
  "$sluiced" run --uri "$clip" --output "$tmp/out.jsonl"
[ "$(wc -l <"$tmp/out.jsonl")" = 30 ] && echo "ok   oneliner-output-untouched" ||
  { echo "FAIL oneliner-output-untouched: $(wc -l <"$tmp/out.jsonl") lines"; fails=$((fails + 1)); }
check oneliner-resume-first 0 'delivered 30 \+ dropped 0' -- \
  "$sluiced" run --uri "$tmp/folder" --output "$tmp/resumed.jsonl" --resume --state-dir "$tmp/state" --no-progress
check oneliner-resume-again 0 'produced 0 = delivered 0' -- \
  "$sluiced" run --uri "$tmp/folder" --output "$tmp/resumed.jsonl" --resume --state-dir "$tmp/state" --no-progress
[ "$(wc -l <"$tmp/resumed.jsonl")" = 30 ] && echo "ok   oneliner-resume-records" ||
  { echo "FAIL oneliner-resume-records: $(wc -l <"$tmp/resumed.jsonl") lines (want 30)"; fails=$((fails + 1)); }
check oneliner-resume-without-uri 2 '^sluiced: --resume makes the --uri inputs a resumable job' -- \
  "$sluiced" run --resume
# An installed sluiced finds the default pipeline in PREFIX/share/sluice (cmake/install.cmake's layout), and the
# pipeline its model beside it (../../models/).
mkdir -p "$tmp/prefix/bin" "$tmp/prefix/share/sluice/config/pipelines" "$tmp/prefix/share/sluice/models"
ln "$sluiced" "$tmp/prefix/bin/sluiced" 2>/dev/null || cp "$sluiced" "$tmp/prefix/bin/sluiced"
cp "$src/config/pipelines/default.yaml" "$tmp/prefix/share/sluice/config/pipelines/"
cp "$src/models/testsrc-classifier.onnx" "$src/models/testsrc-classifier.labels" "$tmp/prefix/share/sluice/models/"
check oneliner-installed 0 "^$tmp/prefix/share/sluice/config/pipelines/default.yaml: ok" -- \
  "$tmp/prefix/bin/sluiced" check --uri "$clip"
# --model: another model's predictions. The shipped one with a bias pushing every frame to class 4 ("noise"):
# without labels beside it the class is "class 4", with NAME.labels beside it or --labels it is "noise".
/usr/bin/python3 - "$src/models/testsrc-classifier.onnx" "$tmp/biased.onnx" <<'PY'
import sys, onnx, numpy as np
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
for i, t in enumerate(m.graph.initializer):
    if t.name == "classifier.bias":
        b = numpy_helper.to_array(t).copy(); b[4] += 1000.0
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(b, t.name))
onnx.save(m, sys.argv[2])
PY
oneliner oneliner-model '30 class 4 ' 0 -- "$sluiced" run --uri "$clip" --output - --model "$tmp/biased.onnx"
oneliner oneliner-model-labels '30 noise ' 0 -- "$sluiced" run --uri "$clip" --output - --model "$tmp/biased.onnx" \
  --labels "$src/models/testsrc-classifier.labels"
cp "$src/models/testsrc-classifier.labels" "$tmp/biased.labels"
oneliner oneliner-model-labels-beside '30 noise ' 0 -- "$sluiced" run --uri "$clip" --output - --model "$tmp/biased.onnx"
# A camera or stream on the command line that nothing answers: the run gives up after 5 attempts in a row
# (seconds, not forever), exit 1, the reason once per attempt and no FFmpeg inner URL (its "?timeout=0").
closed_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
check oneliner-unreachable-stream 1 "gave up after 5 reconnection attempts" -- \
  timeout 60 "$sluiced" run --uri "rtsp://127.0.0.1:$closed_port/x" --output "$tmp/unreachable.jsonl" --no-progress
if grep -q '?timeout=' "$tmp/out" || [ "$(grep -c "Connection refused" "$tmp/out")" -gt 9 ]; then
  echo "FAIL oneliner-unreachable-stream-lines: FFmpeg's inner URL or a line twice per attempt:"; sed 's/^/  | /' "$tmp/out"
  fails=$((fails + 1))
else
  echo "ok   oneliner-unreachable-stream-lines"
fi
# Every bad argument: exit 2, one message naming the option and its value, nothing run.
check oneliner-missing-uri 2 "^sluiced: --uri '$tmp/none.mp4': No such file or directory" -- \
  "$sluiced" run --uri "$tmp/none.mp4"
mkdir -p "$tmp/empty"
check oneliner-empty-dir 2 "^sluiced: --uri '$tmp/empty': .*no (media|video)" -- "$sluiced" run --uri "$tmp/empty"
check oneliner-glob-nothing 2 "^sluiced: --uri '$tmp/\*.mkv': .*matches no files" -- "$sluiced" run --uri "$tmp/*.mkv"
mkfifo "$tmp/fifo.mp4"
check oneliner-uri-fifo 2 "^sluiced: --uri '$tmp/fifo.mp4': it is a FIFO \(named pipe\), not a regular file" -- \
  timeout 20 "$sluiced" run --uri "$tmp/fifo.mp4"
check oneliner-uri-devzero 2 "^sluiced: --uri '/dev/zero': it is a character device, not a regular file" -- \
  timeout 20 "$sluiced" run --uri /dev/zero
check oneliner-uri-no-value 2 "^sluiced: --uri needs a value" -- "$sluiced" run --uri
check oneliner-uri-empty 2 "^sluiced: --uri needs a file" -- "$sluiced" run --uri ''
check oneliner-odd-bytes 2 "^sluiced: --uri '$tmp/.+\\\\x01\\\\x0a.mp4': No such file" -- "$sluiced" run --uri "$tmp/"$'\xff\x01\n.mp4'
iconv -f UTF-8 -t UTF-8 "$tmp/out" >/dev/null 2>&1 && echo "ok   oneliner-odd-bytes-utf8" ||
  { echo "FAIL oneliner-odd-bytes-utf8: the message holds bytes that are not UTF-8"; fails=$((fails + 1)); }
check oneliner-model-missing 2 "none.onnx.*\(set by --model '$tmp/none.onnx'\)" -- "$sluiced" run --uri "$clip" --model "$tmp/none.onnx"
check oneliner-model-not-model 2 "biased.labels: not a valid ONNX model.*\(set by --model '$tmp/biased.labels'\)" -- \
  "$sluiced" run --uri "$clip" --model "$tmp/biased.labels"
check oneliner-labels-devzero 2 "/dev/zero: labels file is a character device.*\(set by --labels '/dev/zero'\)" -- \
  timeout 20 "$sluiced" run --uri "$clip" --labels /dev/zero
check oneliner-top-k-range 2 "^sluiced: --top-k '99': 99 is out of range \(int 1\.\.32\)" -- "$sluiced" run --uri "$clip" --top-k 99
check oneliner-batch-size-bad 2 "^sluiced: --batch-size 'many': expected an integer" -- "$sluiced" run --batch-size many
check oneliner-device-bad 2 "^sluiced: --device needs one of auto\|cpu\|cuda, got 'tpu'" -- "$sluiced" run --device tpu
check oneliner-output-no-dir 2 "^sluiced: --output '/nonexistent/x.jsonl': its directory '/nonexistent': No such file" -- \
  "$sluiced" run --uri "$clip" --output /nonexistent/x.jsonl
check oneliner-output-dir 2 "^sluiced: --output '$tmp': it is a directory" -- "$sluiced" run --uri "$clip" --output "$tmp"
check oneliner-twice 2 "^sluiced: --model is given twice" -- "$sluiced" run --model a.onnx --model b.onnx
check oneliner-two-files 2 "^sluiced: run takes one pipeline FILE" -- "$sluiced" run a.yaml b.yaml
check oneliner-unknown-option 2 "^sluiced: unknown option '--frobnicate' \(sluiced run --help" -- \
  "$sluiced" run --uri "$clip" --frobnicate
if ! "$sluiced" devices | grep -q '^gpu 0'; then
  check oneliner-device-cuda-no-gpu 2 "^sluiced: --device 'cuda': (no CUDA device is visible|this sluiced was built without CUDA)" -- \
    "$sluiced" run --uri "$clip" --device cuda
fi

# The shipped bench files say device: cuda; without a usable GPU the refusal names --device cpu, which works.
if ! "$sluiced" devices | grep -q '^gpu 0'; then
  check bench-no-gpu 2 "to measure on the CPU: sluiced bench .*bench-1080p-bgr8.yaml --device cpu" -- \
    "$sluiced" bench "$src/config/pipelines/bench-1080p-bgr8.yaml"
fi
check bench-device-cpu 0 'device cpu' -- \
  "$sluiced" bench "$src/config/pipelines/bench-1080p-bgr8.yaml" --device cpu --batches 2 --warmup 0 --pipelined
check bench-device-bad 2 "--device needs one of auto\|cpu\|cuda" -- "$sluiced" bench x.yaml --device tpu

# On a terminal, the progress block is redrawn with cursor-up escapes on stderr: never on the terminal that also
# shows the stdout sink's records (it overwrote them), but still when the records go elsewhere.
/usr/bin/python3 - "$sluiced" "$src/config/pipelines/default.yaml" <<'PY' && echo "ok   progress-vs-stdout-sink" || fails=$((fails + 1))
import os, pty, re, subprocess, sys
def run(records_elsewhere):
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", COLUMNS="100")
    out = subprocess.DEVNULL if records_elsewhere else slave
    p = subprocess.Popen([sys.argv[1], "run", sys.argv[2]], stdin=subprocess.DEVNULL, stdout=out, stderr=slave, env=env)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child's side is closed
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    return p.wait(), len(re.findall(rb"\x1b\[[0-9]+A|\x1b\[2K", data)), len(re.findall(rb"seq [0-9]+ ", data))
status, redraws, records = run(False)
if status != 0 or redraws != 0 or records != 64:
    sys.exit(f"FAIL progress-vs-stdout-sink: same terminal: exit {status}, {redraws} redraws (want 0), {records} records (want 64)")
status, redraws, _ = run(True)
if status != 0 or redraws == 0:
    sys.exit(f"FAIL progress-vs-stdout-sink: records elsewhere: exit {status}, {redraws} redraws (want some)")
PY

# Model errors name the file (and the node), exit 2.
check model-missing 2 "none.onnx" -- "$sluiced" model "$tmp/none.onnx"
head -c 3000 "$src/models/testsrc-classifier.onnx" >"$tmp/truncated.onnx"
check model-truncated 2 "truncated.onnx: not a valid ONNX model" -- "$sluiced" model "$tmp/truncated.onnx"
check model-describe 0 "Conv\+Relu" -- "$sluiced" model "$src/models/testsrc-classifier.onnx" --device cpu
check model-bad-option 2 "--precision needs one of" -- "$sluiced" model "$src/models/testsrc-classifier.onnx" --precision f8
default_copy 's#testsrc-classifier.onnx#missing.onnx#' >"$tmp/nomodel.yaml"
check check-missing-model 2 "nomodel.yaml:[0-9]+:[0-9]+: stage 'infer' \(infer\): .*missing.onnx" -- "$sluiced" check "$tmp/nomodel.yaml"
default_copy 's/width: 64/width: 96/' >"$tmp/wrongsize.yaml"
check check-model-shape 2 "stage 'infer' \(infer\): model .* input 'image' is \[\?,3,64,64\]" -- "$sluiced" check "$tmp/wrongsize.yaml"

# A model exported with a fixed batch (8): whole batches run, the partial last one too; another batch_size is refused.
/usr/bin/python3 - "$src/models/testsrc-classifier.onnx" "$tmp/fixed8.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
for v in list(m.graph.input) + list(m.graph.output):
    v.type.tensor_type.shape.dim[0].dim_value = 8
onnx.save(m, sys.argv[2])
PY
default_copy "s#$src/models/testsrc-classifier.onnx#$tmp/fixed8.onnx#; s/frames: 64/frames: 21/" >"$tmp/fixed8.yaml"
check run-fixed-batch 0 'produced 21 = delivered 21 \+ dropped 0 \+ failed 0' -- "$sluiced" run "$tmp/fixed8.yaml"
sed 's/^batch_size: 8/batch_size: 4/' "$tmp/fixed8.yaml" >"$tmp/fixed8-b4.yaml"
check check-fixed-batch 2 "fixed batch of 8 but the pipeline's batch_size is 4" -- "$sluiced" check "$tmp/fixed8-b4.yaml"
# The options apply to a pipeline FILE as well; a fixed-batch model against --batch-size names the option.
check oneliner-file-fixed-batch 2 "fixed batch of 8 but the pipeline's batch_size is 4 \(set by --model '$tmp/fixed8.onnx'\)" -- \
  "$sluiced" check "$tmp/default.yaml" --model "$tmp/fixed8.onnx" --batch-size 4

# Issue 33 (c): --model with another input size: frames are scaled to the size the model fixes (96x96 here; the
# shipped model pools globally, so it runs at any size); a model that leaves the size open is refused by --model.
/usr/bin/python3 - "$src/models/testsrc-classifier.onnx" "$tmp" <<'PY'
import sys, onnx
for name, dims in (("m96", (96, 96)), ("open-size", ("h", "w"))):
    m = onnx.load(sys.argv[1])
    d = m.graph.input[0].type.tensor_type.shape.dim
    for dim, v in zip((d[2], d[3]), dims):
        if isinstance(v, int): dim.dim_value = v
        else: dim.dim_param = v
    onnx.save(m, f"{sys.argv[2]}/{name}.onnx")
PY
check oneliner-model-96 0 'delivered 30 \+ dropped 0 \+ failed 0' -- "$sluiced" run --uri "$clip" --model "$tmp/m96.onnx" --output "$tmp/m96.jsonl"
check oneliner-model-open-size 2 "^sluiced: --model '$tmp/open-size.onnx': its input 'image' is \[\?,3,\?,\?\]: the frame size is left open" -- \
  "$sluiced" run --uri "$clip" --model "$tmp/open-size.onnx"
check oneliner-size-conflict 2 "^sluiced: --size '32x32': the model .*m96.onnx takes 96x96 frames" -- \
  "$sluiced" run --uri "$clip" --model "$tmp/m96.onnx" --size 32x32

# SIGINT on an endless source: sources stop, frames in flight drain; issue 33 (b): the summary says the run was
# interrupted and what was not done, and it exits 130.
default_copy 's/frames: 64/frames: 0/; s/type: stdout/type: "null"/' >"$tmp/endless.yaml"
"$sluiced" run "$tmp/endless.yaml" >"$tmp/endless.out" 2>&1 &
pid=$!
# Signal only once it logged its start: by then SIGINT is blocked and waited for. Earlier, a background job of a
# non-interactive shell still has SIGINT ignored and the kernel discards it (a slow start, e.g. under ASan,
# ran forever).
for _ in $(seq 300); do grep -q "starting:" "$tmp/endless.out" && break; sleep 0.1; done
sleep 0.5; kill -INT $pid; wait $pid; status=$?
if [ $status -eq 130 ] && grep -qE 'draining' "$tmp/endless.out" && grep -qE '\+ failed 0 \+ in flight 0' "$tmp/endless.out" &&
   grep -qE '^interrupted by Interrupt: [0-9]+ frames delivered' "$tmp/endless.out" &&
   grep -qE '^  decode: stopped after [0-9]+ frames, before its end' "$tmp/endless.out"; then
  echo "ok   sigint-drains"
else
  echo "FAIL sigint-drains: exit $status"; sed 's/^/  | /' "$tmp/endless.out"; fails=$((fails + 1))
fi

# Files that are not what they claim, or unbounded (issue 11): each is refused by what it is, exit 2, promptly
# (`timeout`: opening a FIFO must not wait for a writer), without reading /dev/zero until memory runs out.
model="$src/models/testsrc-classifier.onnx"
mkfifo "$tmp/fifo.onnx" "$tmp/fifo.yaml"
check check-devzero 2 '/dev/zero: pipeline file is a character device' -- timeout 20 "$sluiced" check /dev/zero
check check-fifo 2 'fifo.yaml: pipeline file is a FIFO' -- timeout 20 "$sluiced" check "$tmp/fifo.yaml"
check check-dir 2 'pipeline file is a directory' -- timeout 20 "$sluiced" check "$tmp"
default_copy 's#labels: .*#labels: /dev/zero#' >"$tmp/zerolabels.yaml"
check check-labels-devzero 2 "stage 'infer' \(infer\): /dev/zero: labels file is a character device" -- \
  timeout 20 "$sluiced" check "$tmp/zerolabels.yaml"
check model-devzero 2 '/dev/zero: model file is a character device' -- timeout 20 "$sluiced" model /dev/zero
check model-fifo 2 'fifo.onnx: model file is a FIFO' -- timeout 20 "$sluiced" model "$tmp/fifo.onnx"
check model-dir 2 'model file is a directory' -- timeout 20 "$sluiced" model "$tmp"
check npy-devzero 2 '/dev/zero: .npy file is a character device' -- \
  timeout 20 "$sluiced" model "$model" --device cpu --input /dev/zero
# A .npy header padded with 40 000 spaces (std::regex overflowed its stack on it) reads fine; a wrong shape is
# one line naming the file, what was expected and what it got (not the usage text).
/usr/bin/python3 - "$tmp" <<'PY'
import sys, struct
def save(path, shape, pad):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (shape,) + " " * pad + "\n"
    count = 1
    for d in shape: count *= d
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * (4 * count))
save(sys.argv[1] + "/padded.npy", (1, 3, 64, 64), 40000)
save(sys.argv[1] + "/wrong.npy", (1, 3, 32, 32), 0)
PY
check npy-padded 0 'output' -- timeout 60 "$sluiced" model "$model" --device cpu --input "$tmp/padded.npy"
check npy-shape 2 "wrong.npy: shape \[1,3,32,32\] does not fit input 'image': expected \[\?,3,64,64\], got \[1,3,32,32\]" -- \
  timeout 20 "$sluiced" model "$model" --device cpu --input "$tmp/wrong.npy"
if grep -q 'usage:' "$tmp/out"; then echo "FAIL npy-shape-no-usage: the usage text was printed"; fails=$((fails + 1)); else echo "ok   npy-shape-no-usage"; fi
# Pools larger than the machine: refused by check and run, naming the stage's pool and the limit.
# A file name is any bytes whoever fills the folder chose: its ESC sequences and newlines reach neither the
# terminal nor the log as themselves (a newline would start a forged line; under journald, one whose "<0>"
# journald takes for its priority). Both log forms: a terminal's, and the journal's (JOURNAL_STREAM set).
mkdir -p "$tmp/hostile"
cp "$clip" "$tmp/hostile/a.mp4"
printf 'junk' >"$tmp/hostile/$(printf 'x\n<0>forged line\033]0;owned\007\033[31m.mp4')"
for journal in "" 1; do
  env ${journal:+JOURNAL_STREAM=1} "$sluiced" run --uri "$tmp/hostile" --output "$tmp/hostile$journal.jsonl" \
    --no-progress >/dev/null 2>"$tmp/hostile.err"; got=$?
  if [ "$got" = 1 ] && ! grep -q "$(printf '[\033\007]')" "$tmp/hostile.err" && ! grep -qE '^(<0>)?forged' "$tmp/hostile.err" &&
     grep -qF 'x\n<0>forged line\x1B]0;owned\x07\x1B[31m.mp4' "$tmp/hostile.err"; then
    echo "ok   hostile-file-name${journal:+-journal}"
  else
    echo "FAIL hostile-file-name${journal:+-journal}: exit $got (want 1), stderr:"; cat -v "$tmp/hostile.err" | sed 's/^/  | /'
    fails=$((fails + 1))
  fi
done
default_copy 's/width: 1280/width: 8192/; s/height: 720/height: 8192/; s/^batch_size: 8/batch_size: 4096/' >"$tmp/huge.yaml"
check check-huge-pool 2 "stage 'decode' \(decode\): its pool of 6 x frames bgr8 8192x8192 x4096 .* this machine has" -- \
  timeout 20 "$sluiced" check "$tmp/huge.yaml"
check run-huge-pool 2 "stage 'decode' \(decode\): its pool of" -- timeout 20 "$sluiced" run "$tmp/huge.yaml"

# docs/stages.md's stage reference is what the stages declare.
"$sluiced" inspect all >"$tmp/ref.txt"
python3 - "$src/docs/stages.md" "$tmp/ref.txt" <<'PY' && echo "ok   stage-reference" || { echo "FAIL stage-reference: run scripts/update-stage-docs.sh"; fails=$((fails + 1)); }
import re, sys
readme, ref = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r"<!-- stages:begin -->\n```text\n(.*?)```\n<!-- stages:end -->", readme, re.S)
sys.exit(0 if m and m.group(1).rstrip("\n") == ref.rstrip("\n") else 1)
PY

[ $fails -eq 0 ] && echo "all cli checks passed" || { echo "$fails cli checks failed"; exit 1; }

#!/usr/bin/env bash
# sluiced's command line end to end: exit codes, messages, the default pipeline, draining on SIGINT.
set -uo pipefail
sluiced=$1; src=$2
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
check unknown-command 2 "unknown command 'frobnicate'" -- "$sluiced" frobnicate
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

sed 's/type: stdout/type: "null"/' "$src/config/pipelines/default.yaml" | sed 's/frames: 64/frames: 40/' >"$tmp/default.yaml"
check run-default 0 'produced 40 = delivered 40 \+ dropped 0 \+ failed 0' -- "$sluiced" run "$tmp/default.yaml"

# A sink that cannot write: the run reports the stage and exits 1 with every frame accounted for.
sed 's#type: stdout#type: jsonl\n    path: /nonexistent/x.jsonl#' "$src/config/pipelines/default.yaml" >"$tmp/nowrite.yaml"
check run-sink-fails 1 "failed 64 \+ in flight 0" -- "$sluiced" run "$tmp/nowrite.yaml"

# SIGINT on an endless source: sources stop, frames in flight drain, exit 0.
sed 's/frames: 64/frames: 0/; s/type: stdout/type: "null"/' "$src/config/pipelines/default.yaml" >"$tmp/endless.yaml"
"$sluiced" run "$tmp/endless.yaml" >"$tmp/endless.out" 2>&1 &
pid=$!
sleep 1.5; kill -INT $pid; wait $pid; status=$?
if [ $status -eq 0 ] && grep -qE 'draining' "$tmp/endless.out" && grep -qE '\+ failed 0 \+ in flight 0' "$tmp/endless.out"; then
  echo "ok   sigint-drains"
else
  echo "FAIL sigint-drains: exit $status"; sed 's/^/  | /' "$tmp/endless.out"; fails=$((fails + 1))
fi

# README.md's stage reference is what the stages declare.
"$sluiced" inspect all >"$tmp/ref.txt"
python3 - "$src/README.md" "$tmp/ref.txt" <<'PY' && echo "ok   readme-reference" || { echo "FAIL readme-reference: run scripts/update-readme.sh"; fails=$((fails + 1)); }
import re, sys
readme, ref = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r"<!-- stages:begin -->\n```text\n(.*?)```\n<!-- stages:end -->", readme, re.S)
sys.exit(0 if m and m.group(1).rstrip("\n") == ref.rstrip("\n") else 1)
PY

[ $fails -eq 0 ] && echo "all cli checks passed" || { echo "$fails cli checks failed"; exit 1; }

#!/usr/bin/env bash
# fuzz.sh [SECONDS] [NAMES...]: build the `fuzz` preset and run each libFuzzer harness (fuzz/NAME_fuzz.cpp) for
# SECONDS (default 60), on a scratch copy of its seed corpus (fuzz/corpus/NAME/) so the repository's corpus is
# never rewritten. Without NAMES, every harness runs. Harnesses run $FUZZ_JOBS at a time (default: one per core).
# Prints per harness: executions, executions per second, corpus size before and after, and any crash, leak,
# timeout or out-of-memory artefact with the command that reproduces it; exits 1 if any harness found one.
# Work folder: build/fuzz-runs/ (logs, scratch corpora, artefacts; emptied at each run).
# FUZZ_PRESET=asan builds the harnesses in the asan tree instead (CI: one sanitizer build for tests and fuzzers).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
case $seconds in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
per_input_timeout_s=${FUZZ_TIMEOUT_S:-10}  # one input taking longer is a hang (sanitizers slow things ~2-5x)
rss_limit_mb=${FUZZ_RSS_LIMIT_MB:-2048}    # also the per-allocation limit: a parser may not ask for more
jobs=${FUZZ_JOBS:-$(nproc)}
preset=${FUZZ_PRESET:-fuzz}

names=("$@")
all_harnesses=0
if [ ${#names[@]} -eq 0 ]; then
  all_harnesses=1
  for source in fuzz/*_fuzz.cpp; do
    [ -e "$source" ] || continue
    name=${source#fuzz/}
    names+=("${name%_fuzz.cpp}")
  done
fi
if [ ${#names[@]} -eq 0 ]; then
  echo "fuzz.sh: no harnesses (fuzz/*_fuzz.cpp)" >&2
  exit 1
fi
for name in "${names[@]}"; do
  [ -f "fuzz/${name}_fuzz.cpp" ] || { echo "fuzz.sh: no harness fuzz/${name}_fuzz.cpp" >&2; exit 2; }
done

bash scripts/setup.sh >&2
cmake --preset "$preset" >&2
# Harnesses of the media library (demux) exist only in trees that build it (asan): without NAMES the others
# run; asked for by name, a missing one is an error.
available=$(cmake --build "build/$preset" --target help | sed -n 's/^\([a-z_0-9]*\)_fuzz:.*/\1/p')
kept=()
for name in "${names[@]}"; do
  if grep -qx "$name" <<<"$available"; then kept+=("$name")
  elif [ "$all_harnesses" -eq 1 ]; then echo "fuzz: $name is not built by the $preset preset (it needs the media library: FUZZ_PRESET=asan)" >&2
  else echo "fuzz.sh: the $preset preset does not build ${name}_fuzz (it needs the media library: FUZZ_PRESET=asan)" >&2; exit 2
  fi
done
names=("${kept[@]}")
targets=()
for name in "${names[@]}"; do targets+=("${name}_fuzz"); done
cmake --build "build/$preset" -j "$(nproc)" --target "${targets[@]}" >&2

work=build/fuzz-runs
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
# Freed memory goes back to the OS every 10 ms: by default ASan keeps each size class's freed chunks mapped, so
# an input that makes FFmpeg grow and free buffers over and over (a demux input of 8.6 KB found on 2026-12-03:
# 7 GB reallocated in 6 s, 150 MB live) reads as 2 GB of RSS and trips the limit meant for real allocations.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_release_to_os_interval_ms=10}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One harness: scratch corpus first (libFuzzer adds what it finds there), artefacts beside it. stdout (the
# harness's own prints) is closed; libFuzzer's report is on stderr, kept in NAME.log.
run_one() {
  local name=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [ -d "fuzz/corpus/$name" ]; then cp -R "fuzz/corpus/$name/." "$dir/corpus/"; fi
  local rc=0
  "build/$preset/fuzz/${name}_fuzz" "$dir/corpus" -max_total_time="$seconds" -timeout="$per_input_timeout_s" \
    -rss_limit_mb="$rss_limit_mb" -malloc_limit_mb="$rss_limit_mb" -artifact_prefix="$dir/artifacts/" \
    -print_final_stats=1 -close_fd_mask=1 >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

start=$(date +%s)
running=0
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  echo "fuzz: $name for ${seconds}s" >&2
  run_one "$name" &
  running=$((running + 1))
done
wait || true

stat_of() {  # stat_of LOG KEY: a value from -print_final_stats
  sed -n "s/^stat::$2: *//p" "$1" | tail -1
}
failed=0
printf '%-12s %12s %10s %16s %16s  %s\n' harness execs execs/s "corpus before" "corpus after" result
for name in "${names[@]}"; do
  dir=$work/$name
  rc=$(cat "$dir/rc" 2>/dev/null || echo "?")
  execs=$(stat_of "$dir/log" number_of_executed_units)
  rate=$(stat_of "$dir/log" average_exec_per_sec)
  before=$(find "fuzz/corpus/$name" -type f 2>/dev/null | wc -l)
  after=$(find "$dir/corpus" -type f | wc -l)
  after_bytes=$(du -sb "$dir/corpus" | cut -f1)
  artefacts=$(find "$dir/artifacts" -type f | sort)
  result=ok
  if [ "$rc" != 0 ] || [ -n "$artefacts" ]; then result="FAILED (exit $rc)"; failed=1; fi
  printf '%-12s %12s %10s %16s %16s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "$before files" \
    "$after files/${after_bytes}B" "$result"
  if [ "$result" != ok ]; then
    grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|deadly signal|runtime error|ALARM|out-of-memory|leak' "$dir/log" | sed 's/^/    /' || true
    for a in $artefacts; do
      echo "    artefact: $a"
      echo "    reproduce: build/$preset/fuzz/${name}_fuzz $a"
    done
    echo "    log: $dir/log"
  fi
done
echo "fuzz: ${#names[@]} harnesses x ${seconds}s in $(($(date +%s) - start))s, $jobs at a time"
exit $failed

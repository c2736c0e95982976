#!/usr/bin/env bash
# README command (2): set up, build, and run the whole test suite; CI runs exactly this (.ci/run). Phases:
#   release  the shipping build (CUDA when nvcc is found; the GPU test executable reports itself skipped without
#            a GPU): every test.
#   asan     clang, AddressSanitizer + UBSan, no CUDA (so it is also the build of a machine without nvcc): every
#            unit, service, fault and media test and the 2-minute soak; the same tree builds the fuzz harnesses.
#   tsan     ThreadSanitizer, no CUDA, no media library: only sluice_tests, and of it only the concurrency tests
#            (queue, pipeline, source set, control protocol, the service with many control clients; `ctest --preset tsan`).
#   package  the Debian packages, sluice (`deb` preset: CPU build under /usr) and sluice-cuda (cpack in the release
#            tree), installed with apt into a fresh Debian 12 root made by mmdebstrap, where sluiced checks and runs
#            the installed pipelines and the README's service quick start (tests/package/deb_test.sh).
#   fuzz     every libFuzzer harness (fuzz/*_fuzz.cpp) for FUZZ_SECONDS (default 60) each, two at a time, on a
#            scratch copy of its corpus (scripts/fuzz.sh), built in the asan tree.
# Every phase runs even when an earlier one failed; a timing line per phase, a summary at the end; exit status 1
# if any phase failed. TEST_PHASES="asan tsan" runs only those (development); CI runs all five.
set -uo pipefail
cd "$(dirname "$0")/.."
phases=${TEST_PHASES:-release asan tsan fuzz package}
jobs=$(nproc)
summary=()
failed=0
suite_start=$(date +%s)

# step NAME COMMAND...: run, time, remember the outcome.
step() {
  local name=$1 start rc
  shift
  echo "== $name"
  start=$(date +%s)
  "$@"
  rc=$?
  local line
  line=$(printf '%-14s %5d s  %s' "$name" $(($(date +%s) - start)) "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")
  echo "== time: $line"
  summary+=("$line")
  [ $rc -eq 0 ] || failed=1
  return $rc
}

# note_failed_tests BUILD_DIR: remembers which tests of that tree failed (ctest's LastTestsFailed.log); the end
# runs each once more and prints the end of its output, since CI shows only the end of a long log (a pass on
# the rerun says the failure depends on timing).
failed_tests=()
note_failed_tests() {
  local log=$1/Testing/Temporary/LastTestsFailed.log
  [ -s "$log" ] || return 0
  while IFS=: read -r _ name; do failed_tests+=("$1 $name"); done <"$log"
}

step setup bash scripts/setup.sh || { echo "setup failed: nothing can be built" >&2; exit 1; }
for phase in $phases; do
  case $phase in
    release | asan)
      step "$phase build" bash scripts/build.sh "$phase" && step "$phase test" ctest --preset "$phase" -j "$jobs"
      note_failed_tests "build/$phase"
      ;;
    tsan)
      step "tsan build" bash -c 'cmake --preset tsan && cmake --build build/tsan -j "$1" --target sluice_tests' _ "$jobs" &&
        step "tsan test" ctest --preset tsan -j "$jobs"
      note_failed_tests build/tsan
      ;;
    fuzz)
      step "fuzz" env FUZZ_PRESET=asan bash scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
      ;;
    package)
      # sluice-cuda comes from the release tree (CUDA, prefix /usr) that the release phase built and tested: the
      # package phase adds no CUDA build of its own. Without that tree only the CPU package is tested (said so).
      cuda_tree=()
      if [ -x build/release/sluiced ]; then cuda_tree=(build/release); else
        echo "package: build/release/sluiced not built (the release phase did not run): sluice-cuda is not tested"; fi
      step "package build" bash scripts/build.sh deb &&
        step "package test" bash tests/package/deb_test.sh build/deb "${cuda_tree[@]}"
      ;;
    *) echo "test.sh: unknown phase '$phase' (release, asan, tsan, fuzz, package)" >&2; exit 2 ;;
  esac
done

echo "== summary ($(nproc) cores, $(( ($(date +%s) - suite_start) / 60 )) min in all)"
printf '%s\n' "${summary[@]}"
# first_run_output BUILD_DIR NAME: the end of what the failing run printed (ctest's LastTest.log keeps each
# test's output between "Test: NAME" and "<end of output>").
first_run_output() {
  awk -v name="$2" 'index($0, "Test: " name) && substr($0, length($0) - length(name) + 1) == name { on = 1; next }
                    on && /^<end of output>/ { exit } on { print }' "$1/Testing/Temporary/LastTest.log" | tail -n 80
}
for t in "${failed_tests[@]}"; do
  echo "== failed: ${t#* } (${t%% *}); the end of its output:"
  first_run_output "${t%% *}" "${t#* }"
done
for t in "${failed_tests[@]}"; do  # after all of the above: a rerun rewrites LastTest.log
  echo "== failed: ${t#* } (${t%% *}); run once more:"
  ctest --test-dir "${t%% *}" -R "^${t#* }\$" --output-on-failure 2>&1 | tail -n 60
done
exit $failed

#!/usr/bin/env bash
# soak.sh [MINUTES] [soak.py options...]: the long CPU soak, one command. Builds sluiced (cpu preset) if needed,
# then runs scripts/soak.py for MINUTES (default 30) on the CPU: 8 test-pattern sources, a reload every 30 s,
# a source added/removed every 10 s, 4 polling clients, samples every 5 s. Bounded: killed 10 minutes after
# its duration at the latest. Results: build/soak-DATE/ (samples.csv, summary.json, summary.txt, sluiced.log).
# The GPU host runs the same script against its build: python3 scripts/soak.py --sluiced build-gpu/sluiced
# --duration 480 --device auto (bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
shift || true
case $minutes in '' | *[!0-9]*) echo "soak.sh: MINUTES must be a whole number, got '$minutes'" >&2; exit 2 ;; esac
bash scripts/setup.sh >&2
cmake --preset cpu >&2
cmake --build build/cpu -j "$(nproc)" --target sluiced >&2
out=build/soak-$(date -u +%Y%m%d-%H%M%S)
seconds=$((minutes * 60))
exec timeout --kill-after=30 $((seconds + 600)) python3 scripts/soak.py --sluiced build/cpu/sluiced --device cpu \
  --duration "$seconds" --out "$out" "$@"

#!/usr/bin/env bash
# device-soak.sh OUT_DIR [SECONDS]: on a GPU host (gpu-host build bundled into .gpu/: bench/README.md), the
# service soak on the GPU: scripts/soak.py for SECONDS (default 480) with 16 test-pattern sources on CUDA, a
# reload every 30 s, a source added and removed every 10 s, polling control clients; RSS, fds, threads, device
# memory and the frame ledger sampled every 5 s. Logs and samples go to OUT_DIR/soak; exits as soak.py does.
set -uo pipefail
out=${1:?usage: device-soak.sh OUT_DIR [SECONDS]}
seconds=${2:-480}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
PYTHONUNBUFFERED=1 python3 scripts/soak.py --sluiced ".gpu/run bin/sluiced" --device cuda --duration "$seconds" \
  --sources 16 --fps 60 --size 640x480 --batch 16 --reload-every 30 --churn-every 10 --clients 4 --out "$out/soak"

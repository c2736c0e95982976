#!/usr/bin/env bash
# run-gpu.sh OUT_DIR [REPEATS]: the GPU data path figures, sluice and the PyTorch recipe side by side in
# one run on a GPU host (bundle first: see bench/README.md). Alternates the two so drift hits both alike.
set -uo pipefail
out=${1:?usage: run-gpu.sh OUT_DIR [REPEATS]}; repeats=${2:-5}
mkdir -p "$out"
py=
for cand in python3 /opt/*/.venv/bin/python3; do
  "$cand" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && { py=$cand; break; }
done
[ -n "$py" ] || echo "run-gpu: no python with CUDA torch found; PyTorch figures skipped" >&2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader >"$out/gpu.txt"
status=0
for fmt in bgr8 nv12; do
  for r in $(seq 1 "$repeats"); do
    trace=(); [ "$r" = 1 ] && trace=(--trace "$out/trace-$fmt.json")
    .gpu/run bin/sluiced bench "config/pipelines/bench-1080p-$fmt.yaml" --batches 200 --warmup 20 \
      --json "$out/sluice-$fmt-$r.json" "${trace[@]}" >"$out/sluice-$fmt-$r.log" 2>&1 || status=1
    tail -n 16 "$out/sluice-$fmt-$r.log"
    if [ -n "$py" ] && [ "$r" = 1 ]; then
      extra=(); [ "$fmt" = nv12 ] && extra=(--nv12-path resize-first)
      "$py" bench/torch_recipe.py --format "$fmt" --batch 32 --streams 2 --repeats "$repeats" "${extra[@]}" \
        --json "$out/torch-$fmt.json" 2>"$out/torch-$fmt.log" || status=1
      tail -n 12 "$out/torch-$fmt.log"
    fi
  done
done
[ -x .gpu/bin/preprocess_bench ] && .gpu/run bin/preprocess_bench >"$out/preprocess_bench.log" 2>&1 && cat "$out/preprocess_bench.log"
"${py:-python3}" bench/summarise.py "$out" | tee "$out/summary.md"
exit $status

#!/usr/bin/env python3
"""summarise.py OUT_DIR: medians and spreads of run-gpu.sh's JSON files, as a markdown table."""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
rows = []
for fmt in ("bgr8", "nv12"):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"sluice-{fmt}-*.json")))]
    if not runs:
        continue
    def med(key, mode="pipelined"):
        vals = [r[mode][key] for r in runs]
        return statistics.median(vals), min(vals), max(vals)
    pipe, pmin, pmax = med("fps")
    serial, smin, smax = med("fps", "serial")
    bound = statistics.median(r["bound"]["fps"] for r in runs)
    cores = statistics.median(r["pipelined"]["gpu_stages_cpu_cores"] for r in runs)
    torch_fps = torch_bound = None
    tp = os.path.join(out, f"torch-{fmt}.json")
    if os.path.exists(tp):
        t = json.load(open(tp))
        torch_fps, torch_bound = t.get("fps_median"), t.get("h2d_bound_fps_median")
    rows.append((fmt, len(runs), pipe, pmin, pmax, serial, smin, smax, bound, cores, torch_fps, torch_bound))

machine = json.load(open(sorted(glob.glob(os.path.join(out, "sluice-*.json")))[0]))["machine"] if rows else {}
print(f"machine: {machine.get('gpu')} on {machine.get('host')} ({machine.get('cpu')}, {machine.get('cpu_cores')} cores)\n")
print("| input | runs | sluice pipelined fps (min-max) | sluice serial fps (min-max) | bound fps (upload alone) | pipelined/bound | CPU of GPU stages (cores) | torch 2-stream fps | torch H2D bound fps | sluice/torch |")
print("|---|---|---|---|---|---|---|---|---|---|")
for fmt, n, p, pmin, pmax, s, smin, smax, b, c, tf, tb in rows:
    ratio = f"{p / tf:.2f}x" if tf else "-"
    print(f"| 1080p {fmt} | {n} | {p:.0f} ({pmin:.0f}-{pmax:.0f}) | {s:.0f} ({smin:.0f}-{smax:.0f}) | {b:.0f} | "
          f"{100 * p / b:.1f}% | {c:.2f} | {tf and round(tf) or '-'} | {tb and round(tb) or '-'} | {ratio} |")
if len(rows) == 2:
    print(f"\nnv12 / bgr8 (sluice pipelined): {rows[1][2] / rows[0][2]:.2f}x")

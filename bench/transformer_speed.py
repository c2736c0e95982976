# Issue 13 part 4: sluiced (CUDA graph replay, f16) against PyTorch eager f16 and torch.compile(mode=
# "reduce-overhead") f16 on the same weights and batch, on the GPU host, alternating rounds in one run.
# usage: python3 bench/transformer_speed.py RUN OUTDIR BATCH NAME...   (RUN: the gpu-bundle wrapper)
import json, os, subprocess, sys, time, warnings
import torch, torchvision
warnings.filterwarnings("ignore")
run, out, batch, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
rounds = int(os.environ.get("ROUNDS", "3"))
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)

def cuda_ms(fn, x, warm=5, reps=30):
    with torch.inference_mode():
        for _ in range(warm): fn(x)
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(x); b.record(); torch.cuda.synchronize(); times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]

results = {}
for name in names:
    m = getattr(torchvision.models, name)(weights=None).eval()
    path = f"{out}/{name}.onnx"
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), path, opset_version=17, dynamo=False, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    m = m.cuda().half()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half)
    t0 = time.time()
    compiled = torch.compile(m, mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(3): compiled(x)
    torch.cuda.synchronize()
    r = results[name] = {"batch": batch, "compile_s": round(time.time() - t0, 1), "sluice_ms": [], "eager_ms": [],
                         "compile_ms": []}
    for _ in range(rounds):
        p = subprocess.run([run, "bin/sluiced", "model", path, "--device", "cuda", "--precision", "f16", "--batch",
                            str(batch), "--bench", "--iterations", "30", "--json", f"{out}/{name}.bench.json"],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            r["sluice_error"] = p.stderr[-400:]; break
        r["sluice_ms"].append(json.load(open(f"{out}/{name}.bench.json")).get("single", {}).get("median_ms"))
        r["eager_ms"].append(cuda_ms(m, x))
        r["compile_ms"].append(cuda_ms(compiled, x))
    if r["sluice_ms"]:
        med = lambda v: sorted(v)[len(v) // 2]
        r["compile_over_sluice"] = round(med(r["compile_ms"]) / med(r["sluice_ms"]), 3)
        r["eager_over_sluice"] = round(med(r["eager_ms"]) / med(r["sluice_ms"]), 3)
    print(name, json.dumps(r), flush=True)
    json.dump(results, open(f"{out}/speed.json", "w"), indent=1)

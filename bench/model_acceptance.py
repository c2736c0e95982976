# Issue 13's acceptance models on the GPU host (bench/results/h200-2026-12-02-ops): torchvision models (seeded
# random weights, BatchNorm statistics measured on a random batch) exported at opset 17 by torch 2.x's TorchScript
# exporter; `sluiced model` on the CPU (f32) and on CUDA (f32, f16) against PyTorch's f32 output, relative error
# max|got - want| / max|want|.
#   usage: python3 bench/model_acceptance.py RUN OUTDIR NAME...
# RUN runs "RUN bin/sluiced ..." (the gpu-bundle wrapper .gpu/run). BENCH=a,b also times those models at batch 32
# f16 against PyTorch eager f16 on the same weights; DIAG=a,b also runs them with each --conv-modes and bf16.
# NAME:backbone and NAME:head (DeepLab only): the net without its head, or without its final upsampling.
# With CUDA, torch_cuda_f16 is PyTorch's own f16 error on the same input (what f16 costs the net anyway).
import json, os, subprocess, sys, time, warnings
import numpy as np, torch, torchvision
warnings.filterwarnings("ignore")
run, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)

class Seg(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, x): return self.m(x)["out"]

class DetrEncoder(torch.nn.Module):  # DETR's encoder shape: 6 layers in DETR, 2 here; tokens from a conv stem
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 256, 16, 16)
        layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)
        return self.enc(t)

def calibrate_batchnorm(m, batch):
    """BatchNorm running statistics measured on a random batch (as training would leave them), so activations
    keep their scale through deep nets: with untouched statistics (mean 0, var 1) some nets blow up to 1e4+,
    where f32 itself drifts from f64 by tens of percent and no comparison means anything."""
    bns = [b for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    for b in bns: b.reset_running_stats(); b.momentum = None
    m.train()
    with torch.no_grad(): m(batch)
    m.eval()

class SegPart(torch.nn.Module):  # DeepLab in parts, to find where f16 goes wrong: its backbone, or no final upsample
    def __init__(self, m, part): super().__init__(); self.m, self.part = m, part
    def forward(self, x):
        f = self.m.backbone(x)["out"]
        return f if self.part == "backbone" else self.m.classifier(f)

def build(name):
    if name == "detr_encoder": return DetrEncoder()
    for part in ("backbone", "head"):  # e.g. deeplabv3_resnet50:backbone
        if name.endswith(":" + part):
            return SegPart(getattr(torchvision.models.segmentation, name.split(":")[0])(weights=None, weights_backbone=None), part)
    if "deeplab" in name: return Seg(getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None))
    return getattr(torchvision.models, name)(weights=None)

results, models = {}, {}
for name in names:
    r = results[name] = {}
    try:
        m = build(name)
        calibrate_batchnorm(m, torch.randn(8, 3, 224, 224))
        if name.startswith("vit"):  # torchvision zero-initializes the head: the output would be all zeros
            with torch.no_grad(): m.heads.head.weight.normal_(0, 0.05)
        x = torch.randn(2, 3, 224, 224)
        models[name] = m
        with torch.no_grad(): want = m(x).numpy()
        r["output_max"] = float(np.abs(want).max())
        if torch.cuda.is_available():  # PyTorch's own f16 error on the GPU: what f16 costs this net anyway
            import copy
            with torch.no_grad(): own = copy.deepcopy(m).cuda().half()(x.cuda().half()).float().cpu().numpy()
            r["torch_cuda_f16"] = float(np.abs(own - want).max() / np.abs(want).max())
        path = f"{out}/{name.replace(':', '-')}.onnx"
        t0 = time.time()
        torch.onnx.export(m, x, path, opset_version=17, dynamo=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        r["export_s"] = round(time.time() - t0, 1)
        np.save(f"{out}/{name.replace(':', '-')}.in.npy", x.numpy())
    except Exception as e:
        r["export"] = str(e)[:300]; print(name, r, flush=True); continue
    runs = [("cpu", "f32", []), ("cuda", "f32", []), ("cuda", "f16", [])]
    if name in os.environ.get("DIAG", "").split(","):  # which way of running convolutions goes wrong in f16
        runs += [("cuda", "f16", ["--conv-modes", mode]) for mode in ("fused", "separate", "gemm")]
        runs += [("cuda", "f16", ["--conv-modes", "separate", "--conv-modes", "depthwise"])]  # the own kernel
        runs += [("cuda", "bf16", [])]
    for dev, prec, extra in runs:
        got_path = f"{out}/{name.replace(':', '-')}.{dev}.{prec}.npy"
        p = subprocess.run([run, "bin/sluiced", "model", path, "--device", dev, "--precision", prec, "--input",
                            f"{out}/{name.replace(':', '-')}.in.npy", "--output", got_path] + extra, capture_output=True, text=True,
                           timeout=300)
        key = f"{dev}_{prec}" + "".join("_" + e for e in extra if not e.startswith("--"))
        if p.returncode != 0:
            r[key] = "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:300]
        else:
            got = np.load(got_path)
            r[key] = float(np.abs(got - want).max() / np.abs(want).max())
    print(name, json.dumps(r), flush=True)
json.dump(results, open(f"{out}/acceptance.json", "w"), indent=1)

# Speed (f16, batch 32, CUDA): sluiced model --bench (CUDA graph replay, median of single runs) against PyTorch
# eager f16 on the same weights, timed with CUDA events; alternating rounds.
bench = [n for n in names if os.environ.get("BENCH") and n in os.environ["BENCH"].split(",")]
for name in bench:
    m = models[name].cuda().half()  # the weights sluiced runs (exported above)
    x = torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.half)
    rounds = {"sluice_ms": [], "torch_eager_ms": []}
    for _ in range(3):
        p = subprocess.run([run, "bin/sluiced", "model", f"{out}/{name}.onnx", "--device", "cuda", "--precision", "f16",
                            "--batch", "32", "--bench", "--iterations", "30", "--json", f"{out}/{name}.bench.json"],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            rounds["sluice_ms"].append(None); print(name, "bench failed", p.stderr[-300:], flush=True); break
        j = json.load(open(f"{out}/{name}.bench.json"))
        rounds["sluice_ms"].append(j.get("single", {}).get("median_ms"))
        times = []
        with torch.inference_mode():
            for _ in range(5): m(x)
            for _ in range(30):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); m(x); b.record(); torch.cuda.synchronize(); times.append(a.elapsed_time(b))
        rounds["torch_eager_ms"].append(sorted(times)[len(times) // 2])
    results[name]["bench_b32_f16"] = rounds
    print(name, "bench", json.dumps(rounds), flush=True)
json.dump(results, open(f"{out}/acceptance.json", "w"), indent=1)

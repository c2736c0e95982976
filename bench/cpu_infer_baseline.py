#!/usr/bin/env python3
"""CPU inference baseline for sluice's CPU backend: ONNX Runtime's CPU provider on the same ONNX file.

  --export DIR   writes DIR/NAME.onnx (torchvision NAME, seeded random weights, BatchNorm statistics
                 calibrated on random images so activations are realistic, opset 17, dynamic batch, input
                 "image", output "logits") and DIR/NAME.input.npy (--batch images, seeded)
  --ort DIR      times onnxruntime.InferenceSession(DIR/NAME.onnx, CPUExecutionProvider, all graph
                 optimisations, intra-op threads = --threads or ONNX Runtime's default: one per physical core)
                 on DIR/NAME.input.npy: --warmup runs, then --iterations timed runs; prints and writes
                 DIR/NAME.ort.json (median/min/max ms per batch, items/s) and DIR/NAME.ort.npy (the output), which
                 bench/compare_npy.py compares with `sluiced model ... --output`.
  --torch DIR    the same for PyTorch on the CPU (the model rebuilt as --export made it, eval mode,
                 torch.inference_mode, --threads or torch's default): DIR/NAME.torch.json and .torch.npy.
"""
import argparse
import inspect
import json
import os
import statistics
import time

import numpy as np

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--model", default="resnet50", help="torchvision model name (resnet50, mobilenet_v2, ...)")
p.add_argument("--batch", type=int, default=8)
p.add_argument("--size", type=int, default=224)
p.add_argument("--export", metavar="DIR")
p.add_argument("--ort", metavar="DIR")
p.add_argument("--torch", metavar="DIR")
p.add_argument("--threads", type=int, default=0)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--iterations", type=int, default=30)
a = p.parse_args()

def build_model():
    """torchvision's a.model with seeded random weights and BatchNorm statistics from random images (so that
    activations keep their scale), in eval mode: the same network on every call."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(weights=None)
    # torchvision starts some heads at zero (ViT's): logits all 0 would make comparing outputs check nothing.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                torch.nn.init.normal_(m.weight, std=0.02)
    # Without BatchNorm (ViT, Swin) there is nothing to calibrate: skip four slow batches of 16.
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(16, 3, a.size, a.size))
    return model.eval()


def report(engine, version, x, ms, y, directory):
    np.save(os.path.join(directory, "%s.%s.npy" % (a.model, engine)), y)
    result = {"model": a.model, "batch": len(x), engine: version, "threads": a.threads or "default",
              "median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
              "items_per_s": len(x) * 1000.0 / statistics.median(ms)}
    with open(os.path.join(directory, "%s.%s.json" % (a.model, engine)), "w") as f:
        json.dump(result, f, indent=1)
    print("%s %s cpu %s batch %d: %.2f ms per batch (median; min %.2f, max %.2f) = %.0f items/s" % (
        engine, version, a.model, len(x), result["median_ms"], result["min_ms"], result["max_ms"],
        result["items_per_s"]))


def timed(run, x):
    for _ in range(a.warmup):
        y = run(x)
    ms = []
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        y = run(x)
        ms.append((time.perf_counter() - t0) * 1000.0)
    return ms, y


if a.export:
    import torch
    import torchvision

    model = build_model()
    os.makedirs(a.export, exist_ok=True)
    path = os.path.join(a.export, a.model + ".onnx")
    kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(model, torch.randn(1, 3, a.size, a.size), path, opset_version=17, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, **kwargs)
    rng = np.random.default_rng(1)
    np.save(os.path.join(a.export, a.model + ".input.npy"),
            rng.standard_normal((a.batch, 3, a.size, a.size), dtype=np.float32))
    print("wrote %s (torch %s, torchvision %s)" % (path, torch.__version__, torchvision.__version__))

if a.ort:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if a.threads:
        options.intra_op_num_threads = a.threads
    session = ort.InferenceSession(os.path.join(a.ort, a.model + ".onnx"), options, providers=["CPUExecutionProvider"])
    x = np.load(os.path.join(a.ort, a.model + ".input.npy"))
    name = session.get_inputs()[0].name
    ms, y = timed(lambda batch: session.run(None, {name: batch})[0], x)
    report("ort", ort.__version__, x, ms, y, a.ort)

if a.torch:
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    model = build_model()
    x = np.load(os.path.join(a.torch, a.model + ".input.npy"))

    def forward(batch):
        with torch.inference_mode():
            return model(torch.from_numpy(batch)).numpy()

    ms, y = timed(forward, x)
    report("torch", torch.__version__, x, ms, y, a.torch)

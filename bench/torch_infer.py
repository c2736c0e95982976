#!/usr/bin/env python3
"""PyTorch inference baseline that sluice's infer stage is compared against: ResNet-50 on the GPU.

What a competent engineer would do with stock PyTorch to make a CNN fast, no TensorRT:

  model    torchvision ResNet-50, random weights (seeded), eval mode, f16, channels_last (NHWC) weights and input,
           torch.backends.cudnn.benchmark = True (cuDNN picks the fastest algorithm per layer shape)
  eager    model(x) under torch.inference_mode() on a side stream
  graph    the same forward captured once into a torch.cuda.CUDAGraph and replayed (no per-layer launch cost)
  timing   device-resident input, no copies. Throughput: --batch (256) items per forward; --warmup forwards,
           then --repeats timed runs of --iters forwards each, timed with CUDA events; img/s median and
           min-max over the runs. Latency: batch 1, --latency-iters forwards each timed alone with CUDA
           events; ms median and p90.
  check    graph replay output == eager output (same kernels, so equal up to cuDNN's algorithm choice)

--export PATH writes the identical network (same seed, f32 weights) as ONNX (opset 17, dynamic batch, input
"image", output "logits", dynamo=False) so sluice loads exactly what PyTorch runs here; with --export only,
nothing is timed. Works on PyTorch 1.13 .. 2.x; --device cpu runs one small smoke pass (eager only).
"""

import argparse
import inspect
import json
import os
import platform
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recipe import log, versions  # noqa: E402 - the same reporting as the data path baseline

SEED = 0



def build_resnet50():
    torch.manual_seed(SEED)
    builder = torchvision.models.resnet50
    model = builder(weights=None) if "weights" in inspect.signature(builder).parameters else builder(pretrained=False)
    return model.eval()


def export_onnx(model, path, size):
    kwargs = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    example = torch.zeros(1, 3, size, size)
    torch.onnx.export(model, example, path, opset_version=17, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True, **kwargs)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


class Runner:
    """One input batch on the device, and a forward either eager or as a captured CUDA graph."""

    def __init__(self, model, batch, size, dtype, device, use_graph):
        self.model, self.device = model, device
        g = torch.Generator().manual_seed(SEED + batch)
        x = torch.randn(batch, 3, size, size, generator=g).to(device=device, dtype=dtype)
        self.x = x.contiguous(memory_format=torch.channels_last) if device.type == "cuda" else x
        self.graph = None
        self.stream = None
        if device.type == "cuda":
            self.stream = torch.cuda.Stream(device=device)
            torch.cuda.synchronize(device)  # the input, made on the default stream, is ready for the side stream
        if use_graph:
            self._capture()

    def _capture(self):
        # Warm up on a side stream first (cudnn.benchmark measures here, outside the capture), as the
        # torch.cuda.graphs documentation asks.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            for _ in range(3):
                self.model(self.x)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.y = self.model(self.x)

    def forward(self):
        if self.graph is not None:
            self.graph.replay()
            return self.y
        if self.stream is None:
            return self.model(self.x)
        with torch.cuda.stream(self.stream):
            return self.model(self.x)

    def current(self):
        return self.stream if self.graph is None else torch.cuda.current_stream(self.device)


def time_throughput(runner, warmup, repeats, iters, batch):
    for _ in range(warmup):
        runner.forward()
    torch.cuda.synchronize(runner.device)
    rates = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream = runner.current()
        start.record(stream)
        for _ in range(iters):
            runner.forward()
        end.record(stream)
        end.synchronize()
        rates.append(iters * batch / (start.elapsed_time(end) / 1e3))
    return {"img_per_s_median": statistics.median(rates), "img_per_s_min": min(rates), "img_per_s_max": max(rates),
            "img_per_s_all": rates, "repeats": repeats, "iters_per_repeat": iters}


def time_latency(runner, warmup, iters):
    for _ in range(warmup):
        runner.forward()
    torch.cuda.synchronize(runner.device)
    times = []
    stream = runner.current()
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        runner.forward()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return {"ms_median": statistics.median(times), "ms_p90": percentile(times, 90), "ms_min": min(times),
            "iters": iters}


def run_cuda(a, device):
    torch.backends.cudnn.benchmark = True
    dtype = torch.float16 if a.dtype == "f16" else torch.float32
    model = build_resnet50().to(device=device, dtype=dtype).to(memory_format=torch.channels_last)
    res = {"config": {"model": "resnet50 (torchvision, random weights, seed %d)" % SEED, "dtype": a.dtype,
                      "memory_format": "channels_last", "cudnn_benchmark": True, "size": a.size, "batch": a.batch,
                      "warmup": a.warmup, "repeats": a.repeats, "iters": a.iters, "latency_iters": a.latency_iters,
                      "input": "device-resident, no copies"}}
    for mode in ("eager", "graph"):
        t = time.perf_counter()
        runner = Runner(model, a.batch, a.size, dtype, device, use_graph=mode == "graph")
        res[mode] = {"batch%d" % a.batch: time_throughput(runner, a.warmup, a.repeats, a.iters, a.batch)}
        if mode == "graph":
            eager = model(runner.x)
            graph = runner.forward()
            torch.cuda.synchronize(device)
            res["graph_vs_eager_max_abs_diff"] = float((graph.float() - eager.float()).abs().max())
        del runner
        single = Runner(model, 1, a.size, dtype, device, use_graph=mode == "graph")
        res[mode]["batch1"] = time_latency(single, a.warmup, a.latency_iters)
        del single
        tp, lat = res[mode]["batch%d" % a.batch], res[mode]["batch1"]
        log("  %-5s batch %d: %8.0f img/s median (min %.0f, max %.0f);  batch 1: %.3f ms median, p90 %.3f ms  "
            "(%.0f s)" % (mode, a.batch, tp["img_per_s_median"], tp["img_per_s_min"], tp["img_per_s_max"],
                          lat["ms_median"], lat["ms_p90"], time.perf_counter() - t))
    return res


def run_cpu(a, device):
    model = build_resnet50()
    runner = Runner(model, 2, a.size, torch.float32, device, use_graph=False)
    t = time.perf_counter()
    y = runner.forward()
    seconds = time.perf_counter() - t
    log("  cpu smoke pass: batch 2 -> %s in %.2f s" % (list(y.shape), seconds))
    return {"config": {"model": "resnet50", "dtype": "f32", "size": a.size, "batch": 2},
            "cpu_smoke": {"seconds": seconds, "output_shape": list(y.shape)}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device index")
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    p.add_argument("--size", type=int, default=224, help="input height and width")
    p.add_argument("--batch", type=int, default=256, help="throughput batch")
    p.add_argument("--warmup", type=int, default=10, help="untimed forwards before each measurement")
    p.add_argument("--repeats", type=int, default=7, help="timed throughput runs")
    p.add_argument("--iters", type=int, default=10, help="forwards per timed throughput run")
    p.add_argument("--latency-iters", type=int, default=200, help="batch-1 forwards, each timed alone")
    p.add_argument("--export", metavar="PATH", help="write the same ResNet-50 (f32 weights) as ONNX to PATH and exit")
    p.add_argument("--json", metavar="PATH", help="write the result as a JSON object to PATH")
    a = p.parse_args(argv)
    if min(a.size, a.batch, a.repeats, a.iters, a.latency_iters) < 1 or a.warmup < 0:
        p.error("sizes and counts must be positive")

    if a.export:
        export_onnx(build_resnet50(), a.export, a.size)
        log("wrote %s: torchvision resnet50, seed %d, opset 17, input image [batch,3,%d,%d], output logits"
            % (a.export, SEED, a.size, a.size))
        return 0

    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device visible")
    device = torch.device("cuda", a.gpu) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    log("torch_infer: resnet50 %s on %s, batch %d and 1, %dx%d" % (a.dtype, device, a.batch, a.size, a.size))
    grad_off = torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()
    with grad_off:
        res = run_cuda(a, device) if device.type == "cuda" else run_cpu(a, device)
    res["host"] = platform.node()
    res.update(versions(device))
    log("  torch %s, CUDA %s, cuDNN %s, %s" % (res["torch_version"], res["cuda_version"], res["cudnn_version"],
                                              res["gpu_name"] or "cpu"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

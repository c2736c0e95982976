#!/usr/bin/env python3
"""The PyTorch way of a secondary classifier on detected boxes, for comparison with sluice's classify_boxes stage.

Per batch of BATCH 1080p BGR frames already on the GPU (uint8, as sluice's upload leaves them) and the boxes of each
frame: frames to float RGB NCHW (f16), torchvision.ops.roi_align of every box to 224x224 (aligned=True, bilinear,
one sample per bin: the same resize sluice does), (x/255 - mean)/std, ResNet-18 f16 replayed as a CUDA graph, top-1.
GPU time per batch with CUDA events (median of --iterations after warm-up); the same ResNet-18 weights are exported to
ONNX for sluice (--export).
  usage: sgie_baseline.py --export OUT.onnx | --time [--batch 16] [--boxes-per-frame 2] [--iterations 200]
"""
import argparse, json, statistics
import torch, torchvision

p = argparse.ArgumentParser()
p.add_argument("--export")
p.add_argument("--time", action="store_true")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--boxes-per-frame", type=int, default=2)
p.add_argument("--iterations", type=int, default=200)
a = p.parse_args()
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10).eval()
if a.export:
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), a.export, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17, dynamo=False)
    print("exported", a.export)
if a.time:
    dev = "cuda"
    n = a.batch * a.boxes_per_frame
    frames = torch.randint(0, 256, (a.batch, 1080, 1920, 3), dtype=torch.uint8, device=dev)
    # The boxes the shipped detector finds in sluice's 1080p shapes picture (bench/results/...classify-boxes).
    base = [[1296.25, 3.9, 1521.25, 229.8], [0.0, 273.1, 152.8, 485.6]]
    rois = torch.tensor([[i] + base[j % 2] for i in range(a.batch) for j in range(a.boxes_per_frame)], device=dev)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev, dtype=torch.half).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev, dtype=torch.half).view(1, 3, 1, 1)
    net = model.to(dev).half()
    static_in = torch.zeros(n, 3, 224, 224, device=dev, dtype=torch.half)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.inference_mode():
        for _ in range(3): net(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.inference_mode():
        static_out = net(static_in)

    def step():
        with torch.inference_mode():
            x = frames.flip(-1).permute(0, 3, 1, 2).half()  # BGR -> RGB, NCHW, f16
            crops = torchvision.ops.roi_align(x, rois.half(), (224, 224), spatial_scale=1.0, sampling_ratio=1, aligned=True)
            static_in.copy_((crops / 255 - mean) / std)
            g.replay()
            return static_out.argmax(1)

    for _ in range(20): step()
    times = []
    for _ in range(a.iterations):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); step(); e1.record(); torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    print(json.dumps({"torch": torch.__version__, "batch": a.batch, "crops": n, "median_ms": statistics.median(times),
                      "min_ms": min(times), "max_ms": max(times)}))

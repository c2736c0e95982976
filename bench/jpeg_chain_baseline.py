#!/usr/bin/env python3
"""The hand-written loop a user would write instead of sluice for a folder of JPEGs -> ResNet-50 -> JSON lines:

  read     file bytes read ahead by 8 threads (torchvision.io.read_file)
  decode   torchvision.io.decode_jpeg(list of BATCH files, device="cuda"): nvJPEG's batched GPU decode
  resize   the batch stacked (all files share one size), bilinear to SIZE x SIZE on the GPU, ImageNet
           mean/std, f16 channels_last
  infer    torchvision ResNet-50 f16 (the same seeded network bench/torch_infer.py exports for sluice),
           softmax, top-5, D2H
  sink     one JSON line per image (file, top-5 classes and scores) to OUT, flushed per batch

    jpeg_chain_baseline.py OUT.jsonl FILE...   [--batch 32] [--size 224] [--warmup-batches 3]

Prints one JSON line: images, seconds and images/s after the warm-up batches, and the CPU this process used
over the same window (cores = CPU seconds / wall seconds).
"""
import argparse
import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("files", nargs="+")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--warmup-batches", type=int, default=3)
    a = p.parse_args()

    import torch
    import torch.nn.functional as F
    import torchvision
    import torch_infer

    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    model = torch_infer.build_resnet50().to(dev).half().to(memory_format=torch.channels_last)
    mean = (torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255).half()
    std = (torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255).half()
    batches = [a.files[i:i + a.batch] for i in range(0, len(a.files), a.batch)]
    images, t0, c0, n0 = 0, None, None, 0
    with ThreadPoolExecutor(8) as pool, open(a.out, "w") as out, torch.inference_mode():
        pending = [pool.map(torchvision.io.read_file, b) for b in batches[:2]]
        for k, paths in enumerate(batches):
            if k == a.warmup_batches:
                torch.cuda.synchronize()
                t0, c0, n0 = time.perf_counter(), cpu_seconds(), images
            data = list(pending.pop(0))
            if k + 2 < len(batches):
                pending.append(pool.map(torchvision.io.read_file, batches[k + 2]))
            decoded = torchvision.io.decode_jpeg(data, device=dev)  # RGB, CHW, uint8
            x = torch.stack(decoded).half()
            x = F.interpolate(x, size=(a.size, a.size), mode="bilinear", align_corners=False)
            x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
            scores, classes = torch.softmax(model(x).float(), dim=1).topk(5, dim=1)
            scores, classes = scores.cpu().numpy(), classes.cpu().numpy()
            for j, path in enumerate(paths):
                out.write(json.dumps({"file": path, "classes": classes[j].tolist(),
                                      "scores": [round(float(v), 5) for v in scores[j]]}) + "\n")
            out.flush()
            images += len(paths)
    if t0 is None:
        sys.exit("fewer batches than the warm-up")
    seconds = time.perf_counter() - t0
    print(json.dumps({"baseline": "torchvision.io.decode_jpeg(device=cuda) + torch ResNet-50 f16",
                      "images": images, "measured_images": images - n0, "seconds": round(seconds, 3),
                      "fps": round((images - n0) / seconds, 1),
                      "cpu_cores": round((cpu_seconds() - c0) / seconds, 2)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The hand-written loop a user would write instead of sluice for video files -> ResNet-50 -> JSON lines:

  decode   P processes, each with cv2.VideoCapture (FFmpeg inside) over its share of the files; each frame
           resized on the CPU to SIZE x SIZE (cv2.resize, INTER_LINEAR) and turned to RGB there, so only
           150 KB per frame crosses to the main process (a shared-memory ring of slots, no pickling of
           frames)
  infer    main process: batches of BATCH frames, pinned host tensor -> GPU (non_blocking), NHWC u8 ->
           f16 normalised (ImageNet mean/std), torchvision ResNet-50 f16 channels_last (the same seeded
           network bench/torch_infer.py exports for sluice), softmax, top-5, D2H
  sink     one JSON line per frame (file, frame index, top-5 classes and scores) to OUT, flushed per batch

    video_chain_baseline.py OUT.jsonl PROCESSES FILE...   [--batch 32] [--size 224] [--warmup-frames 320]

Prints one JSON line: frames, seconds and frames/s after the warm-up frames, and the CPU the whole process
tree used over the whole run (cores = CPU seconds / wall seconds from the workers' start to their end).
"""
import argparse
import json
import multiprocessing as mp
import os
import queue
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def decoder(files, size, nslots, slots, free_q, ready_q, worker):
    import cv2
    cv2.setNumThreads(1)
    buf = np.ndarray((nslots, size, size, 3), dtype=np.uint8, buffer=slots.get_obj())
    for path in files:
        cap = cv2.VideoCapture(path)
        index = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            slot = free_q.get()
            small = cv2.resize(frame, (size, size), interpolation=cv2.INTER_LINEAR)
            buf[slot] = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
            ready_q.put((slot, path, index))
            index += 1
        cap.release()
    ready_q.put((-1, worker, 0))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("processes", type=int)
    p.add_argument("files", nargs="+")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--warmup-frames", type=int, default=320)
    a = p.parse_args()

    nslots = a.processes * 8 + 2 * a.batch
    slots = mp.Array("B", nslots * a.size * a.size * 3)
    buf = np.ndarray((nslots, a.size, a.size, 3), dtype=np.uint8, buffer=slots.get_obj())
    free_q, ready_q = mp.Queue(), mp.Queue()
    for i in range(nslots):
        free_q.put(i)
    shares = [a.files[i::a.processes] for i in range(a.processes)]
    workers = [mp.Process(target=decoder, args=(shares[i], a.size, nslots, slots, free_q, ready_q, i))
               for i in range(a.processes) if shares[i]]
    for w in workers:  # forked before CUDA is touched in this process
        w.start()
    import torch
    import torch_infer

    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    model = torch_infer.build_resnet50().to(dev).half().to(memory_format=torch.channels_last)
    mean = (torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255).half()
    std = (torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255).half()
    with torch.inference_mode():  # cuDNN picks its algorithms before the clock starts
        for _ in range(3):
            model(torch.zeros(a.batch, 3, a.size, a.size, device=dev, dtype=torch.half).to(memory_format=torch.channels_last))
    torch.cuda.synchronize()

    host = torch.empty((a.batch, a.size, a.size, 3), dtype=torch.uint8).pin_memory()
    t_start, c_start = time.perf_counter(), cpu_seconds()
    running, frames, t0 = len(workers), 0, None
    with open(a.out, "w") as out, torch.inference_mode():
        while running:
            metas = []
            while len(metas) < a.batch and running:
                try:
                    slot, path, index = ready_q.get(timeout=60)
                except queue.Empty:
                    sys.exit("no frame for 60 s: a decode process died (see its traceback above)")
                if slot < 0:
                    running -= 1
                    continue
                host[len(metas)].copy_(torch.from_numpy(buf[slot]))
                free_q.put(slot)
                metas.append((path, index))
            if not metas:
                break
            n = len(metas)
            x = host[:n].to(dev, non_blocking=True).permute(0, 3, 1, 2).half()
            x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
            scores, classes = torch.softmax(model(x).float(), dim=1).topk(5, dim=1)
            scores, classes = scores.cpu().numpy(), classes.cpu().numpy()
            for k, (path, index) in enumerate(metas):
                out.write(json.dumps({"file": path, "frame": index, "classes": classes[k].tolist(),
                                      "scores": [round(float(v), 5) for v in scores[k]]}) + "\n")
            out.flush()
            frames += n
            if t0 is None and frames >= a.warmup_frames:
                t0, f0 = time.perf_counter(), frames
    for w in workers:
        w.join()
    t1 = time.perf_counter()
    c1 = cpu_seconds()
    if t0 is None:
        sys.exit("the run ended before its warm-up did")
    seconds = t1 - t0
    print(json.dumps({"baseline": "cv2.VideoCapture x%d + torch ResNet-50 f16" % a.processes, "files": len(a.files),
                      "frames": frames, "measured_frames": frames - f0, "seconds": round(seconds, 3),
                      "fps": round((frames - f0) / seconds, 1), "cpu_cores": round((c1 - c_start) / (t1 - t_start), 2),
                      "total_seconds": round(t1 - t_start, 3)}))


if __name__ == "__main__":
    main()

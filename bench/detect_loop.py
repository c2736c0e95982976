#!/usr/bin/env python3
"""The hand-written PyTorch loop a user would write instead of sluice for 1080p frames -> YOLO detector -> NMS ->
tracker -> JSON lines (issue 14 part 8), compared with config/pipelines/bench-1080p-yolov8s.yaml in the same run:

  source   the benchmark's frames (FRAMES.npy, [K, 1080, 1920, 3] u8 BGR, dumped by sluiced from the same test
           pattern), packed into a ring of PINNED host batches taken round-robin: the source costs nothing.
  per batch, on CUDA stream k = batch % STREAMS (own device buffers, own CUDA graph, own pinned output):
    1. wait until slot k's previous results have landed (event.synchronize), then track + write them
    2. H2D of the u8 batch (non_blocking)
    3. letterbox on the GPU: BGR->RGB, bilinear to 640x360, into the middle of a 640x640 f16 input padded 114, /255
    4. the model (bench/yolov8s_like.py's network, same weights, f16, channels_last, cudnn.benchmark) replayed
       from a CUDA graph captured once per stream
    5. decode: DFL softmax over 16 bins -> xyxy per anchor, sigmoid class scores, best class per anchor, score
       threshold 0.25, the 1000 best per frame, torchvision.ops.batched_nms (class-aware, one call per batch,
       IoU 0.45), the 100 best per frame, mapped back through the letterbox and clipped to the frame
    6. D2H of [B, 100, 6] + counts into slot k's pinned buffer; record slot k's event
  host     per frame: ByteTrack (bench/bytetrack_numpy.py; --no-track leaves it out) and one JSON line.

    detect_loop.py MODEL.pt FRAMES.npy OUT.jsonl [--batch 32] [--streams 2] [--batches 200] [--warmup 20]
                   [--repeats 3] [--no-track] [--json RESULT.json]

Prints frames/s per repeat and their median; with --json writes them (and detections per frame) as JSON.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytetrack_numpy  # noqa: E402
import yolov8s_like as yl  # noqa: E402

SCORE, IOU, PRE_NMS, MAX_DET = 0.25, 0.45, 1000, 100


def anchors(device):
    pts, st = [], []
    for s in yl.STRIDES:
        g = yl.SIZE // s
        gy, gx = torch.meshgrid(torch.arange(g, device=device), torch.arange(g, device=device), indexing="ij")
        pts.append(torch.stack([gx.reshape(-1) + 0.5, gy.reshape(-1) + 0.5], 1))
        st.append(torch.full((g * g, 1), float(s), device=device))
    return torch.cat(pts), torch.cat(st)


class Slot:
    def __init__(self, model, batch, h, w, device):
        self.stream = torch.cuda.Stream()
        self.frames = torch.empty((batch, h, w, 3), dtype=torch.uint8, device=device)
        self.input = torch.full((batch, 3, yl.SIZE, yl.SIZE), 114 / 255, dtype=torch.half, device=device)
        self.input = self.input.contiguous(memory_format=torch.channels_last)
        self.out_host = torch.empty((batch, MAX_DET, 6), dtype=torch.float32).pin_memory()
        self.count_host = torch.empty((batch,), dtype=torch.int64).pin_memory()
        self.event = torch.cuda.Event()
        self.pending = None  # the metadata of the batch whose results are on their way
        with torch.cuda.stream(self.stream):  # warm up, then capture the model on this stream
            for _ in range(3):
                model(self.input)
        self.stream.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            self.output = model(self.input)


def letterbox_into(slot, n, h, w):
    r = min(yl.SIZE / h, yl.SIZE / w)
    nh, nw = int(round(h * r)), int(round(w * r))
    top, left = (yl.SIZE - nh) // 2, (yl.SIZE - nw) // 2
    x = slot.frames[:n].permute(0, 3, 1, 2).flip(1).float()
    x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
    slot.input[:n, :, top:top + nh, left:left + nw] = (x / 255).half()
    return r, left, top


def detect(out, n, geometry, pts, st, h, w, bins):
    r, left, top = geometry
    o = out[:n].float()  # [n, 144, 8400]
    dist = (o[:, :4 * yl.REG_MAX].reshape(n, 4, yl.REG_MAX, -1).softmax(2) * bins).sum(2)  # [n, 4, A]
    dist = dist.transpose(1, 2)  # [n, A, 4]
    boxes = torch.cat([(pts - dist[..., :2]) * st, (pts + dist[..., 2:]) * st], 2)  # [n, A, 4] input pixels
    scores, classes = o[:, 4 * yl.REG_MAX:].sigmoid().max(1)  # [n, A]
    k = min(PRE_NMS, scores.shape[1])
    top_scores, idx = scores.topk(k, 1)
    keep_mask = top_scores > SCORE
    frame_idx = torch.arange(n, device=out.device)[:, None].expand(n, k)[keep_mask]
    sel = idx[keep_mask]
    b = boxes[frame_idx, sel]
    s = top_scores[keep_mask]
    c = classes[frame_idx, sel]
    keep = torchvision.ops.batched_nms(b, s, frame_idx * yl.NUM_CLASSES + c, IOU)  # score order
    frame_k = frame_idx[keep]
    order = torch.sort(frame_k, stable=True).indices  # by frame, score order kept within a frame
    keep, frame_k = keep[order], frame_k[order]
    counts = torch.bincount(frame_k, minlength=n)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(keep.numel(), device=out.device) - starts[frame_k]
    m = rank < MAX_DET
    keep, frame_k, rank = keep[m], frame_k[m], rank[m]
    bb = b[keep]
    bb[:, 0::2] = ((bb[:, 0::2] - left) / r).clamp(0, w)
    bb[:, 1::2] = ((bb[:, 1::2] - top) / r).clamp(0, h)
    res = torch.zeros((n, MAX_DET, 6), device=out.device)
    res[frame_k, rank] = torch.cat([bb, s[keep, None], c[keep, None].float()], 1)
    return res, counts.clamp(max=MAX_DET)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("state")
    p.add_argument("frames")
    p.add_argument("out")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-track", action="store_true")
    p.add_argument("--json")
    a = p.parse_args()

    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    frames = np.load(a.frames)
    K, h, w = frames.shape[0], frames.shape[1], frames.shape[2]
    model = yl.YoloV8sLike()
    model.load_state_dict(torch.load(a.state, map_location="cpu"))
    model = model.eval().to(dev).half().to(memory_format=torch.channels_last)
    ring = []
    for i in range((K + a.batch - 1) // a.batch):
        idx = [(i * a.batch + j) % K for j in range(a.batch)]
        ring.append(torch.from_numpy(frames[idx]).pin_memory())
    pts, st = anchors(dev)
    bins = torch.arange(yl.REG_MAX, device=dev, dtype=torch.float32).view(1, 1, -1, 1)
    with torch.inference_mode():
        slots = [Slot(model, a.batch, h, w, dev) for _ in range(a.streams)]
    torch.cuda.synchronize()

    tracker = None if a.no_track else bytetrack_numpy.ByteTrack()
    out = open(a.out, "w")
    sequence = 0
    detections = 0

    def finish(slot):
        nonlocal detections
        if slot.pending is None:
            return
        slot.event.synchronize()
        first, n = slot.pending
        res, counts = slot.out_host.numpy(), slot.count_host.numpy()
        for j in range(n):
            dets = res[j, :counts[j]]
            detections += int(counts[j])
            rec = {"source": 0, "sequence": first + j,
                   "detections": [{"box": [round(float(v), 1) for v in d[:4]], "class": int(d[5]),
                                   "score": round(float(d[4]), 4)} for d in dets]}
            if tracker is not None:
                tracked, lost = tracker.update(dets)
                rec["tracks"] = [{"box": [round(float(v), 1) for v in t[0]], "class": t[2], "track": t[3]}
                                 for t in tracked]
                if lost:
                    rec["lost"] = lost
            out.write(json.dumps(rec) + "\n")
        out.flush()
        slot.pending = None

    def step(i):
        nonlocal sequence
        slot = slots[i % a.streams]
        finish(slot)
        host = ring[i % len(ring)]
        n = host.shape[0]
        with torch.cuda.stream(slot.stream):
            slot.frames[:n].copy_(host, non_blocking=True)
            geometry = letterbox_into(slot, n, h, w)
            slot.graph.replay()
            res, counts = detect(slot.output, n, geometry, pts, st, h, w, bins)
            slot.out_host[:n].copy_(res, non_blocking=True)
            slot.count_host[:n].copy_(counts, non_blocking=True)
            slot.event.record(slot.stream)
        slot.pending = (sequence, n)
        sequence += n

    fps = []
    with torch.inference_mode():
        i = 0
        for _ in range(a.warmup):
            step(i)
            i += 1
        for s in slots:
            finish(s)
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            for _ in range(a.batches):
                step(i)
                i += 1
            for s in slots:
                finish(s)
            fps.append(a.batches * a.batch / (time.perf_counter() - t0))
            print("detect loop: %.1f frames/s" % fps[-1], file=sys.stderr, flush=True)
    out.close()
    result = {"baseline": "PyTorch %s, CUDA graphs, %d streams, torchvision batched_nms%s" % (
                  torch.__version__, a.streams, "" if a.no_track else ", ByteTrack (NumPy, %s)" % bytetrack_numpy.ASSIGNMENT),
              "batch": a.batch, "fps": fps, "median_fps": statistics.median(fps),
              "detections_per_frame": detections / max(sequence, 1), "gpu": torch.cuda.get_device_name()}
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

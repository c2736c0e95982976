#!/usr/bin/env python3
"""A YOLOv8-s-shaped detector for the detection speed benchmark (issue 14 part 8): the same layers, widths and
depths as Ultralytics' yolov8s (width 0.50, depth 0.33: 11.2 M parameters, 28.6 GFLOPs at 640x640), written here
in plain PyTorch, with random weights made realistic:

  1. BatchNorm calibration: running statistics from the benchmark's own frames (train-mode forward passes), so
     every layer's activations are normalised as in a trained network;
  2. class-bias calibration: one bias shift on the class logits so that about CANDIDATES (anchor, class) pairs per
     frame score above the benchmark's score threshold (0.25) - what a trained detector sees in a busy scene -
     and NMS has realistic work.

The output is the raw head: [N, 4*16 + 80, 8400] (DFL bins for strides 8/16/32, then class logits), which sluice's
`detect` (head yolo_anchor_free, reg_max 16, activation sigmoid) and the PyTorch loop (bench/detect_loop.py)
decode the same way.

    yolov8s_like.py OUT.onnx FRAMES.npy [--candidates 300] [--state OUT.pt]   FRAMES: [K, 1080, 1920, 3] u8 BGR

--state also saves the weights for the PyTorch loop, so both run the very same network.

Works on PyTorch 1.13 .. 2.x.
"""
import argparse
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)
SIZE = 640
SCORE_THRESHOLD = 0.25


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=None)  # momentum None: calibration averages every batch
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c, 3), Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n, shortcut):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c, 1), Conv(4 * c, c2, 1)
        self.pool = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Detect(nn.Module):
    def __init__(self, channels):
        super().__init__()
        c2, c3 = max(16, channels[0] // 4, 4 * REG_MAX), max(channels[0], min(NUM_CLASSES, 100))
        self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1))
                                 for c in channels)
        self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, NUM_CLASSES, 1))
                                 for c in channels)

    def forward(self, feats):
        n = feats[0].shape[0]
        outs = [torch.cat([b(x), c(x)], 1).reshape(n, 4 * REG_MAX + NUM_CLASSES, -1)
                for x, b, c in zip(feats, self.box, self.cls)]
        return torch.cat(outs, 2)


class YoloV8sLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.b0, self.b1 = Conv(3, 32, 3, 2), Conv(32, 64, 3, 2)
        self.b2, self.b3 = C2f(64, 64, 1, True), Conv(64, 128, 3, 2)
        self.b4, self.b5 = C2f(128, 128, 2, True), Conv(128, 256, 3, 2)
        self.b6, self.b7 = C2f(256, 256, 2, True), Conv(256, 512, 3, 2)
        self.b8, self.b9 = C2f(512, 512, 1, True), SPPF(512, 512)
        self.h12, self.h15 = C2f(768, 256, 1, False), C2f(384, 128, 1, False)
        self.h16, self.h18 = Conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        self.h19, self.h21 = Conv(256, 256, 3, 2), C2f(768, 512, 1, False)
        self.detect = Detect((128, 256, 512))

    def forward(self, x):
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        up = lambda t: F.interpolate(t, scale_factor=2.0, mode="nearest")
        n4 = self.h12(torch.cat([up(p5), p4], 1))
        o3 = self.h15(torch.cat([up(n4), p3], 1))
        o4 = self.h18(torch.cat([self.h16(o3), n4], 1))
        o5 = self.h21(torch.cat([self.h19(o4), p5], 1))
        return self.detect([o3, o4, o5])


def letterbox(frames_bgr, size=SIZE, pad=114.0):
    """[N, H, W, 3] u8 BGR (numpy or tensor) -> [N, 3, size, size] f32 RGB in 0..1, bilinear scale + centred pad,
    as sluice's preprocess (letterbox: true, pad_value 114) does."""
    x = torch.as_tensor(frames_bgr).permute(0, 3, 1, 2).flip(1).float()
    h, w = x.shape[2], x.shape[3]
    r = min(size / h, size / w)
    nh, nw = int(round(h * r)), int(round(w * r))
    x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
    top, left = (size - nh) // 2, (size - nw) // 2
    x = F.pad(x, (left, size - nw - left, top, size - nh - top), value=pad)
    return x / 255.0


def build(frames_bgr, candidates, seed=20261203):
    torch.manual_seed(seed)
    model = YoloV8sLike()
    for m in model.modules():  # SiLU networks: He-style init keeps the signal alive before calibration
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    images = letterbox(frames_bgr)
    model.train()
    with torch.no_grad():
        for i in range(0, images.shape[0], 4):
            model(images[i:i + 4])
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(images[i:i + 4]) for i in range(0, images.shape[0], 4)])
    logits = out[:, 4 * REG_MAX:, :].transpose(1, 2).reshape(-1)  # every (frame, anchor, class)
    per_frame = logits.numel() / images.shape[0]
    keep = min(max(candidates / per_frame, 1e-7), 0.5)
    q = float(np.quantile(logits.numpy().astype(np.float64), 1.0 - keep))
    shift = math.log(SCORE_THRESHOLD / (1 - SCORE_THRESHOLD)) - q
    for seq in model.detect.cls:
        seq[-1].bias.data += shift
    return model, shift


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("frames")
    p.add_argument("--candidates", type=int, default=300)
    p.add_argument("--state")
    a = p.parse_args()
    frames = np.load(a.frames)
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        sys.exit("%s: want [K, H, W, 3] u8 frames, got %s %s" % (a.frames, frames.shape, frames.dtype))
    model, shift = build(frames[:16], a.candidates)
    if a.state:
        torch.save(model.state_dict(), a.state)
    params = sum(t.numel() for t in model.parameters())
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    torch.onnx.export(model, letterbox(frames[:1]), a.out, input_names=["images"], output_names=["output0"],
                      dynamic_axes={"images": {0: "N"}, "output0": {0: "N"}}, opset_version=17, **kwargs)
    print("yolov8s_like: %d parameters, class-bias shift %.3f, wrote %s" % (params, shift, a.out), file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Train the small detector sluice ships (models/shapes-detector.onnx): circles, squares, triangles and crosses on
varied backgrounds, found by an anchor-free YOLOv8-style head whose output sluice's `detect` step decodes as it
is (head yolo_anchor_free, reg_max 1: boxes cx, cy, w, h in input pixels and class scores after the sigmoid).

Data (--data letterbox, the default): scenes rendered by models/shapes_scenes.py (NumPy, seeded) at frame sizes
of many aspect ratios (frame_size(): 192x192, 256x192, long sides 192..400, a third portrait) and letterboxed to
192x192 exactly as sluice's preprocess does (letterbox(): its geometry, bilinear taps and grey 114 padding; the
boxes mapped the same way). --data square: the first stage's scenes, drawn at 192x192, half of them confined to
a random band with the rest grey 114 (make_set_square). Training uses the 8 flips/quarter turns of each scene (the
classes and their boxes do not change under them).

  train       --train-scenes scenes (default TRAIN_SCENES), seed 1
  validation  --val-scenes other scenes (default VAL_SCENES, seed 2), decoded and NMS'ed here in PyTorch: mAP@0.5
              per class

Network (249k weights): a strided ReLU CNN to strides 8, 16, 32, a top-down feature pyramid (nearest
upsampling, additions), per level a 3x3 conv and a 1x1 conv to 4 box + 4 class channels. Box channels are
distances from the anchor point to the four edges, sigmoid(x) * 8 * stride; the exported graph turns them into
cx, cy, w, h and the class logits into sigmoid scores, and concatenates the levels: [N, 8, 756].
Assignment as FCOS (anchor points inside the box's centre region, one level per object by its size, the
smaller box where two claim a point); loss: quality focal loss (the class target is the IoU of the predicted
box) plus GIoU on the assigned points.

Seeded, deterministic torch algorithms, 2 threads; the learning-rate schedule follows elapsed time over
--minutes (the step count then depends on the machine's load and is reported) or the step count with --steps
(a rerun is identical). --init starts from an exported detector instead of random weights (its folded
BatchNorms kept frozen). The shipped file, two stages on 2 shared cores (models/README.md): --data square
--minutes 27 (4,437 steps), then --init that file --max-lr 2e-3 --train-scenes 4000 --minutes 30 (2,329 steps).
Writes OUT/shapes-detector.onnx (opset 13,
input "images" [N, 3, 192, 192] RGB /255, output "output0" [N, 8, 756], batch dynamic) and
OUT/shapes-detector.labels.

usage: /usr/bin/python3 models/train_shapes_detector.py [--out models] [--minutes 27 | --steps N]
       [--data letterbox|square] [--init FILE.onnx] [--max-lr 4e-3] [--train-scenes N] [--val-scenes N] [--seed 7]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes_map  # noqa: E402
import shapes_scenes  # noqa: E402

CLASSES = shapes_scenes.CLASSES
SIZE = 192
STRIDES = [8, 16, 32]
# FCOS: the level whose range holds an object's largest anchor-to-edge distance (objects 10..63 px)
RANGES = [(0, 12), (12, 24), (24, 1e9)]
CENTRE_RADIUS = 1.5  # strides
TRAIN_SCENES = 3000
VAL_SCENES = 400


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def letterbox(img, boxes, size=SIZE, pad=114.0):
    """sluice's preprocess letterbox (kernels/preprocess.hpp, preprocess_cpu.cpp) in NumPy: scale =
    min(size/w, size/h); the frame is resized to round(w*scale) x round(h*scale) (halves up, integer maths) by
    bilinear sampling with half-pixel centres (no antialiasing; samples clamp at the edges), placed at
    floor((size - resized)/2); every other pixel is `pad`. Returns float32 [size, size, 3] in pixel units (not
    rounded, as the pipeline feeds the model floats) and the boxes mapped into it."""
    h, w, _ = img.shape
    img_w, img_h = size, size
    if size * h <= size * w:  # width-limited
        img_h = min(max((2 * h * size + w) // (2 * w), 1), size)
    else:
        img_w = min(max((2 * w * size + h) // (2 * h), 1), size)
    ox, oy = (size - img_w) // 2, (size - img_h) // 2

    def taps(n_out, n_in):
        num = (2 * np.arange(n_out, dtype=np.int64) + 1) * n_in - n_out
        den = 2 * n_out
        i0 = np.where(num <= 0, 0, num // den)
        wt = np.where(num <= 0, 0.0, (num - i0 * den) / den).astype(np.float32)
        last = i0 >= n_in - 1
        i0 = np.minimum(i0, n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        wt[last] = 0.0
        return i0, i1, wt

    src = img.astype(np.float32)
    if (img_w, img_h) == (w, h):
        res = src
    else:
        x0, x1, wx = taps(img_w, w)
        y0, y1, wy = taps(img_h, h)
        rows = src[:, x0] + wx[None, :, None] * (src[:, x1] - src[:, x0])        # [h, img_w, 3]
        res = rows[y0] + wy[:, None, None] * (rows[y1] - rows[y0])                # [img_h, img_w, 3]
    out = np.full((size, size, 3), pad, np.float32)
    out[oy:oy + img_h, ox:ox + img_w] = res
    b = boxes.copy()
    b[:, [0, 2]] = b[:, [0, 2]] * (img_w / w) + ox
    b[:, [1, 3]] = b[:, [1, 3]] * (img_h / h) + oy
    return out, b


def frame_size(rng):
    """The size of a training frame before the letterbox: a fifth at the input's own size (no resampling), 3/10
    at 256x192 (4:3, the evaluation's frames), the rest any size with a long side of 192..400 px and an aspect
    ratio of 1..2, a third of them portrait."""
    u = rng.random()
    if u < 0.2:
        return SIZE, SIZE
    if u < 0.5:
        return 256, 192
    long = int(rng.integers(SIZE, 401))
    short = int(round(long / rng.uniform(1.0, 2.0)))
    return (short, long) if rng.random() < 1 / 3 else (long, short)


def make_set(seed, count):
    """`count` scenes rendered at frame_size() and letterboxed to the input as sluice does: float32 images
    [count, SIZE, SIZE, 3] in pixel units and per scene [n, 5] (xyxy in input pixels, class)."""
    rng = np.random.default_rng(seed)
    images = np.empty((count, SIZE, SIZE, 3), np.float32)
    targets = []
    for i in range(count):
        w, h = frame_size(rng)
        img, boxes, classes = shapes_scenes.render_scene(rng, w, h)
        images[i], boxes = letterbox(img, boxes)
        targets.append(np.concatenate([boxes, classes[:, None].astype(np.float32)], 1))
    return images, targets


def make_set_square(seed, count):
    """The first stage's data (the detector before the letterboxed data): `count` scenes drawn at the input's
    size, half of them confined to a random band with the rest grey 114 (never resampled)."""
    rng = np.random.default_rng(seed)
    images = np.empty((count, SIZE, SIZE, 3), np.uint8)
    targets = []
    for i in range(count):
        region = None
        if rng.random() < 0.5:  # a letterboxed frame of another aspect ratio
            short = int(rng.integers(SIZE * 2 // 3, SIZE + 1))
            if rng.random() < 0.5:
                region = (0, (SIZE - short) // 2, SIZE, short)
            else:
                region = ((SIZE - short) // 2, 0, short, SIZE)
        img, boxes, classes = shapes_scenes.render_scene(rng, SIZE, SIZE, region=region)
        images[i] = img
        targets.append(np.concatenate([boxes, classes[:, None].astype(np.float32)], 1))
    return images, targets


def conv(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ShapesDetector(nn.Module):
    def __init__(self, classes, export=False):
        super().__init__()
        self.nc = classes
        self.export = export
        self.stem = nn.Sequential(conv(3, 16, 3, 2), conv(16, 24, 3, 2))                  # /4
        self.c3 = nn.Sequential(conv(24, 32, 3, 2), conv(32, 32))                         # /8
        self.c4 = nn.Sequential(conv(32, 64, 3, 2), conv(64, 64))                         # /16
        self.c5 = nn.Sequential(conv(64, 96, 3, 2), conv(96, 96))                         # /32
        self.lat = nn.ModuleList([conv(32, 32, 1), conv(64, 32, 1), conv(96, 32, 1)])
        self.smooth = nn.ModuleList([conv(32, 32) for _ in STRIDES])
        self.out = nn.ModuleList([nn.Conv2d(32, 4 + classes, 1) for _ in STRIDES])
        for o in self.out:
            nn.init.constant_(o.bias[4:], -4.0)  # a low score everywhere at the start
            nn.init.constant_(o.bias[:4], -1.0)
        anchors, strides = [], []
        for s in STRIDES:
            g = SIZE // s
            ys, xs = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
            anchors.append(torch.stack([xs.flatten(), ys.flatten()], 1).float().add(0.5).mul(s))
            strides.append(torch.full((g * g,), float(s)))
        self.register_buffer("anchors", torch.cat(anchors).t().contiguous(), persistent=False)  # [2, A]
        self.register_buffer("strides", torch.cat(strides)[None], persistent=False)             # [1, A]

    def forward(self, x):
        p3 = self.c3(self.stem(x))
        p4 = self.c4(p3)
        p5 = self.c5(p4)
        l5 = self.lat[2](p5)
        l4 = self.lat[1](p4) + F.interpolate(l5, scale_factor=2.0, mode="nearest")
        l3 = self.lat[0](p3) + F.interpolate(l4, scale_factor=2.0, mode="nearest")
        raw = [self.out[i](self.smooth[i](f)).flatten(2) for i, f in enumerate([l3, l4, l5])]
        raw = torch.cat(raw, 2)  # [N, 4 + C, A]
        dist = torch.sigmoid(raw[:, :4]) * (8 * self.strides)  # l, t, r, b in input pixels
        x1y1 = self.anchors - dist[:, :2]
        x2y2 = self.anchors + dist[:, 2:]
        if self.export:
            return torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1, torch.sigmoid(raw[:, 4:])], 1)
        return torch.cat([x1y1, x2y2], 1), raw[:, 4:]  # boxes xyxy [N, 4, A], class logits [N, C, A]


def assign(model, targets):
    """Per image: the index of the object each anchor point learns (-1: background)."""
    ax, ay = model.anchors[0], model.anchors[1]
    st = model.strides[0]
    lo = torch.zeros_like(st)
    hi = torch.zeros_like(st)
    for (a, b), s in zip(RANGES, STRIDES):
        lo[st == s] = a
        hi[st == s] = b
    out = []
    for t in targets:
        if len(t) == 0:
            out.append(torch.full_like(st, -1, dtype=torch.long))
            continue
        b = t[:, :4]
        l = ax[None] - b[:, 0:1]
        tp = ay[None] - b[:, 1:2]
        r = b[:, 2:3] - ax[None]
        bt = b[:, 3:4] - ay[None]
        ltrb = torch.stack([l, tp, r, bt], 2)  # [G, A, 4]
        inside = ltrb.min(2).values > 0
        cx = (b[:, 0:1] + b[:, 2:3]) / 2
        cy = (b[:, 1:2] + b[:, 3:4]) / 2
        rad = CENTRE_RADIUS * st[None]
        central = ((ax[None] - cx).abs() < rad) & ((ay[None] - cy).abs() < rad)
        m = ltrb.max(2).values
        in_range = (m >= lo[None]) & (m < hi[None])
        ok = inside & central & in_range
        area = ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[:, None].expand_as(ok).clone()
        area[~ok] = float("inf")
        best_area, best = area.min(0)
        best[torch.isinf(best_area)] = -1
        out.append(best)
    return torch.stack(out)


def box_iou_pairs(a, b):
    """IoU and GIoU of matching rows [K, 4] xyxy."""
    iw = (torch.min(a[:, 2], b[:, 2]) - torch.max(a[:, 0], b[:, 0])).clamp(min=0)
    ih = (torch.min(a[:, 3], b[:, 3]) - torch.max(a[:, 1], b[:, 1])).clamp(min=0)
    inter = iw * ih
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    iou = inter / union.clamp(min=1e-6)
    ew = torch.max(a[:, 2], b[:, 2]) - torch.min(a[:, 0], b[:, 0])
    eh = torch.max(a[:, 3], b[:, 3]) - torch.min(a[:, 1], b[:, 1])
    enclose = (ew * eh).clamp(min=1e-6)
    return iou, iou - (enclose - union) / enclose


def loss_fn(model, images, targets):
    boxes, logits = model(images)
    idx = assign(model, targets)  # [N, A]
    pos = idx >= 0
    npos = max(int(pos.sum()), 1)
    cls_target = torch.zeros_like(logits)  # [N, C, A]
    n_i, a_i = pos.nonzero(as_tuple=True)
    if len(n_i):
        gt = torch.stack([targets[n][g] for n, g in zip(n_i.tolist(), idx[n_i, a_i].tolist())])
        pred = boxes[n_i, :, a_i]
        iou, giou = box_iou_pairs(pred, gt[:, :4])
        box_loss = (1 - giou).sum() / npos
        cls_target[n_i, gt[:, 4].long(), a_i] = iou.detach().clamp(min=0.1)
    else:
        box_loss = boxes.sum() * 0
    p = torch.sigmoid(logits)
    qfl = F.binary_cross_entropy_with_logits(logits, cls_target, reduction="none") * (p - cls_target).abs().pow(2)
    cls_loss = qfl.sum() / npos
    return cls_loss + 2.0 * box_loss, float(cls_loss), float(box_loss)


def dihedral(x, t, k):
    """The k-th of the 8 flips/quarter turns of images x [N, 3, S, S] and their targets (xyxy, class)."""
    out = []
    for tt in t:
        b = tt.clone()
        if k & 1:  # horizontal flip
            b[:, [0, 2]] = SIZE - tt[:, [2, 0]]
        out.append(b)
    if k & 1:
        x = x.flip(3)
    if k & 2:  # vertical flip
        x = x.flip(2)
        for b in out:
            b[:, [1, 3]] = SIZE - b[:, [3, 1]].clone()
    if k & 4:  # transpose
        x = x.transpose(2, 3)
        for b in out:
            b[:, [0, 1, 2, 3]] = b[:, [1, 0, 3, 2]].clone()
    return x, out


def detect(model, x, score=0.01, iou=0.5, top=300):
    """What sluice does with the exported output (yolo_anchor_free, reg_max 1): best class per anchor above the
    threshold, the best `top`, class-aware NMS."""
    import torchvision

    model.eval()
    with torch.no_grad():
        boxes, logits = model(x)
    res = []
    for n in range(len(x)):
        s, c = torch.sigmoid(logits[n]).max(0)
        keep = s > score
        b, s, c = boxes[n][:, keep].t(), s[keep], c[keep]
        order = s.argsort(descending=True)[:top]
        b, s, c = b[order], s[order], c[order]
        k = torchvision.ops.batched_nms(b, s, c, iou)[:100]
        res.append((b[k].numpy(), s[k].numpy(), c[k].numpy()))
    return res


def average_precision(dets, gts, classes, iou_thr=0.5):
    """VOC/COCO all-point interpolated AP@iou_thr per class. dets: per image (boxes, scores, classes); gts: per
    image [n, 5] (xyxy, class). Shared with eval_shapes_detector.py (kept free of torch)."""
    return shapes_map.average_precision(dets, gts, classes, iou_thr)


def to_tensor(images):
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)


def conv_order(model):
    """The model's convolutions (with their BatchNorms, None for the head's) in the order the exported graph
    runs them."""
    seq = list(model.stem) + list(model.c3) + list(model.c4) + list(model.c5) + [model.lat[2], model.lat[1],
                                                                                  model.lat[0]]
    out = [(m[0], m[1]) for m in seq]
    for i in range(len(STRIDES)):
        out += [(model.smooth[i][0], model.smooth[i][1]), (model.out[i], None)]
    return out


def load_onnx(model, path):
    """Start from an exported detector (its BatchNorms were folded into the convolutions): each conv gets the
    folded weight, its BatchNorm the identity statistics and the folded bias. The BatchNorms must then stay in
    eval mode (frozen statistics) while training."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    order = conv_order(model)
    assert len(convs) == len(order), (len(convs), len(order))
    with torch.no_grad():
        for node, (c, bn) in zip(convs, order):
            w, b = torch.from_numpy(init[node.input[1]].copy()), torch.from_numpy(init[node.input[2]].copy())
            assert w.shape == c.weight.shape, (node.name, w.shape, c.weight.shape)
            c.weight.copy_(w)
            if bn is None:
                c.bias.copy_(b)
            else:
                bn.running_mean.zero_()
                bn.running_var.fill_(1 - bn.eps)
                bn.weight.fill_(1)
                bn.bias.copy_(b)


def train(images, targets, minutes, seed, steps=None, batch=16, init=None, max_lr=4e-3):
    torch.manual_seed(seed)
    model = ShapesDetector(len(CLASSES))
    if init:
        load_onnx(model, init)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=5e-4)
    g = torch.Generator().manual_seed(seed)
    tgts = [torch.from_numpy(t) for t in targets]
    # The learning rate follows a one-cycle shape (15% warm-up from max/25, then cosine to ~0) over the run's
    # progress: step / steps with --steps (a rerun is identical), else elapsed / minutes (the step count then
    # depends on the machine's speed; the run reports it).
    started = time.time()
    step = 0

    def progress():
        return step / steps if steps is not None else (time.time() - started) / (minutes * 60)

    def lr_at(f):
        if f < 0.15:
            return max_lr * (0.04 + 0.96 * f / 0.15)
        return max_lr * (0.5 * (1 + np.cos(np.pi * min((f - 0.15) / 0.85, 1.0))) * 0.9996 + 0.0004)

    done = False
    while not done:
        order = torch.randperm(len(images), generator=g)
        for i in range(0, len(images) - batch + 1, batch):
            f = progress()
            if f >= 1:
                done = True
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(f)
            idx = order[i:i + batch]
            k = int(torch.randint(8, (1,), generator=g))
            x, t = dihedral(to_tensor(images[idx.numpy()]), [tgts[j] for j in idx.tolist()], k)
            model.train()
            if init:  # frozen BatchNorm statistics (the folded ones)
                for mod in model.modules():
                    if isinstance(mod, nn.BatchNorm2d):
                        mod.eval()
            loss, lc, lb = loss_fn(model, x, t)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            step += 1
            if step % 25 == 0:
                log("  step %5d: loss %.3f (cls %.3f, box %.3f), lr %.5f, %.0f s" % (step, float(loss), lc, lb,
                                                                                   lr_at(f), time.time() - started))
    model.eval()
    return model, step


def export(model, path):
    import inspect

    import onnx

    m = ShapesDetector(len(CLASSES), export=True)
    m.load_state_dict(model.state_dict())
    m.eval()
    kwargs = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    torch.onnx.export(m, torch.zeros(1, 3, SIZE, SIZE), path, opset_version=13, input_names=["images"],
                      output_names=["output0"], dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
                      do_constant_folding=True, **kwargs)
    onnx.checker.check_model(onnx.load(path))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=here, help="where the .onnx and .labels go (default: this folder)")
    p.add_argument("--minutes", type=float, default=20, help="training time budget (sets the step count)")
    p.add_argument("--steps", type=int, help="a fixed step count instead of --minutes (reproducible)")
    p.add_argument("--train-scenes", type=int, default=TRAIN_SCENES)
    p.add_argument("--val-scenes", type=int, default=VAL_SCENES)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", choices=["letterbox", "square"], default="letterbox",
                   help="letterbox: frames of many sizes through sluice's letterbox (make_set); square: the first "
                        "stage's scenes drawn at the input's size (make_set_square)")
    p.add_argument("--init", help="start from this exported detector (.onnx) instead of random weights")
    p.add_argument("--max-lr", type=float, default=4e-3, help="the one-cycle schedule's peak learning rate")
    a = p.parse_args()

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    started = time.time()
    make = make_set if a.data == "letterbox" else make_set_square
    images, targets = make(1, a.train_scenes)
    val_images, val_targets = make(2, a.val_scenes)
    log("rendered %d training and %d validation scenes in %.0f s" % (len(images), len(val_images),
                                                                   time.time() - started))
    rendered = time.time()
    model, steps = train(images, targets, a.minutes, a.seed, a.steps, init=a.init, max_lr=a.max_lr)
    trained = time.time()
    dets = []
    for i in range(0, len(val_images), 50):
        dets += detect(model, to_tensor(val_images[i:i + 50]))
    aps = average_precision(dets, val_targets, len(CLASSES))
    results = {"val_scenes": len(val_images), "val_objects": int(sum(len(t) for t in val_targets)),
               "ap50": {c: round(float(v), 4) for c, v in zip(CLASSES, aps)}, "map50": round(float(np.mean(aps)), 4)}
    log("validation mAP@0.5 %.4f: %s" % (results["map50"], results["ap50"]))
    onnx_path = os.path.join(a.out, "shapes-detector.onnx")
    export(model, onnx_path)
    with open(os.path.join(a.out, "shapes-detector.labels"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    results["onnx"] = {"path": onnx_path, "bytes": os.path.getsize(onnx_path),
                       "parameters": sum(t.numel() for t in model.parameters())}
    results["seconds"] = {"render": round(rendered - started, 1), "train": round(trained - rendered, 1),
                          "total": round(time.time() - started, 1)}
    results["steps"] = steps
    results["torch"] = torch.__version__
    print(json.dumps(results, indent=2))
    return 0 if results["map50"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())

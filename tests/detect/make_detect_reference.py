#!/usr/bin/env python3
"""Reference data for sluice's detection post-processing (kernels/detect*): decoders written here in NumPy,
NMS by torchvision.ops.batched_nms, and tiny ONNX detector heads for the end-to-end pipeline test.

usage: /usr/bin/python3 tests/detect/make_detect_reference.py OUTDIR

Writes, deterministically (fixed seeds):

  CASE.json, CASE.out<i>.npy   for each case in CASES: the head parameters, random raw head outputs (f32, shaped as
                               the model would give them) and, per item, the expected detections
                               [[x1, y1, x2, y2, score, class], ...] best first: decode (NumPy, below), the score
                               thresholds, the pre_nms_top_k best, torchvision.ops.batched_nms (class-aware), the
                               first max_detections, mapped through the geometry and clipped. CASE.priors.npy for ssd.
  yolo_dfl.onnx                a YOLOv8-style raw head on a 3x64x64 input: [N, 4*4 + 3, 84] (reg_max 4, strides
                               8/16/32), small random convolutions (opset 13, batch dynamic)
  yolo_v5.onnx                 a YOLOv5-style raw head on 3x64x64: [N, 2*(5 + 3), 4, 4] and [N, 16, 2, 2]
                               (strides 16 and 32, 2 anchors each)
  detr_head.onnx               a DETR-style head on 3x64x64: 16 queries, "logits" [N, 16, 3] and "boxes" [N, 16, 4]
                               (sigmoid: cx,cy,w,h relative to the input)

The detr cases' expected detections are Hugging Face's post-processing written out here, not the decode/NMS path
above: RTDetrImageProcessor.post_process_object_detection (sigmoid scores, the num_queries best query x class
pairs, score > threshold) and DetrImageProcessor's (softmax with the last class meaning no object, the best real
class per query, score > threshold).

Everything is rewritten when this script is newer than OUTDIR/stamp.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision

SEED = 20261202


def sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def anchor_points(strides, w, h):
    """Cell centres (in grid units) and the stride of each anchor point, level by level, row-major."""
    pts, st = [], []
    for s in strides:
        gy, gx = np.meshgrid(np.arange(h // s), np.arange(w // s), indexing="ij")
        pts.append(np.stack([gx.ravel() + 0.5, gy.ravel() + 0.5], 1))
        st.append(np.full(gx.size, s))
    return np.concatenate(pts).astype(np.float32), np.concatenate(st).astype(np.float32)


def decode(case, outs, n):
    """Boxes [A, 4] xyxy in input pixels and scores [A, C] of item n (nms_included: also classes and count)."""
    head, C, W, H = case["head"], case["classes"], case["input_width"], case["input_height"]
    act = case["activation"]
    if head == "yolo_anchor_free":
        R = case["reg_max"]
        o = outs[0][n]  # [4R + C, A]
        if R == 1:
            cx, cy, w, h = o[0], o[1], o[2], o[3]
            boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
        else:
            A = o.shape[1]
            p = softmax(o[:4 * R].reshape(4, R, A), 1)
            d = (p * np.arange(R, dtype=np.float32)[None, :, None]).sum(1)  # [4, A]
            pts, st = anchor_points(case["strides"], W, H)
            boxes = np.stack([(pts[:, 0] - d[0]) * st, (pts[:, 1] - d[1]) * st,
                              (pts[:, 0] + d[2]) * st, (pts[:, 1] + d[3]) * st], 1)
        logits = o[4 * R:].T
    elif head == "yolo_anchor_based":
        na = len(case["anchors"]) // (2 * len(case["strides"]))
        bl, ll = [], []
        for level, s in enumerate(case["strides"]):
            o = sigmoid(outs[level][n])  # [na*(5+C), gh, gw]
            gh, gw = o.shape[1], o.shape[2]
            o = o.reshape(na, 5 + C, gh, gw).transpose(0, 2, 3, 1).reshape(-1, 5 + C)  # anchor, y, x
            k = np.repeat(np.arange(na), gh * gw)
            gy, gx = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
            gx, gy = np.tile(gx.ravel(), na), np.tile(gy.ravel(), na)
            anc = np.array(case["anchors"], np.float32).reshape(len(case["strides"]), na, 2)[level][k]
            cx, cy = (o[:, 0] * 2 - 0.5 + gx) * s, (o[:, 1] * 2 - 0.5 + gy) * s
            w, h = (o[:, 2] * 2) ** 2 * anc[:, 0], (o[:, 3] * 2) ** 2 * anc[:, 1]
            bl.append(np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1))
            ll.append(o[:, 5:] * o[:, 4:5])
        return np.concatenate(bl).astype(np.float32), np.concatenate(ll).astype(np.float32)
    elif head == "ssd":
        pr = case["_priors"] * np.array([W, H, W, H], np.float32)
        v = case["variances"]
        t = outs[0][n]
        cx, cy = pr[:, 0] + t[:, 0] * v[0] * pr[:, 2], pr[:, 1] + t[:, 1] * v[1] * pr[:, 3]
        clip = np.log(1000.0 / 16)
        w = pr[:, 2] * np.exp(np.minimum(t[:, 2] * v[2], clip))
        h = pr[:, 3] * np.exp(np.minimum(t[:, 3] * v[3], clip))
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
        logits = outs[1][n]
    else:
        raise ValueError(head)
    if act == "sigmoid":
        scores = sigmoid(logits)
    elif act == "softmax":
        scores = softmax(logits, 1)
    else:
        scores = logits.astype(np.float32)
    return boxes.astype(np.float32), scores


def to_frame(case, kb):
    """Boxes in model-input pixels mapped through the case's geometry and clipped to the frame (or the input)."""
    g = case.get("geometry")
    kb = np.array(kb, np.float32).reshape(-1, 4).copy()
    if g:
        sx, sy = g["crop_w"] / g["img_w"], g["crop_h"] / g["img_h"]
        kb[:, 0::2] = np.clip(g["crop_x"] + (kb[:, 0::2] - g["img_x"]) * sx, 0, g["frame_width"])
        kb[:, 1::2] = np.clip(g["crop_y"] + (kb[:, 1::2] - g["img_y"]) * sy, 0, g["frame_height"])
    else:
        kb[:, 0::2] = np.clip(kb[:, 0::2], 0, case["input_width"])
        kb[:, 1::2] = np.clip(kb[:, 1::2], 0, case["input_height"])
    return kb


def expected_detr(case, outs):
    C, W, H = case["classes"], case["input_width"], case["input_height"]
    logits, rel = outs[0], outs[1]
    Q = logits.shape[1]
    items = []
    for n in range(case["items"]):
        cxcywh = rel[n].astype(np.float64) * np.array([W, H, W, H])
        xyxy = np.stack([cxcywh[:, 0] - cxcywh[:, 2] / 2, cxcywh[:, 1] - cxcywh[:, 3] / 2,
                         cxcywh[:, 0] + cxcywh[:, 2] / 2, cxcywh[:, 1] + cxcywh[:, 3] / 2], 1)
        if case["activation"] == "sigmoid":  # RT-DETR
            flat = torch.sigmoid(torch.tensor(logits[n])).flatten()
            scores, index = torch.topk(flat, Q)
            labels, query = (index % C).numpy(), (index // C).numpy()
            scores = scores.numpy()
        else:  # DETR: the last class is "no object"
            prob = torch.softmax(torch.tensor(logits[n]), -1)[:, :-1]
            scores, labels = prob.max(-1)
            scores, labels, query = scores.numpy(), labels.numpy(), np.arange(Q)
            order = sorted(range(Q), key=lambda i: (-scores[i], i))
            scores, labels, query = scores[order], labels[order], query[order]
        keep = [i for i in range(len(scores)) if scores[i] > case["score_threshold"]][:case["max_detections"]]
        kb = to_frame(case, xyxy[query[keep]].astype(np.float32))
        items.append([[float(v) for v in kb[i]] + [float(scores[keep[i]]), int(labels[keep[i]])] for i in range(len(keep))])
    return items


def expected(case, outs):
    if case["head"] == "detr":
        return expected_detr(case, outs)
    items = []
    C = case["classes"]
    thr = np.array(case["class_thresholds"] or [case["score_threshold"]] * C, np.float32)
    for n in range(case["items"]):
        if case["head"] == "nms_included":
            boxes = outs[0][n]
            sc, cl = outs[1][n], outs[2][n]
            count = int(min(max(outs[3][n].item(), 0), boxes.shape[0]))
            cand = []
            for a in range(count):
                c = int(cl[a])
                if 0 <= c < C and sc[a] >= thr[c]:
                    b = boxes[a]
                    cand.append((float(sc[a]), a, c, [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])]))
            cand.sort(key=lambda t: (-t[0], t[1]))
            cand = cand[:case["pre_nms_top_k"]][:case["max_detections"]]
            kb = np.array([t[3] for t in cand], np.float32).reshape(-1, 4)
            ks = np.array([t[0] for t in cand], np.float32)
            kc = np.array([t[2] for t in cand], np.int64)
        else:
            boxes, scores = decode(case, outs, n)
            A = boxes.shape[0]
            ok = np.isfinite(boxes).all(1)
            bg = case.get("background_class", -1)
            cb, cs, cc, ci = [], [], [], []
            for a in range(A):
                if not ok[a]:
                    continue
                s = scores[a]
                passing = [c for c in range(C) if c != bg and s[c] >= thr[c]]
                if not case["multi_label"] and passing:
                    best = max(passing, key=lambda c: (s[c], -c))
                    passing = [best]
                for c in passing:
                    cb.append(boxes[a]), cs.append(s[c]), cc.append(c), ci.append(a * C + c)
            order = sorted(range(len(cs)), key=lambda i: (-cs[i], ci[i]))[:case["pre_nms_top_k"]]
            b = torch.tensor(np.array([cb[i] for i in order], np.float32).reshape(-1, 4))
            s = torch.tensor(np.array([cs[i] for i in order], np.float32))
            c = torch.tensor(np.array([cc[i] for i in order], np.int64))
            keep = torchvision.ops.batched_nms(b, s, c, case["iou_threshold"])[:case["max_detections"]]
            kb, ks, kc = b[keep].numpy(), s[keep].numpy(), c[keep].numpy()
        kb = to_frame(case, kb)
        items.append([[float(v) for v in kb[i]] + [float(ks[i]), int(kc[i])] for i in range(len(ks))])
    return items


def clustered_xywh(rng, items, A, W, H, clusters=6):
    """Decoded YOLO boxes (cx, cy, w, h) around a few centres, so NMS has overlaps to suppress."""
    centres = rng.uniform(8, W - 8, (items, clusters, 2))
    pick = rng.integers(0, clusters, (items, A))
    c = np.take_along_axis(centres, pick[..., None], 1) + rng.normal(0, 2.0, (items, A, 2))
    wh = rng.uniform(6, 20, (items, A, 2))
    return np.concatenate([c, wh], 2).astype(np.float32)


def make_cases(rng):
    base = dict(items=3, input_width=64, input_height=64, score_threshold=0.3, class_thresholds=[],
                multi_label=False, iou_threshold=0.5, pre_nms_top_k=1000, max_detections=100, reg_max=1,
                strides=[], anchors=[], variances=[0.1, 0.1, 0.2, 0.2], background_class=-1)
    cases = {}

    C, A = 3, 200
    xywh = clustered_xywh(rng, 3, A, 64, 64)
    out = np.concatenate([xywh.transpose(0, 2, 1), rng.uniform(0, 1, (3, C, A)).astype(np.float32)], 1)
    cases["af_decoded"] = (dict(base, head="yolo_anchor_free", classes=C, activation="none"), [out])
    cases["af_decoded_multi"] = (dict(base, head="yolo_anchor_free", classes=C, activation="none", multi_label=True,
                                      class_thresholds=[0.5, 0.2, 0.7], iou_threshold=0.3), [out])
    cases["af_decoded_topk"] = (dict(base, head="yolo_anchor_free", classes=C, activation="none", pre_nms_top_k=40,
                                     max_detections=7), [out])
    # The same boxes, mapped back through a letterbox of a 320x240 frame into 64x64 (img 64x48 at 0,8).
    cases["af_letterbox"] = (dict(base, head="yolo_anchor_free", classes=C, activation="none",
                                  geometry=dict(frame_width=320, frame_height=240, crop_x=0, crop_y=0, crop_w=320,
                                                crop_h=240, img_x=0, img_y=8, img_w=64, img_h=48)), [out])

    R, C = 4, 3
    A = 8 * 8 + 4 * 4 + 2 * 2
    dfl = np.concatenate([rng.normal(0, 2, (3, 4 * R, A)), rng.normal(-1, 2, (3, C, A))], 1).astype(np.float32)
    cases["af_dfl"] = (dict(base, head="yolo_anchor_free", classes=C, activation="sigmoid", reg_max=R,
                            strides=[8, 16, 32]), [dfl])

    C, na = 3, 2
    anchors = [10, 13, 16, 30, 33, 23, 30, 61]
    v5 = [rng.normal(0, 1.5, (3, na * (5 + C), 64 // s, 64 // s)).astype(np.float32) for s in (16, 32)]
    cases["ab_v5"] = (dict(base, head="yolo_anchor_based", classes=C, activation="sigmoid", strides=[16, 32],
                           anchors=anchors, score_threshold=0.2, iou_threshold=0.45), v5)
    cases["ab_v5_multi"] = (dict(base, head="yolo_anchor_based", classes=C, activation="sigmoid", strides=[16, 32],
                                 anchors=anchors, score_threshold=0.15, multi_label=True, iou_threshold=0.6), v5)

    C, A = 4, 150
    priors = np.concatenate([rng.uniform(0.1, 0.9, (A, 2)), rng.uniform(0.05, 0.4, (A, 2))], 1).astype(np.float32)
    priors[::3, :2] = priors[1::3, :2][: len(priors[::3])]  # shared centres: overlapping priors
    boxes = rng.normal(0, 1, (3, A, 4)).astype(np.float32)
    scores = rng.normal(0, 2, (3, A, C)).astype(np.float32)
    cases["ssd_softmax"] = (dict(base, head="ssd", classes=C, activation="softmax", background_class=0,
                                 score_threshold=0.3, multi_label=True, iou_threshold=0.45, _priors=priors),
                            [boxes, scores])
    cases["ssd_sigmoid"] = (dict(base, head="ssd", classes=C, activation="sigmoid", score_threshold=0.6,
                                 iou_threshold=0.5, multi_label=True, _priors=priors, max_detections=20),
                            [boxes, scores])

    M, C = 12, 5
    nb = rng.uniform(0, 64, (3, M, 4)).astype(np.float32)
    ns = rng.uniform(0, 1, (3, M)).astype(np.float32)
    ncl = rng.integers(-1, C + 1, (3, M)).astype(np.float32)  # -1 and C are not classes: dropped
    ncount = np.array([[5], [12], [40]], np.float32)  # 40 > M: read as M
    cases["nms_included"] = (dict(base, head="nms_included", classes=C, activation="none", score_threshold=0.2),
                             [nb, ns, ncl, ncount])

    Q, C = 60, 6
    dl = rng.normal(-2, 2, (3, Q, C)).astype(np.float32)
    db = np.concatenate([rng.uniform(0.1, 0.9, (3, Q, 2)), rng.uniform(0.05, 0.5, (3, Q, 2))], 2).astype(np.float32)
    cases["detr_rtdetr"] = (dict(base, head="detr", classes=C, activation="sigmoid", multi_label=True, pre_nms_top_k=Q,
                                 score_threshold=0.3), [dl, db])
    # A threshold that cuts inside the top Q, boxes mapped back through a letterbox of a 320x240 frame.
    cases["detr_rtdetr_letterbox"] = (dict(base, head="detr", classes=C, activation="sigmoid", multi_label=True,
                                           pre_nms_top_k=Q, score_threshold=0.85,
                                           geometry=dict(frame_width=320, frame_height=240, crop_x=0, crop_y=0,
                                                         crop_w=320, crop_h=240, img_x=0, img_y=8, img_w=64, img_h=48)),
                                      [dl, db])
    cases["detr_classic"] = (dict(base, head="detr", classes=C, activation="softmax", background_class=C - 1,
                                  multi_label=False, pre_nms_top_k=Q, score_threshold=0.2), [dl, db])
    return cases


class DflHead(nn.Module):
    """Conv features at strides 8/16/32, a 1x1 head each: [N, 4*4 + 3, 84] like YOLOv8's raw output."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())  # /8
        self.down = nn.ModuleList([nn.Conv2d(8, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 2, 1)])
        self.heads = nn.ModuleList([nn.Conv2d(8, 19, 1) for _ in range(3)])

    def forward(self, x):
        f = self.stem(x)
        outs = []
        for i in range(3):
            if i:
                f = torch.relu(self.down[i - 1](f))
            outs.append(self.heads[i](f).flatten(2))
        return torch.cat(outs, 2)


class V5Head(nn.Module):
    """Two raw YOLOv5 levels (strides 16 and 32, 2 anchors, 3 classes)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 4, 1), nn.ReLU())  # /16
        self.down = nn.Conv2d(8, 8, 3, 2, 1)
        self.p4, self.p5 = nn.Conv2d(8, 16, 1), nn.Conv2d(8, 16, 1)

    def forward(self, x):
        f = self.stem(x)
        return self.p4(f), self.p5(torch.relu(self.down(f)))


class DetrHead(nn.Module):
    """16 queries from a 4x4 feature map: class logits [N, 16, 3] and boxes [N, 16, 4] (sigmoid: input-relative)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 4, 1), nn.ReLU())  # /16
        self.cls, self.box = nn.Linear(8, 3), nn.Linear(8, 4)

    def forward(self, x):
        q = self.stem(x).flatten(2).transpose(1, 2)  # [N, 16, 8]
        return self.cls(q), torch.sigmoid(self.box(q))


def export(model, path, outputs):
    torch.manual_seed(SEED)
    for p in model.parameters():
        nn.init.normal_(p, 0, 0.5)
    model.eval()
    torch.onnx.export(model, torch.zeros(1, 3, 64, 64), path, opset_version=13, input_names=["input"],
                      output_names=outputs, dynamic_axes={k: {0: "batch"} for k in ["input"] + outputs})


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    stamp = os.path.join(out, "stamp")
    if os.path.exists(stamp) and os.path.getmtime(stamp) >= os.path.getmtime(__file__):
        return 0
    rng = np.random.default_rng(SEED)
    names = []
    for name, (case, outs) in make_cases(rng).items():
        case = dict(case)
        if "_priors" in case:
            np.save(os.path.join(out, name + ".priors.npy"), case["_priors"])
        for i, o in enumerate(outs):
            np.save(os.path.join(out, "%s.out%d.npy" % (name, i)), o)
        exp = expected(case, outs)
        case.pop("_priors", None)
        case["outputs"] = len(outs)
        case["expected"] = exp
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(case, f)
        names.append("%s (%s)" % (name, "/".join(str(len(e)) for e in exp)))
    export(DflHead(), os.path.join(out, "yolo_dfl.onnx"), ["head"])
    export(V5Head(), os.path.join(out, "yolo_v5.onnx"), ["p4", "p5"])
    export(DetrHead(), os.path.join(out, "detr_head.onnx"), ["logits", "boxes"])
    with open(stamp, "w") as f:
        f.write("\n".join(names) + "\n")
    print("detections per item: " + ", ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())

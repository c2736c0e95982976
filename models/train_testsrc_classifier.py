#!/usr/bin/env python3
"""Train the small CNN that sluice's default pipeline ships: it tells the testsrc patterns apart.

Every training and validation picture is rendered by sluice itself: for each pattern, pixel format and frame
size the script writes a pipeline (testsrc -> preprocess on the CPU -> sink npy), runs `sluiced run` on it and
reads the .npy batches back, so the model sees exactly the tensors the default pipeline's preprocess makes.

  train       sizes TRAIN_SIZES x every pixel format, sequences 0 .. TRAIN_FRAMES-1 (moving patterns move
              with the sequence number; the noise seed changes per run)
  validation  fresh frames: sizes the training never saw (VAL_SIZES) at every format, and the training sizes
              at later sequences (TRAIN_FRAMES .. 2*TRAIN_FRAMES-1), with other noise seeds

Deterministic: fixed seeds, deterministic torch algorithms, a fixed thread count. Runs in a few minutes on
two CPU cores with Debian's torch (/usr/bin/python3). Writes OUT/testsrc-classifier.onnx (opset 13, input
"image" [N,3,64,64], output "logits" [N,5], batch dimension dynamic) and OUT/testsrc-classifier.labels.

usage: /usr/bin/python3 models/train_testsrc_classifier.py build/nn-models/sluiced [--out models]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The order of the classifier's outputs; also the labels file, one per line.
PATTERNS = ["bars", "shapes", "gradient", "checkerboard", "noise"]
FORMATS = ["bgr8", "rgb8", "gray8", "nv12", "i420"]
TRAIN_SIZES = [(640, 360), (1280, 720), (1920, 1080), (1024, 768)]
VAL_SIZES = [(854, 480), (1600, 900), (720, 576)]
TRAIN_FRAMES = 24

# The preprocess block of the default pipeline (config/pipelines/default.yaml); models/README.md repeats it.
PREPROCESS = {
    "width": 64,
    "height": 64,
    "order": "rgb",
    "layout": "nchw",
    "dtype": "f32",
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
}
INPUT_SHAPE = (3, PREPROCESS["height"], PREPROCESS["width"])


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def yaml_value(v):
    return "[" + ", ".join(str(x) for x in v) + "]" if isinstance(v, list) else str(v)


def pipeline_yaml(pattern, fmt, width, height, frames, seed, out_dir):
    decode = {"source": "testsrc", "pattern": pattern, "width": width, "height": height, "format": fmt,
              "frames": frames, "seed": seed}
    lines = ["name: train-%s-%s-%dx%d" % (pattern, fmt, width, height), "device: cpu", "batch_size: 16", "stages:",
             "  - kind: decode"]
    lines += ["    %s: %s" % (k, yaml_value(v)) for k, v in decode.items()]
    lines += ["  - kind: preprocess"] + ["    %s: %s" % (k, yaml_value(v)) for k, v in PREPROCESS.items()]
    lines += ["  - kind: sink", "    type: npy", "    path: %s" % json.dumps(out_dir)]
    return "\n".join(lines) + "\n"


def render(sluiced, work, pattern, fmt, width, height, frames, seed, first_sequence):
    """Runs sluiced on one pipeline; returns the preprocessed frames with sequence >= first_sequence."""
    name = "%s-%s-%dx%d-s%d" % (pattern, fmt, width, height, seed)
    out_dir = os.path.join(work, name)
    yaml_path = out_dir + ".yaml"
    with open(yaml_path, "w") as f:
        f.write(pipeline_yaml(pattern, fmt, width, height, frames, seed, out_dir))
    run = subprocess.run([sluiced, "run", yaml_path], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError("sluiced run %s failed (exit %d):\n%s" % (yaml_path, run.returncode, run.stdout + run.stderr))
    batches, picked = {}, []
    with open(os.path.join(out_dir, "index.jsonl")) as index:
        for line in index:
            entry = json.loads(line)
            if entry["sequence"] < first_sequence:
                continue
            if entry["file"] not in batches:
                batches[entry["file"]] = np.load(os.path.join(out_dir, entry["file"]))
            picked.append(batches[entry["file"]][entry["row"]])
    if len(picked) != frames - first_sequence:
        raise RuntimeError("%s: expected %d frames, index.jsonl lists %d" % (out_dir, frames - first_sequence, len(picked)))
    for file in batches:
        os.remove(os.path.join(out_dir, file))
    return np.stack(picked)


def make_set(sluiced, work, sizes, frames, first_sequence, seed_base):
    xs, ys = [], []
    run_index = 0
    for label, pattern in enumerate(PATTERNS):
        for fmt in FORMATS:
            for width, height in sizes:
                x = render(sluiced, work, pattern, fmt, width, height, frames, seed_base + run_index, first_sequence)
                run_index += 1
                xs.append(x)
                ys.append(np.full(len(x), label, dtype=np.int64))
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


class TestsrcClassifier(nn.Module):
    """Four strided conv blocks to 4x4, then global average pooling and a linear layer: about 10k weights."""

    def __init__(self, classes):
        super().__init__()
        widths = [3, 8, 16, 24, 32]
        blocks = []
        for cin, cout in zip(widths, widths[1:]):
            blocks += [nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*blocks)
        self.classifier = nn.Linear(widths[-1], classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(chunk).argmax(1) for chunk in x.split(256)])
    confusion = torch.zeros(len(PATTERNS), len(PATTERNS), dtype=torch.int64)
    for t, p in zip(y.tolist(), pred.tolist()):
        confusion[t, p] += 1
    return float((pred == y).float().mean()), confusion


def train(x, y, epochs, seed):
    torch.manual_seed(seed)
    model = TestsrcClassifier(len(PATTERNS))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    steps_per_epoch = -(-len(x) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=epochs * steps_per_epoch)
    g = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=g)
        total = 0.0
        for i in range(0, len(x), 64):
            idx = order[i:i + 64]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss) * len(idx)
        log("  epoch %2d: loss %.4f" % (epoch + 1, total / len(x)))
    model.eval()
    return model


def export(model, path):
    kwargs = {}
    import inspect

    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    example = torch.zeros((1,) + INPUT_SHAPE)
    torch.onnx.export(model, example, path, opset_version=13, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True, **kwargs)
    import onnx

    onnx.checker.check_model(onnx.load(path))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sluiced", help="path to the sluiced binary that renders the pictures")
    p.add_argument("--out", default=here, help="where the .onnx and .labels go (default: this folder)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--work", help="folder for the rendered batches (default: a temporary one, removed after)")
    a = p.parse_args()

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="testsrc-train-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        x_train, y_train = make_set(a.sluiced, work, TRAIN_SIZES, TRAIN_FRAMES, 0, seed_base=1000)
        x_val_sizes, y_val_sizes = make_set(a.sluiced, work, VAL_SIZES, TRAIN_FRAMES, 0, seed_base=2000)
        x_val_later, y_val_later = make_set(a.sluiced, work, TRAIN_SIZES, 2 * TRAIN_FRAMES, TRAIN_FRAMES,
                                            seed_base=3000)
    log("rendered %d training and %d + %d validation frames with %s in %.0f s"
        % (len(x_train), len(x_val_sizes), len(x_val_later), a.sluiced, time.time() - started))

    model = train(x_train, y_train, a.epochs, a.seed)
    results = {}
    for name, (x, y) in {"train": (x_train, y_train), "val_unseen_sizes": (x_val_sizes, y_val_sizes),
                         "val_later_frames": (x_val_later, y_val_later)}.items():
        acc, confusion = accuracy(model, x, y)
        results[name] = {"frames": len(x), "accuracy": acc}
        log("%-17s %5d frames, accuracy %.4f; confusion (rows: true %s):\n%s"
            % (name, len(x), acc, "/".join(PATTERNS), confusion.numpy()))

    onnx_path = os.path.join(a.out, "testsrc-classifier.onnx")
    export(model, onnx_path)
    with open(os.path.join(a.out, "testsrc-classifier.labels"), "w") as f:
        f.write("\n".join(PATTERNS) + "\n")
    results["onnx"] = {"path": onnx_path, "bytes": os.path.getsize(onnx_path),
                       "parameters": sum(t.numel() for t in model.parameters())}
    results["seconds"] = round(time.time() - started, 1)
    results["torch"] = torch.__version__
    print(json.dumps(results, indent=2))
    val_acc = min(results["val_unseen_sizes"]["accuracy"], results["val_later_frames"]["accuracy"])
    return 0 if val_acc >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())

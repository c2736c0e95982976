#!/usr/bin/env python3
"""mAP@0.5 of the shipped detector through sluice's real pipeline: renders held-out scenes (models/shapes_scenes.py,
a seed training never used), writes them as a PNG sequence, runs `sluiced run` on config/pipelines/detect.yaml
with only the decode stage (the PNGs instead of the clip) and the sink path changed (the preprocess, infer with
its detect block and thresholds, download and track stages as shipped), reads the JSON lines back and scores the
boxes against the ground truth: VOC/COCO-style all-point interpolated AP per class at IoU 0.5, mean over classes.

usage: /usr/bin/python3 models/eval_shapes_detector.py BUILD/sluiced [--scenes 200] [--seed 1001] [--min-map 0.9]
       [--score-threshold T] [--size 256x192] [--video] [--device auto|cpu|cuda]

--video feeds the same scenes as one uncompressed AVI (rawvideo BGR24, written here with the standard library:
shapes_scenes.write_avi), which sluice's FFmpeg file reader decodes bit-exactly, instead of PNGs (OpenCV): for
builds without OpenCV's image codecs, e.g. the GPU host:
  python3 models/eval_shapes_detector.py build/release/sluiced --scenes 200 --video --device cuda

NumPy only (no torch). Exits 0 when the mAP reaches --min-map, 1 below it, 2 on a failed run, 77 (skipped)
without NumPy.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("numpy is missing: skipped", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (the CTest runs this)
sys.path.insert(0, HERE)
import shapes_map  # noqa: E402
import shapes_scenes  # noqa: E402

WIDTH, HEIGHT = 256, 192  # 4:3 scenes: the 192x192 letterbox pads them and the boxes come back through it


def pipeline_yaml(template, pattern, jsonl, score_threshold=None, device=None):
    """detect.yaml with its decode stage reading `pattern` and its sink writing `jsonl`; paths made absolute;
    detect.score_threshold and the pipeline's device replaced when given."""
    out, stage = [], None
    for line in open(template).read().splitlines():
        stripped = line.strip()
        if line.startswith("  - kind: "):
            stage = stripped.split(":", 1)[1].strip()
            if stage == "decode":
                out += ["  - kind: decode", "    uri: [%s]" % json.dumps(pattern), "    width: %d" % WIDTH,
                        "    height: %d" % HEIGHT, "    format: bgr8"]
                continue
            if stage == "sink":
                out += ["  - kind: sink", "    type: jsonl", "    path: %s" % json.dumps(jsonl)]
                continue
        elif stage in ("decode", "sink") and line.startswith("    "):
            continue
        if stripped.startswith("model:") or stripped.startswith("labels:"):
            key, value = stripped.split(":", 1)
            value = value.split("#")[0].strip()
            line = "    %s: %s" % (key, json.dumps(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(template)), value))))
        if device is not None and line.startswith("device:"):
            line = "device: %s" % device
        if score_threshold is not None and stripped.startswith("score_threshold:"):
            line = line[:line.index("score_threshold:")] + "score_threshold: %g" % score_threshold
        out.append(line)
    return "\n".join(out) + "\n"


def main():
    global WIDTH, HEIGHT
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sluiced")
    p.add_argument("--scenes", type=int, default=200)
    p.add_argument("--seed", type=int, default=1001, help="training used 1 and validation 2")
    p.add_argument("--pipeline", default=os.path.join(ROOT, "config", "pipelines", "detect.yaml"))
    p.add_argument("--min-map", type=float, default=0.9)
    p.add_argument("--score-threshold", type=float, help="instead of the pipeline's detect.score_threshold")
    p.add_argument("--size", default="%dx%d" % (WIDTH, HEIGHT), help="scene size WxH (default %(default)s)")
    p.add_argument("--video", action="store_true",
                   help="feed the scenes as one lossless video (uncompressed AVI, read by sluice's FFmpeg file "
                        "reader) instead of a PNG sequence (OpenCV): for builds without OpenCV's image codecs")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                   help="instead of the pipeline's device (detect.yaml: auto, the GPU when there is one)")
    p.add_argument("--work", help="keep the scenes, pipeline and records here (default: a temporary folder)")
    a = p.parse_args()

    WIDTH, HEIGHT = (int(v) for v in a.size.split("x"))
    if os.path.exists(a.sluiced):
        a.sluiced = os.path.abspath(a.sluiced)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="shapes-eval-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        rng = np.random.default_rng(a.seed)
        gts, frames = [], []
        for i in range(a.scenes):
            img, boxes, classes = shapes_scenes.render_scene(rng, WIDTH, HEIGHT)
            if a.video:
                frames.append(img)
            else:
                shapes_scenes.write_png(os.path.join(work, "scene_%05d.png" % i), img)
            gts.append(np.concatenate([boxes, classes[:, None].astype(np.float32)], 1))
        source = os.path.join(work, "scene_%05d.png")
        if a.video:
            source = os.path.join(work, "scenes.avi")
            shapes_scenes.write_avi(source, frames)
            del frames
        jsonl = os.path.join(work, "detections.jsonl")
        if os.path.exists(jsonl):
            os.remove(jsonl)
        yaml_path = os.path.join(work, "eval.yaml")
        with open(yaml_path, "w") as f:
            f.write(pipeline_yaml(a.pipeline, source, jsonl, a.score_threshold, a.device))
        rendered = time.time()
        run = subprocess.run([a.sluiced, "run", yaml_path, "--state-dir", os.path.join(work, "state")],
                             capture_output=True, text=True)
        ran = time.time()
        if run.returncode != 0:
            print("sluiced run %s failed (exit %d):\n%s" % (yaml_path, run.returncode, run.stdout + run.stderr))
            return 2
        dets = [None] * a.scenes
        with open(jsonl) as f:
            for line in f:
                r = json.loads(line)
                seq = r["sequence"]
                boxes = [d["box"] for d in r.get("detections", [])]
                dets[seq] = (np.array(boxes, np.float64).reshape(-1, 4),
                             np.array([d["score"] for d in r.get("detections", [])]),
                             np.array([d["class"] for d in r.get("detections", [])], np.int64))
        missing = [i for i, d in enumerate(dets) if d is None]
        if missing:
            print("no record for %d of %d scenes (first: %d)" % (len(missing), a.scenes, missing[0]))
            return 2
    aps = shapes_map.average_precision(dets, gts, len(shapes_scenes.CLASSES))
    m = float(np.mean(aps))
    objects = int(sum(len(g) for g in gts))
    print("%d scenes %dx%d (seed %d) as %s, %d objects, %d boxes reported; sluiced run %.1f s (rendering %.1f s)"
          % (a.scenes, WIDTH, HEIGHT, a.seed, "a lossless AVI" if a.video else "PNGs", objects,
             sum(len(d[1]) for d in dets), ran - rendered, rendered - started))
    for name, ap in zip(shapes_scenes.CLASSES, aps):
        print("  AP@0.5 %-8s %.4f" % (name, ap))
    print("mAP@0.5 %.4f (pass: >= %.2f)" % (m, a.min_map))
    return 0 if m >= a.min_map else 1


if __name__ == "__main__":
    sys.exit(main())

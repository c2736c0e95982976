#!/usr/bin/env python3
"""Render config/media/shapes.mp4, the input of config/pipelines/detect.yaml: 48 frames 320x240 of moving
shapes (models/shapes_scenes.py render_clip, seed 5) encoded as H.264 by the ffmpeg command line.

usage: /usr/bin/python3 models/make_shapes_clip.py [OUT.mp4]
"""

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes_scenes  # noqa: E402

WIDTH, HEIGHT, FRAMES, SEED = 320, 240, 48, 5


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "config", "media", "shapes.mp4")
    frames = shapes_scenes.render_clip(np.random.default_rng(SEED), WIDTH, HEIGHT, FRAMES)
    cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "%dx%d" % (WIDTH, HEIGHT),
           "-r", "24", "-i", "-", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-crf", "20", "-preset", "slow",
           "-bitexact", "-movflags", "+faststart", out]
    subprocess.run(cmd, input=b"".join(f.tobytes() for f in frames), check=True)
    print("%s: %d bytes" % (out, os.path.getsize(out)))


if __name__ == "__main__":
    main()

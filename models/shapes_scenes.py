"""Seeded scenes of shapes for the shipped detector (models/shapes-detector.onnx): NumPy only, no torch, so the
evaluation (models/eval_shapes_detector.py) and its CTest need nothing but NumPy.

A scene is a background (solid colour, two-colour gradient, smooth noise, stripes or a checkerboard; pixel noise
on top) with 1..8 shapes of four classes at random positions, sizes (14..84 px on a 256 px long side) and colours,
drawn with anti-aliased edges from signed distances. Shapes may overlap and occlude each other a little: a new
shape is placed only where its box has IoU <= 0.3 with every earlier one and covers at most half of any of them.
The ground truth is each shape's whole box, [x1, y1, x2, y2] in pixels (x2, y2 exclusive edges), and its class.

Everything comes from one numpy.random.Generator: the same seed gives the same scenes, byte for byte.
"""

import struct
import zlib

import numpy as np

CLASSES = ["circle", "square", "triangle", "cross"]
BACKGROUNDS = ["solid", "gradient", "noise", "stripes", "checker"]


def _colour(rng):
    return rng.uniform(0, 255, 3).astype(np.float32)


def _smooth_noise(rng, h, w, cells):
    """Bilinear upsampling of a random (cells+1)^2 grid of colours to h x w."""
    grid = rng.uniform(0, 255, (cells + 1, cells + 1, 3)).astype(np.float32)

    def weights(n):  # [n, cells + 1]: linear interpolation as a matrix
        t = np.linspace(0, cells, n, dtype=np.float32)
        i = np.minimum(t.astype(np.int64), cells - 1)
        m = np.zeros((n, cells + 1), np.float32)
        m[np.arange(n), i] = 1 - (t - i)
        m[np.arange(n), i + 1] = t - i
        return m

    rows = np.einsum("xj,ijc->ixc", weights(w), grid)  # [cells + 1, w, 3]
    return np.einsum("yi,ixc->yxc", weights(h), rows)


def background(rng, h, w):
    kind = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    if kind == "solid":
        img = np.broadcast_to(_colour(rng), (h, w, 3)).copy()
    elif kind == "gradient":
        a = rng.uniform(0, 2 * np.pi)
        t = x * np.cos(a) + y * np.sin(a)
        t = ((t - t.min()) / max(float(t.max() - t.min()), 1.0))[..., None]
        img = _colour(rng) * (1 - t) + _colour(rng) * t
    elif kind == "noise":
        img = _smooth_noise(rng, h, w, int(rng.integers(2, 12)))
    elif kind == "stripes":
        a = rng.uniform(0, np.pi)
        period = rng.uniform(6, 48)
        t = x * np.cos(a) + y * np.sin(a)
        wave = np.sin(2 * np.pi * t / period)
        if rng.random() < 0.5:
            wave = np.clip(wave * 4, -1, 1)  # hard-edged stripes
        t = ((wave + 1) / 2)[..., None].astype(np.float32)
        img = _colour(rng) * (1 - t) + _colour(rng) * t
    else:  # checker
        cell = rng.uniform(8, 40)
        t = ((np.floor(x / cell) + np.floor(y / cell)) % 2)[..., None]
        img = _colour(rng) * (1 - t) + _colour(rng) * t
    return img.astype(np.float32)


def _sdf(cls, x, y, cx, cy, s, orient):
    """Signed distance (negative inside) of a shape of size s centred at cx, cy; its box is s x s."""
    dx, dy = x - cx, y - cy
    h = s / 2
    if cls == 0:  # circle
        return np.sqrt(dx * dx + dy * dy) - h
    if cls == 1:  # square
        return np.maximum(np.abs(dx), np.abs(dy)) - h
    if cls == 2:  # isosceles triangle, apex up/down/left/right
        if orient >= 2:
            dx, dy = dy, dx
        if orient % 2:
            dy = -dy
        # apex (0, -h), base corners (+-h, h): sides through them; |normal| = 1
        n = 1 / np.sqrt(5.0)
        side = (2 * np.abs(dx) + dy - h) * n
        return np.maximum(dy - h, side)
    # cross: a plus sign, arms a third of the size thick
    t = s / 6
    return np.minimum(np.maximum(np.abs(dx) - h, np.abs(dy) - t), np.maximum(np.abs(dx) - t, np.abs(dy) - h))


def _iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    return inter / (area_a + area_b - inter), inter / area_b


def render_scene(rng, width, height, min_size=14, max_size=84, max_shapes=8, region=None):
    """One scene: (image uint8 [height, width, 3] RGB, boxes float32 [n, 4] x1 y1 x2 y2, classes int64 [n]).
    Sizes are for a 256 px long side and scale with it. `region` (x0, y0, w, h) confines the scene to a part
    of the picture; the rest is grey 114, as a letterbox pads (training uses it)."""
    if region is None:
        region = (0, 0, width, height)
    rx, ry, rw, rh = region
    scale = max(rw, rh) / 256.0
    img = np.full((height, width, 3), 114, np.float32)
    img[ry:ry + rh, rx:rx + rw] = background(rng, rh, rw)
    y = np.arange(height, dtype=np.float32)[:, None] + 0.5
    x = np.arange(width, dtype=np.float32)[None, :] + 0.5
    boxes, classes = [], []
    for _ in range(int(rng.integers(1, max_shapes + 1))):
        for _attempt in range(20):
            s = float(np.exp(rng.uniform(np.log(min_size), np.log(max_size)))) * scale
            cx = rx + rng.uniform(s / 2, rw - s / 2)
            cy = ry + rng.uniform(s / 2, rh - s / 2)
            box = [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]
            if all(_iou(box, b)[0] <= 0.3 and _iou(box, b)[1] <= 0.5 for b in boxes):
                break
        else:
            continue
        cls = int(rng.integers(len(CLASSES)))
        x0, y0 = max(int(box[0]) - 2, 0), max(int(box[1]) - 2, 0)
        x1, y1 = min(int(box[2]) + 3, width), min(int(box[3]) + 3, height)
        patch = img[y0:y1, x0:x1]
        under = patch.reshape(-1, 3).mean(0)
        for _try in range(10):  # a colour that stands out from what lies under the shape
            colour = _colour(rng)
            if np.abs(colour - under).sum() > 120:
                break
        d = _sdf(cls, x[:, x0:x1], y[y0:y1], cx, cy, s, int(rng.integers(4)))
        alpha = np.clip(0.5 - d, 0, 1)[..., None]
        shade = colour + rng.normal(0, 6, 3).astype(np.float32)  # slightly uneven fill
        img[y0:y1, x0:x1] = patch * (1 - alpha) + shade * alpha
        boxes.append(box)
        classes.append(cls)
    sigma = rng.uniform(0, 8)
    if sigma > 0.5:
        img[ry:ry + rh, rx:rx + rw] += rng.standard_normal((rh, rw, 3), dtype=np.float32) * np.float32(sigma)
    img = np.clip(img + 0.5, 0, 255).astype(np.uint8)
    return img, np.array(boxes, np.float32).reshape(-1, 4), np.array(classes, np.int64)


def write_png(path, rgb):
    """An 8-bit RGB PNG with zlib (no PIL here)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[r].tobytes() for r in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def write_avi(path, frames, fps=25):
    """Uncompressed (lossless) video with nothing but the standard library: an AVI 1.0 file of rawvideo BGR24
    frames (BI_RGB DIBs, bottom-up rows, as FFmpeg's AVI demuxer and rawvideo decoder read them), for readers
    without image codecs (sluice's FFmpeg file reader). `frames`: uint8 [height, width, 3] RGB, all one size;
    rows must be a multiple of 4 bytes (width * 3), as DIB rows are padded to that."""
    h, w, _ = frames[0].shape
    if (w * 3) % 4:
        raise ValueError("width * 3 must be a multiple of 4 (DIB rows are padded)")
    size = w * h * 3

    def chunk(tag, data):
        return tag + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")

    def lst(kind, body):
        return b"LIST" + struct.pack("<I", len(body) + 4) + kind + body

    n = len(frames)
    avih = struct.pack("<10I4I", 1000000 // fps, size * fps, 0, 0x10, n, 0, 1, size, w, h, 0, 0, 0, 0)
    strh = b"vids" + b"\x00\x00\x00\x00" + struct.pack("<IHHIIIIIIiI4h", 0, 0, 0, 0, 1, fps, 0, n, size, -1, 0,
                                                          0, 0, w, h)
    strf = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, size, 0, 0, 0, 0)
    hdrl = lst(b"hdrl", chunk(b"avih", avih) + lst(b"strl", chunk(b"strh", strh) + chunk(b"strf", strf)))
    movi, index, offset = [], [], 4  # idx1 offsets count from the 'movi' fourcc
    for f in frames:
        data = np.ascontiguousarray(f[::-1, :, ::-1]).tobytes()  # bottom-up rows, BGR
        movi.append(chunk(b"00db", data))
        index.append(b"00db" + struct.pack("<III", 0x10, offset, len(data)))
        offset += 8 + len(data)
    body = b"AVI " + hdrl + lst(b"movi", b"".join(movi)) + chunk(b"idx1", b"".join(index))
    with open(path, "wb") as out:
        out.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def render_clip(rng, width, height, frames, shapes=6):
    """A clip for config/pipelines/detect.yaml: one background, `shapes` shapes (one class each, the classes in
    turn) gliding at constant speeds and bouncing off the edges, later ones passing over earlier ones.
    Returns a list of uint8 [height, width, 3] RGB frames."""
    bg = background(rng, height, width)
    scale = max(width, height) / 256.0
    y = np.arange(height, dtype=np.float32)[:, None] + 0.5
    x = np.arange(width, dtype=np.float32)[None, :] + 0.5
    items = []
    for i in range(shapes):
        s = float(rng.uniform(24, 60)) * scale
        items.append({"cls": i % len(CLASSES), "s": s, "cx": rng.uniform(s / 2, width - s / 2),
                      "cy": rng.uniform(s / 2, height - s / 2), "vx": rng.uniform(-3, 3), "vy": rng.uniform(-3, 3),
                      "orient": int(rng.integers(4)), "colour": _colour(rng)})
    out = []
    for _ in range(frames):
        img = bg.copy()
        for it in items:
            d = _sdf(it["cls"], x, y, it["cx"], it["cy"], it["s"], it["orient"])
            alpha = np.clip(0.5 - d, 0, 1)[..., None]
            img = img * (1 - alpha) + it["colour"] * alpha
            for k, v, lim in (("cx", "vx", width), ("cy", "vy", height)):
                it[k] += it[v]
                if it[k] < it["s"] / 2 or it[k] > lim - it["s"] / 2:
                    it[v] = -it[v]
                    it[k] += 2 * it[v]
        out.append(np.clip(img + 0.5, 0, 255).astype(np.uint8))
    return out

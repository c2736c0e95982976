#!/usr/bin/env python3
"""Reference "hand-written PyTorch stream loop" that sluice's GPU data path is compared against.

What a competent engineer would write with stock PyTorch (eager mode, no custom kernels), run side by side
with sluice in the same session on the same host:

  source   N distinct synthetic frames (checkerboard + noise, fixed seed), packed per batch contiguously in a
           pre-filled ring of PINNED host batches; batches are taken round-robin, so the source costs nothing.
  per batch, on CUDA stream k = batch % K (each stream has its own device buffers and pinned output buffer):
    1. wait (event.synchronize) until the previous batch of slot k has landed in its pinned output buffer
    2. H2D: one non_blocking copy of the whole batch (pinned -> device)
    3. GPU work (see Recipe.process; --format bgr8 / nv12, --nv12-path)
    4. D2H: one non_blocking copy of the output tensor into slot k's pinned output buffer; record slot k's event
  timing   --warmup batches, then --repeats x (--batches batches between time.perf_counter() calls, ending with
           torch.cuda.synchronize()); median/min/max frames/s.
  bound    the same K-stream loop doing only the H2D copy of the same batches (the copy-engine bound), and the
           same GPU work on device-resident input without copies (compute-only), interleaved with the repeats.

With --model (e.g. resnet50): after step 3 the batch goes through the torchvision model (random weights, eval,
f16 channels_last when --dtype f16, cudnn.benchmark on), softmax and top-k on the GPU; step 4 copies only the top-k
back, and once a slot's event has fired the host writes one JSON line per frame (sequence, top-k indices and
scores) to --jsonl: the whole chain a hand-written stream loop runs.

Works on PyTorch 1.13 .. 2.x. --device cpu runs the same math on the CPU (no pinning, no streams, no copies)
as a smoke test.
"""

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# BT.601, limited ("video") range: Y in [16, 235], Cb/Cr in [16, 240] -> full-range RGB 0..255 (clamped).
# Same constants as sluice's kernels/preprocess.cu.
KY = 255.0 / 219.0
KC = 255.0 / 224.0
BT601 = {"rv": 1.402, "gu": -0.344136, "gv": -0.714136, "bu": 1.772}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def _interp_kwargs():
    # antialias= exists from PyTorch 1.11 on; pass it explicitly where it exists (default False anyway).
    try:
        import inspect

        if "antialias" in inspect.signature(F.interpolate).parameters:
            return {"antialias": False}
    except (TypeError, ValueError):
        pass
    return {}


INTERP_KW = _interp_kwargs()


def bilinear(x, size):
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False, **INTERP_KW)


def parse_size(s):
    s = s.lower()
    if "x" in s:
        w, h = s.split("x", 1)
        return int(w), int(h)
    return int(s), int(s)


def frame_shape(fmt, w, h):
    return (h, w, 3) if fmt == "bgr8" else (h * 3 // 2, w)


def make_frames(n, fmt, w, h, seed):
    """n distinct frames: a checkerboard whose cell size and phase change per frame, plus uniform noise."""
    g = torch.Generator().manual_seed(seed)
    yy = torch.arange(h).view(h, 1)
    xx = torch.arange(w).view(1, w)
    frames = []
    for f in range(n):
        cell = 8 + 8 * (f % 5)
        cb = ((((yy + 7 * f) // cell) + ((xx + 13 * f) // cell)) % 2).to(torch.uint8) * 128 + 32  # 32 or 160
        if fmt == "bgr8":
            tint = torch.tensor([(11 * f) % 32, (17 * f + 8) % 32, (23 * f + 16) % 32], dtype=torch.uint8)
            noise = torch.randint(0, 64, (h, w, 3), generator=g, dtype=torch.uint8)
            frames.append(cb.unsqueeze(-1) + tint + noise)  # <= 160 + 31 + 63 = 254
        else:
            y = cb + torch.randint(0, 64, (h, w), generator=g, dtype=torch.uint8)
            uv = torch.randint(64, 192, (h // 2, w), generator=g, dtype=torch.uint8)  # interleaved U,V
            frames.append(torch.cat([y, uv], 0))
    return frames


class Recipe:
    """The GPU (or CPU) work of one batch. Buffers live in a per-stream 'slot' dict made by make_slot()."""

    def __init__(self, args, device):
        self.a = args
        self.dev = device
        self.W, self.H = args.width, args.height
        self.ow, self.oh = args.out_wh
        self.out_dtype = torch.float16 if args.dtype == "f16" else torch.float32
        self.work_dtype = torch.float16 if args.resize_dtype == "f16" else torch.float32
        f32 = dict(dtype=torch.float32, device=device)
        mean = torch.tensor(IMAGENET_MEAN, **f32).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, **f32).view(1, 3, 1, 1)
        # (x/255 - mean)/std == x*scale + bias: one fused addcmul, computed in f32, stored in the output dtype.
        self.scale = 1.0 / (255.0 * std)
        self.bias = -mean / std
        # YUV->RGB with the offsets folded in (0-dim f32 tensors on the device so they never force a sync):
        #   R = KY*Y + r0 + rv*KC*V;  G = KY*Y + g0 + gu*KC*U + gv*KC*V;  B = KY*Y + b0 + bu*KC*U
        # Kept in f32 (resize-first: output-size math) and in the work dtype (convert-first: full resolution), so
        # no op ever has to cast its result to a different output dtype.
        oy = -16.0 * KY
        self.c_rv, self.c_gu, self.c_gv, self.c_bu = (BT601[k] * KC for k in ("rv", "gu", "gv", "bu"))
        yuv0 = (oy - 128.0 * self.c_rv, oy - 128.0 * (self.c_gu + self.c_gv), oy - 128.0 * self.c_bu, KY)
        self.k32 = [torch.tensor(v, **f32) for v in yuv0]  # r0, g0, b0, ky
        self.kwork = [torch.tensor(v, dtype=self.work_dtype, device=device) for v in yuv0]
        # Normalise: if this torch/device casts an op's f32 result straight into an f16 out= tensor (CUDA's
        # TensorIterator does), that is one kernel; else (1.13's CPU) f32 result, then copy_ into the output.
        self.fused_cast = self.out_dtype == torch.float32 or self._probe_fused_cast()
        self.model = None
        if args.model:
            import torchvision

            torch.backends.cudnn.benchmark = True
            m = getattr(torchvision.models, args.model)().eval().to(device, dtype=self.out_dtype)
            self.model = m.to(memory_format=torch.channels_last) if args.layout == "nhwc" else m

    def _probe_fused_cast(self):
        x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32, device=self.dev).view(2, 3, 4, 5)
        out = torch.empty((2, 4, 5, 3), dtype=self.out_dtype, device=self.dev).permute(0, 3, 1, 2)
        try:
            torch.addcmul(self.bias, x, self.scale, out=out)
        except RuntimeError:
            return False
        ref = x * self.scale + self.bias  # f32; the fused result may differ from it by an f16 rounding only
        return bool(torch.allclose(out.float(), ref, rtol=2e-3, atol=2e-3))

    # ---- buffers -------------------------------------------------------------------------------------------
    def make_slot(self, batch, pin):
        a, dev, H, W = self.a, self.dev, self.H, self.W
        s = {"batch": batch}
        fshape = frame_shape(a.format, W, H)
        s["d_in"] = torch.empty((batch,) + fshape, dtype=torch.uint8, device=dev) if dev.type == "cuda" else None
        oshape = (batch, self.oh, self.ow, 3) if a.layout == "nhwc" else (batch, 3, self.oh, self.ow)
        s["d_out"] = torch.empty(oshape, dtype=self.out_dtype, device=dev)
        # logical NCHW view the math writes through (channels_last strides for nhwc)
        s["out_view"] = s["d_out"].permute(0, 3, 1, 2) if a.layout == "nhwc" else s["d_out"]
        if self.model is not None:
            k = a.topk
            s["d_top"] = (torch.empty((batch, k), dtype=torch.float32, device=dev),
                          torch.empty((batch, k), dtype=torch.int64, device=dev))
            s["h_top"] = tuple(torch.empty_like(t, device="cpu", pin_memory=pin) for t in s["d_top"])
        if dev.type == "cuda":
            s["h_out"] = torch.empty(oshape, dtype=self.out_dtype, pin_memory=pin)
        else:
            s["h_out"] = s["d_out"]  # already on the host: no D2H
        wd = dict(dtype=self.work_dtype, device=dev)
        if a.format == "bgr8":
            # full-frame u8 -> float, logical NCHW with channels_last strides (= the permuted HWC bytes)
            s["xf"] = torch.empty((batch, 3, H, W), **wd).contiguous(memory_format=torch.channels_last)
        elif a.nv12_path == "convert-first":
            s["cc"] = torch.empty((batch, 3, H // 2, W // 2), **wd)  # chroma terms at chroma resolution
            if a.uv_upsample == "nearest":
                s["rgb"] = torch.empty((batch, 3, H, W), **wd)
        else:  # resize-first
            s["yf"] = torch.empty((batch, 1, H, W), **wd)
            s["uvf"] = torch.empty((batch, 2, H // 2, W // 2), **wd).contiguous(memory_format=torch.channels_last)
            s["cc_small"] = torch.empty((batch, 3, self.oh, self.ow), dtype=torch.float32, device=dev)
        return s

    # ---- the work ------------------------------------------------------------------------------------------
    def _chroma_terms(self, U, V, cc, k):
        """cc[:, c] = c0 + (matrix row c) . (U, V); U, V u8 or float (B, h, w); cc (B, 3, h, w) of k's dtype."""
        r0, g0, b0, _ = k
        torch.add(r0, V, alpha=self.c_rv, out=cc[:, 0])  # u8 in, float out: the conversion is fused
        torch.add(g0, U, alpha=self.c_gu, out=cc[:, 1])
        cc[:, 1].add_(V, alpha=self.c_gv)
        torch.add(b0, U, alpha=self.c_bu, out=cc[:, 2])

    def _normalise_out(self, rgb, s):
        # (x/255 - mean)/std as x*scale + bias in f32, written straight into the output layout (channels_last
        # strides for nhwc) and dtype: one kernel on the small resized tensor (two where the cast can't fuse).
        if self.fused_cast:
            torch.addcmul(self.bias, rgb, self.scale, out=s["out_view"])
        else:
            s["out_view"].copy_(torch.addcmul(self.bias, rgb, self.scale))

    def process(self, x, s):
        """x: (B, *frame_shape) uint8 on the compute device. Writes s['out_view'] (and s['d_top'] with a model)."""
        self.preprocess(x, s)
        if self.model is not None:
            logits = self.model(s["out_view"])
            torch.topk(torch.softmax(logits.float(), 1), self.a.topk, 1, out=s["d_top"])

    def preprocess(self, x, s):
        a, H, W, B = self.a, self.H, self.W, x.shape[0]
        osz = (self.oh, self.ow)
        if a.format == "bgr8":
            xf = s["xf"]
            xf.copy_(x.permute(0, 3, 1, 2))  # u8 BHWC -> float, same channels_last layout: 1 pass
            r = bilinear(xf, osz)  # channels_last (NHWC) bilinear kernel, output channels_last
            # BGR->RGB on the small resized tensor (resize is per channel, so this equals flipping first)
            self._normalise_out(r.flip(1), s)
            return
        Y = x[:, :H, :]  # (B, H, W) view
        uv = x[:, H:, :].view(B, H // 2, W // 2, 2)  # interleaved CbCr, view
        if a.nv12_path == "convert-first":
            # full-resolution YUV->RGB, then resize (the textbook order)
            cc = s["cc"]
            self._chroma_terms(uv[..., 0], uv[..., 1], cc, self.kwork)  # u8 -> float, chroma resolution
            if a.uv_upsample == "bilinear":
                rgb = bilinear(cc, (H, W))  # 2x bilinear chroma upsampling (centre-sited)
                rgb.addcmul_(Y.unsqueeze(1), self.kwork[3])  # + KY*Y, broadcast over the 3 channels
            else:
                # nearest (2x2 replication) without materialising upsampled chroma: broadcast views
                rgb = s["rgb"]
                torch.addcmul(
                    cc.view(B, 3, H // 2, 1, W // 2, 1),
                    Y.reshape(B, 1, H // 2, 2, W // 2, 2),
                    self.kwork[3],
                    out=rgb.view(B, 3, H // 2, 2, W // 2, 2),
                )
            rgb.clamp_(0.0, 255.0)
            r = bilinear(rgb, osz)
            self._normalise_out(r, s)
        else:
            # resize Y and CbCr planes to the output size first, then convert (sluice's order and math)
            yf, uvf = s["yf"], s["uvf"]
            yf.copy_(Y.unsqueeze(1))
            uvf.copy_(uv.permute(0, 3, 1, 2))
            yr = bilinear(yf, osz)
            uvr = bilinear(uvf, osz)
            if uvr.dtype != torch.float32:
                yr, uvr = yr.float(), uvr.float()
            cc = s["cc_small"]
            self._chroma_terms(uvr[:, 0], uvr[:, 1], cc, self.k32)
            cc.addcmul_(yr, self.k32[3]).clamp_(0.0, 255.0)
            self._normalise_out(cc, s)

    def steps(self):
        a = self.a
        if a.format == "bgr8":
            st = [
                "u8 BHWC -> %s NCHW (channels_last) copy" % a.resize_dtype,
                "F.interpolate bilinear align_corners=False antialias=False (NHWC kernel)",
                "flip(1) BGR->RGB on resized tensor",
            ]
        elif a.nv12_path == "convert-first":
            st = [
                "chroma terms (BT.601 limited) from u8 CbCr at chroma resolution (%s)" % a.resize_dtype,
                "chroma 2x upsample: %s" % a.uv_upsample,
                "+ KY*Y at full resolution, clamp 0..255",
                "F.interpolate bilinear align_corners=False antialias=False",
            ]
        else:
            st = [
                "u8 Y -> %s, u8 CbCr -> %s" % (a.resize_dtype, a.resize_dtype),
                "F.interpolate bilinear of Y and of CbCr straight to output size",
                "YUV->RGB (BT.601 limited) f32 at output size, clamp 0..255",
            ]
        if self.fused_cast:
            st.append("addcmul x*1/(255 std) - mean/std in f32, stored as %s %s (1 kernel)" % (a.dtype, a.layout))
        else:
            st.append("addcmul x*1/(255 std) - mean/std in f32, then copy_ to %s %s (2 kernels)" % (a.dtype, a.layout))
        if self.model is not None:
            st.append("torchvision %s eager (%s, %s), softmax, top-%d; D2H of the top-k; host writes JSON lines"
                      % (a.model, a.dtype, "channels_last" if a.layout == "nhwc" else "contiguous", a.topk))
        return st


class Loop:
    """K slots (stream, device buffers, pinned output, event) fed round-robin from the pinned ring."""

    def __init__(self, recipe, ring, K, batch, device):
        self.rc, self.ring, self.K, self.B, self.dev = recipe, ring, K, batch, device
        self.cuda = device.type == "cuda"
        self.slots = [recipe.make_slot(batch, pin=self.cuda) for _ in range(K)]
        self.streams = [torch.cuda.Stream(device=device) for _ in range(K)] if self.cuda else None
        self.events = [torch.cuda.Event() for _ in range(K)] if self.cuda else None
        self.pending = [False] * K
        self.first_seq = [0] * K
        self.n = 0
        self.sink = open(recipe.a.jsonl, "w") if recipe.model is not None else None

    def _slot(self):
        k = self.n % self.K
        src = self.ring[self.n % len(self.ring)]
        self.n += 1
        if self.pending[k]:
            # the host needs the result anyway: wait for slot k's previous D2H before reusing its buffers
            self.events[k].synchronize()
            if self.sink is not None:
                self._write_results(k)
        self.first_seq[k] = (self.n - 1) * self.B
        return k, src

    def _write_results(self, k):
        scores, classes = (t.tolist() for t in self.slots[k]["h_top"])
        seq = self.first_seq[k]
        for i in range(self.B):
            self.sink.write(json.dumps({"sequence": seq + i, "top": classes[i], "scores": scores[i]}) + "\n")

    def recipe_step(self):
        k, src = self._slot()
        s = self.slots[k]
        if not self.cuda:
            self.rc.process(src, s)
            if self.sink is not None:
                for h, d in zip(s["h_top"], s["d_top"]):
                    h.copy_(d)
                self._write_results(k)
            return
        st = self.streams[k]
        with torch.cuda.stream(st):
            s["d_in"].copy_(src, non_blocking=True)
            self.rc.process(s["d_in"], s)
            if self.sink is not None:
                for h, d in zip(s["h_top"], s["d_top"]):
                    h.copy_(d, non_blocking=True)
            else:
                s["h_out"].copy_(s["d_out"], non_blocking=True)
            self.events[k].record(st)
        self.pending[k] = True

    def h2d_step(self):
        k, src = self._slot()
        st = self.streams[k]
        with torch.cuda.stream(st):
            self.slots[k]["d_in"].copy_(src, non_blocking=True)
            self.events[k].record(st)
        self.pending[k] = True

    def compute_step(self):
        # same GPU work on device-resident input, current stream, no copies (what the SMs allow)
        s = self.slots[0]
        self.rc.process(s["d_in"] if self.cuda else self.ring[0], s)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def run(self, step, nbatches):
        """frames/s of nbatches calls of step: perf_counter around the loop plus a final synchronize."""
        self.sync()
        t0 = time.perf_counter()
        for _ in range(nbatches):
            step()
        self.sync()
        return nbatches * self.B / (time.perf_counter() - t0)


def versions(device):
    info = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda, "cudnn_version": None}
    try:
        info["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - informational only
        pass
    try:
        import torchvision

        info["torchvision_version"] = torchvision.__version__
    except Exception:  # noqa: BLE001
        info["torchvision_version"] = None
    info["gpu_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    info["python_version"] = platform.python_version()
    return info


def verify(recipe, ring, device, nframes=2):
    """GPU output of the first frames vs the same math on the CPU in f32 (catches layout/stream bugs)."""
    x = ring[0][:nframes]
    s = recipe.make_slot(nframes, pin=False)
    recipe.preprocess(x.to(device), s)
    got = s["d_out"].float().cpu()
    cpu_args = argparse.Namespace(**vars(recipe.a))
    cpu_args.resize_dtype = "f32"
    cpu_args.dtype = "f32"
    cpu_args.model = None
    ref_rc = Recipe(cpu_args, torch.device("cpu"))
    rs = ref_rc.make_slot(nframes, pin=False)
    ref_rc.preprocess(x.cpu(), rs)
    return float((got - rs["d_out"]).abs().max())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device index")
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--format", choices=["bgr8", "nv12"], default="bgr8")
    p.add_argument("--frames", type=int, default=64, help="distinct synthetic frames (N)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", default="224x224", help="output WIDTHxHEIGHT")
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    p.add_argument("--layout", choices=["nhwc", "nchw"], default="nhwc")
    p.add_argument("--streams", type=int, default=2, help="K CUDA streams / slots")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--nv12-path",
        choices=["convert-first", "resize-first"],
        default="convert-first",
        help="nv12: convert to RGB at full resolution then resize (default), or resize the Y and CbCr planes\n"
        "to the output size first and convert there (sluice's order; far less work)",
    )
    p.add_argument("--uv-upsample", choices=["bilinear", "nearest"], default="bilinear",
                   help="nv12 convert-first: 2x chroma upsampling")
    p.add_argument("--resize-dtype", choices=["f32", "f16"], default="f32",
                   help="float type of the full-resolution work and the resize (after it: f32 math, output dtype)")
    p.add_argument("--no-bound", action="store_true", help="skip the H2D-only and compute-only measurements")
    p.add_argument("--no-verify", action="store_true", help="skip the GPU-vs-CPU check of the first frames")
    p.add_argument("--model", help="torchvision model to run after preprocessing (e.g. resnet50)")
    p.add_argument("--topk", type=int, default=5, help="--model: classes per frame written to --jsonl")
    p.add_argument("--jsonl", default="/dev/null", help="--model: where the per-frame JSON lines go")
    p.add_argument("--json", metavar="PATH", help="write the result as a JSON object to PATH")
    a = p.parse_args(argv)

    a.out_wh = parse_size(a.out)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device visible")
    if min(a.width, a.height, a.batch, a.frames, a.streams, a.batches, a.repeats, *a.out_wh) < 1 or a.warmup < 0:
        p.error("sizes and counts must be positive")
    if a.format == "nv12" and (a.width % 2 or a.height % 2):
        p.error("nv12 needs an even width and height")
    device = torch.device("cuda", a.gpu) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    cuda = device.type == "cuda"
    K = a.streams if cuda else 1

    grad_off = torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()
    with grad_off:
        return run(a, device, cuda, K)


def run(a, device, cuda, K):
    B = a.batch
    fshape = frame_shape(a.format, a.width, a.height)
    frame_bytes = math.prod(fshape)
    # ring of pre-filled pinned batches: at least K, and enough to hold all N distinct frames once
    R = max(K, -(-a.frames // B))
    t = time.perf_counter()
    frames = make_frames(a.frames, a.format, a.width, a.height, a.seed)
    ring = []
    for r in range(R):
        buf = torch.empty((B,) + fshape, dtype=torch.uint8, pin_memory=cuda)
        for i in range(B):
            buf[i].copy_(frames[(r * B + i) % a.frames])
        ring.append(buf)
    del frames
    pinned = all(b.is_pinned() for b in ring) if cuda else False
    if cuda and not pinned:
        raise RuntimeError("ring is not pinned")
    rc = Recipe(a, device)
    loop = Loop(rc, ring, K, B, device)
    out_bytes = loop.slots[0]["d_out"].numel() * loop.slots[0]["d_out"].element_size()
    log(
        "torch_recipe: %s %dx%d %s batch %d -> %dx%d %s %s; %d stream(s); ring of %d batches (%.1f MiB "
        "each, %s); setup %.1f s"
        % (device, a.width, a.height, a.format, B, a.out_wh[0], a.out_wh[1], a.dtype, a.layout, K, R,
           B * frame_bytes / 2**20, "pinned" if pinned else "not pinned", time.perf_counter() - t)
    )

    verify_err = None
    if cuda and not a.no_verify:
        verify_err = verify(rc, ring, device)
        log("verify: max |GPU - CPU f32| over 2 frames = %.3g" % verify_err)

    # warm-up (allocator, kernels, clocks)
    for _ in range(a.warmup):
        loop.recipe_step()
    do_bound = cuda and not a.no_bound
    loop.sync()
    if do_bound:
        for _ in range(max(1, a.warmup // 2)):
            loop.h2d_step()
        loop.sync()
        for _ in range(max(1, a.warmup // 2)):
            loop.compute_step()
        loop.sync()

    fps, bound, comp = [], [], []
    for rep in range(a.repeats):  # interleaved so drift (clocks, host load) hits all three alike
        fps.append(loop.run(loop.recipe_step, a.batches))
        if do_bound:
            bound.append(loop.run(loop.h2d_step, a.batches))
            comp.append(loop.run(loop.compute_step, a.batches))
        log(
            "  repeat %d: recipe %.1f frames/s%s"
            % (rep + 1, fps[-1], ("; H2D only %.1f; compute only %.1f" % (bound[-1], comp[-1])) if do_bound else "")
        )

    med = statistics.median(fps)
    bmed = statistics.median(bound) if bound else None
    res = {
        "recipe": ("torch-eager-%dstream" % K if cuda else "torch-eager-cpu") + ("-" + a.model if a.model else ""),
        "config": {
            "device": str(device), "width": a.width, "height": a.height, "format": a.format, "batch": B,
            "frames": a.frames, "seed": a.seed, "out": list(a.out_wh), "dtype": a.dtype, "layout": a.layout,
            "streams": K, "warmup": a.warmup, "batches": a.batches, "repeats": a.repeats,
            "nv12_path": a.nv12_path if a.format == "nv12" else None,
            "uv_upsample": a.uv_upsample if a.format == "nv12" and a.nv12_path == "convert-first" else None,
            "resize_dtype": a.resize_dtype, "ring_batches": R, "pinned": pinned, "model": a.model, "topk": a.topk,
            "in_bytes_per_batch": B * frame_bytes, "out_bytes_per_batch": out_bytes,
            "yuv": "bt601 limited" if a.format == "nv12" else None,
            "steps": rc.steps(),
        },
        "fps_median": med, "fps_min": min(fps), "fps_max": max(fps), "fps_all": fps,
        "h2d_bound_fps_median": bmed,
        "h2d_bound_fps_min": min(bound) if bound else None, "h2d_bound_fps_max": max(bound) if bound else None,
        "h2d_bound_gbps_median": bmed * frame_bytes / 1e9 if bmed else None,
        "ratio_to_h2d_bound": med / bmed if bmed else None,
        "compute_only_fps_median": statistics.median(comp) if comp else None,
        "verify_max_abs_err": verify_err,
        "host": platform.node(),
    }
    res.update(versions(device))

    log("torch_recipe result (%s, %s):" % (res["gpu_name"] or "cpu", res["host"]))
    log("  recipe      %10.1f frames/s median  (min %.1f, max %.1f; %d x %d batches of %d)"
        % (med, min(fps), max(fps), a.repeats, a.batches, B))
    if bmed:
        log("  H2D bound   %10.1f frames/s median  (%.1f GB/s pinned H2D, %d stream(s)); recipe/bound = %.3f"
            % (bmed, res["h2d_bound_gbps_median"], K, res["ratio_to_h2d_bound"]))
        log("  compute     %10.1f frames/s median  (GPU work alone, device-resident input, 1 stream)"
            % res["compute_only_fps_median"])
    log("  torch %s, CUDA %s, cuDNN %s" % (res["torch_version"], res["cuda_version"], res["cudnn_version"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""ResNet-50 reference outputs for checking sluice against PyTorch on the GPU host.

Writes OUTDIR/resnet50.onnx (bench/torch_infer.py's network: same seed), OUTDIR/resnet50.input.npy (a fixed
random batch) and OUTDIR/resnet50.output.npy (PyTorch's f32 output for it: CUDA when present, TF32 off, so it is
a true f32 reference). compare.py-style check: `sluiced model OUTDIR/resnet50.onnx --input ... --output ...`.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_infer import build_resnet50, export_onnx  # noqa: E402


def main():
    out, batch = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
    os.makedirs(out, exist_ok=True)
    model = build_resnet50()
    export_onnx(model, os.path.join(out, "resnet50.onnx"), 224)
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(11))
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.no_grad():
        y = model.to(device)(x.to(device)).float().cpu()
    np.save(os.path.join(out, "resnet50.input.npy"), x.numpy())
    np.save(os.path.join(out, "resnet50.output.npy"), y.numpy())
    print("wrote %s/resnet50.{onnx,input.npy,output.npy}: batch %d, torch %s on %s" % (out, batch, torch.__version__,
                                                                                     device))


if __name__ == "__main__":
    main()

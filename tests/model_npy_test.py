#!/usr/bin/env python3
"""`sluiced model --input X.npy --output Y.npy` against PyTorch's outputs (the nn_reference fixture's files):
the path a user takes to compare sluice with another framework. Usage: model_npy_test.py SLUICED REFERENCE_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sluiced, ref = sys.argv[1], sys.argv[2]
failures = 0
with tempfile.TemporaryDirectory() as tmp:
    for name in ("mixnet", "resnet18"):
        out = os.path.join(tmp, name + ".out.npy")
        run = subprocess.run([sluiced, "model", os.path.join(ref, name + ".onnx"), "--device", "cpu",
                              "--input", os.path.join(ref, name + ".input.npy"), "--output", out],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print("FAIL %s: exit %d\n%s" % (name, run.returncode, run.stderr))
            failures += 1
            continue
        got, want = np.load(out), np.load(os.path.join(ref, name + ".output.npy"))
        err = float(np.abs(got - want).max() / np.abs(want).max()) if got.shape == want.shape else float("inf")
        ok = err <= 1e-4
        failures += not ok
        print("%s %s: shape %s, max |sluice - torch| / max |torch| = %.3g" % ("ok  " if ok else "FAIL", name,
                                                                          got.shape, err))
sys.exit(1 if failures else 0)

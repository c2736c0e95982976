#!/usr/bin/env python3
"""compare_npy.py GOT.npy WANT.npy MAX_REL: max |got - want| / max |want| <= MAX_REL, and the top-1 agreement."""
import sys

import numpy as np

got, want, limit = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
if got.shape != want.shape:
    sys.exit("shape %s != %s" % (got.shape, want.shape))
rel = float(np.abs(got - want).max() / np.abs(want).max())
top1 = float((got.reshape(len(got), -1).argmax(1) == want.reshape(len(want), -1).argmax(1)).mean())
print("%s: max rel err %.3g (limit %.0e), top-1 agreement %.3f -> %s" % (sys.argv[1], rel, limit, top1,
                                                                        "ok" if rel <= limit else "FAIL"))
sys.exit(0 if rel <= limit else 1)

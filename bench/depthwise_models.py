#!/usr/bin/env python3
"""depthwise_models.py OUT_DIR: one-node depthwise Conv models (dynamic batch, random weights and bias) for
bench/depthwise_conv.sh: ConvNeXt-T's 7x7 stages at 224x224 input, a MobileNet 3x3 and a stride-2 3x3."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def depthwise(path, channels, size, kernel, stride=1):
    rng = np.random.default_rng(channels * 100 + kernel)
    w = nh.from_array((rng.standard_normal((channels, 1, kernel, kernel)) * 0.1).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], group=channels, pads=[kernel // 2] * 4, strides=[stride] * 2,
                       kernel_shape=[kernel, kernel])
    graph = h.make_graph([node], "depthwise", [h.make_tensor_value_info("x", T.FLOAT, ["N", channels, size, size])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", channels, out, out])], [w, b])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for channels, size in ((96, 56), (192, 28), (384, 14), (768, 7)):
        depthwise(f"{out}/dw_c{channels}_{size}_k7.onnx", channels, size, 7)
    depthwise(f"{out}/dw_c144_56_k3.onnx", 144, 56, 3)
    depthwise(f"{out}/dw_c144_56_k3_s2.onnx", 144, 56, 3, stride=2)

#!/usr/bin/python3
"""Writes the seed corpora of npy_fuzz and onnx_fuzz (fuzz/corpus/npy, fuzz/corpus/onnx): small valid files
of each kind, and the attack inputs of issue 11. Run from the repository root with a python that has onnx and
numpy (/usr/bin/python3 after scripts/setup.sh). The seeds are committed; this script documents them."""
import shutil
import struct

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def npy(header, data=b"", version=1):
    raw = header.encode("latin1")
    length = struct.pack("<H", len(raw)) if version == 1 else struct.pack("<I", len(raw))
    return b"\x93NUMPY" + bytes([version, 0]) + length + raw + data


def hdr(descr, shape, order="False", pad=0):
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, order, shape) + " " * pad + "\n"


NPY = {
    "f4_2x3": npy(hdr("<f4", "(2, 3)"), struct.pack("<6f", *range(6))),
    "f8_1": npy(hdr("<f8", "(1,)"), struct.pack("<d", 2.5)),
    "f2_2": npy(hdr("<f2", "(2,)"), b"\x00\x3c\x00\x40"),
    "i8_scalar": npy(hdr("<i8", "()"), struct.pack("<q", -7)),
    "i4_2x2": npy(hdr("<i4", "(2, 2)"), struct.pack("<4i", 1, -2, 3, -4)),
    "u1_3": npy(hdr("|u1", "(3,)"), b"\x01\x02\xff"),
    "i1_3": npy(hdr("|i1", "(3,)"), b"\x01\x02\xff"),
    "b1_2": npy(hdr("|b1", "(2,)"), b"\x01\x00"),
    "v2_f4": npy(hdr("<f4", "(1,)"), b"\0\0\x80\x3f", version=2),
    "v3_f4": npy(hdr("<f4", "(1,)"), b"\0\0\x80\x3f", version=3),
    "dquote": npy('{"descr": "<f4", "fortran_order": False, "shape": (1,)}', b"\0\0\x80\x3f"),
    "fortran": npy(hdr("<f4", "(1, 1)", order="True"), b"\0\0\x80\x3f"),
    "big_endian": npy(hdr(">f4", "(1,)"), b"\x3f\x80\0\0"),
    "zero_dim": npy(hdr("<f4", "(0, 4611686018427387904)")),
    "overflow_shape": npy(hdr("<f4", "(4294967296, 4294967296)")),
    "huge_dim": npy(hdr("<f4", "(99999999999999999999,)")),
    "truncated_data": npy(hdr("<f4", "(1000000000, 1000)"), b"\0" * 16),
    "padded_40000": npy(hdr("<f4", "(1,)", pad=40000), b"\0\0\x80\x3f"),  # std::regex overflowed its stack
    "header_over_limit": npy(hdr("<f4", "(1,)", pad=66000), version=2),
    "dims_65": npy(hdr("<f4", "(" + "1," * 65 + ")"), b"\0\0\0\0"),
    "unknown_key": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", b"\0\0\0\0"),
    "non_utf8_key": npy("{'\xff\xfe': 1}"),
}


def model(nodes, inputs, outputs, inits=(), opset=13):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def w(name, array):
    return nh.from_array(np.asarray(array), name)


def external(offset, length, location="weights.bin"):
    t = T()
    t.name, t.data_type, t.data_location = "w", T.FLOAT, T.EXTERNAL
    t.dims.append(3)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", [1, 3])], [vi("y", None)], [t])


def onnx_seeds():
    conv_w, conv_b = w("w", np.ones((2, 1, 3, 3), np.float32)), w("b", np.zeros(2, np.float32))
    f32 = lambda *v: np.array(v, np.float32)
    i64 = lambda *v: np.array(v, np.int64)
    return {
        "conv": model([h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
                       h.make_node("Relu", ["c"], ["y"])], [vi("x", ["N", 1, 8, 8])], [vi("y", None)], [conv_w, conv_b]),
        # SIGFPE in cpu::make_conv before shapes were checked
        "conv_huge_h": model([h.make_node("Conv", ["x", "w"], ["y"])], [vi("x", ["N", 1, 2**60, 8])], [vi("y", None)],
                             [conv_w]),
        "conv_huge_pads": model([h.make_node("Conv", ["x", "w"], ["y"], pads=[2**62, 0, 2**62, 0])],
                                [vi("x", ["N", 1, 8, 8])], [vi("y", None)], [conv_w]),
        "conv_transpose": model([h.make_node("ConvTranspose", ["x", "tw", "tb"], ["u"], strides=[2, 2], pads=[1, 1, 1, 1],
                                             output_padding=[1, 1], group=2),
                                 h.make_node("ConvTranspose", ["u", "tw2"], ["y"], auto_pad="SAME_UPPER", strides=[2, 1])],
                                [vi("x", ["N", 2, 5, 5])], [vi("y", None)],
                                [w("tw", np.ones((2, 2, 3, 3), np.float32)), w("tb", np.zeros(4, np.float32)),
                                 w("tw2", np.ones((4, 1, 2, 2), np.float32))]),
        "conv_transpose_huge_stride": model([h.make_node("ConvTranspose", ["x", "tw"], ["y"], strides=[2**62, 1])],
                                            [vi("x", ["N", 2, 8, 8])], [vi("y", None)],
                                            [w("tw", np.ones((2, 2, 3, 3), np.float32))]),
        "pool": model([h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                   ceil_mode=1),
                       h.make_node("AveragePool", ["p"], ["q"], kernel_shape=[2, 2], count_include_pad=1),
                       h.make_node("GlobalAveragePool", ["q"], ["y"])], [vi("x", ["N", 2, 9, 9])], [vi("y", None)]),
        "bn_gemm": model([h.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["n"]),
                          h.make_node("Flatten", ["n"], ["f"]),
                          h.make_node("Gemm", ["f", "gw", "gb"], ["g"], transB=1),
                          h.make_node("Softmax", ["g"], ["y"], axis=1)],
                         [vi("x", ["N", 2, 2, 2])], [vi("y", None)],
                         [w("s", f32(1, 1)), w("bb", f32(0, 0)), w("m", f32(0, 0)), w("v", f32(1, 1)),
                          w("gw", np.ones((3, 8), np.float32)), w("gb", f32(0, 0, 0))]),
        "shape_ops": model([h.make_node("Shape", ["x"], ["s"]),
                            h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
                            h.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
                            h.make_node("Concat", ["nu", "m1"], ["shape"], axis=0),
                            h.make_node("Reshape", ["x", "shape"], ["r"]),
                            h.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
                            h.make_node("Slice", ["t", "st", "en", "axs"], ["sl"]),
                            h.make_node("Pad", ["sl", "pads"], ["pd"], mode="constant"),
                            h.make_node("Split", ["pd"], ["a", "b"], axis=1),
                            h.make_node("MatMul", ["a", "b"], ["mm"]),
                            h.make_node("Resize", ["mm", "", "scales"], ["y"], mode="nearest")],
                           [vi("x", ["N", 2, 4, 4])], [vi("y", None), vi("r", None)],
                           [w("i0", np.array(0, np.int64)), w("ax", i64(0)), w("m1", i64(-1)), w("st", i64(0)),
                            w("en", i64(3)), w("axs", i64(2)), w("pads", i64(0, 0, 0, 1, 0, 0, 0, 0)),
                            w("scales", f32(1, 1, 2, 2))]),
        "constant_of_shape_huge": model([h.make_node("ConstantOfShape", ["d"], ["c"]), h.make_node("Add", ["x", "c"], ["y"])],
                                        [vi("x", [1, 2])], [vi("y", None)], [w("d", i64(2**40))]),
        "elementwise": model([h.make_node("Add", ["x", "k"], ["a"]), h.make_node("Mul", ["a", "k"], ["m"]),
                              h.make_node("Sub", ["m", "k"], ["s"]), h.make_node("Div", ["s", "k"], ["d"]),
                              h.make_node("Sigmoid", ["d"], ["e"]), h.make_node("Clip", ["e", "lo", "hi"], ["f"]),
                              h.make_node("LeakyRelu", ["f"], ["g"], alpha=0.1), h.make_node("HardSwish", ["g"], ["y"])],
                             [vi("x", ["N", 3])], [vi("y", None)],
                             [w("k", f32(1, 2, 3)), w("lo", np.array(0, np.float32)), w("hi", np.array(6, np.float32))],
                             opset=14),
        "math_reduce_norm": model([h.make_node("LayerNormalization", ["x", "ls", "lb"], ["n"], axis=-1),
                                   h.make_node("Erf", ["n"], ["e"]), h.make_node("Abs", ["e"], ["a"]),
                                   h.make_node("Pow", ["a", "k2"], ["p"]), h.make_node("Sqrt", ["p"], ["q"]),
                                   h.make_node("Max", ["q", "n"], ["mx"]),
                                   h.make_node("ReduceMean", ["mx"], ["rm"], axes=[2, 3], keepdims=0),
                                   h.make_node("ReduceL2", ["mx"], ["r2"], axes=[1], keepdims=1),
                                   h.make_node("Gather", ["r2", "i0"], ["g"], axis=2),
                                   h.make_node("Exp", ["rm"], ["y"])],
                                  [vi("x", ["N", 2, 3, 4])], [vi("y", None), vi("g", None)],
                                  [w("ls", f32(1, 2, 3, 4)), w("lb", f32(0, 0, 0, 1)), w("k2", f32(2)),
                                   w("i0", np.array(1, np.int64))], opset=17),
        "scatter_nd": model([h.make_node("ScatterND", ["d", "idx", "u"], ["s"], reduction="add"),
                             h.make_node("Mul", ["x", "s"], ["y"])], [vi("x", ["N", 3, 2])], [vi("y", None)],
                            [w("d", np.ones((3, 2), np.float32)), w("idx", np.array([[2], [0]], np.int64)),
                             w("u", f32(1, 2, 3, 4).reshape(2, 2))], opset=17),
        "range_huge": model([h.make_node("Range", ["a", "b", "d"], ["r"]), h.make_node("Cast", ["r"], ["f"], to=1),
                             h.make_node("Add", ["x", "f"], ["y"])], [vi("x", [1])], [vi("y", None)],
                            [w("a", np.array(0, np.int64)), w("b", np.array(2**62, np.int64)),
                             w("d", np.array(1, np.int64))]),
        "rewritten_ranking": model([h.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode="CRD"),
                                    h.make_node("SpaceToDepth", ["d"], ["s"], blocksize=2),
                                    h.make_node("InstanceNormalization", ["s", "is", "ib"], ["n"], epsilon=1e-3),
                                    h.make_node("Tile", ["n", "rep"], ["t"]),
                                    h.make_node("LogSoftmax", ["t"], ["l"], axis=1),
                                    h.make_node("TopK", ["l", "k"], ["v", "i"], axis=-1, largest=0),
                                    h.make_node("ArgMax", ["v"], ["y"], axis=1, keepdims=0, select_last_index=1),
                                    h.make_node("ArgMin", ["i"], ["z"], axis=3)],
                                   [vi("x", ["N", 8, 2, 2])], [vi("y", None), vi("z", None)],
                                   [w("is", f32(1, 2, 3, 4, 5, 6, 7, 8)), w("ib", f32(0, 0, 0, 0, 1, 1, 1, 1)),
                                    w("rep", i64(1, 1, 2, 3)), w("k", i64(2))]),
        # opset 18's spellings: Reduce axes and Pad axes as inputs, Split num_outputs, Resize axes; GroupNormalization
        # with per-group (18) and per-channel (21) scale and bias
        "opset18": model([h.make_node("ReduceMean", ["x", "rax"], ["r"], keepdims=1),
                          h.make_node("GroupNormalization", ["x", "gs", "gb"], ["g"], num_groups=2, epsilon=1e-3),
                          h.make_node("Pad", ["g", "pads", "", "pax"], ["p"], mode="edge"),
                          h.make_node("Split", ["p"], ["a", "b", "c"], axis=3, num_outputs=3),
                          h.make_node("Resize", ["a", "", "scales"], ["y"], mode="linear", axes=[2], antialias=1)],
                         [vi("x", ["N", 4, 4, 4])], [vi("y", None), vi("r", None)],
                         [w("rax", i64(-1)), w("gs", f32(1, 2)), w("gb", f32(0, 1)), w("pads", i64(1, 1)),
                          w("pax", i64(-1)), w("scales", f32(2))], opset=18),
        "opset21_group_norm": model([h.make_node("GroupNormalization", ["x", "gs", "gb"], ["y"], num_groups=2,
                                                 stash_type=1)],
                                    [vi("x", ["N", 4, 3])], [vi("y", None)],
                                    [w("gs", f32(1, 2, 3, 4)), w("gb", f32(0, 1, 0, 1))], opset=21),
        "opset18_antialias_shrink": model([h.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", axes=[2, 3],
                                                       antialias=1)],
                                          [vi("x", ["N", 1, 8, 8])], [vi("y", None)], [w("scales", f32(0.5, 0.5))],
                                          opset=18),
        # issue 31's ops (RT-DETR, MaxViT): GridSample, Einsum, Sin, Cos, TopK's indices into GatherElements; and an
        # Einsum equation that must be refused (a diagonal under an ellipsis)
        "detr_ops": model([h.make_node("GridSample", ["x", "grid"], ["s"], mode="bilinear", padding_mode="border",
                                       align_corners=0),
                           h.make_node("Reshape", ["s", "flat"], ["f"]),
                           h.make_node("Einsum", ["f", "f"], ["e"], equation="bcl, bdl -> bcd"),
                           h.make_node("Sin", ["e"], ["sn"]),
                           h.make_node("Cos", ["e"], ["cs"]),
                           h.make_node("Add", ["sn", "cs"], ["a"]),
                           h.make_node("TopK", ["a", "k"], ["v", "i"], axis=-1),
                           h.make_node("GatherElements", ["a", "i"], ["y"], axis=2)],
                          [vi("x", ["N", 4, 6, 6]), vi("grid", ["N", 3, 3, 2])], [vi("y", None)],
                          [w("flat", i64(0, 4, 9)), w("k", i64(2))], opset=17),
        "einsum_diagonal": model([h.make_node("Einsum", ["x"], ["y"], equation="b...ii->b...i")],
                                 [vi("x", ["N", 2, 3, 3])], [vi("y", None)], opset=17),
        "tile_huge_repeats": model([h.make_node("Tile", ["x", "rep"], ["y"])], [vi("x", ["N", 2])], [vi("y", None)],
                                   [w("rep", i64(1, 2**40))]),
        "external_ok": external("0", "12"),
        "external_abc": external("abc", "12"),  # a bare std::stoll error before
        "external_dotdot": external("0", "12", "../../etc/passwd"),
        "external_abs": external("0", "12", "/dev/zero"),
    }


def main():
    for name, data in NPY.items():
        open("fuzz/corpus/npy/%s.npy" % name, "wb").write(data)
    for name, m in onnx_seeds().items():
        open("fuzz/corpus/onnx/%s.onnx" % name, "wb").write(m.SerializeToString())
    shutil.copy("models/testsrc-classifier.onnx", "fuzz/corpus/onnx/testsrc-classifier.onnx")


if __name__ == "__main__":
    main()

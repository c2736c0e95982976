#!/usr/bin/env python3
"""Reference models and PyTorch's outputs for sluice's inference tests.

usage: /usr/bin/python3 tests/nn/export_reference.py OUTDIR

For each model NAME it writes OUTDIR/NAME.onnx (batch dimension dynamic), OUTDIR/NAME.input.npy (a random
batch of 2, f32) and OUTDIR/NAME.output.npy (PyTorch's f32 output for it: eval mode, torch.no_grad):

  resnet18, mobilenet_v2   torchvision, random weights, with random BatchNorm running statistics and affine
                           parameters, exported with the BatchNormalization nodes kept (so sluice's folding of
                           them into the convolutions is really tested), opset 13, 2x3x224x224
  mixnet                   a small net that exercises every op the loader and passes handle (see MixNet),
                           opset 13, 2x3x64x64; also as mixnet_op11 and mixnet_op17 (the same weights and
                           input exported at opsets 11 and 17, where ONNX spells several ops differently)

  shufflenet_v2_x0_5,      torchvision, random weights and BatchNorm statistics, opset 13, 2x3x64x64 (ReduceMean,
  mnasnet0_5               and ShuffleNet's channel shuffle)
  mathnet                  the elementwise math ops, reductions, LayerNorm and folded shape ops (see MathNet),
                           opset 17 (LayerNormalization) and as mathnet_op13 (LayerNorm spelled out), 2x3x16x16
  convnext_small           torchvision's ConvNeXt with two small stages (LayerNorm, Erf GELU, channels-last
                           Linear layers), opset 17 and as convnext_small_op13, 2x3x64x64
  vit_small                torchvision's VisionTransformer at 32x32, 8x8 patches, 2 layers (attention, the class
                           token gathered from run-time data, Expand/Where from the exporter), opset 17
  swin_small               torchvision's SwinTransformer at 32x32, two stages of two blocks (shifted windows:
                           the attention mask folded from ScatterND/Where), opset 17
  ranknet                  InstanceNorm, GroupNorm, pixel_shuffle/unshuffle, repeat, log_softmax, argmax, topk
                           (see RankNet), opset 13 and as ranknet_op11 (the opset 11 spellings), 2x3x16x16
  decoder_small            a tiny encoder-decoder whose upsampling is ConvTranspose (stride 2 with
                           output_padding and groups 2; 4x4 stride 2 pad 1; dilation 2), opset 13, 2x3x16x16
  mixnet_op18, mathnet_op18  the opset-17 exports rewritten in opset 18's spellings of the same ops (Reduce*
                           axes as an input, Split num_outputs, Pad pads for an axes input, Resize axes): torch
                           1.13 exports at most opset 17; the outputs are PyTorch's, as for opset 17
  groupnorm_op18,          GroupNormalization (opset 18: scale and bias per group; opset 21: per channel) three
  groupnorm_op21           times (3 groups, epsilon 1e-3; 6 groups = the channels; 1 group, epsilon 0.1), built
                           with onnx.helper; the output is NumPy's (float64, checked against
                           torch.nn.functional.group_norm), 2x6x5x7
  detrnet                  Einsum (outer product, attention, MaxViT's form), Sin/Cos, GridSample both ways,
                           TopK's indices into GatherElements (see DetrNet), opset 17, 2x3x16x16

Deterministic (fixed seeds). A model whose three files exist and are newer than this script is skipped.
Works under torch 1.13 (Debian) and torch 2.x (dynamo=False where torch.onnx.export has that argument).
"""

import collections
import inspect
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SEED = 20261130


def randomize_batchnorm(model, calibration, generator):
    """Gives every BatchNorm2d statistics and affine parameters that are neither identity nor degenerate.

    Running statistics are first measured on `calibration` (so activations stay in a sane range through deep
    nets), then perturbed; weight and bias are drawn at random."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batch
    model.train()
    with torch.no_grad():
        model(calibration)
    for bn in bns:
        c = bn.num_features
        with torch.no_grad():
            std = bn.running_var.sqrt()
            bn.running_mean += 0.2 * std * torch.randn(c, generator=generator)
            bn.running_var *= torch.empty(c).uniform_(0.6, 1.6, generator=generator)
            bn.weight.copy_(torch.empty(c).uniform_(0.5, 1.5, generator=generator))
            bn.bias.copy_(0.2 * torch.randn(c, generator=generator))
        bn.momentum = 0.1
    model.eval()


class MixNet(nn.Module):
    """Every op the ONNX front end takes, at small sizes (input 3x64x64, output 10 logits).

    Conv (plain, strided, depthwise, dilated, with and without BatchNorm), BatchNormalization not after a
    Conv, Relu, Clip (ReLU6), HardSwish, HardSigmoid, LeakyRelu, Sigmoid, Tanh, Concat, Split, Slice (steps),
    Pad (constant, reflect), Resize (nearest; bilinear with align_corners False), MaxPool and AveragePool
    (ceil_mode, padding, count_include_pad both ways), GlobalAveragePool, Transpose, MatMul, Softmax, Reshape,
    Flatten, Gemm, and Add/Sub/Mul/Div with broadcasting against [1,C,1,1] constants, scalars and activations."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(16)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.depthwise_bn = nn.BatchNorm2d(16)
        self.dilated = nn.Conv2d(16, 16, 3, padding=2, dilation=2)
        self.branch_a = nn.Conv2d(16, 8, 1)
        self.branch_b = nn.Conv2d(16, 8, 1)
        self.mix_bn = nn.BatchNorm2d(32)  # follows Mul/Sub, not a Conv: stays a BatchNormalization
        self.channel_scale = nn.Parameter(torch.empty(1, 32, 1, 1))
        self.channel_shift = nn.Parameter(torch.empty(1, 32, 1, 1))
        self.channel_divisor = nn.Parameter(torch.empty(1, 12, 1, 1))
        self.reduce = nn.Conv2d(20, 12, 1)
        self.up_conv = nn.Conv2d(12, 12, 3, padding=1)
        self.attn_q = nn.Conv2d(12, 8, 1)
        self.attn_k = nn.Conv2d(12, 8, 1)
        self.attn_v = nn.Conv2d(12, 12, 1)
        self.head_pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True)
        self.fc1 = nn.Linear(12 * 4 * 4, 32)
        self.fc2 = nn.Linear(32 + 12, 10)

    def forward(self, x):  # x: N,3,64,64
        s = F.relu6(self.stem_bn(self.stem(x)))                                 # N,16,32,32
        d = F.hardswish(self.depthwise_bn(self.depthwise(s)))
        d = F.leaky_relu(self.dilated(d), 0.1)
        a = torch.sigmoid(self.branch_a(d))
        b = torch.tanh(self.branch_b(d))
        c = torch.cat([a, b, s], 1)                                             # N,32,32,32
        c = self.mix_bn(c * self.channel_scale - self.channel_shift)
        p, q = torch.split(c, [12, 20], 1)
        p = F.hardsigmoid(p)
        q = F.relu(self.reduce(q))
        m = p + q / self.channel_divisor                                        # N,12,32,32
        m = F.pad(m, (1, 1, 0, 1), value=0.25)                                  # N,12,33,34
        m = F.max_pool2d(m, 3, stride=2, ceil_mode=True)                        # N,12,16,17 (last column partial)
        m = m[:, :, 1:15, 0:17:2]                                               # N,12,14,9
        m = F.avg_pool2d(m, 2, stride=2, ceil_mode=True, count_include_pad=False)  # N,12,7,5 (last column partial)
        m = F.interpolate(m, scale_factor=2.0, mode="nearest")                  # N,12,14,10
        m = F.interpolate(m, size=(16, 12), mode="bilinear", align_corners=False)  # N,12,16,12
        m = F.pad(m, (2, 2, 0, 0), mode="reflect")                              # N,12,16,16
        m = self.up_conv(m) * torch.sigmoid(m) - 0.5                            # N,12,16,16
        n, ch, h, w = m.shape
        # Attention over the 8x8 positions: Transpose, MatMul, Softmax, Reshape.
        small = F.max_pool2d(m, 2)                                              # N,12,8,8
        q_ = self.attn_q(small).reshape(n, 8, 64).transpose(1, 2)              # N,64,8
        k_ = self.attn_k(small).reshape(n, 8, 64)                               # N,8,64
        v_ = self.attn_v(small).reshape(n, 12, 64)                              # N,12,64
        weights = torch.softmax(torch.matmul(q_, k_) / 8.0 ** 0.5, dim=-1)     # N,64,64
        attended = torch.matmul(v_, weights.transpose(1, 2)).reshape(n, 12, 8, 8)
        pooled = self.head_pool(attended + small)                              # N,12,4,4
        pooled_sum = F.adaptive_avg_pool2d(m, 1).flatten(1)                   # N,12
        hidden = F.leaky_relu(self.fc1(torch.flatten(pooled, 1)), 0.2)
        return self.fc2(torch.cat([hidden, pooled_sum], 1)) / 0.125


class MathNet(nn.Module):
    """The elementwise math ops, the reductions, LayerNorm and the shape ops that only fold (input 3x16x16,
    output 10 logits).

    LayerNorm over the last axis (LayerNormalization at opset 17; ReduceMean/Sub/Pow/Sqrt/Div before), Erf,
    Abs, Pow, Neg, Exp, Log, Reciprocal, Sqrt, Floor, Ceil, Max, Min, ReduceMean/Sum/Max/Min/L1/L2/Prod with
    and without keepdims, Gather of run-time data (x[:, :, 0]), and Range/Less/Where/Expand computed from
    shapes (folded to constants at prepare time)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(16)
        self.token = nn.Parameter(torch.empty(1, 8))
        self.fc = nn.Linear(8 * 9 + 1, 10)

    def forward(self, x):  # x: N,3,16,16
        y = self.norm(self.conv(x))                                              # N,8,16,16
        g = 0.5 * y * (1 + torch.erf(y / 2 ** 0.5))                            # GELU, spelled out
        p = torch.pow(g.abs() + 0.1, 1.5)
        e = torch.exp(-p) + torch.log(p + 1)
        r = torch.reciprocal(e + 1) + torch.sqrt(p)
        f = torch.floor(r * 4) / 4 + torch.ceil(g) * 0.1
        m = torch.maximum(f, g) - torch.minimum(f, p)                            # N,8,16,16
        w = m.shape[3]
        sign = torch.where(torch.arange(w) < w // 2, 1.0, -1.0)                 # Range, Less, Where: folded
        m = m * sign
        n = m.shape[0]
        token = self.token.expand(n, -1)                                         # Expand: folded
        feats = [m.mean(dim=(2, 3)), m.sum(dim=3).amax(dim=2), torch.amin(m, dim=1, keepdim=True).mean((2, 3)),
                 m.norm(p=2, dim=(2, 3)), m.norm(p=1, dim=(2, 3)) / 256, torch.prod(1 + 0.01 * m.mean(3), dim=2),
                 m[:, :, 0].mean(2), token, m.mean((1, 3)).amax(1, True) * token,
                 m.std(dim=(2, 3))]
        return self.fc(torch.cat(feats, 1))


class DecoderNet(nn.Module):
    """An encoder-decoder whose upsampling is ConvTranspose2d in the spellings exporters write: stride 2 with
    output_padding and groups, the 4x4 stride-2 pad-1 of DCGAN/U-Net decoders, and a dilated one."""

    def __init__(self):
        super().__init__()
        self.down1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)                  # 16 -> 8
        self.down2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)                 # 8 -> 4
        self.up1 = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2)  # 4 -> 8
        self.up2 = nn.ConvTranspose2d(16, 6, 4, stride=2, padding=1, bias=False)                  # 8 -> 16
        self.refine = nn.ConvTranspose2d(6, 4, 3, padding=2, dilation=2)      # 16 -> 16

    def forward(self, x):  # x: N,3,16,16
        a = F.relu(self.down1(x))
        b = F.relu(self.down2(a))
        u = F.relu(self.up1(b))
        u = torch.cat([u, a], 1)                                              # skip connection: N,16,8,8
        return torch.sigmoid(self.refine(F.leaky_relu(self.up2(u), 0.1)))


def small_convnext():
    """ConvNeXt (torchvision's class) with two small stages, its layer scale drawn at random so that each block's
    branch counts (the default 1e-6 would hide it)."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(SEED + 5)
    net = ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 1)], num_classes=10)
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name.endswith("layer_scale"):
                param.uniform_(0.5, 1.5)
    return net


def small_vit():
    """Vision Transformer (torchvision's class): 32x32 input, 8x8 patches, 2 layers, 4 heads, width 64."""
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(SEED + 6)
    net = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                            num_classes=10)
    with torch.no_grad():
        net.class_token.normal_(0, 1)
        net.encoder.pos_embedding.normal_(0, 0.5)
        net.heads.head.weight.normal_(0, 0.1)
    return net


def small_swin():
    """Swin Transformer (torchvision's class): 32x32 input, 4x4 patches, two stages of two blocks (the second
    block of each shifts its windows: the mask comes from ScatterND and Where on constants), width 32."""
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(SEED + 8)
    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


class RankNet(nn.Module):
    """The ops sluice rewrites into others and the ranking ops (input 3x16x16, output 59 values a row).

    InstanceNorm2d (InstanceNormalization), pixel_shuffle (DepthToSpace CRD), GroupNorm (Reshape,
    InstanceNormalization, Reshape, Mul, Add at opset <= 17), pixel_unshuffle, repeat (Tile), log_softmax
    (LogSoftmax), argmax (ArgMax) and topk (TopK). The ranked scores are a fixed order 4 apart plus tanh of the
    data, so no rounding (f16 on a GPU) can swap two of them; their values and indices are part of the output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(16, affine=True)
        self.gnorm = nn.GroupNorm(2, 4)
        self.register_buffer("order", 4.0 * torch.randperm(16).float())

    def forward(self, x):  # x: N,3,16,16
        y = self.inorm(self.conv(x))                                             # N,16,16,16
        s = self.gnorm(F.pixel_shuffle(y, 2))                                    # N,4,32,32
        u = F.pixel_unshuffle(s, 4)                                              # N,64,8,8
        p = F.adaptive_avg_pool2d(u, 1).flatten(1)                               # N,64
        t = F.log_softmax(4 * p[:, :16].repeat(1, 3), dim=1)                     # N,48
        scores = torch.tanh(p[:, 16:32]) + self.order                            # N,16
        values, indices = scores.topk(5, dim=1)
        best = scores.argmax(1, keepdim=True)
        return torch.cat([t, values, indices.float(), best.float()], 1)


class DetrNet(nn.Module):
    """The ops of transformer-era detectors (issue 31: RT-DETR, MaxViT) as their exports write them (input 3x16x16,
    output 1344 values a row).

    A sine/cosine position embedding from torch.einsum's outer product of two constant ranges (folded: Einsum, Sin,
    Cos), single-head attention spelled with torch.einsum (bqd,bkd->bqk and bqk,bkd->bqd), MaxViT's five-index form
    (B G H I D, B G H J D -> B G H I J, with spaces), F.grid_sample at offsets predicted from the data (GridSample:
    bilinear/zeros and nearest/border with align_corners), and torch.gather along the indices of topk
    (GatherElements of TopK's run-time indices). The ranked scores are a fixed order 4 apart plus tanh of the data,
    so no rounding can swap two of them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.qkv = nn.Linear(8, 24)
        self.offsets = nn.Linear(8, 2)
        self.register_buffer("order", 4.0 * torch.randperm(64).float())

    def forward(self, x):  # x: N,3,16,16
        feat = self.conv(x)                                                      # N,8,16,16
        tokens = F.avg_pool2d(feat, 2).flatten(2).transpose(1, 2)                # N,64,8
        position = torch.arange(64, dtype=torch.float32)
        omega = 1.0 / (100.0 ** (torch.arange(4, dtype=torch.float32) / 4))
        angles = torch.einsum("i,j->ij", position, omega)                        # 64,4
        tokens = tokens + torch.cat([angles.sin(), angles.cos()], 1)
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)                              # N,64,8 each
        attn = torch.softmax(torch.einsum("bqd,bkd->bqk", q, k) / 8 ** 0.5, dim=-1)
        out = torch.einsum("bqk,bkd->bqd", attn, v)                              # N,64,8
        heads = out.reshape(-1, 2, 2, 64, 2)                                     # B G H I D
        rel = torch.einsum("B G H I D, B G H J D -> B G H I J", heads, heads)   # N,2,2,64,64
        grid = torch.tanh(self.offsets(out)).reshape(-1, 8, 8, 2) * 1.2          # N,8,8,2 (past the edges too)
        bilinear = F.grid_sample(feat, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        nearest = F.grid_sample(feat, grid, mode="nearest", padding_mode="border", align_corners=True)
        scores = torch.tanh(out.mean(-1)) + self.order                           # N,64
        _, indices = scores.topk(8, dim=1)                                       # N,8
        picked = torch.gather(out, 1, indices.unsqueeze(-1).expand(-1, -1, 8))   # N,8,8
        return torch.cat([bilinear.flatten(1), nearest.flatten(1), picked.flatten(1), rel.mean(dim=4).flatten(1)], 1)


def randomize_norms(model, generator):
    """Affine parameters of the normalizations away from 1 and 0, so that they are really applied."""
    for m in model.modules():
        if isinstance(m, (nn.InstanceNorm2d, nn.GroupNorm)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.normal_(0, 0.5, generator=generator)


def build_mixnet(generator):
    torch.manual_seed(SEED + 3)
    net = MixNet()
    with torch.no_grad():
        net.channel_scale.copy_(torch.empty(1, 32, 1, 1).uniform_(0.5, 1.5, generator=generator))
        net.channel_shift.copy_(0.3 * torch.randn(1, 32, 1, 1, generator=generator))
        net.channel_divisor.copy_(torch.empty(1, 12, 1, 1).uniform_(0.5, 2.0, generator=generator))
    return net


def torchvision_model(name):
    builder = getattr(torchvision.models, name)
    if "weights" in inspect.signature(builder).parameters:
        return builder(weights=None)
    return builder(pretrained=False)


def export_onnx(model, example, path, opset):
    kwargs = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    # PRESERVE keeps each BatchNormalization as a node (EVAL would fold it into the Conv before sluice sees it).
    kwargs["training"] = torch.onnx.TrainingMode.PRESERVE
    torch.onnx.export(model, example, path, opset_version=opset, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, do_constant_folding=True, **kwargs)
    graph = onnx.load(path)
    onnx.checker.check_model(graph)
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()) and not any(
            n.op_type == "BatchNormalization" for n in graph.graph.node):
        raise RuntimeError("%s: the export folded BatchNormalization away; the reference would not test folding" % path)


def constant_values(graph, name):
    """The array behind value `name` when an initializer or a Constant node holds it, else None."""
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


def to_opset18(path):
    """Rewrites an opset-17 model file in place in opset 18's spellings of the same ops: Reduce* (but ReduceSum,
    which took them as an input since 13) get their axes as an input, Split without sizes num_outputs, Pad its
    pads for the padded axes only and an axes input (negative axes), Resize scales or sizes for H and W only and
    attribute axes. Returns how many nodes of each op changed."""
    model = onnx.load(path)
    graph = model.graph
    changed = collections.Counter()

    def add_constant(array):
        name = "opset18_%d" % len(graph.initializer)
        graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    for node in graph.node:
        op = node.op_type
        if op.startswith("Reduce") and op != "ReduceSum":
            axes = [a for a in node.attribute if a.name == "axes"]
            if axes:
                node.attribute.remove(axes[0])
                node.input.append(add_constant(np.array(axes[0].ints, np.int64)))
                changed[op] += 1
        elif op == "Split" and len(node.input) == 1:
            node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
            changed[op] += 1
        elif op == "Pad":
            pads = constant_values(graph, node.input[1])
            if pads is None:
                continue
            rank = len(pads) // 2
            axes = [d for d in range(rank) if pads[d] or pads[rank + d]]
            node.input[1] = add_constant(np.array([pads[d] for d in axes] + [pads[rank + d] for d in axes], np.int64))
            while len(node.input) < 3:
                node.input.append("")
            node.input.append(add_constant(np.array([d - rank for d in axes], np.int64)))
            changed[op] += 1
        elif op == "Resize":
            for index in (3, 2):  # sizes, else scales
                values = constant_values(graph, node.input[index]) if len(node.input) > index and node.input[index] else None
                if values is not None and values.size == 4:
                    node.input[index] = add_constant(values[2:])
                    node.attribute.append(helper.make_attribute("axes", [2, 3]))
                    changed[op] += 1
                    break
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 18
    onnx.save(model, path)
    return changed


def group_norm(x, scale, bias, groups, epsilon, per_channel):
    """GroupNormalization in float64: per_channel (opset 21) or per-group (opset 18) scale and bias."""
    n, c = x.shape[:2]
    grouped = x.astype(np.float64).reshape(n, groups, -1)
    mean, var = grouped.mean(-1, keepdims=True), grouped.var(-1, keepdims=True)
    normalized = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    if not per_channel:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return normalized * scale.reshape(shape).astype(np.float64) + bias.reshape(shape).astype(np.float64)


def write_groupnorm_reference(outdir, name, opset, generator):
    """GroupNormalization three times, built with onnx.helper at `opset`; the output is NumPy's."""
    per_channel = opset >= 21
    x = torch.randn(2, 6, 5, 7, generator=generator).numpy().astype(np.float32)
    nodes, inits, value, want, want_torch = [], [], "input", x, torch.from_numpy(x)
    for i, (groups, epsilon) in enumerate([(3, 1e-3), (6, None), (1, 0.1)]):
        count = 6 if per_channel else groups
        scale = (torch.rand(count, generator=generator) + 0.5).numpy().astype(np.float32)
        bias = torch.randn(count, generator=generator).numpy().astype(np.float32)
        inits += [numpy_helper.from_array(scale, "scale%d" % i), numpy_helper.from_array(bias, "bias%d" % i)]
        out = "output" if i == 2 else "gn%d" % i
        attrs = {"num_groups": groups}
        if epsilon is not None:
            attrs["epsilon"] = epsilon
        nodes.append(helper.make_node("GroupNormalization", [value, "scale%d" % i, "bias%d" % i], [out],
                                      name="group_norm%d" % i, **attrs))
        eps = 1e-5 if epsilon is None else epsilon
        want = group_norm(want, scale, bias, groups, eps, per_channel).astype(np.float32)
        repeat = 1 if per_channel else 6 // groups
        want_torch = F.group_norm(want_torch, groups, torch.from_numpy(np.repeat(scale, repeat)),
                                  torch.from_numpy(np.repeat(bias, repeat)), eps)
        value = out
    if not np.allclose(want, want_torch.numpy(), rtol=1e-4, atol=1e-4):
        raise RuntimeError("%s: the NumPy GroupNormalization differs from torch.nn.functional.group_norm" % name)
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", 6, 5, 7])],
                              [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch", 6, 5, 7])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, os.path.join(outdir, name + ".onnx"))  # onnx 1.12's checker knows opsets up to 17 only
    np.save(os.path.join(outdir, name + ".input.npy"), x)
    np.save(os.path.join(outdir, name + ".output.npy"), want)
    print("wrote %s/%s.{onnx,input.npy,output.npy}: opset %d, GroupNormalization x3, NumPy reference"
          % (outdir, name, opset), flush=True)


def up_to_date(outdir, name):
    script_time = os.path.getmtime(os.path.abspath(__file__))
    paths = [os.path.join(outdir, name + suffix) for suffix in (".onnx", ".input.npy", ".output.npy")]
    return all(os.path.exists(p) and os.path.getmtime(p) >= script_time for p in paths)


def write_reference(outdir, name, model, example, opset):
    model.eval()
    with torch.no_grad():
        output = model(example)
    path = os.path.join(outdir, name + ".onnx")
    export_onnx(model, example, path, min(opset, 17))
    if opset == 18:
        changed = to_opset18(path)
        if not changed:
            raise RuntimeError("%s: nothing to rewrite in opset 18's spellings" % path)
        print("rewrote %s at opset 18: %s" % (path, dict(changed)), flush=True)
    np.save(os.path.join(outdir, name + ".input.npy"), example.numpy().astype(np.float32))
    np.save(os.path.join(outdir, name + ".output.npy"), output.numpy().astype(np.float32))
    print("wrote %s/%s.{onnx,input.npy,output.npy}: opset %d, input %s, output %s (|max| %.3g)"
          % (outdir, name, opset, list(example.shape), list(output.shape), float(output.abs().max())), flush=True)


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    outdir = argv[1]
    # The exporter's advice (constant folding with PRESERVE, Slice steps, shape inference of constants) is about
    # cases that do not arise with these eval-mode models; checker and the BatchNormalization check stay on.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export")  # torch >= 2.9: chosen
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(min(2, torch.get_num_threads()))

    jobs = [("resnet18", 224, 13), ("mobilenet_v2", 224, 13), ("mixnet", 64, 13), ("mixnet_op11", 64, 11),
            ("mixnet_op17", 64, 17), ("shufflenet_v2_x0_5", 64, 13), ("mnasnet0_5", 64, 13),
            ("mathnet", 16, 17), ("mathnet_op13", 16, 13), ("convnext_small", 64, 17), ("convnext_small_op13", 64, 13),
            ("vit_small", 32, 17), ("swin_small", 32, 17), ("ranknet", 16, 13), ("ranknet_op11", 16, 11),
            ("decoder_small", 16, 13), ("mixnet_op18", 64, 18), ("mathnet_op18", 16, 18),
            ("groupnorm_op18", 0, 18), ("groupnorm_op21", 0, 21), ("detrnet", 16, 17)]
    mixnet = None
    for name, size, opset in jobs:
        if up_to_date(outdir, name):
            print("up to date: %s/%s.{onnx,input.npy,output.npy}" % (outdir, name), flush=True)
            continue
        # One generator per model, seeded from its family, so each model's files do not depend on the others.
        family = name.split("_op")[0]
        generator = torch.Generator().manual_seed(SEED + sum(family.encode()))
        if family == "groupnorm":
            write_groupnorm_reference(outdir, name, opset, generator)
            continue
        example = torch.randn(2, 3, size, size, generator=generator)
        if family in ("mathnet", "convnext_small", "vit_small", "swin_small", "ranknet", "decoder_small", "detrnet"):
            torch.manual_seed(SEED + 7)
            model = {"mathnet": MathNet, "convnext_small": small_convnext, "vit_small": small_vit,
                     "swin_small": small_swin, "ranknet": RankNet, "decoder_small": DecoderNet,
                     "detrnet": DetrNet}[family]()
            if family == "mathnet":
                with torch.no_grad():
                    model.token.normal_(0, 1)
            if family == "ranknet":
                randomize_norms(model, generator)
            model.eval()
        elif family == "mixnet":
            if mixnet is None:
                mixnet = build_mixnet(generator)
                calibration = torch.randn(8, 3, size, size, generator=generator)
                randomize_batchnorm(mixnet, calibration, generator)
            model = mixnet
        else:
            torch.manual_seed(SEED)
            model = torchvision_model(name)
            calibration = torch.randn(8, 3, size, size, generator=generator)
            randomize_batchnorm(model, calibration, generator)
        write_reference(outdir, name, model, example, opset)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

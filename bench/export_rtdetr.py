#!/usr/bin/env python3
"""Exports Hugging Face transformers' RT-DETR (RTDetrForObjectDetection, random weights) to ONNX at opset 17 with
PyTorch's TorchScript exporter, as a user's export would, and writes the op types its graph holds.

  python3 bench/export_rtdetr.py OUT_DIR [--size default|small] [--batch N] [--image 640] [--ops-only]
  python3 bench/export_rtdetr.py OUT_DIR --maxvit-ops

default: the library's default config (ResNet-50-vd backbone, hybrid encoder, 6 deformable-attention decoder
layers, 300 queries, 80 classes). small: the same architecture with narrower layers and fewer of them (a test
model of a few MB with the same op types). Writes OUT_DIR/rtdetr-SIZE.onnx, OUT_DIR/rtdetr-SIZE-ops.json (op type
-> count), and for small also the input and PyTorch f32 CPU outputs as .npy (logits, pred_boxes) for the op tests.
--maxvit-ops: torchvision's MaxViT-T (random weights) exported the same way; only OUT_DIR/maxvit-ops.json is kept.
Needs transformers and torchvision >= 0.15 (the GPU host has both; Debian's torch 1.13 cannot export these).
"""
import argparse, collections, json, os, sys

import numpy as np
import torch


def build(size):
    from transformers import RTDetrConfig, RTDetrForObjectDetection
    if size == "default":
        cfg = RTDetrConfig()
    else:
        from transformers import RTDetrResNetConfig
        backbone = RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                      layer_type="bottleneck", out_features=["stage2", "stage3", "stage4"])
        cfg = RTDetrConfig(backbone_config=backbone, encoder_in_channels=[32, 64, 128],
                           encoder_hidden_dim=64, encoder_ffn_dim=128, d_model=64, decoder_ffn_dim=128,
                           decoder_in_channels=[64, 64, 64], decoder_layers=2, num_queries=50, encoder_attention_heads=4, decoder_attention_heads=4,
                           num_labels=5)
    torch.manual_seed(0)
    return RTDetrForObjectDetection(cfg).eval()


class Outputs(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        out = self.m(pixel_values=x)
        return out.logits, out.pred_boxes


def write_op_list(graph, path):
    """Op type -> count, and the attributes of the ops whose variants matter (Einsum's equations, GridSample's
    modes, TopK's axis), so the op tests cover what real exports hold."""
    import onnx
    ops = collections.Counter(n.op_type for n in graph.node)
    variants = collections.defaultdict(collections.Counter)
    for n in graph.node:
        if n.op_type in ("Einsum", "GridSample", "TopK", "ScatterND", "GatherElements", "Tile", "Resize"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            variants[n.op_type][json.dumps({k: v.decode() if isinstance(v, bytes) else v for k, v in sorted(attrs.items())})] += 1
    with open(path, "w") as f:
        json.dump({"ops": dict(sorted(ops.items())), "variants": {k: dict(v) for k, v in variants.items()}}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", choices=["default", "small"], default="small")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image", type=int, default=640)
    ap.add_argument("--ops-only", action="store_true", help="keep only the op list (the model file is deleted)")
    ap.add_argument("--maxvit-ops", action="store_true", help="torchvision's MaxViT-T's op list instead")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.maxvit_ops:
        import onnx, tempfile, torchvision
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "maxvit_t.onnx")
            torch.onnx.export(torchvision.models.maxvit_t().eval(), torch.rand(1, 3, 224, 224), path, opset_version=17,
                              dynamo=False)
            write_op_list(onnx.load(path).graph, os.path.join(a.out, "maxvit-ops.json"))
        return 0
    m = Outputs(build(a.size))
    torch.manual_seed(1)
    x = torch.rand(a.batch, 3, a.image, a.image)
    path = os.path.join(a.out, f"rtdetr-{a.size}.onnx")
    with torch.no_grad():
        logits, boxes = m(x)
        torch.onnx.export(m, x, path, opset_version=17, dynamo=False, input_names=["images"],
                          output_names=["logits", "pred_boxes"], dynamic_axes={"images": {0: "N"}})
    import onnx
    g = onnx.load(path).graph
    write_op_list(g, os.path.join(a.out, f"rtdetr-{a.size}-ops.json"))
    info = {"file": path, "bytes": os.path.getsize(path), "nodes": len(g.node)}
    if a.ops_only:
        os.remove(path)
    elif a.size == "small":
        np.save(os.path.join(a.out, "rtdetr-small-input.npy"), x.numpy())
        np.save(os.path.join(a.out, "rtdetr-small-logits.npy"), logits.numpy())
        np.save(os.path.join(a.out, "rtdetr-small-boxes.npy"), boxes.numpy())
    print(json.dumps(info))


if __name__ == "__main__":
    sys.exit(main())

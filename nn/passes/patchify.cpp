// A Conv whose kernel tiles its input (stride == kernel, no padding, no dilation, one group) — the patch
// embedding of ViT, Swin, DeiT, ConvNeXt's stem — is a product of each patch with the weights. It becomes
//   Reshape [N, C, H/kh, kh, W/kw, kw] -> Transpose [N, H/kh, W/kw, C, kh, kw] -> Reshape [N, H/kh * W/kw, C*kh*kw]
//   -> Linear (W as [C*kh*kw, O], the bias) -> Reshape [N, H/kh, W/kw, O] -> Transpose [N, O, H/kh, W/kw]
// one copy of the input and one GEMM instead of a convolution over 3 channels, which cuDNN runs far below the
// tensor cores' speed (0.49 ms for ViT-B/16's at f16 batch 64 on an H200). The Transpose back to NCHW usually
// cancels against the model's own flatten + transpose to tokens (collapse_moves.cpp). When the Conv's input is
// channels-last data turned NCHW by a Transpose (ConvNeXt's and Swin's downsampling after a LayerNorm over C),
// each patch is gathered as [kh, kw, C] instead, so that the one move collapse_moves leaves copies whole rows of C.
#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

bool tiles_its_input(const Graph& g, const Node& conv) {
  if (conv.inputs.size() < 2 || g.is_constant(conv.inputs[0]) || !g.is_constant(conv.inputs[1])) return false;
  if (conv.inputs.size() > 3 && !conv.inputs[3].empty()) return false;  // a residual is fused later, not here
  if (!conv.attrs.s("activation", "").empty() || conv.attrs.i("group", 1) != 1) return false;
  const Tensor& w = g.constants.at(conv.inputs[1]);
  const Shape& x = g.shape_of(conv.inputs[0]);
  if (w.type != ElementType::f32 || w.shape.size() != 4 || x.size() != 4) return false;
  const auto strides = conv.attrs.ints("strides"), pads = conv.attrs.ints("pads"), dilations = conv.attrs.ints("dilations");
  if (strides.size() != 2 || pads.size() != 4 || dilations != std::vector<std::int64_t>{1, 1}) return false;
  for (std::int64_t p : pads)
    if (p != 0) return false;
  const std::int64_t kh = w.shape[2], kw = w.shape[3];
  if (strides[0] != kh || strides[1] != kw || kh * kw == 1) return false;  // a 1x1 Conv is a GEMM for cuDNN already
  return x[1] == w.shape[1] && x[2] % kh == 0 && x[3] % kw == 0;
}

class Patchify {
 public:
  explicit Patchify(Graph& g) : g_(g) {
    for (const Node& n : g_.nodes)
      if (n.op == Op::Transpose && n.attrs.ints("perm") == std::vector<std::int64_t>{0, 3, 1, 2}) from_channels_last_.insert(n.outputs.at(0));
  }

  void run() {
    std::vector<Node> out;
    for (Node& node : g_.nodes) {
      if (node.op == Op::Conv && tiles_its_input(g_, node)) {
        for (Node& n : rewrite(node)) out.push_back(std::move(n));
        continue;
      }
      out.push_back(std::move(node));
    }
    g_.nodes = std::move(out);
  }

 private:
  std::vector<Node> rewrite(const Node& conv) {
    const Tensor& w = g_.constants.at(conv.inputs[1]);
    const Shape x = g_.shape_of(conv.inputs[0]);
    const std::int64_t n = x[0], c = x[1], o = w.shape[0], kh = w.shape[2], kw = w.shape[3];
    const std::int64_t h = x[2] / kh, wd = x[3] / kw, k = c * kh * kw;
    std::vector<Node> nodes;
    const auto add = [&](Op op, const std::string& role, std::vector<std::string> inputs, Shape shape,
                         const std::string& output = "") {
      const std::string name = unused_value_name(g_, conv.name + "/patchify/" + role);
      Node node{name, op, std::move(inputs), {output.empty() ? name : output}, {}};
      g_.shapes[node.outputs[0]] = std::move(shape);
      nodes.push_back(std::move(node));
      return nodes.back().outputs[0];
    };
    const auto reshape = [&](const std::string& role, const std::string& in, Shape shape) {
      const std::string v = add(Op::Reshape, role, {in}, shape);
      nodes.back().attrs.values["shape"] = std::vector<std::int64_t>(shape.begin(), shape.end());
      return v;
    };
    const auto transpose = [&](const std::string& role, const std::string& in, std::vector<std::int64_t> perm,
                               Shape shape, const std::string& output = "") {
      const std::string v = add(Op::Transpose, role, {in}, std::move(shape), output);
      nodes.back().attrs.values["perm"] = std::move(perm);
      return v;
    };
    const bool channels_last = from_channels_last_.count(conv.inputs[0]) != 0;
    const std::string split = reshape("split", conv.inputs[0], {n, c, h, kh, wd, kw});
    const std::string gathered = channels_last ? transpose("gather", split, {0, 2, 4, 3, 5, 1}, {n, h, wd, kh, kw, c})
                                               : transpose("gather", split, {0, 2, 4, 1, 3, 5}, {n, h, wd, c, kh, kw});
    const std::string patches = reshape("patches", gathered, {n, h * wd, k});
    Tensor weights;  // [O, C, kh, kw] -> [C*kh*kw, O], or [kh*kw*C, O] for channels-last patches
    weights.shape = {k, o};
    weights.f32.resize(static_cast<std::size_t>(k * o));
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t u = 0; u < kh * kw; ++u) {
        const std::int64_t row = channels_last ? u * c + ch : ch * kh * kw + u;
        for (std::int64_t j = 0; j < o; ++j)
          weights.f32[static_cast<std::size_t>(row * o + j)] = w.f32[static_cast<std::size_t>(j * k + ch * kh * kw + u)];
      }
    const std::string bias = conv.inputs.size() > 2 ? conv.inputs[2] : "";
    const std::string product = add(Op::Linear, "product", {patches, add_constant(g_, conv.name, "patch_weights", std::move(weights)), bias, ""},
                                    {n, h * wd, o});
    nodes.back().attrs.values["activation"] = std::string();
    const std::string grid = reshape("grid", product, {n, h, wd, o});
    transpose("to_nchw", grid, {0, 3, 1, 2}, {n, o, h, wd}, conv.outputs.at(0));
    g_.rewrites.push_back("made " + conv.where() + " a product of its " + std::to_string(kh) + "x" + std::to_string(kw) +
                          " patches (Reshape, Transpose, Linear)");
    return nodes;
  }

  Graph& g_;
  std::set<std::string> from_channels_last_;  // outputs of Transposes NHWC -> NCHW
};

}  // namespace

void patchify(Graph& g) { Patchify(g).run(); }

}  // namespace sluice::nn::passes

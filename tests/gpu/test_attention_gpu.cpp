// The CUDA Attention node against the CPU twin, each of its three ways forced in turn (products around a softmax
// kernel, the older fused kernel, the flash kernel: CudaEngineOptions::attention), at f32, f16 and bf16.
// Error bound as in test_nn_ops_gpu.cpp: max |gpu - cpu| / max |cpu| <= 1e-3 (f32), 1e-2 (f16), 3e-2 (bf16).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nn/cuda/kernels.cuh"
#include "nn_gpu_support.hpp"

using namespace sluice::nn;
using namespace sluice::nn::test;

namespace {

using Mode = CudaEngineOptions::AttentionMode;

// One Attention node by its logical sizes: Q [B.., T, d], K [B.., S, d], V [B.., S, dv], Y [B.., T, dv].
struct AttentionCase {
  Shape batch;  // the leading dims B..
  std::int64_t rows, keys, depth, value_depth;
  Shape mask;  // as held, broadcasting to [B.., T, S]; empty: no bias
  bool mask_constant;
  float scale;
  // Q, K, V, Y: where each holds its sequence axis among the leading dims ("seq_axis"); empty: each at rank - 2
  // ([B.., L, w]); 0: [L, B.., w]; 1 of [B0, L, B1, w]; ..
  std::vector<std::int64_t> seq_axis = {};
  // >= 0: Q, K and V are parts 2, 0, 1 of one input, the held shape with 3 parts inserted at this axis
  // (nn.MultiheadAttention's q|k|v product read in place; needs T == S, d == dv and one layout for the three)
  std::int64_t packed_axis = -1;
};

Shape held_shape(const AttentionCase& c, int which, std::int64_t length, std::int64_t width) {
  Shape s = c.batch;
  const auto axis = c.seq_axis.empty() ? static_cast<std::int64_t>(s.size()) : c.seq_axis[static_cast<std::size_t>(which)];
  s.insert(s.begin() + axis, length);
  s.push_back(width);
  return s;
}

std::string describe_case(const AttentionCase& c) {
  std::string s = "batch " + to_string(c.batch) + " T " + std::to_string(c.rows) + " S " + std::to_string(c.keys) +
                  " d " + std::to_string(c.depth) + " dv " + std::to_string(c.value_depth) + " mask " +
                  (c.mask.empty() ? "none" : to_string(c.mask) + (c.mask_constant ? " constant" : " input")) +
                  " seq_axis " + (c.seq_axis.empty() ? "default" : to_string(Shape(c.seq_axis.begin(), c.seq_axis.end()))) +
                  " packed_axis " +
                  std::to_string(c.packed_axis);
  return s;
}

OneNode attention_node(const AttentionCase& c, std::uint32_t seed) {
  OneNode b("Attention", describe_case(c));
  if (c.packed_axis >= 0) {
    Shape packed = held_shape(c, 0, c.rows, c.depth);
    packed.insert(packed.begin() + c.packed_axis, 3);
    b.input("qkv", packed);
    b.node().inputs.insert(b.node().inputs.end(), {"qkv", "qkv"});
    b.attr("packed_axis", c.packed_axis).attr("packed_part", std::vector<std::int64_t>{2, 0, 1});
  } else {
    b.input("q", held_shape(c, 0, c.rows, c.depth))
        .input("k", held_shape(c, 1, c.keys, c.depth))
        .input("v", held_shape(c, 2, c.keys, c.value_depth));
  }
  if (c.mask.empty()) b.absent();
  else if (c.mask_constant) b.constant("m", c.mask, seed);
  else b.input("m", c.mask);
  b.output("y", held_shape(c, 3, c.rows, c.value_depth)).attr("scale", c.scale);
  if (!c.seq_axis.empty()) b.attr("seq_axis", c.seq_axis);
  return b;
}

// Random inputs spread to [-3, 3] (scores far from uniform, so the softmax matters).
std::vector<std::vector<float>> attention_inputs(const Graph& g, std::uint32_t seed) {
  auto inputs = random_inputs(g, seed);
  for (auto& in : inputs)
    for (auto& v : in) v *= 3;
  return inputs;
}

// What describe() names for the way a mode gives (the scores of these cases fit the default scratch limit, so a
// forced flash that cannot run goes as automatic: the products).
std::string expected_kernel(Mode mode, Precision p, const AttentionCase& c) {
  const sluice::DType type = p == Precision::f32 ? sluice::DType::f32
                             : p == Precision::f16 ? sluice::DType::f16
                                                   : sluice::DType::bf16;
  const bool flash = cuda::attention_flash_supported(type, static_cast<int>(c.depth), static_cast<int>(c.value_depth));
  if (mode == Mode::fused) return "fused attention";
  if ((mode == Mode::flash || mode == Mode::automatic) && flash) return "flash attention";
  return "softmax kernel";
}

void check_every_way(const AttentionCase& c, const Graph& g, const std::vector<std::vector<float>>& inputs,
                     const std::vector<Mode>& modes) {
  const auto want = run_cpu(g, inputs);
  for (const Mode mode : modes)
    for (Precision p : {Precision::f32, Precision::f16, Precision::bf16}) {
      CudaEngineOptions o;
      o.precision = p;
      o.attention = mode;
      CudaEngine engine(g, o);
      INFO(g.source << " at " << to_string(p) << "\n" << engine.describe());
      const std::string kernel = expected_kernel(mode, p, c);
      CHECK(engine.describe().find(kernel) != std::string::npos);
      // The products hold the scores in the element type before the softmax: at bf16 (8 significant bits) a
      // score near 8 is off by up to 0.03, which exp turns into 3% (measured 3.5% at 197 keys with a bias), where
      // flash and the fused kernel keep them in f32 registers.
      const double bound = p == Precision::bf16 && kernel == "softmax kernel" ? 5e-2 : tolerance(p);
      CHECK(relative_error(run_gpu(engine, inputs)[0], want[0]) <= bound);
    }
}

}  // namespace

TEST_CASE("CUDA Attention matches the CPU twin every way", "[nn][nn_cuda][attention]") {
  const std::vector<AttentionCase> cases = {
      // one partial key block, one partial row block
      {{2, 3}, 17, 23, 64, 64, {}, false, 0.125f},
      // several key and row blocks, dv != d, a constant bias broadcast over the leading dim (Swin's position bias)
      {{1, 2}, 70, 130, 32, 48, {2, 70, 130}, true, 0.17f},
      // depth 24 (CUDA cores in the fused way), a run-time padding mask broadcast over the rows
      {{4}, 5, 9, 24, 40, {4, 1, 9}, false, 0.2f},
      // ViT-B/16's shape per head (197 tokens, depth 64), 3 batches of heads
      {{3}, 197, 197, 64, 64, {}, false, 0.125f},
      // Swin-T's window (49 tokens, depth 32) with a per-head bias and a per-window mask folded into one
      {{4, 3}, 49, 49, 32, 32, {4, 3, 49, 49}, false, 0.177f},
      // depth 128 and value depth 16; depth 128 both
      {{1}, 40, 33, 128, 16, {40, 33}, true, 0.09f},
      {{2}, 65, 129, 128, 128, {65, 129}, true, 0.088f},
      // nn.MultiheadAttention's layout: every operand sequence-first ([S, B*heads, d]), read and written in place
      {{6}, 17, 23, 64, 48, {}, false, 0.125f, {0, 0, 0, 0}},
      {{6}, 17, 23, 64, 64, {}, false, 0.125f, {0, 0, 0, 0}},
      // torch 2's export of it: the held operands split into [S, N, heads, d]
      {{2, 3}, 17, 23, 64, 64, {}, false, 0.125f, {0, 0, 0, 0}},
      // some operands sequence-first, a padding mask, CUDA-core depth; and the same at a flash depth
      {{6}, 17, 23, 40, 32, {6, 1, 23}, false, 0.16f, {1, 0, 1, 0}},
      {{6}, 17, 23, 32, 32, {6, 1, 23}, false, 0.16f, {1, 0, 1, 0}},
      // heads split off the embedding, [N, S, heads, d] (what attention_layout.cpp leaves around ViT's and
      // Swin's attention), at a flash depth and a CUDA-core one; each operand another layout
      {{2, 3}, 17, 23, 64, 64, {}, false, 0.125f, {1, 1, 1, 1}},
      {{2, 3}, 17, 23, 40, 40, {2, 3, 17, 23}, false, 0.125f, {1, 1, 1, 1}},
      {{2, 3}, 17, 23, 32, 32, {3, 17, 23}, true, 0.16f, {1, 0, 2, 1}},
      // Q, K, V parts of one packed input: torch 2's self-attention ([S, N, 3, heads, d], sequence-first),
      // batch-first parts before the heads, and a CUDA-core depth with a padding mask and Y batch-first
      {{2, 3}, 17, 17, 64, 64, {}, false, 0.125f, {0, 0, 0, 0}, 2},
      {{2, 3}, 70, 70, 32, 32, {}, false, 0.17f, {}, 1},
      {{4}, 9, 9, 40, 40, {4, 1, 9}, false, 0.2f, {0, 0, 0, 1}, 1},
      // ViT's and Swin's packed q|k|v after attention_layout.cpp: [N, S, 3, heads, d], Y [N, S, heads, d]
      {{2, 3}, 17, 17, 64, 64, {}, false, 0.125f, {1, 1, 1, 1}, 2},
      {{4, 3}, 49, 49, 32, 32, {3, 49, 49}, true, 0.177f, {1, 1, 1, 1}, 2},
      {{4, 3}, 49, 49, 40, 40, {3, 49, 49}, true, 0.177f, {1, 1, 1, 1}, 2},
      // Swin's shifted windows on the split batch [N, windows, heads] (graph.hpp), parts first ([3, N, W, heads,
      // 49, 32], N and W merging into one batch of flash's in-place reads), the folded bias [W, heads, T, S];
      // and the parts axis after N (N and W do not merge: staged)
      {{2, 4, 3}, 49, 49, 32, 32, {4, 3, 49, 49}, true, 0.177f, {}, 0},
      {{2, 4, 3}, 49, 49, 32, 32, {4, 1, 49, 49}, true, 0.177f, {}, 1},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const AttentionCase& c = cases[i];
    const OneNode b = attention_node(c, 40 + static_cast<std::uint32_t>(i));
    check_every_way(c, b.g, attention_inputs(b.g, 5), {Mode::automatic, Mode::gemm, Mode::fused, Mode::flash});
  }
}

TEST_CASE("CUDA Attention's ways match the CPU twin on random shapes", "[nn][nn_cuda][attention][attention_random]") {
  std::mt19937 rng(13);
  const auto pick = [&](const std::vector<std::int64_t>& from) { return from[rng() % from.size()]; };
  const std::vector<std::int64_t> lengths = {1, 7, 49, 64, 197, 300};
  for (int i = 0; i < 24; ++i) {
    AttentionCase c;
    c.depth = std::vector<std::int64_t>{32, 64, 128}[static_cast<std::size_t>(i % 3)];
    c.value_depth = rng() % 4 == 0 ? pick({16, 32, 48, 64}) : c.depth;
    c.rows = pick(lengths);
    c.keys = rng() % 2 ? c.rows : pick(lengths);
    c.batch = rng() % 2 ? Shape{1 + static_cast<std::int64_t>(rng() % 3)}
                        : Shape{1 + static_cast<std::int64_t>(rng() % 2), 1 + static_cast<std::int64_t>(rng() % 3)};
    c.scale = static_cast<float>((0.5 + (rng() % 100) / 100.0) / std::sqrt(static_cast<double>(c.depth)));
    const Shape heads(c.batch.end() - 1, c.batch.end());
    switch (rng() % 6) {
      case 0: break;  // no bias
      case 1: {  // one constant bias for all batches
        c.mask = {c.rows, c.keys};
        c.mask_constant = true;
        break;
      }
      case 2: {  // a run-time padding mask per leading item: [B0, 1.., 1, S]
        c.mask = Shape(c.batch.size() + 2, 1);
        c.mask.front() = c.batch.front();
        c.mask.back() = c.keys;
        break;
      }
      case 3: {  // a run-time bias for every batch and row
        c.mask = c.batch;
        c.mask.insert(c.mask.end(), {c.rows, c.keys});
        break;
      }
      case 4: {  // a constant per-head bias (Swin's relative position bias)
        c.mask = heads;
        c.mask.insert(c.mask.end(), {c.rows, c.keys});
        c.mask_constant = true;
        break;
      }
      default: {  // one constant bias per row, broadcast over the keys
        c.mask = {c.rows, 1};
        c.mask_constant = true;
      }
    }
    if (rng() % 2 == 0) {  // each operand's sequence axis anywhere among the leading dims
      c.seq_axis.resize(4);
      for (auto& axis : c.seq_axis) axis = static_cast<std::int64_t>(rng() % (c.batch.size() + 1));
    }
    if (c.rows == c.keys && c.depth == c.value_depth && rng() % 2 == 0) {  // Q, K, V parts of one input
      c.packed_axis = static_cast<std::int64_t>(rng() % (c.batch.size() + 1));
      if (!c.seq_axis.empty()) c.seq_axis[1] = c.seq_axis[2] = c.seq_axis[0];  // one layout for the three
    }
    const OneNode b = attention_node(c, 100 + static_cast<std::uint32_t>(i));
    check_every_way(c, b.g, attention_inputs(b.g, 200 + static_cast<std::uint32_t>(i)),
                    {Mode::gemm, Mode::fused, Mode::flash});
  }
}

// -inf in the bias: a row masked out in a whole key block and not after (the online softmax must not turn
// exp(-inf - -inf) into NaN), one whose only key is in the partial last block, and one masked out entirely (NaN,
// as the CPU twin and ONNX Runtime give).
TEST_CASE("CUDA Attention handles rows masked out by -inf", "[nn][nn_cuda][attention]") {
  for (const std::int64_t depth : {32, 64}) {
    const AttentionCase c{{2}, 70, 130, depth, depth, {2, 70, 130}, false, 0.15f};
    const OneNode b = attention_node(c, 1);
    auto inputs = attention_inputs(b.g, 7);
    std::vector<float>& mask = inputs[3];
    const auto at = [&](std::int64_t batch, std::int64_t row, std::int64_t key) -> float& {
      return mask[static_cast<std::size_t>((batch * 70 + row) * 130 + key)];
    };
    for (std::int64_t batch = 0; batch < 2; ++batch) {
      for (std::int64_t key = 0; key < 130; ++key) at(batch, 0, key) = -INFINITY;  // all masked: NaN
      for (std::int64_t row = 1; row < 10; ++row)  // the first key block masked
        for (std::int64_t key = 0; key < 64; ++key) at(batch, row, key) = -INFINITY;
      for (std::int64_t row = 10; row < 20; ++row)  // all but the first key block masked
        for (std::int64_t key = 64; key < 130; ++key) at(batch, row, key) = -INFINITY;
      for (std::int64_t key = 0; key < 129; ++key) at(batch, 20, key) = -INFINITY;  // only the last key
      for (std::int64_t row = 21; row < 70; row += 3) at(batch, row, (row * 7) % 130) = -INFINITY;
    }
    check_every_way(c, b.g, inputs, {Mode::gemm, Mode::fused, Mode::flash});
  }
}

// Not a test (hidden tag, no assertion on time): the Attention layer's GPU time each way at the target models'
// sizes, f16, median of 50 runs (CudaEngine::profile_layers, as `sluiced model --profile` measures).
// Run: tests/sluice_gpu_tests "[attention_bench]"
TEST_CASE("CUDA Attention's ways timed at ViT-B/16 and Swin-T sizes", "[.][attention_bench]") {
  struct Sized {
    const char* model;
    AttentionCase c;
  };
  const std::vector<Sized> sizes = {
      {"ViT-B/16 layer, batch 64", {{64, 12}, 197, 197, 64, 64, {}, false, 0.125f}},
      {"ViT-B/16 layer as exported (sequence-first)", {{64 * 12}, 197, 197, 64, 64, {}, false, 0.125f, {0, 0, 0, 0}}},
      {"ViT-B/16 layer, q|k|v parts of the packed product",
       {{64, 12}, 197, 197, 64, 64, {}, false, 0.125f, {0, 0, 0, 0}, 2}},
      {"ViT-B/16 layer, packed product batch-first (no Transposes around it)",
       {{64, 12}, 197, 197, 64, 64, {}, false, 0.125f, {1, 1, 1, 1}, 2}},
      {"Swin-T stage 1 layer, packed q|k|v and Y [windows, S, heads, d] (no Transposes around it)",
       {{64 * 64, 3}, 49, 49, 32, 32, {3, 49, 49}, true, 0.177f, {1, 1, 1, 1}, 2}},
      {"Swin-T stage 1 layer, batch 64 (64 windows, 3 heads, shift mask + position bias)",
       {{64, 64, 3}, 49, 49, 32, 32, {64, 3, 49, 49}, true, 0.177f}},
      {"Swin-T stage 3 layer, batch 64 (4 windows, 12 heads)", {{64, 4, 12}, 49, 49, 32, 32, {4, 12, 49, 49}, true, 0.177f}},
  };
  for (const Sized& sized : sizes) {
    const OneNode b = attention_node(sized.c, 1);
    for (const Mode mode : {Mode::gemm, Mode::fused, Mode::flash}) {
      CudaEngineOptions o;
      o.precision = Precision::f16;
      o.attention = mode;
      CudaEngine engine(b.g, o);
      for (const auto& [layer, ms] : engine.profile_layers(50))
        if (layer.find("Attention") != std::string::npos)
          std::printf("%-80s %-6s %.3f ms  %s\n", sized.model, mode == Mode::gemm ? "gemm" : mode == Mode::fused ? "fused" : "flash",
                      ms, engine.describe().find("flash attention") != std::string::npos ? "(flash)" : "");
    }
  }
}

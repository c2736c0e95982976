// LayerNormalization (nn/cuda/reduce.cu), Pad and remap_copy (nn/cuda/copy.cu) through their launchers, against
// host loops over the same rounded inputs, on sizes and placements that take each of their paths: rows held in
// registers by groups of lanes (whole aligned 16-byte packs) or by the warp and thread kernels (odd lengths,
// unaligned starts, strided rows, rows too long); Pad in packs (last dim not padded) or by elements, every mode;
// remap_copy in packs (either side one contiguous run or neither) or by elements (odd last dims, unaligned,
// converting types), negative and zero strides. The engine tests (test_nn_ops_gpu.cpp) reach these through
// layers; here the placements (offsets, strides) are chosen directly.
// Error bound: LayerNormalization max |gpu - ref| / max |ref| <= 1e-4 at f32, 2e-3 at f16 and 1e-2 at bf16 (f32
// sums, the output's rounding); Pad and remap_copy move values, so they must be equal.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/half.hpp"
#include "nn/cuda/kernels.cuh"
#include "tests/gpu/device_memory.hpp"
#include "tests/gpu/typed_values.hpp"

using namespace sluice;
using namespace sluice::nn::cuda;
using sluice::nn::test::device_bytes;
using sluice::nn::test::host_floats;
using sluice::nn::test::rounded;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

// A device copy of v held as `type`.
struct DeviceTensor {
  std::vector<unsigned char> bytes;
  sluice::test::DeviceBuffer buffer;
  DeviceTensor(DType type, const std::vector<float>& v) : bytes(device_bytes(type, v)), buffer(bytes.size()) {
    sluice::test::copy_to_device(buffer.get(), bytes.data(), bytes.size());
  }
};

std::vector<float> read_back(DType type, const sluice::test::DeviceBuffer& b, std::size_t elements) {
  std::vector<unsigned char> bytes(elements * dtype_bytes(type));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(bytes.data(), b.get(), bytes.size(), cudaMemcpyDeviceToHost));
  return host_floats(type, bytes);
}

void* at_element(void* p, DType type, std::int64_t k) { return static_cast<unsigned char*>(p) + k * dtype_bytes(type); }

const char* name(DType type) { return type == DType::f32 ? "f32" : type == DType::f16 ? "f16" : "bf16"; }

// Equal values, NaN matching NaN (a slot never written reads as NaN: the buffers start as 0xff bytes).
std::size_t differences(const std::vector<float>& got, const std::vector<float>& want) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    n += !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
  return n;
}

// Offset of element `linear` (row-major over shape) through strides.
std::int64_t offset_of(std::int64_t linear, int rank, const std::int64_t* shape, const std::int64_t* stride) {
  std::int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (linear % shape[d]) * stride[d];
    linear /= shape[d];
  }
  return off;
}

}  // namespace

TEST_CASE("CUDA layer_norm kernels match a double-precision loop on every path", "[nn][nn_cuda][layer_norm]") {
  struct Case {
    std::int64_t len, rows;
    std::int64_t offset = 0;     // elements before the first row, in x and in y (1: unaligned, the warp kernel)
    std::int64_t x_gap = 0;      // elements between rows of x beyond the row (a multiple of 8 keeps packs)
    bool bias = true;
    bool split_rows = false;     // rows as two kept dims (merged again by the launcher)
    bool strided_elements = false;  // elements 2 apart in x: the thread kernel
  };
  const std::vector<Case> cases = {
      {96, 37},  {192, 45}, {384, 21}, {768, 19},  {1024, 9}, {2048, 5}, {4096, 3},  // 2048 f16: 8 packs a lane
      {8, 70},   {24, 33},  {16, 5},   {100, 13},  {33, 11},  {96, 29, 1}, {768, 7, 3},
      {96, 31, 0, 8}, {96, 17, 0, 3}, {384, 12, 0, 0, false}, {96, 64, 0, 0, true, true},
      {64, 9, 0, 0, true, false, true}};
  sluice::test::TestStream stream;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const std::int64_t x_row = c.len * (c.strided_elements ? 2 : 1) + c.x_gap;
    const std::int64_t x_elements = c.offset + c.rows * x_row, y_elements = c.offset + c.rows * c.len;
    const auto x = random_floats(static_cast<std::size_t>(x_elements), 100 + static_cast<std::uint32_t>(ci), -2.f, 4.f);
    const auto scale = random_floats(static_cast<std::size_t>(c.len), 7), bias = random_floats(static_cast<std::size_t>(c.len), 8);
    sluice::test::DeviceBuffer d_scale(scale.size() * 4), d_bias(bias.size() * 4);
    sluice::test::copy_to_device(d_scale.get(), scale.data(), scale.size() * 4);
    sluice::test::copy_to_device(d_bias.get(), bias.data(), bias.size() * 4);
    RowSpace s;
    if (c.split_rows) {
      s.kept_rank = 2;
      s.kept_shape[0] = 2, s.kept_shape[1] = c.rows / 2;
      s.kept_x_stride[0] = c.rows / 2 * x_row, s.kept_x_stride[1] = x_row;
      s.kept_y_stride[0] = c.rows / 2 * c.len, s.kept_y_stride[1] = c.len;
    } else {
      s.kept_rank = 1;
      s.kept_shape[0] = c.rows;
      s.kept_x_stride[0] = x_row;
      s.kept_y_stride[0] = c.len;
    }
    s.reduced_rank = 1;
    s.reduced_shape[0] = c.len;
    s.reduced_x_stride[0] = c.strided_elements ? 2 : 1;
    s.reduced_y_stride[0] = 1;
    for (DType type : {DType::f32, DType::f16, DType::bf16}) {
      std::vector<float> want(static_cast<std::size_t>(y_elements), NAN);
      double top = 1e-3;
      for (std::int64_t r = 0; r < c.rows; ++r) {
        const auto in = [&](std::int64_t k) {
          return static_cast<double>(rounded(type, x[static_cast<std::size_t>(c.offset + r * x_row + k * s.reduced_x_stride[0])]));
        };
        double mean = 0, var = 0;
        for (std::int64_t k = 0; k < c.len; ++k) mean += in(k);
        mean /= static_cast<double>(c.len);
        for (std::int64_t k = 0; k < c.len; ++k) var += (in(k) - mean) * (in(k) - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(c.len) + 1e-5);
        for (std::int64_t k = 0; k < c.len; ++k) {
          const double v = (in(k) - mean) * inv * scale[static_cast<std::size_t>(k)] + (c.bias ? bias[static_cast<std::size_t>(k)] : 0.0);
          want[static_cast<std::size_t>(c.offset + r * c.len + k)] = static_cast<float>(v);
          top = std::max(top, std::fabs(v));
        }
      }
      DeviceTensor dx(type, x);
      sluice::test::DeviceBuffer dy(static_cast<std::size_t>(y_elements) * dtype_bytes(type));
      CUDA_CHECK(cudaMemset(dy.get(), 0xff, static_cast<std::size_t>(y_elements) * dtype_bytes(type)));
      layer_norm(type, at_element(dy.get(), type, c.offset), at_element(dx.buffer.get(), type, c.offset), s,
                 static_cast<const float*>(d_scale.get()), c.bias ? static_cast<const float*>(d_bias.get()) : nullptr,
                 1e-5f, stream.get());
      CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      const auto got = read_back(type, dy, static_cast<std::size_t>(y_elements));
      double diff = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) continue;  // the offset before the first row
        diff = std::isnan(got[i]) ? INFINITY : std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
      }
      const double bound = type == DType::f32 ? 1e-4 : type == DType::f16 ? 2e-3 : 1e-2;
      INFO("case " << ci << ": rows of " << c.len << " x " << c.rows << " offset " << c.offset << " gap " << c.x_gap
                   << " at " << name(type));
      CHECK(diff / top <= bound);
    }
  }
}

namespace {

// ONNX Pad of x (held through in_stride from its first element) into contiguous y, on the host.
std::vector<float> pad_reference(const std::vector<float>& x, std::int64_t x_offset, int rank, const std::int64_t* out_shape,
                                 const std::int64_t* in_shape, const std::int64_t* in_stride, const std::int64_t* begin,
                                 PadMode mode, float value) {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= out_shape[d];
  std::vector<float> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, src = x_offset;
    bool inside = true;
    for (int d = rank - 1; d >= 0; --d) {
      std::int64_t c = rest % out_shape[d] - begin[d];
      rest /= out_shape[d];
      const std::int64_t len = in_shape[d];
      if (c < 0 || c >= len) {
        if (mode == PadMode::constant) inside = false;
        else if (mode == PadMode::edge) c = c < 0 ? 0 : len - 1;
        else if (len == 1) c = 0;
        else
          while (c < 0 || c >= len) c = c < 0 ? -c : 2 * (len - 1) - c;  // mirror until inside
      }
      src += c * in_stride[d];
    }
    y[static_cast<std::size_t>(i)] = inside ? x[static_cast<std::size_t>(src)] : value;
  }
  return y;
}

}  // namespace

TEST_CASE("CUDA pad kernel matches a host loop in packs and by elements in every mode", "[nn][nn_cuda][copy]") {
  struct Case {
    std::vector<std::int64_t> in_shape, begin, end;
    std::int64_t offset = 0;       // elements before x's first (1: unaligned, by elements)
    bool transposed_last = false;  // x's last two dims swapped in memory (last dim not contiguous)
  };
  const std::vector<Case> cases = {
      {{2, 5, 6, 16}, {0, 1, 2, 0}, {0, 2, 0, 0}},           // last dim whole packs, not padded: packs
      {{2, 5, 6, 12}, {0, 1, 0, 0}, {0, 0, 2, 3}},           // last dim padded: elements
      {{2, 5, 6, 12}, {0, 2, 1, 0}, {0, 1, 1, 0}},           // 12: packs at f32 only
      {{2, 3, 8}, {0, 5, 0}, {0, 6, 0}},                     // reflect folding more than once
      {{2, 1, 3, 8}, {0, 2, 1, 0}, {0, 2, 0, 0}},            // a padded dim of 1
      {{3, 1, 4, 8}, {0, 0, 1, 0}, {0, 0, 1, 0}},            // an unpadded dim of 1 dropped
      {{2, 5, 6, 16}, {0, 1, 2, 0}, {0, 2, 0, 0}, 1},        // unaligned: elements
      {{2, 5, 6, 16}, {0, 1, 0, 0}, {0, 0, 1, 0}, 0, true},  // last dim strided: elements
      {{2, 6, 16}, {0, -1, 0}, {0, -2, 0}},                  // negative pads crop
      {{4, 14, 14, 32}, {0, 0, 0, 0}, {0, 7, 7, 0}},         // Swin's window padding
  };
  sluice::test::TestStream stream;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const int rank = static_cast<int>(c.in_shape.size());
    std::int64_t out_shape[kMaxRank], in_stride[kMaxRank], n = 1, in_n = 1;
    std::vector<std::int64_t> mem_shape(c.in_shape);
    if (c.transposed_last) std::swap(mem_shape[static_cast<std::size_t>(rank - 1)], mem_shape[static_cast<std::size_t>(rank - 2)]);
    std::int64_t mem_stride[kMaxRank];
    for (int d = rank - 1, st = 1; d >= 0; --d) {
      mem_stride[d] = st;
      st *= static_cast<int>(mem_shape[static_cast<std::size_t>(d)]);
    }
    for (int d = 0; d < rank; ++d) {
      out_shape[d] = c.in_shape[static_cast<std::size_t>(d)] + c.begin[static_cast<std::size_t>(d)] + c.end[static_cast<std::size_t>(d)];
      in_stride[d] = mem_stride[d];
      n *= out_shape[d];
      in_n *= c.in_shape[static_cast<std::size_t>(d)];
    }
    if (c.transposed_last) std::swap(in_stride[rank - 1], in_stride[rank - 2]);
    const auto x = random_floats(static_cast<std::size_t>(c.offset + in_n), 300 + static_cast<std::uint32_t>(ci));
    for (DType type : {DType::f32, DType::f16, DType::bf16}) {
      std::vector<float> xr(x);
      for (auto& e : xr) e = rounded(type, e);
      DeviceTensor dx(type, x);
      sluice::test::DeviceBuffer dy(static_cast<std::size_t>(n) * dtype_bytes(type));
      for (PadMode mode : {PadMode::constant, PadMode::reflect, PadMode::edge}) {
        const auto want = pad_reference(xr, c.offset, rank, out_shape, c.in_shape.data(), in_stride, c.begin.data(), mode,
                                        rounded(type, 0.75f));
        CUDA_CHECK(cudaMemset(dy.get(), 0xff, static_cast<std::size_t>(n) * dtype_bytes(type)));
        pad(type, dy.get(), rank, out_shape, at_element(dx.buffer.get(), type, c.offset), c.in_shape.data(), in_stride,
            c.begin.data(), mode, 0.75f, stream.get());
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        INFO("case " << ci << " mode " << static_cast<int>(mode) << " at " << name(type));
        CHECK(differences(read_back(type, dy, static_cast<std::size_t>(n)), want) == 0);
      }
    }
  }
}

TEST_CASE("CUDA remap_copy matches a host loop in packs and by elements", "[nn][nn_cuda][copy]") {
  struct Case {
    const char* what;
    std::int64_t src_elements, dst_elements;  // buffer sizes
    View src, dst;
    DType src_type_override = DType::u8;  // u8: the same type as dst
  };
  const auto view = [](std::vector<std::int64_t> shape, std::vector<std::int64_t> stride, std::int64_t offset) {
    View v;
    v.rank = static_cast<int>(shape.size());
    for (int d = 0; d < v.rank; ++d) v.shape[d] = shape[static_cast<std::size_t>(d)], v.stride[d] = stride[static_cast<std::size_t>(d)];
    v.offset = offset;
    return v;
  };
  const auto contiguous = [&](std::vector<std::int64_t> shape) {
    std::vector<std::int64_t> stride(shape.size());
    std::int64_t st = 1;
    for (std::size_t d = shape.size(); d-- > 0;) stride[d] = st, st *= shape[d];
    return view(shape, stride, 0);
  };
  // [4, 8, 7, 8, 7, 16] perm (0, 1, 3, 2, 4, 5): Swin's window partition
  const std::vector<Case> cases = {
      {"window partition (destination one run)", 4 * 8 * 7 * 8 * 7 * 16, 4 * 8 * 7 * 8 * 7 * 16,
       view({4, 8, 8, 7, 7, 16}, {50176, 6272, 112, 896, 16, 1}, 0), contiguous({4, 8, 8, 7, 7, 16})},
      {"[5 7 32] perm 1 0 2", 5 * 7 * 32, 5 * 7 * 32, view({7, 5, 32}, {32, 224, 1}, 0), contiguous({7, 5, 32})},
      {"concat piece (source one run)", 2 * 3 * 16, 2 * 8 * 16, contiguous({2, 3, 16}), view({2, 3, 16}, {128, 16, 1}, 48)},
      {"both strided", 6 * 5 * 24, 6 * 9 * 24, view({5, 6, 24}, {24, 120, 1}, 0), view({5, 6, 24}, {24, 216, 1}, 48)},
      {"negative steps", 2 * 9 * 16, 2 * 4 * 16, view({2, 4, 16}, {144, -32, 1}, 128), contiguous({2, 4, 16})},
      {"broadcast rows", 16, 5 * 16, view({5, 16}, {0, 1}, 0), contiguous({5, 16})},
      {"odd last dim", 5 * 7 * 7, 5 * 7 * 7, view({7, 5, 7}, {7, 49, 1}, 0), contiguous({7, 5, 7})},
      {"unaligned source", 1 + 5 * 7 * 32, 5 * 7 * 32, view({7, 5, 32}, {32, 224, 1}, 1), contiguous({7, 5, 32})},
      {"last dim transposed", 6 * 10, 6 * 10, view({10, 6}, {1, 10}, 0), contiguous({10, 6})},
      {"f32 to f16 transposed", 5 * 7 * 32, 5 * 7 * 32, view({7, 5, 32}, {32, 224, 1}, 0), contiguous({7, 5, 32}), DType::f32},
      {"f16 to bf16 transposed", 5 * 7 * 32, 5 * 7 * 32, view({7, 5, 32}, {32, 224, 1}, 0), contiguous({7, 5, 32}), DType::f16},
  };
  sluice::test::TestStream stream;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const auto x = random_floats(static_cast<std::size_t>(c.src_elements), 500 + static_cast<std::uint32_t>(ci));
    const std::int64_t n = c.dst.elements();
    for (DType type : {DType::f32, DType::f16, DType::bf16}) {
      const DType src_type = c.src_type_override == DType::u8 ? type : c.src_type_override;
      std::vector<float> want(static_cast<std::size_t>(c.dst_elements), NAN);
      for (std::int64_t k = 0; k < n; ++k)
        want[static_cast<std::size_t>(c.dst.offset + offset_of(k, c.dst.rank, c.dst.shape, c.dst.stride))] = rounded(
            type, rounded(src_type, x[static_cast<std::size_t>(c.src.offset + offset_of(k, c.src.rank, c.src.shape, c.src.stride))]));
      DeviceTensor dx(src_type, x);
      sluice::test::DeviceBuffer dy(static_cast<std::size_t>(c.dst_elements) * dtype_bytes(type));
      CUDA_CHECK(cudaMemset(dy.get(), 0xff, static_cast<std::size_t>(c.dst_elements) * dtype_bytes(type)));
      remap_copy(type, dy.get(), c.dst, src_type, dx.buffer.get(), c.src, stream.get());
      CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      INFO(c.what << " to " << name(type) << " from " << name(src_type));
      CHECK(differences(read_back(type, dy, static_cast<std::size_t>(c.dst_elements)), want) == 0);
    }
  }
}

// Not a test (hidden tag, no assertion on time): LayerNormalization, Pad and Transpose kernels at ViT-B/16 and
// Swin-T sizes, f16, batch 64: the median of 50 runs (cudaEvent) and the bytes read and written per second.
// Run: build-gpu/tests/sluice_gpu_tests "[copy_bench]"
TEST_CASE("CUDA LayerNormalization Pad and Transpose kernels timed at ViT-B/16 and Swin-T sizes", "[.][copy_bench]") {
  const DType type = DType::f16;
  sluice::test::TestStream stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const auto time = [&](const char* what, std::int64_t bytes, const auto& work) {
    work();  // warm
    std::vector<float> ms(50);
    for (auto& t : ms) {
      CUDA_CHECK(cudaEventRecord(start, stream.get()));
      work();
      CUDA_CHECK(cudaEventRecord(stop, stream.get()));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    std::nth_element(ms.begin(), ms.begin() + 25, ms.end());
    std::printf("%-62s %.4f ms  %7.1f GB/s\n", what, ms[25], static_cast<double>(bytes) / (ms[25] * 1e-3) / 1e9);
  };
  const std::int64_t most = 64 * 63 * 63 * 96;  // elements of the largest tensor below (Pad's output, 49 MB of f16)
  sluice::test::DeviceBuffer a(static_cast<std::size_t>(most) * 2), b(static_cast<std::size_t>(most) * 2);
  CUDA_CHECK(cudaMemset(a.get(), 0, static_cast<std::size_t>(most) * 2));
  const auto params = random_floats(768, 1);
  sluice::test::DeviceBuffer scale(768 * 4), bias(768 * 4);
  sluice::test::copy_to_device(scale.get(), params.data(), 768 * 4);
  sluice::test::copy_to_device(bias.get(), params.data(), 768 * 4);

  // LayerNormalization over the last dim of contiguous data, rows as row_space() gives them (kept dims unmerged).
  const auto layer_norm_rows = [](std::vector<std::int64_t> shape) {
    RowSpace s;
    const std::int64_t len = shape.back();
    s.kept_rank = static_cast<int>(shape.size()) - 1;
    std::int64_t st = len;
    for (int d = s.kept_rank - 1; d >= 0; --d) {
      s.kept_shape[d] = shape[static_cast<std::size_t>(d)];
      s.kept_x_stride[d] = s.kept_y_stride[d] = st;
      st *= shape[static_cast<std::size_t>(d)];
    }
    s.reduced_rank = 1;
    s.reduced_shape[0] = len;
    s.reduced_x_stride[0] = s.reduced_y_stride[0] = 1;
    return s;
  };
  for (const auto& shape : {std::vector<std::int64_t>{64, 56, 56, 96}, std::vector<std::int64_t>{64, 197, 768}}) {
    const RowSpace s = layer_norm_rows(shape);
    const std::int64_t bytes = 2 * 2 * s.rows() * s.row_length();
    const std::string what = "LayerNormalization " + std::string(shape.size() == 4 ? "[64,56,56,96]" : "[64,197,768]");
    time(what.c_str(), bytes, [&] {
      layer_norm(type, b.get(), a.get(), s, static_cast<const float*>(scale.get()), static_cast<const float*>(bias.get()),
                 1e-5f, stream.get());
    });
  }
  {
    const std::int64_t out_shape[] = {64, 63, 63, 96}, in_shape[] = {64, 56, 56, 96}, in_stride[] = {56 * 56 * 96, 56 * 96, 96, 1},
                       begin[] = {0, 0, 0, 0};
    const std::int64_t bytes = 2 * (64 * 56 * 56 * 96 + 64 * 63 * 63 * 96);
    time("Pad [64,56,56,96] -> [64,63,63,96] constant", bytes, [&] {
      pad(type, b.get(), 4, out_shape, a.get(), in_shape, in_stride, begin, PadMode::constant, 0.f, stream.get());
    });
  }
  {
    View src, dst;
    src.rank = dst.rank = 6;
    const std::int64_t shape[] = {64, 8, 8, 7, 7, 96}, stride[] = {301056, 37632, 672, 5376, 96, 1};
    for (int d = 5, st = 1; d >= 0; --d) {
      dst.shape[d] = src.shape[d] = shape[d];
      src.stride[d] = stride[d];
      dst.stride[d] = st;
      st *= static_cast<int>(shape[d]);
    }
    time("Transpose [64,8,7,8,7,96] perm (0,1,3,2,4,5)", 2 * 2 * 64 * 56 * 56 * 96,
         [&] { remap_copy(type, b.get(), dst, type, a.get(), src, stream.get()); });
  }
  {
    View src, dst;
    src.rank = dst.rank = 3;
    const std::int64_t shape[] = {197, 64, 768};
    const std::int64_t src_stride[] = {768, 197 * 768, 1}, dst_stride[] = {64 * 768, 768, 1};
    for (int d = 0; d < 3; ++d) {
      dst.shape[d] = src.shape[d] = shape[d];
      src.stride[d] = src_stride[d];
      dst.stride[d] = dst_stride[d];
    }
    time("Transpose [64,197,768] perm (1,0,2)", 2 * 2 * 64 * 197 * 768,
         [&] { remap_copy(type, b.get(), dst, type, a.get(), src, stream.get()); });
  }
  {  // torch.roll by 3 along H as exported (Slice, Slice, Concat), the Concat reading both Slices in place
    const std::int64_t shape[] = {64, 56, 56, 96}, stride[] = {56 * 56 * 96, 56 * 96, 96, 1};
    View tail, head, to_tail, to_head;
    for (View* v : {&tail, &head, &to_tail, &to_head}) {
      v->rank = 4;
      for (int d = 0; d < 4; ++d) v->shape[d] = shape[d], v->stride[d] = stride[d];
    }
    tail.shape[1] = to_tail.shape[1] = 53;
    head.shape[1] = to_head.shape[1] = 3;
    tail.offset = 3 * stride[1];
    to_head.offset = 53 * stride[1];
    time("Roll [64,56,56,96] by 3 along H (Concat of two Slices in place)", 2 * 2 * 64 * 56 * 56 * 96, [&] {
      remap_copy(type, b.get(), to_tail, type, a.get(), tail, stream.get());
      remap_copy(type, b.get(), to_head, type, a.get(), head, stream.get());
    });
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

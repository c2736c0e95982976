// ArgMax, ArgMin and TopK over rows along one axis, compared in f32 in nn/ranking.hpp's order (a total order, so
// results do not depend on thread timing). ArgMax/ArgMin: one thread a row. TopK of short rows (or with ties to the
// later index): one thread an element, which counts the row's elements that come before it; that count is its
// place in the sorted output. TopK of long rows: every element becomes a 32-bit key whose ascending order is the
// rank order (NaN, -0 == +0 folded in), CUB's stable radix sort sorts (key, position) pairs per row, so equal
// keys keep ascending positions (ties to the lower index), and the first k of each row are written out.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// Offsets of a row's first element in x, values and indices.
struct RowStart {
  std::int64_t x = 0, values = 0, indices = 0;
};
__device__ __forceinline__ RowStart row_start(std::int64_t row, const AxisRows& r) {
  RowStart s;
  for (int d = r.rank - 1; d >= 0; --d) {
    const std::int64_t q = row / r.shape[d], i = row - q * r.shape[d];
    s.x += i * r.x_stride[d];
    s.values += i * r.values_stride[d];
    s.indices += i * r.indices_stride[d];
    row = q;
  }
  return s;
}

template <typename T, typename I>
__global__ void arg_extreme_kernel(I* indices, const T* x, AxisRows r, std::int64_t rows, RankOrder order) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; row < rows; row += step) {
    const RowStart s = row_start(row, r);
    const T* in = x + s.x;
    std::int64_t best = 0;
    float best_value = to_f32(in[0]);
    for (std::int64_t k = 1; k < r.length; ++k) {
      const float v = to_f32(in[k * r.x_axis_stride]);
      if (comes_before(v, k, best_value, best, order)) {
        best = k;
        best_value = v;
      }
    }
    indices[s.indices] = from_f32<I>(static_cast<float>(best));
  }
}

template <typename T, typename I>
__global__ void top_k_count_kernel(T* values, I* indices, const T* x, AxisRows r, std::int64_t elements, std::int64_t k,
                                   RankOrder order) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < elements; e += step) {
    const std::int64_t row = e / r.length, j = e - row * r.length;
    const RowStart s = row_start(row, r);
    const T* in = x + s.x;
    const float v = to_f32(in[j * r.x_axis_stride]);
    std::int64_t place = 0;
    for (std::int64_t i = 0; i < r.length && place < k; ++i)
      place += comes_before(to_f32(in[i * r.x_axis_stride]), i, v, j, order);
    if (place >= k) continue;
    values[s.values + place * r.values_axis_stride] = in[j * r.x_axis_stride];
    indices[s.indices + place * r.indices_axis_stride] = from_f32<I>(static_cast<float>(j));
  }
}

template <typename T>
__global__ void make_keys_kernel(std::uint32_t* keys, int* positions, const T* x, AxisRows r, std::int64_t elements,
                                 RankOrder order) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < elements; e += step) {
    const std::int64_t row = e / r.length, j = e - row * r.length;
    const RowStart s = row_start(row, r);
    keys[e] = rank_key(to_f32(x[s.x + j * r.x_axis_stride]), order);
    positions[e] = static_cast<int>(j);
  }
}

__global__ void row_offsets_kernel(int* offsets, std::int64_t rows, std::int64_t length) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i <= rows; i += step)
    offsets[i] = static_cast<int>(i * length);
}

template <typename T, typename I>
__global__ void write_top_kernel(T* values, I* indices, const T* x, const int* sorted_positions, AxisRows r,
                                 std::int64_t rows, std::int64_t k) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < rows * k; e += step) {
    const std::int64_t row = e / k, place = e - row * k;
    const RowStart s = row_start(row, r);
    const std::int64_t j = sorted_positions[row * r.length + place];
    values[s.values + place * r.values_axis_stride] = x[s.x + j * r.x_axis_stride];
    indices[s.indices + place * r.indices_axis_stride] = from_f32<I>(static_cast<float>(j));
  }
}

template <typename F>
void dispatch_two(DType type, DType index_type, F&& f) {
  dispatch_float_type(type, [&](auto t) { dispatch_float_type(index_type, [&](auto i) { f(t, i); }); });
}

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The bits of the keys (nn/ranking.hpp's rank_key) that can differ: fewer radix passes sort f16 and bf16 values.
int begin_bit(DType type) {
  return type == DType::f16 ? kRankKeySameBitsF16 : type == DType::bf16 ? kRankKeySameBitsBf16 : 0;
}

// The sort's scratch: keys and positions twice (CUB's double buffers), row offsets, CUB's temporary storage.
struct SortScratch {
  std::size_t keys = 0, positions = 0, offsets = 0, temp = 0;
  std::size_t total() const { return 2 * keys + 2 * positions + offsets + temp; }
};

SortScratch sort_scratch(std::int64_t rows, std::int64_t length) {
  SortScratch s;
  const std::int64_t n = rows * length;
  s.keys = aligned(static_cast<std::size_t>(n) * sizeof(std::uint32_t));
  s.positions = aligned(static_cast<std::size_t>(n) * sizeof(int));
  s.offsets = aligned(static_cast<std::size_t>(rows + 1) * sizeof(int));
  cub::DoubleBuffer<std::uint32_t> keys(nullptr, nullptr);
  cub::DoubleBuffer<int> positions(nullptr, nullptr);
  std::size_t segmented = 0, whole = 0;
  CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, segmented, keys, positions, static_cast<int>(n),
                                                      static_cast<int>(rows), static_cast<const int*>(nullptr),
                                                      static_cast<const int*>(nullptr), 0, 32));
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, whole, keys, positions, static_cast<int>(length), 0, 32));
  s.temp = aligned(std::max(segmented, whole));
  return s;
}

// A few long rows are sorted one after the other by the device-wide sort (every SM on each); many rows at once by
// the segmented sort (a block a row).
bool sort_row_by_row(std::int64_t rows, std::int64_t length) { return rows <= 8 && length >= 32768; }

}  // namespace

bool top_k_sorts(std::int64_t length, std::int64_t /*k*/, RankOrder order) {
  return length > kTopKCountMaxLength && !order.later_on_tie;
}

std::size_t top_k_scratch_bytes(std::int64_t rows, std::int64_t length, std::int64_t k, RankOrder order) {
  if (!top_k_sorts(length, k, order) || rows == 0) return 0;
  if (rows * length > INT_MAX) throw std::length_error("nn/cuda: TopK over more than 2^31 - 1 elements in one run");
  return sort_scratch(rows, length).total();
}

void arg_extreme(DType type, DType index_type, void* indices, const void* x, const AxisRows& rows, RankOrder order,
                 cudaStream_t stream) {
  const std::int64_t n = rows.rows();
  if (n == 0 || rows.length == 0) return;
  dispatch_two(type, index_type, [&](auto tag, auto index_tag) {
    using T = decltype(tag);
    using I = decltype(index_tag);
    arg_extreme_kernel<T, I><<<grid_for(n), kBlock, 0, stream>>>(static_cast<I*>(indices), static_cast<const T*>(x),
                                                                 rows, n, order);
  });
  check_launch();
}

void top_k(DType type, DType index_type, void* values, void* indices, const void* x, const AxisRows& rows,
           std::int64_t k, RankOrder order, void* scratch, std::size_t scratch_bytes, cudaStream_t stream) {
  const std::int64_t n_rows = rows.rows(), elements = n_rows * rows.length;
  if (elements == 0 || k == 0) return;
  if (!top_k_sorts(rows.length, k, order)) {
    dispatch_two(type, index_type, [&](auto tag, auto index_tag) {
      using T = decltype(tag);
      using I = decltype(index_tag);
      top_k_count_kernel<T, I><<<grid_for(elements), kBlock, 0, stream>>>(
          static_cast<T*>(values), static_cast<I*>(indices), static_cast<const T*>(x), rows, elements, k, order);
    });
    check_launch();
    return;
  }
  const SortScratch s = sort_scratch(n_rows, rows.length);
  if (scratch == nullptr || scratch_bytes < s.total())
    throw std::logic_error("nn/cuda: TopK's sort needs " + std::to_string(s.total()) + " bytes of scratch, given " +
                           std::to_string(scratch_bytes));
  auto* at = static_cast<std::byte*>(scratch);
  auto* keys0 = reinterpret_cast<std::uint32_t*>(at);
  auto* keys1 = reinterpret_cast<std::uint32_t*>(at + s.keys);
  auto* pos0 = reinterpret_cast<int*>(at + 2 * s.keys);
  auto* pos1 = reinterpret_cast<int*>(at + 2 * s.keys + s.positions);
  auto* offsets = reinterpret_cast<int*>(at + 2 * s.keys + 2 * s.positions);
  void* temp = at + 2 * s.keys + 2 * s.positions + s.offsets;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    make_keys_kernel<T><<<grid_for(elements), kBlock, 0, stream>>>(keys0, pos0, static_cast<const T*>(x), rows,
                                                                   elements, order);
  });
  check_launch();
  const int first_bit = begin_bit(type);
  const int* sorted = nullptr;
  if (sort_row_by_row(n_rows, rows.length)) {
    // Each row sorted alone; the results land in the same buffer for every row (CUB picks it by the pass count,
    // which is the same for every row), and `sorted` points at the first row's.
    for (std::int64_t row = 0; row < n_rows; ++row) {
      const std::int64_t at_row = row * rows.length;
      cub::DoubleBuffer<std::uint32_t> kb(keys0 + at_row, keys1 + at_row);
      cub::DoubleBuffer<int> pb(pos0 + at_row, pos1 + at_row);
      std::size_t temp_bytes = s.temp;
      CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, kb, pb, static_cast<int>(rows.length), first_bit,
                                                 32, stream));
      if (row == 0) sorted = pb.Current();
    }
  } else {
    row_offsets_kernel<<<grid_for(n_rows + 1), kBlock, 0, stream>>>(offsets, n_rows, rows.length);
    check_launch();
    cub::DoubleBuffer<std::uint32_t> kb(keys0, keys1);
    cub::DoubleBuffer<int> pb(pos0, pos1);
    std::size_t temp_bytes = s.temp;
    CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, kb, pb, static_cast<int>(elements),
                                                        static_cast<int>(n_rows), offsets, offsets + 1, first_bit, 32,
                                                        stream));
    sorted = pb.Current();
  }
  dispatch_two(type, index_type, [&](auto tag, auto index_tag) {
    using T = decltype(tag);
    using I = decltype(index_tag);
    write_top_kernel<T, I><<<grid_for(n_rows * k), kBlock, 0, stream>>>(
        static_cast<T*>(values), static_cast<I*>(indices), static_cast<const T*>(x), sorted, rows, n_rows, k);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda

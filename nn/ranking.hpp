#pragma once
// ArgMax, ArgMin and TopK: which element of a row along an axis comes first. One definition of the order, used by
// constant folding, the CPU layers and the CUDA kernels, and the limit on axis lengths whose positions the
// engines' float data can hold exactly.
#include <cstdint>
#include <cstring>

#ifndef SLUICE_HOST_DEVICE  // as in nn/elementwise_math.hpp
#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif
#endif

namespace sluice::nn {

// How elements of one row are ranked. Every pair is ordered (ties fall to the index), so the order is total and
// the ranks of a row are a permutation of 0..length-1.
struct RankOrder {
  bool largest = true;       // larger values first (ArgMax, TopK largest=1), else smaller first
  bool nan_first = true;     // NaN before every number, else after every number
  bool later_on_tie = false; // equal values: the higher index first (select_last_index=1), else the lower
};

// ArgMax/ArgMin: a NaN wins (the first NaN, or the last with select_last_index), as in numpy and torch; the
// index then points at the value ReduceMax/ReduceMin return, which propagate NaN.
SLUICE_HOST_DEVICE inline RankOrder arg_extreme_order(bool max, bool select_last_index) {
  return {max, true, select_last_index};
}
// TopK: NaN ranks above +inf (as torch.topk): first when largest, last when smallest; ties: lower index first
// (as ONNX Runtime).
SLUICE_HOST_DEVICE inline RankOrder top_k_order(bool largest) { return {largest, largest, false}; }

// Whether value a at index ia comes before value b at index ib.
SLUICE_HOST_DEVICE inline bool comes_before(float a, std::int64_t ia, float b, std::int64_t ib, RankOrder o) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return a_nan == o.nan_first;
  if (!a_nan && a != b) return o.largest ? a > b : a < b;
  return o.later_on_tie ? ia > ib : ia < ib;
}

// A 32-bit key per value whose ascending order is `o` without its tie rule: sorting (key, index) pairs stably by
// key (ties keep ascending indices) gives comes_before's order when !o.later_on_tie. NaN is one key (first or last
// as o says), -0 and +0 are one key (they tie, as comes_before has them). The CUDA TopK of long rows sorts these.
SLUICE_HOST_DEVICE inline std::uint32_t rank_key(float v, RankOrder o) {
  std::uint32_t u;
  if (v != v) {
    u = o.nan_first == o.largest ? 0xFFFFFFFFu : 0u;  // above every number before the flip below, or under
  } else {
    if (v == 0.f) v = 0.f;  // -0 == +0
    std::memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the value, +-inf included
  }
  return o.largest ? ~u : u;
}
// The low bits of rank_key that carry no order among values an f16 or bf16 holds (their f32 bits end in 13 or 16
// zeros, ones after a flip): two such values that do not tie differ above them, so a sort may skip them.
inline constexpr int kRankKeySameBitsF16 = 13;
inline constexpr int kRankKeySameBitsBf16 = 16;

// Index outputs are data like any other in the prepared form (f32 numbers): a position along an axis of `length`
// elements is exact only while length - 1 fits the significand of the type holding it. A CUDA engine at f16/bf16
// holds index values in f32 all the same (nn/exact_indices.hpp), so only run-time indices that are not index values
// (data computed otherwise, e.g. a graph input) are held narrower. Engines refuse at build an axis longer than
// the type holding its indices counts exactly. Integers up to 2^24 (f32), 2^11 (f16) and 2^8 (bf16) are exact;
// the limits below are those, so every index 0..length-1 is.
inline constexpr std::int64_t kExactIndexAxisF32 = std::int64_t{1} << 24;
inline constexpr std::int64_t kExactIndexAxisF16 = 2048;
inline constexpr std::int64_t kExactIndexAxisBf16 = 256;

}  // namespace sluice::nn

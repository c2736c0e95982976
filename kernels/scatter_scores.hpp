#pragma once
// Scatter of class scores: crop c's k entries (scores[c*k .. c*k + k)) to byte offset offsets[c] of a
// destination, so that results computed for crops packed across a batch land in each box's slot of its frame's
// record (the classify_boxes stage). The GPU launcher is scatter_scores.cuh, the CPU twin below. Compiled as C++17
// by nvcc too.
#include <cstddef>
#include <cstdint>

#include "kernels/topk.hpp"

namespace sluice::kernels {

// CPU twin. Offsets are the caller's (bounded by construction); each must leave room for k entries.
void scatter_scores_cpu(const ClassScore* scores, int k, const std::uint64_t* offsets, int count, std::byte* dst);

}  // namespace sluice::kernels

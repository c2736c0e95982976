#pragma once
// GPU launcher for detection post-processing (semantics in detect.hpp, CPU twin in detect_cpu.hpp). No CUDA
// headers, so any translation unit can include it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/detect.hpp"
#include "kernels/detect_cpu.hpp"
#include "runtime/gpu_handles.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// Device scratch for batches of up to `p.items` items with these params, allocated once (open()), with the
// per-class thresholds and the ssd priors copied to the device on `stream`. Per item it holds one 8-byte key per
// possible candidate (anchor points, times classes with multi_label) twice (the sort's two buffers), the
// pre_nms_top_k boxes, and the sort's temporary storage.
class DetectWorkspaceGpu {
 public:
  DetectWorkspaceGpu(const DetectParams& p, const std::vector<float>& class_thresholds, const std::vector<float>& priors,
                     cudaStream_t stream);
  // Candidate slots per item (the decode never drops one for want of room).
  static std::int64_t capacity(const DetectParams& p) noexcept;
  // The device bytes a workspace for `p` takes (for messages and `check`).
  static std::size_t bytes(const DetectParams& p);

  Memory keys, sorted, counts, offsets, boxes, temp, thresholds, priors;
  std::size_t temp_bytes = 0;
  int max_items = 0;
};

// Enqueues decode, per-item sort, NMS and mapping on `stream` (non-null); `in` and `out` in device memory
// (in.priors and p.class_thresholds are taken from the workspace). Never synchronises. Throws
// std::invalid_argument for bad params (or more items than the workspace holds) and GpuError if a launch fails.
void detect_gpu(const DetectParams& p, const DetectInputs& in, std::byte* out, DetectWorkspaceGpu& ws,
                cudaStream_t stream);

}  // namespace sluice::kernels

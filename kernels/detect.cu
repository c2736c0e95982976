// Detection post-processing on the GPU (detect.hpp). Three launches per batch:
//   decode   one thread per (anchor, item): every class that passes its threshold (or the best one) appends a key
//            (~score bits << 32 | candidate index) to its item's slots, counted with an atomic. Slots hold every
//            possible candidate, so none is dropped; the order of appends does not matter because:
//   sort     CUB's segmented radix sort orders each item's keys ascending = score descending, then index
//            ascending: the CPU twin's order, exactly;
//   nms      one block per item: the first pre_nms_top_k keys are decoded again into boxes (the key names the
//            anchor and class), then greedy class-aware NMS in sorted order (each kept box's suppression tested
//            by all threads at once), the first max_detections survivors mapped to the frame and written with the
//            header; the unused tail is zeroed.
#include <cuda_runtime.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/detect.cuh"
#include "kernels/detect_math.hpp"
#include "runtime/cuda_check.hpp"

namespace sluice::kernels {
namespace {

constexpr int kDecodeThreads = 256;
constexpr int kNmsThreads = 512;

detect::Pointers pointers(const DetectInputs& in, const float* priors) {
  detect::Pointers p{};
  for (int i = 0; i < kMaxDetectLevels; ++i) p.outputs[i] = in.outputs[i];
  p.priors = priors;
  return p;
}

__device__ unsigned long long make_key(float score, std::uint32_t index) {
  const float s = score + 0.f;  // -0 -> +0; scores here are >= the threshold >= 0, finite
  return (static_cast<unsigned long long>(~__float_as_uint(s)) << 32) | index;
}

__device__ float key_score(unsigned long long key) { return __uint_as_float(~static_cast<unsigned>(key >> 32)); }

__global__ void decode_kernel(DetectParams p, detect::Pointers in, unsigned long long* keys, unsigned* counts,
                              std::int64_t capacity) {
  const int n = blockIdx.y;
  const std::int64_t a = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t rows = p.head == HeadKind::nms_included ? detect::row_count(p, in, n) : p.anchor_points;
  if (a >= rows) return;
  unsigned long long* item_keys = keys + n * capacity;
  auto append = [&](int c, float s) {
    float box[4];
    if (!detect::decode_box(p, in, n, a, box)) return;
    const std::uint32_t index = static_cast<std::uint32_t>(p.head == HeadKind::nms_included ? a : a * p.classes + c);
    const unsigned slot = atomicAdd(counts + n, 1u);
    if (slot < capacity) item_keys[slot] = make_key(s, index);
  };
  const detect::ScoreRow r = detect::score_row(p, in, n, a);
  if (p.head == HeadKind::nms_included) {
    const int c = detect::row_class(p, in, n, a);
    const float s = detect::class_score(p, in, n, a, 0, r);
    if (c >= 0 && s >= detect::threshold(p, c) && detect::finite(s)) append(c, s);
    return;
  }
  int best = -1;
  float best_score = 0.f;
  for (int c = 0; c < p.classes; ++c) {
    if (c == p.background_class) continue;
    const float s = detect::class_score(p, in, n, a, c, r);
    if (!(s >= detect::threshold(p, c)) || !detect::finite(s)) continue;
    if (p.multi_label) append(c, s);
    else if (best < 0 || s > best_score) best = c, best_score = s;
  }
  if (!p.multi_label && best >= 0) append(best, best_score);
}

// Each item's segment of the sort: [n * capacity, n * capacity + count).
__global__ void offsets_kernel(const unsigned* counts, int items, std::int64_t capacity, int* offsets) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= items) return;
  const std::int64_t count = counts[n] < capacity ? counts[n] : capacity;
  offsets[n] = static_cast<int>(n * capacity);
  offsets[items + n] = static_cast<int>(n * capacity + count);
}

__global__ void nms_kernel(DetectParams p, detect::Pointers in, const unsigned long long* sorted,
                           const unsigned* counts, std::int64_t capacity, float4* boxes, std::byte* out) {
  extern __shared__ unsigned char suppressed[];
  __shared__ int kept;
  const int n = blockIdx.x;
  const unsigned found = counts[n];
  const int k = static_cast<int>(found < static_cast<unsigned>(p.pre_nms_top_k) ? found : p.pre_nms_top_k);
  const unsigned long long* keys = sorted + n * capacity;
  float4* item_boxes = boxes + static_cast<std::int64_t>(n) * p.pre_nms_top_k;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const std::uint32_t index = static_cast<std::uint32_t>(keys[i] & 0xffffffffu);
    const std::int64_t a = p.head == HeadKind::nms_included ? index : index / p.classes;
    float b[4] = {0.f, 0.f, 0.f, 0.f};
    detect::decode_box(p, in, n, a, b);  // finite: it was when the key was made
    item_boxes[i] = make_float4(b[0], b[1], b[2], b[3]);
    suppressed[i] = 0;
  }
  if (threadIdx.x == 0) kept = 0;
  __syncthreads();
  // detections_item_bytes(), spelled out: a constexpr host function is not callable here without relaxed constexpr
  std::byte* item = out + (sizeof(DetectionsHeader) + sizeof(Detection) * static_cast<std::size_t>(p.max_detections)) *
                              static_cast<std::size_t>(n);
  auto* dets = reinterpret_cast<Detection*>(item + sizeof(DetectionsHeader));
  auto class_of = [&](int i) {
    const std::uint32_t index = static_cast<std::uint32_t>(keys[i] & 0xffffffffu);
    return p.head == HeadKind::nms_included ? detect::row_class(p, in, n, index) : static_cast<int>(index % p.classes);
  };
  for (int i = 0; i < k; ++i) {
    if (suppressed[i]) continue;  // every thread reads the same flag: set before the last barrier
    if (kept >= p.max_detections) break;
    const float4 bi = item_boxes[i];
    const int ci = class_of(i);
    if (threadIdx.x == 0) {
      const float model_box[4] = {bi.x, bi.y, bi.z, bi.w};
      float frame_box[4];
      detect::map_box(p.map, p.input_width, p.input_height, model_box, frame_box);
      dets[kept] = {frame_box[0], frame_box[1], frame_box[2], frame_box[3], key_score(keys[i]), ci, -1, 0};
    }
    if (head_runs_nms(p.head))
      for (int j = i + 1 + threadIdx.x; j < k; j += blockDim.x) {
        if (suppressed[j] || class_of(j) != ci) continue;
        const float4 bj = item_boxes[j];
        if (detect::iou(bi.x, bi.y, bi.z, bi.w, bj.x, bj.y, bj.z, bj.w) > p.iou_threshold) suppressed[j] = 1;
      }
    __syncthreads();
    if (threadIdx.x == 0) ++kept;
    __syncthreads();
  }
  const int count = kept;
  if (threadIdx.x == 0) {
    DetectionsHeader h{count, static_cast<std::int32_t>(found < INT_MAX ? found : INT_MAX),
                       static_cast<std::int32_t>(found - static_cast<unsigned>(k) < INT_MAX ? found - k : INT_MAX), 0};
    *reinterpret_cast<DetectionsHeader*>(item) = h;
  }
  for (int i = count + threadIdx.x; i < p.max_detections; i += blockDim.x) dets[i] = Detection{0, 0, 0, 0, 0, 0, 0, 0};
}

}  // namespace

std::int64_t DetectWorkspaceGpu::capacity(const DetectParams& p) noexcept {
  return p.head == HeadKind::nms_included || !p.multi_label ? p.anchor_points : p.anchor_points * p.classes;
}

std::size_t DetectWorkspaceGpu::bytes(const DetectParams& p) {
  const std::size_t keys = static_cast<std::size_t>(capacity(p)) * static_cast<std::size_t>(p.items) * 8;
  return 2 * keys + static_cast<std::size_t>(p.items) * (static_cast<std::size_t>(p.pre_nms_top_k) * 16 + 12);
}

DetectWorkspaceGpu::DetectWorkspaceGpu(const DetectParams& p, const std::vector<float>& class_thresholds,
                                       const std::vector<float>& priors_host, cudaStream_t stream)
    : max_items(p.items) {
  validate(p);
  const std::int64_t cap = capacity(p);
  if (cap * p.items > INT_MAX)
    throw std::invalid_argument("the GPU detection step sorts at most " + std::to_string(INT_MAX) +
                                " candidates a batch; this head has " + std::to_string(cap) + " per item x " +
                                std::to_string(p.items) + " items (lower the batch size or turn multi_label off)");
  const std::size_t n = static_cast<std::size_t>(cap) * static_cast<std::size_t>(p.items);
  keys = Memory(MemoryKind::device, n * 8);
  sorted = Memory(MemoryKind::device, n * 8);
  counts = Memory(MemoryKind::device, static_cast<std::size_t>(p.items) * 4);
  offsets = Memory(MemoryKind::device, static_cast<std::size_t>(p.items) * 2 * 4);
  boxes = Memory(MemoryKind::device, static_cast<std::size_t>(p.items) * static_cast<std::size_t>(p.pre_nms_top_k) * 16);
  CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
      nullptr, temp_bytes, static_cast<const unsigned long long*>(nullptr), static_cast<unsigned long long*>(nullptr),
      static_cast<int>(n), p.items, static_cast<const int*>(nullptr), static_cast<const int*>(nullptr), 0, 64, stream));
  temp = Memory(MemoryKind::device, temp_bytes);
  if (!class_thresholds.empty()) {
    thresholds = Memory(MemoryKind::device, class_thresholds.size() * sizeof(float));
    gpu::copy_async(thresholds.data(), class_thresholds.data(), class_thresholds.size() * sizeof(float), stream);
  }
  if (!priors_host.empty()) {
    priors = Memory(MemoryKind::device, priors_host.size() * sizeof(float));
    gpu::copy_async(priors.data(), priors_host.data(), priors_host.size() * sizeof(float), stream);
  }
  // The host vectors are pageable: cudaMemcpyAsync has staged them before returning.
}

void detect_gpu(const DetectParams& params, const DetectInputs& in, std::byte* out, DetectWorkspaceGpu& ws,
                cudaStream_t stream) {
  DetectParams p = params;
  p.class_thresholds = ws.thresholds.bytes() ? reinterpret_cast<const float*>(ws.thresholds.data()) : nullptr;
  validate(p);
  if (p.items > ws.max_items)
    throw std::invalid_argument("detect_gpu: " + std::to_string(p.items) + " items but the workspace holds " +
                                std::to_string(ws.max_items));
  if (p.items == 0) return;
  const detect::Pointers ptr = pointers(in, reinterpret_cast<const float*>(ws.priors.data()));
  const std::int64_t cap = DetectWorkspaceGpu::capacity(p);
  auto* counts = reinterpret_cast<unsigned*>(ws.counts.data());
  auto* keys = reinterpret_cast<unsigned long long*>(ws.keys.data());
  auto* sorted = reinterpret_cast<unsigned long long*>(ws.sorted.data());
  auto* offsets = reinterpret_cast<int*>(ws.offsets.data());
  CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<std::size_t>(p.items) * 4, stream));
  const dim3 grid(static_cast<unsigned>((p.anchor_points + kDecodeThreads - 1) / kDecodeThreads),
                  static_cast<unsigned>(p.items));
  decode_kernel<<<grid, kDecodeThreads, 0, stream>>>(p, ptr, keys, counts, cap);
  CUDA_CHECK(cudaPeekAtLastError());
  offsets_kernel<<<(p.items + 255) / 256, 256, 0, stream>>>(counts, p.items, cap, offsets);
  CUDA_CHECK(cudaPeekAtLastError());
  std::size_t temp_bytes = ws.temp_bytes;
  CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(ws.temp.data(), temp_bytes, keys, sorted,
                                                     static_cast<int>(cap * p.items), p.items, offsets,
                                                     offsets + p.items, 0, 64, stream));
  nms_kernel<<<p.items, kNmsThreads, static_cast<std::size_t>(p.pre_nms_top_k), stream>>>(
      p, ptr, sorted, counts, cap, reinterpret_cast<float4*>(ws.boxes.data()), out);
  CUDA_CHECK(cudaPeekAtLastError());
}

}  // namespace sluice::kernels

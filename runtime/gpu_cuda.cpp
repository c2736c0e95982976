// gpu.hpp on top of the CUDA runtime.
#include <atomic>

#include <nvtx3/nvToolsExt.h>

#include "runtime/cuda_check.hpp"
#include "runtime/gpu.hpp"

namespace sluice::gpu {
namespace {
struct AtomicCounts {
  std::atomic<std::uint64_t> device_allocs{0}, device_frees{0}, pinned_allocs{0}, pinned_frees{0};
  std::atomic<std::uint64_t> stream_syncs{0}, event_syncs{0};
  std::atomic<std::uint64_t> async_copies{0}, event_records{0}, stream_waits{0};
};
AtomicCounts g_counts;
void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

bool built_with_cuda() noexcept { return true; }

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky "no device/driver" error
    return 0;
  }
  return n;
}

void set_device(int index) { CUDA_CHECK(cudaSetDevice(index)); }

int current_device() {
  int index = 0;
  CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

std::size_t device_memory_bytes(int index) noexcept {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return prop.totalGlobalMem;
}

StreamHandle stream_create() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(StreamHandle s) noexcept {
  if (s) cudaStreamDestroy(s);
}
void stream_synchronize(StreamHandle s) {
  bump(g_counts.stream_syncs);
  CUDA_CHECK(cudaStreamSynchronize(s));
}

EventHandle event_create(bool timing) {
  cudaEvent_t e = nullptr;
  // Sync events block the waiting host thread instead of spinning a core on it.
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming | cudaEventBlockingSync));
  return e;
}
void event_destroy(EventHandle e) noexcept {
  if (e) cudaEventDestroy(e);
}
void event_record(EventHandle e, StreamHandle s) {
  bump(g_counts.event_records);
  CUDA_CHECK(cudaEventRecord(e, s));
}
void stream_wait_event(StreamHandle s, EventHandle e) {
  bump(g_counts.stream_waits);
  CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
}
void event_synchronize(EventHandle e) {
  bump(g_counts.event_syncs);
  CUDA_CHECK(cudaEventSynchronize(e));
}
bool event_query(EventHandle e) {
  cudaError_t err = cudaEventQuery(e);
  if (err == cudaErrorNotReady) return false;
  CUDA_CHECK(err);
  return true;
}
float event_elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  return ms;
}

void* pinned_alloc(std::size_t bytes) {
  bump(g_counts.pinned_allocs);
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));  // portable: usable from any thread's context
  return p;
}
void pinned_free(void* p) noexcept {
  if (!p) return;
  bump(g_counts.pinned_frees);
  cudaFreeHost(p);
}
void* device_alloc(std::size_t bytes) {
  bump(g_counts.device_allocs);
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void device_free(void* p) noexcept {
  if (!p) return;
  bump(g_counts.device_frees);
  cudaFree(p);
}

void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) {
  bump(g_counts.async_copies);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
}

void zero_async(void* device, std::size_t bytes, StreamHandle s) { CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, s)); }

void range_push(const char* name) noexcept { nvtxRangePushA(name); }
void range_pop() noexcept { nvtxRangePop(); }

CallCounts call_counts() noexcept {
  CallCounts c;
  c.device_allocs = g_counts.device_allocs.load();
  c.device_frees = g_counts.device_frees.load();
  c.pinned_allocs = g_counts.pinned_allocs.load();
  c.pinned_frees = g_counts.pinned_frees.load();
  c.stream_syncs = g_counts.stream_syncs.load();
  c.event_syncs = g_counts.event_syncs.load();
  c.async_copies = g_counts.async_copies.load();
  c.event_records = g_counts.event_records.load();
  c.stream_waits = g_counts.stream_waits.load();
  return c;
}

}  // namespace sluice::gpu

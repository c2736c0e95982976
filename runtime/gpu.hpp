#pragma once
// The one thin layer every CUDA runtime call of the engine goes through.
// Why: (1) the rest of the code compiles without the CUDA toolkit (a CPU-only build links gpu_none.cpp);
// (2) calls that must never happen in steady state (allocation, device/stream syncs, synchronous copies)
// are counted, so a test can prove the data path free of them.
#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;
struct CUevent_st;

namespace sluice::gpu {

using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;

// True when this binary was built with CUDA.
bool built_with_cuda() noexcept;
// Number of usable devices (0 without CUDA, without a driver or without a GPU). Never throws.
int device_count() noexcept;
void set_device(int index);
int current_device();  // of the calling thread
std::string device_name(int index);
// Total memory of device `index` in bytes; 0 without CUDA or when it cannot be queried. Never throws.
std::size_t device_memory_bytes(int index) noexcept;

StreamHandle stream_create();  // non-blocking with respect to the legacy default stream
void stream_destroy(StreamHandle s) noexcept;
void stream_synchronize(StreamHandle s);  // counted: for serial mode, tests and shutdown only

EventHandle event_create(bool timing);
void event_destroy(EventHandle e) noexcept;
void event_record(EventHandle e, StreamHandle s);
void stream_wait_event(StreamHandle s, EventHandle e);
void event_synchronize(EventHandle e);  // host waits: only host consumers may call it
bool event_query(EventHandle e);        // true once the work before the record is done
float event_elapsed_ms(EventHandle start, EventHandle end);

void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p) noexcept;
void* device_alloc(std::size_t bytes);
void device_free(void* p) noexcept;

void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s);  // direction inferred
void zero_async(void* device, std::size_t bytes, StreamHandle s);  // set-up only (warm-up's scratch)

// NVTX ranges, for people looking at the pipeline in Nsight Systems.
void range_push(const char* name) noexcept;
void range_pop() noexcept;

// Counters of calls that are forbidden in steady state; a test snapshots them around N batches.
// (This layer has no synchronous copy and no device-wide sync at all: every copy is copy_async on a stream.)
struct CallCounts {
  std::uint64_t device_allocs = 0, device_frees = 0, pinned_allocs = 0, pinned_frees = 0;
  std::uint64_t stream_syncs = 0, event_syncs = 0;
  std::uint64_t async_copies = 0, event_records = 0, stream_waits = 0;
};
CallCounts call_counts() noexcept;

}  // namespace sluice::gpu

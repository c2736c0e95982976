// gpu.hpp for builds without the CUDA toolkit: no devices; anything that needs one throws.
#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"

namespace sluice::gpu {
namespace {
[[noreturn]] void no_cuda(const char* call) {
  throw GpuError(std::string(call) + ": this sluice was built without CUDA (rebuild with nvcc on PATH)");
}
}  // namespace

bool built_with_cuda() noexcept { return false; }
int device_count() noexcept { return 0; }
void set_device(int) { no_cuda("set_device"); }
int current_device() { no_cuda("current_device"); }
std::string device_name(int) { no_cuda("device_name"); }
std::size_t device_memory_bytes(int) noexcept { return 0; }
StreamHandle stream_create() { no_cuda("stream_create"); }
void stream_destroy(StreamHandle) noexcept {}
void stream_synchronize(StreamHandle) { no_cuda("stream_synchronize"); }
EventHandle event_create(bool) { no_cuda("event_create"); }
void event_destroy(EventHandle) noexcept {}
void event_record(EventHandle, StreamHandle) { no_cuda("event_record"); }
void stream_wait_event(StreamHandle, EventHandle) { no_cuda("stream_wait_event"); }
void event_synchronize(EventHandle) { no_cuda("event_synchronize"); }
bool event_query(EventHandle) { no_cuda("event_query"); }
float event_elapsed_ms(EventHandle, EventHandle) { no_cuda("event_elapsed_ms"); }
void* pinned_alloc(std::size_t) { no_cuda("pinned_alloc"); }
void pinned_free(void*) noexcept {}
void* device_alloc(std::size_t) { no_cuda("device_alloc"); }
void device_free(void*) noexcept {}
void copy_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("copy_async"); }
void zero_async(void*, std::size_t, StreamHandle) { no_cuda("zero_async"); }
void range_push(const char*) noexcept {}
void range_pop() noexcept {}
CallCounts call_counts() noexcept { return {}; }

}  // namespace sluice::gpu

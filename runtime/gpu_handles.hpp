#pragma once
// Move-only RAII owners of CUDA objects (after DALI's UniqueHandle). Destructors never throw.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#include "runtime/gpu.hpp"

namespace sluice {

template <typename T, void (*Destroy)(T) noexcept>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(T h) : h_(h) {}
  UniqueHandle(UniqueHandle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  ~UniqueHandle() { reset(); }

  T get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != T{}; }
  void reset() noexcept {
    if (h_ != T{}) Destroy(std::exchange(h_, T{}));
  }

 private:
  T h_{};
};

class Stream : public UniqueHandle<gpu::StreamHandle, gpu::stream_destroy> {
 public:
  using UniqueHandle::UniqueHandle;
  static Stream create() { return Stream(gpu::stream_create()); }
};

class Event : public UniqueHandle<gpu::EventHandle, gpu::event_destroy> {
 public:
  using UniqueHandle::UniqueHandle;
  static Event create(bool timing = false) { return Event(gpu::event_create(timing)); }
};

namespace detail {
inline void free_host(void* p) noexcept { std::free(p); }
}  // namespace detail

// Where a block of memory lives.
enum class MemoryKind { host, pinned, device };
const char* to_string(MemoryKind k) noexcept;

// One allocation of `bytes` of the given kind; plain host memory is 256-byte aligned like CUDA's.
class Memory {
 public:
  Memory() = default;
  Memory(MemoryKind kind, std::size_t bytes);
  Memory(Memory&&) noexcept = default;
  Memory& operator=(Memory&&) noexcept = default;

  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_.get()); }
  std::size_t bytes() const noexcept { return bytes_; }
  MemoryKind kind() const noexcept { return kind_; }

 private:
  using Deleter = void (*)(void*) noexcept;
  std::unique_ptr<void, Deleter> ptr_{nullptr, detail::free_host};
  std::size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::host;
};

inline Memory::Memory(MemoryKind kind, std::size_t bytes) : bytes_(bytes), kind_(kind) {
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  switch (kind) {
    case MemoryKind::host: {
      void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
      if (!p) throw std::bad_alloc();
      ptr_ = {p, detail::free_host};
      break;
    }
    case MemoryKind::pinned: ptr_ = {gpu::pinned_alloc(rounded), gpu::pinned_free}; break;
    case MemoryKind::device: ptr_ = {gpu::device_alloc(rounded), gpu::device_free}; break;
  }
}

inline const char* to_string(MemoryKind k) noexcept {
  switch (k) {
    case MemoryKind::host: return "host";
    case MemoryKind::pinned: return "pinned";
    case MemoryKind::device: return "device";
  }
  return "?";
}

}  // namespace sluice

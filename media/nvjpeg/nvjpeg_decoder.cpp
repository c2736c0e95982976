#include "media/nvjpeg/nvjpeg_decoder.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "kernels/bgr_convert.cuh"
#include "media/nvjpeg/nvjpeg_api.hpp"
#include "runtime/gpu.hpp"

namespace sluice {

namespace api = nvjpeg_api;

namespace {

// The library and its handles, loaded once for the life of the process (unloading under running decoders
// would crash them; at exit the CUDA runtime may already be gone, so nothing is torn down).
struct Library {
  void* so = nullptr;
  api::CreateEx create_ex = nullptr;
  api::Destroy destroy = nullptr;
  api::JpegStateCreate state_create = nullptr;
  api::JpegStateDestroy state_destroy = nullptr;
  api::GetImageInfo image_info = nullptr;
  api::Decode decode = nullptr;
  api::DecodeBatchedInitialize batched_init = nullptr;
  api::DecodeBatched batched = nullptr;
  api::Handle hardware = nullptr;  // null where the GPU has no JPEG engine
  api::Handle gpu = nullptr;       // the default backend
  std::string unavailable;         // empty: usable
};

std::string status_name(api::Status s) {
  switch (s) {
    case api::STATUS_SUCCESS: return "success";
    case api::STATUS_NOT_INITIALIZED: return "not initialized";
    case api::STATUS_INVALID_PARAMETER: return "invalid parameter";
    case api::STATUS_BAD_JPEG: return "bad JPEG";
    case api::STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case api::STATUS_ALLOCATOR_FAILURE: return "allocation failed";
    case api::STATUS_EXECUTION_FAILED: return "execution failed";
    case api::STATUS_ARCH_MISMATCH: return "not supported on this GPU";
    case api::STATUS_INTERNAL_ERROR: return "internal error";
    case api::STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "not implemented for this backend";
    case api::STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
  }
  return "status " + std::to_string(s);
}

// nvJPEG's own allocations go through the engine's counted allocators (runtime/gpu.hpp), so the steady-state
// proof sees them too: nvJPEG grows its buffers to the largest image and keeps them.
extern "C" int counted_device_malloc(void** ptr, std::size_t bytes) {
  try {
    *ptr = gpu::device_alloc(bytes);
    return 0;
  } catch (...) {
    *ptr = nullptr;
    return static_cast<int>(cudaErrorMemoryAllocation);
  }
}
extern "C" int counted_device_free(void* ptr) {
  gpu::device_free(ptr);
  return 0;
}
extern "C" int counted_pinned_malloc(void** ptr, std::size_t bytes, unsigned int /*flags: always portable*/) {
  try {
    *ptr = gpu::pinned_alloc(bytes);
    return 0;
  } catch (...) {
    *ptr = nullptr;
    return static_cast<int>(cudaErrorMemoryAllocation);
  }
}
extern "C" int counted_pinned_free(void* ptr) {
  gpu::pinned_free(ptr);
  return 0;
}

template <class F>
bool bind(Library& lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib.so, name));
  if (!fn) lib.unavailable = std::string("libnvjpeg lacks ") + name;
  return fn != nullptr;
}

Library& library() {
  static Library* lib = new Library;  // never destroyed (see above)
  static std::once_flag once;
  std::call_once(once, [] {
    Library& l = *lib;
    std::string tried;
    for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"}) {
      if ((l.so = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      if (tried.empty()) {
        const char* e = dlerror();
        tried = e ? e : name;
      }
    }
    if (!l.so) {
      l.unavailable = "cannot load libnvjpeg (" + tried + ")";
      return;
    }
    if (!bind(l, l.create_ex, "nvjpegCreateEx") || !bind(l, l.destroy, "nvjpegDestroy") ||
        !bind(l, l.state_create, "nvjpegJpegStateCreate") || !bind(l, l.state_destroy, "nvjpegJpegStateDestroy") ||
        !bind(l, l.image_info, "nvjpegGetImageInfo") || !bind(l, l.decode, "nvjpegDecode") ||
        !bind(l, l.batched_init, "nvjpegDecodeBatchedInitialize") || !bind(l, l.batched, "nvjpegDecodeBatched"))
      return;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
      cudaGetLastError();
      l.unavailable = "no CUDA device";
      return;
    }
    static api::DevAllocator device{counted_device_malloc, counted_device_free};
    static api::PinnedAllocator pinned{counted_pinned_malloc, counted_pinned_free};
    // Should a backend refuse the allocators, it gets nvJPEG's own (cudaMalloc/cudaHostAlloc, not counted).
    if (l.create_ex(api::BACKEND_HARDWARE, &device, &pinned, 0, &l.hardware) != api::STATUS_SUCCESS &&
        l.create_ex(api::BACKEND_HARDWARE, nullptr, nullptr, 0, &l.hardware) != api::STATUS_SUCCESS)
      l.hardware = nullptr;
    if (l.create_ex(api::BACKEND_DEFAULT, &device, &pinned, 0, &l.gpu) == api::STATUS_SUCCESS) return;
    if (const api::Status s = l.create_ex(api::BACKEND_DEFAULT, nullptr, nullptr, 0, &l.gpu);
        s != api::STATUS_SUCCESS) {
      l.gpu = nullptr;
      l.unavailable = "nvjpegCreateEx failed: " + status_name(s);
    }
  });
  return *lib;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw NvjpegError(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// Grows `ptr` to at least `bytes` of device memory (only ever up: the largest image or frame seen).
void reserve(std::uint8_t*& ptr, std::size_t& capacity, std::size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity) return;
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the old buffer may still be read
  gpu::device_free(ptr);
  ptr = nullptr;
  capacity = 0;
  ptr = static_cast<std::uint8_t*>(gpu::device_alloc(bytes));
  capacity = bytes;
}

}  // namespace

std::string nvjpeg_unavailable_reason() {
  try {
    return library().unavailable;
  } catch (const std::exception& e) {
    return e.what();
  }
}

struct NvjpegDecoder::Impl {
  Library& lib = library();
  cudaStream_t stream = nullptr;
  api::State hardware_state = nullptr, gpu_state = nullptr;
  bool hardware_ready = false;  // nvjpegDecodeBatchedInitialize done (again after a failed batch)
  std::uint8_t* bgr = nullptr;  // the last image, interleaved BGR, width * 3 bytes a row
  std::size_t bgr_capacity = 0;
  std::uint8_t* frame = nullptr;  // a converted frame on its way to a host target
  std::size_t frame_capacity = 0;
  std::vector<std::uint8_t> bytes;  // the file being decoded, held until the next one

  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (hardware_state) lib.state_destroy(hardware_state);
    if (gpu_state) lib.state_destroy(gpu_state);
    gpu::device_free(bgr);
    gpu::device_free(frame);
    if (stream) cudaStreamDestroy(stream);
  }
};

NvjpegDecoder::NvjpegDecoder() : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  if (!d.lib.unavailable.empty()) throw NvjpegError("nvJPEG unavailable: " + d.lib.unavailable);
  check_cuda(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (const api::Status s = d.lib.state_create(d.lib.gpu, &d.gpu_state); s != api::STATUS_SUCCESS)
    throw NvjpegError("nvjpegJpegStateCreate failed: " + status_name(s));
  if (d.lib.hardware && d.lib.state_create(d.lib.hardware, &d.hardware_state) != api::STATUS_SUCCESS)
    d.hardware_state = nullptr;  // the GPU backend decodes everything then
}

NvjpegDecoder::~NvjpegDecoder() = default;

void NvjpegDecoder::decode(const std::uint8_t* data, std::size_t size, bool progressive, int orientation) {
  Impl& d = *impl_;
  width_ = height_ = 0;  // nothing to convert until this one decoded
  orientation_ = orientation >= 1 && orientation <= 8 ? orientation : 1;
  d.bytes.assign(data, data + size);
  int components = 0;
  api::ChromaSubsampling css = api::CSS_UNKNOWN;
  int widths[api::MAX_COMPONENT] = {}, heights[api::MAX_COMPONENT] = {};
  if (const api::Status s =
          d.lib.image_info(d.lib.gpu, d.bytes.data(), d.bytes.size(), &components, &css, widths, heights);
      s != api::STATUS_SUCCESS)
    throw NvjpegError("nvJPEG cannot read the JPEG header: " + status_name(s));
  const int w = widths[0], h = heights[0];
  if (w < 1 || h < 1 || w > kMaxJpegSide || h > kMaxJpegSide ||
      static_cast<std::int64_t>(w) * h > kMaxJpegPixels)
    throw NvjpegError("the image is " + std::to_string(w) + "x" + std::to_string(h) +
                      ", outside what is decoded on the GPU (1 to 16384 a side, 256 MP at most)");
  if (components != 1 && components != 3)
    throw NvjpegError("nvJPEG reports " + std::to_string(components) + " components (1 or 3 are decoded here)");
  const std::size_t pitch = static_cast<std::size_t>(w) * 3;
  reserve(d.bgr, d.bgr_capacity, pitch * static_cast<std::size_t>(h), d.stream);
  api::Image out{};
  out.channel[0] = d.bgr;
  out.pitch[0] = pitch;

  // The JPEG engines decode baseline files without 4:1:1/4:1:0 subsampling; anything they refuse goes to the
  // GPU backend.
  const bool engine_can = d.hardware_state && !progressive && css != api::CSS_411 && css != api::CSS_410 &&
                          css != api::CSS_410V && css != api::CSS_UNKNOWN;
  if (engine_can) {
    api::Status s = api::STATUS_SUCCESS;
    if (!d.hardware_ready) s = d.lib.batched_init(d.lib.hardware, d.hardware_state, 1, 1, api::OUTPUT_BGRI);
    d.hardware_ready = s == api::STATUS_SUCCESS;
    if (d.hardware_ready) {
      const unsigned char* ptr = d.bytes.data();
      const std::size_t length = d.bytes.size();
      s = d.lib.batched(d.lib.hardware, d.hardware_state, &ptr, &length, &out, d.stream);
      if (s == api::STATUS_SUCCESS) {
        width_ = w;
        height_ = h;
        backend_ = "hardware";
        return;
      }
      d.hardware_ready = false;  // the guide: initialise again after a failed batch
    }
  }
  if (const api::Status s = d.lib.decode(d.lib.gpu, d.gpu_state, d.bytes.data(), d.bytes.size(), api::OUTPUT_BGRI,
                                         &out, d.stream);
      s != api::STATUS_SUCCESS)
    throw NvjpegError("nvJPEG cannot decode it: " + status_name(s));
  width_ = w;
  height_ = h;
  backend_ = "GPU";
}

void NvjpegDecoder::convert(const FrameTarget& t) {
  Impl& d = *impl_;
  if (width_ < 1 || height_ < 1) throw NvjpegError("no image decoded");
  if (t.data == nullptr) throw std::invalid_argument("frame target without memory");
  kernels::BgrConvertParams p;
  p.in_width = width_;
  p.in_height = height_;
  p.in_pitch = static_cast<std::size_t>(width_) * 3;
  p.orientation = orientation_;
  p.out_format = t.pixel;
  p.out_width = t.width;
  p.out_height = t.height;
  kernels::validate(p);
  if (t.device) {
    if (t.reusable) check_cuda(cudaStreamWaitEvent(d.stream, t.reusable, 0), "cudaStreamWaitEvent");
    kernels::bgr_convert_gpu(p, d.bgr, reinterpret_cast<std::uint8_t*>(t.data), d.stream);
    if (t.written) check_cuda(cudaEventRecord(t.written, d.stream), "cudaEventRecord");
    return;
  }
  const std::size_t bytes = image_bytes(t.pixel, t.width, t.height);
  reserve(d.frame, d.frame_capacity, bytes, d.stream);
  kernels::bgr_convert_gpu(p, d.bgr, d.frame, d.stream);
  check_cuda(cudaMemcpyAsync(t.data, d.frame, bytes, cudaMemcpyDeviceToHost, d.stream), "cudaMemcpyAsync");
  try {
    gpu::stream_synchronize(d.stream);  // counted: a host target is waited for
  } catch (const std::exception& e) {
    throw NvjpegError(std::string("decoding the JPEG on the GPU failed: ") + e.what());
  }
}

// ---- the pool ----

namespace {
struct Pool {
  std::mutex mu;
  std::vector<std::unique_ptr<NvjpegDecoder>> idle;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: decoders hold CUDA objects the runtime may have torn down at exit
  return *p;
}
}  // namespace

void NvjpegDecoderReturn::operator()(NvjpegDecoder* d) const noexcept {
  if (!d) return;
  try {
    Pool& p = pool();
    std::lock_guard lock(p.mu);
    p.idle.emplace_back(d);
  } catch (...) {
    delete d;
  }
}

NvjpegDecoderLease acquire_nvjpeg_decoder() {
  {
    Pool& p = pool();
    std::lock_guard lock(p.mu);
    if (!p.idle.empty()) {
      NvjpegDecoderLease lease(p.idle.back().release());
      p.idle.pop_back();
      return lease;
    }
  }
  return NvjpegDecoderLease(new NvjpegDecoder());
}

}  // namespace sluice

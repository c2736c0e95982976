#pragma once
// The few nvJPEG types and entry points sluice uses, declared here because the local CUDA toolkit ships no
// nvjpeg.h; libnvjpeg is dlopen()ed at run time (nvjpeg_decoder.cpp). Declared after the nvJPEG Library
// Guide (CUDA 12.x, "nvJPEG Type Declarations" and "nvJPEG API Reference"); the values are the documented
// ones, stable since CUDA 11.
#include <cstddef>

struct CUstream_st;

namespace sluice::nvjpeg_api {

using Status = int;  // nvjpegStatus_t
enum : Status {
  STATUS_SUCCESS = 0,
  STATUS_NOT_INITIALIZED = 1,
  STATUS_INVALID_PARAMETER = 2,
  STATUS_BAD_JPEG = 3,
  STATUS_JPEG_NOT_SUPPORTED = 4,
  STATUS_ALLOCATOR_FAILURE = 5,
  STATUS_EXECUTION_FAILED = 6,
  STATUS_ARCH_MISMATCH = 7,
  STATUS_INTERNAL_ERROR = 8,
  STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
  STATUS_INCOMPLETE_BITSTREAM = 10,
};

using ChromaSubsampling = int;  // nvjpegChromaSubsampling_t
enum : ChromaSubsampling {
  CSS_444 = 0, CSS_422 = 1, CSS_420 = 2, CSS_440 = 3, CSS_411 = 4, CSS_410 = 5, CSS_GRAY = 6, CSS_410V = 7,
  CSS_UNKNOWN = -1,
};

using OutputFormat = int;  // nvjpegOutputFormat_t
constexpr OutputFormat OUTPUT_BGRI = 6;  // interleaved BGR in channel[0]

using Backend = int;  // nvjpegBackend_t
constexpr Backend BACKEND_DEFAULT = 0;
constexpr Backend BACKEND_HARDWARE = 3;  // the JPEG engines (A100, H100, H200); batched decode API only

constexpr int MAX_COMPONENT = 4;  // NVJPEG_MAX_COMPONENT

struct Image {  // nvjpegImage_t
  unsigned char* channel[MAX_COMPONENT];
  std::size_t pitch[MAX_COMPONENT];
};

extern "C" {
struct DevAllocator {  // nvjpegDevAllocator_t: modelled after cudaMalloc/cudaFree, 0 = success
  int (*dev_malloc)(void** ptr, std::size_t bytes);
  int (*dev_free)(void* ptr);
};
struct PinnedAllocator {  // nvjpegPinnedAllocator_t: modelled after cudaHostAlloc/cudaFreeHost
  int (*pinned_malloc)(void** ptr, std::size_t bytes, unsigned int flags);
  int (*pinned_free)(void* ptr);
};
}
struct HandleSt;
using Handle = HandleSt*;  // nvjpegHandle_t
struct StateSt;
using State = StateSt*;  // nvjpegJpegState_t

extern "C" {
using CreateEx = Status (*)(Backend backend, DevAllocator* dev_allocator, PinnedAllocator* pinned_allocator,
                            unsigned int flags, Handle* handle);
using Destroy = Status (*)(Handle handle);
using JpegStateCreate = Status (*)(Handle handle, State* state);
using JpegStateDestroy = Status (*)(State state);
using GetImageInfo = Status (*)(Handle handle, const unsigned char* data, std::size_t length, int* components,
                                ChromaSubsampling* subsampling, int* widths, int* heights);
using Decode = Status (*)(Handle handle, State state, const unsigned char* data, std::size_t length,
                          OutputFormat output_format, Image* destination, CUstream_st* stream);
using DecodeBatchedInitialize = Status (*)(Handle handle, State state, int batch_size, int max_cpu_threads,
                                           OutputFormat output_format);
using DecodeBatched = Status (*)(Handle handle, State state, const unsigned char* const* data,
                                 const std::size_t* lengths, Image* destinations, CUstream_st* stream);
}

}  // namespace sluice::nvjpeg_api

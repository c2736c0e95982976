#pragma once
// JPEG decoding on the GPU with nvJPEG, loaded at run time: libnvjpeg (.so.13, .so.12, .so.11, .so) is
// dlopen()ed on first use, so a binary without it starts and nvjpeg_unavailable_reason() says why nvJPEG cannot
// be used. One process-wide library handle per backend: the hardware backend (the JPEG engines of A100, H100,
// H200; batched decode API, baseline 8-bit JPEGs without 4:1:1/4:1:0 subsampling) where nvjpegCreateEx accepts
// it, and the default GPU backend for the rest (progressive files, other GPUs).
//
// An NvjpegDecoder is one decoding state with its own stream and one device buffer holding the last image in
// interleaved BGR. Decoders are pooled (acquire_nvjpeg_decoder): a reader borrows one per image, so buffers and
// nvJPEG's own pinned and device allocations (made through the engine's counted allocators, runtime/gpu.hpp)
// grow to the largest image seen and are reused afterwards.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/frame_reader.hpp"

namespace sluice {

// Empty when nvJPEG can be used on this host (the library, a device, a handle); else why not, e.g.
// "cannot load libnvjpeg (libnvjpeg.so.13: cannot open shared object file ...)". Never throws.
std::string nvjpeg_unavailable_reason();

struct NvjpegError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Images larger than this are refused before anything is allocated for them.
inline constexpr int kMaxJpegSide = 16384;
inline constexpr std::int64_t kMaxJpegPixels = std::int64_t{256} << 20;

class NvjpegDecoder {
 public:
  NvjpegDecoder();  // throws NvjpegError
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // Decodes one JPEG (the whole file; `progressive` and the EXIF `orientation` from jpeg_sniff) into this
  // decoder's BGR image, enqueued on its stream. Throws NvjpegError with nvJPEG's reason ("bad JPEG", "JPEG not
  // supported", a size over the limits). The bytes are copied: `data` may go once this returns.
  void decode(const std::uint8_t* data, std::size_t size, bool progressive, int orientation = 1);
  // The upright image's size (EXIF orientations 5..8 swap the stored axes).
  int width() const noexcept { return orientation_ >= 5 ? height_ : width_; }
  int height() const noexcept { return orientation_ >= 5 ? width_ : height_; }
  // The backend that decoded the last image: "hardware" or "GPU".
  const char* backend() const noexcept { return backend_; }

  // The last image turned upright and converted (kernels/bgr_convert.hpp, stretched) into `target`. Device targets: the stream
  // waits on target.reusable, converts, records target.written; the host does not wait. Host targets: converted
  // on the GPU, copied back and waited for. Throws NvjpegError / std::invalid_argument.
  void convert(const FrameTarget& target);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int width_ = 0, height_ = 0;  // as stored
  int orientation_ = 1;
  const char* backend_ = "GPU";
};

struct NvjpegDecoderReturn {
  void operator()(NvjpegDecoder* d) const noexcept;
};
using NvjpegDecoderLease = std::unique_ptr<NvjpegDecoder, NvjpegDecoderReturn>;
// A decoder from the pool (a new one when all are lent); it goes back when the lease ends. Throws NvjpegError.
NvjpegDecoderLease acquire_nvjpeg_decoder();

}  // namespace sluice

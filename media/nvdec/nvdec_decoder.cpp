#include "media/nvdec/nvdec_decoder.hpp"

#include <algorithm>
#include <cstdarg>
#include <condition_variable>
#include <cstdio>
#include <mutex>

// The loader reports what it could not load through this hook (into the reason string), not on stderr.
static void sluice_nvdec_loader_log(void* ctx, const char* fmt, ...) {
  if (!ctx) return;
  char line[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::string& out = *static_cast<std::string*>(ctx);
  if (out.empty()) {  // the first failure is the reason; later lines would only repeat it
    out = line;
    while (!out.empty() && out.back() == '\n') out.pop_back();
  }
}
#define FFNV_LOG_FUNC(logctx, msg, ...) sluice_nvdec_loader_log((logctx), (msg), __VA_ARGS__)
#define FFNV_DEBUG_LOG_FUNC(logctx, msg, ...)
#include <ffnvcodec/dynlink_loader.h>

#include "kernels/nv12_convert.cuh"
#include "media/frame_fit.hpp"
#include "runtime/gpu.hpp"
#include "runtime/stats.hpp"

namespace sluice {

namespace {

// The driver libraries, loaded once for the life of the process (unloading under running sessions would
// crash them), and the primary context of device 0.
struct Driver {
  CudaFunctions* cu = nullptr;
  CuvidFunctions* cuvid = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string unavailable;  // empty: usable
};

std::string cu_error(const Driver& d, CUresult r) {
  const char* name = nullptr;
  if (d.cu && d.cu->cuGetErrorName) d.cu->cuGetErrorName(r, &name);
  return name ? name : "CUDA error " + std::to_string(static_cast<int>(r));
}

Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    if (cuda_load_functions(&d.cu, &why) != 0) {
      d.unavailable = why.empty() ? "cannot load libcuda.so.1 (no NVIDIA driver)" : why + " (no NVIDIA driver?)";
      return;
    }
    why.clear();
    if (cuvid_load_functions(&d.cuvid, &why) != 0) {
      d.unavailable = why.empty() ? "cannot load libnvcuvid.so.1" : why + " (the driver's video decode library)";
      return;
    }
    CUresult r = d.cu->cuInit(0);
    if (r != CUDA_SUCCESS) {
      d.unavailable = "cuInit failed: " + cu_error(d, r);
      return;
    }
    int count = 0;
    if ((r = d.cu->cuDeviceGetCount(&count)) != CUDA_SUCCESS || count < 1) {
      d.unavailable = r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + cu_error(d, r) : "no CUDA device";
      return;
    }
    if ((r = d.cu->cuDeviceGet(&d.device, 0)) != CUDA_SUCCESS ||
        (r = d.cu->cuDevicePrimaryCtxRetain(&d.context, d.device)) != CUDA_SUCCESS) {
      d.unavailable = "cannot retain the primary context of device 0: " + cu_error(d, r);
      return;
    }
  });
  return d;
}

cudaVideoCodec cuvid_codec(VideoCodec c) { return c == VideoCodec::hevc ? cudaVideoCodec_HEVC : cudaVideoCodec_H264; }

const char* codec_name(VideoCodec c) { return c == VideoCodec::hevc ? "HEVC" : "H.264"; }

// Makes the primary context current on this thread for a scope.
class ContextScope {
 public:
  explicit ContextScope(const Driver& d) : d_(d) { ok_ = d_.cu->cuCtxPushCurrent(d_.context) == CUDA_SUCCESS; }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (ok_) d_.cu->cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Driver& d_;
  bool ok_ = false;
};

// Adds the thread's CPU and wall time from construction to destruction to one step of `costs` (none: not measured).
class StepTimer {
 public:
  StepTimer(NvdecCosts* costs, NvdecCosts::Step NvdecCosts::*step) : step_(costs ? &(costs->*step) : nullptr) {
    if (!step_) return;
    cpu_ = thread_cpu_ns();
    wall_ = now_ns();
  }
  ~StepTimer() {
    if (!step_) return;
    step_->cpu_ns += thread_cpu_ns() - cpu_;
    step_->wall_ns += now_ns() - wall_;
    ++step_->calls;
  }
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

 private:
  NvdecCosts::Step* step_;
  std::int64_t cpu_ = 0, wall_ = 0;
};

void check(const Driver& d, CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw NvdecError(std::string(what) + " failed: " + cu_error(d, r));
}

// Bounds the threads of the process inside cuvidParseVideoData at once (NvdecDecoder::limit_concurrent_feeds).
class FeedGate {
 public:
  static FeedGate& instance() {
    static FeedGate gate;
    return gate;
  }
  void set_limit(int threads) {
    std::lock_guard lock(mu_);
    limit_ = std::max(0, threads);
    turn_.notify_all();
  }
  void enter() {
    std::unique_lock lock(mu_);
    turn_.wait(lock, [&] { return limit_ == 0 || inside_ < limit_; });
    ++inside_;
  }
  void leave() {
    {
      std::lock_guard lock(mu_);
      --inside_;
    }
    turn_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable turn_;
  int limit_ = 0, inside_ = 0;
};

class FeedTurn {
 public:
  FeedTurn() { FeedGate::instance().enter(); }
  ~FeedTurn() { FeedGate::instance().leave(); }
  FeedTurn(const FeedTurn&) = delete;
  FeedTurn& operator=(const FeedTurn&) = delete;
};

}  // namespace

std::string nvdec_unavailable_reason() {
  try {
    return driver().unavailable;
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string nvdec_codec_unsupported_reason(VideoCodec codec, int bit_depth) {
  const Driver& d = driver();
  if (!d.unavailable.empty()) return d.unavailable;
  if (codec == VideoCodec::unknown) return "not an H.264 or HEVC stream";
  ContextScope scope(d);
  CUVIDDECODECAPS caps{};
  caps.eCodecType = cuvid_codec(codec);
  caps.eChromaFormat = cudaVideoChromaFormat_420;
  caps.nBitDepthMinus8 = static_cast<unsigned>(std::max(0, bit_depth - 8));
  const CUresult r = d.cuvid->cuvidGetDecoderCaps(&caps);
  if (r != CUDA_SUCCESS) return "cuvidGetDecoderCaps failed: " + cu_error(d, r);
  if (!caps.bIsSupported)
    return std::string(codec_name(codec)) + " 4:2:0 " + std::to_string(bit_depth) +
           "-bit is not supported by this GPU's NVDEC";
  return {};
}

struct NvdecDecoder::Impl {
  const Driver& d;
  VideoCodec codec;
  CUvideoctxlock lock = nullptr;
  CUvideoparser parser = nullptr;
  CUvideodecoder decoder = nullptr;
  NvdecTuning tuning;
  // Two streams: `stream` copies pictures off their surfaces, and the surface is unmapped once that copy is
  // done (its buffer's `copied` event); `convert_stream` converts held copies into the caller's memory after
  // that event and may wait on the caller's events (pop_to_device). Kept apart, the wait for a copy-out never
  // waits for a consumer that is behind.
  CUstream stream = nullptr, convert_stream = nullptr;
  CUVIDEOFORMAT format{};  // what the decoder was made for
  int surface_height = 0, display_width = 0, display_height = 0, surfaces = 0;
  int display_delay = kNvdecFileDisplayDelay;  // the parser's (NvdecDecoder::take)
  struct Buffer {
    CUdeviceptr ptr = 0;
    std::size_t capacity = 0;
    bool busy = false;          // holds a picture not yet popped
    CUevent copied = nullptr;     // recorded on `stream` after the last copy into it (blocking sync: waits sleep)
    CUevent converted = nullptr;  // recorded on convert_stream after the last conversion that read it
    bool converting = false;
  };
  std::vector<Buffer> buffers;
  // Surfaces still mapped, oldest first, each with the buffer its copy went into.
  struct Mapped {
    CUdeviceptr surface = 0;
    std::size_t buffer = 0;
  };
  std::deque<Mapped> mapped;
  CUdeviceptr scratch = 0;  // the converted frame on its way to the host
  std::size_t scratch_capacity = 0;
  std::string error;  // set by a callback; thrown by feed()
  bool timestamps = false;  // some packet came with a presentation time: pictures carry theirs

  explicit Impl(const Driver& driver) : d(driver) {}

  // Free: popped, and the conversion that read it has run (the copy-out must not overwrite it before).
  bool usable(Buffer& b) {
    if (b.busy) return false;
    if (b.converting && d.cu->cuEventQuery(b.converted) == CUDA_SUCCESS) b.converting = false;
    return !b.converting;
  }

  std::size_t take_buffer(std::size_t bytes) {
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].capacity >= bytes && usable(buffers[i])) {
        buffers[i].busy = true;
        return i;
      }
    // Grows only up to the deepest queue seen (pictures waiting to be popped or converted: a burst at the end
    // of the stream, a resolution change, a consumer behind); afterwards buffers are reused.
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (usable(buffers[i])) {
        check(d, d.cu->cuMemFree(buffers[i].ptr), "cuMemFree");
        buffers[i].ptr = 0;
        buffers[i].capacity = 0;
        check(d, d.cu->cuMemAlloc(&buffers[i].ptr, bytes), "cuMemAlloc (decoded frame)");
        buffers[i].capacity = bytes;
        buffers[i].busy = true;
        return i;
      }
    Buffer b;
    check(d, d.cu->cuEventCreate(&b.converted, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    CUresult r = d.cu->cuEventCreate(&b.copied, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = d.cu->cuMemAlloc(&b.ptr, bytes);
    if (r != CUDA_SUCCESS) {
      d.cu->cuEventDestroy(b.converted);
      if (b.copied) d.cu->cuEventDestroy(b.copied);
      check(d, r, "cuMemAlloc (decoded frame)");
    }
    b.capacity = bytes;
    b.busy = true;
    buffers.push_back(b);
    return buffers.size() - 1;
  }

  // Unmaps mapped surfaces, oldest first, whose copy is done, and waits for those beyond the newest `keep`.
  // Returns the first failure (the surface is forgotten either way: its decoder is not usable after one).
  CUresult release_surfaces(std::size_t keep) {
    CUresult first = CUDA_SUCCESS;
    while (!mapped.empty()) {
      const Mapped oldest = mapped.front();
      CUresult r = d.cu->cuEventQuery(buffers[oldest.buffer].copied);
      if (r == CUDA_ERROR_NOT_READY) {
        if (mapped.size() <= keep) break;
        r = d.cu->cuEventSynchronize(buffers[oldest.buffer].copied);
      }
      const CUresult unmapped = d.cuvid->cuvidUnmapVideoFrame(decoder, oldest.surface);
      mapped.pop_front();
      if (first == CUDA_SUCCESS) first = r != CUDA_SUCCESS ? r : unmapped;
    }
    return first;
  }

  void destroy_decoder() {
    if (decoder) {
      release_surfaces(0);
      d.cuvid->cuvidDestroyDecoder(decoder);
    }
    decoder = nullptr;
  }
};

// The parser's callbacks (C function pointers: nothing may be thrown through them).
struct NvdecCallbacks {
  static int CUDAAPI sequence(void* user, CUVIDEOFORMAT* fmt) {
    auto* self = static_cast<NvdecDecoder*>(user);
    try {
      return self_sequence(*self, *fmt);
    } catch (const std::exception& e) {
      self->impl_->error = e.what();
      return 0;
    }
  }
  static int CUDAAPI decode(void* user, CUVIDPICPARAMS* pic) {
    auto* self = static_cast<NvdecDecoder*>(user);
    auto& m = *self->impl_;
    if (!m.decoder) {
      if (m.error.empty()) m.error = "a picture before any sequence header";
      return 0;
    }
    CUresult r;
    {
      StepTimer timer(self->costs_, &NvdecCosts::decode);
      r = m.d.cuvid->cuvidDecodePicture(m.decoder, pic);
    }
    if (r != CUDA_SUCCESS) {
      m.error = "cuvidDecodePicture failed: " + cu_error(m.d, r);
      return 0;
    }
    return 1;
  }
  static int CUDAAPI display(void* user, CUVIDPARSERDISPINFO* info) {
    auto* self = static_cast<NvdecDecoder*>(user);
    if (!info) return 1;  // end of stream
    try {
      self_display(*self, *info);
      return 1;
    } catch (const std::exception& e) {
      self->impl_->error = e.what();
      return 0;
    }
  }

  static int self_sequence(NvdecDecoder& self, const CUVIDEOFORMAT& fmt) {
    auto& m = *self.impl_;
    const Driver& d = m.d;
    const int depth = fmt.bit_depth_luma_minus8 + 8;
    if (fmt.chroma_format != cudaVideoChromaFormat_420)
      throw NvdecError(std::string(codec_name(m.codec)) + ": only 4:2:0 video is decoded on the GPU");
    CUVIDDECODECAPS caps{};
    caps.eCodecType = fmt.codec;
    caps.eChromaFormat = fmt.chroma_format;
    caps.nBitDepthMinus8 = fmt.bit_depth_luma_minus8;
    check(d, d.cuvid->cuvidGetDecoderCaps(&caps), "cuvidGetDecoderCaps");
    if (!caps.bIsSupported)
      throw NvdecError(std::string(codec_name(m.codec)) + " " + std::to_string(depth) +
                       "-bit 4:2:0 is not supported by this GPU's NVDEC");
    if (fmt.coded_width > caps.nMaxWidth || fmt.coded_height > caps.nMaxHeight ||
        fmt.coded_width < caps.nMinWidth || fmt.coded_height < caps.nMinHeight ||
        (fmt.coded_width >> 4) * (fmt.coded_height >> 4) > caps.nMaxMBCount)
      throw NvdecError("coded size " + std::to_string(fmt.coded_width) + "x" + std::to_string(fmt.coded_height) +
                       " is outside this GPU's NVDEC limits (" + std::to_string(caps.nMinWidth) + "x" +
                       std::to_string(caps.nMinHeight) + " to " + std::to_string(caps.nMaxWidth) + "x" +
                       std::to_string(caps.nMaxHeight) + ")");
    const int width = fmt.display_area.right - fmt.display_area.left;
    const int height = fmt.display_area.bottom - fmt.display_area.top;
    if (width < 2 || height < 2 || fmt.display_area.left < 0 || fmt.display_area.top < 0 ||
        fmt.display_area.right > static_cast<int>(fmt.coded_width) ||
        fmt.display_area.bottom > static_cast<int>(fmt.coded_height))
      throw NvdecError("invalid display area in the sequence header");
    const bool same_format = m.decoder && fmt.coded_width == m.format.coded_width &&
                      fmt.coded_height == m.format.coded_height && fmt.bit_depth_luma_minus8 == m.format.bit_depth_luma_minus8 &&
                      width == m.display_width && height == m.display_height;
    // The stream's DPB needs, plus the pictures held back for display and one spare; the decoder takes at
    // most 32. A reused decoder must have as many.
    const int surfaces = std::min(32, fmt.min_num_decode_surfaces + m.display_delay + 1 + m.tuning.extra_decode_surfaces);
    const bool same = same_format && surfaces <= m.surfaces;
    if (!same) {
      // A new format (the first, or a resolution change): a decoder made for it. The parser has displayed
      // every picture of the old sequence by now, and they were converted into buffers of our own.
      m.destroy_decoder();
      CUVIDDECODECREATEINFO ci{};
      ci.CodecType = fmt.codec;
      ci.ChromaFormat = fmt.chroma_format;
      ci.OutputFormat = depth > 8 ? cudaVideoSurfaceFormat_P016 : cudaVideoSurfaceFormat_NV12;
      ci.bitDepthMinus8 = fmt.bit_depth_luma_minus8;
      ci.DeinterlaceMode = fmt.progressive_sequence ? cudaVideoDeinterlaceMode_Weave : cudaVideoDeinterlaceMode_Adaptive;
      ci.ulNumOutputSurfaces = static_cast<tcu_ulong>(m.tuning.output_surfaces);
      ci.ulCreationFlags = m.tuning.creation == NvdecTuning::Creation::cuvid  ? cudaVideoCreate_PreferCUVID
                           : m.tuning.creation == NvdecTuning::Creation::cuda ? cudaVideoCreate_PreferCUDA
                                                                              : cudaVideoCreate_Default;
      ci.ulNumDecodeSurfaces = static_cast<tcu_ulong>(surfaces);
      ci.vidLock = m.tuning.context_lock ? m.lock : nullptr;
      ci.ulWidth = fmt.coded_width;
      ci.ulHeight = fmt.coded_height;
      ci.ulMaxWidth = fmt.coded_width;
      ci.ulMaxHeight = fmt.coded_height;
      ci.display_area.left = static_cast<short>(fmt.display_area.left);
      ci.display_area.top = static_cast<short>(fmt.display_area.top);
      ci.display_area.right = static_cast<short>(fmt.display_area.right);
      ci.display_area.bottom = static_cast<short>(fmt.display_area.bottom);
      ci.ulTargetWidth = static_cast<tcu_ulong>(width);
      ci.ulTargetHeight = static_cast<tcu_ulong>(height);
      check(d, d.cuvid->cuvidCreateDecoder(&m.decoder, &ci), "cuvidCreateDecoder");
      m.format = fmt;
      m.surface_height = height;
      m.display_width = width;
      m.display_height = height;
      m.surfaces = surfaces;
    }
    if (!same || self.sequence_.count == 0) self.sequence_.count++;  // a reused session's first stream counts too
    self.sequence_.width = width;
    self.sequence_.height = height;
    self.sequence_.bit_depth = depth;
    self.sequence_.decode_surfaces = surfaces;
    self.sequence_.fps = fmt.frame_rate.numerator > 0 && fmt.frame_rate.denominator > 0
                             ? static_cast<double>(fmt.frame_rate.numerator) / fmt.frame_rate.denominator
                             : 0;
    return surfaces;
  }

  static void self_display(NvdecDecoder& self, const CUVIDPARSERDISPINFO& info) {
    auto& m = *self.impl_;
    const Driver& d = m.d;
    NvdecDecoder::Pending p;
    // The time of the packet that started this picture, handed back in display order (B-frames reordered).
    if (m.timestamps) p.pts = info.timestamp;
    p.width = self.sequence_.width;
    p.height = self.sequence_.height;
    const int bps = self.sequence_.bit_depth > 8 ? 2 : 1;
    p.bytes_per_sample = bps;
    std::optional<StepTimer> timer(std::in_place, self.costs_, &NvdecCosts::map);
    CUVIDGETDECODESTATUS status{};
    if (d.cuvid->cuvidGetDecodeStatus &&
        d.cuvid->cuvidGetDecodeStatus(m.decoder, info.picture_index, &status) == CUDA_SUCCESS &&
        (status.decodeStatus == cuvidDecodeStatus_Error || status.decodeStatus == cuvidDecodeStatus_Error_Concealed)) {
      p.error = status.decodeStatus == cuvidDecodeStatus_Error ? "NVDEC reported a decode error in this picture"
                                                               : "NVDEC concealed errors in this picture (corrupt data)";
      self.ready_.push_back(std::move(p));
      return;
    }
    CUVIDPROCPARAMS pp{};
    pp.progressive_frame = info.progressive_frame;
    pp.second_field = info.repeat_first_field + 1;
    pp.top_field_first = info.top_field_first;
    pp.unpaired_field = info.repeat_first_field < 0;
    pp.output_stream = m.stream;
    // Room for one more mapped picture (output_surfaces at once).
    check(d, m.release_surfaces(static_cast<std::size_t>(m.tuning.output_surfaces - 1)), "cuvidUnmapVideoFrame");
    CUdeviceptr surface = 0;
    unsigned int pitch = 0;
    check(d, d.cuvid->cuvidMapVideoFrame(m.decoder, info.picture_index, &surface, &pitch, &pp), "cuvidMapVideoFrame");
    const CUdeviceptr chroma = surface + static_cast<CUdeviceptr>(pitch) * static_cast<CUdeviceptr>((m.surface_height + 1) & ~1);
    timer.emplace(self.costs_, &NvdecCosts::copy);
    try {
      // Copied out as it is (tightly packed), so the surface can go back at once; the conversion into the
      // pipeline's layout happens when the frame is taken (pop), straight from this copy.
      const std::size_t row = static_cast<std::size_t>(p.width) * bps;
      const std::size_t luma_bytes = row * static_cast<std::size_t>(p.height);
      const std::size_t chroma_rows = static_cast<std::size_t>((p.height + 1) / 2);
      const std::size_t chroma_row = static_cast<std::size_t>((p.width + 1) / 2) * 2 * bps;
      p.bytes = luma_bytes + chroma_row * chroma_rows;
      p.pitch = std::max(row, chroma_row);
      p.buffer = m.take_buffer(p.pitch * (static_cast<std::size_t>(p.height) + chroma_rows));
      const CUdeviceptr dst = m.buffers[p.buffer].ptr;
      CUDA_MEMCPY2D copy{};
      copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.srcDevice = surface;
      copy.srcPitch = pitch;
      copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.dstDevice = dst;
      copy.dstPitch = p.pitch;
      copy.WidthInBytes = row;
      copy.Height = static_cast<std::size_t>(p.height);
      check(d, d.cu->cuMemcpy2DAsync(&copy, m.stream), "cuMemcpy2DAsync (luma)");
      copy.srcDevice = chroma;
      copy.dstDevice = dst + p.pitch * static_cast<std::size_t>(p.height);
      copy.WidthInBytes = chroma_row;
      copy.Height = chroma_rows;
      check(d, d.cu->cuMemcpy2DAsync(&copy, m.stream), "cuMemcpy2DAsync (chroma)");
      // The surface goes back to the decoder only once the copy that reads it is done: waited for now, or
      // seen done at a later picture (deferred_unmap).
      check(d, d.cu->cuEventRecord(m.buffers[p.buffer].copied, m.stream), "cuEventRecord (decoded picture)");
    } catch (...) {
      d.cuvid->cuvidUnmapVideoFrame(m.decoder, surface);
      throw;
    }
    m.mapped.push_back({surface, p.buffer});
    timer.emplace(self.costs_, &NvdecCosts::unmap);
    check(d, m.release_surfaces(m.tuning.deferred_unmap ? static_cast<std::size_t>(m.tuning.output_surfaces - 1) : 0),
          "cuvidUnmapVideoFrame");
    timer.reset();
    self.ready_.push_back(std::move(p));
  }
};

NvdecDecoder::NvdecDecoder(VideoCodec codec, int display_delay, NvdecTuning tuning) {
  const Driver& d = driver();
  if (!d.unavailable.empty()) throw NvdecError("NVDEC unavailable: " + d.unavailable);
  if (codec == VideoCodec::unknown) throw NvdecError("NVDEC: not an H.264 or HEVC stream");
  if (tuning.output_surfaces < 1 || tuning.output_surfaces > 8 || tuning.extra_decode_surfaces < 0)
    throw NvdecError("NVDEC tuning: 1 to 8 output surfaces and no negative extra decode surfaces");
  impl_ = std::make_unique<Impl>(d);
  impl_->codec = codec;
  impl_->display_delay = display_delay;
  impl_->tuning = tuning;
  ContextScope scope(d);
  try {
    check(d, d.cuvid->cuvidCtxLockCreate(&impl_->lock, d.context), "cuvidCtxLockCreate");
    check(d, d.cu->cuStreamCreate(&impl_->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(d, d.cu->cuStreamCreate(&impl_->convert_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    create_parser();
  } catch (...) {
    close();
    throw;
  }
}

NvdecDecoder::~NvdecDecoder() { close(); }

void NvdecDecoder::create_parser() {
  const Driver& d = impl_->d;
  CUVIDPARSERPARAMS pp{};
  pp.CodecType = cuvid_codec(impl_->codec);
  pp.ulMaxNumDecodeSurfaces = 1;  // the sequence callback tells the real number
  pp.ulMaxDisplayDelay = static_cast<unsigned>(impl_->display_delay);
  // Timestamps in ns, as fed (the parser only uses the rate for pictures whose packet had none).
  pp.ulClockRate = 1'000'000'000;
  pp.pUserData = this;
  pp.pfnSequenceCallback = &NvdecCallbacks::sequence;
  pp.pfnDecodePicture = &NvdecCallbacks::decode;
  pp.pfnDisplayPicture = &NvdecCallbacks::display;
  check(d, d.cuvid->cuvidCreateVideoParser(&impl_->parser, &pp), "cuvidCreateVideoParser");
}

void NvdecDecoder::restart(int display_delay) {
  Impl& m = *impl_;
  if (!ready_.empty()) throw NvdecError("restart with decoded frames still queued");
  m.display_delay = display_delay;
  ContextScope scope(m.d);
  if (m.parser) m.d.cuvid->cuvidDestroyVideoParser(m.parser);
  m.parser = nullptr;
  m.error.clear();
  sequence_ = {};
  create_parser();
}

VideoCodec NvdecDecoder::codec() const noexcept { return impl_->codec; }

namespace {
// Sessions whose stream ended cleanly, kept for the next input of the same codec (a directory job opens one
// input after another: each would otherwise create a decoder, whose cost stalls the other sessions too).
struct IdleSessions {
  std::mutex mu;
  std::vector<std::unique_ptr<NvdecDecoder>> idle;
};
IdleSessions& idle_sessions() {
  static auto* sessions = new IdleSessions;  // never destroyed: sessions must not outlive the driver at exit
  return *sessions;
}
constexpr std::size_t kMaxIdleSessions = 64;
}  // namespace

std::unique_ptr<NvdecDecoder> NvdecDecoder::take(VideoCodec codec, int display_delay) {
  std::unique_ptr<NvdecDecoder> session;
  {
    IdleSessions& pool = idle_sessions();
    std::lock_guard lock(pool.mu);
    for (auto it = pool.idle.begin(); it != pool.idle.end(); ++it)
      if ((*it)->codec() == codec) {
        session = std::move(*it);
        pool.idle.erase(it);
        break;
      }
  }
  if (!session) return std::make_unique<NvdecDecoder>(codec, display_delay);
  if (session->impl_->display_delay != display_delay) session->restart(display_delay);
  return session;
}

void NvdecDecoder::give_back(std::unique_ptr<NvdecDecoder> session) noexcept {
  if (!session) return;
  try {
    session->restart(session->impl_->display_delay);
  } catch (const std::exception&) {
    return;  // not reusable: destroyed here
  }
  IdleSessions& pool = idle_sessions();
  std::lock_guard lock(pool.mu);
  if (pool.idle.size() >= kMaxIdleSessions) pool.idle.erase(pool.idle.begin());
  pool.idle.push_back(std::move(session));
}

void NvdecDecoder::close() noexcept {
  if (!impl_) return;
  Impl& m = *impl_;
  const Driver& d = m.d;
  ContextScope scope(d);
  if (m.parser) d.cuvid->cuvidDestroyVideoParser(m.parser);
  m.parser = nullptr;
  m.destroy_decoder();
  // Work still queued reads the buffers: freed once it is done (close is not on any frame's path).
  if (m.convert_stream) d.cu->cuStreamSynchronize(m.convert_stream);
  if (m.stream) d.cu->cuStreamSynchronize(m.stream);
  for (auto& b : m.buffers) {
    if (b.ptr) d.cu->cuMemFree(b.ptr);
    if (b.converted) d.cu->cuEventDestroy(b.converted);
    if (b.copied) d.cu->cuEventDestroy(b.copied);
  }
  if (m.scratch) d.cu->cuMemFree(m.scratch);
  m.buffers.clear();
  for (CUstream* st : {&m.stream, &m.convert_stream}) {
    if (*st) d.cu->cuStreamDestroy(*st);
    *st = nullptr;
  }
  if (m.lock) d.cuvid->cuvidCtxLockDestroy(m.lock);
  m.lock = nullptr;
  impl_.reset();
}

void NvdecDecoder::feed(const std::uint8_t* data, std::size_t size, std::optional<std::int64_t> pts_ns,
                        bool whole_picture) {
  Impl& m = *impl_;
  if (!m.error.empty()) throw NvdecError(m.error);
  if (size == 0) return;
  std::optional<StepTimer> timer(std::in_place, costs_, &NvdecCosts::context);
  ContextScope scope(m.d);
  timer.emplace(costs_, &NvdecCosts::feed);
  CUVIDSOURCEDATAPACKET packet{};
  packet.payload = data;
  packet.payload_size = static_cast<tcu_ulong>(size);
  if (whole_picture) packet.flags |= CUVID_PKT_ENDOFPICTURE;
  if (pts_ns) {
    packet.flags |= CUVID_PKT_TIMESTAMP;
    packet.timestamp = *pts_ns;
    m.timestamps = true;
  }
  CUresult r;
  {
    FeedTurn turn;
    r = m.d.cuvid->cuvidParseVideoData(m.parser, &packet);
  }
  if (!m.error.empty()) throw NvdecError(m.error);
  if (r != CUDA_SUCCESS) throw NvdecError("cuvidParseVideoData failed: " + cu_error(m.d, r));
}

void NvdecDecoder::limit_concurrent_feeds(int threads) noexcept { FeedGate::instance().set_limit(threads); }

void NvdecDecoder::finish() {
  Impl& m = *impl_;
  if (!m.error.empty()) throw NvdecError(m.error);
  ContextScope scope(m.d);
  CUVIDSOURCEDATAPACKET packet{};
  packet.flags = CUVID_PKT_ENDOFSTREAM;
  CUresult r;
  {
    FeedTurn turn;
    r = m.d.cuvid->cuvidParseVideoData(m.parser, &packet);
  }
  if (!m.error.empty()) throw NvdecError(m.error);
  if (r != CUDA_SUCCESS) throw NvdecError("cuvidParseVideoData (end of stream) failed: " + cu_error(m.d, r));
}

NvdecFrame NvdecDecoder::pop_to_host(std::uint8_t* dst, std::size_t capacity, const NvdecOutput& output) {
  NvdecFrame f = pop(dst, capacity, output, /*to_device=*/false);
  if (f.error.empty()) check(impl_->d, impl_->d.cu->cuStreamSynchronize(impl_->convert_stream), "cuStreamSynchronize");
  return f;
}

NvdecFrame NvdecDecoder::pop_to_device(std::uint8_t* dst_device, std::size_t capacity, const NvdecOutput& output,
                                       CUevent_st* wait_before, CUevent_st* done) {
  Impl& m = *impl_;
  // The runtime API's calls (the loader has no cuStreamWaitEvent): the session's stream lives in the primary
  // context, the runtime's own.
  if (wait_before && !ready_.empty() && ready_.front().error.empty())
    gpu::stream_wait_event(m.convert_stream, wait_before);
  NvdecFrame f = pop(dst_device, capacity, output, /*to_device=*/true);
  if (f.error.empty() && done) gpu::event_record(done, m.convert_stream);
  return f;
}

NvdecFrame NvdecDecoder::pop(std::uint8_t* dst, std::size_t capacity, const NvdecOutput& output, bool to_device) {
  if (ready_.empty()) throw NvdecError("no decoded frame is queued");
  Impl& m = *impl_;
  Pending p = std::move(ready_.front());
  ready_.pop_front();
  StepTimer timer(costs_, &NvdecCosts::pop);
  NvdecFrame f;
  f.width = p.width;
  f.height = p.height;
  f.bytes_per_sample = output.native ? p.bytes_per_sample : 1;
  f.pts_ns = p.pts;
  f.error = p.error;
  if (!p.error.empty()) return f;
  Impl::Buffer& held = m.buffers[p.buffer];
  held.busy = false;
  ContextScope scope(m.d);
  gpu::stream_wait_event(m.convert_stream, held.copied);  // the copy off the surface (maybe still running)
  // Free for the next picture once the work below has read it (take_buffer looks at the event).
  const auto converted = [&] {
    check(m.d, m.d.cu->cuEventRecord(held.converted, m.convert_stream), "cuEventRecord");
    held.converting = true;
  };
  const std::size_t rows = static_cast<std::size_t>(p.height);
  const std::size_t row = static_cast<std::size_t>(p.width) * p.bytes_per_sample;
  const std::size_t chroma_rows = static_cast<std::size_t>((p.height + 1) / 2);
  const std::size_t chroma_row = static_cast<std::size_t>((p.width + 1) / 2) * 2 * p.bytes_per_sample;
  if (output.native) {
    if (output.quarter_turns != 0 || output.fit != Fit::stretch)
      throw NvdecError("native output is the surface as decoded: it is neither turned nor fitted");
    if (p.bytes > capacity)
      throw NvdecError("a decoded frame of " + std::to_string(p.bytes) + " bytes does not fit " + std::to_string(capacity));
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = held.ptr;
    copy.srcPitch = p.pitch;
    copy.dstMemoryType = to_device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (to_device) copy.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
    else copy.dstHost = dst;
    copy.dstPitch = row;
    copy.WidthInBytes = row;
    copy.Height = rows;
    check(m.d, m.d.cu->cuMemcpy2DAsync(&copy, m.convert_stream), "cuMemcpy2DAsync (luma)");
    copy.srcDevice = held.ptr + p.pitch * rows;
    if (to_device) copy.dstDevice = reinterpret_cast<CUdeviceptr>(dst + row * rows);
    else copy.dstHost = dst + row * rows;
    copy.dstPitch = chroma_row;
    copy.WidthInBytes = chroma_row;
    copy.Height = chroma_rows;
    check(m.d, m.d.cu->cuMemcpy2DAsync(&copy, m.convert_stream), "cuMemcpy2DAsync (chroma)");
    converted();
    f.bytes = p.bytes;
    return f;
  }
  kernels::Nv12ConvertParams cp;
  cp.in_width = p.width;
  cp.in_height = p.height;
  cp.in_pitch = p.pitch;
  cp.in_bytes_per_sample = p.bytes_per_sample;
  cp.out_format = output.format;
  cp.out_width = output.width;
  cp.out_height = output.height;
  // Upright, then placed: the shown part of the upright picture and where it goes (black around it).
  cp.quarter_turns = output.quarter_turns & 3;
  if (cp.quarter_turns != 0 || output.fit != Fit::stretch) {
    const bool sideways = (cp.quarter_turns & 1) != 0;
    const bool subsampled = output.format == PixelFormat::nv12 || output.format == PixelFormat::i420;
    const FitPlan plan = plan_fit(sideways ? p.height : p.width, sideways ? p.width : p.height, output.width,
                                  output.height, output.fit, subsampled ? 2 : 1, 2);
    cp.src_x = plan.source.x, cp.src_y = plan.source.y, cp.src_w = plan.source.width, cp.src_h = plan.source.height;
    cp.dst_x = plan.dest.x, cp.dst_y = plan.dest.y, cp.dst_w = plan.dest.width, cp.dst_h = plan.dest.height;
  }
  f.bytes = image_bytes(cp.out_format, cp.out_width, cp.out_height);
  if (f.bytes > capacity)
    throw NvdecError("a converted frame of " + std::to_string(f.bytes) + " bytes does not fit " + std::to_string(capacity));
  std::uint8_t* out = dst;
  if (!to_device) {
    if (m.scratch_capacity < f.bytes) {  // grows once per output size, then is reused
      if (m.scratch) m.d.cu->cuMemFree(m.scratch);
      m.scratch = 0;
      m.scratch_capacity = 0;
      check(m.d, m.d.cu->cuMemAlloc(&m.scratch, f.bytes), "cuMemAlloc (converted frame)");
      m.scratch_capacity = f.bytes;
    }
    out = reinterpret_cast<std::uint8_t*>(m.scratch);
  }
  try {
    kernels::nv12_convert_gpu(cp, reinterpret_cast<const std::uint8_t*>(held.ptr),
                              reinterpret_cast<const std::uint8_t*>(held.ptr + p.pitch * rows), out, m.convert_stream);
  } catch (const std::exception& e) {
    throw NvdecError(e.what());
  }
  converted();
  if (!to_device) check(m.d, m.d.cu->cuMemcpyDtoHAsync(dst, m.scratch, f.bytes, m.convert_stream), "cuMemcpyDtoHAsync");
  return f;
}

}  // namespace sluice

#pragma once
// One NVDEC decoding session: Annex-B bytes in (H.264 or HEVC, fed NAL unit by NAL unit), decoded pictures out,
// copied off the decoder's surface at once and converted on the GPU into the caller's frame layout when taken.
//
// The driver's libcuda.so.1 and libnvcuvid.so.1 are loaded at run time (Debian's libffmpeg-nvenc-dev loader
// headers): nothing links against them, so a binary without a driver starts and nvdec_unavailable_reason()
// says why NVDEC cannot be used. Work runs in the device's primary context, the one the CUDA runtime API of
// the pipeline uses, on this session's own stream.
//
// The CUVID parser splits the stream into pictures and reads the sequence headers (size, bit depth, the VUI's
// frame rate). Per sequence header the decoder is (re)created after the capability check (cuvidGetDecoderCaps)
// with min_num_decode_surfaces + 5 surfaces (4 held back for display, 1 spare), so a mid-stream resolution
// change works. A picture to display is checked (cuvidGetDecodeStatus), mapped, copied into a buffer of this
// session's own, and unmapped once the copy finished; the surface then goes back to the decoder. Those frames
// queue until popped.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "media/nvdec/annexb.hpp"
#include "runtime/format.hpp"
#include "runtime/frame_reader.hpp"  // Fit

struct CUevent_st;

namespace sluice {

// Empty when NVDEC can be used on this host (driver libraries, a device, a context); else why not, e.g.
// "cannot load libnvcuvid.so.1" or "no CUDA device". Loads the libraries on first use; never throws.
std::string nvdec_unavailable_reason();
// The pixel surface a codec/bit depth decodes to on this GPU, as cuvidGetDecoderCaps reports it: empty when
// supported, else why not (e.g. "HEVC 4:2:0 10-bit is not supported by this GPU's NVDEC").
std::string nvdec_codec_unsupported_reason(VideoCodec codec, int bit_depth);

// Pictures the parser holds back before displaying one. Files: 4, so mapping a picture (which waits for its
// decode) overlaps the decoding of the next ones (nvcuvid.h recommends 2..4). Live streams: 0, each picture out
// as soon as it is decoded (4 would hold every camera frame back 133 ms at 30 fps).
inline constexpr int kNvdecFileDisplayDelay = 4;
inline constexpr int kNvdecLiveDisplayDelay = 0;

struct NvdecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What decoded pictures become: `native` keeps the surface (NV12, or P016 for more than 8 bits: 16-bit
// little-endian samples, the value in the high bits), tightly packed at the picture's display size; otherwise
// one frame of `format` at width x height (kernels/nv12_convert.hpp), the picture turned upright by
// `quarter_turns` clockwise and placed as `fit` says (media/frame_fit.hpp: letterbox bars black), as the CPU
// decoder places it.
struct NvdecOutput {
  bool native = false;
  PixelFormat format = PixelFormat::bgr8;
  int width = 0, height = 0;
  Fit fit = Fit::stretch;
  int quarter_turns = 0;
};

struct NvdecSequence {
  int width = 0, height = 0;  // display size
  int bit_depth = 8;
  double fps = 0;             // from the VUI timing info; 0 when the stream carries none
  int decode_surfaces = 0;
  int count = 0;              // sequence headers with a new format seen so far (2+: a resolution change)
};

// One decoded picture taken off the queue.
struct NvdecFrame {
  int width = 0, height = 0;   // the picture's display size
  int bytes_per_sample = 1;    // native output: 2 for P016
  std::size_t bytes = 0;       // bytes written to the destination
  std::optional<std::int64_t> pts_ns;  // the presentation time fed with its packet; none when none was fed
  std::string error;           // non-empty: the decoder reported the picture corrupt; nothing was written
};

// Where a session's host time goes, per step (sluice_nvdec_bench prints it; off unless asked for): CPU time of
// the calling thread and wall time, in ns, summed over the calls.
struct NvdecCosts {
  struct Step {
    std::int64_t cpu_ns = 0, wall_ns = 0, calls = 0;
  };
  Step context; // making the session's context current for a feed
  Step feed;    // cuvidParseVideoData as a whole, the callbacks below included
  Step decode;  // cuvidDecodePicture (in the parser's callback)
  Step map;     // cuvidGetDecodeStatus + cuvidMapVideoFrame (waits for the picture's decode)
  Step copy;    // copy off the surface and the host's wait for it
  Step unmap;   // cuvidUnmapVideoFrame (deferred: with the wait for copies still running)
  Step pop;     // conversion into the caller's layout (enqueued)
};

// How a session's decoder is made and driven. The defaults are what the readers use; sluice_nvdec_bench varies
// them to measure what each costs the host.
struct NvdecTuning {
  enum class Creation { cuvid, cuda, driver_default };  // ulCreationFlags: PreferCUVID, PreferCUDA, Default
  Creation creation = Creation::cuvid;
  int extra_decode_surfaces = 0;  // beyond the stream's DPB, the display delay and one spare
  int output_surfaces = 2;        // pictures mapped at once (ulNumOutputSurfaces, 1..8)
  // The decoder takes a cuvidCtxLock (vidLock) around its calls. Off: every calling thread makes the primary
  // context current itself (ContextScope), so the lock only serialises; 96 paced 1080p30 sources on an H100
  // decoded 24.2 frames/s each without it and 18.1-18.3 with it (bench/results/h100-2026-12-08-nvdec-knobs).
  bool context_lock = false;
  // false: the thread waits for each picture's copy off its surface and unmaps it at once. true: the copy is
  // only enqueued, and the surface unmapped once the copy is done, seen at a later picture (up to
  // output_surfaces - 1 stay mapped), so no thread sleeps on a copy.
  bool deferred_unmap = false;
};

class NvdecDecoder {
 public:
  // Throws NvdecError when NVDEC is unavailable or the session cannot be created.
  explicit NvdecDecoder(VideoCodec codec, int display_delay = kNvdecFileDisplayDelay, NvdecTuning tuning = {});
  ~NvdecDecoder();
  NvdecDecoder(const NvdecDecoder&) = delete;
  NvdecDecoder& operator=(const NvdecDecoder&) = delete;

  // Parses and decodes `size` bytes (whole NAL units); pictures ready to display queue up. Throws NvdecError
  // when the stream cannot be decoded (unsupported format, a parser or decoder failure). `pts_ns`: the
  // container's presentation time of the access unit these bytes start (a demuxed packet); the picture it
  // starts carries it out (NvdecFrame::pts_ns), in display order. `whole_picture`: the bytes are exactly one
  // access unit (a demuxed packet), so its picture is decoded now; otherwise the parser waits for the next
  // picture's first bytes to know this one is complete (a frame later: 33 ms of a 30 fps camera).
  void feed(const std::uint8_t* data, std::size_t size, std::optional<std::int64_t> pts_ns = std::nullopt,
            bool whole_picture = false);
  // End of stream: the pictures still held for reordering are decoded and queued.
  void finish();

  bool has_frame() const noexcept { return !ready_.empty(); }
  std::size_t queued() const noexcept { return ready_.size(); }
  // Ready for another stream of the same codec: the parser is made again and the sequence forgotten, while
  // the decoder, its surfaces and the held buffers stay, so a stream of the same format reuses them. Throws
  // NvdecError while frames are still queued.
  void restart(int display_delay);
  VideoCodec codec() const noexcept;
  // A session for `codec`: an idle one given back earlier (restarted), else a new one. Throws like the
  // constructor.
  static std::unique_ptr<NvdecDecoder> take(VideoCodec codec, int display_delay = kNvdecFileDisplayDelay);
  // Keeps a session whose stream ended (all frames popped) for take(); one that cannot restart is destroyed.
  static void give_back(std::unique_ptr<NvdecDecoder> session) noexcept;

  // Takes the oldest frame: converts it (or copies it, native) into host memory `dst` (capacity bytes; pinned
  // memory makes the copy a DMA) and waits for that on this session's stream. A frame the decoder reported
  // corrupt comes back with its error and nothing written. Throws NvdecError when the queue is empty, the
  // frame does not fit or the GPU fails.
  NvdecFrame pop_to_host(std::uint8_t* dst, std::size_t capacity, const NvdecOutput& output);
  // The same into device memory, without waiting on the host (the buffer/event protocol): this session's
  // stream first waits on `wait_before` (when given: the last reader of `dst_device` may still be copying it
  // out), enqueues the work and records `done` after it. Frames stay on the GPU: only the compressed bytes
  // crossed PCIe.
  NvdecFrame pop_to_device(std::uint8_t* dst_device, std::size_t capacity, const NvdecOutput& output,
                           CUevent_st* wait_before = nullptr, CUevent_st* done = nullptr);
  // At most `threads` threads of the process inside the parser (and the decode and map calls it makes) at once,
  // the others wait their turn; 0: no limit (the default). Fewer threads contending for the driver's locks.
  static void limit_concurrent_feeds(int threads) noexcept;
  // Accumulates this session's step costs into `costs` from now on (nullptr: stops); the caller keeps it alive.
  void measure_costs(NvdecCosts* costs) noexcept { costs_ = costs; }
  // The current sequence (all zero before the first sequence header).
  const NvdecSequence& sequence() const noexcept { return sequence_; }

 private:
  void close() noexcept;
  void create_parser();
  NvdecFrame pop(std::uint8_t* dst, std::size_t capacity, const NvdecOutput& output, bool to_device);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  struct Pending {
    std::size_t buffer = 0;  // index into buffers
    int width = 0, height = 0, bytes_per_sample = 1;
    std::size_t bytes = 0;   // native, tightly packed
    std::size_t pitch = 0;   // of the held copy (luma and chroma rows alike)
    std::optional<std::int64_t> pts;
    std::string error;
  };
  std::deque<Pending> ready_;
  NvdecSequence sequence_;
  NvdecCosts* costs_ = nullptr;
  friend struct NvdecCallbacks;
};

}  // namespace sluice

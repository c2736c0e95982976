#pragma once
// Where a source's frames come from: one opened input (a video file, an image, an image sequence, a camera,
// a network stream, a test pattern) that decodes frame after frame into memory the caller owns.
//
// Readers are made by factories registered per input kind, each next to its code (SLUICE_REGISTER_READERS): the
// test pattern (stages/testsrc_reader.cpp), the GPU decoders (media/nvdec, media/nvjpeg), files and streams
// (media/video.cpp: FFmpeg, every build) and images and cameras (media/media.cpp: OpenCV, left out of GPU-host
// builds, which then report "needs OpenCV ..." for them). Which kind a URI is: runtime/source_kind.hpp.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/format.hpp"
#include "runtime/gpu.hpp"

namespace sluice {

// A frame's destination: one item of the pipeline's frame layout (image_bytes(pixel, width, height) bytes).
// Readers scale (as ReaderOptions::fit says) and convert whatever they decode into it.
//
// A device target (`device`: data is GPU memory) is offered only to a reader whose writes_device_memory()
// says it decodes on the GPU. The buffer/event protocol holds for it as for batches: the reader's stream
// waits on `reusable` (when set: whoever read the slot last may still be copying it out) before writing, and
// records `written` after the work that fills it, without waiting for that work on the host.
struct FrameTarget {
  std::byte* data = nullptr;
  int width = 0, height = 0;
  PixelFormat pixel = PixelFormat::bgr8;
  bool device = false;
  gpu::EventHandle reusable = nullptr, written = nullptr;
};

enum class InputKind : std::uint8_t { file, image, image_sequence, camera, stream, testsrc };
std::string_view to_string(InputKind k) noexcept;
// Cameras and streams are live: they reconnect after errors and drop the oldest frames when the pipeline
// falls behind. Files, images and sequences end with their own end of stream and are never dropped.
constexpr bool is_live(InputKind k) noexcept { return k == InputKind::camera || k == InputKind::stream; }

// What a reader knows about its input once opened.
struct InputInfo {
  std::string uri;
  InputKind kind = InputKind::file;
  std::int64_t frames_total = -1;  // from the container or the file list; -1 when unknown (live, some files)
  double fps = 0;                  // native rate when known, else 0
  int width = 0, height = 0;       // native size when known
  std::string backend;             // e.g. "FFMPEG", "V4L2", "testsrc"
};

// How a frame of another aspect ratio fills the target: stretch (both axes scaled on their own), letterbox (the
// whole frame, scaled to fit, centred on black bars), crop (the centre of the frame, scaled to cover it).
enum class Fit : std::uint8_t { stretch, letterbox, crop };
// Inline: sluicectl checks a job entry's `fit` without the engine.
inline std::string_view to_string(Fit f) noexcept {
  switch (f) {
    case Fit::stretch: return "stretch";
    case Fit::letterbox: return "letterbox";
    case Fit::crop: return "crop";
  }
  return "?";
}
inline std::optional<Fit> parse_fit(std::string_view s) noexcept {
  for (Fit f : {Fit::stretch, Fit::letterbox, Fit::crop})
    if (to_string(f) == s) return f;
  return std::nullopt;
}

// Which decoder reads an input a GPU decoder can take: automatic uses the GPU decoder where the codec, the input
// and the GPU allow, else the CPU decoder (saying why, once); gpu only the GPU decoder (the input fails with its
// reason when it cannot); cpu never it.
enum class DecoderChoice : std::uint8_t { automatic, gpu, cpu };
// Inline: sluicectl checks a job entry's `decoder` without the engine.
constexpr std::string_view to_string(DecoderChoice d) noexcept {
  switch (d) {
    case DecoderChoice::automatic: return "auto";
    case DecoderChoice::gpu: return "gpu";
    case DecoderChoice::cpu: return "cpu";
  }
  return "?";
}
inline std::optional<DecoderChoice> parse_decoder_choice(std::string_view s) noexcept {
  for (DecoderChoice d : {DecoderChoice::automatic, DecoderChoice::gpu, DecoderChoice::cpu})
    if (to_string(d) == s) return d;
  return std::nullopt;
}

struct ReaderOptions {
  Fit fit = Fit::stretch;
  // Cameras: the mode to request; fourcc e.g. "MJPG", "YUYV" (empty: the driver's). With width/height 0,
  // OpenCV's V4L2 backend asks for 640x480 at 30 fps; the decode stage passes its own frame size.
  int width = 0, height = 0;
  double fps = 0;
  std::string fourcc;
  // Video files and streams: libavcodec's decoding threads per source; 0 = one per core, up to 16 for files
  // and 4 for streams (slice threads only there: a frame thread holds a frame back, which is latency).
  int codec_threads = 0;
  // Network streams and http(s):// file inputs: how long opening and one read may block before they count as
  // failed.
  double open_timeout_s = 10, read_timeout_s = 5;
  // http(s):// file inputs (a job's): at most this many bytes are read from the server (0: no limit).
  std::int64_t url_max_bytes = std::int64_t{4} << 30;
  // rtsp:// streams: RTP interleaved in the RTSP connection (tcp: no loss, the default) or over UDP (udp: lower
  // latency; lost packets fail the pictures they damage).
  bool rtsp_over_udp = false;
  // Test patterns (testsrc:PATTERN): frames (0 = endless), rate (0 = as fast as possible), seed.
  std::uint64_t frames = 0;
  std::uint64_t seed = 1;
  bool animate = true;
  // Inputs a GPU decoder can read (ReaderRegistry::open applies it, once for every reader).
  DecoderChoice decoder = DecoderChoice::automatic;
  // Set by the source set when its batches live in device memory: a GPU decoder may then hand frames over in
  // device memory (FrameTarget::device) instead of copying them to the host.
  bool device_frames = false;
};

// frame: decoded into the target. failed: this one frame could not be decoded (`why` says why; the decoder
// reported it corrupt) and the input goes on. end: no more frames (files). error: the input cannot go on.
enum class ReadStatus : std::uint8_t { frame, end, error, failed };

class FrameReader {
 public:
  virtual ~FrameReader() = default;
  // Decodes the next frame into `target`. `end`: the input has no more frames (files); `error`: `why` says
  // what went wrong (a corrupt packet, a camera unplugged, a stream cut).
  virtual ReadStatus read(const FrameTarget& target, std::string& why) = 0;
  virtual const InputInfo& info() const = 0;
  // The presentation time of the frame the last read() returned, in ns on the input's own timeline (the
  // container's timestamps, variable frame rates included); none when the reader has no clock, and the
  // source numbers frames at the native rate instead.
  virtual std::optional<std::int64_t> pts_ns() const { return std::nullopt; }
  // When the coded picture of the frame the last read() returned arrived (steady clock, ns): live network
  // streams, so their latency counts from the network, demuxing and decoding included (runtime/arrival_times.hpp).
  // None: the frame counts from when read() returned it.
  virtual std::optional<std::int64_t> arrived_ns() const { return std::nullopt; }
  // True when this reader decodes on the GPU and takes device targets (ReaderOptions::device_frames was set):
  // its frames then never cross PCIe raw.
  virtual bool writes_device_memory() const { return false; }
  // After read() returned error: whether that failure may pass if the input is tried again later (a remote
  // file cut off by a lost connection or a deadline), rather than lie in the input itself.
  virtual bool failed_transiently() const { return false; }
};

// Thrown by a factory that cannot open its input; the message is the reason (shown per source). `transient`:
// the failure may pass if the input is tried again later (a remote file's server refused the connection, timed
// out or answered HTTP 5xx, 408 or 429), rather than lie in the input itself.
struct InputError : std::runtime_error {
  explicit InputError(const std::string& what, bool transient_failure = false)
      : std::runtime_error(what), transient(transient_failure) {}
  bool transient = false;
};

// A reader on the CPU: opens its input or throws InputError.
using ReaderFactory = std::function<std::unique_ptr<FrameReader>(const std::string& uri, const ReaderOptions&)>;
// A reader on a GPU decoder (NVDEC, nvJPEG): returns nullptr with `why` set when it does not serve this input (no
// GPU, a codec or option it cannot do); the kind's CPU reader then opens it. It never sees decoder: cpu, and
// never has to refuse for decoder: gpu (ReaderRegistry::open does both).
using GpuReaderFactory =
    std::function<std::unique_ptr<FrameReader>(const std::string& uri, const ReaderOptions&, std::string& why)>;

// Factories per input kind; filled while the program starts (SLUICE_REGISTER_READERS), read afterwards.
class ReaderRegistry {
 public:
  // The program's registry: every registration collected by SLUICE_REGISTER_READERS is in it.
  static ReaderRegistry& global();
  void add(InputKind kind, ReaderFactory factory);  // the kind's CPU reader; replaces an earlier one
  void add_gpu(InputKind kind, GpuReaderFactory factory);  // the kind's GPU reader, tried first; replaces
  // A GPU reader for file and image inputs whose extension (lower case, with the dot) is one of `extensions`,
  // tried instead of the kind's GPU reader (Annex-B streams, JPEGs); replaces earlier ones.
  void add_gpu_for_extensions(const std::vector<std::string>& extensions, GpuReaderFactory factory);
  bool has(InputKind kind) const;  // a CPU reader
  // Opens `uri` as `kind`: the GPU reader first unless options.decoder is cpu; when it declines, the CPU reader
  // (the reason logged once), or with decoder: gpu InputError("'URI': decoder: gpu, but WHY"). Throws InputError
  // naming the URI and the reason (or the missing library). `*declined` (if given) gets why the GPU reader was
  // passed over ("decoder: cpu", "NVDEC unavailable: ...").
  std::unique_ptr<FrameReader> open(InputKind kind, const std::string& uri, const ReaderOptions& options,
                                    std::string* declined = nullptr) const;

 private:
  GpuReaderFactory gpu_reader_for(InputKind kind, const std::string& uri) const;  // under mu_

  mutable std::mutex mu_;
  std::map<InputKind, ReaderFactory> factories_;
  std::map<InputKind, GpuReaderFactory> gpu_factories_;
  std::map<std::string, GpuReaderFactory> gpu_by_extension_;
  mutable std::set<std::string> fallbacks_logged_;  // reasons already logged (once each)
};

// Readers register themselves next to their code: after the function that adds them,
//   SLUICE_REGISTER_READERS(register_video_readers);   // void register_video_readers(ReaderRegistry&)
// runs it on the global registry when that is first used. Nothing else names such a file, so CMakeLists.txt
// links the libraries holding them whole (sluice_sources, sluice_video, sluice_media).
struct ReaderRegistrar {
  explicit ReaderRegistrar(void (*add)(ReaderRegistry&));
};

}  // namespace sluice

#define SLUICE_REGISTER_READERS(add) \
  static const ::sluice::ReaderRegistrar sluice_reader_registrar_##add { add }

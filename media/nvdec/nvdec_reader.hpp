#pragma once
// The FrameReader over one NVDEC session, fed from any source of coded H.264/HEVC bytes: an Annex-B
// elementary file split into NAL units (media/nvdec/annexb_reader.cpp) or the packets of a container demuxed
// by libavformat in Annex-B mode (media/nvdec/container_reader.cpp), with the container's presentation times.
//
// Frames go to host targets (converted on the GPU, one copy down) or, when the source set offers device
// targets (ReaderOptions::device_frames), stay on the GPU under the buffer/event protocol (FrameTarget).
// Built with CUDA only.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "media/nvdec/annexb.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {

// Whole NAL units: one access unit (a demuxed packet) or a run of NAL units, with the presentation time of the
// access unit they start when the source knows it.
struct CodedChunk {
  std::span<const std::uint8_t> bytes;
  std::optional<std::int64_t> pts_ns;
  bool keyframe = false;  // starts an IDR/IRAP access unit (the container says; Annex-B files: never set)
  bool damaged = false;   // the demuxer flagged the packet corrupt (data lost in transit)
  bool whole_picture = false;  // exactly one access unit (a demuxed packet; Annex-B files feed NAL units)
};

class CodedSource {
 public:
  virtual ~CodedSource() = default;
  virtual VideoCodec codec() const = 0;
  // The next chunk (valid until the next call); false at the end. Throws std::exception naming what failed.
  virtual bool next(CodedChunk& chunk) = 0;
  virtual std::uint64_t bytes_read() const = 0;
  // Why the bytes ended early (a read that failed, an end the container shows to be early); a file input with
  // one fails once its pictures are out. Empty when they simply ended.
  virtual std::string end_detail() const { return {}; }
};

struct NvdecReaderOptions {
  bool device_frames = false;  // ReaderOptions::device_frames
  // A live stream: no display delay (each picture out once decoded), and after a damaged packet or a picture
  // the decoder reported corrupt, every picture until the next keyframe fails ("no keyframe since ...": its
  // references are not to be trusted) instead of going out with smeared blocks.
  bool live = false;
  std::string backend;         // InputInfo::backend, e.g. "NVDEC H.264 (mov,mp4,...)"
  // How frames are placed in their targets (ReaderOptions::fit), and the clockwise degrees (0, 90, 180, 270)
  // that turn the stored picture upright (the container's display matrix): on the GPU, as the CPU decoder does.
  Fit fit = Fit::stretch;
  int rotation = 0;
  // What the container says (0 / -1: the stream's own VUI rate; unknown count).
  double fps = 0;
  std::int64_t frames_total = -1;
  // Pictures that must come out (decoded or failed) before the end counts as complete; fewer: the input
  // ends with "ended after N of M frames (truncated or corrupt)". 0: no check.
  std::int64_t frames_required = 0;
};

#if SLUICE_WITH_CUDA
// Decodes up to the first picture, so a stream NVDEC cannot take fails here: throws InputError (the source's
// own reason) or NvdecError (the decoder's).
std::unique_ptr<FrameReader> open_nvdec_reader(const std::string& uri, std::unique_ptr<CodedSource> source,
                                               const NvdecReaderOptions& options);
#endif

}  // namespace sluice

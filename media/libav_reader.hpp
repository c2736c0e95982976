#pragma once
// Frame readers for video files and network streams on FFmpeg's libraries: the shared demux layer
// (media/demux.hpp), libavcodec decoding on the CPU (frame and slice threads per source:
// ReaderOptions::codec_threads) and libswscale into the target (media/frame_scaler.hpp: turned upright as
// the stream's display matrix says, placed per ReaderOptions::fit, converted to the target's format).
//
// Timestamps are the decoder's best-effort presentation times from the container, in ns (pts_ns()): a
// variable-frame-rate file keeps its own timing, and every frame it holds is read. frames_total is the
// frame count its container states (MP4/MOV's sample table), else -1: an estimate (duration x rate, AVI's header)
// overshoots a file with dropped frames.
//
// Files: a packet the decoder rejects is skipped (counted in the reason should the file come up short); a
// file that ends well before the count its container states (beyond truncation_tolerance) is an error
// "ended after N of M frames (truncated or corrupt...)"; one from which no frame decodes at all is an error.
// Streams: a read that fails or finds no data within read_timeout_s is an error (the source reconnects). A
// picture the decoder reports damaged (concealed, decoded without its references) is ReadStatus::failed with
// the reason, and so is every picture after damage (that one, a lost RTP packet, a packet the container
// flagged) up to the next keyframe or intra picture: "no keyframe since ...: its references are lost".
// Pictures whose packets were all lost never come out of the decoder; the lost RTP packets are named in that
// reason.
// read() never throws.
#include <memory>
#include <string>

#include "runtime/frame_reader.hpp"

namespace sluice {

std::unique_ptr<FrameReader> open_libav_file_reader(const std::string& uri, const ReaderOptions& options);
std::unique_ptr<FrameReader> open_libav_stream_reader(const std::string& uri, const ReaderOptions& options);

}  // namespace sluice

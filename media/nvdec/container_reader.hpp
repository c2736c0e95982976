#pragma once
// Video files in any container libavformat reads (MP4, MOV, MKV, TS, ...) decoded on NVDEC: the shared demux
// layer (media/demux.hpp) in Annex-B mode feeds each packet, with the container's presentation time, to an
// NVDEC session (media/nvdec/nvdec_reader.hpp), so pts_ns() is the container's for every frame, variable frame
// rates included.
//
// NVDEC takes H.264 and HEVC in 4:2:0 at the bit depths the GPU's capability query accepts, scaled with
// fit: stretch, shown unrotated. Anything else — another codec, 4:2:2/4:4:4, a depth the GPU rejects, a
// display-matrix rotation, fit: letterbox|crop, no usable driver — is declined with the reason (`why`, nullptr
// returned); ReaderRegistry::open then applies the decoder choice.
//
// Network streams (RTSP over TCP or UDP, RTP, MPEG-TS over UDP/TCP/SRT, HTTP) go the same way, as live inputs:
// the demuxer's deadlines bound opening and each read, a read that fails is the input's error (the source
// reconnects with its backoff), pictures come out with no display delay, and after a damaged packet or a
// corrupt picture the pictures up to the next keyframe fail with the reason (media/nvdec/nvdec_reader.hpp).
// A resolution change mid-stream re-creates the decoder at the new sequence header.
#include <memory>
#include <string>

#include "runtime/frame_reader.hpp"

namespace sluice {

// Built with CUDA only. Throws InputError for a file that is not a readable video at all (as the CPU reader
// would).
std::unique_ptr<FrameReader> open_nvdec_container_reader(const std::string& uri, const ReaderOptions& options,
                                                         std::string& why);
std::unique_ptr<FrameReader> open_nvdec_stream_reader(const std::string& uri, const ReaderOptions& options,
                                                      std::string& why);

}  // namespace sluice

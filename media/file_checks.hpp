#pragma once
// Checks of a local input: before any decoder touches it, and whether it ended complete.
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// `uri` must exist as a readable, non-empty regular file; throws InputError ("'URI': reason") otherwise.
// Anything but a regular file could block a decode thread forever (a FIFO waits for a writer) or never end
// (/dev/zero).
void check_readable_file(const std::string& uri);

// An http:// or https:// URL: as a file input (a job's), a file on a web server that the demuxer fetches
// (DemuxOptions::remote_file), not a local path to check.
bool is_http_url(std::string_view uri) noexcept;

// A video that ends this many frames short of the count its container states (MP4/MOV's sample table) is still
// complete (a decoder may hold back a picture or two); beyond it, the file is reported truncated. Other
// containers state no count (media/demux.hpp frames_announced()): their cut ends are found by what the demuxer
// and the container's structure show (Demuxer::ended_early()).
std::int64_t truncation_tolerance(std::int64_t frames_announced) noexcept;

}  // namespace sluice

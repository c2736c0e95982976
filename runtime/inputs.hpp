#pragma once
// What a source URI names, before anything is opened: its input kind (by its shape only, no I/O), and the
// inputs it expands to (a directory or a glob is a job over the files it holds; anything else is one input).
// Part of the core: no OpenCV videoio/imgcodecs here, only std::filesystem and glob(3).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/frame_reader.hpp"

namespace sluice {

// By shape, never by touching the filesystem:
//   testsrc:PATTERN                                               -> testsrc
//   rtsp:// rtsps:// rtmp:// rtmps:// rtp:// http:// https:// tcp:// udp:// srt://  -> stream
//   /dev/videoN, v4l2:N, v4l2:/dev/videoN, /dev/v4l/by-id/..., /dev/v4l/by-path/... -> camera
//   a printf pattern with an image extension (frames/img_%04d.png)  -> image_sequence
//   an image extension (.png .jpg .jpeg .bmp .tif .tiff .webp .pgm .ppm, any case) -> image
//   anything else                                                  -> file
InputKind classify_uri(const std::string& uri);

// The extension of the last path component, lower case, with its dot ("" when none; ".bashrc" has none).
std::string extension_of(std::string_view path);

// The extensions (lower case, with the dot) a directory is searched for.
const std::vector<std::string_view>& video_extensions();
const std::vector<std::string_view>& image_extensions();

struct ExpandedSource {
  InputKind kind = InputKind::file;  // the URI's own kind (a directory or glob: file)
  bool job = false;                  // a directory or a glob: a batch job over `inputs`
  std::vector<std::pair<std::string, InputKind>> inputs;  // in the order they are read
};

// A directory: its video and image files (by extension, any case), non-recursive, sorted by path.
// A glob (a file-like URI holding * ? or [ that does not name an existing file): the regular files it
// matches, sorted. Both are jobs. Anything else is one input of classify_uri's kind; a missing single
// file is not an error here (it fails when opened, reported for that input).
// Throws InputError for a directory without media files (naming the extensions looked for), a glob that
// matches no file, and a directory that cannot be read.
ExpandedSource expand_source(const std::string& uri);

// A short stable name for a source, only [A-Za-z0-9._-]: the file stem (clip.mp4 -> clip), the directory's
// name, the directory a glob searches, the sequence's stem without its number pattern (img_%04d.png -> img),
// video0 for a camera, host-port for a stream (rtsp://cam.local:554/x -> cam.local-554; ':' is not allowed),
// testsrc-PATTERN. Never empty ("source" when nothing else is left).
std::string default_source_name(const std::string& uri);

}  // namespace sluice

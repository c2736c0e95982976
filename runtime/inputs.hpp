#pragma once
// Local paths as sources, before anything is opened: their input kind (by shape only, no I/O), the inputs they
// expand to (a directory or a glob is a job over the files it holds; anything else is one input) and their
// names. The file-like source kinds (runtime/media_source_kinds.cpp) and sluicectl's `jobs submit` build on it.
// Part of the core: no OpenCV videoio/imgcodecs here, only std::filesystem and glob(3).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/frame_reader.hpp"

namespace sluice {

// A local path's input kind by its shape (no I/O): a printf pattern with an image extension
// (frames/img_%04d.png) is an image sequence, an image extension (.png .jpg .jpeg .bmp .tif .tiff .webp .pgm
// .ppm, any case) an image, anything else a file. Which kind a source URI is: runtime/source_kind.hpp.
InputKind local_input_kind(std::string_view path);

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

// A local path: a directory is its video and image files (by extension, any case), non-recursive, sorted by
// path; a glob (a path holding * ? or [ that does not name an existing file) the regular files it matches,
// sorted. Both are jobs. Anything else is one input of local_input_kind's kind; a missing single file is not an
// error here (it fails when opened, reported for that input).
// Throws InputError for a directory without media files (naming the extensions looked for), a glob that
// matches no file, and a directory that cannot be read.
ExpandedSource expand_local_path(const std::string& path);

// True when the path holds a glob character (* ? [).
bool has_glob_chars(std::string_view path);
// Whether a local path names a job: an existing directory, or glob characters (expand_local_path).
bool names_local_job(const std::string& path);

// The name of a local path's source: the file stem (clip.mp4 -> clip), the directory's name, the directory a
// glob searches, the sequence's stem without its number pattern (img_%04d.png -> img).
std::string local_source_name(const std::string& path);

// Keeps [A-Za-z0-9._-]; other characters become '-', runs of '-' collapse, and '-', '.' and '_' are trimmed at
// both ends. At most 64 characters; may be empty.
std::string sanitize_source_name(std::string_view s);

// Whether `s` starts with `prefix` (lower case), ASCII letters compared without case.
bool starts_with_icase(std::string_view s, std::string_view prefix);

}  // namespace sluice

#include "media/file_checks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "runtime/frame_reader.hpp"

namespace sluice {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& uri, const std::string& why) { throw InputError("'" + uri + "': " + why); }

}  // namespace

void check_readable_file(const std::string& uri) {
  std::error_code ec;
  const fs::file_status st = fs::status(uri, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) fail(uri, ec.message());
  if (!fs::exists(st)) fail(uri, "no such file");
  if (fs::is_directory(st)) fail(uri, "is a directory, not a file");
  // Cameras are /dev/videoN, streams are URLs.
  if (fs::is_fifo(st)) fail(uri, "is a FIFO (named pipe), not a video or image file; refused (opening it would block until a writer appears)");
  if (fs::is_character_file(st)) fail(uri, "is a character device, not a video or image file (cameras are /dev/videoN)");
  if (fs::is_block_file(st)) fail(uri, "is a block device, not a video or image file");
  if (fs::is_socket(st)) fail(uri, "is a socket, not a video or image file (streams are given as URLs)");
  if (!fs::is_regular_file(st)) fail(uri, "is not a regular file");
  if (::access(uri.c_str(), R_OK) != 0) fail(uri, std::string("cannot read it: ") + std::strerror(errno));
  if (fs::file_size(uri, ec) == 0 && !ec) fail(uri, "empty file (0 bytes), not a video or image");
}

bool is_http_url(std::string_view uri) noexcept {
  return uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0;
}

std::int64_t truncation_tolerance(std::int64_t frames_announced) noexcept {
  return std::max<std::int64_t>(2, frames_announced / 50);  // 2 frames or 2%
}

}  // namespace sluice

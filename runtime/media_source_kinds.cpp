// The source kinds of media: local files (and directories and globs of them), images, image sequences, V4L2
// cameras and network streams. Their readers are media/'s (video.cpp, media.cpp); these say only what a URI of
// each looks like and how it is read as a source.
#include <algorithm>
#include <array>
#include <filesystem>

#include "runtime/source_kind.hpp"

namespace sluice {
namespace {

constexpr std::array<std::string_view, 10> kStreamSchemes{"rtsp://", "rtsps://", "rtmp://", "rtmps://", "rtp://",
                                                          "http://", "https://", "tcp://",  "udp://",   "srt://"};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// /dev/videoN, /dev/v4l/by-id/..., /dev/v4l/by-path/... (also after "v4l2:").
bool is_camera_path(std::string_view s) {
  constexpr std::string_view kVideo = "/dev/video";
  if (s.substr(0, kVideo.size()) == kVideo && all_digits(s.substr(kVideo.size()))) return true;
  return (s.rfind("/dev/v4l/by-id/", 0) == 0 || s.rfind("/dev/v4l/by-path/", 0) == 0) && s.back() != '/';
}

// The device path of a camera URI: v4l2:N -> /dev/videoN, v4l2:/dev/... -> /dev/...
std::string camera_device(const std::string& uri) {
  if (!starts_with_icase(uri, "v4l2:")) return uri;
  const std::string rest = uri.substr(5);
  return all_digits(rest) ? "/dev/video" + rest : rest;
}

// host-port of a stream URL (rtsp://user@cam.local:554/x -> cam.local-554; ':' is not allowed in names).
std::string stream_name(const std::string& uri) {
  const auto sep = uri.find("://");
  std::string authority = uri.substr(sep + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  std::string host = authority, port;
  if (!authority.empty() && authority[0] == '[') {  // [ipv6]:port
    const auto close = authority.find(']');
    host = authority.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && close + 1 < authority.size() && authority[close + 1] == ':')
      port = authority.substr(close + 2);
  } else if (const auto colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) {  // udp://@:1234, tcp://:9000
    host = uri.substr(0, sep);
    std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }
  return port.empty() ? host : host + "-" + port;
}

// What check says of a live source instead of opening it.
std::function<std::string(const std::string&)> opened_when_it_connects(const std::string& kind) {
  return [note = kind + ", decoded when it connects (not opened by check)"](const std::string&) { return note; };
}

SourceKind stream_source_kind() {
  SourceKind k;
  k.name = "stream";
  k.claims = [](std::string_view uri) {
    return std::any_of(kStreamSchemes.begin(), kStreamSchemes.end(),
                       [&](std::string_view scheme) { return starts_with_icase(uri, scheme); });
  };
  k.reads_as = InputKind::stream;
  k.reach = SourceReach::network;
  k.default_name = stream_name;
  k.check_note = opened_when_it_connects(k.name);
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(stream_source_kind);

SourceKind camera_source_kind() {
  SourceKind k;
  k.name = "camera";
  k.precedence = 10;
  k.claims = [](std::string_view uri) {
    if (is_camera_path(uri)) return true;
    if (!starts_with_icase(uri, "v4l2:")) return false;
    const std::string_view rest = uri.substr(5);
    return all_digits(rest) || is_camera_path(rest);
  };
  k.reads_as = InputKind::camera;
  k.local_path = camera_device;
  k.default_name = [](const std::string& uri) {
    const std::string path = starts_with_icase(uri, "v4l2:") ? uri.substr(5) : uri;
    return all_digits(path) ? "video" + path : std::filesystem::path(path).filename().string();
  };
  k.check_note = opened_when_it_connects(k.name);
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(camera_source_kind);

SourceKind image_sequence_source_kind() {
  SourceKind k;
  k.name = "image-sequence";
  k.precedence = 20;
  k.claims = [](std::string_view uri) { return local_input_kind(uri) == InputKind::image_sequence; };
  k.reads_as = InputKind::image_sequence;
  k.default_name = local_source_name;
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(image_sequence_source_kind);

// Files and images: a path, a directory or a glob of them (a job).
SourceKind local_files_kind(std::string name, int precedence, InputKind reads_as) {
  SourceKind k;
  k.name = std::move(name);
  k.precedence = precedence;
  k.reads_as = reads_as;
  k.local_files = true;
  k.default_name = local_source_name;
  k.expand = expand_local_path;
  k.names_job = names_local_job;
  return k;
}

SourceKind image_source_kind() {
  SourceKind k = local_files_kind("image", 30, InputKind::image);
  k.claims = [](std::string_view uri) { return local_input_kind(uri) == InputKind::image; };
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(image_source_kind);

SourceKind file_source_kind() {
  SourceKind k = local_files_kind("file", 1000, InputKind::file);
  k.claims = [](std::string_view) { return true; };  // whatever no other kind claims
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(file_source_kind);

}  // namespace
}  // namespace sluice

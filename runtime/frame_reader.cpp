#include "runtime/frame_reader.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace sluice {

std::string_view to_string(InputKind k) noexcept {
  switch (k) {
    case InputKind::file: return "file";
    case InputKind::image: return "image";
    case InputKind::image_sequence: return "image-sequence";
    case InputKind::camera: return "camera";
    case InputKind::stream: return "stream";
    case InputKind::testsrc: return "testsrc";
  }
  return "?";
}

ReaderRegistry& ReaderRegistry::global() {
  static ReaderRegistry registry;
  return registry;
}

void ReaderRegistry::add(InputKind kind, ReaderFactory factory) {
  std::lock_guard lock(mu_);
  factories_[kind] = std::move(factory);
}

void ReaderRegistry::add_for_extensions(const std::vector<std::string>& extensions, ExtensionReaderFactory factory) {
  std::lock_guard lock(mu_);
  for (const auto& ext : extensions) by_extension_[ext] = factory;
}

bool ReaderRegistry::has(InputKind kind) const {
  std::lock_guard lock(mu_);
  return factories_.count(kind) != 0;
}

std::unique_ptr<FrameReader> ReaderRegistry::open(InputKind kind, const std::string& uri, const ReaderOptions& options,
                                                  std::string* declined) const {
  ReaderFactory factory;
  ExtensionReaderFactory special;
  {
    std::lock_guard lock(mu_);
    if (auto it = factories_.find(kind); it != factories_.end()) factory = it->second;
    if (kind == InputKind::file || kind == InputKind::image) {
      const auto slash = uri.find_last_of('/');
      const auto dot = uri.find_last_of('.');
      if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
        std::string ext = uri.substr(dot);
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (auto it = by_extension_.find(ext); it != by_extension_.end()) special = it->second;
      }
    }
  }
  if (special) {
    std::string why;
    if (auto reader = special(uri, options, why)) return reader;
    if (declined) *declined = why;
    if (!factory) throw InputError("'" + uri + "': " + why);
    bool first = false;
    {
      std::lock_guard lock(mu_);
      first = fallbacks_logged_.insert(why).second;
    }
    if (first) spdlog::info("decoding on the CPU: {}", why);
  }
  if (!factory) {
    // Video files and streams (FFmpeg) are registered by sluiced in every build; what a GPU-host build lacks
    // is OpenCV.
    const std::string needs =
        kind == InputKind::camera ? "OpenCV videoio; this sluiced was built without it (SLUICE_GPU_HOST leaves OpenCV out)"
        : kind == InputKind::image || kind == InputKind::image_sequence
            ? "OpenCV imgcodecs; this sluiced was built without it (SLUICE_GPU_HOST leaves OpenCV out)"
            : "the FFmpeg readers (media/video.hpp), which this program did not register";
    throw InputError("'" + uri + "' is " + (kind == InputKind::image ? "an " : "a ") + std::string(to_string(kind)) +
                     " input, which needs " + needs);
  }
  return factory(uri, options);
}

}  // namespace sluice

#include "runtime/frame_reader.hpp"

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

std::string_view to_string(Fit f) noexcept {
  switch (f) {
    case Fit::stretch: return "stretch";
    case Fit::letterbox: return "letterbox";
    case Fit::crop: return "crop";
  }
  return "?";
}

std::optional<Fit> parse_fit(std::string_view s) noexcept {
  for (Fit f : {Fit::stretch, Fit::letterbox, Fit::crop})
    if (to_string(f) == s) return f;
  return std::nullopt;
}

ReaderRegistry& ReaderRegistry::global() {
  static ReaderRegistry registry;
  return registry;
}

void ReaderRegistry::add(InputKind kind, ReaderFactory factory) {
  std::lock_guard lock(mu_);
  factories_[kind] = std::move(factory);
}

bool ReaderRegistry::has(InputKind kind) const {
  std::lock_guard lock(mu_);
  return factories_.count(kind) != 0;
}

std::unique_ptr<FrameReader> ReaderRegistry::open(InputKind kind, const std::string& uri,
                                                  const ReaderOptions& options) const {
  ReaderFactory factory;
  {
    std::lock_guard lock(mu_);
    if (auto it = factories_.find(kind); it != factories_.end()) factory = it->second;
  }
  if (!factory)
    throw InputError("'" + uri + "' is a " + std::string(to_string(kind)) +
                     " input, which needs the media library (OpenCV videoio/imgcodecs); this sluiced was built "
                     "without it (SLUICE_GPU_HOST)");
  return factory(uri, options);
}

}  // namespace sluice

#include "runtime/frame_reader.hpp"

#include <spdlog/spdlog.h>


#include "runtime/inputs.hpp"
#include "runtime/utf8.hpp"

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

namespace {
// What SLUICE_REGISTER_READERS collected; run on the first global(), when every static object exists.
std::vector<void (*)(ReaderRegistry&)>& registered_readers() {
  static std::vector<void (*)(ReaderRegistry&)> adds;
  return adds;
}
}  // namespace

ReaderRegistrar::ReaderRegistrar(void (*add)(ReaderRegistry&)) { registered_readers().push_back(add); }

ReaderRegistry& ReaderRegistry::global() {
  static ReaderRegistry* const registry = [] {
    auto* r = new ReaderRegistry;  // never destroyed: readers may still be opened while the program exits
    for (const auto add : registered_readers()) add(*r);
    return r;
  }();
  return *registry;
}

void ReaderRegistry::add(InputKind kind, ReaderFactory factory) {
  std::lock_guard lock(mu_);
  factories_[kind] = std::move(factory);
}

void ReaderRegistry::add_gpu(InputKind kind, GpuReaderFactory factory) {
  std::lock_guard lock(mu_);
  gpu_factories_[kind] = std::move(factory);
}

void ReaderRegistry::add_gpu_for_extensions(const std::vector<std::string>& extensions, GpuReaderFactory factory) {
  std::lock_guard lock(mu_);
  for (const auto& ext : extensions) gpu_by_extension_[ext] = factory;
}

bool ReaderRegistry::has(InputKind kind) const {
  std::lock_guard lock(mu_);
  return factories_.count(kind) != 0;
}

GpuReaderFactory ReaderRegistry::gpu_reader_for(InputKind kind, const std::string& uri) const {
  // By extension only for local files: the readers so chosen (Annex-B, nvJPEG) read a path, not a URL.
  if ((kind == InputKind::file || kind == InputKind::image) && uri.find("://") == std::string::npos)
    if (auto it = gpu_by_extension_.find(extension_of(uri)); it != gpu_by_extension_.end()) return it->second;
  if (auto it = gpu_factories_.find(kind); it != gpu_factories_.end()) return it->second;
  return {};
}

std::unique_ptr<FrameReader> ReaderRegistry::open(InputKind kind, const std::string& uri, const ReaderOptions& options,
                                                  std::string* declined) const {
  ReaderFactory factory;
  GpuReaderFactory gpu;
  {
    std::lock_guard lock(mu_);
    if (auto it = factories_.find(kind); it != factories_.end()) factory = it->second;
    gpu = gpu_reader_for(kind, uri);
  }
  if (gpu) {
    std::string why = "decoder: cpu";
    if (options.decoder != DecoderChoice::cpu) {
      why.clear();
      if (auto reader = gpu(uri, options, why)) return reader;
      if (options.decoder == DecoderChoice::gpu)
        throw InputError("'" + shown_uri(uri) + "': decoder: gpu, but " + why);
    }
    if (declined) *declined = why;
    if (!factory) throw InputError("'" + shown_uri(uri) + "': " + why);
    bool first = false;
    {
      std::lock_guard lock(mu_);
      first = fallbacks_logged_.insert(why).second;
    }
    if (first) spdlog::info("decoding on the CPU: {}", why);
  }
  if (!factory) {
    // Video files and streams (FFmpeg) are registered in every build; what a GPU-host build lacks is OpenCV.
    const std::string needs =
        kind == InputKind::camera ? "OpenCV videoio; this sluiced was built without it (SLUICE_GPU_HOST leaves OpenCV out)"
        : kind == InputKind::image || kind == InputKind::image_sequence
            ? "OpenCV imgcodecs; this sluiced was built without it (SLUICE_GPU_HOST leaves OpenCV out)"
            : "the FFmpeg readers (media/video.cpp), which this program did not link";
    throw InputError("'" + shown_uri(uri) + "' is " + (kind == InputKind::image ? "an " : "a ") +
                     std::string(to_string(kind)) + " input, which needs " + needs);
  }
  return factory(uri, options);
}

}  // namespace sluice

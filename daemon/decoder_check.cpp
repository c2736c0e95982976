#include "daemon/decoder_check.hpp"

#include <map>

#include "runtime/frame_reader.hpp"
#include "runtime/inputs.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

constexpr std::size_t kExtensionsShown = 8;

constexpr const char* kUnreadable = "cannot be read: ";

// "NVDEC H.264, frames stay on the GPU" or "libavcodec h264 (not NVDEC: <why>)", or why it cannot be read.
std::string decoder_of(const std::string& uri, InputKind kind, const ReaderOptions& options) {
  try {
    std::string declined;
    const auto reader = ReaderRegistry::global().open(kind, uri, options, &declined);
    std::string out = reader->info().backend.empty() ? "?" : reader->info().backend;
    if (reader->writes_device_memory()) out += ", frames stay on the GPU";
    if (!declined.empty()) out += " (not the GPU decoder: " + declined + ")";
    return out;
  } catch (const std::exception& e) {
    return kUnreadable + std::string(e.what());
  }
}

}  // namespace

DecoderReport describe_decoders(const PipelineSpec& spec, const PipelinePlan& plan) {
  DecoderReport report;
  std::string& out = report.text;
  for (std::size_t i = 0; i < spec.stages.size() && i < plan.stages.size(); ++i) {
    const StageSpec& stage = spec.stages[i];
    if (stage.kind != "decode" || !stage.params.all().count("uri")) continue;
    const auto& uris = stage.params.strings("uri");
    if (uris.empty()) continue;
    ReaderOptions options;
    if (const auto decoder = parse_decoder_choice(stage.params.string("decoder"))) options.decoder = *decoder;
    if (const auto fit = parse_fit(stage.params.string("fit"))) options.fit = *fit;
    options.width = static_cast<int>(stage.params.integer("width"));
    options.height = static_cast<int>(stage.params.integer("height"));
    options.device_frames = plan.stages[i].output.memory == MemoryKind::device;
    out += "decoders of stage '" + plan.stages[i].name + "' (decoder: " + std::string(to_string(options.decoder)) + ", frames in " +
           to_string(plan.stages[i].output.memory) + " memory):\n";
    for (const auto& uri : uris) {
      const std::string shown = to_valid_utf8(uri);
      const SourceKind& kind = source_kind_of(uri);
      if (kind.check_note) {  // live, or fed while it runs: what the URI says is all check can look at
        try {
          out += "  " + shown + ": " + kind.check_note(uri) + "\n";
        } catch (const std::exception& e) {
          out += "  " + shown + ": " + e.what() + "\n";
        }
        continue;
      }
      ExpandedSource expanded;
      try {
        expanded = kind.inputs_of(uri);
      } catch (const std::exception& e) {  // a folder or glob that is not there, or holds no media file
        out += "  " + shown + ": " + kUnreadable + e.what() + "\n";
        report.unreadable.push_back(shown + ": " + e.what());
        continue;
      }
      if (!expanded.job) {
        const auto& [path, input_kind] = expanded.inputs.front();
        const std::string decoder = decoder_of(path, input_kind, options);
        out += "  " + shown + ": " + decoder + "\n";
        if (decoder.rfind(kUnreadable, 0) == 0) report.unreadable.push_back(shown + ": " + decoder.substr(std::string(kUnreadable).size()));
        continue;
      }
      // A job: one file of each extension stands for the others.
      std::map<std::string, std::pair<std::size_t, const std::pair<std::string, InputKind>*>> by_extension;
      for (const auto& input : expanded.inputs) {
        const std::string ext = extension_of(input.first);
        auto& entry = by_extension[ext.empty() ? "(no extension)" : ext];
        if (entry.first++ == 0) entry.second = &input;
      }
      out += "  " + shown + ": " + std::to_string(expanded.inputs.size()) + " inputs\n";
      std::size_t shown_extensions = 0;
      for (const auto& [ext, entry] : by_extension) {
        if (shown_extensions++ == kExtensionsShown) {
          out += "    ... " + std::to_string(by_extension.size() - kExtensionsShown) + " more extensions\n";
          break;
        }
        out += "    " + to_valid_utf8(ext) + " (" + std::to_string(entry.first) + "): " +
               decoder_of(entry.second->first, entry.second->second, options) + " [as " +
               to_valid_utf8(entry.second->first) + "]\n";
      }
    }
  }
  return report;
}

}  // namespace sluice

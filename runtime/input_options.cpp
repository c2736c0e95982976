#include "runtime/input_options.hpp"

#include <charconv>

#include "runtime/utf8.hpp"

namespace sluice {
namespace {

constexpr std::uint64_t kMaxFrames = std::uint64_t{1} << 40;

std::string shown_value(std::string_view value) {
  std::string v = to_valid_utf8(std::string(value.substr(0, 64)));
  if (value.size() > 64) v += "...";
  return "'" + v + "'";
}

}  // namespace

std::string input_option_names() { return "fit, decoder, max_frames"; }

std::string InputOptions::set(std::string_view name, std::string_view value) {
  if (name == "fit") {
    fit = parse_fit(value);
    if (!fit) return "option 'fit' is " + shown_value(value) + ", not stretch, letterbox or crop";
    return {};
  }
  if (name == "decoder") {
    decoder = parse_decoder_choice(value);
    if (!decoder) return "option 'decoder' is " + shown_value(value) + ", not auto, gpu or cpu";
    return {};
  }
  if (name == "max_frames") {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || n == 0 || n > kMaxFrames)
      return "option 'max_frames' is " + shown_value(value) + ", not a whole number from 1 to " +
             std::to_string(kMaxFrames);
    max_frames = n;
    return {};
  }
  return "unknown option " + shown_value(name) + " (known: " + input_option_names() + ")";
}

std::string InputOptions::text() const {
  std::string t;
  const auto add = [&t](std::string_view name, const std::string& value) {
    if (!t.empty()) t += ' ';
    t.append(name).append("=").append(value);
  };
  if (fit) add("fit", std::string(to_string(*fit)));
  if (decoder) add("decoder", std::string(to_string(*decoder)));
  if (max_frames) add("max_frames", std::to_string(max_frames));
  return t;
}

void InputOptions::apply(ReaderOptions& reader) const {
  if (fit) reader.fit = *fit;
  if (decoder) reader.decoder = *decoder;
}

}  // namespace sluice

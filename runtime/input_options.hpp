#pragma once
// Options that one input of a job carries with it (a Redis job entry's fields besides `input`): how this input
// is decoded, overriding the decode stage's parameters for it alone. Every value is hostile until parsed here.
//
//   fit         stretch | letterbox | crop   how frames of another aspect ratio fill the pipeline's frame
//   decoder     auto | gpu | cpu             which decoder reads it (see the decode stage's `decoder`)
//   max_frames  1 .. 2^40                    take at most this many frames, then the input is done
//
// An input is the same job input only with the same options: the job ledger records them (`text()`), a
// resubmission with other options is done again, its outputs replacing the earlier ones.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/frame_reader.hpp"

namespace sluice {

struct InputOptions {
  std::optional<Fit> fit;
  std::optional<DecoderChoice> decoder;
  std::uint64_t max_frames = 0;  // 0: all

  // Sets one option from its text; returns why not ("" when set). The message names the option and its
  // allowed values, never echoes more than a short, valid-UTF-8 prefix of the value.
  std::string set(std::string_view name, std::string_view value);
  // Canonical text, options in the order above: "fit=crop max_frames=10"; "" when there are none.
  std::string text() const;
  bool empty() const { return !fit && !decoder && max_frames == 0; }
  // The reader options of the source with this input's overrides.
  void apply(ReaderOptions& reader) const;
};

// The option names, for error messages ("fit, decoder, max_frames").
std::string input_option_names();

}  // namespace sluice

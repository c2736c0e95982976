// libFuzzer harness: the .npy reader (`sluiced model --input`) on arbitrary bytes. The only outcome allowed
// besides an array is nn::ModelError; anything else escaping (or a crash, hang, or huge allocation) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nn/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto array = sluice::nn::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    if (static_cast<std::int64_t>(array.data.size()) != sluice::nn::element_count(array.shape)) __builtin_trap();
  } catch (const sluice::nn::ModelError&) {
  }
  return 0;
}

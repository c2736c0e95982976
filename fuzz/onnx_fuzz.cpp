// libFuzzer harness: what `sluiced model` does with a model before running it — the ONNX loader on arbitrary
// bytes, then prepare() (bind the batch, canonicalize, infer shapes, fold, fuse) and the description it prints.
// The only outcome allowed besides a prepared graph is nn::ModelError; anything else escaping (or a crash, hang,
// or huge allocation) is a finding. External data resolves under a directory that does not exist.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nn/describe.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const sluice::nn::Graph graph =
        sluice::nn::load_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size), "/nonexistent-fuzz/m.onnx");
    for (const std::int64_t batch : {1, 3}) {
      const sluice::nn::Graph prepared = sluice::nn::prepare(graph, batch);
      (void)sluice::nn::describe_graph(prepared);
    }
  } catch (const sluice::nn::ModelError&) {
  }
  return 0;
}

// Gives every graph input a concrete shape: the symbolic (or matching) dimension 0 becomes the batch.
#include "nn/passes/pass_support.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::passes {

void bind_batch(Graph& g, std::int64_t batch) {
  if (batch < 1) throw ModelError(g.source + ": batch " + std::to_string(batch) + " must be at least 1");
  for (auto& input : g.inputs) {
    const std::string what = g.source + ": graph input '" + input.name + "' ";
    if (input.type != ElementType::f32)
      throw ModelError(what + "holds integers; only floating point inputs are supported");
    if (input.shape.empty()) throw ModelError(what + "has no shape in the file; re-export with a known input shape");
    for (std::size_t d = 1; d < input.shape.size(); ++d)
      if (input.shape[d] < 0)
        throw ModelError(what + "has symbolic dimension " + std::to_string(d) + " (shape " + to_string(input.shape) +
                         "); only the batch (dimension 0) may be symbolic: re-export with a fixed size");
    if (input.shape[0] >= 0 && input.shape[0] != batch)
      throw ModelError(what + "has a fixed batch of " + std::to_string(input.shape[0]) + ", but batch " +
                       std::to_string(batch) + " was asked for: use that batch, or re-export with a dynamic batch axis "
                       "(torch.onnx.export(..., dynamic_axes={'" + input.name + "': {0: 'batch'}}))");
    input.shape[0] = batch;
    const auto count = checked_product<std::int64_t>(input.shape);
    if (!count || *count > kMaxValueElements)
      throw ModelError(what + "has shape " + to_string(input.shape) + " at batch " + std::to_string(batch) +
                       ": more than the " + std::to_string(kMaxValueElements) + " elements a value may have");
    g.shapes[input.name] = input.shape;
  }
}

}  // namespace sluice::nn::passes

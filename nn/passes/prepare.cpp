#include "nn/passes.hpp"

#include "nn/passes/pass_support.hpp"

namespace sluice::nn {

Graph prepare(const Graph& model, std::int64_t batch) {
  Graph g = model;
  g.shapes.clear();
  g.rewrites.clear();
  passes::bind_batch(g, batch);
  passes::lower(g);
  passes::prune(g);  // first, so that dead readers do not block the fusions below
  passes::fuse_gelu(g);
  passes::fuse_attention(g);
  passes::fuse_attention_parts(g);
  passes::fold_batchnorm(g);
  passes::patchify(g);
  passes::collapse_moves(g);
  passes::make_linear(g);
  passes::sink_reshapes(g);
  passes::fuse_epilogues(g);
  // After the Linears exist (a Transpose moves through one); then the epilogues again, since an output
  // projection it leaves batch-first can take the residual Add after it.
  passes::absorb_attention_transposes(g);
  passes::fuse_epilogues(g);
  passes::prune(g);
  return g;
}

}  // namespace sluice::nn

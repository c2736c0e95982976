#pragma once
// What the pass files of prepare() share: the passes themselves and small graph queries.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nn/graph.hpp"

namespace sluice::nn::passes {

// ---- the passes, in the order prepare() runs them ----------------------------------------------------------
void bind_batch(Graph& g, std::int64_t batch);                           // bind_batch.cpp
void lower(Graph& g);                                                    // lower.cpp: the topological sweep
// canonicalize.cpp: the node in graph.hpp's canonical spelling; inputs' shapes and parameter constants must be known.
// `used` holds every value some node or graph output reads (to refuse optional outputs that are used).
Node canonicalize(const Node& node, const Graph& g, const std::set<std::string>& used);
std::vector<Shape> infer_shapes(const Node& canonical, const Graph& g);  // shape_inference.cpp
// decompose.cpp: the nodes (ONNX spelling) that an op made of other ops becomes, adding the constants they need
// to g; nothing for any other op. The node's inputs must have known shapes.
std::optional<std::vector<Node>> decompose(const Node& node, Graph& g);
// The most elements one value may have (2^36 f32 = 256 GiB: more than any machine sluice runs on holds).
inline constexpr std::int64_t kMaxValueElements = std::int64_t{1} << 36;
// The most elements a constant folded at prepare time may have (2^25: 128 MiB as f32, 256 MiB as i64), all of
// a model's folded constants together (2^26), and the multiply-adds one folded Gemm/MatMul may take (2^30).
inline constexpr std::int64_t kMaxFoldedElements = std::int64_t{1} << 25;
inline constexpr std::int64_t kMaxFoldedTotal = std::int64_t{1} << 26;
inline constexpr std::int64_t kMaxFoldWork = std::int64_t{1} << 30;
// Fails naming the node and value unless `shape` has no negative dimension and at most kMaxValueElements.
void check_value_shape(const Graph& g, const Node& n, const std::string& value, const Shape& shape);
std::vector<Tensor> evaluate(const Node& canonical, const Graph& g);     // fold_constants.cpp: all inputs constant
void fold_batchnorm(Graph& g);                                           // fold_batchnorm.cpp
void patchify(Graph& g);                                                 // patchify.cpp
void collapse_moves(Graph& g);                                           // collapse_moves.cpp
void fuse_attention(Graph& g);                                           // fuse_attention.cpp
void fuse_attention_parts(Graph& g);                                     // fuse_attention_parts.cpp
void fuse_gelu(Graph& g);                                                // fuse_gelu.cpp
void make_linear(Graph& g);                                              // linear.cpp
void sink_reshapes(Graph& g);                                            // sink_reshapes.cpp
void fuse_epilogues(Graph& g);                                           // fuse.cpp
void absorb_attention_transposes(Graph& g);                              // attention_layout.cpp
void prune(Graph& g);                                                    // prune.cpp

// ---- queries (graph_queries.cpp) ---------------------------------------------------------------------------
[[noreturn]] void fail(const Graph& g, const Node& node, const std::string& what);
// How many node inputs read each value (graph outputs not counted).
std::map<std::string, int> consumer_counts(const Graph& g);
bool is_graph_output(const Graph& g, const std::string& value);
// A value that a fusion may swallow: read by exactly one node and not a graph output.
bool has_single_use(const Graph& g, const std::map<std::string, int>& consumers, const std::string& value);
// Axis in [-rank, rank) (or [-rank, rank] when `inclusive`, as Flatten's) -> non-negative.
std::int64_t normalize_axis(const Graph& g, const Node& node, std::int64_t axis, std::int64_t rank, bool inclusive = false);
// The constant behind input `index`, or null when the input is absent or not constant.
const Tensor* constant_input(const Graph& g, const Node& node, std::size_t index);
// Integer contents of a constant (i64 as is, f32 truncated), for shapes, axes and indices.
std::vector<std::int64_t> as_ints(const Tensor& t);
std::vector<float> as_floats(const Tensor& t);
std::string join_ints(const std::vector<std::int64_t>& values);  // "1,2,3"
// `wanted`, or "WANTED_N" with the first N that makes it, a name no value or constant of g has yet: every name a
// pass makes goes through here (node names in files may repeat, so a name built from one may be taken).
std::string unused_value_name(const Graph& g, const std::string& wanted);
// Adds `t` to g's constants under a new name "OWNER.ROLE" (or "OWNER.ROLE_N" when taken) and returns the name.
std::string add_constant(Graph& g, const std::string& owner, const std::string& role, Tensor t);

}  // namespace sluice::nn::passes

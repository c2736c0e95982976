#include "nn/onnx_loader.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "kernels/half.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn {
namespace {

// Text from the file as a message may show it: printable ASCII kept, anything else as \xNN, at most 80 bytes.
std::string printable(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return text.size() > 80 ? out + "..." : out;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// external_data's offset and length: decimal digits only, fitting in 63 bits (std::stoll takes "12abc", " 7", "-1").
std::uint64_t external_number(const std::string& text, const std::string& key, const std::string& source,
                              const std::string& what) {
  std::uint64_t value = 0;
  bool valid = !text.empty() && text.size() <= 19;
  for (char c : text) valid = valid && c >= '0' && c <= '9';
  if (valid) value = std::stoull(text);
  if (!valid || value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw ModelError(source + ": " + what + ": external data " + key + " '" + printable(text) +
                     "' is not a non-negative decimal integer");
  return value;
}

// Reads one tensor's bytes from the external data file it names (location/offset/length, relative to the
// model). `expected` is what its shape and type need; the file is checked before anything is allocated.
std::string read_external_data(const onnx::TensorProto& t, const std::string& source, const std::string& what,
                               std::uint64_t expected) {
  std::string location;
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length;
  for (const auto& entry : t.external_data()) {
    if (entry.key() == "location") location = entry.value();
    else if (entry.key() == "offset") offset = external_number(entry.value(), "offset", source, what);
    else if (entry.key() == "length") length = external_number(entry.value(), "length", source, what);
  }
  const std::filesystem::path relative(location);
  if (location.empty() || location.find('\0') != std::string::npos || relative.is_absolute() ||
      std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; }))
    throw ModelError(source + ": " + what + " names external data '" + printable(location) +
                     "'; only files beside the model (a relative path without '..') are read");
  if (length && *length != expected)
    throw ModelError(source + ": " + what + ": external data length " + std::to_string(*length) +
                     " differs from the " + std::to_string(expected) + " bytes its shape and type need");
  const auto path = std::filesystem::path(source).parent_path() / relative;
  try {
    BoundedFile file(path.string(), "the external data file of " + what + " (model " + source + ")",
                     kMaxExternalDataBytes);
    return file.read_range(offset, expected);
  } catch (const FileReadError& e) {
    throw ModelError(e.what());
  }
}

template <typename T>
std::vector<T> unpack_raw(const std::string& raw) {
  std::vector<T> values(raw.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), raw.data(), values.size() * sizeof(T));  // empty: data() may be null
  return values;
}

// How many inputs and outputs each supported operator takes: the op table's arities (nn/ops.cpp; ONNX's
// schemas, opsets 11-21). The passes index inputs by position, so a node with too few is refused here, naming it.
void check_arity(const Node& node, const std::string& source) {
  const OpInfo& info = op_info(node.op);
  struct {
    int min_inputs, max_inputs, max_outputs;
  } a{info.min_inputs, info.max_inputs == kManyInputs ? std::numeric_limits<int>::max() : info.max_inputs,
      info.max_outputs == kManyInputs ? std::numeric_limits<int>::max() : info.max_outputs};
  const auto inputs = static_cast<int>(node.inputs.size()), outputs = static_cast<int>(node.outputs.size());
  auto range = [](int low, int high) {
    return low == high ? std::to_string(low)
                       : std::to_string(low) + " to " +
                             (high == std::numeric_limits<int>::max() ? std::string("any number") : std::to_string(high));
  };
  if (inputs < a.min_inputs || inputs > a.max_inputs)
    throw ModelError(source + ": " + node.where() + " has " + std::to_string(inputs) + " inputs; it takes " +
                     range(a.min_inputs, a.max_inputs));
  for (int i = 0; i < a.min_inputs; ++i)
    if (node.inputs[static_cast<std::size_t>(i)].empty())
      throw ModelError(source + ": " + node.where() + ": required input " + std::to_string(i) + " is empty");
  if (outputs < 1 || outputs > a.max_outputs || node.outputs[0].empty())
    throw ModelError(source + ": " + node.where() + " has " + std::to_string(outputs) +
                     " outputs (the first one named); it makes " + range(1, a.max_outputs));
}

// Converts any numeric TensorProto into a Tensor: floating point -> f32, integers and bool -> i64.
Tensor decode_tensor(const onnx::TensorProto& t, const std::string& source, const std::string& what) {
  Tensor out;
  for (auto d : t.dims()) {
    if (d < 0) throw ModelError(source + ": " + what + " has a negative dimension " + std::to_string(d));
    out.shape.push_back(d);
  }
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  const bool use_raw = external || t.has_raw_data();
  const auto type = t.data_type();

  std::size_t element_size = 0;
  switch (type) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: element_size = 4; break;
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64: element_size = 8; break;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
    case onnx::TensorProto::INT16: case onnx::TensorProto::UINT16: element_size = 2; break;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL: element_size = 1; break;
    default:
      throw ModelError(source + ": " + what + " has data type " +
                       onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type)) +
                       "; supported: float, double, float16, bfloat16, int64, int32, int16, int8, uint8, bool");
  }
  std::string raw;
  if (external) {
    const auto count = checked_product<std::uint64_t>(out.shape);
    const auto bytes = count ? checked_mul<std::uint64_t>(*count, element_size) : std::nullopt;
    if (!bytes) throw ModelError(source + ": " + what + " has shape " + to_string(out.shape) + ", too large");
    raw = read_external_data(t, source, what, *bytes);
  }
  const std::string& data = external ? raw : t.raw_data();
  if (use_raw && data.size() % element_size != 0)
    throw ModelError(source + ": " + what + " has " + std::to_string(data.size()) + " bytes of data, not a multiple of " +
                     std::to_string(element_size));

  const bool is_float = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE ||
                        type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
  out.type = is_float ? ElementType::f32 : ElementType::i64;
  auto put = [&](auto&& values, auto convert) {
    if (is_float) {
      out.f32.reserve(values.size());
      for (auto v : values) out.f32.push_back(convert(v));
    } else {
      out.i64.reserve(values.size());
      for (auto v : values) out.i64.push_back(static_cast<std::int64_t>(convert(v)));
    }
  };
  auto same = [](auto v) { return v; };
  auto from_half = [](auto bits) { return kernels::half_bits_to_float(static_cast<std::uint16_t>(bits)); };
  auto from_bf16 = [](auto bits) { return kernels::bf16_bits_to_float(static_cast<std::uint16_t>(bits)); };
  auto to_float = [](auto v) { return static_cast<float>(v); };

  switch (type) {
    case onnx::TensorProto::FLOAT:
      use_raw ? put(unpack_raw<float>(data), same) : put(t.float_data(), same); break;
    case onnx::TensorProto::DOUBLE:
      use_raw ? put(unpack_raw<double>(data), to_float) : put(t.double_data(), to_float); break;
    case onnx::TensorProto::FLOAT16:
      use_raw ? put(unpack_raw<std::uint16_t>(data), from_half) : put(t.int32_data(), from_half); break;
    case onnx::TensorProto::BFLOAT16:
      use_raw ? put(unpack_raw<std::uint16_t>(data), from_bf16) : put(t.int32_data(), from_bf16); break;
    case onnx::TensorProto::INT64:
      use_raw ? put(unpack_raw<std::int64_t>(data), same) : put(t.int64_data(), same); break;
    case onnx::TensorProto::UINT64:
      use_raw ? put(unpack_raw<std::uint64_t>(data), same) : put(t.uint64_data(), same); break;
    case onnx::TensorProto::INT32:
      use_raw ? put(unpack_raw<std::int32_t>(data), same) : put(t.int32_data(), same); break;
    case onnx::TensorProto::UINT32:
      use_raw ? put(unpack_raw<std::uint32_t>(data), same) : put(t.uint64_data(), same); break;
    case onnx::TensorProto::INT16:
      use_raw ? put(unpack_raw<std::int16_t>(data), same) : put(t.int32_data(), same); break;
    case onnx::TensorProto::UINT16:
      use_raw ? put(unpack_raw<std::uint16_t>(data), same) : put(t.int32_data(), same); break;
    case onnx::TensorProto::INT8:
      use_raw ? put(unpack_raw<std::int8_t>(data), same) : put(t.int32_data(), same); break;
    case onnx::TensorProto::UINT8:
      use_raw ? put(unpack_raw<std::uint8_t>(data), same) : put(t.int32_data(), same); break;
    case onnx::TensorProto::BOOL:
      use_raw ? put(unpack_raw<std::uint8_t>(data), [](auto v) { return v != 0; })
              : put(t.int32_data(), [](auto v) { return v != 0; });
      break;
    default: break;  // refused above
  }
  const auto held = static_cast<std::int64_t>(is_float ? out.f32.size() : out.i64.size());
  if (held != out.elements())
    throw ModelError(source + ": " + what + " holds " + std::to_string(held) + " values but its shape " +
                     to_string(out.shape) + " needs " + std::to_string(out.elements()) + " (inconsistent or truncated)");
  return out;
}

Attributes decode_attributes(const onnx::NodeProto& n, const std::string& source, const std::string& where) {
  Attributes attrs;
  for (const auto& a : n.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT: attrs.values[a.name()] = std::int64_t{a.i()}; break;
      case onnx::AttributeProto::FLOAT: attrs.values[a.name()] = a.f(); break;
      case onnx::AttributeProto::STRING: attrs.values[a.name()] = a.s(); break;
      case onnx::AttributeProto::INTS: attrs.values[a.name()] = std::vector<std::int64_t>(a.ints().begin(), a.ints().end()); break;
      case onnx::AttributeProto::FLOATS: attrs.values[a.name()] = std::vector<float>(a.floats().begin(), a.floats().end()); break;
      case onnx::AttributeProto::TENSOR:
        attrs.values[a.name()] = decode_tensor(a.t(), source, where + " attribute '" + a.name() + "'");
        break;
      default:
        throw ModelError(source + ": " + where + ": attribute '" + a.name() + "' has type " +
                         onnx::AttributeProto::AttributeType_Name(a.type()) +
                         "; supported: int, float, string, ints, floats, tensor");
    }
  }
  return attrs;
}

// A Constant node's value in whichever attribute spelling the exporter chose.
Tensor constant_value(const Node& node, const std::string& source) {
  const auto& a = node.attrs;
  if (const Tensor* t = a.tensor("value")) return *t;
  Tensor t;
  if (a.has("value_float")) {
    t.f32 = {a.f("value_float", 0.f)};
  } else if (a.has("value_floats")) {
    t.f32 = a.floats("value_floats");
    t.shape = {static_cast<std::int64_t>(t.f32.size())};
  } else if (a.has("value_int")) {
    t.type = ElementType::i64;
    t.i64 = {a.i("value_int", 0)};
  } else if (a.has("value_ints")) {
    t.type = ElementType::i64;
    t.i64 = a.ints("value_ints");
    t.shape = {static_cast<std::int64_t>(t.i64.size())};
  } else {
    throw ModelError(source + ": " + node.where() +
                     ": no value (supported: value, value_float, value_floats, value_int, value_ints)");
  }
  return t;
}

ValueInfo decode_value_info(const onnx::ValueInfoProto& v, const std::string& source, const char* kind) {
  ValueInfo info;
  info.name = v.name();
  if (!v.type().has_tensor_type())
    throw ModelError(source + ": graph " + kind + " '" + v.name() + "' is not a tensor");
  const auto& tensor_type = v.type().tensor_type();
  switch (tensor_type.elem_type()) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::DOUBLE: case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::UNDEFINED:
      info.type = ElementType::f32; break;
    default: info.type = ElementType::i64; break;
  }
  if (tensor_type.has_shape()) {
    for (const auto& d : tensor_type.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() < 0)
        throw ModelError(source + ": graph " + kind + " '" + v.name() + "' has a negative dimension " +
                         std::to_string(d.dim_value()));
      info.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
  }
  return info;
}

std::int64_t default_domain_opset(const onnx::ModelProto& model, const std::string& source) {
  std::int64_t opset = -1;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  if (opset < 0) throw ModelError(source + ": the model imports no opset of the default ONNX domain");
  if (opset < kMinOpset || opset > kMaxOpset)
    throw ModelError(source + ": opset " + std::to_string(opset) + " is not supported (supported: opset " +
                     std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                     "; re-export with e.g. torch.onnx.export(..., opset_version=13))");
  return opset;
}

// Every operator the model needs that sluice lacks, in one refusal (each with its first few node names), so a
// user learns the whole list at once instead of one refusal per re-export. One missing node keeps the short form.
void refuse_unsupported_ops(const onnx::GraphProto& graph, const std::string& source,
                            const std::vector<std::string>& supported) {
  struct Missing {
    std::string op;
    std::vector<std::string> nodes;  // the first kShownNodes
    std::size_t count = 0;
  };
  constexpr std::size_t kShownNodes = 3, kShownOps = 20;
  std::vector<Missing> missing;  // in order of first use
  std::string only_where, only_why;
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& n = graph.node(i);
    const bool other_domain = !(n.domain().empty() || n.domain() == "ai.onnx");
    if (!other_domain && has_flag(op_from_name(n.op_type()), kFromOnnx)) continue;
    const std::string op = printable(other_domain ? n.domain() + "::" + n.op_type() : n.op_type());
    const std::string name = printable(n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name());
    if (missing.empty()) {
      only_where = "node '" + name + "' (" + printable(n.op_type()) + ")";
      only_why = other_domain ? "operator domain '" + printable(n.domain()) + "' is not supported (only the default ONNX domain)"
                              : "operator " + op + " is not supported";
    }
    auto it = std::find_if(missing.begin(), missing.end(), [&](const Missing& m) { return m.op == op; });
    if (it == missing.end()) it = missing.insert(missing.end(), Missing{op, {}, 0});
    if (++it->count <= kShownNodes) it->nodes.push_back("'" + name + "'");
  }
  if (missing.empty()) return;
  const std::string listed = " (supported: " + join(supported, ", ") + ")";
  if (missing.size() == 1 && missing[0].count == 1)
    throw ModelError(source + ": " + only_where + ": " + only_why + (only_why.find("domain") == std::string::npos ? listed : ""));
  std::string text;
  for (std::size_t i = 0; i < missing.size() && i < kShownOps; ++i) {
    const Missing& m = missing[i];
    text += (i ? "; " : "") + m.op + " (" + std::to_string(m.count) + (m.count == 1 ? " node: " : " nodes: ") +
            join(m.nodes, ", ") + (m.count > m.nodes.size() ? ", ..." : "") + ")";
  }
  if (missing.size() > kShownOps) text += "; and " + std::to_string(missing.size() - kShownOps) + " more";
  throw ModelError(source + ": " + std::to_string(missing.size()) + " operator" + (missing.size() == 1 ? " is" : "s are") +
                   " not supported: " + text + listed);
}

Graph convert(const onnx::ModelProto& model, const std::string& source) {
  Graph g;
  g.source = source;
  g.opset = default_domain_opset(model, source);
  const auto& graph = model.graph();
  const auto& supported = supported_onnx_ops();
  refuse_unsupported_ops(graph, source, supported);

  for (const auto& init : graph.initializer())
    g.constants[init.name()] = decode_tensor(init, source, "initializer '" + init.name() + "'");
  for (const auto& input : graph.input())
    if (!g.is_constant(input.name())) g.inputs.push_back(decode_value_info(input, source, "input"));
  for (const auto& output : graph.output()) g.outputs.push_back(decode_value_info(output, source, "output"));

  // Where every value comes from, to tell a missing value from one used before it is produced.
  std::map<std::string, std::size_t> produced_at;
  for (std::size_t i = 0; i < static_cast<std::size_t>(graph.node_size()); ++i)
    for (const auto& out : graph.node(static_cast<int>(i)).output())
      if (!out.empty()) produced_at.emplace(out, i);

  std::set<std::string> available;
  for (const auto& in : g.inputs) available.insert(in.name);
  for (const auto& [name, tensor] : g.constants) available.insert(name);

  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& n = graph.node(i);
    Node node;
    node.op = op_from_name(n.op_type());
    node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    check_arity(node, source);
    for (const auto& in : node.inputs) {
      if (in.empty() || available.count(in)) continue;
      auto producer = produced_at.find(in);
      if (producer != produced_at.end() && producer->second > static_cast<std::size_t>(i))
        throw ModelError(source + ": " + node.where() + " uses '" + in + "' before node '" +
                         graph.node(static_cast<int>(producer->second)).name() +
                         "' produces it: the graph is not in topological order");
      throw ModelError(source + ": " + node.where() + " uses '" + in +
                       "', which is no graph input, initializer or node output (missing initializer or input?)");
    }
    node.attrs = decode_attributes(n, source, node.where());
    for (const auto& out : node.outputs) {
      if (out.empty()) continue;
      if (available.count(out))
        throw ModelError(source + ": " + node.where() + " produces '" + out + "', which already has a value");
      available.insert(out);
    }
    if (node.op == Op::Constant) {
      if (node.outputs.size() != 1) throw ModelError(source + ": " + node.where() + ": needs exactly one output");
      g.constants[node.outputs[0]] = constant_value(node, source);
      continue;
    }
    g.nodes.push_back(std::move(node));
  }
  for (const auto& out : g.outputs)
    if (!available.count(out.name))
      throw ModelError(source + ": graph output '" + out.name + "' is produced by no node, input or initializer");
  if (g.outputs.empty()) throw ModelError(source + ": the graph has no outputs");
  return g;
}

}  // namespace

Graph load_onnx_bytes(const std::string& bytes, const std::string& source) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes))
    throw ModelError("file " + source + ": not a valid ONNX model (truncated or corrupt?)");
  if (!model.has_graph()) throw ModelError("file " + source + ": not a valid ONNX model (it holds no graph)");
  return convert(model, source);
}

Graph load_onnx(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_bounded_file(path, "model file", kMaxModelFileBytes);
  } catch (const FileReadError& e) {
    throw ModelError(e.what());
  }
  return load_onnx_bytes(bytes, path);
}

}  // namespace sluice::nn

#pragma once
// Builds small ONNX models in memory (onnx::ModelProto) for the front-end tests.
#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <vector>

#include "nn/onnx_loader.hpp"

namespace sluice::nn::test {

class ModelBuilder {
 public:
  explicit ModelBuilder(std::int64_t opset = 13) {
    model_.set_ir_version(8);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  // dims: -1 is a symbolic dimension ("batch").
  ModelBuilder& input(const std::string& name, const std::vector<std::int64_t>& dims, int elem_type = onnx::TensorProto::FLOAT) {
    describe(model_.mutable_graph()->add_input(), name, dims, elem_type);
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    describe(model_.mutable_graph()->add_output(), name, {}, onnx::TensorProto::FLOAT);
    return *this;
  }
  ModelBuilder& weights(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<float>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  ModelBuilder& ints(const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return *this;
  }
  onnx::TensorProto& initializer(const std::string& name) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    return *t;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + outputs.at(0) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  onnx::ModelProto& proto() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }
  Graph load() const { return load_onnx_bytes(bytes(), "test.onnx"); }

 private:
  static void describe(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims, int elem_type) {
    v->set_name(name);
    auto* tensor = v->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(elem_type);
    if (dims.empty()) return;
    auto* shape = tensor->mutable_shape();
    for (auto d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) dim->set_dim_param("batch");
      else dim->set_dim_value(d);
    }
  }

  onnx::ModelProto model_;
};

inline void set_int(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void set_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}
inline void set_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (auto x : v) a->add_floats(x);
}

// The ModelError message of f(), or "(no error)": tests match on what the user would read.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace sluice::nn::test

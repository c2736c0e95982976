#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <sys/stat.h>
#include <unistd.h>

#include "kernels/half.hpp"
#include "nn/onnx_loader.hpp"
#include "tests/nn/model_builder.hpp"

using namespace sluice::nn;
using sluice::nn::test::ModelBuilder;
using sluice::nn::test::error_of;
using Catch::Matchers::Contains;

namespace {

ModelBuilder conv_model(std::int64_t opset = 13) {
  ModelBuilder m(opset);
  m.input("x", {-1, 1, 4, 4}).output("y").weights("w", {2, 1, 1, 1}, {1.f, -1.f});
  auto& conv = m.node("Conv", {"x", "w"}, {"y"}, "conv1");
  test::set_ints(conv, "strides", {1, 1});
  test::set_string(conv, "auto_pad", "NOTSET");
  test::set_float(conv, "some_float", 0.5f);
  return m;
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sluice_nn_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("loader reads inputs outputs initializers and attributes", "[nn][onnx]") {
  const Graph g = conv_model().load();
  REQUIRE(g.opset == 13);
  REQUIRE(g.inputs.size() == 1);  // the initializer is not an input
  CHECK(g.inputs[0].name == "x");
  CHECK(g.inputs[0].shape == Shape{-1, 1, 4, 4});
  REQUIRE(g.outputs.size() == 1);
  CHECK(g.outputs[0].name == "y");
  REQUIRE(g.is_constant("w"));
  CHECK(g.constants.at("w").shape == Shape{2, 1, 1, 1});
  CHECK(g.constants.at("w").f32 == std::vector<float>{1.f, -1.f});
  REQUIRE(g.nodes.size() == 1);
  const Node& n = g.nodes[0];
  CHECK(n.name == "conv1");
  CHECK(n.op == Op::Conv);
  CHECK(n.inputs == std::vector<std::string>{"x", "w"});
  CHECK(n.attrs.ints("strides") == std::vector<std::int64_t>{1, 1});
  CHECK(n.attrs.s("auto_pad", "") == "NOTSET");
  CHECK(n.attrs.f("some_float", 0.f) == 0.5f);
}

TEST_CASE("loader names unnamed nodes by op and index", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"x"}, {"y"}).clear_name();
  CHECK(m.load().nodes.at(0).name == "Relu_0");
}

TEST_CASE("loader refuses an unsupported operator naming it and listing supported ones", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"x"}, {"r"});
  m.node("CumSum", {"r"}, {"y"}, "the_cumsum");
  const std::string e = error_of([&] { m.load(); });
  CHECK_THAT(e, Contains("test.onnx"));
  CHECK_THAT(e, Contains("node 'the_cumsum' (CumSum)"));
  CHECK_THAT(e, Contains("operator CumSum is not supported"));
  for (const auto& op : supported_onnx_ops()) CHECK_THAT(e, Contains(op));
}

TEST_CASE("loader lists every unsupported operator of a model at once with its nodes", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("CumSum", {"x"}, {"a"}, "cum1");
  m.node("Relu", {"a"}, {"b"});
  m.node("Einstein", {"b"}, {"c"}, "e1");
  m.node("CumSum", {"c"}, {"d"}, "cum2");
  m.node("Relu", {"d"}, {"e"}, "mine").set_domain("com.example");
  for (int i = 0; i < 4; ++i) m.node("CumSum", {i ? "f" + std::to_string(i - 1) : "e"}, {i < 3 ? "f" + std::to_string(i) : "y"}, "more" + std::to_string(i));
  const std::string e = error_of([&] { m.load(); });
  CHECK_THAT(e, Contains("3 operators are not supported: CumSum (6 nodes: 'cum1', 'cum2', 'more0', ...); "
                         "Einstein (1 node: 'e1'); com.example::Relu (1 node: 'mine')"));
  CHECK_THAT(e, Contains("(supported: "));
  // Hostile names stay one printable line, and hundreds of unknown ops stay a bounded message.
  ModelBuilder h;
  h.input("x", {1, 2}).output("y");
  std::string prev = "x";
  for (int i = 0; i < 300; ++i) {
    const std::string out = i == 299 ? "y" : "v" + std::to_string(i);
    h.node("Op" + std::to_string(i), {prev}, {out}, "name\n\x1b[31m" + std::to_string(i));
    prev = out;
  }
  const std::string he = error_of([&] { h.load(); });
  CHECK_THAT(he, Contains("300 operators are not supported"));
  CHECK_THAT(he, Contains("and 280 more"));
  CHECK(he.find('\n') == std::string::npos);
  CHECK(he.find('\x1b') == std::string::npos);
  CHECK(he.size() < 4000);
}

TEST_CASE("loader refuses operators of other domains", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"x"}, {"y"}, "custom").set_domain("com.microsoft");
  CHECK_THAT(error_of([&] { m.load(); }), Contains("domain 'com.microsoft'"));
}

TEST_CASE("loader refuses truncated and corrupt bytes", "[nn][onnx]") {
  ModelBuilder m = conv_model();
  std::vector<float> big(1000, 0.25f);
  m.weights("big", {1000}, big);
  const std::string bytes = m.bytes();
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 3}) {
    const std::string e = error_of([&] { load_onnx_bytes(bytes.substr(0, keep), "cut.onnx"); });
    CHECK_THAT(e, Contains("file cut.onnx: not a valid ONNX model (truncated or corrupt?)"));
  }
  CHECK_THAT(error_of([&] { load_onnx_bytes("this is not protobuf \xff\xff\xff", "junk.onnx"); }),
             Contains("file junk.onnx: not a valid ONNX model (truncated or corrupt?)"));
  CHECK_THAT(error_of([&] { load_onnx_bytes("", "empty.onnx"); }), Contains("not a valid ONNX model"));
}

TEST_CASE("loader refuses a missing file naming it", "[nn][onnx]") {
  CHECK_THAT(error_of([] { load_onnx("/nonexistent/model.onnx"); }), Contains("/nonexistent/model.onnx"));
}

TEST_CASE("loader reads a model file from disk", "[nn][onnx]") {
  const auto path = scratch_dir("file") / "m.onnx";
  std::ofstream(path, std::ios::binary) << conv_model().bytes();
  const Graph g = load_onnx(path.string());
  CHECK(g.source == path.string());
  CHECK(g.nodes.size() == 1);
  std::filesystem::remove_all(path.parent_path());
}

TEST_CASE("loader refuses a value no node input or initializer provides", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 1, 4, 4}).output("y");
  m.node("Conv", {"x", "missing_w"}, {"y"}, "conv1");
  const std::string e = error_of([&] { m.load(); });
  CHECK_THAT(e, Contains("node 'conv1' (Conv)"));
  CHECK_THAT(e, Contains("'missing_w'"));
  CHECK_THAT(e, Contains("missing initializer or input"));
}

TEST_CASE("loader refuses a graph that is not in topological order", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"r"}, {"y"}, "second");
  m.node("Relu", {"x"}, {"r"}, "first");
  const std::string e = error_of([&] { m.load(); });
  CHECK_THAT(e, Contains("node 'second' (Relu)"));
  CHECK_THAT(e, Contains("not in topological order"));
}

TEST_CASE("loader refuses a graph output nothing produces", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("nowhere");
  m.node("Relu", {"x"}, {"y"});
  CHECK_THAT(error_of([&] { m.load(); }), Contains("graph output 'nowhere'"));
}

TEST_CASE("loader accepts opsets 11 to 21 and refuses others", "[nn][onnx]") {
  for (std::int64_t opset : {11, 13, 14, 17, 18, 19, 20, 21}) CHECK(conv_model(opset).load().opset == opset);
  for (std::int64_t opset : {9, 10, 22, 23}) {
    const std::string e = error_of([&] { conv_model(opset).load(); });
    CHECK_THAT(e, Contains("opset " + std::to_string(opset) + " is not supported"));
    CHECK_THAT(e, Contains("11 to 21"));
  }
}

TEST_CASE("loader decodes initializers of every supported data type", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"x"}, {"y"});
  auto raw = [&](const std::string& name, int type, const void* data, std::size_t bytes, std::int64_t count) {
    auto& t = m.initializer(name);
    t.set_data_type(type);
    t.add_dims(count);
    t.set_raw_data(std::string(static_cast<const char*>(data), bytes));
  };
  const float f32[] = {1.5f, -2.f};
  raw("f32_raw", onnx::TensorProto::FLOAT, f32, sizeof f32, 2);
  const double f64[] = {0.25, 1e10};
  raw("f64_raw", onnx::TensorProto::DOUBLE, f64, sizeof f64, 2);
  const std::uint16_t f16[] = {sluice::kernels::float_to_half_bits(0.5f), sluice::kernels::float_to_half_bits(-3.f)};
  raw("f16_raw", onnx::TensorProto::FLOAT16, f16, sizeof f16, 2);
  const std::int64_t i64[] = {-7, std::int64_t{1} << 40};
  raw("i64_raw", onnx::TensorProto::INT64, i64, sizeof i64, 2);
  const std::int32_t i32[] = {-5, 6};
  raw("i32_raw", onnx::TensorProto::INT32, i32, sizeof i32, 2);
  const std::int8_t i8[] = {-128, 127};
  raw("i8_raw", onnx::TensorProto::INT8, i8, sizeof i8, 2);
  const std::uint8_t u8[] = {0, 255};
  raw("u8_raw", onnx::TensorProto::UINT8, u8, sizeof u8, 2);
  const std::uint8_t flags[] = {0, 3};
  raw("bool_raw", onnx::TensorProto::BOOL, flags, sizeof flags, 2);

  auto& typed_f16 = m.initializer("f16_typed");  // float16 in int32_data holds the bits
  typed_f16.set_data_type(onnx::TensorProto::FLOAT16);
  typed_f16.add_dims(1);
  typed_f16.add_int32_data(sluice::kernels::float_to_half_bits(2.5f));
  auto& typed_f64 = m.initializer("f64_typed");
  typed_f64.set_data_type(onnx::TensorProto::DOUBLE);
  typed_f64.add_double_data(-0.125);  // no dims: a scalar
  auto& typed_i32 = m.initializer("i32_typed");
  typed_i32.set_data_type(onnx::TensorProto::INT32);
  typed_i32.add_dims(2);
  typed_i32.add_int32_data(9);
  typed_i32.add_int32_data(-9);

  const Graph g = m.load();
  auto f = [&](const std::string& n) { return g.constants.at(n).f32; };
  auto i = [&](const std::string& n) { return g.constants.at(n).i64; };
  CHECK(f("f32_raw") == std::vector<float>{1.5f, -2.f});
  CHECK(f("f64_raw") == std::vector<float>{0.25f, 1e10f});
  CHECK(f("f16_raw") == std::vector<float>{0.5f, -3.f});
  CHECK(i("i64_raw") == std::vector<std::int64_t>{-7, std::int64_t{1} << 40});
  CHECK(i("i32_raw") == std::vector<std::int64_t>{-5, 6});
  CHECK(i("i8_raw") == std::vector<std::int64_t>{-128, 127});
  CHECK(i("u8_raw") == std::vector<std::int64_t>{0, 255});
  CHECK(i("bool_raw") == std::vector<std::int64_t>{0, 1});
  CHECK(f("f16_typed") == std::vector<float>{2.5f});
  CHECK(f("f64_typed") == std::vector<float>{-0.125f});
  CHECK(g.constants.at("f64_typed").shape.empty());
  CHECK(i("i32_typed") == std::vector<std::int64_t>{9, -9});
}

TEST_CASE("loader refuses an initializer whose data does not fill its shape", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y").weights("w", {2, 3}, {1.f, 2.f, 3.f});
  m.node("Relu", {"x"}, {"y"});
  const std::string e = error_of([&] { m.load(); });
  CHECK_THAT(e, Contains("initializer 'w' holds 3 values but its shape [2,3] needs 6"));
}

TEST_CASE("loader refuses string tensors", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  m.node("Relu", {"x"}, {"y"});
  auto& t = m.initializer("names");
  t.set_data_type(onnx::TensorProto::STRING);
  t.add_string_data("a");
  CHECK_THAT(error_of([&] { m.load(); }), Contains("initializer 'names' has data type STRING"));
}

TEST_CASE("loader turns Constant nodes into constants", "[nn][onnx]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y");
  auto& c1 = m.node("Constant", {}, {"c_tensor"});
  auto* value = c1.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  value->mutable_t()->add_dims(2);
  value->mutable_t()->add_float_data(3.f);
  value->mutable_t()->add_float_data(4.f);
  test::set_floats(m.node("Constant", {}, {"c_floats"}), "value_floats", {1.f, 2.f, 3.f});
  test::set_int(m.node("Constant", {}, {"c_int"}), "value_int", 42);
  test::set_ints(m.node("Constant", {}, {"c_ints"}), "value_ints", {4, 5});
  m.node("Add", {"x", "c_tensor"}, {"y"});
  const Graph g = m.load();
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == Op::Add);
  CHECK(g.constants.at("c_tensor").f32 == std::vector<float>{3.f, 4.f});
  CHECK(g.constants.at("c_tensor").shape == Shape{2});
  CHECK(g.constants.at("c_floats").f32 == std::vector<float>{1.f, 2.f, 3.f});
  CHECK(g.constants.at("c_int").i64 == std::vector<std::int64_t>{42});
  CHECK(g.constants.at("c_int").shape.empty());
  CHECK(g.constants.at("c_ints").i64 == std::vector<std::int64_t>{4, 5});
}

TEST_CASE("loader reads external data beside the model and refuses paths outside it", "[nn][onnx]") {
  const auto dir = scratch_dir("external");
  const float values[] = {7.f, 8.f, 9.f};
  {
    std::ofstream bin(dir / "weights.bin", std::ios::binary);
    bin.write("pad!", 4);  // so that the offset matters
    bin.write(reinterpret_cast<const char*>(values), sizeof values);
  }
  auto model_with = [&](const std::string& location) {
    ModelBuilder m;
    m.input("x", {1, 3}).output("y");
    m.node("Add", {"x", "w"}, {"y"});
    auto& t = m.initializer("w");
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(3);
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* key, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(key);
      e->set_value(v);
    };
    add("location", location);
    add("offset", "4");
    add("length", std::to_string(sizeof values));
    return m;
  };
  const auto model_path = (dir / "m.onnx").string();
  CHECK(load_onnx_bytes(model_with("weights.bin").bytes(), model_path).constants.at("w").f32 ==
        std::vector<float>{7.f, 8.f, 9.f});
  CHECK_THAT(error_of([&] { load_onnx_bytes(model_with("../weights.bin").bytes(), model_path); }),
             Contains("only files beside the model"));
  CHECK_THAT(error_of([&] { load_onnx_bytes(model_with("absent.bin").bytes(), model_path); }),
             Contains("cannot open the external data file of initializer 'w'"));
  std::filesystem::remove_all(dir);
}

// Regression: offset "abc" escaped as a bare std::invalid_argument ("stoll"); offsets and lengths are now
// parsed strictly and checked against the file before anything is allocated.
TEST_CASE("loader parses external data offsets and lengths strictly and checks them against the file", "[nn][onnx]") {
  const auto dir = scratch_dir("external_strict");
  {
    std::ofstream bin(dir / "weights.bin", std::ios::binary);
    bin << std::string(12, '\0');
  }
  auto model_with = [&](const std::string& location, const std::string& offset, const std::string& length) {
    ModelBuilder m;
    m.input("x", {1, 3}).output("y");
    m.node("Add", {"x", "w"}, {"y"});
    auto& t = m.initializer("w");
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(3);
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", location}, {"offset", offset},
                                     {"length", length}}) {
      if (value == "-") continue;  // leave the key out
      auto* e = t.add_external_data();
      e->set_key(key);
      e->set_value(value);
    }
    return m.bytes();
  };
  const auto model_path = (dir / "m.onnx").string();
  auto error = [&](const std::string& location, const std::string& offset, const std::string& length) {
    return error_of([&] { load_onnx_bytes(model_with(location, offset, length), model_path); });
  };
  CHECK(load_onnx_bytes(model_with("weights.bin", "0", "12"), model_path).constants.at("w").elements() == 3);
  CHECK(load_onnx_bytes(model_with("weights.bin", "-", "-"), model_path).constants.at("w").elements() == 3);
  for (const char* bad : {"abc", "-1", " 4", "4x", "", "99999999999999999999", "+4"}) {
    INFO(bad);
    CHECK_THAT(error("weights.bin", bad, "12"), Contains("external data offset '"));
    CHECK_THAT(error("weights.bin", bad, "12"), Contains("is not a non-negative decimal integer"));
    CHECK_THAT(error("weights.bin", "0", bad), Contains("external data length '"));
  }
  CHECK_THAT(error("weights.bin", "4", "12"), Contains("lies outside it"));
  CHECK_THAT(error("weights.bin", "9223372036854775807", "12"), Contains("lies outside it"));
  CHECK_THAT(error("weights.bin", "0", "8"), Contains("differs from the 12 bytes its shape and type need"));
  CHECK_THAT(error("/etc/passwd", "0", "12"), Contains("only files beside the model"));
  CHECK_THAT(error("a/../../weights.bin", "0", "12"), Contains("only files beside the model"));
  CHECK_THAT(error(".", "0", "12"), Contains("is a directory"));
  std::filesystem::remove_all(dir);
}

// Regression: a directory, a FIFO or /dev/zero as the model said "no such model file" (and /dev/zero, read past
// the check, would have been read until memory ran out); the error now says what the path is, without blocking.
TEST_CASE("loader says what a model path is when it is not a regular file", "[nn][onnx]") {
  const auto dir = scratch_dir("kinds");
  CHECK_THAT(error_of([&] { load_onnx(dir.string()); }), Contains("model file is a directory, not a regular file"));
  CHECK_THAT(error_of([] { load_onnx("/dev/zero"); }), Contains("model file is a character device"));
  const auto fifo = (dir / "fifo.onnx").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { load_onnx(fifo); }), Contains("model file is a FIFO"));
  CHECK_THAT(error_of([&] { load_onnx((dir / "absent.onnx").string()); }),
             Contains("absent.onnx: cannot open model file: No such file or directory"));
  std::filesystem::remove_all(dir);
}

// Regression (found by fuzz/onnx_fuzz): a Gather with one input escaped prepare() as std::out_of_range from
// vector::at; every node's input and output counts are checked against its operator when the model loads.
TEST_CASE("loader refuses nodes with too few or too many inputs or outputs, naming them", "[nn][onnx]") {
  auto error_with = [](const std::string& op, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs) {
    ModelBuilder m;
    m.input("x", {1, 2}).output("y").ints("i", {0});
    m.node(op, inputs, outputs, "the_node");
    return error_of([&] { m.load(); });
  };
  CHECK_THAT(error_with("Gather", {"x"}, {"y"}), Contains("node 'the_node' (Gather) has 1 inputs; it takes 2"));
  CHECK_THAT(error_with("Add", {"x", "x", "x"}, {"y"}), Contains("has 3 inputs; it takes 2"));
  CHECK_THAT(error_with("Conv", {"x", ""}, {"y"}), Contains("required input 1 is empty"));
  CHECK_THAT(error_with("Relu", {"x"}, {}), Contains("has 0 outputs (the first one named); it makes 1"));
  CHECK_THAT(error_with("Relu", {"x"}, {"y", "z"}), Contains("has 2 outputs"));
  CHECK_THAT(error_with("Slice", {"x", "i"}, {"y"}), Contains("has 2 inputs; it takes 3 to 5"));
  CHECK(error_with("Concat", {"x", "x", "x", "x"}, {"y"}) == "(no error)");
  for (const auto& op : supported_onnx_ops()) {  // every supported operator has an arity
    INFO(op);
    CHECK_THAT(error_with(op, std::vector<std::string>(6, "x"), {"y"}), !Contains("out_of_range"));
  }
}

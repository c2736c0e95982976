#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "nn/npy.hpp"

using namespace sluice::nn;
using Catch::Matchers::Contains;

namespace {

// numpy is the reference: files it writes must read back, files we write it must read.
constexpr const char* kPython = "/usr/bin/python3";

std::filesystem::path scratch_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("sluice_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

int python(const std::string& code) {
  const std::string command = std::string(kPython) + " -c \"" + code + "\"";
  return std::system(command.c_str());
}

bool have_numpy() { return python("import numpy") == 0; }

std::string error_of(const std::string& path) {
  try {
    read_npy(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("npy write then read keeps shape and values", "[nn][npy]") {
  const auto path = (scratch_dir() / "roundtrip.npy").string();
  for (const Shape& shape : {Shape{2, 3, 4}, Shape{5}, Shape{}, Shape{1, 0}}) {
    std::vector<float> data(static_cast<std::size_t>(element_count(shape)));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f - 3.f;
    write_npy(path, shape, data.data());
    const NpyArray back = read_npy(path);
    CHECK(back.shape == shape);
    CHECK(back.data == data);
  }
}

TEST_CASE("npy files written by numpy read back in every supported dtype", "[nn][npy]") {
  if (!have_numpy()) {
    FAIL("no numpy at /usr/bin/python3 (scripts/setup.sh installs python3-numpy)");
  }
  const auto dir = scratch_dir();
  const std::string d = dir.string();
  REQUIRE(python("import numpy as np; a = np.arange(24).reshape(2, 3, 4) - 5; "
                 "[np.save('" + d + "/' + t + '.npy', a.astype(t)) for t in "
                 "['float32', 'float64', 'float16', 'int64', 'int32', 'int8']]; "
                 "np.save('" + d + "/uint8.npy', np.arange(24, dtype=np.uint8).reshape(2, 3, 4)); "
                 "np.save('" + d + "/bool.npy', np.array([True, False, True])); "
                 "np.save('" + d + "/scalar.npy', np.float32(2.5)); "
                 "np.save('" + d + "/fortran.npy', np.asfortranarray(a.astype('float32'))); "
                 "np.save('" + d + "/big_endian.npy', a.astype('>f4')); "
                 "np.lib.format.write_array(open('" + d + "/v2.npy', 'wb'), a.astype('float32'), version=(2, 0)); "
                 "np.save('" + d + "/complex.npy', np.zeros(2, np.complex64))") == 0);
  for (const char* type : {"float32", "float64", "float16", "int64", "int32", "int8", "v2"}) {
    INFO(type);
    const NpyArray a = read_npy(d + "/" + type + ".npy");
    CHECK(a.shape == Shape{2, 3, 4});
    for (std::size_t i = 0; i < a.data.size(); ++i) CHECK(a.data[i] == static_cast<float>(i) - 5.f);
  }
  const NpyArray u8 = read_npy(d + "/uint8.npy");
  CHECK(u8.data.back() == 23.f);
  CHECK(read_npy(d + "/bool.npy").data == std::vector<float>{1.f, 0.f, 1.f});
  const NpyArray scalar = read_npy(d + "/scalar.npy");
  CHECK(scalar.shape.empty());
  CHECK(scalar.data == std::vector<float>{2.5f});

  CHECK_THAT(error_of(d + "/fortran.npy"), Contains("Fortran order"));
  CHECK_THAT(error_of(d + "/fortran.npy"), Contains(d + "/fortran.npy"));
  CHECK_THAT(error_of(d + "/big_endian.npy"), Contains("little-endian only"));
  CHECK_THAT(error_of(d + "/complex.npy"), Contains("is not supported"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy files we write load in numpy", "[nn][npy]") {
  if (!have_numpy()) {
    FAIL("no numpy at /usr/bin/python3 (scripts/setup.sh installs python3-numpy)");
  }
  const auto path = (scratch_dir() / "ours.npy").string();
  std::vector<float> data(60);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) / 4.f;
  write_npy(path, {3, 4, 5}, data.data());
  CHECK(python("import numpy as np; a = np.load('" + path + "'); "
               "assert a.dtype == np.float32 and a.shape == (3, 4, 5), a.shape; "
               "assert (a.ravel() == np.arange(60) / 4).all()") == 0);
  write_npy(path, {7}, data.data());
  CHECK(python("import numpy as np; a = np.load('" + path + "'); assert a.shape == (7,)") == 0);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("npy refuses missing truncated and foreign files naming them", "[nn][npy]") {
  const auto dir = scratch_dir();
  CHECK_THAT(error_of((dir / "absent.npy").string()), Contains("absent.npy"));
  const auto text = (dir / "text.npy").string();
  std::ofstream(text) << "hello, not numpy";
  CHECK_THAT(error_of(text), Contains("not a .npy file"));
  const auto cut = (dir / "cut.npy").string();
  std::vector<float> data(100, 1.f);
  write_npy(cut, {10, 10}, data.data());
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 8);
  const std::string e = error_of(cut);
  CHECK_THAT(e, Contains("truncated"));
  CHECK_THAT(e, Contains(cut));
  std::filesystem::resize_file(cut, 20);
  CHECK_THAT(error_of(cut), Contains("header is truncated"));
  std::filesystem::remove_all(dir);
}

namespace {

// A .npy file: magic, version 1.0 or 2.0 (chosen by the header's length), header, data.
std::string npy_bytes(const std::string& header, const std::string& data = "") {
  std::string out("\x93NUMPY", 6);
  if (header.size() < 65536) {
    out += std::string{'\x01', '\x00', static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  } else {
    out += std::string{'\x02', '\x00'};
    for (int i = 0; i < 4; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "t.npy");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("npy header parser reads what numpy writes, spaced any way", "[nn][npy]") {
  const std::string two_floats("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  for (const std::string header : {std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n"),
                                   std::string("{\"shape\":(2,),\"descr\":\"<f4\",\"fortran_order\":False}"),
                                   "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , ) }" +
                                       std::string(1000, ' ') + "\n"}) {
    INFO(header);
    const NpyArray a = parse_npy(npy_bytes(header, two_floats), "t.npy");
    CHECK(a.shape == Shape{2});
    CHECK(a.data == std::vector<float>{1.f, 2.f});
  }
  CHECK(parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", two_floats.substr(0, 4)), "t.npy")
            .shape.empty());
}

// Regression: the header was matched with std::regex, whose recursion overflowed the stack (SIGSEGV) on a
// header padded with 40 000 spaces, a 200 KB descr or 300 000 dimensions.
TEST_CASE("npy header parser is bounded: huge padding, descr and dims are errors, not crashes", "[nn][npy]") {
  const std::string padded = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" + std::string(40000, ' ') + "\n";
  CHECK(parse_npy(npy_bytes(padded, std::string(4, '\0')), "t.npy").shape == Shape{1});

  const std::string big_descr = "{'descr': '" + std::string(200000, 'f') + "', 'fortran_order': False, 'shape': (1,)}";
  CHECK_THAT(parse_error(npy_bytes(big_descr)), Contains("over the limit of 65536"));
  const std::string long_descr = "{'descr': '" + std::string(60000, 'f') + "', 'fortran_order': False, 'shape': (1,)}";
  CHECK_THAT(parse_error(npy_bytes(long_descr)), Contains("is not supported"));

  std::string many_dims = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 300000; ++i) many_dims += "1,";
  CHECK_THAT(parse_error(npy_bytes(many_dims + ")}")), Contains("over the limit"));
  std::string dims_65 = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 65; ++i) dims_65 += "1,";
  CHECK_THAT(parse_error(npy_bytes(dims_65 + ")}", std::string(4, '\0'))), Contains("more than 64 dimensions"));
}

TEST_CASE("npy shapes are checked for overflow and against the data before allocating", "[nn][npy]") {
  auto header = [](const std::string& shape) {
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  CHECK_THAT(parse_error(npy_bytes(header("(4294967296, 4294967296)"))), Contains("more elements than fit in 64 bits"));
  CHECK_THAT(parse_error(npy_bytes(header("(99999999999999999999,)"))), Contains("does not fit in 64 bits"));
  CHECK_THAT(parse_error(npy_bytes(header("(1000000000, 1000)"), std::string(16, '\0'))),
             Contains("data is truncated (16 bytes"));
  CHECK_THAT(parse_error(npy_bytes(header("(-1,)"))), Contains("non-negative integer"));
  CHECK(parse_npy(npy_bytes(header("(0, 4611686018427387904)")), "t.npy").data.empty());
}

TEST_CASE("npy header errors say where and never echo raw bytes", "[nn][npy]") {
  CHECK_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False}")), Contains("has no 'shape'"));
  CHECK_THAT(parse_error(npy_bytes("{'descr': '<f4', 'descr': '<f4'}")), Contains("appears twice"));
  CHECK_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}")),
             Contains("expected True or False"));
  CHECK_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing")),
             Contains("after the header dict"));
  CHECK_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,")), Contains("end of header"));
  const std::string e = parse_error(npy_bytes("{'\xff\xfe': 1}"));
  CHECK_THAT(e, Contains("unknown key '\\xff\\xfe'"));
  CHECK(e.find('\xff') == std::string::npos);
}

// Regression: /dev/zero as --input read gigabytes and died in std::bad_alloc; a directory said "missing file?".
TEST_CASE("npy refuses devices, directories and FIFOs without reading or blocking", "[nn][npy]") {
  CHECK_THAT(error_of("/dev/zero"), Contains("is a character device, not a regular file"));
  const auto dir = scratch_dir();
  CHECK_THAT(error_of(dir.string()), Contains("is a directory"));
  const auto fifo = (dir / "fifo.npy").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(error_of(fifo), Contains("is a FIFO"));
  std::filesystem::remove_all(dir);
}

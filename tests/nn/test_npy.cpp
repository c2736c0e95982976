#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

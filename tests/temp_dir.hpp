#pragma once
// A fresh directory under the system temp dir, removed with everything in it at the end of the test.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace sluice::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "sluice-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    // A test may have taken permissions away to provoke errors: give them back so everything can go.
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Creates `name` (and its parent directories) holding one byte; returns its path.
  std::string touch(const std::string& name) const {
    const std::filesystem::path p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << "x";
    return p.string();
  }
  std::string str() const { return path.string(); }
};

}  // namespace sluice::test

#include "daemon/output_check.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "runtime/utf8.hpp"

namespace sluice {
namespace {
namespace fs = std::filesystem;

std::string shown(const fs::path& p) { return "'" + to_valid_utf8(p.string()) + "'"; }

// Why sluiced could not create entries in the existing directory `dir`, if so.
std::optional<std::string> not_writable_dir(const fs::path& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return shown(dir) + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return shown(dir) + " is not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "cannot write in " + shown(dir) + ": " + std::strerror(errno);
  return std::nullopt;
}

// A directory output: created with its missing parents, so the nearest existing ancestor decides.
std::optional<std::string> directory_problem(const fs::path& dir) {
  fs::path p = dir;
  while (true) {
    struct stat st{};
    if (::stat(p.c_str(), &st) == 0) {
      if (p == dir) return not_writable_dir(p);
      if (!S_ISDIR(st.st_mode)) return "cannot create it: " + shown(p) + " is not a directory";
      if (auto why = not_writable_dir(p)) return "cannot create it: " + *why;
      return std::nullopt;
    }
    if (errno != ENOENT && errno != ENOTDIR) return shown(p) + ": " + std::strerror(errno);
    if (!p.has_relative_path() || p.parent_path() == p) return "no part of it exists";
    p = p.parent_path();
  }
}

// A file output: its directory is not created (jsonl per run), and the file is appended to when it is there.
std::optional<std::string> file_problem(const fs::path& file) {
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0)
    return "its directory " + shown(dir) + ": " + std::strerror(errno) + " (it is not created for a file output)";
  if (auto why = not_writable_dir(dir)) return *why;
  if (::stat(file.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "it is a directory (a file is written there)";
    if (!S_ISREG(st.st_mode)) return "it is not a regular file";
    if (::access(file.c_str(), W_OK) != 0) return std::string("cannot write it: ") + std::strerror(errno);
  }
  return std::nullopt;
}

std::string param_or_empty(const StageSpec& stage, const char* key) {
  return stage.params.all().count(key) ? stage.params.string(key) : std::string();
}

}  // namespace

// Sink paths are taken as written (a relative one against the working directory), as the sinks open them.
std::vector<std::string> output_problems(const PipelineSpec& spec) {
  std::vector<std::string> problems;
  for (const auto& stage : spec.stages) {
    if (stage.kind != "sink" && stage.kind != "annotate") continue;
    const std::string path = param_or_empty(stage, "path");
    if (path.empty() || path == "-") continue;
    const std::string type = param_or_empty(stage, "type");
    if (stage.kind == "sink" && (type == "null" || type == "stdout" || type == "redis")) continue;  // not a path
    const bool file_output = stage.kind == "sink" && type == "jsonl" && param_or_empty(stage, "per") == "run";
    const auto why = file_output ? file_problem(path) : directory_problem(path);
    if (!why) continue;
    const auto at = stage.key_where.find("path");
    const std::string where = (at != stage.key_where.end() ? at->second : stage.where).str();
    problems.push_back(where + ": stage '" + stage.name + "' (" + stage.kind + "): path " + shown(path) + ": " + *why);
  }
  return problems;
}

}  // namespace sluice

#include "daemon/output_preflight.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "config/pipeline_spec.hpp"
#include "daemon/output_check.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace fs = std::filesystem;
namespace {

std::string shown(const std::string& path) { return "'" + to_valid_utf8(path) + "'"; }

// Opens a file output the way its sink will (to append, created if missing), without writing: a path check
// cannot see every reason an open fails (a full disk for a new file, an ACL, a race with a removal).
// O_NONBLOCK: output_problems refused non-regular files, but the path may have changed since.
void open_to_append(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
  if (fd < 0) throw ConfigError("output " + shown(path) + ": cannot open it for writing: " + std::strerror(errno));
  ::close(fd);
}

// "FILE:LINE:COL: stage 'NAME' (KIND): ", where the stage's path is written (as output_problems says it).
std::string where(const StageSpec& stage) {
  const auto at = stage.key_where.find("path");
  return (at != stage.key_where.end() ? at->second : stage.where).str() + ": stage '" + stage.name + "' (" +
         stage.kind + "): ";
}

}  // namespace

ReadyOutputs prepare_outputs(const PipelineSpec& spec) {
  if (const auto problems = output_problems(spec); !problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw ConfigError(all);
  }
  ReadyOutputs ready;
  for (const auto& stage : spec.stages) {
    const auto output = stage_output(stage.kind, stage.params);
    if (!output) continue;
    try {
      if (output->is_file) {
        ready.locks.emplace_back(OutputLock::for_file(output->path), "output " + shown(output->path));
        open_to_append(output->path);
      } else {
        std::error_code ec;
        fs::create_directories(output->path, ec);
        if (ec) throw ConfigError("output directory " + shown(output->path) + ": cannot create it: " + ec.message());
        ready.locks.emplace_back(OutputLock::for_directory(output->path), "output directory " + shown(output->path));
      }
    } catch (const OutputInUse& e) {
      throw OutputInUse(where(stage) + e.what());
    } catch (const std::runtime_error& e) {  // ConfigError, or a lock file that cannot be opened
      throw ConfigError(where(stage) + e.what());
    }
  }
  return ready;
}

ReadyOutputs lock_outputs(const PipelineSpec& spec) {
  ReadyOutputs ready;
  for (const auto& stage : spec.stages) {
    const auto output = stage_output(stage.kind, stage.params);
    if (!output) continue;
    const fs::path dir = output->is_file ? fs::path(output->path).parent_path() : fs::path(output->path);
    std::error_code ec;
    if (!fs::is_directory(dir.empty() ? fs::path(".") : dir, ec)) continue;  // the sink says what is wrong
    try {
      if (output->is_file)
        ready.locks.emplace_back(OutputLock::for_file(output->path), "output " + shown(output->path));
      else
        ready.locks.emplace_back(OutputLock::for_directory(output->path), "output directory " + shown(output->path));
    } catch (const OutputInUse& e) {
      throw OutputInUse(where(stage) + e.what());
    } catch (const std::runtime_error&) {  // cannot be taken here (no write access, ...): the sink reports it
    }
  }
  return ready;
}

}  // namespace sluice

#include "daemon/thread_cpu.hpp"

#include "runtime/thread_name.hpp"

#include <algorithm>

namespace sluice {

std::string_view thread_group(std::string_view comm, bool main_thread) noexcept {
  if (main_thread) return "main";
  if (comm == kStageThreadName) return "stages";
  if (comm == kSourceThreadName || comm.substr(0, 3) == "av:") return "sources";
  if (comm.substr(0, 4) == "cuda") return "cuda";
  return "other";
}

ThreadCpuAccount::ThreadCpuAccount() {
  for (const std::string_view g : kThreadGroups) seconds_[std::string(g)] = 0;
}

void ThreadCpuAccount::update(const std::vector<ThreadSample>& live, long main_tid, double process_cpu_s) {
  std::map<std::pair<long, std::uint64_t>, double> now;
  double accounted = 0;
  for (const ThreadSample& t : live) {
    const auto key = std::make_pair(t.tid, t.start_ticks);
    const auto it = seen_.find(key);
    const double before = it == seen_.end() ? 0.0 : it->second;
    // A thread's own clock never goes back; a smaller value is a misread and adds nothing.
    const double added = t.cpu_s > before ? t.cpu_s - before : 0.0;
    // The thread's group now (it may have renamed itself since): the time since the last sample is its.
    seconds_[std::string(thread_group(t.comm, t.tid == main_tid))] += added;
    now[key] = std::max(before, t.cpu_s);
  }
  seen_ = std::move(now);
  for (const auto& [group, s] : seconds_)
    if (group != "exited") accounted += s;
  double& exited = seconds_["exited"];
  exited = std::max(exited, process_cpu_s - accounted);
}

}  // namespace sluice

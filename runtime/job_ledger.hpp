#pragma once
// The ledger of a resumable batch job: an append-only file in the state directory, one JSON line per
// finished input, fsync'ed before the call returns. After kill -9 and a restart the job skips what the
// ledger lists (same path, size and modification time) and redoes the rest: no input missed, none twice.
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sluice {

class JobLedger {
 public:
  // Opens `file` (creating it and its directory), reads earlier records; a torn last line (a crash mid-write)
  // is cut off. Throws std::runtime_error naming the file and line when it cannot be read or written.
  explicit JobLedger(std::filesystem::path file);
  ~JobLedger();
  JobLedger(const JobLedger&) = delete;
  JobLedger& operator=(const JobLedger&) = delete;

  // True when `input` finished (done or failed) in this or an earlier run and has not changed since.
  bool finished(const std::string& input) const;
  // Appends and fsyncs one record. `outputs`: the files the sink committed for it.
  void done(const std::string& input, std::uint64_t frames, const std::vector<std::string>& outputs);
  // An input that cannot be processed (missing, corrupt, unsupported): recorded so a restart does not retry it.
  void failed(const std::string& input, const std::string& reason);

  const std::filesystem::path& path() const { return path_; }
  std::size_t finished_count() const;
  std::size_t resumed_count() const { return resumed_; }  // records read at open

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  std::map<std::string, std::string> finished_;  // input path -> "size:mtime_ns" when recorded
  std::size_t resumed_ = 0;
};

// The ledger file of a job over `uris` in `state_dir` (one per distinct job: a hash of the URIs and the
// pipeline name), e.g. /var/lib/sluice/jobs/default-3f2a9c.ledger.
std::filesystem::path job_ledger_path(const std::filesystem::path& state_dir, const std::string& pipeline,
                                      const std::vector<std::string>& uris);

}  // namespace sluice

#pragma once
// The ledger of a resumable batch job: an append-only file in the state directory, one JSON line per
// finished input, fsync'ed before the call returns. After kill -9 and a restart the job skips what the
// ledger lists (same path, size and modification time) and redoes the rest: no input missed, none twice.
//
// One record per line (keys in this order; `input` is the absolute, lexically normal path):
//   {"input":"/data/clips/a.mp4","size":1048576,"mtime_ns":1714557296123456789,"status":"done",
//    "frames":120,"outputs":["/out/a.npy"],"reason":"","at":"2024-05-01T09:54:56.123Z"}
// An input that carried its own options (a Redis job entry's, runtime/input_options.hpp) has "options" (their
// text, e.g. "fit=crop max_frames=10") after "reason": it counts as finished only for the same options.
// `status` is "done" or "failed" (then `reason` says why), or "started": the sink is about to make the first
// records of the input durable in an output shared by several inputs (jsonl per run/source, npy's index);
// {"input","size","mtime_ns","status":"started","at"}. An input whose last record says started was interrupted
// (kill -9, power loss, a reload): the next run takes its records back out of those outputs before redoing it,
// so each input's records are there exactly once. `size` and `mtime_ns` are -1 when the input could
// not be stat'ed. An input path that is not valid UTF-8 also carries "input_hex" (its bytes in hex), which
// wins over "input" when read back. When an input appears more than once, the last record counts.
// `frames` is what the input delivered (also for a failed one: the records its outputs hold).
//
// Reading is bounded: a ledger larger than kMaxBytes, or a line longer than kMaxLineBytes, is refused with an
// error naming the limit, before anything else is read.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/output_lock.hpp"

namespace sluice {

class JobLedger {
 public:
  static constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 30;     // 1 GiB: ~5 million records
  static constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;     // 1 MiB: a path, reason and outputs

  struct Entry {
    std::int64_t size = -1, mtime_ns = -1;
    bool failed = false;
    std::uint64_t frames = 0;
    std::string reason;
    std::string options;  // the input's own options it was done with, "" when none
  };
  // What a ledger's text holds: the last record of each input, how many records, and where a torn last line
  // starts (a crash mid-write), with why. Throws std::runtime_error "<name>:<line>: ..." for a line before the
  // last that is not a record, or a limit passed. Pure: the fuzzer drives it with arbitrary bytes.
  struct Parsed {
    std::map<std::string, Entry> entries;  // done or failed last
    std::set<std::string> interrupted;     // started last
    std::size_t records = 0;               // done and failed records
    std::optional<std::size_t> torn_at;
    std::string torn_why;
    std::size_t torn_line = 0;
  };
  static Parsed parse(std::string_view text, const std::string& name);

  // An input whose last record says failed.
  struct FailedInput {
    std::string input, reason;
    std::uint64_t frames = 0;
  };
  // Opens `file` (creating it and its directory), reads earlier records; a torn last line (a crash mid-write)
  // is cut off with a warning. Throws std::runtime_error naming the file (and line) when it cannot be read or
  // written, or when a line before the last is not a record.
  // Before the ledger is opened (let alone created or cut), its lock `<dir>/.<file>.sluice-lock` is taken
  // (runtime/output_lock.hpp), so two daemons (or two pipelines of one) never run one job at once: held by
  // another process, it throws at once naming that pid; held by this one (a reload whose old pipeline is still
  // being torn down), it waits up to `lock_wait`, then throws likewise.
  explicit JobLedger(std::filesystem::path file, std::chrono::milliseconds lock_wait = std::chrono::seconds(5));
  ~JobLedger();
  JobLedger(const JobLedger&) = delete;
  JobLedger& operator=(const JobLedger&) = delete;

  // True when `input` finished (done or failed) in this or an earlier run with the same `options` and has not
  // changed since (same size and modification time as recorded).
  bool finished(const std::string& input, const std::string& options = {}) const;
  // Its last record when finished() is true (done, or failed with the reason), else nothing.
  std::optional<Entry> finished_unchanged(const std::string& input, const std::string& options = {}) const;
  // Appends and fsyncs one record. `outputs`: the files the sink committed for it. Returns false (and writes
  // nothing) when the same status is already recorded for the unchanged input. Throws std::runtime_error when
  // the record cannot be written durably (the file is then left as it was before the call).
  // `options`: the input's own options (recorded; "" when none).
  bool done(const std::string& input, std::uint64_t frames, const std::vector<std::string>& outputs,
            const std::string& options = {});
  // The sink is about to make records of `inputs` durable in an output that other inputs share: appends a
  // "started" record for each not marked in this run yet, then one fsync, before those records are written.
  // Throws std::runtime_error when that cannot be made durable (the records must not be written then).
  void started(const std::vector<std::string>& inputs);
  // Inputs whose last record at open said started: their records in shared outputs are from an attempt that
  // never finished; the sink removes them (runtime/sink_outputs.hpp drop_records_of) before they are redone.
  const std::set<std::string>& interrupted() const { return interrupted_; }
  // An input that cannot be processed (missing, corrupt, unsupported): recorded so a restart does not retry
  // it. `frames`: those it delivered before it failed, if any. Same return and errors as done().
  bool failed(const std::string& input, const std::string& reason, std::uint64_t frames = 0,
              const std::string& options = {});

  const std::filesystem::path& path() const { return path_; }
  std::size_t finished_count() const;  // distinct inputs recorded (done or failed), changed or not
  std::size_t failed_count() const;    // of those, the ones whose last record is "failed"
  std::size_t resumed_count() const;   // records read at open
  // Inputs whose last record is "failed" and that have not changed since (a run skips them): a run over the
  // job reports them again, so a resumed run does not look clean when it is not.
  std::vector<FailedInput> failed_inputs() const;

  // The key an input is recorded under: the absolute, lexically normal path (URIs with "://" unchanged).
  static std::string key(const std::string& input);

 private:
  bool append(const std::string& input, bool failed, std::uint64_t frames, const std::vector<std::string>& outputs,
              const std::string& reason, const std::string& options);
  void write_durably(const std::string& lines, const std::string& what);  // with mu_ held
  void load();  // with mu_ held (constructor)

  std::filesystem::path path_;
  OutputLock lock_;
  int fd_ = -1;
  mutable std::mutex mu_;
  std::map<std::string, Entry> finished_;  // key(input) -> what was recorded last
  std::set<std::string> interrupted_;      // started last at open (constant afterwards)
  std::set<std::string> started_;          // marked started by this run
  std::size_t resumed_ = 0;
};

// The ledger file of a job over `uris` in `state_dir` (one per distinct job):
// <state_dir>/jobs/<pipeline>-<16 hex digits of FNV-1a 64 over the pipeline name and the sorted, distinct
// URIs, each followed by a NUL byte>.ledger, e.g. /var/lib/sluice/jobs/default-3f2a9c0d41b7e655.ledger.
// Characters of the pipeline name outside [A-Za-z0-9._-] become '_' in the file name (the hash uses the name).
std::filesystem::path job_ledger_path(const std::filesystem::path& state_dir, const std::string& pipeline,
                                      const std::vector<std::string>& uris);

}  // namespace sluice

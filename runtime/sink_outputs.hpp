#pragma once
// What every sink that writes files shares: the retry policy for writes that fail (and the health it shows),
// append-only files on a descriptor, outputs committed atomically per input (temp file, fsync, rename, fsync
// the directory), the names of per-input outputs, and the removal of temps a killed run left behind.
//
// Temporary names: `<dir>/.<final name>.sluice-tmp` (files and directories we write ourselves) or
// `<dir>/.<stem>.sluice-tmp.<ext>` (files whose writer picks the container by extension, e.g. video).
// A name that starts with '.' and holds ".sluice-tmp" is ours to remove when a sink opens that directory.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/output_lock.hpp"
#include "runtime/params.hpp"

namespace sluice::sinks {

// A write that fails is handled by what failed:
//  - the disk cannot take it (ENOSPC, EDQUOT; EFBIG: the file size limit), the device fails (EIO) or the
//    filesystem is read-only (EROFS):
//    the operation fails at once with StageError naming the path and the errno text, so the batch's frames (or
//    the input) are counted failed with that reason instead of every batch waiting out the retry. The stage's
//    health says "failing: ..." from the first such error until a write succeeds again (then delivery resumes).
//  - anything else (permission, a directory gone, EAGAIN, ...): tried again with growing delays (0.1 s doubling
//    to 2 s) while the sink's thread blocks, which back-pressures the pipeline: queues fill, file sources wait,
//    live sources drop counted frames. Each distinct failure (operation, path, errno) is logged once per
//    blocked spell; after `give_up_s` (0 = never) the operation throws StageError likewise. Once a stop is
//    requested a retry that would wait forever gives up after kStoppingGiveUpS instead, so shutdown cannot hang.
// The `write_retry_s` parameter of every sink that writes files (WriteRetry's give_up_s), declared once; `more`
// is added to its help (what else that sink says about its outputs).
ParamSpec write_retry_param(const std::string& more = {});

class WriteRetry {
 public:
  static constexpr double kStoppingGiveUpS = 30;

  explicit WriteRetry(std::string stage = "sink", double give_up_s = 30);
  // Polled between attempts; once set, an unlimited retry becomes limited (see above).
  void watch_stop(const std::atomic<bool>* stop) { stop_ = stop; }

  // Calls `attempt` (returns 0 on success or an errno value) until it succeeds or the retry gives up.
  // `what` names the operation for messages ("writing", "creating", "renaming ... to ..."), `path` the file.
  void run(std::string_view what, const std::string& path, const std::function<int()>& attempt);

  // The same for an operation whose failures are not errno values (a network peer): `attempt` returns nothing
  // on success, else whether the failure fails at once (as a full disk does) and its text.
  struct Failure {
    bool fails_fast = false;
    std::string text;
    bool storage = false;  // the local disk or device (an errno of run()): a fast one is a StorageFullError
  };
  void run_attempts(std::string_view what, const std::string& path,
                    const std::function<std::optional<Failure>()>& attempt);

  // "" while writes work; "failing: writing '/out/a.jsonl': No space left on device since 2025-06-01T12:00:00Z
  // (frames fail until a write succeeds)" after a fast failure; "blocked: writing '/out/a.jsonl': No space left on device since
  // 2025-06-01T12:00:00Z (retrying, gives up after 30 s)" while a write is being retried; "gave up: ... at <t>"
  // after giving up, until the next write succeeds. Safe from any thread.
  std::string health() const;
  double give_up_s() const { return give_up_s_; }
  const std::atomic<bool>* stop_flag() const { return stop_; }
  // True for the errors that fail at once (see above).
  static bool fails_fast(int err);

 private:
  void set_health(std::string h);
  std::string stage_;
  double give_up_s_;
  const std::atomic<bool>* stop_ = nullptr;
  std::atomic<bool> unhealthy_{false};  // health_ is not empty (checked without the lock on every success)
  mutable std::mutex mu_;
  std::string health_;
  std::string failing_since_;  // UTC time of the first fast failure of the current spell; "" when none
};

// UTC wall-clock time: "2025-06-01T12:00:00Z" (iso) or "20250601T120000" (compact, for file names).
std::string utc_iso_now();
std::string utc_compact_now();
std::string errno_text(int err);

// An append-only file on a descriptor: every write and sync goes through a WriteRetry; the pre-batch size
// can be restored when a batch gives up, so its records are not left behind half-written.
class OutputFile {
 public:
  enum class Mode { truncate, append };
  OutputFile() = default;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // Opens once; returns 0 or the errno (for callers that fail fast, e.g. at a stage's open()).
  int try_open(const std::string& path, Mode mode);
  // Opens, retrying through `retry` (a file created while the pipeline runs).
  void open(const std::string& path, Mode mode, WriteRetry& retry);
  // Writes all of `bytes` (resuming after partial writes).
  void append(std::string_view bytes, WriteRetry& retry);
  void sync(WriteRetry& retry);
  // Cuts the file back to `size` bytes (best effort: a batch that gave up takes its records back out).
  void truncate_to(std::uint64_t size) noexcept;
  // A line-oriented file opened to append to: cuts a torn last line (no '\n' at the end: a crash mid-write)
  // back to the end of the last complete line, and fsyncs; returns how many bytes were cut.
  std::uint64_t cut_torn_line(WriteRetry& retry);
  // Throws StageError when the open file no longer has a name (it, or its directory, was removed): records
  // written to it are not on disk for anyone, so they must not count as delivered.
  void require_linked() const;
  void close();  // syncs nothing; throws StageError when close() reports an error
  void close_quietly() noexcept;

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }  // bytes in the file (after open: its length)
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string path_;
};

// Fsyncs a directory (after a rename in it), through `retry`.
void sync_directory(const std::filesystem::path& dir, WriteRetry& retry);
// Renames `from` to `to` (a file or a directory) so that `to` appears complete or not at all, replacing
// what was there (a directory is swapped in with RENAME_EXCHANGE and the old one removed), then fsyncs the
// directory.
void commit_rename(const std::filesystem::path& from, const std::filesystem::path& to, WriteRetry& retry);
// Creates `dir` and its parents; throws StageError naming the path when it cannot (used at open()).
void create_directory_or_throw(const std::filesystem::path& dir);
// Takes the exclusive lock of an output (runtime/output_lock.hpp) before anything there is touched; a holder
// in another process makes it throw StageError naming that pid at once.
OutputLock lock_output(const std::filesystem::path& lock_file, const std::string& what, const WriteRetry& retry);
// Removes `.*.sluice-tmp*` entries (files and directories) of `dir` that a killed run left; returns how many.
std::size_t remove_stale_temps(const std::filesystem::path& dir, const std::string& stage);
// Takes the records of interrupted inputs out of a line file that several inputs share (jsonl per run or
// source, npy's index.jsonl) before the job redoes them, so that each input's records are there once: every
// line whose "input" (or "input_hex") names one of `inputs` (keys as JobLedger::key gives them), and a torn
// last line, go. The file is changed in place and never copied: cut back (ftruncate) when every line to go comes
// after the last one to keep; otherwise the lines to keep after the first one to go are first saved in a redo
// record `.<name>.sluice-redo` (fsync'ed, renamed into place), then the file is cut back to that first line and
// they are written again. A crash leaves the file as it was or a redo record, which the next call for `path`
// applies first (also with no `inputs`). Only that tail ever needs extra space; a temporary that could not be
// completed is removed. Does nothing (returns 0) when no line matches or the file does not exist; returns how
// many lines went. StageError when the file cannot be read or changed, or holds a line over kMaxRecordBytes.
std::size_t drop_records_of(const std::filesystem::path& path, const std::set<std::string>& inputs,
                            WriteRetry& retry, const std::string& stage);
inline constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 20;
// The temporary name of `final_name` in `dir`: `.<final_name>.sluice-tmp`.
std::filesystem::path temp_path(const std::filesystem::path& dir, const std::string& final_name);

// Names of per-input outputs, stable across runs (resuming a job must write the same names).
//
// An input's name is its file stem (the parent directory's name for an image-sequence pattern such as
// frames/%05d.png; a URL's is the last segment of its path, without query, escapes such as %20 left as they
// are), with characters outside [A-Za-z0-9._+-] replaced by '_', no leading '.', at most 100
// characters; "input" if nothing is left. The first input to claim a name keeps it; another input with the
// same stem gets `<stem>-<h>`, h = 8 hex digits of the FNV-1a 64 hash of its full URI (then `-2`, `-3`.. in
// the unlikely case that is taken too). Claims are appended to `<dir>/.sluice-names` (one JSON line each,
// {"name": .., "input": ..}, or "input_hex" for a URI that is not UTF-8; fsync'ed) before the first byte of an
// output is written, so a later run over the same directory gives every input the name it had; frames without
// an input are claimed as "source:<source name>" with the source's name as stem.
class OutputNames {
 public:
  static constexpr const char* kClaimsFile = ".sluice-names";
  // Reads `<dir>/.sluice-names` (a torn last line is ignored).
  void open(const std::filesystem::path& dir);
  std::string for_input(const std::string& uri, WriteRetry& retry);
  std::string for_source(const std::string& source_name, WriteRetry& retry);

 private:
  std::string claim(const std::string& key, const std::string& stem, WriteRetry& retry);
  std::filesystem::path dir_;
  bool torn_ = false;  // the claims file ends in a torn line: start the next one on a new line
  std::map<std::string, std::string> by_key_;   // uri (or "source:NAME") -> name
  std::map<std::string, std::string> by_name_;  // name -> uri
};

std::string safe_name(std::string_view s);     // the character rule above
std::string uri_stem(const std::string& uri);  // stem of a path or URL, made safe
std::string short_hash(std::string_view s);    // 8 hex digits of FNV-1a 64

}  // namespace sluice::sinks

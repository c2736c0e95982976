// jsonl per run (one file, or stdout) and per source (one live file per source, rotated).
#include <sys/stat.h>

#include <chrono>
#include <iostream>
#include <map>

#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/output_lock.hpp"
#include "runtime/stats.hpp"
#include "stages/sink_writers.hpp"

namespace sluice::sinks {
namespace fs = std::filesystem;
namespace {

// One file for the whole run, appended to across runs, reloads and resumed jobs (never truncated: it may hold
// results delivered before). Each batch is written and fsync'ed before its frames count as delivered; a torn
// last line left by a kill is cut back at open. A reader may tail it.
class JsonlRunWriter final : public RecordWriter {
 public:
  JsonlRunWriter(std::string path, WriteRetry& retry) : path_(std::move(path)), retry_(retry) {}

  void open(const std::set<std::string>& interrupted) override {
    if (path_ == "-") return;
    // The lock first: a second sluiced writing this file fails here, before anything is touched.
    lock_ = lock_output(OutputLock::for_file(path_), "output '" + path_ + "'", retry_);
    drop_records_of(path_, interrupted, retry_, "sink");
    if (const int err = file_.try_open(path_, OutputFile::Mode::append))
      throw StageError("cannot open '" + path_ + "' for writing: " + errno_text(err));
    file_.cut_torn_line(retry_);
  }

  void add(const FrameMeta&, const Origin&, std::string_view record) override {
    pending_ += record;
    pending_ += '\n';
  }

  void flush() override {
    if (pending_.empty()) return;
    if (path_ == "-") {
      std::cout << pending_;
      pending_.clear();
      if (!std::cout) throw StageError("writing to stdout failed");
      return;
    }
    std::uint64_t before = 0;
    try {
      reopen_if_removed();
      before = file_.size();
      file_.append(pending_, retry_);
      file_.sync(retry_);
      file_.require_linked();  // removed while we wrote: these records are nowhere a reader can find them
    } catch (...) {
      file_.truncate_to(before);
      pending_.clear();
      throw;
    }
    pending_.clear();
  }

  void discard_pending() noexcept override { pending_.clear(); }

  std::vector<std::string> finish(const InputProgress&) override {
    if (path_ == "-") {
      std::cout.flush();
      return {};
    }
    return {path_};  // every batch was fsync'ed in flush()
  }

  void close() override {
    if (path_ == "-") {
      std::cout.flush();
      if (!std::cout) throw StageError("flushing stdout failed");
      return;
    }
    if (file_.is_open()) {
      file_.sync(retry_);
      file_.close();
    }
    lock_.release();
  }

 private:
  // The file (or its directory) was removed while open: writing on would "deliver" records into a file no one
  // can read. Start a new one at the path when that works (the directory is back); otherwise fail the batch.
  void reopen_if_removed() {
    std::string removed = "'" + path_ + "' was removed while sluice wrote it (or its directory was)";
    if (file_.is_open()) {
      try {
        file_.require_linked();
        return;
      } catch (const StageError& e) {
        removed = e.what();
      }
    }
    file_.close_quietly();
    lock_.release();
    try {
      lock_ = lock_output(OutputLock::for_file(path_), "output '" + path_ + "'", retry_);
    } catch (const StageError& e) {
      throw StageError(removed + "; cannot start it again: " + e.what());
    }
    if (const int err = file_.try_open(path_, OutputFile::Mode::append)) {
      lock_.release();
      throw StageError(removed + "; cannot start it again: " + errno_text(err));
    }
    spdlog::warn("'{}' was removed while open; writing to a new file at that path", path_);
  }

  std::string path_;
  WriteRetry& retry_;
  OutputLock lock_;
  OutputFile file_;
  std::string pending_;
};

// One live file per source, `<dir>/<source>.jsonl`, appended to across runs. Rotation renames it to
// `<source>-<UTC yyyymmddThhmmss>-<n>.jsonl` (the time of the rotation, n >= 1 the smallest number not taken)
// after an fsync, fsyncs the directory, and starts a new live file.
class JsonlSourceWriter final : public RecordWriter {
 public:
  JsonlSourceWriter(fs::path dir, std::uint64_t rotate_bytes, double rotate_s, WriteRetry& retry, std::string stage)
      : dir_(std::move(dir)), rotate_bytes_(rotate_bytes),
        rotate_ns_(static_cast<std::int64_t>(rotate_s * 1e9)), retry_(retry), stage_(std::move(stage)) {}

  void open(const std::set<std::string>& interrupted) override {
    create_directory_or_throw(dir_);
    lock_ = lock_output(OutputLock::for_directory(dir_), "output directory '" + dir_.string() + "'", retry_);
    remove_stale_temps(dir_, stage_);
    if (interrupted.empty()) return;
    // An interrupted input's records may be in the live file or in one rotated since.
    std::vector<fs::path> files;
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".jsonl" && it->is_regular_file(ec)) files.push_back(it->path());
    for (const fs::path& f : files) drop_records_of(f, interrupted, retry_, stage_);
  }

  void add(const FrameMeta& f, const Origin& origin, std::string_view record) override {
    auto it = lives_.find(f.source_id);
    if (it == lives_.end()) {
      it = lives_.emplace(f.source_id, Live{}).first;
      it->second.name = safe_name(origin.source);
    }
    Live& live = it->second;
    if (live.ends.empty()) touched_.push_back(&live);
    live.pending += record;
    live.pending += '\n';
    live.ends.push_back(live.pending.size());
  }

  void flush() override {
    for (Live* live : touched_) {
      if (live->file.is_open() && !is_linked(live->file)) live->file.close_quietly();  // removed: start anew
      live->before = live->file.is_open() ? live->file.size() : 0;
    }
    try {
      for (Live* live : touched_) {
        write(*live);
        live->file.sync(retry_);  // durable before its frames count as delivered
        live->file.require_linked();
      }
    } catch (...) {
      for (Live* live : touched_) {
        live->file.truncate_to(live->before);
        if (live->file.size() == 0) live->started_ns = 0;
      }
      discard_pending();
      throw;
    }
    discard_pending();
  }

  void discard_pending() noexcept override {
    for (Live* live : touched_) {
      live->pending.clear();
      live->ends.clear();
    }
    touched_.clear();
  }

  std::vector<std::string> finish(const InputProgress& input) override {
    auto it = lives_.find(input.source_id);
    if (it == lives_.end() || !it->second.file.is_open()) return {};
    return {it->second.file.path()};  // every batch was fsync'ed in flush()
  }

  void close() override {
    std::string first_error;
    for (auto& [id, live] : lives_) {
      if (!live.file.is_open()) continue;
      try {
        live.file.sync(retry_);
        live.file.close();
      } catch (const std::exception& e) {
        live.file.close_quietly();
        if (first_error.empty()) first_error = e.what();
      }
    }
    lives_.clear();
    lock_.release();
    if (!first_error.empty()) throw StageError(first_error);
  }

 private:
  struct Live {
    std::string name;  // the source's name, made safe
    OutputFile file;
    std::string pending;
    std::vector<std::size_t> ends;  // where each pending record ends in `pending`
    std::uint64_t before = 0;       // the file's size before this batch
    std::int64_t started_ns = 0;    // steady clock when its first record was written; 0 while empty
  };

  static bool is_linked(const OutputFile& f) {
    try {
      f.require_linked();
      return true;
    } catch (const StageError&) {
      return false;
    }
  }

  void write(Live& live) {
    if (!live.file.is_open()) {
      live.file.open((dir_ / (live.name + ".jsonl")).string(), OutputFile::Mode::append, retry_);
      live.file.cut_torn_line(retry_);  // an earlier run killed mid-record
      live.before = live.file.size();
      if (live.file.size() > 0) live.started_ns = now_ns();  // an earlier run's file: its age counts from now
    }
    const std::int64_t now = now_ns();
    std::size_t segment = 0, begin = 0;  // the part of `pending` not written yet; the record being placed
    for (const std::size_t end : live.ends) {
      const std::uint64_t in_file = live.file.size() + (begin - segment);  // bytes before this record
      const bool too_big = rotate_bytes_ > 0 && in_file + (end - begin) > rotate_bytes_;
      const bool too_old = rotate_ns_ > 0 && live.started_ns != 0 && now - live.started_ns >= rotate_ns_;
      if (in_file > 0 && (too_big || too_old)) {
        live.file.append(std::string_view(live.pending).substr(segment, begin - segment), retry_);
        rotate(live);
        segment = begin;
      }
      if (live.file.size() + (begin - segment) == 0) live.started_ns = now;
      begin = end;
    }
    live.file.append(std::string_view(live.pending).substr(segment), retry_);
  }

  void rotate(Live& live) {
    live.file.sync(retry_);
    const std::string path = live.file.path();
    live.file.close();
    const std::string stamp = utc_compact_now();
    fs::path rotated;
    std::error_code ec;
    for (int n = 1;; ++n) {
      rotated = dir_ / (live.name + "-" + stamp + "-" + std::to_string(n) + ".jsonl");
      if (!fs::exists(rotated, ec)) break;
    }
    commit_rename(path, rotated, retry_);
    live.file.open(path, OutputFile::Mode::truncate, retry_);
    live.before = 0;
    live.started_ns = 0;
  }

  fs::path dir_;
  std::uint64_t rotate_bytes_;
  std::int64_t rotate_ns_;
  WriteRetry& retry_;
  std::string stage_;
  OutputLock lock_;
  std::map<std::uint32_t, Live> lives_;  // by source id (map: Live addresses stay put)
  std::vector<Live*> touched_;           // lives with pending records, in first-touch order
};

}  // namespace

std::unique_ptr<RecordWriter> make_jsonl_run_writer(std::string path, WriteRetry& retry) {
  return std::make_unique<JsonlRunWriter>(std::move(path), retry);
}

std::unique_ptr<RecordWriter> make_jsonl_source_writer(fs::path dir, std::uint64_t rotate_bytes, double rotate_s,
                                                       WriteRetry& retry, std::string stage) {
  return std::make_unique<JsonlSourceWriter>(std::move(dir), rotate_bytes, rotate_s, retry, std::move(stage));
}

}  // namespace sluice::sinks

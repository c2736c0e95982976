// Per-input outputs: jsonl per file (`<dir>/<name>.jsonl`) and directory (`<dir>/<name>.json`). Records of an
// input go to a temporary file as its frames arrive; when the input is finished they are committed in one
// atomic rename, so a reader sees an input's whole output or none of it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/source_control.hpp"
#include "stages/sink_writers.hpp"

namespace sluice::sinks {
namespace fs = std::filesystem;
namespace {

class PerInputWriter : public RecordWriter {
 public:
  PerInputWriter(fs::path dir, WriteRetry& retry, std::string stage)
      : dir_(std::move(dir)), retry_(retry), stage_(std::move(stage)) {}

  void open(const std::set<std::string>&) override {  // per-input outputs: an interrupted one was a temp
    create_directory_or_throw(dir_);
    // The lock first: a second run or daemon over this directory fails here, before it removes a temp.
    lock_ = lock_output(OutputLock::for_directory(dir_), "output directory '" + dir_.string() + "'", retry_);
    remove_stale_temps(dir_, stage_);
    names_.open(dir_);
  }

  void add(const FrameMeta& f, const Origin& origin, std::string_view record) override {
    const std::uint64_t key = f.input != 0 ? f.input : (std::uint64_t{1} << 32) | f.source_id;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      it = entries_.emplace(key, Entry{}).first;
      it->second.tracked = f.input != 0;
      it->second.source = origin.source;
      it->second.uri = origin.uri;
    }
    Entry& e = it->second;
    if (e.pending.empty()) touched_.push_back(&e);
    append_record(e, record);
    ++e.pending_records;
  }

  void flush() override {
    for (Entry* e : touched_) e->before = e->file.is_open() ? e->file.size() : 0;
    try {
      for (Entry* e : touched_) {
        if (!e->file.is_open()) create(*e);
        e->file.append(e->pending, retry_);
        e->file.sync(retry_);  // durable (in the temp) before its frames count as delivered
        e->file.require_linked();
      }
    } catch (...) {
      for (Entry* e : touched_) e->file.truncate_to(e->before);
      discard_pending();
      throw;
    }
    for (Entry* e : touched_) e->records += e->pending_records;
    discard_pending();
  }

  void discard_pending() noexcept override {
    for (Entry* e : touched_) {
      e->pending.clear();
      e->pending_records = 0;
    }
    touched_.clear();
  }

  std::vector<std::string> finish(const InputProgress& input) override {
    auto it = entries_.find(input.id);
    if (it == entries_.end()) {  // none of its frames reached this sink: its output says so
      it = entries_.emplace(input.id, Entry{}).first;
      it->second.tracked = true;
      it->second.source = !input.source.empty() ? input.source : unnamed_source(input.source_id);
      it->second.uri = input.uri;
    }
    Entry& e = it->second;
    if (input.interrupted && !is_live(input.kind)) {
      // Stopped before its end: the job redoes it, so its output is not committed; what was delivered stays.
      keep_aside(e);
      entries_.erase(it);
      return {};
    }
    if (input.failed > 0) {  // records are missing: renaming it into place would say it is complete
      const std::string partial = keep_aside(e);
      entries_.erase(it);
      throw StageError(std::to_string(input.failed) + " of " + std::to_string(input.decoded) +
                       " frames failed, so its output is incomplete" +
                       (partial.empty() ? std::string(" (no records)") : "; kept as '" + partial + "'"));
    }
    std::vector<std::string> out;
    try {
      if (e.name.empty()) e.name = names_.for_input(e.uri, retry_);
      out.push_back(commit(e, &input));
      remove_stale_partial(e.name);
    } catch (const std::exception& ex) {
      const std::string partial = keep_aside(e);  // the input fails (not recorded done); a redo writes it anew
      entries_.erase(it);
      throw StageError(std::string(ex.what()) + (partial.empty() ? "" : "; its records kept as '" + partial + "'"));
    }
    entries_.erase(it);
    return out;
  }

  void close() override {
    std::string first_error;
    for (auto& [key, e] : entries_) {
      if (e.tracked) {
        keep_aside(e);  // an input that never completed: the job ledger will redo it
        continue;
      }
      try {  // frames without an input: their stream ended with the run
        if (e.name.empty()) e.name = names_.for_source(e.source, retry_);
        commit(e, nullptr);
      } catch (const std::exception& ex) {
        const std::string partial = keep_aside(e);
        if (first_error.empty())
          first_error = std::string(ex.what()) + (partial.empty() ? "" : "; its records kept as '" + partial + "'");
      }
    }
    entries_.clear();
    lock_.release();
    if (!first_error.empty()) throw StageError(first_error);
  }

 protected:
  struct Entry {
    bool tracked = false;  // frames of an input (else: a source's frames without one)
    std::string source, uri;
    std::string name;  // the output name, claimed when its first record is written
    OutputFile file;   // the records, in a temporary file
    std::string records_temp;
    std::string pending;
    std::uint64_t records = 0, pending_records = 0;
    std::uint64_t before = 0;  // the temp's size before this batch
  };

  // The record as it goes into the records file (with its separator).
  virtual void append_record(Entry& e, std::string_view record) = 0;
  // The records file of output `name`.
  virtual std::string records_file(const std::string& name) const = 0;
  // Commits `e` (its records file may be closed or absent when it has no records); returns the final path.
  // `input` is null for frames without an input.
  virtual std::string commit(Entry& e, const InputProgress* input) = 0;

  void create(Entry& e) {
    if (e.name.empty()) e.name = e.tracked ? names_.for_input(e.uri, retry_) : names_.for_source(e.source, retry_);
    e.records_temp = temp_path(dir_, records_file(e.name)).string();
    e.file.open(e.records_temp, OutputFile::Mode::truncate, retry_);
  }

  // An output that is not complete keeps its records (frames counted delivered are on disk) under a name that
  // says so: `<dir>/<records file>.partial` (e.g. a.jsonl.partial, a.json.records.partial). Returns that path,
  // or "" when there were no records. A later complete commit of the same name removes it.
  std::string keep_aside(Entry& e) noexcept {
    e.file.close_quietly();
    if (e.records_temp.empty()) return {};
    const std::string temp = std::exchange(e.records_temp, {});
    if (e.records == 0) {
      ::unlink(temp.c_str());
      return {};
    }
    const std::string partial = (dir_ / (records_file(e.name) + ".partial")).string();
    if (::rename(temp.c_str(), partial.c_str()) != 0) {
      if (errno == ENOENT) return {};  // committed after all (the failure came after the rename)
      spdlog::error("stage '{}': cannot keep the partial output '{}' as '{}': {}", stage_, temp, partial,
                    errno_text(errno));
      return temp;
    }
    const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fsync(fd);
      ::close(fd);
    }
    spdlog::warn("stage '{}': the output of '{}' is incomplete; its {} records are kept as '{}'", stage_,
                 e.tracked ? e.uri : e.source, e.records, partial);
    return partial;
  }

  void remove_stale_partial(const std::string& name) noexcept {
    const std::string partial = (dir_ / (records_file(name) + ".partial")).string();
    if (::unlink(partial.c_str()) == 0)
      spdlog::info("stage '{}': removed '{}': the input's complete output replaces it", stage_, partial);
  }

  fs::path dir_;
  WriteRetry& retry_;
  std::string stage_;
  OutputLock lock_;
  OutputNames names_;
  std::map<std::uint64_t, Entry> entries_;  // by input id, or 1<<32 | source id (map: addresses stay put)
  std::vector<Entry*> touched_;             // entries with pending records
};

// `<dir>/<name>.jsonl`: the records file is the output itself, renamed into place.
class JsonlFileWriter final : public PerInputWriter {
 public:
  using PerInputWriter::PerInputWriter;

 private:
  void append_record(Entry& e, std::string_view record) override {
    e.pending += record;
    e.pending += '\n';
  }
  std::string records_file(const std::string& name) const override { return name + ".jsonl"; }

  std::string commit(Entry& e, const InputProgress*) override {
    if (!e.file.is_open()) create(e);  // no records: an empty file still says the input was done
    e.file.sync(retry_);
    e.file.close();
    const fs::path final_path = dir_ / (e.name + ".jsonl");
    commit_rename(e.records_temp, final_path, retry_);
    e.records_temp.clear();
    return final_path.string();
  }
};

// `<dir>/<name>.json`: {"input", ["options",] "source", "frames", "delivered", "dropped", "failed", ["error",]
// "records"}.
// The records collect in `.<name>.json.records.sluice-tmp`; the result is written to `.<name>.json.sluice-tmp`
// (the head, then the records copied over) and renamed into place.
class DirectoryWriter final : public PerInputWriter {
 public:
  using PerInputWriter::PerInputWriter;

 private:
  void append_record(Entry& e, std::string_view record) override {
    e.pending += e.records + e.pending_records > 0 ? ",\n" : "\n";
    e.pending += record;
  }
  std::string records_file(const std::string& name) const override { return name + ".json.records"; }

  std::string commit(Entry& e, const InputProgress* input) override {
    if (e.file.is_open()) {
      e.file.close();
    }
    const fs::path final_path = dir_ / (e.name + ".json");
    const std::string temp = temp_path(dir_, e.name + ".json").string();
    nlohmann::ordered_json head;  // in the documented order
    if (input) {
      const std::string& source = !input->source.empty() ? input->source : e.source;
      head["input"] = input->uri;
      if (!input->options.empty()) head["options"] = input->options;
      head["source"] = source;
      head["frames"] = input->decoded;
      head["delivered"] = input->delivered;
      head["dropped"] = input->dropped;
      head["failed"] = input->failed;
      if (!input->error.empty()) head["error"] = input->error;
    } else {  // frames without an input: only what reached this sink is known
      head = {{"input", nullptr},       {"source", e.source},    {"frames", e.records},
              {"delivered", e.records}, {"dropped", nullptr}, {"failed", nullptr}};
    }
    std::string text = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text.pop_back();  // the closing brace: the records follow
    text += ", \"records\": [";
    OutputFile out;
    out.open(temp, OutputFile::Mode::truncate, retry_);
    try {
      out.append(text, retry_);
      if (!e.records_temp.empty()) copy_records(e.records_temp, out);
      out.append(e.records > 0 ? "\n]}\n" : "]}\n", retry_);
      out.sync(retry_);
      out.close();
      commit_rename(temp, final_path, retry_);
    } catch (...) {
      out.close_quietly();
      ::unlink(temp.c_str());
      throw;
    }
    if (!e.records_temp.empty()) ::unlink(e.records_temp.c_str());
    e.records_temp.clear();
    return final_path.string();
  }

  void copy_records(const std::string& from, OutputFile& to) {
    int fd = -1;
    retry_.run("reading", from, [&] {
      fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
      return fd < 0 ? errno : 0;
    });
    buffer_.resize(1 << 20);
    try {
      while (true) {
        ssize_t n = 0;
        retry_.run("reading", from, [&] {
          n = ::read(fd, buffer_.data(), buffer_.size());
          return n < 0 && errno != EINTR ? errno : 0;
        });
        if (n < 0) continue;  // EINTR
        if (n == 0) break;
        to.append(std::string_view(buffer_.data(), static_cast<std::size_t>(n)), retry_);
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }

  std::vector<char> buffer_;
};

}  // namespace

std::unique_ptr<RecordWriter> make_jsonl_file_writer(fs::path dir, WriteRetry& retry, std::string stage) {
  return std::make_unique<JsonlFileWriter>(std::move(dir), retry, std::move(stage));
}

std::unique_ptr<RecordWriter> make_directory_writer(fs::path dir, WriteRetry& retry, std::string stage) {
  return std::make_unique<DirectoryWriter>(std::move(dir), retry, std::move(stage));
}

}  // namespace sluice::sinks

#include "runtime/job_ledger.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "runtime/utf8.hpp"

namespace sluice {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail(const fs::path& file, const std::string& what, int err) {
  throw std::runtime_error("job ledger " + file.string() + ": " + what + ": " + errno_text(err));
}

// fsync a directory so that an entry created in it survives a crash.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "cannot open the directory to sync it", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) fail(dir, "fsync of the directory failed", err);  // EINVAL: fs without dir sync
}

struct FileId {
  std::int64_t size = -1, mtime_ns = -1;
};

FileId stat_input(const std::string& key) {
  struct stat st {};
  if (::stat(key.c_str(), &st) != 0) return {};
  return {static_cast<std::int64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + static_cast<std::int64_t>(st.st_mtim.tv_nsec)};
}

std::string utc_now_iso8601() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::tm t{};
  ::gmtime_r(&ts.tv_sec, &t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(ts.tv_nsec / 1'000'000));
  return buf;
}

// One ledger line (with its '\n'): input, size, mtime_ns, status, then `fields` in their order, at, and
// input_hex for a key that is not UTF-8. Invalid UTF-8 elsewhere (outputs, reason) is replaced: informational
// only; the input itself is kept exactly (input_hex).
std::string record_line(const std::string& key, const FileId& id, const char* status,
                        const nlohmann::ordered_json& fields) {
  nlohmann::ordered_json j;
  j["input"] = key;
  j["size"] = id.size;
  j["mtime_ns"] = id.mtime_ns;
  j["status"] = status;
  for (const auto& [name, value] : fields.items()) j[name] = value;
  j["at"] = utc_now_iso8601();
  if (!valid_utf8(key)) j["input_hex"] = to_hex(key);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\0'; });
}

// An integer field of a record. A float (1e20) or an integer past int64 is refused, never converted: the
// conversion of an out-of-range float is undefined behaviour (found by fuzz/ledger_fuzz.cpp).
std::int64_t int64_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) throw std::runtime_error(std::string("\"") + key + "\" is not an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    throw std::runtime_error(std::string("\"") + key + "\" is out of range");
  return v.get<std::int64_t>();
}

// Creates `dir` and any missing parents, syncing each parent whose entries changed.
void create_dirs_durably(const fs::path& dir) {
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty() && !fs::exists(p); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  if (missing.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("job ledger: cannot create " + dir.string() + ": " + ec.message());
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const fs::path parent = it->parent_path().empty() ? fs::path(".") : it->parent_path();
    fsync_dir(parent);
  }
}

}  // namespace

std::string JobLedger::key(const std::string& input) {
  if (input.empty() || input.find("://") != std::string::npos) return input;
  return fs::absolute(fs::path(input)).lexically_normal().string();
}

JobLedger::JobLedger(fs::path file, std::chrono::milliseconds lock_wait) : path_(std::move(file)) {
  const fs::path dir = path_.parent_path().empty() ? fs::path(".") : path_.parent_path();
  create_dirs_durably(dir);
  // The lock before the ledger itself: a second run of the job fails here, having created or cut nothing.
  lock_ = OutputLock(OutputLock::for_file(path_), "job ledger '" + path_.string() + "'", lock_wait);

  bool created = false;
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ >= 0) {
    created = true;
  } else if (errno == EEXIST) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  }
  if (fd_ < 0) fail(path_, "cannot open", errno);

  try {
    if (created) fsync_dir(dir);
    std::lock_guard lock(mu_);
    load();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

JobLedger::~JobLedger() {
  if (fd_ >= 0) ::close(fd_);
}

JobLedger::Parsed JobLedger::parse(std::string_view text, const std::string& name) {
  Parsed out;
  if (text.size() > kMaxBytes)
    throw std::runtime_error("job ledger " + name + ": larger than the limit of " + std::to_string(kMaxBytes) +
                             " bytes; not a ledger sluice wrote?");
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line = text.substr(pos, (nl == std::string_view::npos ? text.size() : nl) - pos);
    const std::string where = name + ":" + std::to_string(line_no);
    if (nl == std::string_view::npos) {  // a write cut short by a crash (or NUL bytes left by a power loss)
      out.torn_at = pos;
      out.torn_line = line_no;
      out.torn_why = blank(line) ? "it holds only blank or NUL bytes" : "it has no line end";
      break;
    }
    if (line.size() > kMaxLineBytes)
      throw std::runtime_error("job ledger " + where + ": the line is longer than the limit of " +
                               std::to_string(kMaxLineBytes) + " bytes; not a ledger record");
    const std::size_t next = nl + 1;
    if (blank(line)) {
      pos = next;
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      if (blank(text.substr(next))) {  // the last line: a write cut short by a crash
        out.torn_at = pos;
        out.torn_line = line_no;
        out.torn_why = "it is not JSON";
        break;
      }
      throw std::runtime_error("job ledger " + where +
                               ": not a JSON record; fix or remove the line, or delete the ledger to redo the whole job");
    }
    try {
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
      std::string input;
      if (auto h = j.find("input_hex"); h != j.end()) {
        auto raw = from_hex(h->get<std::string>());
        if (!raw) throw std::runtime_error("\"input_hex\" is not hex");
        input = std::move(*raw);
      } else {
        input = j.at("input").get<std::string>();
      }
      if (input.empty()) throw std::runtime_error("\"input\" is empty");
      const std::string status = j.at("status").get<std::string>();
      if (status != "done" && status != "failed" && status != "started")  // parsed JSON: valid UTF-8, safe to show
        throw std::runtime_error("\"status\" is '" + status + "', not done, failed or started");
      if (status == "started") {
        int64_field(j, "size");
        int64_field(j, "mtime_ns");
        out.entries.erase(input);
        out.interrupted.insert(std::move(input));
        pos = next;
        continue;
      }
      out.interrupted.erase(input);
      Entry e;
      e.size = int64_field(j, "size");
      e.mtime_ns = int64_field(j, "mtime_ns");
      e.failed = status == "failed";
      if (auto f = j.find("frames"); f != j.end() && f->is_number_unsigned()) e.frames = f->get<std::uint64_t>();
      if (auto r = j.find("reason"); r != j.end() && r->is_string()) e.reason = r->get<std::string>();
      if (auto o = j.find("options"); o != j.end()) {
        if (!o->is_string()) throw std::runtime_error("\"options\" is not a string");
        e.options = o->get<std::string>();
      }
      out.entries[std::move(input)] = std::move(e);
      ++out.records;
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("job ledger " + where + ": not a ledger record (" + e.what() + ")");
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("job ledger " + where + ": not a ledger record (" + e.what() + ")");
    }
    pos = next;
  }
  return out;
}

void JobLedger::load() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat", errno);
  if (static_cast<std::uint64_t>(st.st_size) > kMaxBytes)
    throw std::runtime_error("job ledger " + path_.string() + ": " + std::to_string(st.st_size) +
                             " bytes, larger than the limit of " + std::to_string(kMaxBytes) +
                             " bytes; not a ledger sluice wrote? (delete it to redo the whole job)");
  std::string text;
  {
    char buf[1 << 16];
    off_t off = 0;
    for (;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, off);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(path_, "cannot read", errno);
      }
      if (n == 0) break;
      if (text.size() + static_cast<std::size_t>(n) > kMaxBytes)
        throw std::runtime_error("job ledger " + path_.string() + ": grew past the limit of " +
                                 std::to_string(kMaxBytes) + " bytes while being read");
      text.append(buf, static_cast<std::size_t>(n));
      off += n;
    }
  }

  Parsed parsed = parse(text, path_.string());
  finished_ = std::move(parsed.entries);
  interrupted_ = std::move(parsed.interrupted);
  resumed_ = parsed.records;
  if (parsed.torn_at) {
    spdlog::warn("job ledger {}:{}: the last line is torn ({}; a crash while writing it?); cutting off its {} "
                 "bytes, the input it named will be redone",
                 path_.string(), parsed.torn_line, parsed.torn_why, text.size() - *parsed.torn_at);
    if (::ftruncate(fd_, static_cast<off_t>(*parsed.torn_at)) != 0) fail(path_, "cannot cut off the torn last line", errno);
    if (::fsync(fd_) != 0) fail(path_, "fsync after cutting the torn last line failed", errno);
  }
}

bool JobLedger::finished(const std::string& input, const std::string& options) const {
  return finished_unchanged(input, options).has_value();
}

std::optional<JobLedger::Entry> JobLedger::finished_unchanged(const std::string& input,
                                                             const std::string& options) const {
  const std::string k = key(input);
  Entry e;
  {
    std::lock_guard lock(mu_);
    auto it = finished_.find(k);
    if (it == finished_.end() || it->second.options != options) return std::nullopt;
    e = it->second;
  }
  const FileId now = stat_input(k);
  if (now.size != e.size || now.mtime_ns != e.mtime_ns) return std::nullopt;
  return e;
}

bool JobLedger::done(const std::string& input, std::uint64_t frames, const std::vector<std::string>& outputs,
                     const std::string& options) {
  return append(input, false, frames, outputs, {}, options);
}

bool JobLedger::failed(const std::string& input, const std::string& reason, std::uint64_t frames,
                       const std::string& options) {
  return append(input, true, frames, {}, reason, options);
}

bool JobLedger::append(const std::string& input, bool failed, std::uint64_t frames,
                       const std::vector<std::string>& outputs, const std::string& reason, const std::string& options) {
  const std::string k = key(input);
  const FileId id = stat_input(k);

  nlohmann::ordered_json fields = {{"frames", frames}, {"outputs", outputs}, {"reason", reason}};
  if (!options.empty()) fields["options"] = options;
  const std::string line = record_line(k, id, failed ? "failed" : "done", fields);

  std::lock_guard lock(mu_);
  if (fd_ < 0) throw std::runtime_error("job ledger " + path_.string() + " is closed");
  if (auto it = finished_.find(k); it != finished_.end() && it->second.failed == failed &&
                                   it->second.size == id.size && it->second.mtime_ns == id.mtime_ns &&
                                   it->second.options == options) {
    spdlog::debug("job ledger {}: {} is already recorded as {}", path_.string(), k, failed ? "failed" : "done");
    return false;
  }

  write_durably(line, "the record for " + k);
  finished_[k] = Entry{id.size, id.mtime_ns, failed, frames, reason, options};
  return true;
}

void JobLedger::started(const std::vector<std::string>& inputs) {
  std::string lines;
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mu_);
    for (const std::string& input : inputs) {
      std::string k = key(input);
      if (started_.count(k) || std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      keys.push_back(std::move(k));
    }
  }
  if (keys.empty()) return;
  for (const std::string& k : keys) {
    lines += record_line(k, stat_input(k), "started", nlohmann::ordered_json::object());
  }
  std::lock_guard lock(mu_);
  if (fd_ < 0) throw std::runtime_error("job ledger " + path_.string() + " is closed");
  write_durably(lines, keys.size() == 1 ? "the start of " + keys.front() : "the start of " + std::to_string(keys.size()) + " inputs");
  started_.insert(keys.begin(), keys.end());
}

// One write(2) of whole lines, then fsync; on failure the file is cut back to where it was.
void JobLedger::write_durably(const std::string& lines, const std::string& what) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat", errno);
  const off_t before = st.st_size;
  ssize_t n;
  do {
    n = ::write(fd_, lines.data(), lines.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(lines.size())) {
    const int err = n < 0 ? errno : ENOSPC;  // a short write on a regular file: the disk is full
    if (n > 0 && ::ftruncate(fd_, before) == 0) (void)::fsync(fd_);  // take the partial line back
    fail(path_, "cannot append " + what, err);
  }
  if (::fsync(fd_) != 0) fail(path_, "fsync of " + what + " failed", errno);
}

std::size_t JobLedger::finished_count() const {
  std::lock_guard lock(mu_);
  return finished_.size();
}

std::size_t JobLedger::failed_count() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(finished_.begin(), finished_.end(), [](const auto& kv) { return kv.second.failed; }));
}

std::vector<JobLedger::FailedInput> JobLedger::failed_inputs() const {
  std::vector<FailedInput> out;
  std::lock_guard lock(mu_);
  for (const auto& [input, e] : finished_) {
    if (!e.failed) continue;
    const FileId now = stat_input(input);
    if (now.size == e.size && now.mtime_ns == e.mtime_ns) out.push_back({input, e.reason, e.frames});
  }
  return out;
}

std::size_t JobLedger::resumed_count() const {
  std::lock_guard lock(mu_);
  return resumed_;
}

fs::path job_ledger_path(const fs::path& state_dir, const std::string& pipeline, const std::vector<std::string>& uris) {
  std::vector<std::string> sorted = uris;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  auto feed = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    h ^= 0;  // the NUL separator
    h *= 0x100000001b3ull;
  };
  feed(pipeline);
  for (const auto& u : sorted) feed(u);

  std::string name;
  for (char c : pipeline) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    name += ok ? c : '_';
  }
  if (name.empty() || name == "." || name == "..") name = "job";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return state_dir / "jobs" / (name + "-" + hex + ".ledger");
}

}  // namespace sluice

#include "runtime/sink_outputs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/inputs.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/utf8.hpp"

namespace sluice::sinks {

ParamSpec write_retry_param(const std::string& more) {
  return {"write_retry_s", ParamType::number, "30",
          "a write that fails for a reason that may pass (permission, directory gone) blocks the sink and is "
          "retried every 0.1 s growing to 2 s; after this many seconds its frames (or its input) are counted failed "
          "with the path and reason; 0 = retry until it works (30 s once a stop was requested). A full disk, EIO "
          "and a read-only filesystem fail at once instead" + (more.empty() ? "" : ". " + more),
          0.0};
}
namespace fs = std::filesystem;

namespace {

std::string utc_format(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

std::string utc_iso_now() { return utc_format("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_compact_now() { return utc_format("%Y%m%dT%H%M%S"); }
std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// ---- WriteRetry ----------------------------------------------------------------------------------------

WriteRetry::WriteRetry(std::string stage, double give_up_s) : stage_(std::move(stage)), give_up_s_(give_up_s) {}

void WriteRetry::set_health(std::string h) {
  std::lock_guard lock(mu_);
  health_ = std::move(h);
  unhealthy_.store(!health_.empty(), std::memory_order_relaxed);
}

std::string WriteRetry::health() const {
  std::lock_guard lock(mu_);
  return health_;
}

bool WriteRetry::fails_fast(int err) {
  return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EIO || err == EROFS;
}

void WriteRetry::run(std::string_view what, const std::string& path, const std::function<int()>& attempt) {
  run_attempts(what, path, [&]() -> std::optional<Failure> {
    const int err = attempt();
    if (err == 0) return std::nullopt;
    return Failure{fails_fast(err), errno_text(err), true};
  });
}

void WriteRetry::run_attempts(std::string_view what, const std::string& path,
                              const std::function<std::optional<Failure>()>& attempt) {
  std::optional<Failure> failure = attempt();
  if (!failure) {
    // After a fast failure only a write that succeeds proves the disk takes data again (opening a file does not).
    if (unhealthy_.load(std::memory_order_relaxed) && (failing_since_.empty() || what == "writing")) {
      if (!failing_since_.empty())
        spdlog::info("stage '{}': {} '{}' works again (writes failed since {})", stage_, what, path, failing_since_);
      failing_since_.clear();
      set_health({});
    }
    return;
  }
  if (failure->fails_fast) {
    // Waiting does not make space: fail this operation now, stay unhealthy until a write works.
    const std::string reason = std::string(what) + " '" + path + "' failed: " + failure->text;
    if (failing_since_.empty()) {
      failing_since_ = utc_iso_now();
      spdlog::error("stage '{}': {}; frames fail until a write succeeds", stage_, reason);
    }
    set_health("failing: " + reason + " since " + failing_since_ + " (frames fail until a write succeeds)");
    if (failure->storage) throw StorageFullError(reason);
    throw StageError(reason);
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const std::string since = utc_iso_now();
  const std::string op = std::string(what) + " '" + path + "'";
  std::set<std::string> logged;  // failures already logged in this blocked spell
  double delay = 0.1;
  while (true) {
    const bool stopping = stop_ && stop_->load(std::memory_order_relaxed);
    const double limit = give_up_s_ > 0 ? give_up_s_ : stopping ? kStoppingGiveUpS : 0;
    const std::string limit_text = limit > 0 ? "gives up after " + seconds_text(limit) : "retrying until it works";
    set_health("blocked: " + op + ": " + failure->text + " since " + since + " (" + limit_text + ")");
    if (logged.insert(failure->text).second)
      spdlog::warn("stage '{}': {} failed: {}; retrying, the pipeline waits ({})", stage_, op, failure->text,
                   limit_text);
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    if (limit > 0 && elapsed >= limit) {
      const std::string reason = op + " failed: " + failure->text;
      set_health("gave up: " + reason + " at " + utc_iso_now() + " (blocked since " + since + ")");
      throw StageError(reason + " (gave up after " + seconds_text(limit) + " of retries)");
    }
    const double wait = limit > 0 ? std::min(delay, limit - elapsed) : delay;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(wait, 0.0)));
    delay = std::min(delay * 2, 2.0);
    failure = attempt();
    if (!failure) {
      spdlog::info("stage '{}': {} works again after {:.1f} s", stage_, op,
                   std::chrono::duration<double>(clock::now() - start).count());
      failing_since_.clear();
      set_health({});
      return;
    }
    if (failure->fails_fast) {
      const std::string reason = op + " failed: " + failure->text;
      if (failing_since_.empty()) failing_since_ = utc_iso_now();
      set_health("failing: " + reason + " since " + failing_since_ + " (frames fail until a write succeeds)");
      if (failure->storage) throw StorageFullError(reason);
      throw StageError(reason);
    }
  }
}

// ---- OutputFile ----------------------------------------------------------------------------------------

OutputFile::OutputFile(OutputFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(o.size_), path_(std::move(o.path_)) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    close_quietly();
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    path_ = std::move(o.path_);
  }
  return *this;
}

OutputFile::~OutputFile() { close_quietly(); }

int OutputFile::try_open(const std::string& path, Mode mode) {
  close_quietly();
  // Always O_APPEND: after truncate_to() the next write lands at the new end, never past a hole. Read access
  // too: cut_torn_line() reads the tail (a device or FIFO that refuses it is opened write-only).
  const int base = O_CREAT | O_APPEND | O_CLOEXEC | (mode == Mode::truncate ? O_TRUNC : 0);
  int fd = ::open(path.c_str(), O_RDWR | base, 0644);
  if (fd < 0 && (errno == EACCES || errno == EINVAL || errno == ENXIO)) fd = ::open(path.c_str(), O_WRONLY | base, 0644);
  if (fd < 0) return errno;
  struct stat st {};
  size_ = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
  fd_ = fd;
  path_ = path;
  return 0;
}

void OutputFile::open(const std::string& path, Mode mode, WriteRetry& retry) {
  retry.run("creating", path, [&] { return try_open(path, mode); });
}

void OutputFile::append(std::string_view bytes, WriteRetry& retry) {
  std::size_t done = 0;
  retry.run("writing", path_, [&] {
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      done += static_cast<std::size_t>(n);
      size_ += static_cast<std::uint64_t>(n);
    }
    return 0;
  });
}

void OutputFile::sync(WriteRetry& retry) {
  retry.run("syncing", path_, [&] {
    if (::fsync(fd_) == 0) return 0;
    // EINVAL/EROFS: a special file that does not sync (a pipe, /dev/null): nothing to wait for.
    return errno == EINVAL || errno == EROFS ? 0 : errno;
  });
}

void OutputFile::truncate_to(std::uint64_t size) noexcept {
  if (fd_ < 0 || size >= size_) return;
  if (::ftruncate(fd_, static_cast<off_t>(size)) == 0) size_ = size;
}

std::uint64_t OutputFile::cut_torn_line(WriteRetry& retry) {
  if (fd_ < 0 || size_ == 0) return 0;
  char last = 0;
  const ssize_t got = ::pread(fd_, &last, 1, static_cast<off_t>(size_ - 1));
  if (got != 1) {  // cannot read it back (write-only): leave it; the next record starts on a line of its own
    spdlog::warn("'{}': cannot read its last byte to check for a torn line: {}", path_,
                 got < 0 ? errno_text(errno) : std::string("short read"));
    return 0;
  }
  if (last == '\n') return 0;
  // Find the last '\n' before the end, a chunk at a time from the back.
  std::uint64_t keep = 0;
  char buf[1 << 16];
  for (std::uint64_t end = size_; end > 0 && keep == 0;) {
    const std::uint64_t begin = end > sizeof buf ? end - sizeof buf : 0;
    const ssize_t n = ::pread(fd_, buf, static_cast<std::size_t>(end - begin), static_cast<off_t>(begin));
    if (n != static_cast<ssize_t>(end - begin)) return 0;  // not readable after all: cut nothing
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        keep = begin + static_cast<std::uint64_t>(i) + 1;
        break;
      }
    end = begin;
  }
  const std::uint64_t cut = size_ - keep;
  retry.run("cutting a torn last line of", path_,
            [&] { return ::ftruncate(fd_, static_cast<off_t>(keep)) == 0 ? 0 : errno; });
  size_ = keep;
  sync(retry);
  spdlog::warn("'{}': cut off a torn last line ({} bytes, written by a run that was killed mid-record)", path_, cut);
  return cut;
}

void OutputFile::require_linked() const {
  struct stat st {};
  if (fd_ < 0) return;
  if (::fstat(fd_, &st) != 0) throw StageError("cannot stat '" + path_ + "': " + errno_text(errno));
  if (S_ISREG(st.st_mode) && st.st_nlink == 0)
    throw StageError("'" + path_ + "' was removed while sluice wrote it (or its directory was): records written "
                     "to it are not on disk for anyone");
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR)
    throw StageError("closing '" + path_ + "' failed: " + errno_text(errno));
}

void OutputFile::close_quietly() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

// ---- directories and renames ---------------------------------------------------------------------------

void sync_directory(const fs::path& dir, WriteRetry& retry) {
  const std::string d = dir.empty() ? std::string(".") : dir.string();
  retry.run("syncing directory", d, [&] {
    const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    const int rc = ::fsync(fd);
    const int err = rc == 0 || errno == EINVAL ? 0 : errno;
    ::close(fd);
    return err;
  });
}

void commit_rename(const fs::path& from, const fs::path& to, WriteRetry& retry) {
  retry.run("renaming to '" + to.string() + "'", from.string(), [&] {
    if (::rename(from.c_str(), to.c_str()) == 0) return 0;
    const int err = errno;
    std::error_code ec;
    if ((err == ENOTEMPTY || err == EEXIST) && fs::is_directory(from, ec)) {
      // A directory from an earlier run is there: swap ours in atomically, then remove the old one (which now
      // has the temporary name, so a crash before the removal leaves a stale temp for the next open()).
      if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) return errno;
      fs::remove_all(from, ec);
      return 0;
    }
    return err;
  });
  sync_directory(to.parent_path(), retry);
}

void create_directory_or_throw(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw StageError("cannot create directory '" + dir.string() + "': " + ec.message());
  if (!fs::is_directory(dir, ec)) throw StageError("'" + dir.string() + "' is not a directory");
}

OutputLock lock_output(const fs::path& lock_file, const std::string& what, const WriteRetry& retry) {
  try {
    return OutputLock(lock_file, what, std::chrono::seconds(60), retry.stop_flag());
  } catch (const std::runtime_error& e) {
    throw StageError(e.what());
  }
}

std::size_t remove_stale_temps(const fs::path& dir, const std::string& stage) {
  std::error_code ec;
  std::size_t removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() < 2 || name[0] != '.' || name.find(".sluice-tmp") == std::string::npos) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (rm) {
      spdlog::warn("stage '{}': cannot remove the stale temporary '{}': {}", stage, it->path().string(), rm.message());
    } else {
      spdlog::info("stage '{}': removed '{}', left by a run that did not finish it", stage, it->path().string());
      ++removed;
    }
  }
  return removed;
}

namespace {

// Calls `line(text, terminated)` for each line of `path` (without its '\n'); false when the file is missing.
bool for_each_line(const fs::path& path, const std::function<void(std::string_view, bool)>& line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return false;
    throw StageError("cannot read '" + path.string() + "'");
  }
  std::string pending;
  std::size_t line_no = 0;
  std::vector<char> buf(std::size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::string_view chunk(buf.data(), static_cast<std::size_t>(in.gcount()));
    for (std::size_t nl; (nl = chunk.find('\n')) != std::string_view::npos; chunk.remove_prefix(nl + 1)) {
      ++line_no;
      if (pending.empty()) {
        line(chunk.substr(0, nl), true);
      } else {
        pending.append(chunk.substr(0, nl));
        line(pending, true);
        pending.clear();
      }
    }
    pending.append(chunk);
    if (pending.size() > kMaxRecordBytes)
      throw StageError("'" + path.string() + "': line " + std::to_string(line_no + 1) + " is longer than " +
                       std::to_string(kMaxRecordBytes >> 20) + " MiB; not a file of sluice records");
  }
  if (in.bad()) throw StageError("reading '" + path.string() + "' failed");
  if (!pending.empty()) line(pending, false);
  return true;
}

// The job ledger's key of the input a record names, or "" when it names none.
std::string record_input(std::string_view line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return {};
  if (auto h = j.find("input_hex"); h != j.end() && h->is_string()) {
    auto raw = from_hex(h->get<std::string>());
    return raw ? JobLedger::key(*raw) : std::string();
  }
  if (auto i = j.find("input"); i != j.end() && i->is_string()) return JobLedger::key(i->get<std::string>());
  return {};
}

}  // namespace

namespace {

// Taking records out of a shared line file needs no copy of it. When every record to go comes after the last one
// to keep (one input decoded at a time), the file is cut back with ftruncate: atomic, no space. Otherwise the
// records to keep that follow the first one to go (the "tail": usually a small part of the file) are written to a
// redo record `.<name>.sluice-redo` (a temporary fsync'ed and renamed into place), and only then is the file cut
// back to that first record and the tail written again after it. Applying a redo record is idempotent (cut to
// the same length, write the same bytes), so a crash at any point leaves the file as it was (no redo record yet)
// or a redo record that the next open applies again; the records it holds are never lost.
fs::path redo_path(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  return dir / ("." + path.filename().string() + ".sluice-redo");
}

// An open descriptor of `path` for writing, refused when it is not a regular file (O_NONBLOCK: never waits).
int open_regular_for_writing(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw StageError("cannot open '" + path.string() + "' for writing: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw StageError("'" + path.string() + "' is not a regular file");
  }
  return fd;
}

// Cuts `fd` (the file `path`) to `size` bytes and fsyncs it.
void cut_to(int fd, const fs::path& path, std::uint64_t size, WriteRetry& retry) {
  retry.run("cutting back", path.string(), [&] { return ::ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno; });
  retry.run("syncing", path.string(), [&] { return ::fsync(fd) == 0 ? 0 : errno; });
}

void write_at(int fd, const fs::path& path, std::string_view bytes, std::uint64_t offset, WriteRetry& retry) {
  std::size_t done = 0;
  retry.run("writing", path.string(), [&] {
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      done += static_cast<std::size_t>(n);
    }
    return 0;
  });
}

// Applies the redo record of `path` if there is one (left by a run that was killed or failed while taking records
// out), then removes it. StageError when it cannot: the record is then kept for the next open.
void apply_redo(const fs::path& path, WriteRetry& retry, const std::string& stage) {
  const fs::path redo = redo_path(path);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(redo, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_regular_file(status))  // never opened: a FIFO there must not block the sink
    throw StageError("'" + redo.string() + "' is not a regular file; it is not a redo record sluice wrote");
  const std::string kept_note = " (the records it holds stay in '" + redo.string() + "' for the next open)";
  std::ifstream in(redo, std::ios::binary);
  std::string header;  // {"cut":N}: read a byte at a time, never more than 256 of them
  char c = 0;
  while (header.size() <= 256 && in.get(c) && c != '\n') header += c;
  if (!in || header.size() > 256)
    throw StageError("cannot read the redo record '" + redo.string() + "'" + kept_note);
  const auto h = nlohmann::json::parse(header, nullptr, false);
  if (!h.is_object() || !h.contains("cut") || !h["cut"].is_number_unsigned())
    throw StageError("the redo record '" + redo.string() + "' is not one sluice wrote" + kept_note);
  const std::uint64_t cut = h["cut"].get<std::uint64_t>();
  const int fd = open_regular_for_writing(path);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_later{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < cut)
    throw StageError("'" + path.string() + "' is shorter than its redo record says (" + std::to_string(cut) +
                     " bytes); it was changed by something else" + kept_note);
  try {
    cut_to(fd, path, cut, retry);
    std::vector<char> buf(std::size_t{1} << 20);
    std::uint64_t at = cut;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto got = static_cast<std::size_t>(in.gcount());
      write_at(fd, path, std::string_view(buf.data(), got), at, retry);
      at += got;
    }
    if (in.bad()) throw StageError("reading the redo record '" + redo.string() + "' failed");
    retry.run("syncing", path.string(), [&] { return ::fsync(fd) == 0 ? 0 : errno; });
  } catch (const StageError& e) {
    throw StageError(std::string(e.what()) + kept_note);
  }
  if (!fs::remove(redo, ec) && ec) throw StageError("cannot remove '" + redo.string() + "': " + ec.message());
  sync_directory(redo.parent_path(), retry);
  spdlog::info("stage '{}': '{}' completed from its redo record", stage, path.string());
}

}  // namespace

std::size_t drop_records_of(const fs::path& path, const std::set<std::string>& inputs, WriteRetry& retry,
                            const std::string& stage) {
  apply_redo(path, retry, stage);  // a run that stopped half-way through this: finish it first
  if (inputs.empty()) return 0;
  auto dropped = [&](std::string_view text, bool terminated) {
    return !terminated || inputs.count(record_input(text)) > 0;
  };
  // Where the first record to go starts, and how many bytes of records to keep follow it.
  std::size_t drop = 0;
  std::uint64_t offset = 0, first_drop = 0, tail_bytes = 0;
  if (!for_each_line(path, [&](std::string_view text, bool terminated) {
        const std::uint64_t length = text.size() + (terminated ? 1 : 0);
        if (dropped(text, terminated)) {
          if (drop++ == 0) first_drop = offset;
        } else if (drop > 0) {
          tail_bytes += length;
        }
        offset += length;
      }))
    return 0;
  if (drop == 0) return 0;
  if (tail_bytes > 0) {
    // The tail to keep goes to the redo record first (the only extra space this needs), then it is applied.
    const fs::path redo = redo_path(path);
    const fs::path temp = temp_path(redo.parent_path(), redo.filename().string());
    try {
      OutputFile out;
      out.open(temp.string(), OutputFile::Mode::truncate, retry);
      std::string pending = nlohmann::json{{"cut", first_drop}}.dump() + "\n";
      std::uint64_t at = 0;
      for_each_line(path, [&](std::string_view text, bool terminated) {
        const std::uint64_t length = text.size() + (terminated ? 1 : 0);
        if (at > first_drop && !dropped(text, terminated)) {
          pending.append(text);
          pending += '\n';
          if (pending.size() >= (std::size_t{1} << 20)) {
            out.append(pending, retry);
            pending.clear();
          }
        }
        at += length;
      });
      out.append(pending, retry);
      out.sync(retry);
      out.close();
      commit_rename(temp, redo, retry);
    } catch (...) {
      std::error_code ec;
      fs::remove(temp, ec);  // nothing was changed yet: no temporary stays behind
      throw;
    }
    apply_redo(path, retry, stage);
  } else {
    const int fd = open_regular_for_writing(path);
    struct Close {
      int fd;
      ~Close() { ::close(fd); }
    } close_later{fd};
    cut_to(fd, path, first_drop, retry);
  }
  spdlog::info("stage '{}': took {} records of inputs that an interrupted run had started out of '{}' (they are "
               "done again)",
               stage, drop, path.string());
  return drop;
}

fs::path temp_path(const fs::path& dir, const std::string& final_name) {
  return dir / ("." + final_name + ".sluice-tmp");
}

// ---- names ---------------------------------------------------------------------------------------------

std::string safe_name(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '+' || c == '-';
    out += ok ? c : '_';
  }
  out.erase(0, out.find_first_not_of('.'));
  if (out.size() > 100) out.resize(100);
  return out.empty() ? "input" : out;
}

std::string uri_stem(const std::string& uri) {
  std::string s = uri;
  const bool url = s.find("://") != std::string::npos;
  if (url) {
    s.erase(0, s.find("://") + 3);
    if (const auto q = s.find_first_of("?#"); q != std::string::npos) s.erase(q);
  }
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const fs::path p(s);
  std::string stem = p.stem().string();
  // An image-sequence pattern: name it after its folder. In a URL a '%' is an escape (my%20clip.mp4), not one;
  // in a file's own name '[', '%', '*' and '?' are just characters ("Movie [1080p].mp4", "100%.mp4").
  if (!url && local_input_kind(s) == InputKind::image_sequence) stem = p.parent_path().filename().string();
  return safe_name(stem);
}

std::string short_hash(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, static_cast<std::uint32_t>(h ^ (h >> 32)));
  return buf;
}

void OutputNames::open(const fs::path& dir) {
  dir_ = dir;
  by_key_.clear();
  by_name_.clear();
  torn_ = false;
  std::ifstream in(dir / kClaimsFile, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string::npos) {  // a claim cut short by a crash: it was never used
      torn_ = true;
      break;
    }
    const auto j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(pos),
                                         text.begin() + static_cast<std::ptrdiff_t>(nl), nullptr, false);
    pos = nl + 1;
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) continue;
    std::string key;
    if (j.contains("input") && j["input"].is_string()) {
      key = j["input"];
    } else if (j.contains("input_hex") && j["input_hex"].is_string()) {
      auto raw = from_hex(j["input_hex"].get<std::string>());
      if (!raw || raw->empty()) continue;
      key = std::move(*raw);
    } else {
      continue;
    }
    const std::string name = j["name"];
    if (by_key_.count(key) || by_name_.count(name)) continue;
    by_key_[key] = name;
    by_name_[name] = key;
  }
}

std::string OutputNames::for_input(const std::string& uri, WriteRetry& retry) {
  return claim(uri, uri_stem(uri), retry);
}

std::string OutputNames::for_source(const std::string& source_name, WriteRetry& retry) {
  return claim("source:" + source_name, safe_name(source_name), retry);
}

std::string OutputNames::claim(const std::string& key, const std::string& stem, WriteRetry& retry) {
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  std::string name = stem;
  if (by_name_.count(name)) {
    const std::string hashed = stem + "-" + short_hash(key);
    name = hashed;
    for (int n = 2; by_name_.count(name); ++n) name = hashed + "-" + std::to_string(n);
  }
  const fs::path file = dir_ / kClaimsFile;
  std::error_code ec;
  const bool existed = fs::exists(file, ec);
  std::string line;
  if (torn_) line += '\n';
  if (valid_utf8(key)) line += nlohmann::json{{"name", name}, {"input", key}}.dump();
  else line += nlohmann::json{{"name", name}, {"input_hex", to_hex(key)}}.dump();  // kept exactly
  line += '\n';
  OutputFile out;
  out.open(file.string(), OutputFile::Mode::append, retry);
  out.append(line, retry);
  out.sync(retry);
  out.close();
  if (!existed) sync_directory(dir_, retry);
  torn_ = false;
  by_key_[key] = name;
  by_name_[name] = key;
  return name;
}

}  // namespace sluice::sinks

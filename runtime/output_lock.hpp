#pragma once
// An exclusive lock on an output or state location, taken before anything there is touched (no truncation,
// no temp cleanup, no ledger write), so that a second daemon or a second `sluiced run` over the same outputs
// fails first and changes nothing.
//
// The lock is flock(2) on a small lock file (`<dir>/.sluice-lock` for a directory, `<dir>/.<name>.sluice-lock`
// for a single file); the holder writes its pid into it, and whoever finds it taken names that pid. A lock file
// left by a process that died holds no lock (the kernel drops flocks with their last descriptor) and is simply
// taken over. flock locks belong to an open file description, so two pipelines of one process exclude each
// other too: the one that finds its own pid there (a reload whose old pipeline still drains) waits for it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace sluice {

// The output is locked by another process (or, past the wait, another pipeline of this one): "<what> is in use
// by another sluiced (pid N, lock <lock_file>)". Other failures (the lock file cannot be opened) are plain
// std::runtime_error.
class OutputInUse : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A lock taken for a pipeline before it exists or opens its outputs: a reload checks the new generation's outputs
// and locks them before it replaces the old one, and a service locks its outputs before it builds its pipeline,
// so that an output another sluiced holds refuses the change (or the start) at once. The sink's OutputLock of
// the same lock file (the same inode) takes the reservation over instead of waiting on it; one that no sink took
// over is let go when the reservation is destroyed.
class OutputLockReservation {
 public:
  // Takes the lock without waiting. Held by another process: throws OutputInUse as OutputLock does
  // ("<what> is in use by another sluiced (pid N, lock <lock_file>)"); std::runtime_error when it cannot be taken. Held by this process (the running
  // generation writes the same output): reserves nothing (reserved() is false); the sink then waits for the old
  // generation to let go, as it always did.
  OutputLockReservation(const std::filesystem::path& lock_file, const std::string& what);
  OutputLockReservation(OutputLockReservation&& o) noexcept;
  OutputLockReservation& operator=(OutputLockReservation&&) = delete;
  OutputLockReservation(const OutputLockReservation&) = delete;
  OutputLockReservation& operator=(const OutputLockReservation&) = delete;
  ~OutputLockReservation();
  bool reserved() const { return token_ != 0; }

 private:
  std::uint64_t token_ = 0;  // its entry among the reservations; 0: nothing reserved (or moved from)
};

class OutputLock {
 public:
  // Where the lock of a directory output lives.
  static std::filesystem::path for_directory(const std::filesystem::path& dir);
  // Where the lock of a single output file lives (beside it, hidden).
  static std::filesystem::path for_file(const std::filesystem::path& file);

  OutputLock() = default;
  // Takes the lock in `lock_file` (its directory must exist). Held by another process: throws
  // OutputInUse at once, "<what> is in use by another sluiced (pid N, lock <lock_file>)". Held by this
  // process: waits up to `same_process_wait` (or until `*stop` is set), then throws likewise.
  OutputLock(const std::filesystem::path& lock_file, const std::string& what,
             std::chrono::milliseconds same_process_wait = std::chrono::seconds(60),
             const std::atomic<bool>* stop = nullptr);
  OutputLock(OutputLock&& o) noexcept;
  OutputLock& operator=(OutputLock&& o) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  ~OutputLock();

  bool held() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  void release() noexcept;  // closes the descriptor (the lock goes with it); the file stays

  // The pid written in `lock_file`, or 0 when there is none (no file, empty, not a number).
  static long holder_pid(const std::filesystem::path& lock_file);

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace sluice

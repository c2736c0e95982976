#pragma once
// What sluicectl writes past stdio: whole strings to a descriptor (watch's screens), and trace's output file.
#include <string>

namespace sluice::ctl {

// Writes all of `data` to `fd` (retrying short writes and EINTR); false with errno set otherwise.
bool write_fully(int fd, const std::string& data);

// trace's output: FILE, replaced atomically by a temporary file in its directory that is renamed over it,
// or stdout for "-". The temporary file is created before the daemon is asked to record, so an unwritable
// FILE fails at once rather than after SECONDS; it is removed again on every failure.
class TraceOutput {
 public:
  TraceOutput() = default;
  TraceOutput(const TraceOutput&) = delete;
  TraceOutput& operator=(const TraceOutput&) = delete;
  ~TraceOutput() { discard(); }

  // Returns an error message, empty on success.
  std::string open(const std::string& file);
  // Writes `data` and puts it in place. Returns an error message, empty on success.
  std::string commit(const std::string& data);
  // Removes the temporary file (FILE, if it existed, stays as it was).
  void discard();

 private:
  std::string file_;
  std::string tmp_;
  int fd_ = -1;
};

}  // namespace sluice::ctl

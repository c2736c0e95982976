#pragma once
// Reading a file a user points sluice at (a pipeline, labels, a model, a .npy), never more than a stated limit:
// the file is opened without blocking (a FIFO must not hang the daemon), must be a regular file (not a
// directory, FIFO, device or socket: the error says which it is), and must not be larger than the limit (the
// error names the file, its size and the limit). A file that grows while being read is cut at the limit + 1
// and refused, so /dev/zero-like surprises cannot exhaust memory.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace sluice {

// Why a bounded read failed; the message names the file and what is wrong. Callers rethrow it as their own
// error type (ConfigError, ModelError) where they have more context.
class FileReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The limits sluice reads user files under (docs/running.md, "Limits on input files").
inline constexpr std::size_t kMaxPipelineFileBytes = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMaxLabelsFileBytes = std::size_t{16} << 20;   // 16 MiB
inline constexpr std::size_t kMaxNpyFileBytes = std::size_t{1} << 30;       // 1 GiB (f32 data: 4 GiB at most)
inline constexpr std::size_t kMaxNpyHeaderBytes = std::size_t{64} << 10;    // 64 KiB
// protobuf cannot parse a message of 2 GiB or more; larger models keep their weights in external data.
inline constexpr std::size_t kMaxModelFileBytes = (std::size_t{2} << 30) - 1;
inline constexpr std::size_t kMaxExternalDataBytes = std::size_t{16} << 30;  // 16 GiB per external data file
inline constexpr std::size_t kMaxImageFileBytes = std::size_t{1} << 30;      // 1 GiB: an image read on the CPU

// "a directory", "a FIFO", "a character device", ... for a st_mode that is not a regular file.
std::string file_kind(unsigned mode);

// "1.0 MiB" / "512 bytes": sizes in messages.
std::string describe_bytes(std::uint64_t bytes);

// An open regular file of known size (at open time). Move-only; closes on destruction.
class BoundedFile {
 public:
  // `what` names the file in messages, e.g. "pipeline file" or "labels file". Throws FileReadError.
  BoundedFile(const std::string& path, const std::string& what, std::size_t limit);
  ~BoundedFile();
  BoundedFile(BoundedFile&& other) noexcept;
  BoundedFile& operator=(BoundedFile&&) = delete;
  BoundedFile(const BoundedFile&) = delete;
  BoundedFile& operator=(const BoundedFile&) = delete;

  std::uint64_t size() const noexcept { return size_; }
  // The whole file (at most the limit). Throws FileReadError on a read error or a file that grew past the limit.
  std::string read_all();
  // `length` bytes from `offset`; both must lie inside the file. Throws FileReadError.
  std::string read_range(std::uint64_t offset, std::uint64_t length);

 private:
  std::string path_, what_;
  std::size_t limit_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole of a regular file of at most `limit` bytes. Throws FileReadError naming it.
std::string read_bounded_file(const std::string& path, const std::string& what, std::size_t limit);

// Physical memory of this machine in bytes (sysconf), or 0 when unknown.
std::uint64_t host_memory_bytes() noexcept;

}  // namespace sluice

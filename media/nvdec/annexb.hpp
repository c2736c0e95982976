#pragma once
// Annex-B elementary streams (.h264 .264 .h265 .hevc .265): which codec a file holds, and its NAL units one
// after another, read in bounded chunks. No media library and no GPU: the NVDEC reader feeds these NAL units to
// the driver's parser, and the sniffing is fuzzed on its own (fuzz/annexb_fuzz.cpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

enum class VideoCodec : std::uint8_t { unknown, h264, hevc };
std::string_view to_string(VideoCodec c) noexcept;

// The extensions (lower case, with the dot) of Annex-B files, and the codec an extension names
// (.h264 .264 -> h264; .h265 .hevc .265 -> hevc; any case; anything else -> unknown).
const std::vector<std::string_view>& annexb_extensions();
VideoCodec codec_from_extension(std::string_view path) noexcept;

// The codec the first recognisable NAL unit header in `data` belongs to: an HEVC VPS/SPS/PPS/AUD/SEI (two-byte
// header, layer 0, temporal id 1) or an H.264 IDR slice/SEI/SPS/PPS/AUD (forbidden bit 0, nal_ref_idc as the
// standard requires for the type). unknown when none is found.
VideoCodec sniff_codec(const std::uint8_t* data, std::size_t size) noexcept;

// Splits a byte stream into NAL units, each returned with its start code (00 00 01, or 00 00 00 01). Bytes
// before the first start code are skipped. Input comes from `read(buffer, capacity)` (returns the bytes read,
// 0 at the end), at most `chunk_bytes` at a time; a NAL unit longer than `max_nal_bytes` is an error, so
// memory stays bounded whatever the input.
class AnnexBSplitter {
 public:
  using ReadFn = std::function<std::size_t(std::uint8_t* buffer, std::size_t capacity)>;
  explicit AnnexBSplitter(ReadFn read, std::size_t chunk_bytes = std::size_t{1} << 20,
                          std::size_t max_nal_bytes = std::size_t{64} << 20);

  // The next NAL unit into `nal` (replacing its contents): true; false at the end of the stream. Throws
  // std::runtime_error for a NAL unit over the limit (and whatever `read` throws).
  bool next(std::vector<std::uint8_t>& nal);
  // The bytes read so far (for sniffing and messages).
  std::uint64_t bytes_read() const noexcept { return total_; }

 private:
  bool fill();  // reads one chunk; false at the end
  std::size_t find_start(std::size_t from) const noexcept;  // index of "00 00 01" at/after from, or npos

  ReadFn read_;
  std::size_t chunk_, max_nal_;
  std::vector<std::uint8_t> buf_;
  std::size_t pos_ = 0;  // start of unconsumed bytes in buf_
  bool eof_ = false, started_ = false;
  std::uint64_t total_ = 0;
};

// An Annex-B file opened for reading (a regular file, opened without blocking): its codec (from the first
// 64 KiB, else from the extension) and its NAL units. Throws InputError naming the file when it cannot be
// opened or when neither content nor extension names a codec.
class AnnexBFile {
 public:
  explicit AnnexBFile(const std::string& path, std::size_t chunk_bytes = std::size_t{1} << 20);
  ~AnnexBFile();
  AnnexBFile(const AnnexBFile&) = delete;
  AnnexBFile& operator=(const AnnexBFile&) = delete;

  VideoCodec codec() const noexcept { return codec_; }
  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t bytes_read() const noexcept { return offset_; }
  // As AnnexBSplitter::next; a read error throws InputError naming the file.
  bool next(std::vector<std::uint8_t>& nal);

 private:
  std::size_t read_chunk(std::uint8_t* buffer, std::size_t capacity);

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0, offset_ = 0;
  VideoCodec codec_ = VideoCodec::unknown;
  AnnexBSplitter splitter_;
};

}  // namespace sluice

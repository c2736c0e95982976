#include "media/nvdec/annexb.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "runtime/bounded_file.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

std::string_view to_string(VideoCodec c) noexcept {
  switch (c) {
    case VideoCodec::h264: return "h264";
    case VideoCodec::hevc: return "hevc";
    case VideoCodec::unknown: break;
  }
  return "unknown";
}

const std::vector<std::string_view>& annexb_extensions() {
  static const std::vector<std::string_view> exts{".h264", ".264", ".h265", ".hevc", ".265"};
  return exts;
}

VideoCodec codec_from_extension(std::string_view path) noexcept {
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) return VideoCodec::unknown;
  std::string ext(path.substr(dot));
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".h264" || ext == ".264") return VideoCodec::h264;
  if (ext == ".h265" || ext == ".hevc" || ext == ".265") return VideoCodec::hevc;
  return VideoCodec::unknown;
}

namespace {
// The codec a NAL header (the bytes after a start code) belongs to, when it is one of the units a stream
// starts with.
VideoCodec classify_header(const std::uint8_t* h, std::size_t left) noexcept {
  if (left >= 2 && (h[0] & 0x80) == 0 && h[1] == 0x01) {  // HEVC: layer 0, temporal id 1
    const int type = (h[0] >> 1) & 0x3f;
    if ((type >= 32 && type <= 35) || type == 39) return VideoCodec::hevc;  // VPS SPS PPS AUD prefix-SEI
  }
  if (left >= 1 && (h[0] & 0x80) == 0) {
    const int type = h[0] & 0x1f, ref_idc = (h[0] >> 5) & 3;
    if ((type == 6 || type == 9) && ref_idc == 0) return VideoCodec::h264;              // SEI, AUD
    if ((type == 5 || type == 7 || type == 8) && ref_idc != 0) return VideoCodec::h264;  // IDR, SPS, PPS
  }
  return VideoCodec::unknown;
}
}  // namespace

VideoCodec sniff_codec(const std::uint8_t* data, std::size_t size) noexcept {
  for (std::size_t i = 0; i + 3 <= size; ++i) {
    if (data[i] != 0 || data[i + 1] != 0 || data[i + 2] != 1) continue;
    const VideoCodec c = classify_header(data + i + 3, size - i - 3);
    if (c != VideoCodec::unknown) return c;
    i += 2;
  }
  return VideoCodec::unknown;
}

AnnexBSplitter::AnnexBSplitter(ReadFn read, std::size_t chunk_bytes, std::size_t max_nal_bytes)
    : read_(std::move(read)), chunk_(std::max<std::size_t>(chunk_bytes, 16)), max_nal_(std::max<std::size_t>(max_nal_bytes, 16)) {}

bool AnnexBSplitter::fill() {
  if (eof_) return false;
  // Drop what was consumed before growing the buffer: it holds at most one NAL unit plus one chunk.
  if (pos_ > 0) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  const std::size_t old = buf_.size();
  buf_.resize(old + chunk_);
  const std::size_t n = read_(buf_.data() + old, chunk_);
  buf_.resize(old + std::min(n, chunk_));
  total_ += std::min(n, chunk_);
  if (n == 0) eof_ = true;
  return n > 0;
}

std::size_t AnnexBSplitter::find_start(std::size_t from) const noexcept {
  const std::size_t n = buf_.size();
  const std::uint8_t* d = buf_.data();
  std::size_t i = from + 2;
  while (i < n) {
    const void* one = std::memchr(d + i, 1, n - i);
    if (!one) return std::string::npos;
    i = static_cast<std::size_t>(static_cast<const std::uint8_t*>(one) - d);
    if (d[i - 1] == 0 && d[i - 2] == 0) return i - 2;
    ++i;
  }
  return std::string::npos;
}

bool AnnexBSplitter::next(std::vector<std::uint8_t>& nal) {
  // The start of this NAL unit: the first start code (bytes before it are not part of any unit).
  if (!started_) {
    while (true) {
      const std::size_t s = find_start(pos_);
      if (s != std::string::npos) {
        pos_ = s;
        started_ = true;
        break;
      }
      // Keep the last two bytes: they may begin a start code that the next chunk completes.
      if (buf_.size() >= 2) pos_ = buf_.size() - 2;
      if (!fill()) return false;
    }
  }
  if (pos_ >= buf_.size() && !fill()) return false;
  std::size_t searched = pos_ + 3;  // start codes from here on are looked for (pos_ holds this unit's own)
  while (true) {
    std::size_t end = find_start(searched);
    if (end != std::string::npos) {
      if (end > pos_ + 3 && buf_[end - 1] == 0) --end;  // a four-byte start code's zero goes with the next unit
      nal.assign(buf_.begin() + static_cast<std::ptrdiff_t>(pos_), buf_.begin() + static_cast<std::ptrdiff_t>(end));
      pos_ = end;
      return true;
    }
    if (buf_.size() - pos_ > max_nal_)
      throw std::runtime_error("a NAL unit longer than " + describe_bytes(max_nal_) + " (not an Annex-B stream?)");
    // A start code may begin in the last two bytes and end in the next chunk.
    const std::size_t rescan = std::max<std::size_t>(3, buf_.size() - pos_ >= 2 ? buf_.size() - pos_ - 2 : 0);
    if (!fill()) {
      if (buf_.size() <= pos_) return false;
      nal.assign(buf_.begin() + static_cast<std::ptrdiff_t>(pos_), buf_.end());
      pos_ = buf_.size();
      return true;
    }
    searched = pos_ + rescan;
  }
}

AnnexBFile::AnnexBFile(const std::string& path, std::size_t chunk_bytes)
    : path_(path),
      splitter_([this](std::uint8_t* buffer, std::size_t capacity) { return read_chunk(buffer, capacity); },
                chunk_bytes) {
  const std::string shown = to_valid_utf8(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw InputError("'" + shown + "': cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = ::fstat(fd_, &st) == 0 ? file_kind(st.st_mode) : std::string(std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    throw InputError("'" + shown + "': not a regular file (" + kind + ")");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  std::vector<std::uint8_t> head(static_cast<std::size_t>(std::min<std::uint64_t>(size_, 64 * 1024)));
  const ssize_t n = head.empty() ? 0 : ::pread(fd_, head.data(), head.size(), 0);
  codec_ = sniff_codec(head.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  if (codec_ == VideoCodec::unknown) codec_ = codec_from_extension(path);
  if (codec_ == VideoCodec::unknown) {
    ::close(fd_);
    fd_ = -1;
    throw InputError("'" + shown + "': neither its first 64 KiB nor its extension name an H.264 or HEVC stream");
  }
}

AnnexBFile::~AnnexBFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t AnnexBFile::read_chunk(std::uint8_t* buffer, std::size_t capacity) {
  while (true) {
    const ssize_t n = ::pread(fd_, buffer, capacity, static_cast<off_t>(offset_));
    if (n >= 0) {
      offset_ += static_cast<std::uint64_t>(n);
      return static_cast<std::size_t>(n);
    }
    if (errno != EINTR) throw InputError("'" + to_valid_utf8(path_) + "': read failed at byte " + std::to_string(offset_) + ": " + std::strerror(errno));
  }
}

bool AnnexBFile::next(std::vector<std::uint8_t>& nal) {
  try {
    return splitter_.next(nal);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError("'" + to_valid_utf8(path_) + "': " + e.what());
  }
}

}  // namespace sluice

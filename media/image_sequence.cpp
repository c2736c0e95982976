#include "media/image_sequence.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "runtime/bounded_file.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {
namespace {

[[noreturn]] void fail(const std::string& uri, const std::string& why) { throw InputError("'" + uri + "': " + why); }

}  // namespace

ImageSequenceFiles::ImageSequenceFiles(const std::string& uri) {
  // The conversion is looked for in the file name only: a '%' in a directory name is that directory's name.
  const std::size_t slash = uri.find_last_of('/');
  const std::size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  std::size_t at = std::string::npos, end = 0;
  for (std::size_t i = name_at; i < uri.size(); ++i) {
    if (uri[i] != '%') continue;
    std::size_t j = i + 1;
    while (j < uri.size() && uri[j] >= '0' && uri[j] <= '9') ++j;
    if (at != std::string::npos || j >= uri.size() || uri[j] != 'd')
      fail(uri, "an image sequence's name holds exactly one number conversion (%d, %4d or %04d) and no other '%'");
    at = i;
    end = j + 1;
    i = j;
  }
  if (at == std::string::npos) fail(uri, "an image sequence's name needs a number conversion (%d, %4d or %04d)");
  const std::string digits = uri.substr(at + 1, end - at - 2);
  zero_pad_ = !digits.empty() && digits[0] == '0';
  if (digits.size() > 2) fail(uri, "the width of the number conversion is at most 2 digits (e.g. %04d)");
  width_ = digits.empty() ? 0 : static_cast<std::size_t>(std::stoi(digits));
  prefix_ = uri.substr(0, at);
  suffix_ = uri.substr(end);

  // stat, never open: what is found is only named here; the reader opens each file without blocking later.
  auto exists = [&](std::int64_t number) {
    const std::string p = name(number);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return false;
      fail(uri, "cannot look at image '" + p + "': " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
      fail(uri, "image '" + p + "' is " + file_kind(st.st_mode) + ", not an image file; the sequence is refused" +
                    (S_ISFIFO(st.st_mode) ? " (reading it would block until a writer appears)" : ""));
    return true;
  };
  first_ = exists(0) ? 0 : 1;
  while (first_ + count_ < INT_MAX && exists(first_ + count_)) ++count_;
  if (count_ == 0) fail(uri, "no image of the sequence exists (looked for the pattern numbered from 0 and from 1)");
}

std::string ImageSequenceFiles::path(std::int64_t index) const { return name(first_ + index); }

std::string ImageSequenceFiles::name(std::int64_t number) const {
  std::string n = std::to_string(number);
  if (n.size() < width_) n.insert(0, width_ - n.size(), zero_pad_ ? '0' : ' ');
  return prefix_ + n + suffix_;
}

}  // namespace sluice

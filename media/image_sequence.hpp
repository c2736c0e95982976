#pragma once
// The files of an image sequence (frames/img_%04d.png): numbered from 0, or from 1 when there is no image 0, up
// to the first number without a file (the numbering OpenCV's CAP_IMAGES used). They are found with stat(2) only:
// nothing is opened while looking, so a FIFO among them cannot block the source, and every file found must be a
// regular file (a FIFO, socket, device or directory refuses the whole sequence, naming it).
#include <cstdint>
#include <string>

namespace sluice {

class ImageSequenceFiles {
 public:
  // Throws InputError ("'URI': why") when the name holds no %d conversion or another '%', no image exists at 0
  // or 1, a file cannot be looked at, or one is not a regular file.
  explicit ImageSequenceFiles(const std::string& uri);

  std::int64_t count() const { return count_; }
  // The path of image `index` (0 = the first one found).
  std::string path(std::int64_t index) const;

 private:
  std::string name(std::int64_t number) const;
  std::string prefix_, suffix_;  // around the conversion
  std::size_t width_ = 0;        // %4d / %04d: at least this many characters
  bool zero_pad_ = false;        // %04d: padded with '0', else with ' ' (as printf does)
  std::int64_t first_ = 0, count_ = 0;
};

}  // namespace sluice

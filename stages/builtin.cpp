#include "stages/builtin.hpp"

#include "media/nvdec/annexb_reader.hpp"
#include "media/nvjpeg/jpeg_reader.hpp"

namespace sluice {

void register_builtin_readers() {
  register_testsrc_reader();
  register_annexb_reader();  // .h264/.hevc files on NVDEC, in every build (media/nvdec)
  register_jpeg_reader();    // .jpg/.jpeg images on nvJPEG, in every build (media/nvjpeg)
}

}  // namespace sluice

#include "stages/builtin.hpp"

#include "media/nvdec/annexb_reader.hpp"
#include "media/nvjpeg/jpeg_reader.hpp"

namespace sluice {

void register_builtin_stages(StageRegistry& registry) {
  registry.add(decode_stage());
  registry.add(upload_stage());
  registry.add(preprocess_stage());
  registry.add(infer_stage());
  registry.add(download_stage());
  registry.add(track_stage());
  registry.add(classify_boxes_stage());
  registry.add(tee_stage());
  registry.add(sink_stage());
  register_testsrc_reader();
  register_annexb_reader();  // .h264/.hevc files on NVDEC, in every build (media/nvdec)
  register_jpeg_reader();    // .jpg/.jpeg images on nvJPEG, in every build (media/nvjpeg)
}

}  // namespace sluice

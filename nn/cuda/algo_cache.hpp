#pragma once
// The measured convolution algorithms, kept in a small text file so that a restart does not measure again.
// A key holds everything the choice depends on: GPU name, cuDNN version, precision, shapes, strides, pads,
// dilations, groups and the epilogue (see ConvLayer::cache_key). One line per entry: key TAB mode (fused|separate|gemm|depthwise) TAB algorithm.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace sluice::nn::cuda {

enum class ConvMode : std::uint8_t {
  fused,     // cudnnConvolutionBiasActivationForward
  separate,  // cudnnConvolutionForward, then the epilogue kernel
  gemm,      // a 1x1 convolution as one cuBLAS product over NHWC pixels, then the epilogue kernel
  depthwise, // group == C == K: sluice's direct NHWC kernel with the epilogue inside (nn/cuda/depthwise_conv.cu)
};
const char* to_string(ConvMode m);

struct ConvChoice {
  ConvMode mode = ConvMode::separate;
  int algo = 0;  // cudnnConvolutionFwdAlgo_t; unused for gemm; depthwise: 1 keeps rows in registers, 0 not
};

class AlgoCache {
 public:
  // "" keeps entries in memory only. An existing file is read now; a malformed one is ignored with a warning
  // naming the file and line (everything is measured again and the file rewritten).
  explicit AlgoCache(std::string path);
  std::optional<ConvChoice> find(const std::string& key) const;
  void put(const std::string& key, ConvChoice choice);
  // Writes every entry (those read and those added) to the file, through a temporary file and a rename so that
  // a reader never sees half a file. Nothing happens for "" or when nothing was added. A file that cannot be
  // written is a warning, not an error (returns false): the cache only saves time.
  bool save();
  std::size_t size() const { return entries_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, ConvChoice> entries_;
  bool changed_ = false;
};

}  // namespace sluice::nn::cuda

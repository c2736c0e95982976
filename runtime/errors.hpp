#pragma once
// Error types shared by the engine. Every error says what failed and where.
#include <stdexcept>
#include <string>

namespace sluice {

// A CUDA/cuDNN/cuBLAS call failed: carries the call text, file and line.
class GpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The pipeline description is wrong: the message names file:line:col, stage and key.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A stage failed on a batch: the message names the stage and the first frame.
class StageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sluice

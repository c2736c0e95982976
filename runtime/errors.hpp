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

// The GPU is lost to this process: a sticky error (an Xid such as a memory fault or an uncorrectable ECC error,
// the device gone or unavailable) after which no call on that device succeeds again. A replica on that GPU goes
// down; the rest of the service does not.
class GpuFault : public GpuError {
 public:
  using GpuError::GpuError;
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

// A sink's write failed in a way no wait fixes (the disk or quota full, the file size limit, a read-only or
// failing device): `sluiced run` stops on it, where failures a retry may fix (a network sink's outage) only
// fail their frames and inputs, which a job redoes.
class StorageFullError : public StageError {
 public:
  using StageError::StageError;
};

}  // namespace sluice

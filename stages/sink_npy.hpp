#pragma once
// The npy sink's writer: each batch's payload as one NumPy file in a directory, plus index.jsonl (file, row,
// source_id, sequence, pts_ns per frame).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/batch.hpp"
#include "stages/sink_outputs.hpp"

namespace sluice::sinks {

// NumPy .npy (format 1.0) of one batch: [count, ...] in the payload's own layout and element type.
// Frames: packed RGB/BGR as [count, H, W, 3], gray as [count, H, W, 1], NV12/I420 as their planes stacked,
// [count, H*3/2, W]. Tensors: [count, C, H, W] (nchw) or [count, H, W, C] (nhwc); bf16 is stored as f32,
// since NumPy has no bf16. Classes: [count, k] records of (score f32, index i32), best first.
class NpyWriter {
 public:
  NpyWriter(const PayloadDesc& d, std::filesystem::path dir, WriteRetry& retry, std::string stage);
  // Creates the directory and truncates index.jsonl; StageError when it cannot.
  void open();
  // batch-NNNNNNNN.npy (written to a temporary name, fsync'ed, renamed), then its frames' index lines:
  // every line names a complete file.
  void write(const Batch& b);
  void sync_index();
  void close();

 private:
  std::string header(int count) const;
  PayloadDesc desc_;
  std::filesystem::path dir_;
  WriteRetry& retry_;
  std::string stage_;
  std::string descr_;  // NumPy's type description, as a Python literal
  std::vector<int> item_shape_;
  std::vector<float> widened_;
  OutputFile index_;
  std::string lines_;
  std::uint64_t batches_ = 0;
};

}  // namespace sluice::sinks

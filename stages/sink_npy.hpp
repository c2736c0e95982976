#pragma once
// The npy sink's writer: each batch's payload as one NumPy file in a directory, plus index.jsonl (file, row,
// source_id, sequence, pts_ns, and input and input_frame for frames of an input). The directory is kept across
// runs, reloads and resumed jobs: batch numbers go on from the highest one there, index.jsonl is appended to.
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/output_lock.hpp"
#include "runtime/sink_outputs.hpp"
#include "runtime/sink_records.hpp"

namespace sluice::sinks {

// NumPy .npy (format 1.0) of one batch: [count, ...] in the payload's own layout and element type.
// Frames: packed RGB/BGR as [count, H, W, 3], gray as [count, H, W, 1], NV12/I420 as their planes stacked,
// [count, H*3/2, W]. Tensors: [count, C, H, W] (nchw) or [count, H, W, C] (nhwc); bf16 is stored as f32,
// since NumPy has no bf16. Classes: [count, k] records of (score f32, index i32), best first.
class NpyWriter {
 public:
  NpyWriter(const PayloadDesc& d, std::filesystem::path dir, WriteRetry& retry, std::string stage);
  // Creates the directory, takes its lock (runtime/output_lock.hpp), takes the index lines of `interrupted`
  // inputs out (drop_records_of: the job does them again), opens index.jsonl to append to (cutting a torn last
  // line); StageError when it cannot. The batch files keep those rows; only index lines make rows results.
  void open(const std::set<std::string>& interrupted);
  // batch-NNNNNNNN.npy (written to a temporary name, fsync'ed, renamed), then its frames' index lines, fsync'ed:
  // every line names a complete file, and a frame counts as delivered only once its line is durable.
  void write(const Batch& b, Origins& origins);
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
  OutputLock lock_;
  OutputFile index_;
  std::string lines_;
  std::uint64_t batches_ = 0;
};

}  // namespace sluice::sinks

#pragma once
// `sluiced bench`: a pipeline for a fixed number of batches after warm-up, serial and pipelined.
#include <string>

namespace sluice {

struct BenchOptions {
  std::string file;
  int batches = 200;
  int warmup = 20;
  bool serial_only = false;
  bool pipelined_only = false;  // no serial run (and so no bound): long inputs, files
  std::string json_path, trace_path;
  std::string device;  // "auto", "cpu" or "cuda": overrides the file's `device:`; empty: the file's
};

// Prints the report; returns the process exit status.
int run_bench(const BenchOptions& options);

}  // namespace sluice

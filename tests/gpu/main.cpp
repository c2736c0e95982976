// GPU tests: without a usable GPU this exits 77, which CTest reports as skipped (never as passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "runtime/gpu.hpp"
#include "runtime/stage.hpp"

int main(int argc, char** argv) {
  // Checked without a GPU too: stages register themselves from a library linked whole, and an executable that
  // links it otherwise has none (every pipeline test would fail on the GPU host only).
  if (!sluice::StageRegistry::builtin().find("decode") || !sluice::StageRegistry::builtin().find("classify_boxes")) {
    std::fprintf(stderr, "sluice_gpu_tests: the built-in stages are not linked in (known: %s)\n",
                 sluice::StageRegistry::builtin().kinds().c_str());
    return 1;
  }
  if (sluice::gpu::device_count() == 0) {
    std::fprintf(stderr, "sluice_gpu_tests: no CUDA device visible, skipping (exit 77)\n");
    return 77;
  }
  sluice::gpu::set_device(0);
  std::fprintf(stderr, "sluice_gpu_tests: on %s\n", sluice::gpu::device_name(0).c_str());
  return Catch::Session().run(argc, argv);
}

// GPU tests: without a usable GPU this exits 77, which CTest reports as skipped (never as passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "runtime/gpu.hpp"

int main(int argc, char** argv) {
  if (sluice::gpu::device_count() == 0) {
    std::fprintf(stderr, "sluice_gpu_tests: no CUDA device visible, skipping (exit 77)\n");
    return 77;
  }
  sluice::gpu::set_device(0);
  std::fprintf(stderr, "sluice_gpu_tests: on %s\n", sluice::gpu::device_name(0).c_str());
  return Catch::Session().run(argc, argv);
}

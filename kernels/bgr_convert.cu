#include "kernels/bgr_convert.cuh"

#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/bgr_convert_cpu.hpp"  // validate()
#include "kernels/bgr_convert_math.hpp"
#include "runtime/cuda_check.hpp"

namespace sluice::kernels {

namespace {
__global__ void bgr_convert_kernel(BgrConvertParams p, const std::uint8_t* src, std::uint8_t* dst) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < p.out_width && y < p.out_height) bgr::convert_pixel(p, src, dst, x, y);
}
}  // namespace

void bgr_convert_gpu(const BgrConvertParams& p, const std::uint8_t* src_device, std::uint8_t* dst_device,
                     cudaStream_t stream) {
  validate(p);
  if (!stream) throw std::invalid_argument("bgr convert: a stream is required (not the legacy default stream)");
  const dim3 block(32, 8);
  const dim3 grid((p.out_width + 31) / 32, (p.out_height + 7) / 8);
  bgr_convert_kernel<<<grid, block, 0, stream>>>(p, src_device, dst_device);
  CUDA_CHECK(cudaPeekAtLastError());
}

}  // namespace sluice::kernels

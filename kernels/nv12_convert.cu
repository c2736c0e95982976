#include "kernels/nv12_convert.cuh"

#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/nv12_convert_cpu.hpp"  // validate()
#include "kernels/nv12_convert_math.hpp"
#include "runtime/cuda_check.hpp"

namespace sluice::kernels {

namespace {
__global__ void nv12_convert_kernel(Nv12ConvertParams p, const std::uint8_t* luma, const std::uint8_t* chroma,
                                    std::uint8_t* dst) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < p.out_width && y < p.out_height) nv12::convert_pixel(p, luma, chroma, dst, x, y);
}
}  // namespace

void nv12_convert_gpu(const Nv12ConvertParams& p, const std::uint8_t* luma_device, const std::uint8_t* chroma_device,
                      std::uint8_t* dst_device, cudaStream_t stream) {
  validate(p);
  if (!stream) throw std::invalid_argument("nv12 convert: a stream is required (not the legacy default stream)");
  const dim3 block(32, 8);
  const dim3 grid((p.out_width + 31) / 32, (p.out_height + 7) / 8);
  nv12_convert_kernel<<<grid, block, 0, stream>>>(with_whole_rects(p), luma_device, chroma_device, dst_device);
  CUDA_CHECK(cudaPeekAtLastError());
}

}  // namespace sluice::kernels

#pragma once
// CPU twin of the preprocess kernel: the oracle for the GPU kernel and the CPU execution path.
#include <cstdint>

#include "kernels/preprocess.hpp"

namespace sluice::kernels {

// Largest accepted width/height: keeps the exact integer coordinate maths (see preprocess_cpu.cpp) in range.
inline constexpr int kPreprocessMaxDim = 1 << 16;

// Throws std::invalid_argument naming the offending field and value. Shared by the CPU and GPU launchers.
void validate(const PreprocessParams& p);

// src: p.batch images of image_bytes(p.in_format, p.in_width, p.in_height) bytes each, back to back.
// dst: p.batch tensors of out_channels*out_height*out_width floats (f32), half bits (f16) or bfloat16 bits (bf16), back to back.
void preprocess_cpu(const PreprocessParams& p, const std::uint8_t* src, void* dst);

}  // namespace sluice::kernels

#pragma once
// SLUICE_HD: a function compiled for host and device in nvcc (inlined), plain inline elsewhere, so that maths a
// kernel and its CPU twin share is written once (kernels/*_math.hpp).
#ifdef __CUDACC__
#define SLUICE_HD __host__ __device__ __forceinline__
#else
#define SLUICE_HD inline
#endif

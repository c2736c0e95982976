#pragma once
// What the CPU layers share of oneDNN (Debian's libdnnl, OpenMP threads): the process's CPU engine, image
// descriptors in a value's layout, activations as post-ops, and oneDNN's errors turned into ours.
#include <oneapi/dnnl/dnnl.hpp>

#include <string>

#include "nn/cpu/activation.hpp"
#include "nn/cpu/layout.hpp"
#include "nn/graph.hpp"

namespace sluice::nn::cpu {

const dnnl::engine& onednn_engine();

// An f32 4-D image [N, C, H, W] as it lies in memory in `layout`.
dnnl::memory::desc image_desc(const Shape& nchw, Layout layout);

// Y = act(Y) as eltwise post-ops (HardSigmoid is two: linear, then clip to [0, 1]).
void append_activation(dnnl::post_ops& ops, const Activation& act);

// The OpenMP thread count for parallel regions this thread starts (oneDNN's), from the OpenMP runtime that
// oneDNN itself loaded: sluice is not built with -fopenmp, so that sanitizer builds need no OpenMP of their own.
void set_openmp_threads(int threads);

// "<status>: <message>" for a dnnl::error, for the ModelError of the layer that hit it.
std::string describe(const dnnl::error& e);

}  // namespace sluice::nn::cpu

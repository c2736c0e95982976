#include "nn/cpu/onednn.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <oneapi/dnnl/dnnl_debug.h>

namespace sluice::nn::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc image_desc(const Shape& nchw, Layout layout) {
  using tag = dnnl::memory::format_tag;
  return {dnnl::memory::dims(nchw.begin(), nchw.end()), dnnl::memory::data_type::f32,
          layout == Layout::nhwc ? tag::nhwc : tag::nchw};
}

void append_activation(dnnl::post_ops& ops, const Activation& act) {
  using alg = dnnl::algorithm;
  switch (act.kind) {
    case ActivationKind::none: return;
    case ActivationKind::relu: return ops.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
    case ActivationKind::leaky_relu: return ops.append_eltwise(1.0f, alg::eltwise_relu, act.alpha, 0.0f);
    case ActivationKind::clip: return ops.append_eltwise(1.0f, alg::eltwise_clip, act.alpha, act.beta);
    case ActivationKind::sigmoid: return ops.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f);
    case ActivationKind::hard_sigmoid:
      ops.append_eltwise(1.0f, alg::eltwise_linear, act.alpha, act.beta);
      return ops.append_eltwise(1.0f, alg::eltwise_clip, 0.0f, 1.0f);
    case ActivationKind::hard_swish: return ops.append_eltwise(1.0f, alg::eltwise_hardswish, 0.0f, 0.0f);
    case ActivationKind::tanh: return ops.append_eltwise(1.0f, alg::eltwise_tanh, 0.0f, 0.0f);
  }
}

void set_openmp_threads(int threads) {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (!set) throw std::runtime_error("cpu_threads: no OpenMP runtime is loaded (oneDNN is expected to bring libgomp)");
  set(threads);
}

std::string describe(const dnnl::error& e) {
  return std::string("oneDNN: ") + dnnl_status2str(e.status) + ": " + e.what();
}

}  // namespace sluice::nn::cpu

// Gemm (alpha, beta, transA, transB, C broadcast to the output), MatMul (numpy: batched, broadcast, 1-D
// operands) and Linear (a product by a constant matrix with its bias, residual and activation), all on oneDNN's
// sgemm (row-major, all cores).
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <atomic>

#include "nn/cpu/activation.hpp"
#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"
#include "nn/cpu/strided.hpp"

namespace sluice::nn::cpu {

namespace {

// C = alpha * op(A) x op(B) + beta * C, row-major. The shapes were checked when the layer was made, so a
// failure here is oneDNN's own (out of memory for its packing buffers).
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           const float* b, float beta, float* c) {
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, trans_a ? m : k,
                                          b, trans_b ? k : n, beta, c, n);
  if (status != dnnl_success) throw ModelError(std::string("oneDNN sgemm failed: ") + dnnl_status2str(status));
}

class GemmLayer final : public Layer {
 public:
  GemmLayer(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, float alpha, float beta,
            bool has_c, StridedView c_view)
      : m_(m), n_(n), k_(k), trans_a_(trans_a), trans_b_(trans_b), alpha_(alpha), beta_(beta), has_c_(has_c),
        c_view_(std::move(c_view)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    float* y = out[0];
    float gemm_beta = 0.0f;
    if (has_c_ && beta_ != 0.0f) {
      copy_strided(in[2], c_view_, y);
      if (beta_ != 1.0f)
        for (std::int64_t i = 0; i < m_ * n_; ++i) y[i] *= beta_;
      gemm_beta = 1.0f;
    }
    sgemm(trans_a_, trans_b_, m_, n_, k_, alpha_, in[0], in[1], gemm_beta, y);
  }

 private:
  std::int64_t m_, n_, k_;
  bool trans_a_, trans_b_;
  float alpha_, beta_;
  bool has_c_;
  StridedView c_view_;
};

// Y[b] = A[a_offsets[b]] x B[b_offsets[b]] for each batch matrix b; rows of A may span several batch matrices
// at once (m = batch * M) when B is shared by all of them.
class MatMulLayer final : public Layer {
 public:
  MatMulLayer(std::int64_t m, std::int64_t n, std::int64_t k, std::vector<std::int64_t> a_offsets,
              std::vector<std::int64_t> b_offsets)
      : m_(m), n_(n), k_(k), a_offsets_(std::move(a_offsets)), b_offsets_(std::move(b_offsets)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const auto batches = static_cast<std::int64_t>(a_offsets_.size());
    if (batches == 1) return sgemm(false, false, m_, n_, k_, 1.0f, in[0], in[1], 0.0f, out[0]);  // on all cores
    // Many small products (attention scores, Swin's windows): threads take whole products, each sgemm then on
    // its own thread (oneDNN runs one called inside a parallel region sequentially). A failure is thrown after
    // the region, never out of it.
    std::atomic<dnnl_status_t> failure{dnnl_success};
    parallel_ranges(batches, 1, [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t b = first; b < end; ++b) {
        const auto i = static_cast<std::size_t>(b);
        const dnnl_status_t status = dnnl_sgemm('N', 'N', m_, n_, k_, 1.0f, in[0] + a_offsets_[i], k_,
                                                in[1] + b_offsets_[i], n_, 0.0f, out[0] + b * m_ * n_, n_);
        if (status != dnnl_success) failure = status;
      }
    });
    if (failure != dnnl_success) throw ModelError(std::string("oneDNN sgemm failed: ") + dnnl_status2str(failure));
  }

 private:
  std::int64_t m_, n_, k_;
  std::vector<std::int64_t> a_offsets_, b_offsets_;
};

// Y[M, N] = act(X[M, K] W[K, N] + B + R): R is copied into Y first so that the product adds onto it, then each
// row gets the bias and the activation while it is in cache.
class LinearLayer final : public Layer {
 public:
  LinearLayer(std::int64_t m, std::int64_t n, std::int64_t k, std::vector<float> w, std::vector<float> bias,
              bool residual, Activation act)
      : m_(m), n_(n), k_(k), w_(std::move(w)), bias_(std::move(bias)), residual_(residual), act_(act) {}

  void run(const float* const* in, float* const* out, float*) const override {
    float* y = out[0];
    const std::int64_t rows_per_thread = std::max<std::int64_t>(1, 16384 / n_);
    if (residual_ && y != in[3])
      parallel_ranges(m_, rows_per_thread, [&](std::int64_t first, std::int64_t end) {
        std::copy(in[3] + first * n_, in[3] + end * n_, y + first * n_);
      });
    sgemm(false, false, m_, n_, k_, 1.0f, in[0], w_.data(), residual_ ? 1.0f : 0.0f, y);
    if (bias_.empty() && act_.kind == ActivationKind::none) return;
    parallel_ranges(m_, rows_per_thread, [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t r = first; r < end; ++r) {
        float* row = y + r * n_;
        if (!bias_.empty())
          for (std::int64_t j = 0; j < n_; ++j) row[j] += bias_[static_cast<std::size_t>(j)];
        apply_activation(act_, row, 0.0f, nullptr, row, static_cast<std::size_t>(n_));
      }
    });
  }

 private:
  std::int64_t m_, n_, k_;
  std::vector<float> w_, bias_;
  bool residual_;
  Activation act_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(const LayerContext& ctx) {
  ctx.expect_inputs(2, 4);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  const Tensor& w = ctx.constant_input(1, "W");
  if (x.size() < 2 || w.shape.size() != 2 || x.back() != w.shape[0])
    ctx.fail("X " + to_string(x) + " and W " + to_string(w.shape) + " do not multiply");
  const std::int64_t k = w.shape[0], n = w.shape[1], m = element_count(x) / k;
  Shape y = x;
  y.back() = n;
  ctx.expect_output_shape(0, y);
  std::vector<float> bias;
  if (ctx.has_input(2)) {
    const Tensor& b = ctx.constant_input(2, "B");
    if (b.elements() != n) ctx.fail("B " + to_string(b.shape) + " is not one value per output column (" + std::to_string(n) + ")");
    bias = b.f32;
  }
  if (ctx.has_input(3) && ctx.input_shape(3) != y)
    ctx.fail("residual " + to_string(ctx.input_shape(3)) + " is not the output's shape " + to_string(y));
  return std::make_unique<LinearLayer>(m, n, k, w.f32, std::move(bias), ctx.has_input(3), fused_activation(ctx));
}

std::unique_ptr<Layer> make_gemm(const LayerContext& ctx) {
  ctx.expect_inputs(2, 3);
  ctx.expect_outputs(1);
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  if (a.size() != 2 || b.size() != 2)
    ctx.fail("A and B must be matrices, got " + to_string(a) + " and " + to_string(b));
  const bool trans_a = ctx.attrs().i("transA", 0) != 0, trans_b = ctx.attrs().i("transB", 0) != 0;
  const std::int64_t m = trans_a ? a[1] : a[0], k = trans_a ? a[0] : a[1];
  const std::int64_t kb = trans_b ? b[1] : b[0], n = trans_b ? b[0] : b[1];
  if (k != kb) ctx.fail("A " + to_string(a) + " and B " + to_string(b) + " do not multiply (transA/transB applied)");
  const Shape y{m, n};
  ctx.expect_output_shape(0, y);
  StridedView c_view;
  if (ctx.has_input(2)) {
    const Shape& c = ctx.input_shape(2);
    Shape joint;
    if (c.size() > 2 || !broadcast_shape(c, y, joint) || joint != y)
      ctx.fail("C " + to_string(c) + " does not broadcast to the output " + to_string(y));
    c_view = collapse({y, broadcast_strides(c, y), 0});
  }
  return std::make_unique<GemmLayer>(m, n, k, trans_a, trans_b, ctx.attrs().f("alpha", 1.0f), ctx.attrs().f("beta", 1.0f),
                                     ctx.has_input(2), std::move(c_view));
}

std::unique_ptr<Layer> make_matmul(const LayerContext& ctx) {
  ctx.expect_inputs(2, 2);
  ctx.expect_outputs(1);
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  if (a.empty() || b.empty()) ctx.fail("operands must have at least one dimension");
  // numpy: a 1-D A is a row vector, a 1-D B a column vector, and that dimension is dropped from the result.
  const Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  const std::int64_t m = a2[a2.size() - 2], k = a2.back(), n = b2.back();
  if (b2[b2.size() - 2] != k) ctx.fail("A " + to_string(a) + " and B " + to_string(b) + " do not multiply");
  const Shape a_batch(a2.begin(), a2.end() - 2), b_batch(b2.begin(), b2.end() - 2);
  Shape batch;
  if (!broadcast_shape(a_batch, b_batch, batch))
    ctx.fail("batch dimensions of A " + to_string(a) + " and B " + to_string(b) + " do not broadcast");
  Shape y = batch;
  if (a.size() > 1) y.push_back(m);
  if (b.size() > 1) y.push_back(n);
  ctx.expect_output_shape(0, y);

  const std::int64_t batches = element_count(batch);
  if (element_count(b_batch) == 1 && a_batch == batch)  // one B for every matrix of A: a single taller GEMM
    return std::make_unique<MatMulLayer>(batches * m, n, k, std::vector<std::int64_t>{0}, std::vector<std::int64_t>{0});
  std::vector<std::int64_t> a_offsets, b_offsets;
  const auto a_strides = broadcast_strides(a_batch, batch), b_strides = broadcast_strides(b_batch, batch);
  std::vector<std::int64_t> index(batch.size(), 0);
  for (std::int64_t i = 0; i < batches; ++i) {
    std::int64_t ao = 0, bo = 0;
    for (std::size_t d = 0; d < batch.size(); ++d) {
      ao += index[d] * a_strides[d];
      bo += index[d] * b_strides[d];
    }
    a_offsets.push_back(ao * m * k);
    b_offsets.push_back(bo * k * n);
    for (std::size_t d = batch.size(); d-- > 0;) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return std::make_unique<MatMulLayer>(m, n, k, std::move(a_offsets), std::move(b_offsets));
}

}  // namespace sluice::nn::cpu

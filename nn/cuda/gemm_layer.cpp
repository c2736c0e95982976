// Gemm and MatMul on cuBLAS (see gemm.hpp); Linear on cuBLASLt with its bias, residual and ReLU in the
// product's epilogue.
#include <cublas_v2.h>

#include <numeric>
#include <sstream>

#include "nn/cuda/check.hpp"
#include "nn/cuda/cudnn_handles.hpp"
#include "nn/cuda/gemm.hpp"
#include "nn/cuda/layer.hpp"

namespace sluice::nn::cuda {
namespace {

std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

// A 4-D NHWC value whose memory equals its NCHW form (only size-1 dims move) needs no staging.
bool needs_staging(const ValueTable& v, int id) {
  const ValueSlot& s = v.slot(id);
  return s.nhwc && s.shape[1] != 1 && s.shape[2] * s.shape[3] != 1;
}

class GemmLayer : public Layer {
 public:
  GemmLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    const Graph& g = ctx.graph;
    if (node.inputs.size() < 2) throw ModelError(g.source + ": " + node.where() + ": expects A, B[, C]");
    for (const auto& in : {node.inputs[0], node.inputs[1]})
      if (g.shape_of(in).size() != 2) throw ModelError(g.source + ": " + node.where() + ": A and B must be 2-D");
    a_ = ctx.values.id(node.inputs[0]);
    b_ = ctx.values.id(node.inputs[1]);
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      c_ = ctx.values.id(node.inputs[2]);
      if (g.shape_of(node.inputs[2]).size() > 2) throw ModelError(g.source + ": " + node.where() + ": C above 2-D");
    }
    y_ = ctx.values.id(node.outputs.at(0));
    for (int id : {a_, b_, c_})
      if (id >= 0 && values_.slot(id).constant) ctx.constant(values_.slot(id).name);
    trans_a_ = node.attrs.i("transA", 0) != 0;
    trans_b_ = node.attrs.i("transB", 0) != 0;
    alpha_ = node.attrs.f("alpha", 1.f);
    beta_ = node.attrs.f("beta", 1.f);
  }

  std::string partial_batch_problem() const override {
    if (trans_a_ && values_.slot(a_).batched) return "Gemm with transA=1 on a batched A";
    if (values_.slot(b_).batched) return "Gemm with a batched B";
    return "";
  }

  void run(const RunContext& ctx) override {
    const Shape a = values_.shape_at(a_, ctx.count), y = values_.shape_at(y_, ctx.count);
    const std::int64_t m = y[0], n = y[1], k = trans_a_ ? a[0] : a[1];
    float beta = 0.f;
    if (c_ >= 0) {  // Y = C broadcast, then the product adds onto it
      const Shape c = values_.shape_at(c_, ctx.count);
      View dst, src;
      dst.rank = src.rank = 2;
      dst.shape[0] = src.shape[0] = m;
      dst.shape[1] = src.shape[1] = n;
      dst.stride[0] = n;
      dst.stride[1] = 1;
      const std::int64_t cm = c.size() == 2 ? c[0] : 1, cn = c.empty() ? 1 : c.back();
      src.stride[0] = cm == 1 ? 0 : cn;
      src.stride[1] = cn == 1 ? 0 : 1;
      remap_copy(values_.type(), ctx.at(y_), dst, values_.type(), ctx.at(c_), src, ctx.stream);
      beta = beta_;
    }
    row_major_gemm(ctx.cublas, values_.type(), trans_a_, trans_b_, m, n, k, alpha_, ctx.at(a_), 0, ctx.at(b_), 0, beta,
                   ctx.at(y_), 1);
  }

  std::string kernel() const override {
    return std::string("cublasGemmEx") + (c_ >= 0 ? " after broadcasting C" : "");
  }

 private:
  const ValueTable& values_;
  int a_ = -1, b_ = -1, c_ = -1, y_ = -1;
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
};

class MatMulLayer : public Layer {
 public:
  MatMulLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    if (node.inputs.size() != 2) throw ModelError(ctx.graph.source + ": " + node.where() + ": expects A, B");
    a_ = ctx.values.id(node.inputs[0]);
    b_ = ctx.values.id(node.inputs[1]);
    y_ = ctx.values.id(node.outputs.at(0));
    for (int id : {a_, b_})
      if (values_.slot(id).constant) ctx.constant(values_.slot(id).name);
    for (int id : {a_, b_, y_})
      if (values_.slot(id).shape.size() > kMaxRank)
        throw ModelError(ctx.graph.source + ": " + node.where() + ": more than 6 dimensions");
  }

  std::size_t scratch_bytes() const override {
    std::size_t total = 0;
    for (int id : {a_, b_, y_})
      if (needs_staging(values_, id)) total += align256(values_.slot(id).bytes);
    return total;
  }

  void run(const RunContext& ctx) override {
    auto* scratch = static_cast<std::byte*>(ctx.scratch);
    // Operands in row-major ONNX order: staged out of NHWC when needed.
    auto natural = [&](int id) -> void* {
      if (!needs_staging(values_, id)) return ctx.at(id);
      void* dst = scratch;
      scratch += align256(values_.slot(id).bytes);
      if (id == y_) return dst;
      View src = values_.view(id, ctx.count), d = src;
      for (int i = d.rank - 1, s = 1; i >= 0; --i) {
        d.stride[i] = s;
        s *= static_cast<int>(d.shape[i]);
      }
      remap_copy(values_.type(), dst, d, values_.type(), ctx.at(id), src, ctx.stream);
      return dst;
    };
    const void* a = natural(a_);
    const void* b = natural(b_);
    void* y = natural(y_);

    Shape as = values_.shape_at(a_, ctx.count), bs = values_.shape_at(b_, ctx.count);
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
    const std::size_t rank = std::max(as.size(), bs.size()) - 2;
    Shape ab(rank, 1), bb(rank, 1), ob(rank, 1);  // batch dims, right-aligned
    for (std::size_t i = 0; i + 2 < as.size(); ++i) ab[rank - (as.size() - 2) + i] = as[i];
    for (std::size_t i = 0; i + 2 < bs.size(); ++i) bb[rank - (bs.size() - 2) + i] = bs[i];
    for (std::size_t i = 0; i < rank; ++i) ob[i] = std::max(ab[i], bb[i]);
    const std::int64_t batches = element_count(ob);
    const std::int64_t a_batches = element_count(ab), b_batches = element_count(bb);
    const DType t = values_.type();
    const std::size_t eb = dtype_bytes(t);
    if ((a_batches == batches || a_batches == 1) && (b_batches == batches || b_batches == 1) &&
        (a_batches == 1 || ab == ob) && (b_batches == 1 || bb == ob)) {
      if (b_batches == 1 && a_batches == batches)  // one product with the batch folded into M
        row_major_gemm(ctx.cublas, t, false, false, m * batches, n, k, 1.f, a, 0, b, 0, 0.f, y, 1);
      else
        row_major_gemm(ctx.cublas, t, false, false, m, n, k, 1.f, a, a_batches == 1 ? 0 : m * k, b,
                       b_batches == 1 ? 0 : k * n, 0.f, y, batches);
    } else {  // general broadcasting: one product per output batch index
      for (std::int64_t i = 0; i < batches; ++i) {
        std::int64_t rest = i, ai = 0, bi = 0, a_scale = 1, b_scale = 1;
        for (std::size_t d = rank; d-- > 0;) {
          const std::int64_t coord = rest % ob[d];
          rest /= ob[d];
          ai += (ab[d] == 1 ? 0 : coord) * a_scale;
          bi += (bb[d] == 1 ? 0 : coord) * b_scale;
          a_scale *= ab[d];
          b_scale *= bb[d];
        }
        row_major_gemm(ctx.cublas, t, false, false, m, n, k, 1.f, static_cast<const std::byte*>(a) + ai * m * k * eb, 0,
                       static_cast<const std::byte*>(b) + bi * k * n * eb, 0, 0.f,
                       static_cast<std::byte*>(y) + i * m * n * eb, 1);
      }
    }
    if (y != ctx.at(y_)) {  // back into NHWC
      View dst = values_.view(y_, ctx.count), src = dst;
      for (int i = src.rank - 1, s = 1; i >= 0; --i) {
        src.stride[i] = s;
        s *= static_cast<int>(src.shape[i]);
      }
      remap_copy(t, ctx.at(y_), dst, t, y, src, ctx.stream);
    }
  }

  std::string kernel() const override { return "cublasGemmEx / cublasGemmStridedBatchedEx"; }

 private:
  const ValueTable& values_;
  int a_ = -1, b_ = -1, y_ = -1;
};

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Y [.., N] = act(X [.., K] W [K, N] + B + R) (graph.hpp's Linear). In cuBLASLt's column-major terms
// Y^T [N, M] = W^T X^T + R^T with the bias per row of Y^T, so the bias, the residual (as C, beta 1) and a ReLU
// ride in the product's epilogue; another activation is one pass after it. Where cuBLASLt offers no algorithm
// (or an operand is not 16-byte aligned) the product runs on cuBLAS and one kernel adds bias, residual and
// activation. Operands held NHWC (rare: a Linear on a 4-D value tied to a convolution) are staged row-major.
class LinearLayer : public Layer {
 public:
  LinearLayer(const Node& node, BuildContext& ctx)
      : Layer(node), values_(ctx.values), lt_(ctx.cublas_lt), workspace_limit_(ctx.cublas_workspace_bytes) {
    const Graph& g = ctx.graph;
    const std::string where = g.source + ": " + node.where();
    if (node.inputs.size() < 2) throw ModelError(where + ": expects X, W[, B, R]");
    x_ = ctx.values.id(node.inputs[0]);
    const Shape& w = g.shape_of(node.inputs[1]);
    const Shape& xs = values_.slot(x_).shape;
    if (xs.size() < 2 || w.size() != 2 || xs.back() != w[0]) throw ModelError(where + ": X and W do not multiply");
    k_ = w[0];
    n_ = w[1];
    w_ = ctx.constant(node.inputs[1]);
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      if (element_count(g.shape_of(node.inputs[2])) != n_) throw ModelError(where + ": B is not one value per column");
      bias_ = ctx.constant(node.inputs[2]);
    }
    if (node.inputs.size() > 3 && !node.inputs[3].empty()) r_ = ctx.values.id(node.inputs[3]);
    y_ = ctx.values.id(node.outputs.at(0));
    if (r_ >= 0 && values_.slot(r_).shape != values_.slot(y_).shape) throw ModelError(where + ": R is not Y's shape");
    act_ = fused_activation(node);
  }

  std::size_t scratch_bytes() const override {
    std::size_t total = 0;
    for (int id : {x_, y_})
      if (needs_staging(values_, id)) total += align256(values_.slot(id).bytes);
    return total;
  }

  void prepare(int count, cudnnHandle_t) override {
    if (plans_.count(count)) return;
    Plan& p = plans_[count];
    const std::int64_t m = element_count(values_.shape_at(x_, count)) / k_;
    const cudaDataType_t dt = cublas_type(values_.type());
    cublasLtMatmulDesc_t desc = nullptr;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p.desc = LtMatmulDesc(desc);
    const bool relu = act_.kind == ActivationKind::relu;
    const cublasLtEpilogue_t epilogue = bias_ ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                              : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias_)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_, sizeof(bias_)));
    auto layout = [&](std::int64_t rows, std::int64_t cols) {
      cublasLtMatrixLayout_t l = nullptr;
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, dt, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), rows));
      return LtLayout(l);
    };
    p.w = layout(n_, k_);
    p.x = layout(k_, m);
    p.y = layout(n_, m);
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const LtPreference preference(pref);
    const std::uint64_t limit = workspace_limit_;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof(limit)));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_, desc, p.w.get(), p.x.get(), p.y.get(), p.y.get(),
                                                                pref, 1, &p.algo, &found);
    p.fused = status == CUBLAS_STATUS_SUCCESS && found > 0 && p.algo.workspaceSize <= workspace_limit_;
    any_fused_ = any_fused_ || p.fused;
    any_plain_ = any_plain_ || !p.fused;
  }

  void run(const RunContext& ctx) override {
    prepare(ctx.count, ctx.cudnn);
    const Plan& p = plans_.at(ctx.count);
    const DType t = values_.type();
    const std::int64_t m = element_count(values_.shape_at(x_, ctx.count)) / k_;
    auto* scratch = static_cast<std::byte*>(ctx.scratch);
    const void* x = ctx.at(x_);
    if (needs_staging(values_, x_)) {  // row-major copy of X
      x = stage_row_major(x_, scratch, ctx);
      scratch += align256(values_.slot(x_).bytes);
    }
    void* y = ctx.at(y_);
    const void* r = r_ >= 0 ? ctx.at(r_) : nullptr;
    const bool y_staged = needs_staging(values_, y_);
    if (y_staged) {  // R (tied to Y, so NHWC too) staged into Y's row-major place; the product adds onto it
      y = scratch;
      if (r) r = stage_row_major(r_, y, ctx);
    }
    const bool lt = p.fused && aligned16(x) && aligned16(y) && aligned16(w_) && (!r || aligned16(r));
    if (lt) {
      const float alpha = 1.f, beta = r ? 1.f : 0.f;
      CUBLAS_CHECK(cublasLtMatmul(ctx.cublas_lt, p.desc.get(), &alpha, w_, p.w.get(), x, p.x.get(), &beta, r ? r : y,
                                  p.y.get(), y, p.y.get(), &p.algo.algo, ctx.cublas_workspace, ctx.cublas_workspace_bytes,
                                  ctx.stream));
      if (act_.kind != ActivationKind::none && act_.kind != ActivationKind::relu) activation(t, y, y, m * n_, act_, ctx.stream);
    } else {
      row_major_gemm(ctx.cublas, t, false, false, m, n_, k_, 1.f, x, 0, w_, 0, 0.f, y, 1);
      if (bias_ || r || act_.kind != ActivationKind::none) bias_residual_activation(t, y, bias_, r, m * n_, n_, act_, ctx.stream);
    }
    if (y_staged) {  // back into NHWC
      View dst = values_.view(y_, ctx.count), src = row_major(dst);
      remap_copy(t, ctx.at(y_), dst, t, y, src, ctx.stream);
    }
  }

  std::string kernel() const override {
    std::string k = any_fused_ ? "cublasLtMatmul with its epilogue" : "";
    if (any_plain_) k += std::string(k.empty() ? "" : " / ") + "cublasGemmEx + bias/residual/activation kernel";
    return k;
  }

 private:
  struct Plan {
    LtMatmulDesc desc;
    LtLayout w, x, y;
    cublasLtMatmulHeuristicResult_t algo{};
    bool fused = false;
  };

  static View row_major(View v) {
    for (int i = v.rank - 1, s = 1; i >= 0; --i) {
      v.stride[i] = s;
      s *= static_cast<int>(v.shape[i]);
    }
    return v;
  }

  const void* stage_row_major(int id, void* dst, const RunContext& ctx) const {
    const View src = values_.view(id, ctx.count);
    remap_copy(values_.type(), dst, row_major(src), values_.type(), ctx.at(id), src, ctx.stream);
    return dst;
  }

  const ValueTable& values_;
  cublasLtHandle_t lt_;
  std::size_t workspace_limit_;
  int x_ = -1, y_ = -1, r_ = -1;
  std::int64_t k_ = 0, n_ = 0;
  const void* w_ = nullptr;
  const void* bias_ = nullptr;
  ActivationParams act_;
  std::map<int, Plan> plans_;
  bool any_fused_ = false, any_plain_ = false;
};

}  // namespace

std::unique_ptr<Layer> make_gemm(const Node& node, BuildContext& ctx) {
  if (node.op == Op::Gemm) return std::make_unique<GemmLayer>(node, ctx);
  if (node.op == Op::Linear) return std::make_unique<LinearLayer>(node, ctx);
  return std::make_unique<MatMulLayer>(node, ctx);
}

}  // namespace sluice::nn::cuda

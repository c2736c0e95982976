#pragma once
// Launchers of the CUDA backend's own kernels. Plain types only (no CUDA headers), so engine code in .cpp files
// includes this; every launcher enqueues on `stream`, checks the launch and never synchronises.
// Element types: f32, f16 or bf16 (DType from runtime/format.hpp); arithmetic is done in f32.
// Tensors of rank 4 that hold images are NHWC in memory; a View says where each logical element lives.
#include <cstdint>

#include "nn/activation_math.hpp"
#include "nn/elementwise_math.hpp"
#include "nn/ranking.hpp"
#include "runtime/format.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::nn::cuda {

constexpr int kMaxRank = 6;

// Logical shape plus the element stride of each logical dimension (0 broadcasts), from `offset`.
struct View {
  int rank = 0;
  std::int64_t shape[kMaxRank] = {};
  std::int64_t stride[kMaxRank] = {};
  std::int64_t offset = 0;
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

// The activations a Conv may carry and the standalone activation ops: nn/activation_math.hpp (one enum and one
// scalar definition for folding, the CPU backend and these kernels).
using nn::ActivationKind;
using nn::ActivationParams;


// Attention (nn/graph.hpp): Y [B, T, dv] = softmax(scale * Q K^T + M) V with Q [B, T, d], K [B, S, d],
// V [B, S, dv] contiguous. M (optional) is read at its batch offset (the flat batch index decomposed over
// batch_shape, dot mask_batch_stride) + row * mask_row_stride + key * mask_key_stride; strides are 0 where it
// broadcasts. Tensor cores (f16/bf16, depths multiples of 16 up to 128) or CUDA cores; f32 accumulation.
struct AttentionShape {
  int batches = 0, rows = 0, keys = 0, depth = 0, value_depth = 0;  // value_depth at most 256
  float scale = 1.f;
  int batch_rank = 0;
  int batch_shape[kMaxRank] = {};
  std::int64_t mask_batch_stride[kMaxRank] = {};
  std::int64_t mask_row_stride = 0, mask_key_stride = 0;
};
void attention(DType type, void* y, const void* q, const void* k, const void* v, const void* mask,
               const AttentionShape& shape, cudaStream_t stream);
bool attention_uses_tensor_cores(DType type, const AttentionShape& shape);
// The same on tensor cores in FlashAttention-2's way (attention_flash.cu): f16/bf16 on sm_80 and later, depth ==
// value_depth in {32, 64, 128}; Q, K, V and Y are read and written where they are, through the strides below.
// Row r of flat batch b of an operand starts at element b * batch + r * row: row-major [B, L, w] is {L * w, w},
// sequence-first [L, B, w] is {w, B * w}.
// Parts of a packed input (q|k|v, flat batch b = n * heads + h) also skip `skip` elements after each group of
// `heads` batches: b * batch + (b / heads) * skip + r * row.
struct AttentionOperandStrides {
  std::int64_t batch = 0, row = 0, skip = 0;
#if defined(__CUDACC__)
  __host__ __device__
#endif
  std::int64_t start(int b, int heads) const { return b * batch + (b / heads) * skip; }
};
struct AttentionStrides {
  AttentionOperandStrides q, k, v, y;
  int heads = 1;
};
bool attention_flash_supported(DType type, int depth, int value_depth);
void attention_flash(DType type, void* y, const void* q, const void* k, const void* v, const void* mask,
                     const AttentionShape& shape, const AttentionStrides& strides, cudaStream_t stream);
// scores [B, T, S] (contiguous) = softmax(scale * scores + M) in place, per row of S, in f32 (the unfused way's
// middle step, between two cuBLAS products).
void attention_softmax(DType type, void* scores, const void* mask, const AttentionShape& shape, cudaStream_t stream);

// y[i] = op(x[i]) over n contiguous elements (nn/elementwise_math.hpp).
void unary_math(DType type, void* y, const void* x, std::int64_t n, UnaryMath op, cudaStream_t stream);

// The rows of a reduction or a normalization: the `kept` dimensions number the rows, the `reduced` ones the
// elements of a row (in logical order, so element r of a row is element r of LayerNormalization's scale). Each
// dimension has its stride in x and in y (y's reduced strides only matter to LayerNormalization, which writes
// every element).
struct RowSpace {
  int kept_rank = 0, reduced_rank = 0;
  std::int64_t kept_shape[kMaxRank] = {}, kept_x_stride[kMaxRank] = {}, kept_y_stride[kMaxRank] = {};
  std::int64_t reduced_shape[kMaxRank] = {}, reduced_x_stride[kMaxRank] = {}, reduced_y_stride[kMaxRank] = {};
  std::int64_t rows() const;
  std::int64_t row_length() const;
};

// y[row] = the reduction of x's row, accumulated in f32.
void reduce(DType type, ReduceMath op, void* y, const void* x, const RowSpace& rows, cudaStream_t stream);

// y's row = (x's row - mean) / sqrt(variance + epsilon) * scale + bias (scale and bias: f32, one per row element;
// bias may be null); mean and variance in f32.
void layer_norm(DType type, void* y, const void* x, const RowSpace& rows, const float* scale, const float* bias,
                float epsilon, cudaStream_t stream);

// y[i] = act(x[i]) over n contiguous elements (y may equal x).
void activation(DType type, void* y, const void* x, std::int64_t n, ActivationParams act, cudaStream_t stream);

// The convolution epilogue: y = act(y + bias[c] + residual) over n contiguous NHWC elements, c = i % channels.
// bias (channels values) and residual may be null.
void bias_residual_activation(DType type, void* y, const void* bias, const void* residual, std::int64_t n,
                              std::int64_t channels, ActivationParams act, cudaStream_t stream);

// y = a op b: y is contiguous in the order of `out_shape`; a and b are read through their strides (0 broadcasts).
void binary(DType type, BinaryMath op, void* y, int rank, const std::int64_t* out_shape, const void* a,
            const std::int64_t* a_stride, const void* b, const std::int64_t* b_stride, cudaStream_t stream);

// y = x * scale[c] + shift[c] with c = (i / inner) % channels (standalone BatchNormalization).
void channel_affine(DType type, void* y, const void* x, const float* scale, const float* shift, std::int64_t n,
                    std::int64_t channels, std::int64_t inner, cudaStream_t stream);

// Element k of `src` (its k-th element in the row-major order of src.shape) goes to element k of `dst` (in
// dst.shape's order); both hold the same number of elements. Converts between element types on the way.
// Covers layout changes, transposes, concat/split/slice pieces, reshapes across layouts and broadcasts.
void remap_copy(DType dst_type, void* dst, const View& dst_view, DType src_type, const void* src,
                const View& src_view, cudaStream_t stream);

enum class PadMode : std::uint8_t { constant, reflect, edge };
// y (contiguous in the order of out.shape) = pad(x); x is read through in_shape/in_stride in the same dim order;
// begin[d] elements are added before dimension d.
void pad(DType type, void* y, int rank, const std::int64_t* out_shape, const void* x, const std::int64_t* in_shape,
         const std::int64_t* in_stride, const std::int64_t* begin, PadMode mode, float value, cudaStream_t stream);

struct Pool2dParams {
  bool max = true;  // else average
  int n = 0, h = 0, w = 0, c = 0, out_h = 0, out_w = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool count_include_pad = false;
};
// NHWC pooling. Average: divides by the window's elements inside the input, or (count_include_pad) inside the
// padded input (windows that ceil_mode lets run past the padding are cut there, like PyTorch).
void pool2d(DType type, const Pool2dParams& p, void* y, const void* x, cudaStream_t stream);

// NHWC [n, hw, c] -> [n, c]: the mean over hw.
void global_average_pool(DType type, void* y, const void* x, std::int64_t n, std::int64_t hw, std::int64_t c,
                         cudaStream_t stream);

struct DepthwiseConv2dParams {
  int n = 0, h = 0, w = 0, c = 0, out_h = 0, out_w = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int pad_top = 0, pad_left = 0;  // the bottom and right pads follow from out_h and out_w
  bool keep_rows = false;  // rows in registers where depthwise_keeps_rows allows (else each tap loads its inputs)
};
// Depthwise convolution (one filter per channel) of NHWC x [n, h, w, c] into NHWC y [n, out_h, out_w, c] with the
// Conv epilogue: y = act(conv + bias[c] + residual). weights: f32 [kernel_h, kernel_w, c]; bias: f32 [c] or null;
// residual: like y, or null. f32 accumulation.
void depthwise_conv2d(DType type, const DepthwiseConv2dParams& p, void* y, const void* x, const float* weights,
                      const float* bias, const void* residual, ActivationParams act, cudaStream_t stream);
// The channels one thread of depthwise_conv2d handles (given aligned pointers), and whether it keeps a row's
// inputs in registers for all taps (3, 5, 7 wide at stride and dilation 1 along W), for describing the layer.
int depthwise_channels_per_thread(DType type, int channels);
bool depthwise_keeps_rows(int kernel_w, int stride_w, int dilation_w);

enum class ResizeCoordinates : std::uint8_t { half_pixel, pytorch_half_pixel, align_corners, asymmetric,
                                              tf_half_pixel_for_nearest };
enum class NearestRounding : std::uint8_t { round_prefer_floor, round_prefer_ceil, floor, ceil };
struct ResizeParams {
  bool linear = false;  // else nearest
  ResizeCoordinates coordinates = ResizeCoordinates::half_pixel;
  NearestRounding rounding = NearestRounding::round_prefer_floor;
  int n = 0, h = 0, w = 0, c = 0, out_h = 0, out_w = 0;
};
// NHWC resize of H and W.
void resize(DType type, const ResizeParams& p, void* y, const void* x, cudaStream_t stream);

// Softmax (or, with `log`, LogSoftmax) over `len` elements spaced `inner` apart, for each of outer * inner rows
// (contiguous [outer, len, inner]).
void softmax(DType type, void* y, const void* x, std::int64_t outer, std::int64_t len, std::int64_t inner, bool log,
             cudaStream_t stream);

// The rows of ArgMax, ArgMin and TopK: every index of the `rank` other dimensions names a row of `length` elements
// along the axis. Each dimension has its stride in x and in the two outputs (values, indices); along the axis x's
// elements are x_axis_stride apart and the outputs' values_axis_stride / indices_axis_stride.
struct AxisRows {
  int rank = 0;
  std::int64_t shape[kMaxRank] = {}, x_stride[kMaxRank] = {}, values_stride[kMaxRank] = {},
               indices_stride[kMaxRank] = {};
  std::int64_t length = 0, x_axis_stride = 0, values_axis_stride = 0, indices_axis_stride = 0;
  std::int64_t rows() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
};

// ArgMax/ArgMin: indices[row] = the position of the row's first element in `order` (nn/ranking.hpp), x of `type`,
// the positions written as numbers of `index_type` (exact while length <= its kExactIndexAxis*, which the caller
// checks; f32 for index values, nn/exact_indices.hpp).
void arg_extreme(DType type, DType index_type, void* indices, const void* x, const AxisRows& rows, RankOrder order,
                 cudaStream_t stream);

// TopK: the row's first k elements in `order` (values of `type`) and their positions (numbers of `index_type`),
// sorted. Rows of up to kTopKCountMaxLength elements (and any row whose ties go to the later index): each
// element's rank is counted against the whole row, one thread an element. Longer rows: (key, position) pairs
// sorted by CUB's radix sort in `scratch`, which must hold top_k_scratch_bytes(rows, length, k, order) bytes for
// the rows of the run (fewer rows need no more).
inline constexpr std::int64_t kTopKCountMaxLength = 1024;
bool top_k_sorts(std::int64_t length, std::int64_t k, RankOrder order);
std::size_t top_k_scratch_bytes(std::int64_t rows, std::int64_t length, std::int64_t k, RankOrder order);
void top_k(DType type, DType index_type, void* values, void* indices, const void* x, const AxisRows& rows,
           std::int64_t k, RankOrder order, void* scratch, std::size_t scratch_bytes, cudaStream_t stream);

// GatherElements (nn/graph.hpp): y[i..] = x[i.. with i_axis replaced by the index at indices[i..]], over every
// element of y (y and indices share a shape; all three read and written through their views). Indices are f32
// when `indices_f32` (a constant uploaded so, or an index value: nn/exact_indices.hpp), else the element type; one is rounded to the nearest integer, a
// negative one counts from the end, and one outside [-x.shape[axis], x.shape[axis]) or NaN writes NaN
// (nn/sampling_math.hpp).
void gather_elements(DType type, void* y, const View& y_view, const void* x, const View& x_view, const void* indices,
                     const View& indices_view, bool indices_f32, int axis, cudaStream_t stream);

// GridSample (nn/graph.hpp) of 4-D views x [N, C, H, W], grid [N, Ho, Wo, 2], y [N, C, Ho, Wo]; f32 coordinates
// and accumulation (nn/sampling_math.hpp: the CPU layer's very formulas).
struct GridSampleParams {
  bool nearest = false;  // else bilinear
  std::uint8_t padding = 0;  // GridSamplePadding (nn/sampling_math.hpp)
  bool align_corners = false;
};
void grid_sample(DType type, const GridSampleParams& p, void* y, const View& y_view, const void* x,
                 const View& x_view, const void* grid, const View& grid_view, cudaStream_t stream);

}  // namespace sluice::nn::cuda

// Device-independent halves of the TensorFlow op kernels: attributes parsed
// and validated once at construction, shapes checked per call, then one
// Runner<Device> call per computation. cpu_kernels.cc and gpu_kernels.cc
// specialize Runner and register the kernels.
#pragma once
#include <string>
#include <vector>

#include "detconv/kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace detconv_tf {

using detconv::ConvProblem;
using detconv::i64;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr detconv::DType v = detconv::DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr detconv::DType v = detconv::DType::kFloat64; };
template <> struct DTypeOf<Eigen::half> { static constexpr detconv::DType v = detconv::DType::kFloat16; };
template <> struct DTypeOf<Eigen::bfloat16> { static constexpr detconv::DType v = detconv::DType::kBFloat16; };

// Per-device launch of the four computations on raw buffers.
template <class Device>
struct Runner {
  static absl::Status fprop(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* f, const void* b, void* y);
  static absl::Status dgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, const void* f, void* dx);
  static absl::Status wgrad(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* dy, void* dw);
  static absl::Status bgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, void* db);
};

// Attributes shared by the convolution ops of NS spatial dimensions (2: the
// Conv2D ops, [h, w]; 3: the Conv3D ops, [d, h, w]).
template <int NS>
class ConvAttrs {
 public:
  explicit ConvAttrs(OpKernelConstruction* c) {
    std::vector<int32_t> st, dl;
    std::vector<int64_t> ep;
    std::string padding, df, acc;
    OP_REQUIRES_OK(c, c->GetAttr("strides", &st));
    OP_REQUIRES_OK(c, c->GetAttr("dilations", &dl));
    OP_REQUIRES_OK(c, c->GetAttr("padding", &padding));
    OP_REQUIRES_OK(c, c->GetAttr("explicit_paddings", &ep));
    OP_REQUIRES_OK(c, c->GetAttr("data_format", &df));
    OP_REQUIRES_OK(c, c->GetAttr("accumulation", &acc));
    const std::string axes = NS == 3 ? "[d, h, w]" : "[h, w]";
    OP_REQUIRES(c, st.size() == NS, absl::InvalidArgumentError("strides: expected " + std::to_string(NS) + " values " + axes));
    OP_REQUIRES(c, dl.size() == NS, absl::InvalidArgumentError("dilations: expected " + std::to_string(NS) + " values " + axes));
    for (int i = 0; i < NS; ++i) {
      OP_REQUIRES(c, st[i] >= 1, absl::InvalidArgumentError("strides: must be >= 1"));
      OP_REQUIRES(c, dl[i] >= 1, absl::InvalidArgumentError("dilations: must be >= 1"));
    }
    mode_ = padding == "SAME" ? detconv::Padding::kSame
                              : (padding == "VALID" ? detconv::Padding::kValid : detconv::Padding::kExplicit);
    std::vector<int64_t> pads(2 * NS, 0);
    if (mode_ == detconv::Padding::kExplicit) {
      OP_REQUIRES(c, ep.size() == 2 * NS,
                  absl::InvalidArgumentError("explicit_paddings: expected " + std::to_string(2 * NS) +
                                             " values [before, after] per spatial axis " + axes));
      for (int64_t v : ep) OP_REQUIRES(c, v >= 0, absl::InvalidArgumentError("padding: explicit padding must be >= 0"));
      pads = ep;
    } else {
      OP_REQUIRES(c, ep.empty(), absl::InvalidArgumentError("explicit_paddings: only allowed with padding='EXPLICIT'"));
    }
    const int h = NS - 2;  // index of the height axis in st/dl ([d,] h, w)
    base_.sh = st[h]; base_.sw = st[h + 1]; base_.dh = dl[h]; base_.dw = dl[h + 1];
    base_.pt = pads[2 * h]; base_.pb = pads[2 * h + 1]; base_.pl = pads[2 * h + 2]; base_.pr = pads[2 * h + 3];
    if (NS == 3) {
      base_.sd = st[0]; base_.dd = dl[0]; base_.pf = pads[0]; base_.pk = pads[1];
    }
    base_.layout = (df == "NCHW" || df == "NCDHW") ? detconv::Layout::kNCHW : detconv::Layout::kNHWC;
    base_.accum = acc == "float16" ? detconv::Accum::kFloat16 : detconv::Accum::kDefault;
  }

  // Builds the problem from an input shape (in data_format order) and a ([D]HWIO) filter shape.
  absl::Status problem(detconv::DType dt, const TensorShape& x, const TensorShape& f, ConvProblem* p) const {
    if (x.dims() != NS + 2)
      return absl::InvalidArgumentError("input: must be rank " + std::to_string(NS + 2) + ", got shape " + x.DebugString());
    if (f.dims() != NS + 2)
      return absl::InvalidArgumentError("filters: must be rank " + std::to_string(NS + 2) + " (" +
                                        (NS == 3 ? "DHWIO" : "HWIO") + "), got shape " + f.DebugString());
    *p = base_;
    p->dtype = dt;
    const bool cf = base_.layout == detconv::Layout::kNCHW;
    const int s0 = cf ? 2 : 1;  // first spatial axis
    p->N = x.dim_size(0);
    p->C = x.dim_size(cf ? 1 : NS + 1);
    if (NS == 3) p->D = x.dim_size(s0);
    p->H = x.dim_size(s0 + NS - 2);
    p->W = x.dim_size(s0 + NS - 1);
    if (NS == 3) p->KD = f.dim_size(0);
    p->KH = f.dim_size(NS - 2); p->KW = f.dim_size(NS - 1); p->Cg = f.dim_size(NS); p->Co = f.dim_size(NS + 1);
    const std::string err = detconv::finalize_problem(*p, mode_);
    if (!err.empty()) return absl::InvalidArgumentError(err);
    return absl::OkStatus();
  }

  TensorShape out_shape(const ConvProblem& p) const { return shape(p, p.OD, p.OH, p.OW, p.Co); }
  TensorShape in_shape(const ConvProblem& p) const { return shape(p, p.D, p.H, p.W, p.C); }
  detconv::Layout layout() const { return base_.layout; }

 private:
  static TensorShape shape(const ConvProblem& p, i64 d, i64 h, i64 w, i64 c) {
    const bool cf = p.layout == detconv::Layout::kNCHW;
    if (NS == 3) return cf ? TensorShape({p.N, c, d, h, w}) : TensorShape({p.N, d, h, w, c});
    return cf ? TensorShape({p.N, c, h, w}) : TensorShape({p.N, h, w, c});
  }
  ConvProblem base_;
  detconv::Padding mode_ = detconv::Padding::kValid;
};

// A user-given shape vector of `rank` sizes; a shape whose element count
// overflows is an InvalidArgumentError, never TensorShape's fatal check.
inline absl::Status shape_from_vector(const Tensor& t, const char* name, int rank, TensorShape* out) {
  if (t.dims() != 1 || t.NumElements() != rank)
    return absl::InvalidArgumentError(std::string(name) + ": must be a vector of " + std::to_string(rank) +
                                      " int32 values");
  auto v = t.flat<int32_t>();
  std::vector<int64_t> dims(v.data(), v.data() + rank);
  for (int64_t d : dims)
    if (d < 0) return absl::InvalidArgumentError(std::string(name) + ": sizes must be >= 0");
  int64_t n = 1;
  for (int64_t d : dims)
    if (!detconv::problem_detail::count({n, d}, &n))
      return absl::InvalidArgumentError(std::string(name) + ": the shape has too many elements");
  return TensorShape::BuildTensorShape(dims, out);
}

inline absl::Status same_dtype(const Tensor& a, const Tensor& b, const char* name) {
  if (a.dtype() != b.dtype()) return absl::InvalidArgumentError(std::string(name) + ": dtype mismatch");
  return absl::OkStatus();
}

template <class Device, class T, int NS>
class ConvOp : public OpKernel {
 public:
  explicit ConvOp(OpKernelConstruction* c) : OpKernel(c), attrs_(c) { OP_REQUIRES_OK(c, c->GetAttr("use_bias", &use_bias_)); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& f = ctx->input(1);
    const Tensor& b = ctx->input(2);
    ConvProblem p;
    OP_REQUIRES_OK(ctx, attrs_.problem(DTypeOf<T>::v, x.shape(), f.shape(), &p));
    if (use_bias_) {
      OP_REQUIRES(ctx, b.dims() == 1 && b.dim_size(0) == p.Co,
                  absl::InvalidArgumentError("bias: must have shape [" + std::to_string(p.Co) + "] (out-channels), got " +
                                             b.shape().DebugString()));
    }
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, attrs_.out_shape(p), &y));
    if (y->NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, Runner<Device>::fprop(ctx, p, x.data(), f.data(), use_bias_ ? b.data() : nullptr, y->data()));
  }

 private:
  ConvAttrs<NS> attrs_;
  bool use_bias_ = false;
};

template <class Device, class T, int NS>
class ConvBackpropInputOp : public OpKernel {
 public:
  explicit ConvBackpropInputOp(OpKernelConstruction* c) : OpKernel(c), attrs_(c) {}
  void Compute(OpKernelContext* ctx) override {
    TensorShape xs;
    OP_REQUIRES_OK(ctx, shape_from_vector(ctx->input(0), "input_sizes", NS + 2, &xs));
    const Tensor& f = ctx->input(1);
    const Tensor& dy = ctx->input(2);
    ConvProblem p;
    OP_REQUIRES_OK(ctx, attrs_.problem(DTypeOf<T>::v, xs, f.shape(), &p));
    OP_REQUIRES(ctx, dy.shape() == attrs_.out_shape(p),
                absl::InvalidArgumentError("out_backprop: expected shape " + attrs_.out_shape(p).DebugString() +
                                           ", got " + dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, xs, &dx));
    if (dx->NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, Runner<Device>::dgrad(ctx, p, dy.data(), f.data(), dx->data()));
  }

 private:
  ConvAttrs<NS> attrs_;
};

template <class Device, class T, int NS>
class ConvBackpropFilterOp : public OpKernel {
 public:
  explicit ConvBackpropFilterOp(OpKernelConstruction* c) : OpKernel(c), attrs_(c) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    TensorShape fs;
    OP_REQUIRES_OK(ctx, shape_from_vector(ctx->input(1), "filter_sizes", NS + 2, &fs));
    const Tensor& dy = ctx->input(2);
    ConvProblem p;
    OP_REQUIRES_OK(ctx, attrs_.problem(DTypeOf<T>::v, x.shape(), fs, &p));
    OP_REQUIRES(ctx, dy.shape() == attrs_.out_shape(p),
                absl::InvalidArgumentError("out_backprop: expected shape " + attrs_.out_shape(p).DebugString() +
                                           ", got " + dy.shape().DebugString()));
    Tensor* dw = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, fs, &dw));
    if (dw->NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, Runner<Device>::wgrad(ctx, p, x.data(), dy.data(), dw->data()));
  }

 private:
  ConvAttrs<NS> attrs_;
};

template <class Device, class T>
class BiasGradOp : public OpKernel {
 public:
  explicit BiasGradOp(OpKernelConstruction* c) : OpKernel(c) {
    std::string df, acc;
    OP_REQUIRES_OK(c, c->GetAttr("data_format", &df));
    OP_REQUIRES_OK(c, c->GetAttr("accumulation", &acc));
    layout_ = df == "NCHW" ? detconv::Layout::kNCHW : detconv::Layout::kNHWC;
    accum_ = acc == "float16" ? detconv::Accum::kFloat16 : detconv::Accum::kDefault;
    OP_REQUIRES(c, accum_ == detconv::Accum::kDefault || DTypeOf<T>::v == detconv::DType::kFloat16,
                absl::InvalidArgumentError("accumulation: 'float16' needs float16 inputs"));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const int rank = dy.dims();
    OP_REQUIRES(ctx, rank == 4 || rank == 5, absl::InvalidArgumentError("out_backprop: must be rank 4 or 5"));
    const bool cf = layout_ == detconv::Layout::kNCHW;
    const int s0 = cf ? 2 : 1;  // first spatial axis
    // db only needs the output-shaped view of the problem: N, (OD,) OH, OW, Co.
    ConvProblem p;
    p.layout = layout_;
    p.accum = accum_;
    p.dtype = DTypeOf<T>::v;
    p.N = dy.dim_size(0);
    p.Co = dy.dim_size(cf ? 1 : rank - 1);
    if (rank == 5) p.OD = dy.dim_size(s0);
    p.OH = dy.dim_size(s0 + rank - 4);
    p.OW = dy.dim_size(s0 + rank - 3);
    Tensor* db = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({p.Co}), &db));
    if (p.Co == 0) return;
    OP_REQUIRES_OK(ctx, Runner<Device>::bgrad(ctx, p, dy.data(), db->data()));
  }

 private:
  detconv::Layout layout_;
  detconv::Accum accum_;
};

// Registers the kernels of one device for one type: the 2-D and 3-D ops, and BiasGrad (rank 4 or 5).
#define DETCONV_REGISTER_CONV_KERNELS(DEVICE_NAME, DEVICE, T, NS, OPNAME)                                   \
  REGISTER_KERNEL_BUILDER(Name("DetConv>" OPNAME).Device(DEVICE_NAME).TypeConstraint<T>("T"),               \
                          ::detconv_tf::ConvOp<DEVICE, T, NS>);                                             \
  REGISTER_KERNEL_BUILDER(Name("DetConv>" OPNAME "BackpropInput")                                           \
                              .Device(DEVICE_NAME)                                                          \
                              .TypeConstraint<T>("T")                                                       \
                              .HostMemory("input_sizes"),                                                   \
                          ::detconv_tf::ConvBackpropInputOp<DEVICE, T, NS>);                                \
  REGISTER_KERNEL_BUILDER(Name("DetConv>" OPNAME "BackpropFilter")                                          \
                              .Device(DEVICE_NAME)                                                          \
                              .TypeConstraint<T>("T")                                                       \
                              .HostMemory("filter_sizes"),                                                  \
                          ::detconv_tf::ConvBackpropFilterOp<DEVICE, T, NS>);
#define DETCONV_REGISTER_KERNELS(DEVICE_NAME, DEVICE, T)                                                   \
  DETCONV_REGISTER_CONV_KERNELS(DEVICE_NAME, DEVICE, T, 2, "Conv2D")                                        \
  DETCONV_REGISTER_CONV_KERNELS(DEVICE_NAME, DEVICE, T, 3, "Conv3D")                                        \
  REGISTER_KERNEL_BUILDER(Name("DetConv>BiasGrad").Device(DEVICE_NAME).TypeConstraint<T>("T"),              \
                          ::detconv_tf::BiasGradOp<DEVICE, T>);

}  // namespace detconv_tf

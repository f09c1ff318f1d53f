// Op definitions (no kernels): names, attributes and static shape inference.
// Strides, dilations and paddings are the resolved [h, w] forms; the Python
// layer (detconv/ops.py) turns tf.nn-style arguments into them.
#include <string>
#include <vector>

#include "detconv/problem.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace detconv_tf {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

#define DETCONV_ATTRS(STRIDES, FORMATS)                        \
  Attr("T: {half, bfloat16, float, double}")                   \
      .Attr("strides: list(int) = " STRIDES)                   \
      .Attr("dilations: list(int) = " STRIDES)                 \
      .Attr("padding: {'SAME', 'VALID', 'EXPLICIT'} = 'VALID'") \
      .Attr("explicit_paddings: list(int) = []")               \
      .Attr("data_format: " FORMATS)                           \
      .Attr("accumulation: {'default', 'float16'} = 'default'")
#define DETCONV_COMMON_ATTRS DETCONV_ATTRS("[1, 1]", "{'NHWC', 'NCHW'} = 'NHWC'")
#define DETCONV_3D_ATTRS DETCONV_ATTRS("[1, 1, 1]", "{'NDHWC', 'NCDHW'} = 'NDHWC'")

namespace {

bool nchw(InferenceContext* c) {
  std::string df;
  return c->GetAttr("data_format", &df).ok() && (df == "NCHW" || df == "NCDHW");
}

// Output size along one spatial axis (the problem's own arithmetic,
// overflow-checked), -1 if unknown or invalid (the kernel then reports the
// error with the argument's name).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, const std::string& padding, int64_t lo, int64_t hi) {
  if (in < 0 || k < 1 || s < 1 || d < 1 || lo < 0 || hi < 0) return -1;
  const detconv::Padding mode = padding == "SAME" ? detconv::Padding::kSame
                                : padding == "VALID" ? detconv::Padding::kValid
                                                     : detconv::Padding::kExplicit;
  int64_t out = -1;
  if (!detconv::problem_detail::resolve_dim(mode, in, k, s, d, &lo, &hi, &out).empty()) return -1;
  return out;
}

// Output shape of a convolution with NS spatial dimensions.
template <int NS>
absl::Status conv_shape(InferenceContext* c) {
  ShapeHandle x, f;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), NS + 2, &x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), NS + 2, &f));
  std::vector<int32_t> st, dl;
  std::vector<int64_t> ep;
  std::string padding;
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &st));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dl));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &ep));
  if (st.size() != NS) return absl::InvalidArgumentError("strides: expected one value per spatial axis");
  if (dl.size() != NS) return absl::InvalidArgumentError("dilations: expected one value per spatial axis");
  if (padding == "EXPLICIT" && ep.size() != 2 * NS)
    return absl::InvalidArgumentError("explicit_paddings: expected [before, after] per spatial axis");
  const bool cf = nchw(c);
  const int s0 = cf ? 2 : 1;  // first spatial axis
  std::vector<DimensionHandle> dims = {c->Dim(x, 0)};
  for (int i = 0; i < NS; ++i) {
    const int64_t lo = ep.size() == 2 * NS ? ep[2 * i] : 0, hi = ep.size() == 2 * NS ? ep[2 * i + 1] : 0;
    const int64_t o = out_size(c->Value(c->Dim(x, s0 + i)), c->Value(c->Dim(f, i)), st[i], dl[i], padding, lo, hi);
    dims.push_back(o < 0 ? c->UnknownDim() : c->MakeDim(o));
  }
  const DimensionHandle co = c->Dim(f, NS + 1);
  if (cf) dims.insert(dims.begin() + 1, co);
  else dims.push_back(co);
  c->set_output(0, c->MakeShape(dims));
  return absl::OkStatus();
}

template <int NS, int INPUT>
absl::Status shape_from_sizes(InferenceContext* c) {
  ShapeHandle s;
  TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(INPUT, &s));
  TF_RETURN_IF_ERROR(c->WithRank(s, NS + 2, &s));
  c->set_output(0, s);
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("DetConv>Conv2D")
    .Input("input: T")
    .Input("filter: T")
    .Input("bias: T")
    .Output("output: T")
    .DETCONV_COMMON_ATTRS
    .Attr("use_bias: bool = false")
    .SetShapeFn(conv_shape<2>)
    .Doc("Deterministic conv2d (+ fused bias) in the order of detconv docs/contract.md. bias is [Co], or [0] when use_bias is false.");

REGISTER_OP("DetConv>Conv2DBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_COMMON_ATTRS
    .SetShapeFn(shape_from_sizes<2, 0>)
    .Doc("Deterministic input gradient of DetConv>Conv2D; input_sizes in data_format order.");

REGISTER_OP("DetConv>Conv2DBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_COMMON_ATTRS
    .SetShapeFn(shape_from_sizes<2, 1>)
    .Doc("Deterministic filter gradient of DetConv>Conv2D (shape-only chunks, no atomics); filter_sizes HWIO.");

REGISTER_OP("DetConv>BiasGrad")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
    .Attr("accumulation: {'default', 'float16'} = 'default'")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle s;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 4, &s));
      TF_RETURN_IF_ERROR(c->WithRankAtMost(s, 5, &s));
      if (!c->RankKnown(s)) {
        c->set_output(0, c->Vector(c->UnknownDim()));
        return absl::OkStatus();
      }
      c->set_output(0, c->Vector(c->Dim(s, nchw(c) ? 1 : c->Rank(s) - 1)));
      return absl::OkStatus();
    })
    .Doc("Deterministic bias gradient: the sum of out_backprop over n and its (2 or 3) spatial axes in chunk "
         "order; NCHW means channels first for rank 5 too.");

REGISTER_OP("DetConv>Conv3D")
    .Input("input: T")
    .Input("filter: T")
    .Input("bias: T")
    .Output("output: T")
    .DETCONV_3D_ATTRS
    .Attr("use_bias: bool = false")
    .SetShapeFn(conv_shape<3>)
    .Doc("Deterministic conv3d (+ fused bias), fold order (kd, kh, kw, i). strides/dilations [d, h, w].");

REGISTER_OP("DetConv>Conv3DBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_3D_ATTRS
    .SetShapeFn(shape_from_sizes<3, 0>)
    .Doc("Deterministic input gradient of DetConv>Conv3D, fold order (kd, kh, kw, o).");

REGISTER_OP("DetConv>Conv3DBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_3D_ATTRS
    .SetShapeFn(shape_from_sizes<3, 1>)
    .Doc("Deterministic filter gradient of DetConv>Conv3D (shape-only chunks over r = ((n*OD+od)*OH+oh)*OW+ow).");

}  // namespace detconv_tf

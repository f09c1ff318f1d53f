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

#define DETCONV_COMMON_ATTRS                                   \
  Attr("T: {half, bfloat16, float, double}")                   \
      .Attr("strides: list(int) = [1, 1]")                     \
      .Attr("dilations: list(int) = [1, 1]")                   \
      .Attr("padding: {'SAME', 'VALID', 'EXPLICIT'} = 'VALID'") \
      .Attr("explicit_paddings: list(int) = []")               \
      .Attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")          \
      .Attr("accumulation: {'default', 'float16'} = 'default'")

namespace {

bool nchw(InferenceContext* c) {
  std::string df;
  return c->GetAttr("data_format", &df).ok() && df == "NCHW";
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

absl::Status conv_shape(InferenceContext* c) {
  ShapeHandle x, f;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &f));
  std::vector<int32_t> st, dl;
  std::vector<int64_t> ep;
  std::string padding;
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &st));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dl));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &ep));
  if (st.size() != 2) return absl::InvalidArgumentError("strides: expected 2 values [h, w]");
  if (dl.size() != 2) return absl::InvalidArgumentError("dilations: expected 2 values [h, w]");
  if (padding == "EXPLICIT" && ep.size() != 4)
    return absl::InvalidArgumentError("explicit_paddings: expected 4 values [top, bottom, left, right]");
  const bool cf = nchw(c);
  const int hax = cf ? 2 : 1, wax = cf ? 3 : 2, cax = cf ? 1 : 3;
  auto val = [&](ShapeHandle s, int i) { return c->Value(c->Dim(s, i)); };
  const int64_t lo_h = ep.size() == 4 ? ep[0] : 0, hi_h = ep.size() == 4 ? ep[1] : 0;
  const int64_t lo_w = ep.size() == 4 ? ep[2] : 0, hi_w = ep.size() == 4 ? ep[3] : 0;
  const int64_t oh = out_size(val(x, hax), val(f, 0), st[0], dl[0], padding, lo_h, hi_h);
  const int64_t ow = out_size(val(x, wax), val(f, 1), st[1], dl[1], padding, lo_w, hi_w);
  DimensionHandle n = c->Dim(x, 0), co = c->Dim(f, 3);
  DimensionHandle dh = oh < 0 ? c->UnknownDim() : c->MakeDim(oh);
  DimensionHandle dw = ow < 0 ? c->UnknownDim() : c->MakeDim(ow);
  (void)cax;
  c->set_output(0, cf ? c->MakeShape({n, co, dh, dw}) : c->MakeShape({n, dh, dw, co}));
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
    .SetShapeFn(conv_shape)
    .Doc("Deterministic conv2d (+ fused bias) in the order of detconv CONTRACT.md. bias is [Co], or [0] when use_bias is false.");

REGISTER_OP("DetConv>Conv2DBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle s;
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(0, &s));
      TF_RETURN_IF_ERROR(c->WithRank(s, 4, &s));
      c->set_output(0, s);
      return absl::OkStatus();
    })
    .Doc("Deterministic input gradient of DetConv>Conv2D; input_sizes in data_format order.");

REGISTER_OP("DetConv>Conv2DBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .DETCONV_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle s;
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(1, &s));
      TF_RETURN_IF_ERROR(c->WithRank(s, 4, &s));
      c->set_output(0, s);
      return absl::OkStatus();
    })
    .Doc("Deterministic filter gradient of DetConv>Conv2D (shape-only chunks, no atomics); filter_sizes HWIO.");

REGISTER_OP("DetConv>BiasGrad")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
    .Attr("accumulation: {'default', 'float16'} = 'default'")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle s;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &s));
      c->set_output(0, c->Vector(c->Dim(s, nchw(c) ? 1 : 3)));
      return absl::OkStatus();
    })
    .Doc("Deterministic bias gradient: the sum of out_backprop over n, h, w in chunk order.");

}  // namespace detconv_tf

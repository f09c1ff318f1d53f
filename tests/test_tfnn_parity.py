"""detconv as a drop-in for tf.nn: where tf.nn accepts a call, detconv accepts it with the same shape and dtype
(values: see same_outcome); where tf.nn rejects it, detconv raises
the same exception class. One documented difference: a non-integral float stride, which tf.nn truncates, is a
ValueError in detconv."""

import numpy as np
import pytest
import tensorflow as tf

import detconv
from detconv import reference as ref

rng = np.random.default_rng(7)
X = rng.standard_normal((2, 6, 7, 4)).astype(np.float32)
F = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)


def outcome(fn):
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return ("error", type(e))
    return ("ok", tuple(r.shape), tf.as_dtype(r.dtype), np.asarray(r))


def same_outcome(tf_fn, dc_fn, rtol=1e-4, values=False):
    """Same acceptance, shape and dtype, or the same exception class. Values are compared with tf.nn only on
    request (its oneDNN path is not always right, see the randomized test); detconv's own values are checked
    bit for bit against detconv.reference here and in the other test modules."""
    want, got = outcome(tf_fn), outcome(dc_fn)
    assert want[0] == got[0], f"tf.nn: {want[:3]}, detconv: {got[:3]}"
    if want[0] == "error":
        assert issubclass(got[1], want[1]) or issubclass(want[1], got[1]), (want[1], got[1])
        return None
    assert want[1:3] == got[1:3], (want[1:3], got[1:3])
    if values:
        np.testing.assert_allclose(got[3], want[3], rtol=rtol, atol=rtol)
    return got[3]


CONV2D_FORMS = [
    ("numpy int stride", dict(strides=np.int64(2))),
    ("numpy int list", dict(strides=[np.int32(1), np.int64(2)])),
    ("integral float stride", dict(strides=2.0)),
    ("string stride", dict(strides="1")),
    ("string in list", dict(strides=[1, "1"])),
    ("string dilation", dict(dilations="1")),
    ("lowercase padding", dict(padding="same")),
    ("unknown padding", dict(padding="FULL")),
    ("4-list strides", dict(strides=[1, 2, 1, 1])),
    ("rank-5 input", dict(input=np.stack([X, X]))),
    ("rank-6 input", dict(input=X.reshape(1, 2, 1, 6, 7, 4))),
    ("numpy f64 filter with f32 input", dict(filters=F.astype(np.float64))),
    ("f64 tensor input, numpy f32 filter", dict(input=tf.constant(X, tf.float64))),
    ("numpy input, f64 tensor filter", dict(filters=tf.constant(F, tf.float64))),
    ("list filter with f64 tensor", dict(input=tf.constant(X, tf.float64), filters=F.tolist())),
    ("two tensors of different dtypes", dict(input=tf.constant(X), filters=tf.constant(F, tf.float64))),
]


@pytest.mark.parametrize("what,kw", CONV2D_FORMS, ids=[c[0] for c in CONV2D_FORMS])
def test_conv2d_argument_forms(what, kw):
    args = dict(input=X, filters=F, strides=1, padding="SAME")
    args.update(kw)
    same_outcome(lambda: tf.nn.conv2d(**args), lambda: detconv.conv2d(**args))


def test_non_integral_stride_is_a_clear_error():
    with pytest.raises(ValueError, match="strides"):
        detconv.conv2d(X, F, 1.5, "SAME")  # tf.nn truncates to 1


CONV1D_FORMS = [
    ("NWC", dict()),
    ("NHWC spelling", dict(data_format="NHWC")),
    ("NCHW spelling", dict(input=np.transpose(X[0], (0, 2, 1)), data_format="NCHW")),
    ("rank-4 input", dict(input=X)),
]


@pytest.mark.parametrize("what,kw", CONV1D_FORMS, ids=[c[0] for c in CONV1D_FORMS])
def test_conv1d_argument_forms(what, kw):
    args = dict(input=X[0], filters=F[0], stride=1, padding="SAME")
    args.update(kw)
    same_outcome(lambda: tf.nn.conv1d(**args), lambda: detconv.conv1d(**args))


def test_backprop_input_with_spatial_sizes_only():
    dy = rng.standard_normal((2, 6, 7, 5)).astype(np.float32)
    y = same_outcome(lambda: tf.compat.v1.nn.conv2d_backprop_input([6, 7], F, dy, [1, 1, 1, 1], "SAME"),
                     lambda: detconv.conv2d_backprop_input([6, 7], F, dy, 1, "SAME"))
    assert y.tobytes() == np.asarray(detconv.conv2d_backprop_input([2, 6, 7, 4], F, dy, 1, "SAME")).tobytes()


def test_transpose_with_list_filters_follows_the_input_dtype():
    x = tf.constant(rng.standard_normal((1, 4, 4, 5)), tf.float64)
    f = rng.standard_normal((2, 2, 4, 5)).tolist()
    same_outcome(lambda: tf.nn.conv2d_transpose(x, f, [1, 4, 4, 4], 1, "SAME"),
                 lambda: detconv.conv2d_transpose(x, f, [1, 4, 4, 4], 1, "SAME"))


def test_randomized_argument_forms():
    """Seeded random combinations of argument spellings tf.nn accepts; detconv must agree on all."""
    r = np.random.default_rng(2026)

    def spell(v, dims):
        k = r.integers(5)
        if k == 0:
            return int(v[0]) if v[0] == v[1] else list(v)
        if k == 1:
            return [np.int64(v[0]), np.int32(v[1])]
        if k == 2:
            return tuple(float(e) for e in v)
        if k == 3:
            return [1, *v, 1] if dims == "NHWC" else [1, 1, *v]
        return np.array(v)

    for case in range(200):
        fmt = "NHWC" if r.integers(4) else "NCHW"
        n, h, w, c, co = (int(r.integers(1, 3)), int(r.integers(3, 9)), int(r.integers(3, 9)),
                          int(r.integers(1, 4)), int(r.integers(1, 4)))
        kh, kw = int(r.integers(1, 4)), int(r.integers(1, 4))
        use_dil = r.integers(3) == 0  # tf.nn allows strides > 1 only without dilations on CPU
        st = (1, 1) if use_dil else (int(r.integers(1, 3)), int(r.integers(1, 3)))
        dl = (int(r.integers(1, 3)), int(r.integers(1, 3))) if use_dil else (1, 1)
        pad = ["SAME", "VALID", "same", [[0, 0], [1, 0], [0, 2], [0, 0]]][r.integers(4)]
        if isinstance(pad, list) and fmt == "NCHW":
            pad = [[0, 0], [0, 0], pad[1], pad[2]]
        # a dilated filter larger than the padded input: tf.nn's CPU paths disagree with each other
        # there (oneDNN returns garbage shapes), so the random forms stay clear of it
        extra = (1, 2) if isinstance(pad, list) else (0, 0)
        if pad != "SAME" and ((kh - 1) * dl[0] + 1 > h + extra[0] or (kw - 1) * dl[1] + 1 > w + extra[1]):
            pad = "SAME"
        x = r.standard_normal((n, h, w, c) if fmt == "NHWC" else (n, c, h, w)).astype(np.float32)
        f = r.standard_normal((kh, kw, c, co)).astype(np.float32)
        if r.integers(2):
            x = tf.constant(x)
        args = dict(strides=spell(st, fmt), padding=pad, data_format=fmt, dilations=spell(dl, fmt))
        if fmt == "NCHW":  # tf.nn's CPU conv2d is NHWC-only: compare against it through transposes
            def tf_fn():
                xt = tf.transpose(x, (0, 2, 3, 1))
                a = dict(args, data_format="NHWC",
                         strides=st, dilations=dl,
                         padding=pad if not isinstance(pad, list) else [[0, 0], pad[2], pad[3], [0, 0]])
                return tf.transpose(tf.nn.conv2d(xt, f, **a), (0, 3, 1, 2))
        else:
            def tf_fn():
                return tf.nn.conv2d(x, f, **args)
        try:
            # tf.nn for acceptance, shape and dtype; the values against the reference, bit for bit, with
            # the canonical arguments (tf.nn's oneDNN path returned garbage for some of these shapes,
            # e.g. x (2, 7, 3, 1), f (2, 2, 1, 2), VALID, strides (1, 2), in TensorFlow 2.21)
            y = same_outcome(tf_fn, lambda: detconv.conv2d(x, f, **args), values=False)
            if y is not None:
                xn = np.asarray(x) if fmt == "NHWC" else np.transpose(np.asarray(x), (0, 2, 3, 1))
                p = pad.upper() if isinstance(pad, str) else ((pad[1], pad[2]) if fmt == "NHWC" else (pad[2], pad[3]))
                want = ref.conv2d(xn, f, st, p, dl)
                if fmt == "NCHW":
                    want = np.transpose(want, (0, 3, 1, 2))
                assert want.tobytes() == y.tobytes(), "values differ from detconv.reference"
        except AssertionError as e:
            raise AssertionError(f"case {case}: {fmt} x{tuple(x.shape)} f{f.shape} {args}: {e}") from None


# tf.nn's other convolution entry points: atrous_conv2d(_transpose) are the stride-1 dilated conv2d and
# conv2d_transpose, conv_transpose picks the transposed convolution by output_shape's length. Their values are
# the reference's, bit for bit; tf.nn's (space_to_batch for the atrous transpose) within a tolerance.
ATROUS_PADDINGS = [("SAME", "SAME"), ("VALID", "VALID"),
                   ([[0, 0], [1, 2], [2, 1], [0, 0]], ((1, 2), (2, 1)))]


@pytest.mark.parametrize("rate", [1, 2, [2, 1]], ids=str)
@pytest.mark.parametrize("pad,ref_pad", ATROUS_PADDINGS, ids=["SAME", "VALID", "explicit"])
def test_atrous_conv2d(rate, pad, ref_pad):
    if rate == 1 and not isinstance(pad, str):
        pytest.skip("tf.nn's rate-1 path takes string padding only (SUPERSET)")
    y = same_outcome(lambda: tf.nn.atrous_conv2d(X, F, rate, pad), lambda: detconv.atrous_conv2d(X, F, rate, pad),
                     values=True)
    assert y.tobytes() == ref.conv2d(X, F, 1, ref_pad, tuple(np.broadcast_to(rate, 2))).tobytes()


@pytest.mark.parametrize("rate", [1, 2, 3])
@pytest.mark.parametrize("pad", ["SAME", "VALID"])
def test_atrous_conv2d_transpose(rate, pad):
    e = 2 * rate + 1  # the dilated filter's extent
    dy = rng.standard_normal((2, 6, 7, 5) if pad == "SAME" else (2, 7 - e, 8 - e, 5)).astype(np.float32)
    shape = [2, 6, 7, 4]
    y = same_outcome(lambda: tf.nn.atrous_conv2d_transpose(dy, F, shape, rate, pad),
                     lambda: detconv.atrous_conv2d_transpose(dy, F, shape, rate, pad), values=True)
    assert y.tobytes() == ref.conv2d_backprop_input(dy, F, tuple(shape), 1, pad, rate).tobytes()


def test_conv_transpose_by_output_shape_length():
    dy2 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for shape_of in (list, tuple, np.array, tf.constant):
        y = same_outcome(lambda: tf.nn.conv_transpose(dy2, F, shape_of([2, 6, 7, 4]), 2, "SAME"),
                         lambda: detconv.conv_transpose(dy2, F, shape_of([2, 6, 7, 4]), 2, "SAME"), values=True)
        assert y.tobytes() == ref.conv2d_backprop_input(dy2, F, (2, 6, 7, 4), 2, "SAME").tobytes()
    dy1 = dy2[:, 0]
    y = same_outcome(lambda: tf.nn.conv_transpose(dy1, F[0], [2, 9, 4], 2, "VALID"),
                     lambda: detconv.conv_transpose(dy1, F[0], [2, 9, 4], 2, "VALID"), values=True)
    assert y.tobytes() == ref.conv1d_transpose(dy1, F[0], (2, 9, 4), 2, "VALID").tobytes()
    dy3 = rng.standard_normal((1, 3, 3, 4, 5)).astype(np.float32)
    f3 = rng.standard_normal((2, 3, 3, 4, 5)).astype(np.float32)
    y = same_outcome(lambda: tf.nn.conv_transpose(dy3, f3, [1, 3, 6, 7, 4], [1, 2, 2], "SAME"),
                     lambda: detconv.conv_transpose(dy3, f3, [1, 3, 6, 7, 4], [1, 2, 2], "SAME"), values=True)
    assert y.tobytes() == ref.conv3d_backprop_input(dy3, f3, (1, 3, 6, 7, 4), (1, 2, 2), "SAME").tobytes()


# Zero-size results, as TensorFlow's own CPU kernels give them (TF_ENABLE_ONEDNN_OPTS=0; the oneDNN path
# returns wrong shapes for the first two): an empty output, and gradients of zeros.
def test_zero_size_outputs():
    x = rng.standard_normal((1, 1, 1, 2)).astype(np.float32)
    y = detconv.conv2d(x, np.ones((1, 3, 2, 3), np.float32), [1, 2], "VALID")  # width 1, filter 3: no output
    assert y.shape == (1, 1, 0, 3)
    assert detconv.conv2d(np.ones((1, 0, 4, 2), np.float32), F[:, :, :2], 1, "SAME").shape == (1, 0, 4, 5)
    assert detconv.conv2d(X, np.ones((2, 2, 4, 0), np.float32), 1, "SAME").shape == (2, 6, 7, 0)


@pytest.mark.parametrize("dy_shape,f_shape,strides,padding", [
    ((1, 1, 0, 1), (1, 3, 1, 1), [1, 2], "VALID"),  # no output column: dx is all +0
    ((1, 4, 4, 0), (2, 2, 1, 0), 1, "SAME"),        # no output channel
    ((0, 4, 4, 1), (2, 2, 1, 1), 1, "SAME"),        # no image
])
def test_zero_size_gradients(dy_shape, f_shape, strides, padding):
    x_shape = (dy_shape[0], 1, 1, 1) if dy_shape[2] == 0 else (dy_shape[0], 4, 4, 1)
    dy = np.ones(dy_shape, np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    dx = np.asarray(detconv.conv2d_backprop_input(list(x_shape), np.ones(f_shape, np.float32), dy, strides, padding))
    dw = np.asarray(detconv.conv2d_backprop_filter(x, list(f_shape), dy, strides, padding))
    assert dx.shape == x_shape and dw.shape == f_shape
    assert not dx.view(np.uint32).any() and not dw.view(np.uint32).any()  # +0 everywhere
    ref_dx = ref.conv2d_backprop_input(dy, np.ones(f_shape, np.float32), x_shape, tuple(np.broadcast_to(strides, 2)),
                                       padding)
    assert ref_dx.tobytes() == dx.tobytes()


# ---------------------------------------------------------------- bad calls, every entry point
# Each call is run through tf.nn (TensorFlow's own kernels, TF_ENABLE_ONEDNN_OPTS=0, in a child process: the
# oneDNN kernels raise other classes, AbortedError among them, and abort the process on some) and through
# detconv; detconv must raise an instance of the class tf.nn raised. `nn` is tf.nn or detconv; `bi`, `bf` are
# the backprop functions (tf.compat.v1.nn's for TensorFlow).
BAD_CALL_SETUP = """
import numpy as np
r = np.random.default_rng(1)
X = r.standard_normal((1, 6, 6, 4)).astype('f4'); F = r.standard_normal((3, 3, 4, 8)).astype('f4')
DW = r.standard_normal((3, 3, 4, 2)).astype('f4'); DY = r.standard_normal((1, 6, 6, 8)).astype('f4')
X1, F1 = X[0], F[0]
"""
BAD_CALLS = [
    ("depthwise channel mismatch", "nn.depthwise_conv2d(X, DW[:, :, :3], [1, 1, 1, 1], 'SAME')"),
    ("depthwise rank-3 filter", "nn.depthwise_conv2d(X, DW[0], [1, 1, 1, 1], 'SAME')"),
    ("depthwise rank-5 input", "nn.depthwise_conv2d(X[None], DW, [1, 1, 1, 1], 'SAME')"),
    ("depthwise unknown padding", "nn.depthwise_conv2d(X, DW, [1, 1, 1, 1], 'FULL')"),
    ("depthwise negative padding", "nn.depthwise_conv2d(X, DW, [1, 1, 1, 1], [[0, 0], [1, -1], [0, 0], [0, 0]])"),
    ("depthwise zero dilation", "nn.depthwise_conv2d(X, DW, [1, 1, 1, 1], 'SAME', dilations=[0, 1])"),
    ("depthwise unknown data_format", "nn.depthwise_conv2d(X, DW, [1, 1, 1, 1], 'SAME', data_format='NWHC')"),
    ("depthwise integer tensors", "nn.depthwise_conv2d(X.astype('i4'), DW.astype('i4'), [1, 1, 1, 1], 'SAME')"),
    ("ragged input", "nn.conv2d(tf.RaggedTensor.from_tensor(tf.constant(X)), F, 1, 'SAME')"),
    ("sparse input", "nn.conv2d(tf.sparse.from_dense(tf.constant(X)), F, 1, 'SAME')"),
    ("ragged filter", "nn.conv2d(X, tf.RaggedTensor.from_tensor(tf.constant(F)), 1, 'SAME')"),
    ("transpose output_shape disagrees", "nn.conv2d_transpose(DY, F, [1, 9, 9, 4], 1, 'SAME')"),
    ("transpose output_shape rank 3", "nn.conv2d_transpose(DY, F, [1, 6, 4], 1, 'SAME')"),
    ("transpose output channels", "nn.conv2d_transpose(DY, F, [1, 6, 6, 5], 1, 'SAME')"),
    ("transpose input channels", "nn.conv2d_transpose(DY[..., :3], F, [1, 6, 6, 4], 1, 'SAME')"),
    ("transpose float output_shape", "nn.conv2d_transpose(DY, F, [1., 6., 6., 4.], 1, 'SAME')"),
    ("transpose negative output_shape", "nn.conv2d_transpose(DY, F, [1, -6, 6, 4], 1, 'SAME')"),
    ("transpose unknown padding", "nn.conv2d_transpose(DY, F, [1, 6, 6, 4], 1, 'FULL')"),
    ("transpose negative padding", "nn.conv2d_transpose(DY, F, [1, 6, 6, 4], 1, [[0, 0], [2, -2], [1, 1], [0, 0]])"),
    ("transpose zero stride", "nn.conv2d_transpose(DY, F, [1, 6, 6, 4], 0, 'SAME')"),
    ("transpose rank-3 input", "nn.conv2d_transpose(DY[0], F, [1, 6, 6, 4], 1, 'SAME')"),
    ("transpose unknown data_format", "nn.conv2d_transpose(DY, F, [1, 6, 6, 4], 1, 'SAME', data_format='NWHC')"),
    ("backprop_input sizes disagree", "bi([1, 7, 6, 4], F, DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_input zero stride", "bi([1, 6, 6, 4], F, DY, [1, 0, 1, 1], 'SAME')"),
    ("backprop_input float sizes", "bi(tf.constant([1., 6., 6., 4.]), F, DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_input negative sizes", "bi([1, -6, 6, 4], F, DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_input negative padding", "bi([1, 6, 6, 4], F, DY, [1, 1, 1, 1], [[0, 0], [1, -1], [1, 1], [0, 0]])"),
    ("backprop_input rank-3 filter", "bi([1, 6, 6, 4], F[0], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_input dtypes differ", "bi([1, 6, 6, 4], tf.constant(F, tf.float64), tf.constant(DY), [1, 1, 1, 1], 'SAME')"),
    ("backprop_input batch disagrees", "bi([2, 6, 6, 4], F, DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter sizes disagree", "bf(X, [3, 3, 4, 7], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter in-channels", "bf(X, [3, 3, 3, 8], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter out_backprop size", "bf(X, [3, 3, 4, 8], DY[:, :5], [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter negative padding", "bf(X, [3, 3, 4, 8], DY, [1, 1, 1, 1], [[0, 0], [1, -1], [1, 1], [0, 0]])"),
    ("backprop_filter float sizes", "bf(X, tf.constant([3., 3., 4., 8.]), DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter negative sizes", "bf(X, [3, -3, 4, 8], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter batch disagrees", "bf(X, [3, 3, 4, 8], np.concatenate([DY, DY]), [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter rank-3 input", "bf(X[0], [3, 3, 4, 8], DY, [1, 1, 1, 1], 'SAME')"),
    ("conv1d zero stride", "nn.conv1d(X1, F1, 0, 'SAME')"),
    ("conv1d channel mismatch", "nn.conv1d(X1, F1[:, :3], 1, 'SAME')"),
    ("conv1d rank-4 filter", "nn.conv1d(X1, F, 1, 'SAME')"),
    ("conv1d unknown padding", "nn.conv1d(X1, F1, 1, 'FULL')"),
    ("conv1d unknown data_format", "nn.conv1d(X1, F1, 1, 'SAME', data_format='NHCW')"),
    ("conv1d rank-2 input", "nn.conv1d(X1[0], F1, 1, 'SAME')"),
    ("conv2d channel mismatch", "nn.conv2d(X, F[:, :, :3], 1, 'SAME')"),
    ("conv2d zero stride", "nn.conv2d(X, F, 0, 'SAME')"),
    ("conv2d negative padding", "nn.conv2d(X, F, 1, [[0, 0], [1, -1], [0, 0], [0, 0]])"),
    ("conv2d unknown data_format", "nn.conv2d(X, F, 1, 'SAME', data_format='NWHC')"),
    ("conv2d integer tensors", "nn.conv2d(tf.constant(X.astype('f8')), tf.constant(F.astype('i4')), 1, 'SAME')"),
    ("atrous zero rate", "nn.atrous_conv2d(X, F, 0, 'SAME')"),
    ("atrous rate of four", "nn.atrous_conv2d(X, F, [1, 2, 2, 1], 'SAME')"),
    ("atrous lowercase padding", "nn.atrous_conv2d(X, F, 2, 'same')"),
    ("atrous channel mismatch", "nn.atrous_conv2d(X, F[:, :, :3], 2, 'SAME')"),
    ("atrous rank-3 input", "nn.atrous_conv2d(X[0], F, 2, 'SAME')"),
    ("atrous_transpose zero rate", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], 0, 'SAME')"),
    ("atrous_transpose list rate", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], [2, 2], 'SAME')"),
    ("atrous_transpose explicit padding",
     "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], 2, [[0, 0], [1, 1], [1, 1], [0, 0]])"),
    ("atrous_transpose output channels", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 5], 2, 'SAME')"),
    ("atrous_transpose input channels", "nn.atrous_conv2d_transpose(DY[..., :3], F, [1, 6, 6, 4], 2, 'SAME')"),
    ("atrous_transpose output_shape rank 3", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 4], 2, 'SAME')"),
    ("atrous_transpose output_shape disagrees", "nn.atrous_conv2d_transpose(DY, F, [1, 9, 9, 4], 2, 'SAME')"),
    ("conv_transpose six sizes", "nn.conv_transpose(DY, F, [1, 1, 6, 6, 4, 1], 1, 'SAME')"),
    ("conv_transpose two sizes", "nn.conv_transpose(DY, F, [1, 4], 1, 'SAME')"),
    ("conv_transpose int output_shape", "nn.conv_transpose(DY, F, 4, 1, 'SAME')"),
    ("conv_transpose string output_shape", "nn.conv_transpose(DY, F, '1664', 1, 'SAME')"),
    ("conv_transpose sizes disagree", "nn.conv_transpose(DY, F, [1, 9, 9, 4], 1, 'SAME')"),
    # calls tf.nn accepts, as controls: the same outcome (shape) from both
    ("depthwise zero multiplier", "nn.depthwise_conv2d(X, DW[..., :0], [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter zero-size filter", "bf(X, [0, 3, 4, 8], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter no out-channels", "bf(X, [3, 3, 4, 0], DY[..., :0], [1, 1, 1, 1], 'SAME')"),
    # ... and with an out_backprop that does not fit them (an empty gradient, but a bad call)
    ("backprop_filter zero-size filter, out_backprop channels",
     "bf(X, [0, 3, 4, 8], DY[..., :5], [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter no out-channels, out_backprop channels", "bf(X, [3, 3, 4, 0], DY, [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter no out-channels, out_backprop width",
     "bf(X, [3, 3, 4, 0], DY[:, :, :5, :0], [1, 1, 1, 1], 'SAME')"),
    ("backprop_filter zero in-channels", "bf(X, [3, 3, 0, 8], DY, [1, 1, 1, 1], 'SAME')"),
    ("transpose explicit padding", "nn.conv2d_transpose(DY, F, [1, 8, 8, 4], 1, [[0, 0], [0, 0], [0, 0], [0, 0]])"),
    ("atrous rate 2", "nn.atrous_conv2d(X, F, 2, 'SAME')"),
    ("atrous_transpose rate 2", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], 2, 'SAME')"),
    ("atrous_transpose rate 1 explicit",
     "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], 1, [[0, 0], [1, 1], [1, 1], [0, 0]])"),
    ("conv_transpose 1-D", "nn.conv_transpose(DY[0], F1, [6, 6, 4], 1, 'SAME')"),
    ("conv_transpose 3-D", "nn.conv_transpose(DY[:, None], F[None], [1, 1, 6, 6, 4], 1, 'SAME')"),
]

# Calls tf.nn rejects and detconv accepts on purpose: limits of TensorFlow's CPU kernels, not bad arguments
# (detconv computes them in the contract's order; the values are checked against detconv.reference elsewhere).
SUPERSET = [
    ("depthwise int strides", "nn.depthwise_conv2d(X, DW, 1, 'SAME')", "tf.nn wants a 4-list"),
    ("depthwise unequal strides", "nn.depthwise_conv2d(X, DW, [1, 2, 1, 1], 'SAME')", "equal strides only"),
    ("transpose dilations", "nn.conv2d_transpose(DY, F, [1, 6, 6, 4], 1, 'SAME', dilations=2)", "no CPU dilations"),
    ("grouped backprop_filter", "bf(X, [3, 3, 2, 8], DY, [1, 1, 1, 1], 'SAME')", "no grouped CPU kernel"),
    ("conv1d explicit padding", "nn.conv1d(X1, F1, 1, [[0, 0], [1, 1], [0, 0]])", "string padding only"),
    ("atrous rate 1 explicit padding", "nn.atrous_conv2d(X, F, 1, [[0, 0], [1, 1], [1, 1], [0, 0]])",
     "its rate-1 path takes string padding only"),
    ("conv_transpose dilations", "nn.conv_transpose(DY, F, [1, 6, 6, 4], 1, 'SAME', dilations=2)", "no CPU dilations"),
    ("atrous_transpose float rate", "nn.atrous_conv2d_transpose(DY, F, [1, 6, 6, 4], 2.0, 'SAME')",
     "its space_to_batch takes int paddings only"),
]


def _tf_nn_outcomes(calls):
    """{name: ("ok", shape) | ("error", class name)} from tf.nn's own kernels, in a child process."""
    import json
    import subprocess
    import sys

    from detconv._loader import child_python_kwargs

    src = ("import json, sys, numpy as np, tensorflow as tf\n" + BAD_CALL_SETUP +
           "nn, bi, bf = tf.nn, tf.compat.v1.nn.conv2d_backprop_input, tf.compat.v1.nn.conv2d_backprop_filter\n"
           "out = {}\n"
           "for name, call in json.load(sys.stdin):\n"
           "    try:\n"
           "        out[name] = ['ok', list(eval(call).shape)]\n"
           "    except Exception as e:\n"
           "        out[name] = ['error', type(e).__name__]\n"
           "print('RESULT', json.dumps(out))\n")
    kw = child_python_kwargs(log_level="3")
    kw["env"]["TF_ENABLE_ONEDNN_OPTS"] = "0"
    r = subprocess.run([sys.executable, "-c", src], input=json.dumps([c[:2] for c in calls]), capture_output=True,
                       text=True, timeout=300, **kw)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return {k: tuple(v) for k, v in json.loads(line[7:]).items()}


@pytest.fixture(scope="module")
def tf_nn_outcomes():
    return _tf_nn_outcomes(BAD_CALLS + SUPERSET)


def _detconv_outcome(call):
    ns = {"np": np, "tf": tf, "nn": detconv, "bi": detconv.conv2d_backprop_input,
          "bf": detconv.conv2d_backprop_filter}
    exec(BAD_CALL_SETUP, ns)
    try:
        return ("ok", list(eval(call, ns).shape)), None
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return ("error", type(e).__name__), e


def _error_class(name):
    import builtins

    return getattr(tf.errors, name, None) or getattr(builtins, name)


@pytest.mark.parametrize("what,call", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise_tf_nn_class(what, call, tf_nn_outcomes):
    want = tf_nn_outcomes[what]
    got, err = _detconv_outcome(call)
    if want[0] == "ok":
        assert got == want, f"tf.nn: {want}, detconv: {got}"
        return
    assert err is not None, f"tf.nn raised {want[1]}, detconv returned {got}"
    assert isinstance(err, _error_class(want[1])), f"tf.nn raised {want[1]}, detconv {type(err).__mro__}: {err}"


@pytest.mark.parametrize("what,call,why", SUPERSET, ids=[c[0] for c in SUPERSET])
def test_calls_only_detconv_accepts(what, call, why, tf_nn_outcomes):
    assert tf_nn_outcomes[what][0] == "error", f"tf.nn now accepts it: drop it from SUPERSET ({why})"
    got, err = _detconv_outcome(call)
    assert err is None, f"{why}: detconv raised {err!r}"


def test_argument_errors_are_both_classes():
    """An argument error is an InvalidArgumentError and the Python class tf.nn raises while tracing."""
    with pytest.raises(ValueError) as e:
        detconv.conv2d(X, F, 0, "SAME")
    assert isinstance(e.value, tf.errors.InvalidArgumentError) and "strides" in str(e.value)
    with pytest.raises(TypeError) as e:
        detconv.conv2d(X, F, "1", "SAME")
    assert isinstance(e.value, tf.errors.InvalidArgumentError) and "strides" in str(e.value)

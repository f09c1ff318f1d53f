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

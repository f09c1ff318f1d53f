"""detconv's TensorFlow ops against detconv.reference, bit for bit."""

import zlib

import numpy as np
import pytest
import tensorflow as tf

import detconv
from detconv import reference as ref
from conftest import assert_bits_equal
from cases import CASES_2D, DTYPE_IDS, DTYPES
from helpers import on_cpu_isa, rand, tf_padding, to_nchw, to_nhwc

CASES = CASES_2D


def run_all(x, f, b, dy, strides, dilations, padding, data_format="NHWC", accumulation=None, fn=None):
    """Forward and all three gradients through tf.GradientTape. Arrays are NHWC in and out."""
    if data_format == "NCHW":
        x, dy = to_nchw(x), to_nchw(dy)
    xt, ft = tf.constant(x), tf.constant(f)
    bt = tf.constant(b) if b is not None else None

    def step(xt, ft, bt, dyt):
        with tf.GradientTape() as tape:
            tape.watch([xt, ft] + ([bt] if bt is not None else []))
            y = detconv.conv2d(xt, ft, strides, tf_padding(padding, data_format), data_format, dilations,
                               bias=bt, accumulation=accumulation)
        grads = tape.gradient(y, [xt, ft] + ([bt] if bt is not None else []), output_gradients=dyt)
        return [y] + grads

    out = (fn or step)(xt, ft, bt, tf.constant(dy))
    out = [o.numpy() for o in out]
    if data_format == "NCHW":
        out[0], out[1] = to_nhwc(out[0]), to_nhwc(out[1])
    return out


def reference_all(x, f, b, dy, strides, dilations, padding, accumulation=None):
    kw = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation)
    out = [ref.conv2d(x, f, bias=b, **kw), ref.conv2d_backprop_input(dy, f, x.shape, **kw),
           ref.conv2d_backprop_filter(x, dy, f.shape, **kw)]
    if b is not None:
        out.append(ref.bias_grad(dy, accumulation=accumulation))
    return out


def make_case(rng, case, dtype, with_bias=True):
    _, xs, fs, st, dl, pad = case
    x, f = rand(rng, xs, dtype), rand(rng, fs, dtype, 0.5)
    b = rand(rng, (fs[3],), dtype) if with_bias else None
    y_shape = ref.conv2d(x, f, st, pad, dl).shape
    dy = rand(rng, y_shape, dtype)
    return x, f, b, dy


NAMES = ["y", "dx", "dw", "db"]


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(rng, case, dtype, acc):
    with_bias = (zlib.crc32(case[0].encode()) ^ len(dtype)) % 2 == 0 or case[0] in ("3x3-same", "depthwise")
    x, f, b, dy = make_case(rng, case, dtype, with_bias)
    _, _, _, st, dl, pad = case
    want = reference_all(x, f, b, dy, st, dl, pad, acc)
    got = run_all(x, f, b, dy, st, dl, pad, "NHWC", acc)
    for name, g, w in zip(NAMES, got, want):
        assert_bits_equal(g, w, f"{name} NHWC")


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_nchw_same_bits(rng, case, dtype, acc):
    x, f, b, dy = make_case(rng, case, dtype, with_bias=True)
    _, _, _, st, dl, pad = case
    want = reference_all(x, f, b, dy, st, dl, pad, acc)
    got = run_all(x, f, b, dy, st, dl, pad, "NCHW", acc)
    for name, g, w in zip(NAMES, got, want):
        assert_bits_equal(g, w, f"{name} NCHW")


@pytest.mark.parametrize("xs,fs,st,pad", [
    ((2, 16, 16, 4), (3, 3, 4, 8), 1, "SAME"),        # R=512: 8 chunks of 64
    ((3, 13, 11, 6), (3, 3, 3, 4), 1, "VALID"),      # groups, ragged last chunk
    ((2, 20, 20, 8), (3, 3, 1, 8), 1, "SAME"),       # depthwise, 13 chunks
    ((2, 48, 48, 8), (16, 16, 8, 64), 1, "VALID"),  # F = 2^17, R = 2178: ceil(2^22/F) = 32 < ceil(R/64) binds
])
def test_filter_grad_multi_chunk(rng, xs, fs, st, pad):
    x, f = rand(rng, xs, "float32"), rand(rng, fs, "float32")
    y_shape = ref.conv2d(x, f, st, pad).shape
    dy = rand(rng, y_shape, "float32")
    R, F = y_shape[0] * y_shape[1] * y_shape[2], int(np.prod(fs))
    L, P = ref.reduction_chunks(R, F)
    assert P > 1
    if F == 2**17:
        assert P == 32 and -(-2**22 // F) < -(-R // 64), "the 2^22/F term must be the one that binds"
    got = detconv.conv2d_backprop_filter(x, fs, dy, st, pad).numpy()
    assert_bits_equal(got, ref.conv2d_backprop_filter(x, dy, fs, st, pad), f"dw (P={P}, L={L})")
    # The chunked order really differs from one long fold: a tolerance peer is not enough.
    db = detconv.bias_grad(dy).numpy()
    assert_bits_equal(db, ref.bias_grad(dy), "db")


def test_conv2d_transpose_is_input_gradient(rng):
    dy = rand(rng, (2, 5, 5, 6), "float32")
    f = rand(rng, (3, 3, 4, 6), "float32")
    out_shape = (2, 10, 10, 4)
    got = detconv.conv2d_transpose(dy, f, out_shape, 2, "SAME").numpy()
    assert_bits_equal(got, ref.conv2d_backprop_input(dy, f, out_shape, 2, "SAME"), "conv2d_transpose")
    stock = tf.nn.conv2d_transpose(dy, f, out_shape, 2, "SAME").numpy()
    np.testing.assert_allclose(got, stock, rtol=1e-5, atol=1e-5)
    # ... and it is differentiable to both arguments.
    dyt, ft = tf.constant(dy), tf.constant(f)
    with tf.GradientTape() as tape:
        tape.watch([dyt, ft])
        y = detconv.conv2d_transpose(dyt, ft, out_shape, 2, "SAME")
        loss = tf.reduce_sum(y * y)
    g_dy, g_f = tape.gradient(loss, [dyt, ft])
    with tf.GradientTape() as tape:
        tape.watch([dyt, ft])
        loss2 = tf.reduce_sum(tf.nn.conv2d_transpose(dyt, ft, out_shape, 2, "SAME") ** 2)
    s_dy, s_f = tape.gradient(loss2, [dyt, ft])
    np.testing.assert_allclose(g_dy.numpy(), s_dy.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g_f.numpy(), s_f.numpy(), rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d_matches_tf(rng):
    x = rand(rng, (2, 9, 9, 4), "float32")
    f = rand(rng, (3, 3, 4, 3), "float32")
    got = detconv.depthwise_conv2d(x, f, [1, 2, 2, 1], "SAME").numpy()
    hwio = f.reshape(3, 3, 1, 12)
    assert_bits_equal(got, ref.conv2d(x, hwio, 2, "SAME"), "depthwise")
    np.testing.assert_allclose(got, tf.nn.depthwise_conv2d(x, f, [1, 2, 2, 1], "SAME").numpy(), rtol=1e-5, atol=1e-5)


def test_conv1d_matches_reference_and_tf(rng):
    x = rand(rng, (3, 17, 4), "float32")
    f = rand(rng, (5, 4, 6), "float32")
    b = rand(rng, (6,), "float32")
    got = detconv.conv1d(x, f, 2, "SAME", bias=b, dilations=1).numpy()
    want = ref.conv2d(x[:, None], f[None], (1, 2), "SAME", bias=b)[:, 0]
    assert_bits_equal(got, want, "conv1d")
    np.testing.assert_allclose(got, tf.nn.conv1d(x, f, 2, "SAME").numpy() + b, rtol=1e-5, atol=1e-5)
    got_ncw = detconv.conv1d(np.transpose(x, (0, 2, 1)), f, 2, "SAME", "NCW", bias=b).numpy()
    assert_bits_equal(np.transpose(got_ncw, (0, 2, 1)), want, "conv1d NCW")


def test_conv1d_one_and_a_half_d():
    # "1.5-D convolution": a 4x3 one-hot input against the same 4x3 filter is one dot product.
    x = np.eye(4, 3, dtype=np.float32)
    y = detconv.conv1d(x[None], x[:, :, None], 1, "VALID").numpy()
    assert y.shape == (1, 1, 1) and y[0, 0, 0] == 3.0


def test_empty_batch(rng):
    x = np.zeros((0, 6, 6, 3), np.float32)
    f = rand(rng, (3, 3, 3, 4), "float32")
    xt, ft = tf.constant(x), tf.constant(f)
    b = tf.constant(rand(rng, (4,), "float32"))
    with tf.GradientTape() as tape:
        tape.watch([xt, ft, b])
        y = detconv.conv2d(xt, ft, 1, "SAME", bias=b)
    dx, dw, db = tape.gradient(y, [xt, ft, b], output_gradients=tf.zeros_like(y))
    assert y.shape == (0, 6, 6, 4) and dx.shape == (0, 6, 6, 3)
    assert_bits_equal(dw.numpy(), np.zeros((3, 3, 3, 4), np.float32), "dw of empty batch")
    assert_bits_equal(db.numpy(), np.zeros((4,), np.float32), "db of empty batch")


def test_every_isa_path_same_bits(rng):
    paths = detconv.cpu_isa(supported=True)
    assert "scalar" in paths
    cases = [CASES[1], CASES[5], CASES[8], CASES[10], CASES[-2]]
    results = {}
    for isa in paths:
        with on_cpu_isa(detconv, isa):
            for case in cases:
                for dtype, acc in DTYPES:
                    r = np.random.default_rng(7)
                    x, f, b, dy = make_case(r, case, dtype)
                    out = run_all(x, f, b, dy, *case[3:], "NHWC", acc)
                    results.setdefault((case[0], dtype, acc), []).append((isa, out))
    for key, runs in results.items():
        (isa0, first), rest = runs[0], runs[1:]
        for isa, out in rest:
            for name, a, b in zip(NAMES, first, out):
                assert_bits_equal(b, a, f"{key} {name}: {isa} vs {isa0}")
    # And the first path agrees with the reference (so all do).
    r = np.random.default_rng(7)
    x, f, b, dy = make_case(r, cases[0], "float32")
    want = reference_all(x, f, b, dy, *cases[0][3:])
    for name, a, w in zip(NAMES, results[(cases[0][0], "float32", None)][0][1], want):
        assert_bits_equal(a, w, name)


def test_unsupported_isa_is_refused():
    if "avx512" in detconv.cpu_isa(supported=True):
        pytest.skip("this machine has AVX-512")
    assert detconv.set_cpu_isa("avx512") is False
    assert detconv.cpu_isa() != "avx512"
    with pytest.raises(ValueError, match="isa"):
        detconv.set_cpu_isa("sse9")


# ---------------------------------------------------------------- the other tf.nn entry points
@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
def test_separable_conv2d_matches_reference(rng, dtype, acc):
    x = rand(rng, (2, 9, 8, 3), dtype)
    dwf, pwf, b = rand(rng, (3, 3, 3, 2), dtype), rand(rng, (1, 1, 6, 5), dtype), rand(rng, (5,), dtype)
    got = detconv.separable_conv2d(x, dwf, pwf, [1, 2, 2, 1], "SAME", dilations=1, bias=b, accumulation=acc)
    assert_bits_equal(got.numpy(), ref.separable_conv2d(x, dwf, pwf, 2, "SAME", bias=b, accumulation=acc),
                      "separable_conv2d")
    if dtype == "float32":
        stock = tf.nn.separable_conv2d(x, dwf, pwf, [1, 2, 2, 1], "SAME").numpy() + b
        np.testing.assert_allclose(got.numpy(), stock, rtol=1e-5, atol=1e-5)
        nchw = detconv.separable_conv2d(to_nchw(x), dwf, pwf, 2, "SAME", "NCHW", bias=b).numpy()
        assert_bits_equal(to_nhwc(nchw), got.numpy(), "separable_conv2d NCHW")


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
def test_depthwise_backprops_match_reference_and_tape(rng, dtype, acc):
    x = rand(rng, (2, 8, 9, 4), dtype)
    f = rand(rng, (3, 2, 4, 3), dtype)
    dy = rand(rng, (2, 4, 5, 12), dtype)
    dx = detconv.depthwise_conv2d_backprop_input(x.shape, f, dy, [1, 2, 2, 1], "SAME", accumulation=acc).numpy()
    df = detconv.depthwise_conv2d_backprop_filter(x, f.shape, dy, 2, "SAME", accumulation=acc).numpy()
    hwio = f.reshape(3, 2, 1, 12)
    assert_bits_equal(dx, ref.conv2d_backprop_input(dy, hwio, x.shape, 2, "SAME", accumulation=acc), "dx")
    assert_bits_equal(df, ref.conv2d_backprop_filter(x, dy, hwio.shape, 2, "SAME", accumulation=acc)
                      .reshape(f.shape), "df")
    xt, ft = tf.constant(x), tf.constant(f)
    with tf.GradientTape() as tape:
        tape.watch([xt, ft])
        y = detconv.depthwise_conv2d(xt, ft, 2, "SAME", accumulation=acc)
    g_x, g_f = tape.gradient(y, [xt, ft], output_gradients=tf.constant(dy))
    assert_bits_equal(g_x.numpy(), dx, "tape dx")
    assert_bits_equal(g_f.numpy(), df, "tape df")
    if dtype == "float32":
        np.testing.assert_allclose(dx, tf.nn.depthwise_conv2d_backprop_input(x.shape, f, dy, [1, 2, 2, 1], "SAME"),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(df, tf.nn.depthwise_conv2d_backprop_filter(x, f.shape, dy, [1, 2, 2, 1], "SAME"),
                                   rtol=1e-4, atol=1e-4)


# Blocks narrower than a pixel's 64-byte line of output stage a line's channel blocks before they
# stream (Base::LineStage): AVX2's 7x7 blocks (two to a line in float32, four in float16) and every
# 16-bit block (two to a line; 3x3 on AVX2 and AVX-512). 1000 channels leave a short last line (one
# block of four, AVX2 float16) or a last block with lanes past the channels (AVX-512, 16 lanes). The 16-bit
# 7x7 cases take 6-12 s each: one of them.
@pytest.mark.parametrize("k,dtype,stride", [(k, d, s) for k, d in [(3, "float32"), (3, "float16"), (3, "bfloat16"),
                                                                   (7, "float32")] for s in (1, 2)]
                         + [(7, "float16", 1)])
def test_large_outputs_streamed(rng, stride, dtype, k):
    # Outputs of 4 MiB and more in TensorFlow's 64-byte-aligned buffers leave the depthwise kernels through
    # non-temporal stores (NumPy's buffers are not aligned, so only the op path reaches them); 16-bit
    # outputs are rounded first, as every other store does.
    h, c = (34 if dtype == "float32" else 66), (1024 if k == 3 else 1000)
    x_shape = (1, h, 32, c)
    x, f = rand(rng, x_shape, dtype), rand(rng, (k, k, c, 1), dtype)
    dy = rand(rng, (1, h // stride, 32 // stride, c), dtype)
    want_y = ref.conv2d(x, f.reshape(k, k, 1, c), stride, "SAME")
    want_dx = ref.conv2d_backprop_input(dy, f.reshape(k, k, 1, c), x_shape, stride, "SAME")
    assert want_dx.nbytes >= 4 << 20 and (stride == 2 or want_y.nbytes >= 4 << 20)
    st = [1, stride, stride, 1]
    for isa in detconv.cpu_isa(supported=True):
        with on_cpu_isa(detconv, isa):
            assert_bits_equal(detconv.depthwise_conv2d(x, f, st, "SAME").numpy(), want_y, f"{isa} forward")
            got = detconv.depthwise_conv2d_backprop_input(x_shape, f, dy, st, "SAME").numpy()
            assert_bits_equal(got, want_dx, f"{isa} dx")


@pytest.mark.parametrize("dtype,wide", [("float32", 1040), ("float16", 1040), ("float16", 1056), ("bfloat16", 1056)])
def test_large_dense_outputs_streamed(rng, dtype, wide):
    # The dense kernels stream outputs of 4 MiB and more too: the forward's register blocks (3x3 and, on
    # AVX-512, 1x1), the 1x1 GEMM (forward on AVX2, input gradient on both) and the dense input gradient.
    # 1040 channels: a partial last block on every path, whose short vectors take ordinary stores. 1056:
    # 64-byte-aligned pixel lines, where the 1x1 GEMM's 16-bit blocks narrower than a line (AVX2: two to a
    # line) stage a line's blocks and stream it whole (fprop_1x1); 1040's unaligned lines take plain stores.
    # Two images of 2.1 MiB each stream; each image alone (plain stores) must give the same bits, and a
    # four-row crop of the same layers (plain stores) the reference's: the reference on the whole
    # 4 MiB took 20-60 s per case, most of this test's time.
    h = 16 if dtype == "float32" else 32
    x1, f1 = rand(rng, (2, h, 32, 64), dtype), rand(rng, (1, 1, 64, wide), dtype)
    x3, f3 = rand(rng, (2, h, 32, 8), dtype), rand(rng, (3, 3, 8, wide), dtype)
    dy1, g1 = rand(rng, (2, h, 32, 64), dtype), rand(rng, (1, 1, wide, 64), dtype)
    dy3, g3 = rand(rng, (2, h, 32, 8), dtype), rand(rng, (3, 3, wide, 8), dtype)

    def layers(n0, n1, rows, conv, conv_dx):  # images [n0, n1), their first `rows` rows
        x_shape = (n1 - n0, rows, 32, wide)
        return {"1x1 forward": conv(x1[n0:n1, :rows], f1), "3x3 forward": conv(x3[n0:n1, :rows], f3),
                "1x1 dx": conv_dx(dy1[n0:n1, :rows], g1, x_shape), "3x3 dx": conv_dx(dy3[n0:n1, :rows], g3, x_shape)}

    def op(x, f):
        return detconv.conv2d(x, f, 1, "SAME").numpy()

    def op_dx(dy, f, x_shape):
        return detconv.conv2d_backprop_input(x_shape, f, dy, 1, "SAME").numpy()

    want_crop = layers(0, 1, 4, lambda x, f: ref.conv2d(x, f, 1, "SAME"),
                       lambda dy, f, x_shape: ref.conv2d_backprop_input(dy, f, x_shape, 1, "SAME"))
    for isa in detconv.cpu_isa(supported=True):
        with on_cpu_isa(detconv, isa):
            both = layers(0, 2, h, op, op_dx)
            assert all(y.nbytes >= 4 << 20 > y[:1].nbytes for y in both.values())
            for n in range(2):
                for name, alone in layers(n, n + 1, h, op, op_dx).items():
                    assert_bits_equal(both[name][n:n + 1], alone, f"{isa} {name}, image {n}")
            for name, got in layers(0, 1, 4, op, op_dx).items():
                assert_bits_equal(got, want_crop[name], f"{isa} {name}, four rows")


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
def test_conv1d_transpose_matches_reference(rng, dtype, acc):
    dy = rand(rng, (2, 9, 5), dtype)
    f = rand(rng, (4, 3, 5), dtype)
    for stride, padding, dil, width in ((2, "SAME", 1, 18), (3, "VALID", 1, 28), (1, (1, 2), 2, 12)):
        explicit = not isinstance(padding, str)
        pad_nwc = [[0, 0], list(padding), [0, 0]] if explicit else padding
        pad_ncw = [[0, 0], [0, 0], list(padding)] if explicit else padding
        got = detconv.conv1d_transpose(dy, f, [2, width, 3], stride, pad_nwc, dilations=dil,
                                       accumulation=acc).numpy()
        want = ref.conv1d_transpose(dy, f, (2, width, 3), stride, padding, dil, accumulation=acc)
        assert_bits_equal(got, want, f"conv1d_transpose s{stride} {padding}")
        ncw = detconv.conv1d_transpose(np.transpose(dy, (0, 2, 1)), f, [2, 3, width], stride, pad_ncw, "NCW",
                                       dilations=dil, accumulation=acc).numpy()
        assert_bits_equal(np.transpose(ncw, (0, 2, 1)), want, "conv1d_transpose NCW")
    if dtype == "float32":
        np.testing.assert_allclose(detconv.conv1d_transpose(dy, f, [2, 18, 3], 2, "SAME"),
                                   tf.nn.conv1d_transpose(dy, f, [2, 18, 3], 2, "SAME"), rtol=1e-5, atol=1e-5)


def test_convolution_dispatches_on_rank(rng):
    x2, f2 = rand(rng, (2, 7, 6, 3), "float32"), rand(rng, (3, 3, 3, 4), "float32")
    x1, f1 = x2[:, 0], f2[0]
    assert_bits_equal(detconv.convolution(x2, f2, padding="SAME", dilations=[2, 1]).numpy(),
                      ref.conv2d(x2, f2, 1, "SAME", (2, 1)), "convolution 2-D")
    assert_bits_equal(detconv.convolution(x1, f1, [2], "VALID").numpy(), ref.conv1d(x1, f1, 2, "VALID"),
                      "convolution 1-D")
    assert detconv.convolution(x2, f2).shape == tf.nn.convolution(x2, f2).shape
    with pytest.raises(ValueError, match="filters"):
        detconv.convolution(x2[..., None], f2[..., None])

"""conv3d (forward, input/filter/bias gradients) against detconv.reference's independent 3-D functions, bit for
bit, plus 3-D invariances (batch split, crop, thread count, ISA path, layout)."""

import subprocess
import zlib
import sys

import numpy as np
import pytest
import tensorflow as tf

import detconv
from detconv import reference as ref
from detconv._loader import child_python_kwargs
from conftest import assert_bits_equal
from cases import CASES_3D, DTYPE_IDS, DTYPES
from helpers import on_cpu_isa, rand

CASES = CASES_3D


def tf_padding(padding, channels_first=False):
    if isinstance(padding, str):
        return padding
    pairs = [list(p) for p in padding]
    return [[0, 0], [0, 0], *pairs] if channels_first else [[0, 0], *pairs, [0, 0]]


def run_all(x, f, b, dy, strides, dilations, padding, accumulation=None, channels_first=False):
    """y, dx, dw, db through tf.GradientTape (NDHWC arrays in and out)."""
    to_cf = (lambda a: np.moveaxis(a, -1, 1)) if channels_first else (lambda a: a)
    from_cf = (lambda a: np.moveaxis(a, 1, -1)) if channels_first else (lambda a: a)
    xt, ft, bt, dyt = tf.constant(to_cf(x)), tf.constant(f), tf.constant(b), tf.constant(to_cf(dy))
    with tf.GradientTape() as tape:
        tape.watch([xt, ft, bt])
        y = detconv.conv3d(xt, ft, strides, tf_padding(padding, channels_first),
                           "NCDHW" if channels_first else "NDHWC", dilations, bias=bt, accumulation=accumulation)
    dx, df, db = tape.gradient(y, [xt, ft, bt], output_gradients=dyt)
    return [np.ascontiguousarray(from_cf(y.numpy())), np.ascontiguousarray(from_cf(dx.numpy())), df.numpy(),
            db.numpy()]


def reference_all(x, f, b, dy, strides, dilations, padding, accumulation=None):
    return [ref.conv3d(x, f, strides, padding, dilations, bias=b, accumulation=accumulation),
            ref.conv3d_backprop_input(dy, f, x.shape, strides, padding, dilations, accumulation=accumulation),
            ref.conv3d_backprop_filter(x, dy, f.shape, strides, padding, dilations, accumulation=accumulation),
            ref.bias_grad(dy, accumulation=accumulation)]


def _inputs(seed, case, dtype):
    r = np.random.default_rng(seed)
    _, xs, fs, st, dl, pad = case
    x, f, b = rand(r, xs, dtype), rand(r, fs, dtype), rand(r, (fs[-1],), dtype)
    y_shape = ref.conv3d(np.zeros(xs, np.float32), np.zeros(fs, np.float32), st, pad, dl).shape
    return x, f, b, rand(r, y_shape, dtype)


NAMES = ("y", "dx", "dw", "db")


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(case, dtype, acc):
    x, f, b, dy = _inputs(zlib_seed(case[0], dtype), case, dtype)
    got = run_all(x, f, b, dy, *case[3:], accumulation=acc)
    for name, g, w in zip(NAMES, got, reference_all(x, f, b, dy, *case[3:], accumulation=acc)):
        assert_bits_equal(g, w, f"{case[0]} {dtype} {acc} {name}")


def zlib_seed(*parts):
    return zlib.crc32(repr(parts).encode())


@pytest.mark.parametrize("case", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_ncdhw_same_bits(case):
    x, f, b, dy = _inputs(3, case, "float32")
    for name, a, c in zip(NAMES, run_all(x, f, b, dy, *case[3:]), run_all(x, f, b, dy, *case[3:],
                                                                            channels_first=True)):
        assert_bits_equal(c, a, f"{case[0]} NCDHW {name}")


def test_every_isa_path_same_bits():
    results = {}
    for isa in detconv.cpu_isa(supported=True):
        with on_cpu_isa(detconv, isa):
            for case in (CASES[0], CASES[3], CASES[4], CASES[7]):
                for dtype, acc in (("float32", None), ("float16", "float16"), ("float64", None)):
                    x, f, b, dy = _inputs(11, case, dtype)
                    results.setdefault((case[0], dtype), []).append((isa, run_all(x, f, b, dy, *case[3:],
                                                                                  accumulation=acc)))
    for key, runs in results.items():
        (isa0, first), rest = runs[0], runs[1:]
        for isa, out in rest:
            for name, a, c in zip(NAMES, first, out):
                assert_bits_equal(c, a, f"{key} {name}: {isa} vs {isa0}")


def test_batch_split_and_crop_invariance():
    r = np.random.default_rng(5)
    x = rand(r, (4, 6, 7, 8, 5), "float32")
    f = rand(r, (3, 3, 3, 5, 6), "float32")
    full = detconv.conv3d(x, f, 1, "SAME").numpy()
    for n in range(4):  # every image alone is the same bits as in the batch
        assert_bits_equal(detconv.conv3d(x[n:n + 1], f, 1, "SAME").numpy(), full[n:n + 1], f"image {n}")
    assert_bits_equal(detconv.conv3d(x[1:3], f, 1, "SAME").numpy(), full[1:3], "half batch")
    valid = detconv.conv3d(x, f, 1, "VALID").numpy()
    crop = detconv.conv3d(x[:, 1:5, 2:7, 1:6], f, 1, "VALID").numpy()
    assert_bits_equal(crop, valid[:, 1:3, 2:5, 1:4], "crop")


def test_large_input_gradient_streamed():
    # A 3-D input gradient of 4 MiB or more leaves through non-temporal stores (Base::streamable); each
    # image alone (2 MiB) through plain ones, which the reference tests check: same bits, every ISA path.
    r = np.random.default_rng(6)
    x_shape = (2, 8, 64, 64, 16)
    f = rand(r, (3, 3, 3, 16, 8), "float32", 1.0 / 8)
    dy = rand(r, x_shape[:-1] + (8,), "float32")
    assert np.prod(x_shape) * 4 >= 4 << 20 > np.prod(x_shape[1:]) * 4
    for isa in detconv.cpu_isa(supported=True):
        with on_cpu_isa(detconv, isa):
            full = detconv.conv3d_backprop_input(x_shape, f, dy, 1, "SAME").numpy()
            for n in range(2):
                alone = detconv.conv3d_backprop_input((1,) + x_shape[1:], f, dy[n:n + 1], 1, "SAME").numpy()
                assert_bits_equal(alone, full[n:n + 1], f"{isa} image {n}")


@pytest.mark.parametrize("shape, strides, padding, dilations", [
    ((2, 3, 4, 5, 128), 1, "SAME", 1),
    ((1, 3, 5, 7, 128), (1, 2, 2), "VALID", 1),  # stride phases: blocks some taps miss
    ((1, 2, 3, 2, 128), 1, "SAME", (1, 1, 2)),   # rows narrower than a pixel block, dilated taps
    ((1, 2, 2, 70, 128), 1, "SAME", 1),          # a row in two segments of tiles, ending in two 2-pixel blocks
])
@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
def test_large_filter_rows_inner(shape, strides, padding, dilations, dtype, acc):
    # A filter past 1 MiB (3x3x3, 128 -> 96: 1.3 MiB) reorders the forward's units (depth as rows; past L2
    # with the rows they read: KernelBase::rows_inner_pays) and turns the input gradient's loops, each
    # tap sweeping a whole input row (DgradKernels::dgrad_rows_tap_outer, on the ISAs whose register
    # blocks are all one width; its rows end in narrower blocks); neither changes bits: every ISA path
    # against the reference, in every dtype and accumulation (16-bit values are widened into the same
    # float lanes; native float16 folds each fma with its own rounding).
    r = np.random.default_rng(8)
    x = rand(r, shape, dtype)
    f = rand(r, (3, 3, 3, 128, 96), dtype, 1.0 / 16)
    assert f.size * 4 > 1 << 20
    want_y = ref.conv3d(x, f, strides, padding, dilations, accumulation=acc)
    dy = rand(r, want_y.shape, dtype)
    want_dx = ref.conv3d_backprop_input(dy, f, x.shape, strides, padding, dilations, accumulation=acc)
    for isa in detconv.cpu_isa(supported=True):
        with on_cpu_isa(detconv, isa):
            got_y = detconv.conv3d(x, f, strides, padding, dilations=dilations, accumulation=acc).numpy()
            assert_bits_equal(got_y, want_y, f"{isa} forward")
            got_dx = detconv.conv3d_backprop_input(x.shape, f, dy, strides, padding, dilations=dilations,
                                                   accumulation=acc).numpy()
            assert_bits_equal(got_dx, want_dx, f"{isa} dx")


_THREAD_SCRIPT = r"""
import hashlib, sys
import numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
tf.config.threading.set_inter_op_parallelism_threads(1)
import detconv
r = np.random.default_rng(2)
x = tf.constant(r.standard_normal((2, 6, 9, 10, 8)).astype(np.float32))
f = tf.constant(r.standard_normal((3, 3, 3, 8, 12)).astype(np.float32))
b = tf.constant(r.standard_normal(12).astype(np.float32))
with tf.GradientTape() as t:
    t.watch([x, f, b])
    y = detconv.conv3d(x, f, [1, 2, 1], "SAME", bias=b)
    loss = tf.reduce_sum(y * y)
h = hashlib.sha256()
for a in [y] + t.gradient(loss, [x, f, b]):
    h.update(a.numpy().tobytes())
print(h.hexdigest())
"""


def test_thread_count_invariance():
    hashes = set()
    for threads in (1, 2, 5):
        out = subprocess.run([sys.executable, "-c", _THREAD_SCRIPT, str(threads)], capture_output=True, text=True,
                             timeout=300, **child_python_kwargs(log_level="3"))
        assert out.returncode == 0, out.stderr[-2000:]
        hashes.add(out.stdout.strip().splitlines()[-1])
    assert len(hashes) == 1


def test_conv3d_transpose_and_tf():
    r = np.random.default_rng(8)
    dy = rand(r, (2, 3, 4, 4, 6), "float32")
    f = rand(r, (3, 3, 3, 4, 6), "float32")
    out_shape = (2, 6, 8, 8, 4)
    got = detconv.conv3d_transpose(dy, f, out_shape, 2, "SAME").numpy()
    assert_bits_equal(got, ref.conv3d_backprop_input(dy, f, out_shape, 2, "SAME"), "conv3d_transpose")
    np.testing.assert_allclose(got, tf.nn.conv3d_transpose(dy, f, out_shape, [1, 2, 2, 2, 1], "SAME"),
                               rtol=1e-5, atol=1e-5)
    x = rand(r, (2, 6, 8, 8, 4), "float32")
    np.testing.assert_allclose(detconv.conv3d(x, f, [1, 2, 2, 2, 1], "SAME"),
                               tf.nn.conv3d(x, f, [1, 2, 2, 2, 1], "SAME"), rtol=1e-5, atol=1e-5)
    assert_bits_equal(detconv.convolution(x, f, 2, "SAME").numpy(), detconv.conv3d(x, f, 2, "SAME").numpy(),
                      "convolution rank 5")


def test_second_order_gradients():
    r = np.random.default_rng(9)
    x, f = tf.constant(rand(r, (1, 4, 5, 5, 2), "float64")), tf.constant(rand(r, (2, 3, 2, 2, 3), "float64"))
    with tf.GradientTape() as outer:
        outer.watch([x, f])
        with tf.GradientTape() as inner:
            inner.watch([x, f])
            loss = tf.reduce_sum(detconv.conv3d(x, f, 1, "SAME") ** 2)
        gx = inner.gradient(loss, x)
        s = tf.reduce_sum(gx * gx)
    hx, hf = outer.gradient(s, [x, f])
    with tf.GradientTape() as outer:
        outer.watch([x, f])
        with tf.GradientTape() as inner:
            inner.watch([x, f])
            loss = tf.reduce_sum(tf.nn.conv3d(x, f, [1] * 5, "SAME") ** 2)
        gx = inner.gradient(loss, x)
        s = tf.reduce_sum(gx * gx)
    sx, sf = outer.gradient(s, [x, f])
    np.testing.assert_allclose(hx, sx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(hf, sf, rtol=1e-9, atol=1e-9)


def test_bad_3d_arguments():
    x, f = np.ones((1, 4, 4, 4, 3), np.float32), np.ones((2, 2, 2, 3, 2), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="filters"):
        detconv.conv3d(x, f[:, :, :, :2], 1, "SAME")
    with pytest.raises(ValueError, match="strides"):
        detconv.conv3d(x, f, [1, 2], "SAME")
    with pytest.raises(ValueError, match="data_format"):
        detconv.conv3d(x, f, 1, "SAME", data_format="NHWC")
    with pytest.raises(tf.errors.InvalidArgumentError, match="input"):
        detconv.conv3d(x[0], f, 1, "SAME")
    assert detconv.conv3d(x, f, 1, "VALID").shape == (1, 3, 3, 3, 2)
    assert detconv.conv3d(np.ones((1, 1, 4, 4, 3), np.float32), np.ones((3, 1, 1, 3, 2), np.float32), 1,
                          "VALID").shape == (1, 0, 4, 4, 2)


@pytest.mark.parametrize("shape,fmt", [((2, 3, 4, 5), "NHWC"), ((2, 5, 3, 4), "NCHW"), ((2, 3, 4, 5, 6), "NDHWC"),
                                       ((2, 6, 3, 4, 5), "NCDHW")])
def test_bias_grad_gradient_any_rank(shape, fmt):
    """The bias gradient's own gradient broadcasts back over 2 or 3 spatial axes, also with an unknown rank."""
    dy = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    channel = 1 if fmt.startswith("NC") else -1
    weights = tf.range(shape[channel], dtype=tf.float32)
    spec = tf.TensorSpec(None, tf.float32)

    @tf.function(input_signature=[spec])
    def grad(d):
        with tf.GradientTape() as tape:
            tape.watch(d)
            s = tf.reduce_sum(detconv.bias_grad(d, fmt) * weights)
        return tape.gradient(s, d)

    want = np.moveaxis(np.broadcast_to(weights.numpy(), np.moveaxis(np.zeros(shape), channel, -1).shape), -1, channel)
    assert np.array_equal(grad(dy).numpy(), want)

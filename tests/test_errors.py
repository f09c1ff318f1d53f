"""Bad input: a clear Python exception naming the argument, never a crash."""

import numpy as np
import pytest
import tensorflow as tf

import detconv
from conftest import assert_bits_equal

ERRORS = (ValueError, TypeError, tf.errors.InvalidArgumentError)
X = np.ones((1, 6, 6, 4), np.float32) * 0.5
F = np.ones((3, 3, 4, 8), np.float32) * 0.25

BAD = [
    ("channel mismatch", dict(filters=np.ones((3, 3, 3, 8), np.float32)), "filters"),
    ("input rank", dict(input=np.ones((6, 6, 4), np.float32)), "input"),
    ("filter rank", dict(filters=np.ones((3, 4, 8), np.float32)), "filters"),
    ("zero stride", dict(strides=0), "strides"),
    ("negative stride", dict(strides=[1, -1]), "strides"),
    ("zero dilation", dict(dilations=0), "dilations"),
    ("negative dilation", dict(dilations=[-2, 1]), "dilations"),
    ("unknown padding", dict(padding="FULL"), "padding"),
    ("negative explicit padding", dict(padding=[[0, 0], [1, -1], [0, 0], [0, 0]]), "padding"),
    ("padded batch", dict(padding=[[1, 0], [1, 1], [0, 0], [0, 0]]), "padding"),
    ("mismatched tensor dtypes", dict(input=tf.constant(X), filters=tf.constant(F, tf.float64)), "filters"),
    ("integer dtype", dict(input=np.ones((1, 6, 6, 4), np.int32), filters=np.ones((3, 3, 4, 8), np.int32)), "input"),
    ("fp16 accumulation with fp32", dict(accumulation="float16"), "accumulation"),
    ("unknown accumulation", dict(accumulation="float8"), "accumulation"),
    ("out-channels not divisible by groups", dict(filters=np.ones((3, 3, 2, 7), np.float32)), "filters"),
    ("bias of wrong length", dict(bias=np.ones((7,), np.float32)), "bias"),
    ("bias tensor of another dtype", dict(input=tf.constant(X), bias=tf.ones((8,), tf.float64)), "bias"),
    ("unknown data_format", dict(data_format="NWHC"), "data_format"),
    ("zero-size filter", dict(filters=np.ones((0, 3, 4, 8), np.float32)), "filters"),
    ("strides with batch stride", dict(strides=[2, 1, 1, 1]), "strides"),
]


def call(**kw):
    args = dict(input=X, filters=F, strides=1, padding="SAME")
    args.update(kw)
    return detconv.conv2d(**args)


@pytest.mark.parametrize("what,kw,arg", BAD, ids=[b[0] for b in BAD])
def test_bad_input_eager(what, kw, arg):
    with pytest.raises(ERRORS, match=arg):
        call(**kw)


SHAPE_BAD = [
    ("channel mismatch", (1, 6, 6, 4), (3, 3, 3, 8), {}, "filters"),
    ("groups do not divide out-channels", (1, 6, 6, 4), (3, 3, 2, 7), {}, "filters"),
    ("zero-size filter", (1, 6, 6, 4), (3, 0, 4, 8), {}, "filters"),
]


@pytest.mark.parametrize("what,xs,fs,kw,arg", SHAPE_BAD, ids=[b[0] for b in SHAPE_BAD])
def test_bad_shapes_caught_by_kernel(what, xs, fs, kw, arg):
    # Unknown static shapes: the C++ kernel must catch it and name the argument.
    spec = tf.TensorSpec([None, None, None, None], tf.float32)
    fn = tf.function(lambda x, f: detconv.conv2d(x, f, 1, kw.get("padding", "SAME")), input_signature=[spec, spec])
    with pytest.raises(tf.errors.InvalidArgumentError, match=arg):
        fn(np.ones(xs, np.float32), np.ones(fs, np.float32))


def test_bad_gradient_op_arguments():
    dy = np.ones((1, 6, 6, 8), np.float32)
    with pytest.raises(ERRORS, match="out_backprop"):
        detconv.conv2d_backprop_input((1, 6, 6, 4), F, dy[:, :5], 1, "SAME")
    with pytest.raises(ERRORS, match="input_sizes"):
        detconv.conv2d_backprop_input((1, 6, 6), F, dy, 1, "SAME")
    with pytest.raises(ERRORS, match="filter_sizes"):
        detconv.conv2d_backprop_filter(X, (3, 3, 4), dy, 1, "SAME")
    with pytest.raises(ERRORS, match="out_backprop"):
        detconv.conv2d_backprop_filter(X, (3, 3, 4, 8), dy[..., :3], 1, "SAME")
    with pytest.raises(ERRORS, match="accumulation"):
        detconv.bias_grad(dy, accumulation="float16")


def test_size_arguments_in_every_form():
    # Host-known sizes become cached constants eagerly; every spelling gives the same result, and what is not
    # a list of integers still gets tf.nn's error.
    dy = np.random.default_rng(3).standard_normal((1, 6, 6, 8)).astype(np.float32)
    want = detconv.conv2d_backprop_input(tf.constant([1, 6, 6, 4]), F, dy, 1, "SAME").numpy()
    for sizes in ([1, 6, 6, 4], (1, 6, 6, 4), tf.TensorShape([1, 6, 6, 4]), np.array([1, 6, 6, 4], np.uint8),
                  np.array([1, 6, 6, 4], np.int64), [1, 6, 6, 4]):
        assert_bits_equal(detconv.conv2d_backprop_input(sizes, F, dy, 1, "SAME").numpy(), want, repr(sizes))
    with pytest.raises(TypeError, match="input_sizes"):
        detconv.conv2d_backprop_input([1.0, 6.0, 6.0, 4.0], F, dy, 1, "SAME")
    with pytest.raises(ERRORS, match="input_sizes"):
        detconv.conv2d_backprop_input([1, 6, 6, 2**40], F, dy, 1, "SAME")
    with pytest.raises(ERRORS, match="out_backprop"):  # sizes that disagree with the tensors
        detconv.conv2d_backprop_filter(X, np.array([3, 3, 4, 7], np.int16), dy, 1, "SAME")


def test_eager_argument_caches_are_transparent():
    # Eager calls reuse normalized arguments (detconv.ops._CONV_ARGS) and checked size constants (_INT32_OF): a
    # form seen before gives what a fresh one gives, other values are not taken for it, and bad forms still fail.
    from detconv import ops
    dy = np.random.default_rng(4).standard_normal((1, 6, 6, 8)).astype(np.float32)
    first = detconv.conv2d(X, F, [1, 1], "SAME").numpy()
    ops._conv_args("NHWC", [1, 1], None, "SAME")[1].append(7)  # callers own the lists they get
    assert_bits_equal(detconv.conv2d(X, F, [1, 1], "SAME").numpy(), first, "cached strides")
    assert_bits_equal(detconv.conv2d(X, F, np.array([1, 1]), "SAME").numpy(), first, "NumPy strides (not cached)")
    assert detconv.conv2d(X, F, [2, 2], "SAME").shape == (1, 3, 3, 8)
    with pytest.raises(ERRORS, match="strides"):
        detconv.conv2d(X, F, [1, 1.5], "SAME")
    with pytest.raises(ERRORS, match="padding"):
        detconv.conv2d(X, F, [1, 1], "same")
    same, valid = tf.constant([1, 6, 6, 4]), tf.constant([1, 8, 8, 4])
    a = detconv.conv2d_backprop_input(same, F, dy, 1, "SAME").numpy()
    b = detconv.conv2d_backprop_input(valid, F, dy, 1, "VALID").numpy()
    assert a.shape == (1, 6, 6, 4) and b.shape == (1, 8, 8, 4)
    assert_bits_equal(detconv.conv2d_backprop_input(same, F, dy, 1, "SAME").numpy(), a, "cached sizes")
    assert_bits_equal(detconv.conv2d_backprop_input(valid, F, dy, 1, "VALID").numpy(), b, "cached sizes")


def test_other_entry_points_validate():
    with pytest.raises(ERRORS, match="filter"):
        detconv.depthwise_conv2d(X, np.ones((3, 3, 3, 2), np.float32), 1, "SAME")
    with pytest.raises(ERRORS, match="data_format"):
        detconv.conv1d(np.ones((1, 6, 4), np.float32), np.ones((3, 4, 2), np.float32), 1, "SAME", "NWHC")
    with pytest.raises(ERRORS, match="stride"):
        detconv.conv1d(np.ones((1, 6, 4), np.float32), np.ones((3, 4, 2), np.float32), 0, "SAME")


def test_unknown_rank_inputs_work():
    spec = tf.TensorSpec(None, tf.float32)
    fn = tf.function(lambda x, f: detconv.conv2d(x, f, 1, "SAME"), input_signature=[spec, spec])
    assert fn(X, F).shape == (1, 6, 6, 8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input"):
        fn(np.ones((6, 6, 4), np.float32), F)


# Geometry whose sizes overflow: a clean error naming the argument, never a
# process abort (TensorShape's fatal check) or a wrapped, silently wrong size.
OVERFLOW = [
    ("transpose output_shape", "detconv.conv2d_transpose(np.ones((1, 4, 4, 1), 'f4'), np.ones((2, 2, 1, 1), 'f4'), "
                               "[2**31 - 1] * 3 + [1], 1, 'SAME')", "input_sizes"),
    ("backprop_filter filter_sizes", "detconv.conv2d_backprop_filter(np.ones((1, 4, 4, 1), 'f4'), "
                                     "[2**31 - 1, 2**31 - 1, 2**31 - 1, 2], np.ones((1, 4, 4, 1), 'f4'), 1, 'SAME')",
     "filter_sizes"),
    ("explicit padding 2**63-1", "detconv.conv2d(np.ones((1, 4, 4, 1), 'f4'), np.ones((2, 2, 1, 1), 'f4'), 1, "
                                 "[[0, 0], [2**63 - 1, 0], [0, 0], [0, 0]])", "padding"),
    ("zero input channels", "detconv.conv2d(np.ones((1, 4, 4, 0), 'f4'), np.ones((2, 2, 1, 1), 'f4'), 1, 'SAME')",
     "input"),
]


@pytest.mark.parametrize("what,call_src,arg", OVERFLOW, ids=[o[0] for o in OVERFLOW])
def test_overflowing_geometry_fails_cleanly(what, call_src, arg):
    import subprocess
    import sys

    from detconv._loader import child_python_kwargs

    src = ("import numpy as np, tensorflow as tf, detconv\n"
           f"try:\n    {call_src}\n    print('NO ERROR')\n"
           "except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:\n"
           "    print('ERROR', type(e).__name__, str(e).replace(chr(10), ' '))\n")
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300,
                       **child_python_kwargs(log_level="3"))
    assert r.returncode == 0, f"process died (rc={r.returncode}):\n{r.stderr[-2000:]}"
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("ERROR") and arg in last, last


def test_kernels_api_overflowing_geometry():
    from detconv import kernels as K

    x, f = np.ones((1, 6, 6, 1), np.float32), np.ones((5, 5, 1, 1), np.float32)
    with pytest.raises(ValueError, match="dilations"):  # (5-1)*2**62 + 1 wraps to 1 in 64 bits
        K.conv2d(x, f, 1, "VALID", 2**62)
    with pytest.raises(ValueError, match="padding"):
        K.conv2d(x, f, 1, ((2**62, 2**62), (0, 0)))
    # a huge stride is no overflow: SAME gives one output per dimension
    assert K.conv2d(x, np.ones((1, 1, 1, 1), np.float32), 2**62, "SAME").shape == (1, 1, 1, 1)
    # A thread count past the native int: as many threads as the work has units (was a pybind11 TypeError).
    assert_bits_equal(K.conv2d(x, f, threads=2**40), K.conv2d(x, f, threads=1))


# A workspace no allocator can give (here an NCHW input's NHWC copy, under an address-space limit set
# after the input and the warm-up) is the op's ResourceExhaustedError, as an allocation failure in
# tf.nn is, and the kernel module's MemoryError; before, the C++ exception crossed into TensorFlow,
# whose eager call died of SIGSEGV in its pybind11 translation.
_OOM_SCRIPT = """
import resource
import numpy as np, tensorflow as tf, detconv
from detconv import kernels as K
detconv.conv2d(tf.ones((1, 4, 4, 2)), tf.ones((1, 1, 2, 2)), 1, "SAME", data_format="NCHW")
K.conv2d(np.ones((1, 2, 4, 4), np.float32), np.ones((1, 1, 2, 2), np.float32), 1, "SAME", data_format="NCHW")
x = np.random.default_rng(0).standard_normal((16, 64, 128, 256), dtype=np.float32)  # 128 MiB, NCHW
xt, f = tf.constant(x), np.random.default_rng(1).standard_normal((1, 1, 64, 64), dtype=np.float32)
vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (192 << 20), resource.RLIM_INFINITY))  # the output, not its copy too
for name, call, err in (
        ("op", lambda: detconv.conv2d(xt, f, 1, "SAME", data_format="NCHW"), tf.errors.ResourceExhaustedError),
        ("kernels", lambda: K.conv2d(x, f, 1, "SAME", data_format="NCHW"), MemoryError)):
    try:
        call()
        print(name, "RAN")
    except err as e:
        print(name, "RAISED", type(e).__name__)
"""


def test_workspace_allocation_failure_raises():
    import subprocess
    import sys

    from detconv._loader import child_python_kwargs

    r = subprocess.run([sys.executable, "-c", _OOM_SCRIPT], capture_output=True, text=True, timeout=300,
                       **child_python_kwargs(log_level="3"))
    assert r.returncode == 0, f"process died (rc={r.returncode}):\n{r.stderr[-2000:]}"
    assert r.stdout.split("\n")[-3:] == ["op RAISED ResourceExhaustedError", "kernels RAISED MemoryError", ""], r.stdout

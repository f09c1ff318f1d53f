"""CUDA kernels vs CPU kernels, bit for bit, through detconv.kernels.

Runs on CuPy arrays and PyTorch CUDA tensors (each skipped when absent); no
TensorFlow needed. Run by scripts/gpu_check.sh on a CUDA machine.

Covered: all four computations; float32, float64, float16 (both
accumulations), bfloat16 (PyTorch only: CuPy has no bfloat16); strides,
dilations, groups (depthwise included), SAME/VALID/explicit padding, NHWC and
NCHW; tiny shapes up to ResNet-50 layers at batch 1 and 32; 50 repeated runs;
batch-split and crop invariance on the GPU; non-default streams; CuPy and
PyTorch agreeing with each other; every forced tile configuration
(DETCONV_CUDA_TILE=0..cuda_tile_configs()-1) on small shapes for all numerics; native float16
accumulation with subnormal products and -0 accumulators before padded taps.
"""

import numpy as np
import pytest

from cases import DTYPE_IDS, DTYPES
from gpu_helpers import (HAVE_KERNELS, NAMES, assert_same_bits, cuda_tile_configs, libraries, nhwc_to, out_shape,
                         run_all)

if not HAVE_KERNELS:
    pytest.skip("detconv._kernels is not built", allow_module_level=True)

LIBS = libraries()

NUMERICS, NUM_IDS = DTYPES, DTYPE_IDS

# (name, x shape NHWC, filter HWIO, strides, dilations, padding)
SMALL = [
    ("1x1x1", (1, 1, 1, 1), (1, 1, 1, 1), 1, 1, "VALID"),
    ("3x3-same", (2, 7, 8, 5), (3, 3, 5, 6), 1, 1, "SAME"),
    ("3x3-valid-s2", (2, 9, 8, 4), (3, 3, 4, 7), 2, 1, "VALID"),
    ("5x3-s21-d12", (1, 11, 10, 3), (5, 3, 3, 4), (2, 1), (1, 2), "SAME"),
    ("dil2-s2", (2, 10, 9, 4), (3, 3, 4, 5), 2, 2, "SAME"),
    ("s3-k2", (2, 10, 11, 3), (2, 2, 3, 5), 3, 1, "VALID"),
    ("s4-k3-gaps", (1, 13, 9, 2), (3, 3, 2, 3), 4, 1, "SAME"),
    ("explicit", (2, 6, 7, 3), (3, 2, 3, 4), (1, 2), 1, ((1, 2), (0, 3))),
    ("explicit-big", (1, 4, 5, 2), (3, 3, 2, 3), 1, 1, ((3, 4), (5, 2))),
    ("groups2", (2, 6, 6, 8), (3, 3, 4, 6), 1, 1, "SAME"),
    ("groups4-s2", (1, 9, 7, 8), (2, 3, 2, 12), 2, 1, ((0, 1), (2, 0))),
    ("groups3-cog1", (2, 6, 6, 9), (3, 3, 3, 3), 1, 1, "SAME"),
    ("depthwise", (2, 8, 7, 6), (3, 3, 1, 6), 1, 1, "SAME"),
    ("depthwise-m3-s2", (2, 9, 9, 4), (3, 3, 1, 12), 2, 1, "SAME"),
    ("depthwise-d2", (1, 9, 10, 5), (3, 3, 1, 5), 1, 2, "VALID"),
    ("depthwise-96ch", (2, 10, 10, 96), (3, 3, 1, 96), 1, 1, "SAME"),
    ("1x1-wide", (2, 5, 5, 24), (1, 1, 24, 20), 1, 1, "VALID"),
    ("co-130-ci-70", (2, 6, 5, 70), (3, 3, 70, 130), 1, 1, "SAME"),
    ("groups2-wide", (1, 6, 6, 96), (3, 3, 48, 150), 2, 1, "SAME"),
    ("co3", (2, 20, 19, 16), (3, 3, 16, 3), 1, 1, "SAME"),
    ("stem-7x7-s2", (1, 32, 30, 3), (7, 7, 3, 8), 2, 1, "SAME"),
    ("many-chunks", (4, 40, 40, 2), (3, 3, 2, 3), 1, 1, "SAME"),
]

# ResNet-50 layers (NHWC input at batch 1; the batch is set per test).
RESNET = [
    ("conv1-7x7-s2", (1, 224, 224, 3), (7, 7, 3, 64), 2, 1, "SAME"),
    ("l1-1x1-64-256", (1, 56, 56, 64), (1, 1, 64, 256), 1, 1, "VALID"),
    ("l1-3x3-64", (1, 56, 56, 64), (3, 3, 64, 64), 1, 1, "SAME"),
    ("l1-1x1-256-64", (1, 56, 56, 256), (1, 1, 256, 64), 1, 1, "VALID"),
    ("l2-3x3-128-s2", (1, 56, 56, 128), (3, 3, 128, 128), 2, 1, "SAME"),
    ("l2-down-1x1-s2", (1, 56, 56, 256), (1, 1, 256, 512), 2, 1, "VALID"),
    ("l3-3x3-256", (1, 14, 14, 256), (3, 3, 256, 256), 1, 1, "SAME"),
    ("l4-3x3-512", (1, 7, 7, 512), (3, 3, 512, 512), 1, 1, "SAME"),
    ("l4-1x1-2048-512", (1, 7, 7, 2048), (1, 1, 2048, 512), 1, 1, "VALID"),
]


def _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation, data_format):
    """(GPU operands, CPU operands): x, f, b, dy with x and dy in data_format."""
    scale = 0.5 if accumulation == "float16" else 1.0
    x = lib.rand(rng, nhwc_to(x_shape, data_format), dtype, scale)
    f = lib.rand(rng, f_shape, dtype, scale)
    b = lib.rand(rng, (f_shape[3],), dtype, scale)
    y = out_shape(x_shape, f_shape, strides, dilations, padding)
    dy = lib.rand(rng, nhwc_to(y, data_format), dtype, scale)
    return [v[0] for v in (x, f, b, dy)], [v[1] for v in (x, f, b, dy)]


def _check(lib, rng, case, dtype, accumulation, data_format):
    if dtype not in lib.dtypes:
        pytest.skip(f"{lib.name} has no {dtype}")
    _, x_shape, f_shape, strides, dilations, padding = case
    gpu, cpu = _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation, data_format)
    got = run_all(*gpu, strides, dilations, padding, accumulation, data_format)
    want = run_all(*cpu, strides, dilations, padding, accumulation, data_format)
    for name, g, w in zip(NAMES, got, want):
        assert type(g) is type(gpu[0]), f"{name}: returned {type(g).__name__}, not {type(gpu[0]).__name__}"
        assert_same_bits(lib, g, w, f"{name} {dtype}/{accumulation} {data_format}")


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype,accumulation", NUMERICS, ids=NUM_IDS)
@pytest.mark.parametrize("case", SMALL, ids=[c[0] for c in SMALL])
@pytest.mark.parametrize("lib", LIBS)
def test_small_shapes(lib, rng, case, dtype, accumulation, data_format):
    _check(lib, rng, case, dtype, accumulation, data_format)


@pytest.mark.parametrize("dtype,accumulation", NUMERICS, ids=NUM_IDS)
@pytest.mark.parametrize("case", RESNET, ids=[c[0] for c in RESNET])
@pytest.mark.parametrize("lib", LIBS)
def test_resnet50_batch1(lib, rng, case, dtype, accumulation):
    _check(lib, rng, case, dtype, accumulation, "NHWC")


# Batch 32: every layer in float32 and float16; the other numerics on a few layers
# (the CPU side of the comparison is what takes time).
BATCH32 = [(c, "float32", None) for c in RESNET] + [(c, "float16", None) for c in RESNET] + [
    (RESNET[2], "float64", None), (RESNET[6], "float64", None),
    (RESNET[2], "float16", "float16"), (RESNET[7], "float16", "float16"),
    (RESNET[0], "bfloat16", None), (RESNET[4], "bfloat16", None),
]


@pytest.mark.parametrize("case,dtype,accumulation", BATCH32,
                         ids=[f"{c[0]}-{d}-{a or 'default'}" for c, d, a in BATCH32])
@pytest.mark.parametrize("lib", LIBS)
def test_resnet50_batch32(lib, rng, case, dtype, accumulation):
    name, x_shape, *rest = case
    case = (name, (32,) + x_shape[1:], *rest)
    _check(lib, rng, case, dtype, accumulation, "NHWC")


@pytest.mark.parametrize("case", [RESNET[0], RESNET[4]], ids=lambda c: c[0])
@pytest.mark.parametrize("lib", LIBS)
def test_resnet50_nchw_batch32(lib, rng, case):
    name, x_shape, *rest = case
    _check(lib, rng, (name, (32,) + x_shape[1:], *rest), "float32", None, "NCHW")


@pytest.mark.parametrize("dtype,accumulation", [("float32", None), ("float16", "float16")], ids=["f32", "f16acc16"])
@pytest.mark.parametrize("lib", LIBS)
def test_50_runs_identical(lib, rng, dtype, accumulation):
    case = ("mid", (8, 28, 28, 64), (3, 3, 64, 96), 1, 1, "SAME")
    _, x_shape, f_shape, strides, dilations, padding = case
    gpu, _ = _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation, "NHWC")
    first = [lib.bits(o) for o in run_all(*gpu, strides, dilations, padding, accumulation, "NHWC")]
    for k in range(49):
        again = run_all(*gpu, strides, dilations, padding, accumulation, "NHWC")
        for name, g, w in zip(NAMES, again, first):
            assert np.array_equal(lib.bits(g), w), f"run {k + 2}: {name} differs from run 1"


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("lib", LIBS)
def test_batch_split_invariance(lib, rng, data_format):
    # y and dx of a sample do not depend on the batch it sits in.
    case = ("b", (32, 15, 14, 12), (3, 3, 12, 20), 2, 1, "SAME")
    _, x_shape, f_shape, strides, dilations, padding = case
    (x, f, b, dy), _ = _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, "float32", None,
                                 data_format)
    from detconv import kernels as K

    a = dict(strides=strides, padding=padding, dilations=dilations, data_format=data_format)
    y_all = K.conv2d(x, f, bias=b, **a)
    dx_all = K.conv2d_backprop_input(dy, f, tuple(x.shape), **a)
    ys, dxs = [], []
    for lo, hi in ((0, 1), (1, 8), (8, 31), (31, 32)):
        xs, dys = lib.slice_batch(x, lo, hi), lib.slice_batch(dy, lo, hi)
        ys.append(K.conv2d(xs, f, bias=b, **a))
        dxs.append(K.conv2d_backprop_input(dys, f, tuple(xs.shape), **a))
    assert_same_bits(lib, lib.concat(ys, 0), y_all, "y batch split")
    assert_same_bits(lib, lib.concat(dxs, 0), dx_all, "dx batch split")


@pytest.mark.parametrize("lib", LIBS)
def test_crop_invariance(lib, rng):
    # An output depends only on its receptive field: a crop of the input, padded
    # explicitly where the crop meets the border, gives the same output bits.
    from detconv import kernels as K

    x_shape, f_shape = (2, 31, 29, 8), (3, 3, 8, 16)
    (x, f, _, _), _ = _operands(lib, rng, x_shape, f_shape, 2, 1, "SAME", "float16", None, "NHWC")
    y = K.conv2d(x, f, 2, "SAME")  # SAME here: pt = pl = 1 (H = 31, W = 29, stride 2, k = 3)
    # outputs rows 3..9, cols 4..11 read input rows 5..19, cols 7..23
    crop = x[:, 5:20, 7:24, :]
    yc = K.conv2d(crop, f, 2, "VALID")
    assert_same_bits(lib, yc, y[:, 3:10, 4:12, :], "interior crop")
    # top-left corner: keep the implicit +0 padding explicit
    crop = x[:, 0:12, 0:10, :]
    yc = K.conv2d(crop, f, 2, ((1, 0), (1, 0)))
    assert_same_bits(lib, yc, y[:, 0:6, 0:5, :], "corner crop")


@pytest.mark.parametrize("lib", LIBS)
def test_non_default_stream(lib, rng):
    case = ("s", (4, 20, 20, 16), (3, 3, 16, 24), 1, 1, "SAME")
    _, x_shape, f_shape, strides, dilations, padding = case
    gpu, cpu = _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, "float32", None, "NHWC")
    want = run_all(*cpu, strides, dilations, padding, None, "NHWC")
    s = lib.new_stream()
    with lib.stream_ctx(s):
        got = run_all(*gpu, strides, dilations, padding, None, "NHWC")
        s.synchronize()
    for name, g, w in zip(NAMES, got, want):
        assert_same_bits(lib, g, w, f"{name} on a side stream")


def test_cupy_and_torch_agree(rng):
    libs = [p.values[0] for p in LIBS if p.values[0] is not None]
    if len(libs) < 2:
        pytest.skip("needs both CuPy and PyTorch with CUDA")
    cp_lib, th_lib = libs
    case = ("x", (3, 17, 16, 12), (3, 3, 6, 10), 1, 2, "SAME")
    _, x_shape, f_shape, strides, dilations, padding = case
    gpu_c, cpu = _operands(cp_lib, rng, x_shape, f_shape, strides, dilations, padding, "float16", None, "NHWC")
    gpu_t = [th_lib.from_numpy(a) for a in cpu]
    got_c = run_all(*gpu_c, strides, dilations, padding, None, "NHWC")
    got_t = run_all(*gpu_t, strides, dilations, padding, None, "NHWC")
    for name, c, t in zip(NAMES, got_c, got_t):
        assert np.array_equal(cp_lib.bits(c), th_lib.bits(t)), f"{name}: CuPy and PyTorch differ"


@pytest.mark.parametrize("lib", LIBS)
def test_specials_canonical_nan(lib, rng):
    case = ("nan", (2, 6, 6, 4), (3, 3, 4, 5), 1, 1, "SAME")
    _, x_shape, f_shape, strides, dilations, padding = case
    for dtype in lib.dtypes:
        _, cpu = _operands(lib, rng, x_shape, f_shape, strides, dilations, padding, dtype, None, "NHWC")
        x, f, b, dy = cpu
        x[0, 1, 1, 0] = float("nan")
        x[1, 2, 3, 1] = float("inf")
        f[1, 1, 0, 2] = -float("inf")
        dy[0, 0, 0, 0] = -float("nan")
        b[3] = float("nan")
        x[1, 4, 4, 2] = 1e-40 if dtype in ("float32", "float64", "bfloat16") else 3e-6  # subnormal
        gpu = [lib.from_numpy(a) if isinstance(a, np.ndarray) else a.to("cuda") for a in (x, f, b, dy)]
        got = run_all(*gpu, strides, dilations, padding, None, "NHWC")
        want = run_all(x, f, b, dy, strides, dilations, padding, None, "NHWC")
        for name, g, w in zip(NAMES, got, want):
            assert_same_bits(lib, g, w, f"{name} {dtype} with NaN/inf/subnormal inputs")


@pytest.mark.parametrize("lib", LIBS)
def test_empty_and_zero_reduction(lib, rng):
    from detconv import kernels as K

    (x, f, _, dy), _ = _operands(lib, rng, (0, 5, 5, 3), (3, 3, 3, 4), 1, 1, "SAME", "float32", None, "NHWC")
    assert tuple(K.conv2d(x, f, padding="SAME").shape) == (0, 5, 5, 4)
    assert tuple(K.conv2d_backprop_input(dy, f, (0, 5, 5, 3), padding="SAME").shape) == (0, 5, 5, 3)
    dw = K.conv2d_backprop_filter(x, dy, (3, 3, 3, 4), padding="SAME")
    assert not lib.bits(dw).any()  # R = 0: +0 everywhere
    assert not lib.bits(K.bias_grad(dy)).any()


# ----------------------------------------------------- forced tile configurations
# DETCONV_CUDA_TILE=k forces tile configuration k on every launch (an index beyond
# a computation's own configurations wraps modulo their count); tile shapes never
# change a bit, so every forced configuration must give the CPU's bits.
TILES = [str(t) for t in range(cuda_tile_configs())]
TILE_SHAPES = [
    ("3x3-s2-chunks", (3, 11, 10, 21), (3, 3, 21, 37), 2, 1, "SAME"),  # R = 90: two dw chunks
    ("groups3-explicit", (2, 7, 6, 12), (3, 2, 4, 9), 1, 1, ((1, 0), (2, 1))),
    ("depthwise-m2-d2", (2, 8, 7, 6), (3, 3, 1, 12), 1, 2, "SAME"),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype,accumulation", NUMERICS, ids=NUM_IDS)
@pytest.mark.parametrize("case", TILE_SHAPES, ids=[c[0] for c in TILE_SHAPES])
@pytest.mark.parametrize("tile", TILES, ids=[f"tile{t}" for t in TILES])
@pytest.mark.parametrize("lib", LIBS)
def test_forced_tile_configs(lib, rng, monkeypatch, tile, case, dtype, accumulation, data_format):
    monkeypatch.setenv("DETCONV_CUDA_TILE", tile)
    _check(lib, rng, case, dtype, accumulation, data_format)


# ------------------------- native float16 accumulation: subnormals and -0 accumulators
# Products of binary16 values of magnitude 2^-8 .. 2^-13 are binary16 subnormals
# (>= 2^-24) or underflow; a negative product that underflows rounds to -0, so an
# accumulator (which starts at +0) becomes -0. In the forward pass and dw a padded
# tap is a real fma(+0, f, acc), which turns a -0 accumulator into +0 when +0*f is
# +0 - an implementation that skipped padded taps would keep -0. 3x3 filters with
# SAME padding so that padded taps exist (first and last in the fold).
F16_SHAPES = [
    ("3x3-same", (2, 6, 5, 4), (3, 3, 4, 3), 1, 1, "SAME"),  # R = 60: one dw chunk
    ("3x3-same-chunks", (2, 9, 8, 3), (3, 3, 3, 4), 1, 1, "SAME"),  # R = 144: three dw chunks
    ("groups2-s2", (1, 7, 7, 4), (3, 3, 2, 6), 2, 1, "SAME"),
    ("depthwise", (2, 6, 6, 3), (3, 3, 1, 3), 1, 1, "SAME"),
]
# sign of x, f, dy (0: random) and their exponent range 2^-lo .. 2^-hi; mantissas in
# [1, 1.4] for the all-underflowing patterns, so that every product is below 2^-25
# in magnitude and rounds to a signed zero.
F16_PATTERNS = {
    # subnormal and underflowing products of both signs, some exact -0 / +0 inputs
    "mixed-subnormal": dict(signs=(0, 0, 0), exps=(8, 12), mant=(1.0, 2.0), zeros=True),
    # fwd and dw: every term a negative underflowing product -> -0 accumulators
    # before the padded taps; dx: positive underflow (+0)
    "neg-underflow-fwd-dw": dict(signs=(-1, 1, 1), exps=(13, 13), mant=(1.0, 1.4), zeros=False),
    # dx and dw: every term a negative underflowing product; fwd: +0
    "neg-underflow-dx-dw": dict(signs=(1, 1, -1), exps=(13, 13), mant=(1.0, 1.4), zeros=False),
    # products just around the smallest subnormal 2^-24 (round up to it, or to -0/+0)
    "around-2^-24": dict(signs=(0, 1, 0), exps=(12, 13), mant=(1.0, 2.0), zeros=False),
}


def _f16_tiny(rng, shape, sign, exps, mant, zeros):
    lo, hi = exps
    e = rng.integers(lo, hi + 1, size=shape).astype(np.float64)
    m = rng.uniform(mant[0], mant[1], size=shape)
    s = rng.choice([-1.0, 1.0], size=shape) if sign == 0 else float(sign)
    v = (s * m * np.exp2(-e)).astype(np.float16)
    if zeros and v.size > 2:
        flat = v.reshape(-1)
        idx = rng.choice(v.size, size=max(1, v.size // 10), replace=False)
        flat[idx[: len(idx) // 2]] = np.float16(-0.0)
        flat[idx[len(idx) // 2:]] = np.float16(0.0)
    return v


@pytest.mark.parametrize("pattern", list(F16_PATTERNS))
@pytest.mark.parametrize("case", F16_SHAPES, ids=[c[0] for c in F16_SHAPES])
@pytest.mark.parametrize("lib", LIBS)
def test_float16_accumulation_subnormal_and_negative_zero(lib, rng, monkeypatch, case, pattern):
    _, x_shape, f_shape, strides, dilations, padding = case
    p = F16_PATTERNS[pattern]
    sx, sf, sdy = p["signs"]
    y_shape = out_shape(x_shape, f_shape, strides, dilations, padding)
    x = _f16_tiny(rng, x_shape, sx, p["exps"], p["mant"], p["zeros"])
    f = _f16_tiny(rng, f_shape, sf, p["exps"], p["mant"], p["zeros"])
    dy = _f16_tiny(rng, y_shape, sdy, p["exps"], p["mant"], p["zeros"])
    # bias -0 keeps the accumulator's sign visible in y (-0 + -0 = -0, +0 + -0 = +0)
    b = np.full((f_shape[3],), -0.0, dtype=np.float16)
    if pattern.startswith("neg-underflow"):
        # the premise: every product underflows to a signed zero in binary16
        assert float(np.abs(x).max()) * float(np.abs(f).max()) < 2.0 ** -25
        assert float(np.abs(x).max()) * float(np.abs(dy).max()) < 2.0 ** -25
        assert float(np.abs(dy).max()) * float(np.abs(f).max()) < 2.0 ** -25
    gpu = [lib.from_numpy(a) for a in (x, f, b, dy)]
    cpu = [lib.cpu(a) for a in gpu]
    want = run_all(*cpu, strides, dilations, padding, "float16", "NHWC")
    if pattern == "neg-underflow-fwd-dw":
        # the case is doing its job: y holds both -0 (interior) and +0 (after padded taps)
        yb = lib.bits(want[0])
        assert (yb == np.int16(-0x8000)).any() and (yb == 0).any(), "expected both -0 and +0 in y"
    for tile in [None] + TILES:
        if tile is None:
            monkeypatch.delenv("DETCONV_CUDA_TILE", raising=False)
        else:
            monkeypatch.setenv("DETCONV_CUDA_TILE", tile)
        got = run_all(*gpu, strides, dilations, padding, "float16", "NHWC")
        for name, g, w in zip(NAMES, got, want):
            assert_same_bits(lib, g, w, f"{name} float16/float16 {pattern} tile {tile or 'auto'}")


# Three spatial dimensions: (name, x NDHWC, filter DHWIO, strides, dilations, padding)
CASES_3D = [
    ("3x3x3-same", (2, 5, 6, 7, 3), (3, 3, 3, 3, 4), 1, 1, "SAME"),
    ("strided-dilated", (1, 7, 6, 7, 4), (2, 3, 2, 4, 6), (2, 1, 2), (1, 2, 1), ((1, 0), (2, 1), (0, 1))),
    ("depthwise-3d", (2, 5, 5, 5, 6), (3, 3, 3, 1, 6), 2, 1, "SAME"),
    ("c3d-block", (1, 8, 28, 28, 64), (3, 3, 3, 64, 64), 1, 1, "SAME"),
]


@pytest.mark.parametrize("data_format", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize("dtype,accumulation", NUMERICS, ids=NUM_IDS)
@pytest.mark.parametrize("case", CASES_3D, ids=[c[0] for c in CASES_3D])
@pytest.mark.parametrize("lib", LIBS)
def test_conv3d(lib, rng, case, dtype, accumulation, data_format):
    from detconv import kernels as K

    if dtype not in lib.dtypes:
        pytest.skip(f"{lib.name} has no {dtype}")
    _, xs, fs, st, dl, pad = case
    cf = data_format == "NCDHW"
    to_fmt = (lambda s: (s[0], s[-1], *s[1:-1])) if cf else (lambda s: s)
    scale = 0.5 if accumulation == "float16" else 1.0
    x, f, b = lib.rand(rng, to_fmt(xs), dtype, scale), lib.rand(rng, fs, dtype, scale), lib.rand(rng, fs[-1:], dtype,
                                                                                                  scale)
    y_cpu = K.conv3d(x[1], f[1], st, pad, dl, bias=b[1], accumulation=accumulation, data_format=data_format)
    dy = lib.rand(rng, tuple(y_cpu.shape), dtype, scale)
    a = dict(accumulation=accumulation, data_format=data_format)
    for name, run in (
            ("y", lambda i: K.conv3d(x[i], f[i], st, pad, dl, bias=b[i], **a)),
            ("dx", lambda i: K.conv3d_backprop_input(dy[i], f[i], tuple(x[i].shape), st, pad, dl, **a)),
            ("dw", lambda i: K.conv3d_backprop_filter(x[i], dy[i], fs, st, pad, dl, **a)),
            ("db", lambda i: K.bias_grad(dy[i], **a))):
        assert_same_bits(lib, run(0), run(1), f"3-D {name} {dtype}/{accumulation} {data_format}")

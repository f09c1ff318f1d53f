"""detconv.kernels (the framework-free module) on NumPy arrays: the CPU kernels
against detconv.reference, bit for bit. Needs no TensorFlow."""

import numpy as np
import pytest

from conftest import assert_bits_equal
from cases import CASES_2D_KERNELS, CASES_3D, CASES_HALF_DIRECT, DTYPE_IDS, DTYPES
from helpers import on_cpu_isa, rand, to_nchw, to_nhwc

try:
    from detconv import _kernels  # noqa: F401
except ImportError:
    pytest.skip("detconv._kernels is not built", allow_module_level=True)

from detconv import kernels as K
from detconv import reference as ref

CASES = CASES_2D_KERNELS


def _operands(rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation):
    scale = 0.5 if accumulation == "float16" else 1.0
    x = rand(rng, x_shape, dtype, scale)
    f = rand(rng, f_shape, dtype, scale)
    b = rand(rng, (f_shape[3],), dtype, scale)
    y_shape = ref.conv2d(x, f, strides, padding, dilations, accumulation=accumulation).shape
    dy = rand(rng, y_shape, dtype, scale)
    return x, f, b, dy


def _all(mod, x, f, b, dy, strides, dilations, padding, accumulation, **kw):
    a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation)
    return [mod.conv2d(x, f, bias=b, **a, **kw),
            mod.conv2d_backprop_input(dy, f, x.shape, **a, **kw),
            mod.conv2d_backprop_filter(x, dy, f.shape, **a, **kw),
            mod.bias_grad(dy, accumulation=accumulation, **kw)]


NAMES = ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "bias_grad")


@pytest.mark.parametrize("dtype,accumulation", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cpu_matches_reference(rng, case, dtype, accumulation):
    _, x_shape, f_shape, strides, dilations, padding = case
    x, f, b, dy = _operands(rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation)
    want = _all(ref, x, f, b, dy, strides, dilations, padding, accumulation)
    got = _all(K, x, f, b, dy, strides, dilations, padding, accumulation)
    for name, g, w in zip(NAMES, got, want):
        assert_bits_equal(g, w, name)


@pytest.mark.parametrize("dtype,accumulation", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]], ids=lambda c: c[0])
def test_nchw_same_bits(rng, case, dtype, accumulation):
    _, x_shape, f_shape, strides, dilations, padding = case
    x, f, b, dy = _operands(rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation)
    want = _all(ref, x, f, b, dy, strides, dilations, padding, accumulation)
    a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation, data_format="NCHW")
    xc, dyc = to_nchw(x), to_nchw(dy)
    n, h, w, c = x.shape
    got = [to_nhwc(K.conv2d(xc, f, bias=b, **a)),
           to_nhwc(K.conv2d_backprop_input(dyc, f, (n, c, h, w), **a)),
           K.conv2d_backprop_filter(xc, dyc, f.shape, **a),
           K.bias_grad(dyc, accumulation=accumulation, data_format="NCHW")]
    for name, g, w_ in zip(NAMES, got, want):
        assert_bits_equal(g, w_, name)


def _isas():
    return [i for i in ("scalar", "avx2", "avx512") if _kernels.cpu_isa_supported(i)]


@pytest.mark.parametrize("isa", _isas())
def test_every_isa_path_same_bits(rng, isa):
    with on_cpu_isa(K, isa):
        # ... and the 1x1 GEMM (AVX2: forward and dx) and the AVX2 forward's 6-pixel dense blocks.
        picked = ("dw-chunks-s2", "dw-s2-even", "1x1-wide", "rows-of-23-groups-d2", "dw3-same-rows-of-19",
                  "dw3-pads-short-rows", "dw3-s2-pads", "dw3-s2-valid-24", "stem-wide-joint", "dw3-s2-pairs-c48",
                  "dw5-s1-same-rows-of-21", "dw7-pads-short-rows", "dw5-s2-same", "dw7-s2-valid-30",
                  "dw5-s21-explicit", "dw5-m2", "groups-lanes-4x4", "groups-lanes-2x2-s2", "groups-lanes-2x8-d2",
                  "groups-lanes-8x2", "groups-lanes-16x16")
        for case in (CASES[0], CASES[5], *(c for c in CASES if c[0] in picked)):
            _, x_shape, f_shape, strides, dilations, padding = case
            for dtype, accumulation in DTYPES:
                x, f, b, dy = _operands(rng, x_shape, f_shape, strides, dilations, padding, dtype, accumulation)
                want = _all(ref, x, f, b, dy, strides, dilations, padding, accumulation)
                got = _all(K, x, f, b, dy, strides, dilations, padding, accumulation)
                for name, g, w in zip(NAMES, got, want):
                    assert_bits_equal(g, w, f"{isa} {dtype} {name}")


def _half_operands(rng, x_shape, f_shape, strides, dilations, padding, accumulation):
    """float16 operands with subnormals, -0 and (float32 accumulation) one inf and one NaN."""
    x, f, b, dy = _operands(rng, x_shape, f_shape, strides, dilations, padding, "float16", accumulation)
    tiny = np.float16(2.0 ** -20)  # subnormal in binary16
    x.flat[rng.choice(x.size, x.size // 5, replace=False)] *= tiny
    x.flat[rng.choice(x.size, 3, replace=False)] = np.float16(-0.0)
    dy.flat[rng.choice(dy.size, dy.size // 5, replace=False)] *= tiny
    if accumulation is None:  # one inf and one NaN (each poisons only its own outputs)
        x.flat[x.size // 3], dy.flat[dy.size // 2] = np.float16(np.inf), np.float16(np.nan)
    return x, f, b, dy


@pytest.mark.parametrize("isa", _isas())
def test_float16_read_in_place(rng, isa):
    # float16 x and dy read from the caller's memory and widened as loaded (CASES_HALF_DIRECT),
    # on every ISA, both accumulations, with subnormals, -0, inf and NaN among the values; the
    # NCHW calls (converted into a copy first) must agree too.
    with on_cpu_isa(K, isa):
        for name, x_shape, f_shape, strides, dilations, padding in CASES_HALF_DIRECT:
            for accumulation in (None, "float16"):
                x, f, b, dy = _half_operands(rng, x_shape, f_shape, strides, dilations, padding, accumulation)
                want = _all(ref, x, f, b, dy, strides, dilations, padding, accumulation)
                got = _all(K, x, f, b, dy, strides, dilations, padding, accumulation)
                for what, g, w in zip(NAMES, got, want):
                    assert_bits_equal(g, w, f"{isa} {name} {accumulation} {what}")
                a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation,
                         data_format="NCHW")
                assert_bits_equal(to_nhwc(K.conv2d(to_nchw(x), f, bias=b, **a)), want[0], f"{name} NCHW y")
                assert_bits_equal(to_nhwc(K.conv2d_backprop_input(to_nchw(dy), f, to_nchw(x).shape, **a)),
                                  want[1], f"{name} NCHW dx")
                assert_bits_equal(K.conv2d_backprop_filter(to_nchw(x), to_nchw(dy), f.shape, **a), want[2],
                                  f"{name} NCHW dw")


@pytest.mark.parametrize("accumulation", [None, "float16"])
def test_float16_1x1_filter_gradient_widened_per_chunk(rng, accumulation):
    # A 1x1 filter gradient whose float copies of x and dy would pass 16 MiB: float16 x and dy widened
    # chunk by chunk (ChunkReader in csrc/cpu/wgrad_impl.h), chunks of 64 positions on rows of 120, on
    # every ISA (the reference computed once: it is the slow part).
    case = ((1, 80, 120, 8), (1, 1, 8, 448), 1, 1, "VALID")
    x, f, b, dy = _half_operands(rng, *case, accumulation)
    want = ref.conv2d_backprop_filter(x, dy, f.shape, strides=1, padding="VALID", dilations=1,
                                      accumulation=accumulation)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            got = K.conv2d_backprop_filter(x, dy, f.shape, strides=1, padding="VALID", dilations=1,
                                           accumulation=accumulation)
            assert_bits_equal(got, want, f"{isa} {accumulation} dw")


def test_thread_count_never_changes_bits(rng):
    x, f, b, dy = _operands(rng, (3, 12, 11, 6), (3, 3, 6, 8), 1, 1, "SAME", "float32", None)
    one = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=1)
    for t in (2, 3, 7):
        many = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=t)
        for name, g, w in zip(NAMES, many, one):
            assert_bits_equal(g, w, f"threads={t} {name}")


def test_threads_draining_many_chunks_never_change_bits(rng):
    # Large enough that each thread takes several of the executor's chunks (csrc/detconv/unit_queue.h: chunks
    # of at least 2^24 cost units; the forward here has 14): every unit computed once, one thread's bits.
    x, f, b = rand(rng, (2, 56, 56, 64), "float32"), rand(rng, (3, 3, 64, 64), "float32"), rand(rng, (64,), "float32")
    dy = rand(rng, (2, 56, 56, 64), "float32")
    one = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=1)
    for t in (2, 3):
        many = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=t)
        for name, g, w in zip(NAMES, many, one):
            assert_bits_equal(g, w, f"threads={t} {name}")


def test_concurrent_callers_share_the_worker_pool(rng):
    # Python threads calling at once (the GIL released): one holds the module's parked threads
    # (csrc/python/worker_pool.h), the others start threads of their own; every result one thread's bits.
    import threading

    x, f, b = rand(rng, (2, 28, 28, 32), "float32"), rand(rng, (3, 3, 32, 32), "float32"), rand(rng, (32,), "float32")
    dy = rand(rng, (2, 28, 28, 32), "float32")
    one = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=1)
    got, errors = {}, []

    def call(k):
        try:
            for r in range(3):
                got[k, r] = _all(K, x, f, b, dy, 1, 1, "SAME", None, threads=2 + k % 3)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    callers = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    assert not errors, errors
    assert len(got) == 18
    for key, many in got.items():
        for name, g, w in zip(NAMES, many, one):
            assert_bits_equal(g, w, f"caller {key} {name}")


def _forked_call(q, x, f):
    q.put(K.conv2d(x, f, padding="SAME", threads=2))


def test_forked_child_runs_its_own_threads(rng):
    # A child forked after the parent's pool started (multiprocessing's fork, as data loaders do) holds
    # none of its threads (nor any lock they held): its calls finish, with the parent's bits.
    import multiprocessing

    x, f = rand(rng, (2, 28, 28, 32), "float32"), rand(rng, (3, 3, 32, 32), "float32")
    want = K.conv2d(x, f, padding="SAME", threads=2)  # the parent's pool is up
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_forked_call, args=(q, x, f))
    child.start()
    got = q.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0
    assert_bits_equal(got, want, "forked child")


def test_wgrad_many_chunks(rng):
    # R = 4*20*20 = 1600 and a small filter: ceil(R/64) = 25 chunks added in order.
    x, f, b, dy = _operands(rng, (4, 20, 20, 2), (3, 3, 2, 3), 1, 1, "SAME", "float32", None)
    assert_bits_equal(K.conv2d_backprop_filter(x, dy, f.shape, 1, "SAME"),
                      ref.conv2d_backprop_filter(x, dy, f.shape, 1, "SAME"), "dw")
    assert_bits_equal(K.bias_grad(dy), ref.bias_grad(dy), "db")


@pytest.mark.parametrize("isa", _isas())
def test_wgrad_running_sums_and_parts(rng, isa):
    # R = 1600, F = 3*3*12*20 = 2160: 25 chunks. With t threads the kernels
    # sum the chunks as they come (fixed shares of the tiles) while
    # (t-1)*R*(C+Co) <= 2*P*F, i.e. t <= 3, and keep P parts for combine()
    # past that; Co = 20 leaves a partial vector per tile. Both ways must add
    # part[0] + part[1] + ... in chunk order.
    with on_cpu_isa(K, isa):
        for dtype, accumulation in DTYPES:
            x, f, b, dy = _operands(rng, (4, 20, 20, 12), (3, 3, 12, 20), 1, 1, "SAME", dtype, accumulation)
            want = ref.conv2d_backprop_filter(x, dy, f.shape, 1, "SAME", accumulation=accumulation)
            for t in (1, 2, 8):
                got = K.conv2d_backprop_filter(x, dy, f.shape, 1, "SAME", accumulation=accumulation, threads=t)
                assert_bits_equal(got, want, f"{isa} {dtype}/{accumulation} threads={t} dw")


@pytest.mark.parametrize("dtype,accumulation", [("float32", None), ("float64", None), ("float16", "float16")])
def test_wgrad_output_blocks_in_groups(rng, dtype, accumulation):
    # A chunk's dy rows past 512 KiB (64 positions of 2200 channels, in every accumulation): the dense
    # filter gradient sweeps its i-tiles over groups of o-blocks, not all of them (o_group in
    # csrc/cpu/wgrad_impl.h), the last group one or more blocks short, x packed per (i-tile, group);
    # running sums (one thread) and parts (two). Every ISA against one reference.
    x, f, b, dy = _operands(rng, (1, 20, 32, 13), (1, 1, 13, 2200), 1, 1, "VALID", dtype, accumulation)
    want = ref.conv2d_backprop_filter(x, dy, f.shape, 1, "VALID", accumulation=accumulation)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            for t in (1, 2):
                got = K.conv2d_backprop_filter(x, dy, f.shape, 1, "VALID", accumulation=accumulation, threads=t)
                assert_bits_equal(got, want, f"{isa} {dtype}/{accumulation} threads={t} dw")


def test_wgrad_1x1_sub_runs(rng):
    # A 1x1 filter gradient whose chunk holds past 1 MiB of x and dy (64 positions of 13 + 4200 channels):
    # its tiles fold the chunk in sub-runs with their accumulators in memory between them (sub_runs in
    # csrc/cpu/wgrad_impl.h), x packed per sub-run; running sums (one thread) and parts (two).
    x, f, b, dy = _operands(rng, (1, 20, 32, 13), (1, 1, 13, 4200), 1, 1, "VALID", "float32", None)
    want = ref.conv2d_backprop_filter(x, dy, f.shape, 1, "VALID")
    for isa in _isas():
        with on_cpu_isa(K, isa):
            for t in (1, 2):
                assert_bits_equal(K.conv2d_backprop_filter(x, dy, f.shape, 1, "VALID", threads=t), want,
                                  f"{isa} threads={t} dw")


@pytest.mark.parametrize("isa", _isas())
def test_joint_filter_gradient_tiles(rng, isa):
    # Few input channels and several kw: the filter gradient's tiles take
    # consecutive (kw, i) pairs of a filter row; their count (9, 15, 20, 21,
    # 33 here) picks the tile height on AVX-512 (7, 8 or 9 rows). Tiles whose
    # pairs are one run of x read it in place (wgrad_joint_fold): positions
    # whose taps meet padding on the left, the right or both, padded rows,
    # and none (VALID), across strides and height dilations.
    with on_cpu_isa(K, isa):
        for f_shape, s, d, pad in (((3, 3, 3, 32), 2, 1, "SAME"), ((5, 5, 3, 24), 1, 1, "SAME"),
                                   ((3, 5, 4, 33), 2, 1, "SAME"), ((7, 7, 3, 40), 2, 1, "SAME"),
                                   ((11, 11, 3, 16), 4, 1, "SAME"), ((7, 7, 3, 40), 2, 1, "VALID"),
                                   ((7, 7, 3, 24), (1, 3), (2, 1), ((2, 4), (5, 1))),
                                   ((5, 7, 3, 36), (2, 1), (3, 1), ((0, 3), (1, 6))),
                                   ((7, 9, 3, 64), 1, 1, ((1, 1), (8, 8)))):
            x_shape = (2, 23, 26 if f_shape[1] < 9 else 7, f_shape[2])
            x, f, b, dy = _operands(rng, x_shape, f_shape, s, d, pad, "float32", None)
            want = ref.conv2d_backprop_filter(x, dy, f_shape, s, pad, dilations=d)
            for t in (1, 2):
                got = K.conv2d_backprop_filter(x, dy, f_shape, s, pad, dilations=d, threads=t)
                assert_bits_equal(got, want, f"{isa} {f_shape} s={s} d={d} {pad} threads={t} dw")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_specials_canonical_nan(rng, dtype):
    x, f, b, dy = _operands(rng, (2, 5, 5, 3), (3, 3, 3, 4), 1, 1, "SAME", dtype, None)
    dt = x.dtype
    x[0, 1, 1, 0] = np.array(np.nan, dt)
    x[1, 2, 2, 1] = np.array(np.inf, dt)
    f[1, 1, 0, 2] = np.array(-np.inf, dt)
    dy[0, 0, 0, 0] = np.array(-np.nan, dt)
    b[3] = np.array(np.nan, dt)
    got = _all(K, x, f, b, dy, 1, 1, "SAME", None)
    want = _all(ref, x, f, b, dy, 1, 1, "SAME", None)
    for name, g, w in zip(NAMES, got, want):
        assert_bits_equal(g, w, name)


def _rounds_to_nearest_with_subnormals():
    """This thread's arithmetic as Python and NumPy see it: round to nearest, subnormals kept."""
    one = float(np.random.default_rng().integers(1, 2))  # a runtime 1.0 (nothing folded in advance)
    return (one + 1.5 * 2.0 ** -53 == 1.0 + 2.0 ** -52  # 1 + 0.75 ulp
            and np.float32(one) + np.float32(1.5 * 2.0 ** -24) == np.float32(1.0 + 2.0 ** -23)
            and np.float32(one * 1e-38) / np.float32(4) != 0)


@pytest.mark.parametrize("isa", _isas())
def test_fp_environment_restored(rng, isa):
    # The shards set their own floating-point environment (subnormals kept; AVX2's binary16 lanes round
    # down) and must hand the caller's back; this thread runs the first shard.
    with on_cpu_isa(K, isa):
        for dtype, accumulation in DTYPES:
            x, f, _, _ = _operands(rng, (1, 6, 6, 8), (3, 3, 8, 16), 1, 1, "SAME", dtype, accumulation)
            K.conv2d(x, f, padding="SAME", accumulation=accumulation, threads=1)
            if not _rounds_to_nearest_with_subnormals():
                raise AssertionError(f"{isa} {dtype} {accumulation}: the caller's rounding or FTZ changed")


def test_subnormals_kept(rng):
    x = (rng.random((1, 4, 4, 2)) * 1e-38).astype(np.float32)  # float32 subnormals and tiny normals
    f = rand(rng, (2, 2, 2, 3), "float32")
    got = K.conv2d(x, f)
    assert_bits_equal(got, ref.conv2d(x, f), "y")
    assert np.any((got != 0) & (np.abs(got) < np.finfo(np.float32).tiny))


def test_empty_batch_and_zero_reduction(rng):
    x = rand(rng, (0, 5, 5, 3), "float32")
    f = rand(rng, (3, 3, 3, 4), "float32")
    dy = rand(rng, (0, 5, 5, 4), "float32")
    assert K.conv2d(x, f, padding="SAME").shape == (0, 5, 5, 4)
    assert K.conv2d_backprop_input(dy, f, x.shape, padding="SAME").shape == x.shape
    dw = K.conv2d_backprop_filter(x, dy, f.shape, padding="SAME")
    assert_bits_equal(dw, np.zeros(f.shape, np.float32), "dw")  # R = 0: +0 everywhere
    assert_bits_equal(K.bias_grad(dy), np.zeros((4,), np.float32), "db")


def test_tf_style_arguments(rng):
    x, f, b, dy = _operands(rng, (1, 7, 7, 2), (3, 3, 2, 3), 2, 1, ((1, 0), (0, 1)), "float32", None)
    want = ref.conv2d(x, f, 2, ((1, 0), (0, 1)))
    got = K.conv2d(x, f, [1, 2, 2, 1], [[0, 0], [1, 0], [0, 1], [0, 0]], [1, 1, 1, 1])
    assert_bits_equal(got, want, "NHWC 4-element arguments")
    got = K.conv2d(to_nchw(x), f, [1, 1, 2, 2], [[0, 0], [0, 0], [1, 0], [0, 1]], data_format="NCHW")
    assert_bits_equal(to_nhwc(got), want, "NCHW 4-element arguments")
    # non-contiguous and list inputs are accepted
    assert_bits_equal(K.conv2d(np.asfortranarray(x), f, 2, ((1, 0), (0, 1))), want, "fortran order")


def test_argument_errors(rng):
    x = rand(rng, (1, 5, 5, 4), "float32")
    f = rand(rng, (3, 3, 4, 6), "float32")
    with pytest.raises(TypeError, match="f:"):
        K.conv2d(x, f.astype(np.float64))
    with pytest.raises(TypeError, match="x:"):
        K.conv2d(x.astype(np.int32), f)
    with pytest.raises(ValueError, match="f:"):
        K.conv2d(x, rand(rng, (3, 3, 3, 6), "float32"))
    with pytest.raises(ValueError, match="strides"):
        K.conv2d(x, f, 0)
    with pytest.raises(ValueError, match="padding"):
        K.conv2d(x, f, padding="FULL")
    with pytest.raises(ValueError, match="padding"):
        K.conv2d(x, f, padding=((1, -1), (0, 0)))
    with pytest.raises(ValueError, match="data_format"):
        K.conv2d(x, f, data_format="NWHC")
    with pytest.raises(ValueError, match="accumulation"):
        K.conv2d(x, f, accumulation="float16")
    with pytest.raises(ValueError, match="bias"):
        K.conv2d(x, f, bias=rand(rng, (5,), "float32"))
    with pytest.raises(ValueError, match="dy"):
        K.conv2d_backprop_input(rand(rng, (1, 5, 5, 6), "float32"), f, x.shape, padding="VALID")
    with pytest.raises(ValueError, match="input_shape"):
        K.conv2d_backprop_input(rand(rng, (1, 3, 3, 6), "float32"), f, (1, 5, 5))
    with pytest.raises(ValueError, match="dy"):
        K.conv2d_backprop_filter(x, rand(rng, (1, 4, 4, 6), "float32"), f.shape)
    # a filter larger than the VALID input leaves an empty output (as tf.nn), no error
    assert K.conv2d(x, rand(rng, (7, 7, 4, 6), "float32")).shape[1:3] == (0, 0)
    with pytest.raises(ValueError, match="threads"):
        K.conv2d(x, f, threads=0)


def test_torch_cpu_tensors_give_the_same_bits(rng):
    torch = pytest.importorskip("torch")
    x, f, b, dy = _operands(rng, (2, 6, 7, 5), (3, 3, 5, 6), 1, 1, "SAME", "float32", None)
    want = _all(ref, x, f, b, dy, 1, 1, "SAME", None)
    t = [torch.from_numpy(a) for a in (x, f, b, dy)]
    got = _all(K, *t, 1, 1, "SAME", None)
    for name, g, w in zip(NAMES, got, want):
        assert isinstance(g, torch.Tensor)
        assert_bits_equal(g.numpy(), w, name)


def test_import_without_tensorflow():
    # detconv.kernels must not pull TensorFlow in (checked in a fresh interpreter).
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(K.__file__)))
    # tensorflow made unimportable: the kernels module must import and compute without it.
    code = ("import sys; sys.modules['tensorflow'] = None\n"
            "import numpy as np, detconv, detconv.kernels as K, detconv.reference as ref\n"
            "x = np.linspace(-1, 1, 2 * 5 * 5 * 3, dtype=np.float32).reshape(2, 5, 5, 3) * 1.37\n"
            "f = np.linspace(1, -1, 3 * 3 * 3 * 4, dtype=np.float32).reshape(3, 3, 3, 4) * 0.71\n"
            "assert (K.conv2d(x, f, 1, 'SAME').view(np.uint32) == ref.conv2d(x, f, 1, 'SAME').view(np.uint32)).all()\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_empty_outputs_match_the_reference(rng):
    """No output channel, or a filter wider than the VALID input: empty outputs and +0 gradients, as tf.nn."""
    x = rand(rng, (2, 4, 3, 4), "float32")
    for f_shape, padding in (((2, 2, 2, 0), "SAME"), ((1, 5, 4, 6), "VALID")):
        f = rand(rng, f_shape, "float32")
        y = K.conv2d(x, f, padding=padding)
        want = ref.conv2d(x, f, padding=padding)
        assert y.shape == want.shape and 0 in y.shape
        dy = rand(rng, want.shape, "float32")
        assert_bits_equal(K.conv2d_backprop_input(dy, f, x.shape, padding=padding),
                          ref.conv2d_backprop_input(dy, f, x.shape, padding=padding), "dx of an empty output")
        assert_bits_equal(K.conv2d_backprop_filter(x, dy, f_shape, padding=padding),
                          ref.conv2d_backprop_filter(x, dy, f_shape, padding=padding), "dw of an empty output")
        assert_bits_equal(K.bias_grad(dy), ref.bias_grad(dy), "db of an empty output")


# ---------------------------------------------------------------- three spatial dimensions


@pytest.mark.parametrize("dtype,acc", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES_3D, ids=[c[0] for c in CASES_3D])
def test_conv3d_matches_reference(rng, case, dtype, acc):
    _, xs, fs, st, dl, pad = case
    x, f, b = rand(rng, xs, dtype), rand(rng, fs, dtype), rand(rng, (fs[-1],), dtype)
    y = K.conv3d(x, f, st, pad, dl, bias=b, accumulation=acc)
    assert_bits_equal(y, ref.conv3d(x, f, st, pad, dl, bias=b, accumulation=acc), "conv3d")
    dy = rand(rng, y.shape, dtype)
    assert_bits_equal(K.conv3d_backprop_input(dy, f, xs, st, pad, dl, accumulation=acc),
                      ref.conv3d_backprop_input(dy, f, xs, st, pad, dl, accumulation=acc), "conv3d dx")
    assert_bits_equal(K.conv3d_backprop_filter(x, dy, fs, st, pad, dl, accumulation=acc),
                      ref.conv3d_backprop_filter(x, dy, fs, st, pad, dl, accumulation=acc), "conv3d dw")
    assert_bits_equal(K.bias_grad(dy, accumulation=acc), ref.bias_grad(dy, accumulation=acc), "bias_grad 5-D")
    # channels first: the same bits
    cf = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    y_cf = K.conv3d(cf, f, st, pad, dl, bias=b, accumulation=acc, data_format="NCDHW")
    assert_bits_equal(np.ascontiguousarray(np.moveaxis(y_cf, 1, -1)), y, "conv3d NCDHW")
    assert_bits_equal(K.bias_grad(np.ascontiguousarray(np.moveaxis(dy, -1, 1)), accumulation=acc,
                                  data_format="NCDHW"), ref.bias_grad(dy, accumulation=acc), "bias_grad NCDHW")


def test_conv3d_depth_one_is_conv2d(rng):
    x, f = rand(rng, (2, 1, 7, 6, 4), "float32"), rand(rng, (1, 3, 3, 4, 5), "float32")
    assert_bits_equal(K.conv3d(x, f, 1, "SAME")[:, 0], K.conv2d(x[:, 0], f[0], 1, "SAME"), "depth 1")
    assert K.conv3d(x, f, [1, 2, 2, 2, 1], "VALID").shape == (2, 1, 3, 2, 5)
    with pytest.raises(ValueError, match="strides"):
        K.conv3d(x, f, [1, 2], "VALID")


def test_composite_entry_points_match_reference(rng):
    x, f1, b = rand(rng, (2, 17, 4), "float32"), rand(rng, (3, 4, 6), "float32"), rand(rng, (6,), "float32")
    assert_bits_equal(K.conv1d(x, f1, 2, (1, 2), 1, bias=b), ref.conv1d(x, f1, 2, (1, 2), 1, bias=b), "conv1d")
    ncw = K.conv1d(np.ascontiguousarray(np.transpose(x, (0, 2, 1))), f1, 2, "SAME", data_format="NCW")
    assert_bits_equal(np.ascontiguousarray(np.transpose(ncw, (0, 2, 1))), ref.conv1d(x, f1, 2, "SAME"), "conv1d NCW")
    dy = rand(rng, (2, 9, 6), "float32")
    assert_bits_equal(K.conv1d_transpose(dy, f1, (2, 17, 4), 2, "SAME"),
                      ref.conv1d_transpose(dy, f1, (2, 17, 4), 2, "SAME"), "conv1d_transpose")
    x2, dwf, pwf = rand(rng, (2, 8, 9, 3), "float16"), rand(rng, (3, 3, 3, 2), "float16"), rand(rng, (1, 1, 6, 5),
                                                                                              "float16")
    assert_bits_equal(K.depthwise_conv2d(x2, dwf, 2, "SAME", accumulation="float16"),
                      ref.depthwise_conv2d(x2, dwf, 2, "SAME", accumulation="float16"), "depthwise_conv2d")
    assert_bits_equal(K.separable_conv2d(x2, dwf, pwf, 1, "SAME", 2), ref.separable_conv2d(x2, dwf, pwf, 1, "SAME", 2),
                      "separable_conv2d")
    dy3, f3 = rand(rng, (1, 3, 4, 4, 5), "float32"), rand(rng, (2, 3, 3, 2, 5), "float32")
    assert_bits_equal(K.conv3d_transpose(dy3, f3, (1, 6, 8, 8, 2), 2, "SAME"),
                      ref.conv3d_backprop_input(dy3, f3, (1, 6, 8, 8, 2), 2, "SAME"), "conv3d_transpose")


# Padded taps in one fma (docs/numerics.md): each run of padded taps is replaced by one fma with a weight
# summarizing the run's filter values. Operands are tiny so that accumulators sit at +0 or -0 (underflow) when
# a padded run arrives; some runs hold an inf or NaN, some only negative values, the rest random signs.
# Shapes cover the forward kernel with register accumulators (padded rows), with the memory tile (padded rows
# and padded columns at both edges, stride and dilation; the filter is large enough to select it on AVX-512),
# and 3-D (padded depth planes); then the same on the ISAs' wide forward tiles (64 output channels: whole
# 4-vector blocks on AVX2 and AVX-512), whose edge blocks fold a padded column as one fma per pixel.
PADDED_RUN_CASES = [
    ("registers", (2, 6, 7, 20), (3, 3, 20, 24), (1, 1), (1, 1), "SAME"),
    ("wide registers", (2, 5, 9, 20), (3, 3, 20, 64), (1, 1), (1, 1), "SAME"),
    ("wide strided dilated", (1, 7, 13, 20), (3, 3, 20, 64), (2, 1), (1, 2), ((2, 1), (3, 0))),
    ("wide tile", (1, 4, 9, 256), (3, 3, 256, 64), (1, 1), (1, 1), "SAME"),
    ("3-D wide", (1, 3, 4, 7, 20), (3, 3, 3, 20, 64), (1, 1, 1), (1, 1, 1), "SAME"),
    ("tile", (1, 4, 5, 512), (3, 3, 512, 16), (1, 1), (1, 1), "SAME"),
    ("tile strided dilated", (1, 7, 11, 512), (3, 3, 512, 16), (2, 2), (1, 2), ((2, 1), (3, 0))),
    ("3-D", (1, 3, 4, 5, 20), (3, 3, 3, 20, 24), (1, 1, 1), (1, 1, 1), "SAME"),
]
PADDED_RUN_DTYPES = [("float32", None), ("float64", None), ("float16", "float16")]


def _padded_run_operands(rng, x_shape, f_shape, dtype):
    tiny = {"float32": 2.0 ** -140, "float64": 2.0 ** -1000, "float16": 2.0 ** -14}[dtype]
    small = {"float32": 2.0 ** -12, "float64": 2.0 ** -80, "float16": 2.0 ** -12}[dtype]
    x = (rng.standard_normal(x_shape) * tiny).astype(np.dtype(dtype))
    f = (rng.standard_normal(f_shape) * small).astype(np.dtype(dtype))
    # Channels 0, 4, 8, ...: every run of the last row (2-D) or plane (3-D), padded at the far edge, is negative.
    f[-1, ..., 0::4] = -np.abs(f[-1, ..., 0::4])
    last = tuple(k - 1 for k in f_shape[:-2])           # the last tap: padded at the far edges
    f[last + (3, 1)] = np.inf
    f[(0,) * (len(f_shape) - 2) + (2, 2)] = np.nan      # the first tap: padded at the near edges
    f[last + (5, 5)] = -np.inf
    return x, f


# float64 runs the register-tile and 3-D cases only: its reference takes the exact rational route for
# every fma of these subnormal products (the 512-channel "tile" cases took 60-76 s each in CI), and the
# wide tiles run float32 lanes only.
PADDED_RUN_PARAMS = [pytest.param(case, dt, acc, id=f"{case[0]}-{tag}")
                     for case in PADDED_RUN_CASES
                     for (dt, acc), tag in zip(PADDED_RUN_DTYPES, ["f32", "f64", "f16acc"])
                     if not (dt == "float64" and ("wide" in case[0] or case[0].startswith("tile")))]


@pytest.mark.parametrize("case,dtype,accumulation", PADDED_RUN_PARAMS)
def test_padded_runs_in_one_fma(rng, case, dtype, accumulation):
    _, x_shape, f_shape, strides, dilations, padding = case
    conv_k, conv_r = (K.conv3d, ref.conv3d) if len(x_shape) == 5 else (K.conv2d, ref.conv2d)
    x, f = _padded_run_operands(rng, x_shape, f_shape, dtype)
    a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation)
    want = conv_r(x, f, **a)
    u = want.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[want.itemsize])
    assert (u == 0).any() and (u == 1 << (8 * want.itemsize - 1)).any(), "outputs should hold +0 and -0"
    assert np.isnan(want.astype(np.float64)).any()
    # The filter gradient's padded positions (x = +0) fold as one fma per run too, weighted by the run's dy:
    # dy is tiny with an inf and a NaN at a corner and a negative-only channel.
    wgrad_k, wgrad_r = ((K.conv3d_backprop_filter, ref.conv3d_backprop_filter) if len(x_shape) == 5 else
                        (K.conv2d_backprop_filter, ref.conv2d_backprop_filter))
    dy = _padded_run_operands(rng, want.shape, (1,) * (len(x_shape) - 2) + want.shape[-1:] * 2, dtype)[0]
    dy[(0,) * (len(x_shape) - 1) + (1,)] = np.inf
    dy[(-1,) * (len(x_shape) - 1) + (2,)] = np.nan
    dy[..., 0] = -np.abs(dy[..., 0])
    want_dw = wgrad_r(x, dy, f.shape, **a)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            assert_bits_equal(conv_k(x, f, **a), want, f"{isa} forward")
            assert_bits_equal(wgrad_k(x, dy, f.shape, **a), want_dw, f"{isa} filter gradient")


@pytest.mark.parametrize("dtype,accumulation", DTYPES, ids=DTYPE_IDS)
def test_large_pointwise_gemm_path(rng, dtype, accumulation):
    # A 1x1 filter past 512 KiB takes the GEMM-like forward kernel (pixels flattened across rows and images,
    # the fold over input channels in chunks through a memory tile): partial pixel tiles, partial channel
    # blocks, several chunks, bias; every ISA path.
    scale = 0.5 if accumulation == "float16" else 1.0
    x = rand(rng, (2, 3, 5, 520), dtype, scale)
    f = rand(rng, (1, 1, 520, 272), dtype, scale / 8)
    b = rand(rng, (272,), dtype, scale)
    want = ref.conv2d(x, f, bias=b, accumulation=accumulation)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            assert_bits_equal(K.conv2d(x, f, bias=b, accumulation=accumulation), want, f"{isa} forward")


# Filters past 1 MiB (float32) reorder the dense forward and input-gradient units (channel blocks outermost);
# past 512 KiB a channel block's forward folds through a memory tile or takes a narrower tile (AVX-512);
# a 1x1 dx (past 512 KiB too) runs as the forward GEMM of dy with the filter read transposed. Unit order
# never changes bits: every pass against the reference, every ISA path.
LARGE_FILTER_CASES = [
    ("3x3-1.5MiB", (2, 4, 5, 256), (3, 3, 256, 160), 1, "SAME"),
    # a 64-channel block's packed filter past 512 KiB, a 32-channel block's not, rows of 14: AVX-512's
    # forward takes 14x2 blocks in registers there instead of the memory tile
    ("3x3-540KiB-rows-of-14", (1, 3, 14, 240), (3, 3, 240, 64), 1, "SAME"),
    ("1x1-566KiB", (2, 3, 5, 520), (1, 1, 520, 272), 1, "VALID"),
    ("1x1-s2-566KiB", (1, 5, 6, 520), (1, 1, 520, 272), 2, "SAME"),
]


@pytest.mark.parametrize("case", LARGE_FILTER_CASES, ids=[c[0] for c in LARGE_FILTER_CASES])
def test_large_filters_every_pass(rng, case):
    _, x_shape, f_shape, s, padding = case
    x = rand(rng, x_shape, "float32", 1.0)
    f = rand(rng, f_shape, "float32", 1.0 / 16)
    want_y = ref.conv2d(x, f, s, padding)
    dy = rand(rng, want_y.shape, "float32", 1.0)
    want_dx = ref.conv2d_backprop_input(dy, f, x.shape, s, padding)
    want_dw = ref.conv2d_backprop_filter(x, dy, f.shape, s, padding)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            assert_bits_equal(K.conv2d(x, f, s, padding), want_y, f"{isa} forward")
            assert_bits_equal(K.conv2d_backprop_input(dy, f, x.shape, s, padding), want_dx, f"{isa} dx")
            assert_bits_equal(K.conv2d_backprop_filter(x, dy, f.shape, s, padding), want_dw, f"{isa} dw")


# Filter gradients whose chunks' x and dy rows pass 1 MiB fold in sub-runs of whole rows on the SIMD paths
# (WgradKernels::sub_runs), padded rows and columns included (3x3, stride 1, SAME): 512->512 on 25x44, two
# chunks of 550 positions (2.2 MB of rows), three sub-runs each, x packed (8+ output-channel blocks);
# 1024->96 on 36x40, five chunks of 288 (1.3 MB), two sub-runs each, x read in place, also under float16
# accumulation (the accumulators kept between sub-runs hold binary16 values). The reference takes minutes
# here, so the oracle is the scalar path (whole-chunk tiles), which every other test holds to the reference.
SUB_RUN_CASES = [
    ("512-25x44-packed", (1, 25, 44, 512), (3, 3, 512, 512), "float32", None),
    ("1024-96-36x40", (1, 36, 40, 1024), (3, 3, 1024, 96), "float32", None),
    ("1024-96-36x40-native-float16", (1, 36, 40, 1024), (3, 3, 1024, 96), "float16", "float16"),  # scalar: ~8 s
]


@pytest.mark.parametrize("case", SUB_RUN_CASES, ids=[c[0] for c in SUB_RUN_CASES])
def test_filter_gradient_sub_runs(rng, case):
    _, x_shape, f_shape, dtype, accumulation = case
    simd = [i for i in _isas() if i != "scalar"]
    if not simd:
        pytest.skip("no SIMD path on this CPU")
    x = rand(rng, x_shape, dtype, 1.0)
    dy = rand(rng, x_shape[:3] + f_shape[-1:], dtype, 1.0)  # stride 1, SAME: x's pixels
    args = (x, dy, f_shape, 1, "SAME")
    with on_cpu_isa(K, "scalar"):
        want = K.conv2d_backprop_filter(*args, accumulation=accumulation)
    # One thread: running sums (one share per chunk walk); 16: chunk parts, units split inside a filter row.
    for isa in simd:
        with on_cpu_isa(K, isa):
            for threads in (1, 16):
                got = K.conv2d_backprop_filter(*args, accumulation=accumulation, threads=threads)
                assert_bits_equal(got, want, f"{isa} dw, {threads} threads")


# 1x1 layers whose outputs fill whole 4-vector blocks take AVX-512's wide GEMM tile (7 pixels x 4 vectors),
# forward (with bias) and input gradient: folds of 192 and 320 in chunks of 128 through the memory tile,
# of 128 in registers; 30 pixels = 4 blocks of 7 + 2; every ISA path.
WIDE_GEMM_CASES = [
    ("192->128", (2, 3, 5, 192), (1, 1, 192, 128)),
    ("128->320", (1, 7, 9, 128), (1, 1, 128, 320)),
]


@pytest.mark.parametrize("case", WIDE_GEMM_CASES, ids=[c[0] for c in WIDE_GEMM_CASES])
def test_wide_gemm_tiles(rng, case):
    _, x_shape, f_shape = case
    x = rand(rng, x_shape, "float32", 1.0)
    f = rand(rng, f_shape, "float32", 1.0 / 16)
    b = rand(rng, f_shape[-1:], "float32", 1.0)
    want_y = ref.conv2d(x, f, bias=b)
    dy = rand(rng, want_y.shape, "float32", 1.0)
    want_dx = ref.conv2d_backprop_input(dy, f, x.shape)
    for isa in _isas():
        with on_cpu_isa(K, isa):
            assert_bits_equal(K.conv2d(x, f, bias=b), want_y, f"{isa} forward")
            assert_bits_equal(K.conv2d_backprop_input(dy, f, x.shape), want_dx, f"{isa} dx")


def test_packed_filter_gradient_3d(rng):
    # 3-D filter gradients run as 2-D problems over a table of x rows (depth as rows); with 8+ output-channel
    # blocks (AVX2: 128+ channels, AVX-512: 449+) their x is packed per tile through that table.
    x = rand(rng, (2, 4, 5, 6, 7), "float32", 1.0)
    dy_shape = (2, 4, 5, 6, 460)
    dy = rand(rng, dy_shape, "float32", 1.0)
    f_shape = (3, 3, 3, 7, 460)
    want = ref.conv3d_backprop_filter(x, dy, f_shape, 1, "SAME")
    for isa in _isas():
        with on_cpu_isa(K, isa):
            assert_bits_equal(K.conv3d_backprop_filter(x, dy, f_shape, 1, "SAME"), want, f"{isa} dw")


# Rows long enough that AVX2's gathered forward patches (Base::kPatches) come in several segments, each
# swept by every channel block in turn (fprop_dense's kSegmentBytes: 37 three-pixel blocks of a
# 7x7x3 float32 stem's patches), the segments ending mid-row and past its padded edges.
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_patch_segments(rng, dtype):
    for x_shape, f_shape, s, padding in (((1, 3, 260, 3), (7, 7, 3, 40), 1, "SAME"),
                                         ((1, 7, 701, 2), (5, 5, 2, 24), 2, ((1, 2), (3, 1)))):
        x, f = rand(rng, x_shape, dtype), rand(rng, f_shape, dtype)
        want = ref.conv2d(x, f, s, padding)
        for isa in _isas():
            with on_cpu_isa(K, isa):
                assert_bits_equal(K.conv2d(x, f, s, padding), want, f"{isa} {x_shape} {f_shape}")


# Rows of every width up to 14 (each remainder mod 6, rows narrower than a
# block): where 6-pixel blocks run (AVX2), narrower ones end each row or stride
# phase (RowBlocks; Base::tail_blocks); elsewhere one block runs past the row.
# The cases with (kw, i) runs under 48 values also take AVX2's gathered forward
# patches (Base::kPatches), padded rows and columns included.
TAIL_CASES = (  # name, f_shape (KH, KW, Cg, Co), strides, dilations, padding, groups
    ("3x3-same", (3, 3, 16, 20), 1, 1, "SAME", 1),
    ("1x3-s2-valid", (1, 3, 8, 16), 2, 1, "VALID", 1),
    ("3x2-d2-groups", (3, 2, 6, 24), 1, 2, "SAME", 2),
    ("2x3-s3-explicit", (2, 3, 5, 17), 3, 1, ((1, 0), (2, 1)), 1),
)


@pytest.mark.parametrize("isa", _isas())
def test_row_tail_blocks(rng, isa):
    with on_cpu_isa(K, isa):
        for name, f_shape, s, d, padding, groups in TAIL_CASES:
            for w in range(1, 15):
                if padding == "VALID" and w < (f_shape[1] - 1) * d + 1:
                    continue
                x = rand(rng, (2, 4, w, f_shape[2] * groups), "float32")
                f = rand(rng, f_shape, "float32")
                a = dict(strides=s, padding=padding, dilations=d)
                y = ref.conv2d(x, f, **a)
                dy = rand(rng, y.shape, "float32")
                assert_bits_equal(K.conv2d(x, f, **a), y, f"{isa} {name} width {w} forward")
                assert_bits_equal(K.conv2d_backprop_input(dy, f, x.shape, **a),
                                  ref.conv2d_backprop_input(dy, f, x.shape, **a), f"{isa} {name} width {w} dx")
        for w in (2, 7, 8, 13):  # 3-D: the same blocks, depth as rows (forward) and depth-aware (dx)
            for s in (1, 2):
                x = rand(rng, (2, 3, 4, w, 8), "float32")
                f = rand(rng, (3, 3, 3, 8, 16), "float32")
                y = ref.conv3d(x, f, s, "SAME")
                dy = rand(rng, y.shape, "float32")
                assert_bits_equal(K.conv3d(x, f, s, "SAME"), y, f"{isa} 3-D width {w} stride {s} forward")
                assert_bits_equal(K.conv3d_backprop_input(dy, f, x.shape, s, "SAME"),
                                  ref.conv3d_backprop_input(dy, f, x.shape, s, "SAME"), f"{isa} 3-D width {w} dx")

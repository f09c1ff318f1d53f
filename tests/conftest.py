import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# TensorFlow's x86 builds turn their oneDNN kernels on by default only on some CPUs (with AVX-512 VNNI, BF16
# or AMX); elsewhere (an AVX2-only AMD EPYC, say) its own kernels run, which reject some calls the oneDNN path
# accepts (unequal depthwise strides, NCHW conv1d) and give other values in some 3-D cases. The tests that
# hold detconv to tf.nn's accepted calls and to the stock Keras layers' values mean the oneDNN path, so it is
# on everywhere; TensorFlow's own kernels are asked for by name where a test compares with them
# (test_tfnn_parity's child processes set it to 0).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import numpy as np
import pytest


def bits(a):
    """The raw bits of a float array, for exact comparison (NaN payloads included)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.view({8: np.uint64, 4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


def assert_bits_equal(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    gb, wb = bits(got), bits(want)
    if not np.array_equal(gb, wb):
        bad = np.argwhere(gb != wb)
        i = tuple(bad[0])
        raise AssertionError(
            f"{what}: {len(bad)} of {gb.size} values differ; first at {i}: "
            f"got {got[i]!r} (0x{int(gb[i]):x}), want {want[i]!r} (0x{int(wb[i]):x})")


def pytest_collection_modifyitems(items):
    # The tests that compile for minutes first: under `--dist worksteal` (the README's command) the other
    # workers then take the short tests queued behind them, instead of one worker starting a long test
    # when the rest are nearly done (the SASS audit, 400 s in CI, sat at 85% of the collection order).
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def rng(request):
    # Per-test deterministic seed from the test id: reproducible failures.
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def _devices():
    try:
        import tensorflow as tf
    except ImportError:
        return ["CPU"]
    return ["CPU"] + (["GPU"] if tf.config.list_physical_devices("GPU") else [])


@pytest.fixture(params=["CPU", "GPU"])
def device(request):
    """Runs a test on every device present; GPU cases skip without a GPU."""
    if request.param not in _devices():
        pytest.skip(f"no {request.param} present")
    import tensorflow as tf

    with tf.device(f"/{request.param}:0"):
        yield request.param

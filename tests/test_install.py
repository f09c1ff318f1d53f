"""What a user sees of the build: the version line, `detconv info`, the TensorFlow-minor guard."""

import subprocess
import sys

import pytest

from detconv._loader import build_info, child_python_kwargs, tf_version_mismatch


def test_build_info_records_tensorflow_and_cuda():
    info = build_info()
    assert info["tensorflow"].startswith("2."), info
    assert isinstance(info["cuda"], bool) and isinstance(info["cuda_archs"], list)
    assert bool(info["cuda_archs"]) == info["cuda"]


def test_tensorflow_minor_guard():
    assert tf_version_mismatch("2.21.0", "2.21.3") is None
    assert tf_version_mismatch("", "2.22.0") is None  # unknown build: nothing to compare
    msg = tf_version_mismatch("2.21.0", "2.22.1")
    assert "2.21.0" in msg and "2.22.1" in msg and "pip install" in msg


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "detconv", *args], capture_output=True, text=True, timeout=300,
                          **child_python_kwargs(log_level="3"))


def test_version_line():
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    import detconv

    assert line.startswith(f"detconv {detconv.__version__} (order version {detconv.ORDER_VERSION};"), line
    assert f"built for TensorFlow {build_info()['tensorflow']}" in line


@pytest.mark.timeout(300)
def test_info_lists_versions_isa_and_cuda():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    for key in ("TensorFlow built for", "TensorFlow running", "CPU paths", "CUDA kernels", "CUDA device visible"):
        assert key in r.stdout, r.stdout


def test_order_version_has_one_home():
    """detconv.ORDER_VERSION is the one definition; the compiled modules (order.h's kOrderVersion) and the
    Python modules that re-export it agree with it."""
    import detconv
    from detconv import _kernels, kernels, ops, reference

    assert reference.ORDER_VERSION is detconv.ORDER_VERSION and kernels.ORDER_VERSION is detconv.ORDER_VERSION
    assert _kernels.ORDER_VERSION == detconv.ORDER_VERSION
    assert ops.compiled_order_version() == detconv.ORDER_VERSION

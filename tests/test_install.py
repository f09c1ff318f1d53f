"""What a user sees of the build: the version line, `detconv info`, the TensorFlow-minor guard."""

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detconv._loader import build_info, child_python_kwargs, tf_version_mismatch


def test_build_info_records_tensorflow_and_cuda():
    info = build_info()
    assert info["tensorflow"].startswith("2."), info
    assert isinstance(info["cuda"], bool) and isinstance(info["cuda_archs"], list)
    assert bool(info["cuda_archs"]) == info["cuda"]


def _cpu_runs():
    """The CPU paths this x86-64 Linux machine runs, from /proc/cpuinfo (apart from csrc/cpu/host_isa.h's test)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 only")
    try:
        line = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    flags = set(line.split(":", 1)[1].split())
    return {"scalar": True, "avx2": {"avx2", "fma", "f16c"} <= flags,
            "avx512": {"avx512f", "avx512vl", "avx512bw", "avx512dq", "f16c", "fma"} <= flags}


def test_cpu_paths_offered_are_those_built_that_run_here():
    """The op library and the kernel module offer exactly the CPU paths the build holds (_build_info.json,
    DETCONV_CPU_ISAS) that this CPU runs; scalar is always built."""
    import detconv
    from detconv import _kernels

    runs, built = _cpu_runs(), build_info()["cpu_isas"]
    assert "scalar" in built, built
    want = [i for i in ("scalar", "avx2", "avx512") if i in built and runs[i]]
    assert detconv.cpu_isa(supported=True) == want
    assert [i for i in ("scalar", "avx2", "avx512") if _kernels.cpu_isa_supported(i)] == want


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize("request_", ["AUTO", "ALL", "scalar", "avx512", "avx2,scalar", "sse4"])
def test_cpu_isas_choice(tmp_path, request_):
    """cmake/cpu_isas.cmake (configure only): AUTO is scalar plus the best path this machine runs; a list
    always gains scalar; an unknown path fails the configure, naming the variable."""
    runs = _cpu_runs()
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    r = subprocess.run(["cmake", "-S", str(root), "-B", str(tmp_path / "b"), "-DDETCONV_WITH_TF=OFF",
                        "-DDETCONV_WITH_PYBIND=OFF", "-DDETCONV_CUDA=OFF", f"-DDETCONV_CPU_ISAS={request_}",
                        f"-DDETCONV_OUTPUT_DIR={out}"], capture_output=True, text=True, timeout=300)
    if request_ == "sse4":
        assert r.returncode != 0 and "DETCONV_CPU_ISAS" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    best = "avx512" if runs["avx512"] else "avx2" if runs["avx2"] else "scalar"
    want = {"AUTO": {"scalar", best}, "ALL": {"scalar", "avx2", "avx512"}, "scalar": {"scalar"},
            "avx512": {"avx512", "scalar"}, "avx2,scalar": {"avx2", "scalar"}}[request_]
    assert set(json.loads((out / "_build_info.json").read_text())["cpu_isas"]) == want


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
    for key in ("TensorFlow built for", "TensorFlow running", "CPU paths built", "CPU paths here", "CUDA kernels",
                "CUDA device visible"):
        assert key in r.stdout, r.stdout


def test_order_version_has_one_home():
    """detconv.ORDER_VERSION is the one definition; the compiled modules (order.h's kOrderVersion) and the
    Python modules that re-export it agree with it."""
    import detconv
    from detconv import _kernels, kernels, ops, reference

    assert reference.ORDER_VERSION is detconv.ORDER_VERSION and kernels.ORDER_VERSION is detconv.ORDER_VERSION
    assert _kernels.ORDER_VERSION == detconv.ORDER_VERSION
    assert ops.compiled_order_version() == detconv.ORDER_VERSION

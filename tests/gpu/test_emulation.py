"""The CUDA kernels' tiling and indexing, checked on the CPU.

tests/gpu/emu/run_emu.sh compiles cuda/*.cu as host C++ under a cooperative
thread emulator (tests/gpu/emu/include) and compares every output bit with a
transcription of the contract's loop nests. This needs only g++, so it runs
in CI on machines without a GPU; device arithmetic is left to the real GPU
tests next to this file. Set DETCONV_SKIP_EMU=1 to skip it.
"""

import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="no host C++ compiler")
@pytest.mark.skipif(os.environ.get("DETCONV_SKIP_EMU") == "1", reason="DETCONV_SKIP_EMU=1")
def test_cuda_kernels_under_emulation(tmp_path):
    env = dict(os.environ, DETCONV_EMU_BUILD=str(tmp_path))
    env.pop("DETCONV_CUDA_TILE", None)
    r = subprocess.run(["bash", os.path.join(HERE, "emu", "run_emu.sh"), "120", "5"], env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"emulated CUDA kernels differ from the contract:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert "0 mismatches" in r.stdout
    # every tile shape on every problem (DETCONV_CUDA_TILE forces one)
    for tile in ("0", "1", "2"):
        r = subprocess.run([str(tmp_path / "emu_test"), "60", "6" + tile], env=dict(env, DETCONV_CUDA_TILE=tile),
                           capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0 and "0 mismatches" in r.stdout, f"tile shape {tile}:\n{r.stdout[-4000:]}"

"""The CUDA kernels' tiling and indexing, checked on the CPU.

tests/gpu/emu/run_emu.sh compiles cuda/*.cu as host C++ under a cooperative
thread emulator (tests/gpu/emu/include) and compares every output bit with a
transcription of the contract's loop nests (order.h), on random problems of
every kind the kernels meet: all dtypes and both float16 accumulations,
strides, dilations, groups, depthwise, paddings, NHWC/NCHW, three spatial
dimensions, misaligned operands (scalar loads), tails that are no multiple of
any tile, and the 64-bit index kernels (DETCONV_CUDA_INDEX64=1). The emulator varies the order in which a block's threads run
between barriers, so a missing barrier shows as a mismatch; one run is built
with AddressSanitizer and UBSan (global out-of-bounds access, misaligned
vector access, index overflow). Needs only g++, so it runs in CI on machines
without a GPU; device arithmetic is left to the GPU tests next to this file.
Set DETCONV_SKIP_EMU=1 to skip it.
"""

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "emu", "run_emu.sh")

from gpu_helpers import cuda_tile_configs

# Tile configurations a launcher chooses from (conv: 7 GEMM tiles + direct;
# wgrad: 6 + its direct kernel); DETCONV_CUDA_TILE=k forces configuration k.
CONFIGS = cuda_tile_configs()
CASES_AUTO = int(os.environ.get("DETCONV_EMU_CASES", "1200"))
# Per forced configuration, and for the sanitized build (slower per case). The emulator's
# cost is one fiber switch per thread per barrier; since the switch stopped being
# swapcontext (two system calls) the compiles weigh as much as the cases: about 210 of the
# test's 430 CPU-seconds (run_emu.sh: the plain build at -O1, the sanitized one at -O0).
CASES_FORCED = CASES_AUTO // 3
CASES_SANITIZED = CASES_AUTO // 6

needs_cxx = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="no host C++ compiler")
skip_emu = pytest.mark.skipif(os.environ.get("DETCONV_SKIP_EMU") == "1", reason="DETCONV_SKIP_EMU=1")


def _check(r, what):
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{what}: emulated CUDA kernels differ from the contract:\n{out[-4000:]}"
    m = re.search(r"emu_test: (\d+) problems x 4 computations, (\d+) mismatches", r.stdout)
    assert m and m.group(2) == "0", f"{what}:\n{out[-4000:]}"
    return int(m.group(1))


@pytest.mark.long
@needs_cxx
@skip_emu
def test_cuda_kernels_under_emulation(tmp_path):
    env = dict(os.environ, DETCONV_EMU_BUILD=str(tmp_path))
    env.pop("DETCONV_CUDA_TILE", None)
    # builds both binaries (plain and sanitized) and runs a first batch with each
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(subprocess.run, ["bash", RUN, str(CASES_AUTO // 2), "5"], env=env,
                            capture_output=True, text=True, timeout=1800)
        asan = pool.submit(subprocess.run, ["bash", RUN, str(CASES_SANITIZED), "17"],
                           env=dict(env, DETCONV_EMU_SANITIZE="1"), capture_output=True, text=True, timeout=1800)
        total = _check(plain.result(), "auto tiles") + _check(asan.result(), "sanitized build")

    # the rest of the auto-chosen batch, and every configuration forced on every problem kind
    runs = [({}, CASES_AUTO - CASES_AUTO // 2, "6")]
    runs += [({"DETCONV_CUDA_TILE": str(t)}, CASES_FORCED, str(60 + t)) for t in range(CONFIGS)]
    runs += [({"DETCONV_CUDA_INDEX64": "1"}, CASES_FORCED // 2, "70")]  # the 64-bit index kernels

    def one(spec):
        extra, cases, seed = spec
        r = subprocess.run([str(tmp_path / "emu_test"), str(cases), seed], env=dict(env, **extra),
                           capture_output=True, text=True, timeout=1800)
        return _check(r, f"configuration {extra or 'auto'}")

    with ThreadPoolExecutor(2) as pool:
        total += sum(pool.map(one, runs))
    print(f"emulated problems: {total}, 0 mismatches")
    assert total >= CASES_AUTO

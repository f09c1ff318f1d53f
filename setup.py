"""Builds detconv's native parts with CMake.

One CMake run builds the CPU (and, when nvcc is found, CUDA) kernels, the
TensorFlow op library detconv/_detconv_ops.so and the framework-free module
detconv._kernels. Environment knobs: DETCONV_CUDA=ON|OFF|AUTO,
DETCONV_CUDA_ARCHS="80;90", DETCONV_CPU_ISAS=AUTO|ALL|"scalar;avx2",
DETCONV_BUILD_JOBS=N, CMAKE_ARGS="...".
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        # Everything comes out of one configure + build.
        ext = self.extensions[0]
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        out_dir.mkdir(parents=True, exist_ok=True)
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        # Each configure starts from a fresh cache (the objects stay for the build to reuse): pip's isolated
        # build environment, whose ninja and pybind11 a cache names, is gone after its install, so a second
        # `pip install .` in one checkout (the README's install + demo, then install + tests) failed on it.
        (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
        args = [
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DDETCONV_OUTPUT_DIR={out_dir}",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DDETCONV_CUDA={os.environ.get('DETCONV_CUDA', 'AUTO')}",
            f"-DDETCONV_CPU_ISAS={os.environ.get('DETCONV_CPU_ISAS', 'AUTO')}",
        ]
        if os.environ.get("DETCONV_CUDA_ARCHS"):
            args.append(f"-DDETCONV_CUDA_ARCHS={os.environ['DETCONV_CUDA_ARCHS']}")
        try:
            import ninja  # noqa: F401

            args.append("-GNinja")
        except ImportError:
            pass
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args], check=True)
        jobs = os.environ.get("DETCONV_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs], check=True)
        if self.inplace:
            for so in [*out_dir.glob("*.so"), out_dir / "_build_info.json"]:
                target = ROOT / "detconv" / so.name
                if so.exists() and so.resolve() != target.resolve():
                    target.write_bytes(so.read_bytes())


setup(
    ext_modules=[CMakeExtension("detconv._kernels")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)

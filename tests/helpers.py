"""Shared helpers for the tests: random data, layouts, ISA switching, scripts/ as modules."""

import contextlib
import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

NP_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}


def rand(rng, shape, dtype, scale=1.0):
    """Random non-integer values exactly representable in dtype."""
    return (rng.standard_normal(shape) * scale).astype(NP_DTYPES[dtype])


def tf_padding(padding, data_format="NHWC"):
    """reference padding form -> tf.nn form."""
    if isinstance(padding, str):
        return padding
    (pt, pb), (pl, pr) = padding
    if data_format == "NHWC":
        return [[0, 0], [pt, pb], [pl, pr], [0, 0]]
    return [[0, 0], [0, 0], [pt, pb], [pl, pr]]


def to_nchw(a):
    return np.ascontiguousarray(np.transpose(a, (0, 3, 1, 2)))


def to_nhwc(a):
    return np.ascontiguousarray(np.transpose(a, (0, 2, 3, 1)))


@contextlib.contextmanager
def on_cpu_isa(mod, isa):
    """Runs the block on one CPU path of `mod` (detconv, or detconv.kernels without TensorFlow), then
    restores the path before."""
    before = mod.cpu_isa()
    mod.set_cpu_isa(isa)
    try:
        assert mod.cpu_isa() == isa, f"could not force the {isa} path"
        yield
    finally:
        mod.set_cpu_isa(before)


def load_script(filename, module_name):
    """scripts/<filename> imported as a module (the scripts are not a package)."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = Path(__file__).resolve().parent.parent / "scripts" / filename
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod  # dataclasses look the module up while it loads
    spec.loader.exec_module(mod)
    return mod

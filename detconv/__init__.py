"""detconv: deterministic conv2d for TensorFlow, the same bits on every device.

Every output is computed in the one summation order of CONTRACT.md (order
version ``ORDER_VERSION``) with IEEE fused multiply-adds. The TensorFlow parts
(``conv2d`` and friends, ``detconv.keras``) load lazily, so ``detconv.reference``
(NumPy) and ``detconv.kernels`` (raw kernels on NumPy/CuPy/PyTorch arrays)
import without TensorFlow.
"""

import importlib
import sys

ORDER_VERSION = 1
__version__ = "0.1.0"

_TF_API = {
    "conv2d": "detconv.ops",
    "conv1d": "detconv.ops",
    "depthwise_conv2d": "detconv.ops",
    "conv2d_transpose": "detconv.ops",
    "conv2d_backprop_input": "detconv.ops",
    "conv2d_backprop_filter": "detconv.ops",
    "bias_grad": "detconv.ops",
    "set_cpu_isa": "detconv.ops",
    "cpu_isa": "detconv.ops",
    "cpu_fma_peak_gflops": "detconv.ops",
}
_SUBMODULES = ("ops", "keras", "reference", "kernels", "demo")

__all__ = ["ORDER_VERSION", *_TF_API, *_SUBMODULES]


def __getattr__(name):
    if name in _TF_API:
        return getattr(importlib.import_module(_TF_API[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"detconv.{name}")
    raise AttributeError(f"module 'detconv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


# With TensorFlow already in the process (the usual case), register the ops at
# import: `import detconv` is then enough to load a SavedModel that uses them.
if sys.modules.get("tensorflow") is not None:
    try:
        importlib.import_module("detconv.ops")
    except ImportError:  # library not built (source checkout): reference/kernels still import; ops raise on use
        pass

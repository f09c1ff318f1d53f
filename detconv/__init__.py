"""detconv: deterministic conv2d for TensorFlow, the same bits on every device.

Every output is computed in the one summation order of docs/contract.md (order
version ``ORDER_VERSION``) with IEEE fused multiply-adds. The TensorFlow parts
(``conv2d`` and friends, ``detconv.keras``) load lazily, so ``detconv.reference``
(NumPy) and ``detconv.kernels`` (raw kernels on NumPy/CuPy/PyTorch arrays)
import without TensorFlow.
"""

import importlib
import importlib.util
import sys

ORDER_VERSION = 1  # the one home of the order version (docs/contract.md); order.h's kOrderVersion must agree
__version__ = "0.1.0"

_TF_API = {
    "conv2d": "detconv.ops",
    "conv1d": "detconv.ops",
    "depthwise_conv2d": "detconv.ops",
    "conv2d_transpose": "detconv.ops",
    "conv2d_backprop_input": "detconv.ops",
    "conv2d_backprop_filter": "detconv.ops",
    "bias_grad": "detconv.ops",
    "conv1d_transpose": "detconv.ops",
    "separable_conv2d": "detconv.ops",
    "depthwise_conv2d_backprop_input": "detconv.ops",
    "depthwise_conv2d_backprop_filter": "detconv.ops",
    "convolution": "detconv.ops",
    "conv_transpose": "detconv.ops",
    "atrous_conv2d": "detconv.ops",
    "atrous_conv2d_transpose": "detconv.ops",
    "conv3d": "detconv.ops",
    "conv3d_transpose": "detconv.ops",
    "conv3d_backprop_input": "detconv.ops",
    "conv3d_backprop_filter": "detconv.ops",
    "set_cpu_isa": "detconv.ops",
    "cpu_isa": "detconv.ops",
    "cpu_fma_peak_gflops": "detconv.ops",
    "InvalidArgumentValue": "detconv.ops",
    "InvalidArgumentType": "detconv.ops",
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


# `import detconv` is enough to load a SavedModel or a .keras file that uses
# detconv, whatever the import order: with TensorFlow (Keras) already in the
# process the ops (layers) register now; otherwise right after TensorFlow
# (Keras) finishes importing.
_AFTER_IMPORT = {"tensorflow": "detconv.ops", "keras": "detconv.keras"}


def _register(module_name):
    try:
        importlib.import_module(module_name)
    except ImportError:  # library not built (source checkout): reference/kernels still import; ops raise on use
        pass


class _RegisterAfterImport:
    """A meta-path finder that runs _register(...) once its framework module has been executed."""

    def find_spec(self, name, path=None, target=None):
        if name not in _AFTER_IMPORT or name in _pending_done:
            return None
        _pending_done.add(name)
        spec = importlib.util.find_spec(name)  # the real spec (this finder skips names it has handled)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module, _exec=loader_exec, _name=name):
            _exec(module)
            _register(_AFTER_IMPORT[_name])

        spec.loader.exec_module = exec_module
        return spec


_pending_done = set()
for _framework, _module in _AFTER_IMPORT.items():
    if sys.modules.get(_framework) is not None:
        _pending_done.add(_framework)
        _register(_module)
if len(_pending_done) < len(_AFTER_IMPORT):
    sys.meta_path.insert(0, _RegisterAfterImport())

"""Helpers for the GPU tests: one interface over CuPy and PyTorch.

The GPU tests need no TensorFlow and no ml_dtypes: the CPU result each GPU
result is compared with comes from the CPU kernels through detconv.kernels
(on NumPy arrays for CuPy, on PyTorch CPU tensors for PyTorch - which is how
bfloat16 gets tested without ml_dtypes). The CPU kernels themselves are
checked against detconv.reference in tests/test_kernels.py.
"""

import os
import re

import numpy as np
import pytest

try:
    from detconv import kernels as K

    HAVE_KERNELS = True
except ImportError:  # pragma: no cover
    HAVE_KERNELS = False

_CUDA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cuda")


def cuda_tile_configs():
    """How many configurations the busiest CUDA launcher chooses from (kConvConfigs,
    kWgradConfigs, kCombineConfigs: their one home is the launchers' headers).
    DETCONV_CUDA_TILE=k forces configuration k mod that launcher's own count, so
    0..this-1 reach every one."""
    counts = []
    for header, name in (("conv_launch.cuh", "kConvConfigs"), ("wgrad_parts.cuh", "kWgradConfigs"),
                         ("reduce.cuh", "kCombineConfigs")):
        with open(os.path.join(_CUDA, header)) as fh:
            m = re.search(rf"constexpr int {name} = (\d+);", fh.read())
        assert m, f"{name} not found in cuda/{header}"
        counts.append(int(m.group(1)))
    return max(counts)


NAMES = ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "bias_grad")
_INT_OF_SIZE = {2: "int16", 4: "int32", 8: "int64"}


def _cupy():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:
        return None


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


class CupyLib:
    name = "cupy"
    dtypes = ("float32", "float64", "float16")  # CuPy has no bfloat16

    def __init__(self, cp):
        self.cp = cp

    def from_numpy(self, a):
        return self.cp.asarray(a)

    def cpu(self, a):
        """GPU array -> CPU operand of the same kind for detconv.kernels (NumPy)."""
        return self.cp.asnumpy(a)

    def rand(self, rng, shape, dtype, scale=1.0):
        """(GPU array, CPU array) with the same random non-integer values."""
        h = (rng.standard_normal(shape) * scale).astype(dtype)
        return self.cp.asarray(h), h

    def bits(self, a):
        """Raw bits as a NumPy integer array (GPU or CPU input)."""
        if not isinstance(a, np.ndarray):
            a = self.cp.asnumpy(a)
        a = np.ascontiguousarray(a)
        return a.view(_INT_OF_SIZE[a.dtype.itemsize])

    def synchronize(self):
        self.cp.cuda.get_current_stream().synchronize()

    def new_stream(self):
        """A non-blocking side stream that first waits for the work already queued on
        the current stream (the host-to-device copies of the operands): a
        non-blocking stream does not synchronize with the legacy default stream."""
        cuda = self.cp.cuda
        cur = cuda.get_current_stream()
        side = cuda.Stream(non_blocking=True)
        if hasattr(cuda, "Event") and hasattr(side, "wait_event"):
            ev = cuda.Event(disable_timing=True)
            ev.record(cur)
            side.wait_event(ev)
        else:  # e.g. tests/gpu/emu/fakecupy, which has no events: wait on the host instead
            cur.synchronize()
        return side

    def stream_ctx(self, s):
        return s

    def slice_batch(self, a, lo, hi):
        return a[lo:hi]

    def concat(self, arrays, axis):
        return self.cp.concatenate(arrays, axis=axis)


class TorchLib:
    name = "torch"
    dtypes = ("float32", "float64", "float16", "bfloat16")

    def __init__(self, torch):
        self.torch = torch
        self.dev = torch.device("cuda")

    def _dt(self, name):
        return getattr(self.torch, name)

    def from_numpy(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.dev)

    def cpu(self, a):
        return a.cpu()

    def rand(self, rng, shape, dtype, scale=1.0):
        # Values drawn in float32 then rounded once to dtype on the CPU (torch's
        # rounding is nearest-even), so both copies hold the same bits.
        v = rng.standard_normal(shape) * scale
        if dtype != "float64":
            v = v.astype(np.float32)
        h = self.torch.from_numpy(v).to(self._dt(dtype))
        return h.to(self.dev), h

    def bits(self, a):
        a = a.detach().cpu().contiguous()
        return a.view(getattr(self.torch, _INT_OF_SIZE[a.element_size()])).numpy()

    def synchronize(self):
        self.torch.cuda.current_stream().synchronize()

    def new_stream(self):
        """A side stream ordered after the work already queued on the current stream
        (the operands' host-to-device copies); PyTorch's pool streams are non-blocking."""
        s = self.torch.cuda.Stream()
        s.wait_stream(self.torch.cuda.current_stream())
        return s

    def stream_ctx(self, s):
        return self.torch.cuda.stream(s)

    def slice_batch(self, a, lo, hi):
        return a[lo:hi]

    def concat(self, arrays, axis):
        return self.torch.cat(arrays, dim=axis)


def libraries():
    """The GPU array libraries present, as pytest params (skipped when absent)."""
    libs = []
    ok = HAVE_KERNELS and K.cuda_available()
    cp = _cupy() if ok else None
    th = _torch() if ok else None
    libs.append(pytest.param(CupyLib(cp) if cp else None, id="cupy",
                             marks=pytest.mark.skipif(cp is None, reason="no CuPy with a CUDA device / no CUDA kernels")))
    libs.append(pytest.param(TorchLib(th) if th else None, id="torch",
                             marks=pytest.mark.skipif(th is None, reason="no PyTorch CUDA / no CUDA kernels")))
    return libs


def assert_same_bits(lib, got, want, what):
    g, w = lib.bits(got), lib.bits(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    if not np.array_equal(g, w):
        bad = np.argwhere(g != w)
        i = tuple(bad[0])
        raise AssertionError(f"{what}: {len(bad)} of {g.size} values differ; first at {i}: "
                             f"0x{int(g[i]) & 0xFFFFFFFFFFFFFFFF:x} != 0x{int(w[i]) & 0xFFFFFFFFFFFFFFFF:x}")


def nhwc_to(shape, data_format):
    n, h, w, c = shape
    return (n, h, w, c) if data_format == "NHWC" else (n, c, h, w)


def run_all(x, f, b, dy, strides, dilations, padding, accumulation, data_format):
    """All four computations through detconv.kernels; x, dy in data_format."""
    a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=accumulation,
             data_format=data_format)
    return [K.conv2d(x, f, bias=b, **a),
            K.conv2d_backprop_input(dy, f, tuple(x.shape), **a),
            K.conv2d_backprop_filter(x, dy, tuple(f.shape), **a),
            K.bias_grad(dy, accumulation=accumulation, data_format=data_format)]


def out_shape(x_nhwc, f_shape, strides, dilations, padding):
    """NHWC output shape (the contract's size rule)."""
    n, h, w, _ = x_nhwc
    kh, kw, _, co = f_shape
    sh, sw = (strides, strides) if isinstance(strides, int) else strides
    dh, dw = (dilations, dilations) if isinstance(dilations, int) else dilations
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":
        return n, -(-h // sh), -(-w // sw), co
    if padding == "VALID":
        pt = pb = pl = pr = 0
    else:
        (pt, pb), (pl, pr) = padding
    return n, (h + pt + pb - ekh) // sh + 1, (w + pl + pr - ekw) // sw + 1, co

"""Per-call host (Python) overhead of detconv.kernels on tiny problems.

For each call the kernel's own work is negligible (a few hundred multiply-adds), so the time is what the
Python wrapper costs: argument checks, array preparation, the native Problem, output allocation. Each row
prints the median microseconds per call of the public function ("total") and of the bare native entry point
on a prebuilt Problem with preallocated outputs ("native"); total - native is the wrapper's overhead (an
upper bound: called in a tight loop, the native call runs with warmer caches than between Python work).
CPU calls use the default thread count (threads=None), as users do.

NumPy always; PyTorch CPU / CUDA tensors and CuPy arrays when those libraries (and a device) are there.

A second table times small CPU layers (batch 1, up to a few hundred microseconds of work) on one thread and
on the default thread count: what the executor's threads cost or gain where a call is short (the ratio
one thread / default: > 1, the threads pay).

    python benchmarks/host_overhead.py               # this checkout's detconv (an installed one first)
    PYTHONPATH=/other/copy python benchmarks/host_overhead.py   # another copy of the package (say, the old one)
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

try:
    import detconv  # PYTHONPATH (another copy of the package) or an installed detconv first
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import detconv
from detconv import _kernels, kernels


def _median_us(fn, sync, number, repeat):
    for _ in range(max(number // 10, 10)):  # warm-up (first-call imports, caches, allocator)
        fn()
    sync()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        runs.append((time.perf_counter() - t) / number * 1e6)
    return statistics.median(runs)


def _cases(lib):
    """(name, public call, native call) per computation; `lib` turns a NumPy array into the library's kind and
    gives its pointer, allocator, stream and device flag."""
    rng = np.random.default_rng(0)
    a = lambda *s: lib.array(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    x, f, b, dy = a(1, 4, 4, 8), a(1, 1, 8, 8), a(8), a(1, 4, 4, 8)
    x3, f3 = a(1, 2, 4, 4, 8), a(1, 1, 1, 8, 8)
    fdw = a(1, 1, 8, 1)
    k = _kernels
    P = k.Problem
    p2 = P(1, 4, 4, 8, 1, 1, 8, 8, 1, 1, 1, 1, "VALID")
    p3 = P(1, 4, 4, 8, 1, 1, 8, 8, 1, 1, 1, 1, "VALID", D=2, KD=1)
    pdw = P(1, 4, 4, 8, 1, 1, 1, 8, 1, 1, 1, 1, "VALID")
    pb = P(1, 4, 4, 8, 1, 1, 8, 8, 1, 1, 1, 1, "VALID")
    y, y3, dw, db = lib.empty((1, 4, 4, 8)), lib.empty((1, 2, 4, 4, 8)), lib.empty((1, 1, 8, 8)), lib.empty((8,))
    # pointers and stream fetched once: "native" is the bare entry point
    ws = lib.empty((max(pb.bgrad_gpu_workspace_bytes, p2.wgrad_gpu_workspace_bytes) // 4 + 1,)) if lib.gpu else None
    ptrs = {id(v): lib.ptr(v) for v in (x, f, b, dy, x3, f3, fdw, y, y3, dw, db, ws) if v is not None}
    ptr = lambda v: ptrs[id(v)]  # noqa: E731
    if lib.gpu:
        stream = lib.stream()
        s = lambda: stream  # noqa: E731
        native = {
            "fprop": lambda: k.fprop_gpu(p2, ptr(x), ptr(f), ptr(b), ptr(y), s()),
            "dgrad": lambda: k.dgrad_gpu(p2, ptr(dy), ptr(f), ptr(y), s()),
            "wgrad": lambda: k.wgrad_gpu(p2, ptr(x), ptr(dy), ptr(dw), ptr(ws), s()),
            "bgrad": lambda: k.bgrad_gpu(pb, ptr(dy), ptr(db), ptr(ws), s()),
            "fprop3": lambda: k.fprop_gpu(p3, ptr(x3), ptr(f3), 0, ptr(y3), s()),
            "dw": lambda: k.fprop_gpu(pdw, ptr(x), ptr(fdw), 0, ptr(y), s()),
        }
    else:
        native = {
            "fprop": lambda: k.fprop_cpu(p2, ptr(x), ptr(f), ptr(b), ptr(y), 0),
            "dgrad": lambda: k.dgrad_cpu(p2, ptr(dy), ptr(f), ptr(y), 0),
            "wgrad": lambda: k.wgrad_cpu(p2, ptr(x), ptr(dy), ptr(dw), 0),
            "bgrad": lambda: k.bgrad_cpu(pb, ptr(dy), ptr(db), 0),
            "fprop3": lambda: k.fprop_cpu(p3, ptr(x3), ptr(f3), 0, ptr(y3), 0),
            "dw": lambda: k.fprop_cpu(pdw, ptr(x), ptr(fdw), 0, ptr(y), 0),
        }
    K = kernels
    return [
        ("conv2d + bias", lambda: K.conv2d(x, f, 1, "SAME", bias=b), native["fprop"]),
        ("conv2d_backprop_input", lambda: K.conv2d_backprop_input(dy, f, (1, 4, 4, 8), 1, "SAME"), native["dgrad"]),
        ("conv2d_backprop_filter", lambda: K.conv2d_backprop_filter(x, dy, (1, 1, 8, 8), 1, "SAME"),
         native["wgrad"]),
        ("bias_grad", lambda: K.bias_grad(dy), native["bgrad"]),
        ("conv3d", lambda: K.conv3d(x3, f3, 1, "SAME"), native["fprop3"]),
        ("depthwise_conv2d", lambda: K.depthwise_conv2d(x, fdw, 1, "SAME"), native["dw"]),
    ]


class _NumPyLib:
    name, gpu = "numpy", False
    array = staticmethod(np.ascontiguousarray)
    ptr = staticmethod(lambda a: a.ctypes.data)
    empty = staticmethod(lambda s: np.empty(s, np.float32))
    sync = staticmethod(lambda: None)


def _libs():
    yield _NumPyLib
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        class TorchCpu:
            name, gpu = "torch cpu", False
            array = staticmethod(torch.from_numpy)
            ptr = staticmethod(lambda a: a.data_ptr())
            empty = staticmethod(lambda s: torch.empty(s, dtype=torch.float32))
            sync = staticmethod(lambda: None)
        yield TorchCpu
        if torch.cuda.is_available() and kernels.cuda_available():
            class TorchCuda:
                name, gpu = "torch cuda", True
                array = staticmethod(lambda a: torch.from_numpy(a).cuda())
                ptr = staticmethod(lambda a: a.data_ptr())
                empty = staticmethod(lambda s: torch.empty(s, dtype=torch.float32, device="cuda"))
                stream = staticmethod(lambda: torch.cuda.current_stream().cuda_stream)
                sync = staticmethod(torch.cuda.synchronize)
            yield TorchCuda
    try:
        import cupy
    except ImportError:
        return
    if kernels.cuda_available():
        class CuPy:
            name, gpu = "cupy", True
            array = staticmethod(cupy.asarray)
            ptr = staticmethod(lambda a: a.data.ptr)
            empty = staticmethod(lambda s: cupy.empty(s, dtype=cupy.float32))
            stream = staticmethod(lambda: cupy.cuda.get_current_stream().ptr)
            sync = staticmethod(lambda: cupy.cuda.get_current_stream().synchronize())
        yield CuPy


def _small_layers():
    """(name, call(threads)) for small CPU layers, float32 NHWC, batch 1."""
    rng = np.random.default_rng(0)
    a = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    K = kernels
    rows = []
    for h, c in ((8, 16), (14, 64), (28, 64), (56, 64)):
        x, f, dy = a(1, h, h, c), a(3, 3, c, c), a(1, h, h, c)
        name = f"3x3 {h}x{h}x{c}"
        rows += [
            (f"{name} fwd", lambda t, x=x, f=f: K.conv2d(x, f, 1, "SAME", threads=t)),
            (f"{name} dx", lambda t, dy=dy, f=f, s=x.shape: K.conv2d_backprop_input(dy, f, s, 1, "SAME", threads=t)),
            (f"{name} dw", lambda t, x=x, dy=dy, s=f.shape: K.conv2d_backprop_filter(x, dy, s, 1, "SAME", threads=t)),
        ]
    return rows


def _threads_table(repeat):
    print(f"\nsmall CPU layers, median us per call: one thread against the default "
          f"({os.cpu_count()} threads: the cores)")
    print(f"{'layer':<22} {'1 thread':>9} {'default':>9} {'ratio':>6}")
    for name, call in _small_layers():
        one = call(1)
        number = max(10, int(0.05 / max(_median_us(lambda: call(1), lambda: None, 10, 1) * 1e-6, 1e-6)))
        t1 = _median_us(lambda: call(1), lambda: None, number, repeat)
        td = _median_us(lambda: call(None), lambda: None, number, repeat)
        assert np.array_equal(one.view(np.uint32), call(None).view(np.uint32)), name  # the bits never depend on it
        print(f"{name:<22} {t1:9.1f} {td:9.1f} {t1 / td:6.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=2000, help="calls per timed run")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs (the median is printed)")
    args = ap.parse_args()
    print(f"detconv from {os.path.dirname(detconv.__file__)}; median us per call "
          f"({args.repeat} runs of {args.number} calls)")
    print(f"{'library':<11} {'call':<24} {'total':>8} {'native':>8} {'overhead':>9}")
    for lib in _libs():
        for name, public, native in _cases(lib):
            t = _median_us(public, lib.sync, args.number, args.repeat)
            n = _median_us(native, lib.sync, args.number, args.repeat)
            print(f"{lib.name:<11} {name:<24} {t:8.1f} {n:8.1f} {t - n:9.1f}", flush=True)
    _threads_table(args.repeat)


if __name__ == "__main__":
    main()

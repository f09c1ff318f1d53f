"""GPU timing: detconv's CUDA kernels against cuDNN (through PyTorch).

For ResNet-50's convolution layers (or, with --net c3d, the 3x3x3 layers of
C3D, a video network) at batch 32 and batch 1, times the forward pass (fwd),
input gradient (dx), filter gradient (dw) and bias gradient (db) of
detconv.kernels on PyTorch CUDA tensors, and of torch.nn.functional.conv2d /
torch.nn.grad.conv2d_input / torch.nn.grad.conv2d_weight / dy.sum over
(N, H, W) (conv3d and its gradients for 3-D layers) on the cuDNN side, held to comparable rules: no TF32
(torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 =
False), deterministic algorithms (torch.use_deterministic_algorithms(True),
cudnn.deterministic = True, cudnn.benchmark = False), and
torch.utils.deterministic.fill_uninitialized_memory = False (otherwise
deterministic mode NaN-fills every torch.empty - detconv's outputs and
workspaces included - and inflates both sides' times).

Numerics (--numerics): "float32" (detconv float32 accumulation vs cuDNN
float32) and "float16/acc16" (detconv's native float16 accumulation,
accumulation="float16", vs cuDNN half) by default; also "float16" (detconv's
float32 accumulation of float16 inputs), "bfloat16", "float64". cuDNN is free
to use tensor cores for 16-bit inputs (only TF32 is disabled), so 16-bit
ratios compare a bit-reproducible FMA kernel with the fastest deterministic
algorithm the library has.

Timing: after warm-up, a calibration loop estimates one call's time; each
measurement then records one CUDA event pair around a loop of `reps` calls
(10..50, enough for >= about 2 ms of GPU work) and divides by reps; the table
shows the median over several such pairs. Both sides are timed the same way.
Back-to-back calls hide the host's per-call time (Python, argument checks,
launch: ~9 us for torch, 35-55 us for detconv.kernels on an H100 host) only
where the device time per call is longer, so by default small layers
measure the host; with --queued the GPU sleeps while the host queues the
calls, and the events bracket device time only. cuDNN is timed on NCHW and on channels_last
(NHWC in memory, detconv's layout) tensors and the faster is kept
(--cudnn-layout to choose one).

Columns: detconv ms, cuDNN ms, ratio = cuDNN time / detconv time (> 1:
detconv faster), detconv TFLOP/s (2 flops per multiply-add; db counts one per
add) and its fraction of the device's measured float32 FFMA peak (a CuPy
RawKernel, else nvcc + the CUDA driver API through ctypes; "n/a" if neither
works). A second table gives detconv's native float16 speedup over its own
float32 per layer.

    python benchmarks/gpu.py                      # batch 32 and 1, float32 and float16/acc16
    python benchmarks/gpu.py --quick              # three layers, fewer timing pairs
    python benchmarks/gpu.py --batch 32 --numerics float32 float16 float16/acc16 bfloat16 --nchw
    python benchmarks/gpu.py --queued             # device time only (no Python overhead on either side)
    python benchmarks/gpu.py --net c3d --batch 8  # 3-D layers (NDHWC; cuDNN NCDHW or channels_last_3d)

Needs PyTorch with CUDA and detconv's kernel module built with CUDA; no
TensorFlow.
"""

import argparse
import ctypes
import importlib.util
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, should torch use it
if importlib.util.find_spec("detconv") is None:  # `python benchmarks/gpu.py` in a source checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name, H=W, Cin, Cout, k, stride  (padding k//2 on every side, as torchvision's ResNet-50)
RESNET50 = [
    ("conv1 7x7/2 3-64 @224", 224, 3, 64, 7, 2),
    ("l1 1x1 64-64 @56", 56, 64, 64, 1, 1),
    ("l1 3x3 64-64 @56", 56, 64, 64, 3, 1),
    ("l1 1x1 64-256 @56", 56, 64, 256, 1, 1),
    ("l1 1x1 256-64 @56", 56, 256, 64, 1, 1),
    ("l2 3x3/2 128 @56", 56, 128, 128, 3, 2),
    ("l2 1x1/2 256-512 @56", 56, 256, 512, 1, 2),
    ("l2 3x3 128 @28", 28, 128, 128, 3, 1),
    ("l3 3x3 256 @14", 14, 256, 256, 3, 1),
    ("l3 1x1 1024-256 @14", 14, 1024, 256, 1, 1),
    ("l4 3x3 512 @7", 7, 512, 512, 3, 1),
    ("l4 1x1 512-2048 @7", 7, 512, 2048, 1, 1),
]
QUICK = [RESNET50[0], RESNET50[2], RESNET50[8]]

# name, D, H=W, Cin, Cout, k, stride: C3D's 3x3x3 convolutions at their sizes for a 16x112x112 clip (Tran et
# al. 2015; padding 1, stride 1), plus benchmarks/cpu.py's C3D/I3D block. 2-D layers are the same with D = 0.
C3D = [
    ("conv1a 3-64 @16x112", 16, 112, 3, 64, 3, 1),
    ("conv2a 64-128 @16x56", 16, 56, 64, 128, 3, 1),
    ("block 64-64 @16x56", 16, 56, 64, 64, 3, 1),
    ("conv3b 256-256 @8x28", 8, 28, 256, 256, 3, 1),
    ("conv4b 512-512 @4x14", 4, 14, 512, 512, 3, 1),
    ("conv5b 512-512 @2x7", 2, 7, 512, 512, 3, 1),
]
NETS = {"resnet50": [(name, 0, *rest) for name, *rest in RESNET50], "c3d": C3D}

# label -> (torch dtype name, detconv accumulation)
NUMERICS = {
    "float32": ("float32", None),
    "float16/acc16": ("float16", "float16"),
    "float16": ("float16", None),
    "bfloat16": ("bfloat16", None),
    "float64": ("float64", None),
}
OPS = ("fwd", "dx", "dw", "db")

TARGET_MS = 2.0  # GPU work covered by one event pair
MIN_REPS, MAX_REPS = 10, 50


# ------------------------------------------------------------------ timing

_SLEEP_CYCLES = 50_000_000  # ~25 ms on an H100: longer than the host needs to queue MAX_REPS calls, with room
# for the host stalls of up to 28 ms seen there (a 20M-cycle sleep let a few cells measure host gaps)
_sleep_ms = None


def _gpu_sleep_ms(torch):
    """How long torch.cuda._sleep(_SLEEP_CYCLES) keeps the GPU busy, measured once."""
    global _sleep_ms
    if _sleep_ms is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(_SLEEP_CYCLES // 10)  # warm-up
        start.record()
        torch.cuda._sleep(_SLEEP_CYCLES)
        end.record()
        end.synchronize()
        _sleep_ms = start.elapsed_time(end)
    return _sleep_ms


def _time(torch, fn, pairs, warmup=2, queued=False):
    """Median over `pairs` event pairs of (time of `reps` back-to-back calls) / reps, in ms.

    queued: the GPU first sleeps while the host queues the calls, so the events bracket
    device work only (kernels and the gaps between them, not the host's Python time); a
    call that synchronizes with the host, or a host slower than the sleep, shows up as
    a warning."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def loop(reps):
        if queued:
            torch.cuda._sleep(_SLEEP_CYCLES)
        t0 = time.perf_counter()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        host_ms = (time.perf_counter() - t0) * 1e3
        end.synchronize()
        if queued and host_ms > 0.8 * _gpu_sleep_ms(torch):
            print(f"# WARNING: queuing {reps} calls took {host_ms:.2f} ms of host time, more than the GPU "
                  f"sleep ({_gpu_sleep_ms(torch):.2f} ms): this time includes host gaps", flush=True)
        return start.elapsed_time(end) / reps

    est = loop(MIN_REPS)  # calibration: estimate of one call
    reps = max(MIN_REPS, min(MAX_REPS, math.ceil(TARGET_MS / max(est, 1e-4))))
    return statistics.median(loop(reps) for _ in range(pairs))


# ------------------------------------------------------------ FFMA peak

_PEAK_SRC = r"""
extern "C" __global__ void ffma_peak(float* out, int iters, float a, float b) {
  float x0 = threadIdx.x * 1e-3f, x1 = x0 + 1.f, x2 = x0 + 2.f, x3 = x0 + 3.f;
  float x4 = x0 + 4.f, x5 = x0 + 5.f, x6 = x0 + 6.f, x7 = x0 + 7.f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
      x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
}
"""
_PEAK_THREADS, _PEAK_ITERS = 512, 4096
_PEAK_FMAS_PER_THREAD = 8 * 16 * _PEAK_ITERS


def _peak_cupy(sms):
    import cupy as cp
    import numpy as np

    kern = cp.RawKernel(_PEAK_SRC, "ffma_peak")
    blocks = sms * 4
    out = cp.empty((blocks * _PEAK_THREADS,), dtype=cp.float32)
    args = (out, np.int32(_PEAK_ITERS), np.float32(0.9999), np.float32(1e-4))
    kern((blocks,), (_PEAK_THREADS,), args)  # warm-up (compiles, ramps clocks)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    best = 0.0
    for _ in range(5):
        e0.record()
        kern((blocks,), (_PEAK_THREADS,), args)
        e1.record()
        e1.synchronize()
        ms = cp.cuda.get_elapsed_time(e0, e1)
        best = max(best, 2.0 * _PEAK_FMAS_PER_THREAD * blocks * _PEAK_THREADS / (ms * 1e-3))
    return best, "CuPy RawKernel"


def _peak_driver(torch, sms):
    """nvcc -cubin, then the CUDA driver API through ctypes (no CuPy, no extension build)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("no nvcc")
    major, minor = torch.cuda.get_device_capability()
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "peak.cu"), os.path.join(d, "peak.cubin")
        with open(src, "w") as fh:
            fh.write(_PEAK_SRC)
        subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", "-O3", "-o", cubin, src], check=True,
                       capture_output=True, timeout=300)
        with open(cubin, "rb") as fh:
            image = fh.read()
    cu = ctypes.CDLL("libcuda.so.1")

    def ck(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUresult {rc}")

    try:  # CUDA >= 12.8 names it _v2; older drivers only have the plain symbol
        elapsed = cu.cuEventElapsedTime_v2
    except AttributeError:
        elapsed = cu.cuEventElapsedTime
    torch.cuda.synchronize()  # the primary context exists
    ck(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    ck(cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ck(cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
    mod, fn, ptr = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    e0, e1 = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        ck(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image)), "cuModuleLoadData")
        ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"ffma_peak"), "cuModuleGetFunction")
        blocks = sms * 4
        ck(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4 * blocks * _PEAK_THREADS)), "cuMemAlloc")
        a_iters, a_a, a_b = ctypes.c_int(_PEAK_ITERS), ctypes.c_float(0.9999), ctypes.c_float(1e-4)
        params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                         for v in (ptr, a_iters, a_a, a_b)])
        ck(cu.cuEventCreate(ctypes.byref(e0), 0), "cuEventCreate")
        ck(cu.cuEventCreate(ctypes.byref(e1), 0), "cuEventCreate")

        def launch():
            ck(cu.cuLaunchKernel(fn, blocks, 1, 1, _PEAK_THREADS, 1, 1, 0, None, params, None), "cuLaunchKernel")

        launch()
        ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        best = 0.0
        for _ in range(5):
            ck(cu.cuEventRecord(e0, None), "cuEventRecord")
            launch()
            ck(cu.cuEventRecord(e1, None), "cuEventRecord")
            ck(cu.cuEventSynchronize(e1), "cuEventSynchronize")
            ms = ctypes.c_float()
            ck(elapsed(ctypes.byref(ms), e0, e1), "cuEventElapsedTime")
            best = max(best, 2.0 * _PEAK_FMAS_PER_THREAD * blocks * _PEAK_THREADS / (ms.value * 1e-3))
        return best, "nvcc + driver API"
    finally:
        for e in (e0, e1):
            if e.value:
                cu.cuEventDestroy_v2(e)
        if ptr.value:
            cu.cuMemFree_v2(ptr)
        if mod.value:
            cu.cuModuleUnload(mod)
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cu.cuDevicePrimaryCtxRelease_v2(dev)


def ffma_peak(torch):
    """(float32 FFMA peak in FLOP/s, how it was measured), or (None, why not)."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    why = []
    for name, f in (("CuPy", lambda: _peak_cupy(sms)), ("driver API", lambda: _peak_driver(torch, sms))):
        try:
            return f()
        except Exception as e:  # noqa: BLE001 - any failure means "try the next way"
            why.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return None, "; ".join(why)


# ------------------------------------------------------------------ main

def _deterministic_torch(torch):
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    # Deterministic mode NaN-fills every torch.empty (detconv's outputs and workspaces
    # too) unless this is off; that fill is not part of either convolution.
    try:
        import torch.utils.deterministic as tud
    except ImportError:
        tud = None
    if tud is not None and hasattr(tud, "fill_uninitialized_memory"):
        tud.fill_uninitialized_memory = False
        return True
    return False


def _flops(op, n, out_pixels, cin, cout, taps):
    if op == "db":
        return n * out_pixels * cout
    return 2 * n * out_pixels * cout * cin * taps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--numerics", nargs="+", default=["float32", "float16/acc16"], choices=list(NUMERICS))
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    ap.add_argument("--pairs", type=int, default=7, help="timed event pairs per cell (median; --quick: 3)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--net", choices=list(NETS), default="resnet50", help="the layer set (default resnet50)")
    ap.add_argument("--quick", action="store_true", help="three ResNet-50 layers, 3 event pairs per cell")
    ap.add_argument("--layers", default=None, help="comma list of substrings selecting layers by name")
    ap.add_argument("--cudnn-layout", choices=["best", "nchw", "nhwc"], default="best",
                    help="memory layout of cuDNN's tensors (best: time both, keep the faster)")
    ap.add_argument("--nchw", action="store_true", help="also time detconv on NCHW tensors")
    ap.add_argument("--no-peak", action="store_true", help="skip the FFMA peak measurement")
    ap.add_argument("--queued", action="store_true",
                    help="device time only: both sides' calls queue behind a GPU sleep (no host overhead)")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from detconv import kernels as K

    if not torch.cuda.is_available() or not K.cuda_available():
        print("benchmarks/gpu.py: needs PyTorch with CUDA and detconv built with CUDA", file=sys.stderr)
        return 1
    no_fill = _deterministic_torch(torch)

    layers = NETS[args.net]
    if args.quick:
        layers = [L for L in layers if L[0] in {q[0] for q in QUICK}] or layers[:3]
    if args.layers:
        keys = [s.strip() for s in args.layers.split(",") if s.strip()]
        layers = [L for L in layers if any(s in L[0] for s in keys)]
    pairs = 3 if args.quick else args.pairs
    dev = torch.device("cuda")

    peak, peak_how = (None, "skipped") if args.no_peak else ffma_peak(torch)
    print(f"# device: {torch.cuda.get_device_name()}; torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"cuDNN {torch.backends.cudnn.version()}")
    print("# FFMA peak: " + (f"{peak / 1e12:.1f} TFLOP/s float32 ({peak_how}); 16-bit rows use the same "
                             f"peak (scalar HFMA issues at the FFMA rate, packed HFMA2 at twice it)"
                             if peak else f"n/a ({peak_how})"))
    print(f"# cuDNN: allow_tf32=False, deterministic algorithms, fill_uninitialized_memory="
          f"{'False' if no_fill else 'n/a (old torch)'}, layout {args.cudnn_layout}")
    print(f"# times: median of {pairs} CUDA-event pairs, each around {MIN_REPS}-{MAX_REPS} back-to-back calls "
          f"(>= ~{TARGET_MS:g} ms of GPU work), divided by the call count; ms per call; "
          + ("queued behind a GPU sleep: device time only" if args.queued else
             "host time included where it exceeds the device time (small layers)"))
    print()
    cols = ["layer", "N", "numerics", "op", "detconv ms", "cuDNN ms", "ratio", "TFLOP/s", "of FFMA peak"]
    if args.cudnn_layout == "best":
        cols.append("cuDNN layout")
    if args.nchw:
        cols.append("detconv NCHW ms")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols), flush=True)

    results = {}  # (layer, n, numerics, op) -> (ours ms, cudnn ms)
    for name, depth, hw, cin, cout, k, s in layers:
        nd = 3 if depth else 2
        pad = k // 2
        spatial = ((depth,) if depth else ()) + (hw, hw)
        out = tuple((i + 2 * pad - k) // s + 1 for i in spatial)
        conv = F.conv3d if nd == 3 else F.conv2d
        grad_input = torch.nn.grad.conv3d_input if nd == 3 else torch.nn.grad.conv2d_input
        grad_weight = torch.nn.grad.conv3d_weight if nd == 3 else torch.nn.grad.conv2d_weight
        fwd, dgrad, wgrad = ((K.conv3d, K.conv3d_backprop_input, K.conv3d_backprop_filter) if nd == 3 else
                             (K.conv2d, K.conv2d_backprop_input, K.conv2d_backprop_filter))
        channels_first = "NCDHW" if nd == 3 else "NCHW"
        last = (0, *range(2, nd + 2), 1)  # NC... -> N...C
        for n in args.batch:
            for label in args.numerics:
                dtype, acc = NUMERICS[label]
                tdt = getattr(torch, dtype)
                g = torch.Generator(device=dev).manual_seed(0)
                x = torch.randn(n, cin, *spatial, generator=g, device=dev).to(tdt)
                w = (torch.randn(cout, cin, *(k,) * nd, generator=g, device=dev) / (k ** nd * cin) ** 0.5).to(tdt)
                dy = torch.randn(n, cout, *out, generator=g, device=dev).to(tdt)
                # detconv operands: NHWC / HWIO (NDHWC / DHWIO) copies, made once
                xn = x.permute(*last).contiguous()
                dyn = dy.permute(*last).contiguous()
                fh = w.permute(*range(2, nd + 2), 1, 0).contiguous()
                kw = dict(strides=s, padding=((pad, pad),) * nd, accumulation=acc)
                ours = {
                    "fwd": lambda: fwd(xn, fh, **kw),
                    "dx": lambda: dgrad(dyn, fh, tuple(xn.shape), **kw),
                    "dw": lambda: wgrad(xn, dyn, tuple(fh.shape), **kw),
                    "db": lambda: K.bias_grad(dyn, accumulation=acc),
                }
                ours_nchw = {
                    "fwd": lambda: fwd(x, fh, data_format=channels_first, **kw),
                    "dx": lambda: dgrad(dy, fh, tuple(x.shape), data_format=channels_first, **kw),
                    "dw": lambda: wgrad(x, dy, tuple(fh.shape), data_format=channels_first, **kw),
                    "db": lambda: K.bias_grad(dy, accumulation=acc, data_format=channels_first),
                }

                def cudnn_ops(xc, wc, dyc):
                    return {
                        "fwd": lambda: conv(xc, wc, stride=s, padding=pad),
                        "dx": lambda: grad_input(xc.shape, wc, dyc, stride=s, padding=pad),
                        "dw": lambda: grad_weight(xc, wc.shape, dyc, stride=s, padding=pad),
                        "db": lambda: dyc.sum(dim=(0, *range(2, nd + 2))),
                    }

                layouts = {}
                if args.cudnn_layout in ("best", "nchw"):
                    layouts["NCHW"] = cudnn_ops(x, w, dy)
                if args.cudnn_layout in ("best", "nhwc"):
                    cl = torch.channels_last_3d if nd == 3 else torch.channels_last
                    layouts["NHWC"] = cudnn_ops(x.contiguous(memory_format=cl), w.contiguous(memory_format=cl),
                                                dy.contiguous(memory_format=cl))
                for op in args.ops:
                    t_ours = _time(torch, ours[op], pairs, args.warmup, args.queued)
                    t_lay = {lay: _time(torch, fns[op], pairs, args.warmup, args.queued)
                             for lay, fns in layouts.items()}
                    best_lay = min(t_lay, key=t_lay.get)
                    t_cudnn = t_lay[best_lay]
                    results[(name, n, label, op)] = (t_ours, t_cudnn)
                    fl = _flops(op, n, math.prod(out), cin, cout, k ** nd)
                    tflops = fl / (t_ours * 1e-3) / 1e12
                    row = [name, str(n), label, op, f"{t_ours:.3f}", f"{t_cudnn:.3f}", f"{t_cudnn / t_ours:.2f}",
                           f"{tflops:.2f}", f"{100 * tflops * 1e12 / peak:.0f}%" if peak else "n/a"]
                    if args.cudnn_layout == "best":
                        row.append(best_lay)
                    if args.nchw:
                        row.append(f"{_time(torch, ours_nchw[op], pairs, args.warmup, args.queued):.3f}")
                    print("| " + " | ".join(row) + " |", flush=True)
                # sanity: detconv agrees with cuDNN to rounding (not bits)
                if "fwd" in args.ops:
                    y = conv(x, w, stride=s, padding=pad).double()
                    yd = fwd(xn, fh, **kw).permute(0, nd + 1, *range(1, nd + 1)).double()
                    err = ((yd - y).abs().max() / y.abs().max().clamp_min(1e-30)).item()
                    tol = {"float64": 1e-12, "float32": 1e-4}.get(dtype, 0.2 if acc == "float16" else 5e-2)
                    if not err <= tol:
                        print(f"# WARNING {name} N={n} {label}: detconv vs cuDNN max relative difference {err:.3g}")
                del x, w, dy, xn, dyn, fh, layouts, ours, ours_nchw
                torch.cuda.empty_cache()

    print()
    print("| numerics | N | op | geometric-mean ratio cuDNN/detconv (> 1: detconv faster) |")
    print("|---|---|---|---|")
    for label in args.numerics:
        for n in args.batch:
            for op in args.ops:
                rs = [results[(L[0], n, label, op)] for L in layers if (L[0], n, label, op) in results]
                if rs:
                    gm = statistics.geometric_mean([c / o for o, c in rs])
                    print(f"| {label} | {n} | {op} | {gm:.2f} |")

    if "float32" in args.numerics and "float16/acc16" in args.numerics:
        print()
        print("| layer | N | op | detconv float32 ms | detconv float16/acc16 ms | fp16 speedup |")
        print("|---|---|---|---|---|---|")
        sp = {}
        for name, *_ in layers:
            for n in args.batch:
                for op in args.ops:
                    a = results.get((name, n, "float32", op))
                    b = results.get((name, n, "float16/acc16", op))
                    if a and b:
                        sp.setdefault((n, op), []).append(a[0] / b[0])
                        print(f"| {name} | {n} | {op} | {a[0]:.3f} | {b[0]:.3f} | {a[0] / b[0]:.2f} |")
        print()
        print("| N | op | geometric-mean fp16 speedup (detconv float32 time / float16-accumulation time) |")
        print("|---|---|---|")
        for (n, op), v in sp.items():
            print(f"| {n} | {op} | {statistics.geometric_mean(v):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

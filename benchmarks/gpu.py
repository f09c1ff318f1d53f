"""GPU timing: detconv's CUDA kernels against cuDNN (through PyTorch).

For ResNet-50's convolution layers, times forward, input gradient, filter
gradient and bias gradient of detconv.kernels on PyTorch CUDA tensors and of
torch.nn.functional.conv2d / torch.nn.grad.conv2d_input / conv2d_weight /
dy.sum with cuDNN held to comparable rules: no TF32
(torch.backends.cudnn.allow_tf32 = False), deterministic algorithms
(torch.use_deterministic_algorithms(True), cudnn.deterministic = True,
cudnn.benchmark = False). Times are medians of CUDA-event measurements after
warm-up, in milliseconds; "ratio" is detconv / cuDNN (lower is better for
detconv). cuDNN is free to use tensor cores for float16/bfloat16 (TF32 only
is disabled), so 16-bit ratios compare a bit-reproducible kernel with the
fastest deterministic one the library has.

    python benchmarks/gpu.py                     # batch 32, float32 and float16
    python benchmarks/gpu.py --batch 1 32 --dtypes float32 float16 bfloat16 --accum16
    python benchmarks/gpu.py --quick             # three layers, few repeats

Needs PyTorch with CUDA and detconv's kernel module built with CUDA; no
TensorFlow.
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, should torch use it

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


def _time(torch, fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[32])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"],
                    choices=["float32", "float64", "float16", "bfloat16"])
    ap.add_argument("--accum16", action="store_true", help="also time float16 with accumulation='float16'")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="three layers, 5 repeats")
    ap.add_argument("--nchw", action="store_true", help="also time detconv on NCHW tensors")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from detconv import kernels as K

    if not torch.cuda.is_available() or not K.cuda_available():
        print("benchmarks/gpu.py: needs PyTorch with CUDA and detconv built with CUDA", file=sys.stderr)
        return 1
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)

    layers = QUICK if args.quick else RESNET50
    repeats = 5 if args.quick else args.repeats
    numerics = [(d, None) for d in args.dtypes]
    if args.accum16 and "float16" in args.dtypes:
        numerics.append(("float16", "float16"))

    print(f"# device: {torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; medians of {repeats} runs (ms)")
    cols = ["layer", "dtype", "N", "op", "detconv", "cuDNN", "ratio"] + (["detconv NCHW"] if args.nchw else [])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    dev = torch.device("cuda")
    ratios = {}
    for name, hw, cin, cout, k, s in layers:
        for n in args.batch:
            for dtype, acc in numerics:
                tdt = getattr(torch, dtype)
                g = torch.Generator(device="cpu").manual_seed(0)
                x = torch.randn(n, cin, hw, hw, generator=g).to(dev, tdt)
                w = torch.randn(cout, cin, k, k, generator=g).to(dev, tdt) / (k * k * cin) ** 0.5
                pad = k // 2
                y = F.conv2d(x, w, stride=s, padding=pad)
                dy = torch.randn(y.shape, generator=g).to(dev, tdt)
                # detconv operands: NHWC / HWIO copies, made once
                xn = x.permute(0, 2, 3, 1).contiguous()
                dyn = dy.permute(0, 2, 3, 1).contiguous()
                fh = w.permute(2, 3, 1, 0).contiguous()
                pads = ((pad, pad), (pad, pad))
                kw = dict(strides=s, padding=pads, accumulation=acc)
                label = dtype + ("/acc16" if acc else "")
                ops = [
                    ("fprop", lambda: K.conv2d(xn, fh, **kw),
                     lambda: F.conv2d(x, w, stride=s, padding=pad),
                     lambda: K.conv2d(x, fh, data_format="NCHW", **kw)),
                    ("dgrad", lambda: K.conv2d_backprop_input(dyn, fh, tuple(xn.shape), **kw),
                     lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, stride=s, padding=pad),
                     lambda: K.conv2d_backprop_input(dy, fh, tuple(x.shape), data_format="NCHW", **kw)),
                    ("wgrad", lambda: K.conv2d_backprop_filter(xn, dyn, tuple(fh.shape), **kw),
                     lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride=s, padding=pad),
                     lambda: K.conv2d_backprop_filter(x, dy, tuple(fh.shape), data_format="NCHW", **kw)),
                    ("bgrad", lambda: K.bias_grad(dyn, accumulation=acc),
                     lambda: dy.sum(dim=(0, 2, 3)),
                     lambda: K.bias_grad(dy, accumulation=acc, data_format="NCHW")),
                ]
                for op, ours, theirs, ours_nchw in ops:
                    t_ours = _time(torch, ours, args.warmup, repeats)
                    t_cudnn = _time(torch, theirs, args.warmup, repeats)
                    row = [name, label, str(n), op, f"{t_ours:.3f}", f"{t_cudnn:.3f}", f"{t_ours / t_cudnn:.2f}"]
                    if args.nchw:
                        row.append(f"{_time(torch, ours_nchw, args.warmup, repeats):.3f}")
                    ratios.setdefault((label, n, op), []).append(t_ours / t_cudnn)
                    print("| " + " | ".join(row) + " |", flush=True)
                # sanity: detconv agrees with cuDNN to rounding (not bits)
                yd = K.conv2d(xn, fh, **kw).permute(0, 3, 1, 2).double()
                err = ((yd - y.double()).abs().max() / y.double().abs().max().clamp_min(1e-30)).item()
                if err > {"float64": 1e-12, "float32": 1e-4}.get(dtype, 5e-2):
                    print(f"# WARNING {name} {label}: detconv vs cuDNN max relative difference {err:.3g}")
                del x, w, y, dy, xn, dyn, fh
    print()
    print("| dtype | N | op | geometric-mean ratio detconv/cuDNN |")
    print("|---|---|---|---|")
    for (label, n, op), rs in ratios.items():
        gm = statistics.geometric_mean(rs)
        print(f"| {label} | {n} | {op} | {gm:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

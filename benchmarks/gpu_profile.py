"""Calls that Nsight Compute profiles: a few ResNet-50 layers (benchmarks/gpu.py's list), each op called
`--calls` times with the tile configuration DETCONV_CUDA_TILE as given per item, nothing else on the GPU.
Run under ncu, which picks the kernels (the driver only issues them):

    ncu --kernel-name regex:'igemm|wgrad|combine' --section SpeedOfLight --section WarpStateStats \\
        python benchmarks/gpu_profile.py "l2 3x3 128 @28:fwd" "l2 3x3 128 @28:fwd:0" "l1 3x3 64-64 @56:dx"

An item is "layer substring:op[:configuration]" (op: fwd, dx, dw; batch --batch, float32 unless
--numerics says otherwise). Prints one line per item with the configuration the launcher would choose
(DETCONV_CUDA_TILE unset) so that the profile's kernels can be matched to items.

Needs PyTorch with CUDA and detconv's kernel module built with CUDA.
"""

import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("detconv") is None:  # a source checkout
    sys.path.insert(0, os.path.dirname(HERE))

import gpu as bench  # noqa: E402 - benchmarks/gpu.py: layers, numerics


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("items", nargs="+", help='"layer substring:op[:configuration]"')
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--numerics", default="float32", choices=list(bench.NUMERICS))
    ap.add_argument("--calls", type=int, default=2, help="calls per item (the first one warms up)")
    args = ap.parse_args(argv)

    import torch

    from detconv import kernels as K

    if not torch.cuda.is_available() or not K.cuda_available():
        print("benchmarks/gpu_profile.py: needs PyTorch with CUDA and detconv built with CUDA", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    dtype, acc = bench.NUMERICS[args.numerics]
    tdt = getattr(torch, dtype)
    for item in args.items:
        parts = item.split(":")
        key, op = parts[0], parts[1]
        cfg = parts[2] if len(parts) > 2 else None
        layer = next(L for L in bench.RESNET50 if key in L[0])
        name, hw, cin, cout, k, s = layer
        pad = k // 2
        oh = (hw + 2 * pad - k) // s + 1
        n = args.batch
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(n, hw, hw, cin, generator=g, device=dev).to(tdt)
        f = (torch.randn(k, k, cin, cout, generator=g, device=dev) / (k * k * cin) ** 0.5).to(tdt)
        dy = torch.randn(n, oh, oh, cout, generator=g, device=dev).to(tdt)
        kw = dict(strides=s, padding=((pad, pad), (pad, pad)), accumulation=acc)
        call = {
            "fwd": lambda: K.conv2d(x, f, **kw),
            "dx": lambda: K.conv2d_backprop_input(dy, f, tuple(x.shape), **kw),
            "dw": lambda: K.conv2d_backprop_filter(x, dy, tuple(f.shape), **kw),
        }[op]
        if cfg is None:
            os.environ.pop("DETCONV_CUDA_TILE", None)
        else:
            os.environ["DETCONV_CUDA_TILE"] = cfg
        torch.cuda.synchronize()
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
        os.environ.pop("DETCONV_CUDA_TILE", None)
        print(f"# {name} N={n} {args.numerics} {op}: configuration {cfg if cfg is not None else 'auto'}, "
              f"{args.calls} calls", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

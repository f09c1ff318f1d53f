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
from gpu_tiles import layer_calls  # noqa: E402 - the layers' calls on CUDA tensors


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
    for item in args.items:
        parts = item.split(":")
        key, op = parts[0], parts[1]
        cfg = parts[2] if len(parts) > 2 else None
        layer = next(L for L in bench.RESNET50 if key in L[0])
        n = args.batch
        call = layer_calls(torch, K, layer, n, args.numerics)[op]
        if cfg is None:
            os.environ.pop("DETCONV_CUDA_TILE", None)
        else:
            os.environ["DETCONV_CUDA_TILE"] = cfg
        torch.cuda.synchronize()
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
        os.environ.pop("DETCONV_CUDA_TILE", None)
        print(f"# {layer[0]} N={n} {args.numerics} {op}: configuration {cfg if cfg is not None else 'auto'}, "
              f"{args.calls} calls", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

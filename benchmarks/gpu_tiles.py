"""Device time of every CUDA tile configuration, per layer: the data behind the launchers' choice.

For ResNet-50's convolution layers (benchmarks/gpu.py's list) at the given
batches, times fwd, dx and dw of detconv.kernels on PyTorch CUDA tensors with
DETCONV_CUDA_TILE forced to each GEMM configuration in turn (and the direct
kernel with --direct), then unset (the launcher's own choice). Configurations
never change a bit, only the time. Times are device time only (calls queued
behind a GPU sleep, benchmarks/gpu.py's --queued timing), ms per call.

One row per (layer, N, numerics, op): each configuration's time, the
automatic choice's time, the fastest configuration and auto / fastest (1.00:
the launcher chose the fastest). The last table is the geometric mean of
auto / fastest per op.

--fit then prints the per-SM efficiencies the launchers' cost model takes
(kConvEff in cuda/conv_launch.cuh, kWgradEff in cuda/wgrad_parts.cuh): a
launch of configuration c runs ceil(tiles / (SMs * per_sm)) waves, each as
long as one tile's area over one block's rate, so each timed cell gives
rate_c = waves * BM * BN * K / time (K: the reduction length of a tile); the
efficiency is median(rate_c) * per_sm_c relative to configuration 0, per op
and per accumulation kind. The geometry below mirrors make_igemm_geo and
make_wgrad_geo for these layers (stride-phase and chunk counts included).

    python benchmarks/gpu_tiles.py                       # batch 32 and 1, float32 and float16/acc16
    python benchmarks/gpu_tiles.py --batch 1 --layers "l4,l3" --direct

Needs PyTorch with CUDA and detconv's kernel module built with CUDA.
"""

import argparse
import importlib.util
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("detconv") is None:  # a source checkout
    sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "gpu"))

import gpu as bench  # noqa: E402 - benchmarks/gpu.py: layers, numerics, timing
from gpu_helpers import cuda_tile_configs  # noqa: E402 - the configuration count's one home

OPS = ("fwd", "dx", "dw")
# (BM, BN, blocks per SM) of the GEMM configurations, in the launchers' order (binary32 accumulators):
# ConvTiles in cuda/conv_launch.cuh (forward, input gradient), the Wgrad tiles of cuda/wgrad_parts.cuh.
_CONV_TILES = [(128, 128, 2), (128, 64, 2), (64, 64, 2), (128, 32, 2), (64, 32, 4), (32, 32, 8)]
_FWD_TILES = _CONV_TILES + [(64, 128, 3)]  # C6: three blocks per SM in the forward pass, four in the input gradient
_DX_TILES = _CONV_TILES + [(64, 128, 4)]
_WGRAD_TILES = [(128, 128, 2), (128, 64, 2), (64, 64, 2), (128, 32, 2), (64, 32, 4), (32, 32, 8)]
GEMM_TILES = {"fwd": _FWD_TILES, "dx": _DX_TILES, "dw": _WGRAD_TILES}


def _cdiv(a, b):
    return -(-a // b)


def _tiles_and_k(layer, n, op, bm, bn):
    """(tiles, reduction length per tile) of one launch (cuda/conv_igemm.cuh, cuda/wgrad_parts.cuh)."""
    _, hw, cin, cout, k, s = layer
    oh = (hw + 2 * (k // 2) - k) // s + 1
    if op == "fwd":
        return _cdiv(n * oh * oh, bm) * _cdiv(cout, bn), k * k * cin
    if op == "dx":  # per stride phase; on average k*k/s^2 taps reach an output
        return _cdiv(n * _cdiv(hw, s) ** 2, bm) * _cdiv(cin, bn) * s * s, k * k * cout / (s * s)
    r, f = n * oh * oh, k * k * cin * cout  # order.h reduction_chunks
    p0 = max(1, min(_cdiv(1 << 22, f), _cdiv(r, 64)))
    length = _cdiv(r, p0)
    return _cdiv(k * k * cin, bm) * _cdiv(cout, bn) * _cdiv(r, length), length


def layer_calls(torch, K, layer, n, label):
    """fwd, dx and dw of one ResNet-50 layer at batch n as calls on fresh CUDA tensors (seeded)."""
    _, hw, cin, cout, k, s = layer
    pad = k // 2
    oh = (hw + 2 * pad - k) // s + 1
    dtype, acc = bench.NUMERICS[label]
    tdt = getattr(torch, dtype)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, hw, hw, cin, generator=g, device=dev).to(tdt)
    f = (torch.randn(k, k, cin, cout, generator=g, device=dev) / (k * k * cin) ** 0.5).to(tdt)
    dy = torch.randn(n, oh, oh, cout, generator=g, device=dev).to(tdt)
    kw = dict(strides=s, padding=((pad, pad), (pad, pad)), accumulation=acc)
    return {
        "fwd": lambda: K.conv2d(x, f, **kw),
        "dx": lambda: K.conv2d_backprop_input(dy, f, tuple(x.shape), **kw),
        "dw": lambda: K.conv2d_backprop_filter(x, dy, tuple(f.shape), **kw),
    }


def fit(cells, sms):
    """cells: {(layer, n, label, op): {config: ms}} -> prints the efficiency tables."""
    print()
    print(f"| numerics | op | per-SM efficiency of configurations 0.. relative to 0 ({sms} SMs) |")
    print("|---|---|---|")
    for label in sorted({key[2] for key in cells}):
        for op in OPS:
            rates = []
            for c, (bm, bn, per_sm) in enumerate(GEMM_TILES[op]):
                v = []
                for (layer, n, lab, o), t in cells.items():
                    if lab == label and o == op and c in t:
                        tiles, kk = _tiles_and_k(layer, n, op, bm, bn)
                        v.append(math.ceil(tiles / (sms * per_sm)) * bm * bn * kk / t[c])
                rates.append(statistics.median(v) * per_sm if v else float("nan"))
            if rates and rates[0] == rates[0]:
                print(f"| {label} | {op} | " + ", ".join(f"{r / rates[0]:.2f}" for r in rates) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--numerics", nargs="+", default=["float32", "float16/acc16"], choices=list(bench.NUMERICS))
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    ap.add_argument("--layers", default=None, help="comma list of substrings selecting layers by name")
    ap.add_argument("--pairs", type=int, default=3, help="timed event pairs per cell (median)")
    ap.add_argument("--direct", action="store_true", help="also time the direct (one thread per output) kernel")
    ap.add_argument("--fit", action="store_true", help="print the cost model's per-SM efficiencies from the times")
    args = ap.parse_args(argv)

    import torch

    from detconv import kernels as K

    if not torch.cuda.is_available() or not K.cuda_available():
        print("benchmarks/gpu_tiles.py: needs PyTorch with CUDA and detconv built with CUDA", file=sys.stderr)
        return 1
    layers = bench.RESNET50
    if args.layers:
        keys = [s.strip() for s in args.layers.split(",") if s.strip()]
        layers = [L for L in layers if any(s in L[0] for s in keys)]
    n_cfg = cuda_tile_configs()
    n_gemm = max(len(t) for t in GEMM_TILES.values())
    assert n_gemm < n_cfg, "GEMM_TILES lists more configurations than the launchers have"
    cfgs = list(range(n_gemm)) + (["direct"] if args.direct else [])

    def forced(op, c):  # DETCONV_CUDA_TILE of column c for op, None where op has no such configuration
        if c == "direct":
            return len(GEMM_TILES[op])  # each launcher's direct kernel follows its GEMM configurations
        return c if c < len(GEMM_TILES[op]) else None

    print(f"# device: {torch.cuda.get_device_name()}; device time per call (ms), median of {args.pairs} "
          f"event pairs; configurations 0..{n_cfg - 1} (the last: direct kernel)")
    print()
    cols = ["layer", "N", "numerics", "op"] + [c if c == "direct" else f"c{c}" for c in cfgs]
    cols += ["auto", "fastest", "auto/fastest"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols), flush=True)
    ratios, cells = {}, {}
    for layer in layers:
        name = layer[0]
        for n in args.batch:
            for label in args.numerics:
                calls = layer_calls(torch, K, layer, n, label)
                for op in args.ops:
                    times = {}
                    for c in [c for c in cfgs if forced(op, c) is not None] + [None]:
                        if c is None:
                            os.environ.pop("DETCONV_CUDA_TILE", None)
                        else:
                            os.environ["DETCONV_CUDA_TILE"] = str(forced(op, c))
                        times[c] = bench._time(torch, calls[op], args.pairs, 1, queued=True)
                    os.environ.pop("DETCONV_CUDA_TILE", None)
                    best = min((c for c in times if c is not None), key=lambda c: times[c])
                    r = times[None] / times[best]
                    ratios.setdefault(op, []).append(r)
                    cells[(layer, n, label, op)] = times
                    row = [name, str(n), label, op] + [f"{times[c]:.3f}" if c in times else "-" for c in cfgs]
                    row += [f"{times[None]:.3f}", best if best == "direct" else f"c{best}", f"{r:.2f}"]
                    print("| " + " | ".join(row) + " |", flush=True)
                del calls  # the tensors go with the calls
                torch.cuda.empty_cache()
    print()
    print("| op | geometric mean of auto / fastest |")
    print("|---|---|")
    for op, v in ratios.items():
        print(f"| {op} | {statistics.geometric_mean(v):.3f} |")
    if args.fit:
        fit(cells, torch.cuda.get_device_properties(0).multi_processor_count)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A tiny workload for compute-sanitizer (memcheck, racecheck, synccheck).

Runs the four computations (fprop, dgrad, wgrad, bgrad) of detconv.kernels on
small float32 and float16 (accumulation="float16") problems on the GPU - groups,
depthwise, strides, dilations, padding, NCHW, more than one dw chunk - once per
forced tile configuration: DETCONV_CUDA_TILE is set to "0", "1", ... in os.environ
before each call (the kernels read it at every launch; an index beyond a
computation's own configurations wraps modulo their count), then once with it
unset. Each result is also compared bit for bit with the CPU kernels, so a race
that corrupts data shows up even when a tool misses it. Exits 1 on a mismatch.

Through CuPy (preferred: a lighter process under the sanitizer) or PyTorch, with
the library's memory pool disabled so that memcheck sees every allocation's
real bounds. Not a pytest file; scripts/gpu_check.sh sanitize runs it as

    compute-sanitizer --tool memcheck python tests/gpu/sanitize_driver.py

Options: --lib cupy|torch|auto, --tiles 0,1,2 (a subset), --quick (two problems).
"""

import argparse
import importlib.util
import os
import sys

import numpy as np

if importlib.util.find_spec("detconv") is None:  # a source checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gpu_helpers import cuda_tile_configs  # noqa: E402 - this folder is the script's sys.path[0]

TILES = [str(t) for t in range(cuda_tile_configs())]
NUMERICS = [("float32", None), ("float16", "float16")]

# (name, x NHWC, filter HWIO, strides, dilations, padding, data_format)
PROBLEMS = [
    ("3x3-same", (2, 7, 6, 5), (3, 3, 5, 9), 1, 1, "SAME", "NHWC"),
    ("s2-d1-chunks", (3, 12, 11, 4), (3, 3, 4, 6), 2, 1, ((1, 0), (2, 1)), "NHWC"),  # R = 108: two dw chunks
    ("groups2-nchw", (2, 6, 7, 8), (3, 2, 4, 6), 1, 1, "SAME", "NCHW"),
    ("depthwise-m2-d2", (1, 9, 8, 4), (3, 3, 1, 8), 1, 2, "SAME", "NHWC"),
    ("1x1-wide", (1, 4, 5, 40), (1, 1, 40, 70), 1, 1, "VALID", "NHWC"),
]
QUICK = [PROBLEMS[0], PROBLEMS[2]]


def _out_nhwc(x, f, strides, dilations, padding):
    n, h, w, _ = x
    kh, kw, _, co = f
    sh, sw = (strides, strides) if isinstance(strides, int) else strides
    dh, dw = (dilations, dilations) if isinstance(dilations, int) else dilations
    if padding == "SAME":
        return n, -(-h // sh), -(-w // sw), co
    (pt, pb), (pl, pr) = ((0, 0), (0, 0)) if padding == "VALID" else padding
    return n, (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (w + pl + pr - (kw - 1) * dw - 1) // sw + 1, co


def _fmt(shape, data_format):
    n, h, w, c = shape
    return (n, h, w, c) if data_format == "NHWC" else (n, c, h, w)


def _library(name):
    if name in ("auto", "cupy"):
        try:
            import cupy as cp

            if cp.cuda.runtime.getDeviceCount() > 0:
                if hasattr(cp.cuda, "set_allocator"):  # (tests/gpu/emu/fakecupy has none)
                    cp.cuda.set_allocator(None)  # plain cudaMalloc per array: exact bounds for memcheck
                return "cupy", cp.asarray, cp.asnumpy, lambda: cp.cuda.get_current_stream().synchronize()
        except Exception as e:  # noqa: BLE001
            if name == "cupy":
                raise SystemExit(f"sanitize_driver: no usable CuPy ({e})")
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # before the first CUDA allocation
    try:
        import torch
    except ImportError:
        raise SystemExit("sanitize_driver: needs CuPy or PyTorch with a CUDA device") from None
    if not torch.cuda.is_available():
        raise SystemExit("sanitize_driver: PyTorch sees no CUDA device")
    return ("torch", lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda(),
            lambda a: a.cpu().numpy(), torch.cuda.synchronize)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _run(K, x, f, b, dy, strides, dilations, padding, acc, data_format):
    a = dict(strides=strides, padding=padding, dilations=dilations, accumulation=acc, data_format=data_format)
    return [("fprop", K.conv2d(x, f, bias=b, **a)),
            ("dgrad", K.conv2d_backprop_input(dy, f, tuple(x.shape), **a)),
            ("wgrad", K.conv2d_backprop_filter(x, dy, tuple(f.shape), **a)),
            ("bgrad", K.bias_grad(dy, accumulation=acc, data_format=data_format))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", choices=["auto", "cupy", "torch"], default="auto")
    ap.add_argument("--tiles", default=",".join(TILES), help="comma list of DETCONV_CUDA_TILE values")
    ap.add_argument("--quick", action="store_true", help="two problems only")
    args = ap.parse_args(argv)
    tiles = [t.strip() for t in args.tiles.split(",") if t.strip()] + [None]  # None: unset (automatic)

    from detconv import kernels as K

    if not K.cuda_available():
        raise SystemExit("sanitize_driver: detconv's CUDA kernels are not built or no device is visible")
    lib, to_gpu, to_cpu, sync = _library(args.lib)
    rng = np.random.default_rng(1234)
    bad = launches = 0
    for name, xs, fs, strides, dilations, padding, fmt in (QUICK if args.quick else PROBLEMS):
        ys = _out_nhwc(xs, fs, strides, dilations, padding)
        for dtype, acc in NUMERICS:
            scale = 0.5 if acc == "float16" else 1.0
            host = [(rng.standard_normal(s) * scale).astype(dtype)
                    for s in (_fmt(xs, fmt), fs, (fs[3],), _fmt(ys, fmt))]
            os.environ.pop("DETCONV_CUDA_TILE", None)
            want = [_bits(r) for _, r in _run(K, *host, strides, dilations, padding, acc, fmt)]
            dev = [to_gpu(a) for a in host]
            sync()
            for tile in tiles:
                if tile is None:
                    os.environ.pop("DETCONV_CUDA_TILE", None)
                else:
                    os.environ["DETCONV_CUDA_TILE"] = tile
                got = _run(K, *dev, strides, dilations, padding, acc, fmt)
                sync()
                launches += len(got)
                for (what, g), w in zip(got, want):
                    if not np.array_equal(_bits(to_cpu(g)), w):
                        bad += 1
                        print(f"MISMATCH {name} {dtype}/{acc or 'default'} tile {tile or 'auto'} {what}", flush=True)
    os.environ.pop("DETCONV_CUDA_TILE", None)
    print(f"sanitize_driver ({lib}): {launches} computations, {bad} mismatches against the CPU kernels")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

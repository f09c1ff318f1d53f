"""Times detconv against tf.nn on the layer shapes of common networks (CPU).

Layers of ResNet-50, ResNeXt (grouped), MobileNet, EfficientNet (5x5 depthwise), ConvNeXt (7x7
depthwise), Xception (separable) and C3D (3-D).

Both run in this one process with the same intra-op thread count: forward,
input gradient and filter gradient, each timed as the median of several runs
after warm-up, the two sides' runs interleaved (so a noisy neighbour or a
clock change hits both alike). ratio = the median over repeats of peer time /
detconv time of one adjacent pair of runs (> 1: detconv is faster): shared
cloud cores change speed by up to 2x from one second to the next (a sibling
hyperthread busy or idle), which two separate medians do not cancel; the
table ends with the geometric mean of the ratios. "fastest" is the fastest
peer run over the fastest detconv run: each side undisturbed, where a busy
neighbour slows the two unequally (a kernel streaming from L2 more than one
that keeps its operands in L1). The peer is
tf.nn, or with --peer float32 detconv itself on float32 tensors (the 16-bit
goals: float16 inputs at >= 0.9x, native float16 accumulation at >= 0.2x).

    python benchmarks/cpu.py                 # full run, batch 8, float32
    python benchmarks/cpu.py --quick         # three layers (< 1 min)
    python benchmarks/cpu.py --dtype float16 --accumulation float16 --passes fwd
    python benchmarks/cpu.py --dtype float16 --peer float32   # 16-bit inputs against our float32
    detconv bench ...                        # the same, from a source checkout
"""

import argparse
import math
import os
import statistics
import sys
import time

# name, H(=W), C, Co, K, stride, kind ("conv", "g32" in 32 groups, "dw" depthwise, "sep" separable, "3d": depth
# D, batch B)
LAYERS = (
    ("stem 7x7/2 224 3->64", 224, 3, 64, 7, 2, "conv"),
    ("3x3 56 64->64", 56, 64, 64, 3, 1, "conv"),
    ("3x3 28 128->128", 28, 128, 128, 3, 1, "conv"),
    ("3x3 14 256->256", 14, 256, 256, 3, 1, "conv"),
    ("3x3 7 512->512", 7, 512, 512, 3, 1, "conv"),
    ("1x1 56 256->64", 56, 256, 64, 1, 1, "conv"),
    ("1x1 56 64->256", 56, 64, 256, 1, 1, "conv"),
    ("1x1 14 1024->256", 14, 1024, 256, 1, 1, "conv"),
    ("1x1 7 2048->512", 7, 2048, 512, 1, 1, "conv"),
    ("g32 3x3 56 128->128", 56, 128, 128, 3, 1, "g32"),      # ResNeXt-50 32x4d stage 1: 32 groups of 4
    ("dw3x3 112 32", 112, 32, 32, 3, 1, "dw"),
    ("dw3x3/2 112 96", 112, 96, 96, 3, 2, "dw"),
    ("dw3x3 56 144", 56, 144, 144, 3, 1, "dw"),
    ("dw5x5 28 240", 28, 240, 240, 5, 1, "dw"),              # EfficientNet-B0 stage 4
    ("dw7x7 56 96", 56, 96, 96, 7, 1, "dw"),                 # ConvNeXt-T stage 1
    ("sep3x3 19 728->728", 19, 728, 728, 3, 1, "sep"),       # Xception middle flow
    ("3d 3x3x3 16x56 64->64 b2", 56, 64, 64, 3, 1, "3d"),   # C3D / I3D block: depth 16, batch 2
)
DEPTH_3D, BATCH_3D = 16, 2
GROUPS_G32 = 32
QUICK_LAYERS = ("3x3 28 128->128", "1x1 14 1024->256", "dw3x3 56 144")
SMOKE_LAYER = ("smoke 3x3 8 8->8", 8, 8, 8, 3, 1, "conv")
PASSES = ("fwd", "dx", "dw")
_PASS_ALIASES = {"fwd": "fwd", "forward": "fwd", "dx": "dx", "input": "dx", "bwd_input": "dx",
                 "dw": "dw", "filter": "dw", "bwd_filter": "dw"}


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="benchmarks/cpu.py", description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16", "float64"))
    p.add_argument("--accumulation", default=None, choices=("float32", "float16"),
                   help="detconv's accumulation (float16 only with --dtype float16); stock TF has no such option")
    p.add_argument("--peer", default="tf", choices=("tf", "float32"),
                   help="what detconv is timed against: tf.nn (default) or detconv on float32 tensors")
    p.add_argument("--passes", default=",".join(PASSES), help="comma list of fwd, dx, dw (default: all)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 8)")
    p.add_argument("--layers", default=None, help="comma list of substrings selecting layers by name")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per cell (median; default 7, --quick 3)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs before timing (default 2)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads for both (default: TensorFlow's)")
    p.add_argument("--isa", default="auto", help="detconv CPU path: auto, scalar, avx2, avx512")
    p.add_argument("--quick", action="store_true", help="three layers, 3 repeats")
    p.add_argument("--smoke", action="store_true", help="one tiny layer, run once (for tests)")
    p.add_argument("--png", default=None, help="also write a bar chart of the ratios (needs matplotlib)")
    args = p.parse_args(argv)
    try:
        args.passes = [_PASS_ALIASES[s.strip()] for s in args.passes.split(",") if s.strip()]
    except KeyError as e:
        p.error(f"--passes: unknown pass {e.args[0]!r} (use fwd, dx, dw)")
    if args.accumulation == "float16" and args.dtype != "float16":
        p.error("--accumulation float16 needs --dtype float16")
    if args.smoke:
        args.batch = args.batch or 1
        args.repeats = args.repeats or 1
        args.warmup = 0
    elif args.quick:
        args.repeats = args.repeats or 3
    args.batch = args.batch or 8
    args.repeats = args.repeats or 7
    return args


def _select_layers(args):
    if args.smoke:
        return [SMOKE_LAYER]
    layers = list(LAYERS)
    if args.quick and not args.layers:
        layers = [l for l in layers if l[0] in QUICK_LAYERS]
    if args.layers:
        keys = [k.strip() for k in args.layers.split(",") if k.strip()]
        layers = [l for l in layers if any(k in l[0] for k in keys)]
    return layers


def _median_ms_pair(fa, fb, warmup, repeats):
    """Medians (ms) of fa and fb, timed alternately (a-b, then b-a) so drift and neighbours hit both alike,
    the median of the paired ratios a/b (each repeat's two runs are adjacent in time) and the ratio of
    the fastest runs."""
    for _ in range(warmup):
        fa()
        fb()
    ta, tb = [], []
    for k in range(repeats):
        for fn, times in ((fa, ta), (fb, tb)) if k % 2 == 0 else ((fb, tb), (fa, ta)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    ratio = statistics.median(a / b for a, b in zip(ta, tb)) if all(tb) else None
    fastest = min(ta) / min(tb) if all(tb) else None
    return 1e3 * statistics.median(ta), 1e3 * statistics.median(tb), ratio, fastest


def _median_ms(fn, warmup, repeats):
    return _median_ms_pair(fn, lambda: None, warmup, repeats)[0]


def _cells(tf, dc, layer, batch, dtype, accumulation, rng):
    """{pass: (flops, tf_fn, dc_fn)} for one layer; each fn returns a tensor (CPU eager ops run synchronously)."""
    import numpy as np

    name, H, C, Co, K, s, kind = layer

    def t(shape, scale=1.0):
        return tf.cast(tf.constant((rng.standard_normal(shape) * scale).astype(np.float32)), dtype)

    OH = -(-H // s)
    acc = dict(accumulation=accumulation)
    st4 = [1, s, s, 1]
    if kind == "3d":
        D, n = DEPTH_3D, BATCH_3D
        OD = -(-D // s)
        x, dy = t((n, D, H, H, C)), t((n, OD, OH, OH, Co))
        f = t((K, K, K, C, Co), 1 / math.sqrt(K ** 3 * C))
        x_shape, f_shape, st5 = tf.constant([n, D, H, H, C]), tf.constant([K, K, K, C, Co]), [1, s, s, s, 1]
        flops = 2 * n * OD * OH * OH * Co * K ** 3 * C
        tf_fns = {
            "fwd": lambda: tf.nn.conv3d(x, f, st5, "SAME"),
            "dx": lambda: tf.raw_ops.Conv3DBackpropInputV2(input_sizes=x_shape, filter=f, out_backprop=dy,
                                                           strides=st5, padding="SAME"),
            "dw": lambda: tf.raw_ops.Conv3DBackpropFilterV2(input=x, filter_sizes=f_shape, out_backprop=dy,
                                                            strides=st5, padding="SAME"),
        }
        dc_fns = {
            "fwd": lambda: dc.conv3d(x, f, s, "SAME", **acc),
            "dx": lambda: dc.conv3d_backprop_input(x_shape, f, dy, s, "SAME", **acc),
            "dw": lambda: dc.conv3d_backprop_filter(x, f_shape, dy, s, "SAME", **acc),
        }
        return {p: (flops, tf_fns[p], dc_fns[p]) for p in PASSES}
    x, dy = t((batch, H, H, C)), t((batch, OH, OH, Co))
    x_shape = tf.constant([batch, H, H, C], tf.int32)
    if kind == "dw":
        f_dw = t((K, K, C, 1))
        dw_shape = tf.constant([K, K, C, 1], tf.int32)
        flops = 2 * batch * OH * OH * C * K * K
        tf_fns = {
            "fwd": lambda: tf.nn.depthwise_conv2d(x, f_dw, st4, "SAME"),
            "dx": lambda: tf.nn.depthwise_conv2d_backprop_input(x_shape, f_dw, dy, st4, "SAME"),
            "dw": lambda: tf.nn.depthwise_conv2d_backprop_filter(x, dw_shape, dy, st4, "SAME"),
        }
        dc_fns = {
            "fwd": lambda: dc.depthwise_conv2d(x, f_dw, st4, "SAME", **acc),
            "dx": lambda: dc.depthwise_conv2d_backprop_input(x_shape, f_dw, dy, s, "SAME", **acc),
            "dw": lambda: dc.depthwise_conv2d_backprop_filter(x, dw_shape, dy, s, "SAME", **acc),
        }
    elif kind == "sep":
        # depthwise (K x K, multiplier 1) then pointwise; dx and dw chain the two layers' gradients
        f_dw, f_pw = t((K, K, C, 1)), t((1, 1, C, Co), 1 / math.sqrt(C))
        dw_shape, pw_shape = tf.constant([K, K, C, 1]), tf.constant([1, 1, C, Co])
        mid_shape = tf.constant([batch, OH, OH, C])
        mid = tf.nn.depthwise_conv2d(x, f_dw, st4, "SAME")
        flops = 2 * batch * OH * OH * C * (K * K + Co)

        def tf_dmid():
            return tf.raw_ops.Conv2DBackpropInput(input_sizes=mid_shape, filter=f_pw, out_backprop=dy,
                                                  strides=[1, 1, 1, 1], padding="VALID")

        def dc_dmid():
            return dc.conv2d_backprop_input(mid_shape, f_pw, dy, 1, "VALID", **acc)

        tf_fns = {
            "fwd": lambda: tf.nn.separable_conv2d(x, f_dw, f_pw, st4, "SAME"),
            "dx": lambda: tf.nn.depthwise_conv2d_backprop_input(x_shape, f_dw, tf_dmid(), st4, "SAME"),
            "dw": lambda: (tf.raw_ops.Conv2DBackpropFilter(input=mid, filter_sizes=pw_shape, out_backprop=dy,
                                                           strides=[1, 1, 1, 1], padding="VALID"),
                           tf.nn.depthwise_conv2d_backprop_filter(x, dw_shape, tf_dmid(), st4, "SAME"))[1],
        }
        dc_fns = {
            "fwd": lambda: dc.separable_conv2d(x, f_dw, f_pw, s, "SAME", **acc),
            "dx": lambda: dc.depthwise_conv2d_backprop_input(x_shape, f_dw, dc_dmid(), s, "SAME", **acc),
            "dw": lambda: (dc.conv2d_backprop_filter(mid, pw_shape, dy, 1, "VALID", **acc),
                           dc.depthwise_conv2d_backprop_filter(x, dw_shape, dc_dmid(), s, "SAME", **acc))[1],
        }
    else:
        Cg = C // GROUPS_G32 if kind == "g32" else C  # input channels per group
        f = t((K, K, Cg, Co), 1 / math.sqrt(K * K * Cg))
        f_shape = tf.constant([K, K, Cg, Co], tf.int32)
        flops = 2 * batch * OH * OH * Co * K * K * Cg
        tf_fns = {
            "fwd": lambda: tf.nn.conv2d(x, f, s, "SAME"),
            "dx": lambda: tf.raw_ops.Conv2DBackpropInput(input_sizes=x_shape, filter=f, out_backprop=dy,
                                                         strides=st4, padding="SAME"),
            "dw": lambda: tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=f_shape, out_backprop=dy,
                                                          strides=st4, padding="SAME"),
        }
        dc_fns = {
            "fwd": lambda: dc.conv2d(x, f, s, "SAME", **acc),
            "dx": lambda: dc.conv2d_backprop_input(x_shape, f, dy, s, "SAME", **acc),
            "dw": lambda: dc.conv2d_backprop_filter(x, f_shape, dy, s, "SAME", **acc),
        }
    return {p: (flops, tf_fns[p], dc_fns[p]) for p in PASSES}


def _rel_diff(tf, a, b):
    """max |a - b| / max |a| in float64: a sanity check that both computed the same thing."""
    a = tf.cast(a, tf.float64)
    b = tf.cast(tf.reshape(b, tf.shape(a)), tf.float64)
    scale = float(tf.reduce_max(tf.abs(a)))
    return float(tf.reduce_max(tf.abs(a - b))) / scale if scale > 0 else 0.0


def _fmt_ms(v):
    return "n/a" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")


def _table(rows, args, tf, dc, threads, elapsed, peak):
    pn = "tf" if args.peer == "tf" else "f32"  # the peer column's name
    head = ("layer", "pass", f"{pn} ms", "detconv ms", "ratio", "fastest", f"{pn} GFLOP/s", "dc GFLOP/s", f"{pn} %pk",
            "dc %pk", "rel.diff")
    lines = [tuple(head)]
    for r in rows:
        lines.append((r["layer"], r["pass"], _fmt_ms(r["tf_ms"]), _fmt_ms(r["dc_ms"]),
                      "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}",
                      "n/a" if r["fastest"] is None else f"{r['fastest']:.2f}",
                      "n/a" if r["tf_ms"] is None else f"{r['flops'] / r['tf_ms'] / 1e6:.1f}",
                      "n/a" if r["dc_ms"] is None else f"{r['flops'] / r['dc_ms'] / 1e6:.1f}",
                      "n/a" if r["tf_ms"] is None else f"{100 * r['flops'] / r['tf_ms'] / 1e6 / peak:.0f}",
                      "n/a" if r["dc_ms"] is None else f"{100 * r['flops'] / r['dc_ms'] / 1e6 / peak:.0f}",
                      r["diff"]))
    widths = [max(len(l[i]) for l in lines) for i in range(len(head))]
    out = []
    for i, l in enumerate(lines):
        out.append("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(l, widths))))
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    out.append("")
    if ratios:
        gm = statistics.geometric_mean(ratios)
        peer = "tf" if args.peer == "tf" else "detconv float32"
        out.append(f"geometric mean of ratios ({peer}/detconv, >1 = detconv faster): {gm:.3f} over {len(ratios)} cells")
        for p in args.passes:
            rp = [r["ratio"] for r in rows if r["ratio"] and r["pass"] == p]
            if rp:
                out.append(f"  {p:>3}: {statistics.geometric_mean(rp):.3f}")
        fast = [r["fastest"] for r in rows if r["fastest"]]
        out.append(f"geometric mean of the fastest runs' ratios: {statistics.geometric_mean(fast):.3f}")
    out.append(f"batch {args.batch}, {args.dtype}, detconv accumulation {args.accumulation or 'default'}, "
               f"detconv CPU path {dc.cpu_isa()}, intra-op threads {threads}, median of {args.repeats} after "
               f"{args.warmup} warm-up, TensorFlow {tf.__version__} (oneDNN {os.environ.get('TF_ENABLE_ONEDNN_OPTS') or 'default'}), {elapsed:.0f} s")
    out.append(f"%pk: fraction of the measured float32 FMA peak, {peak:.1f} GFLOP/s "
               f"({dc.cpu_isa()} fma loop on {_peak_threads(args)} threads)")
    return "\n".join(out)


def _progress(done, total, what):
    """A progress bar on a terminal (one line, redrawn), plain lines otherwise; on stderr."""
    width = 30
    filled = width * done // max(total, 1)
    bar = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {what}"
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + bar + ("\n" if done == total else ""))
    else:
        sys.stderr.write(bar + "\n")
    sys.stderr.flush()


def _peak_threads(args):
    return args.threads or os.cpu_count() or 1


def _png(path, rows):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--png: matplotlib is not installed; {path} not written", file=sys.stderr)
        return
    rows = [r for r in rows if r["ratio"]]
    labels = [f"{r['layer']} {r['pass']}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(rows) + 1.5))
    ax.barh(range(len(rows)), [r["ratio"] for r in rows],
            color=["tab:green" if r["ratio"] >= 1 else "tab:red" for r in rows])
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("tf.nn time / detconv time (>1: detconv faster)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when `detconv bench` loads this file
    import cpu_peer

    tf = cpu_peer.tensorflow(args.threads)
    import detconv as dc

    if args.isa != "auto" and not dc.set_cpu_isa(args.isa):
        print(f"detconv: this CPU cannot run the {args.isa} path (has: {dc.cpu_isa(supported=True)})",
              file=sys.stderr)
        return 2
    threads = args.threads or f"TensorFlow's default ({os.cpu_count()} cores)"
    dtype = tf.as_dtype(args.dtype)
    rng = np.random.default_rng(0)
    start = time.time()
    rows = []
    layers = _select_layers(args)
    total = len(layers) * len(args.passes)
    with tf.device("/CPU:0"):
        for layer in layers:
            seed = int(rng.integers(1 << 31))
            cells = _cells(tf, dc, layer, args.batch, dtype, args.accumulation, np.random.default_rng(seed))
            if args.peer == "float32":  # the same values as float32 tensors, through detconv
                peer = _cells(tf, dc, layer, args.batch, tf.float32, None, np.random.default_rng(seed))
                cells = {p: (c[0], peer[p][2], c[2]) for p, c in cells.items()}
            for p in args.passes:
                flops, tf_fn, dc_fn = cells[p]
                row = {"layer": layer[0], "pass": p, "flops": flops, "tf_ms": None, "dc_ms": None,
                       "ratio": None, "fastest": None, "diff": "-"}
                tf_ok = dc_ok = True
                try:
                    tf_fn()
                except Exception as e:  # noqa: BLE001 - e.g. a dtype stock TF has no CPU kernel for
                    row["diff"], tf_ok = f"{args.peer}: {type(e).__name__}", False
                try:
                    dc_fn()
                except Exception as e:  # noqa: BLE001
                    row["diff"], dc_ok = f"detconv: {type(e).__name__}: {str(e)[:60]}", False
                if tf_ok and dc_ok:
                    row["tf_ms"], row["dc_ms"], row["ratio"], row["fastest"] = _median_ms_pair(
                        tf_fn, dc_fn, args.warmup, args.repeats)
                elif tf_ok:
                    row["tf_ms"] = _median_ms(tf_fn, args.warmup, args.repeats)
                elif dc_ok:
                    row["dc_ms"] = _median_ms(dc_fn, args.warmup, args.repeats)
                if row["ratio"] is not None:
                    row["diff"] = f"{_rel_diff(tf, tf_fn(), dc_fn()):.1e}"
                rows.append(row)
                _progress(len(rows), total, f"{layer[0]} {p}: tf {_fmt_ms(row['tf_ms'])} ms, detconv "
                          f"{_fmt_ms(row['dc_ms'])} ms")
    # Best of five: one probe on a shared machine can land on a busy moment (seen: 181 vs 224 GFLOP/s).
    peak = max(dc.cpu_fma_peak_gflops(_peak_threads(args)) for _ in range(5))
    print(_table(rows, args, tf, dc, threads, time.time() - start, peak))
    if args.png:
        _png(args.png, rows)
    failed = [r for r in rows if r["dc_ms"] is None]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

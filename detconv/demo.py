"""`detconv demo`: the seeds' scenarios, tf.nn.conv2d and detconv side by side.

Every scenario asks one question of both: does a result keep its bits when
something that should not matter changes (the input's length, the batch it
sits in, the crop, the thread count, eager or graph, the layout)? The table
says what each did on every device present. Stock TensorFlow is reported as
it behaves on this machine: where it happens to be stable, the row says so.

Usage: ``python -m detconv demo [--quick]`` or ``detconv demo``.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

from detconv._loader import child_python_kwargs

SEED_FILTER = [-0.7313, -1.1043, 1.8492, 1.3007, -0.1033]
SEED_BIAS = 0.0401

# Row names, in table order (tests look for each one).
SCENARIOS = (
    "input length (seed filter)",
    "input length (8 channels)",
    "batch split",
    "crop",
    "thread count",
    "eager/function/gradients",
    "fp16 accumulation",
    "NCHW layout",
    "bit-equal to reference",
    "small CNN trained twice",
)

_NOTES = {
    "input length (seed filter)": "conv1d, filter {f}, bias {b}, x = 10*range(T); each T's outputs are "
                                  "compared with the longest T's first T-4 outputs (same receptive fields)",
    "input length (8 channels)": "as above with 8 in/8 out channels and random data",
    "batch split": "3x3 SAME conv: every image run alone and in two half batches vs the full batch",
    "crop": "3x3 VALID conv: random crops of the input vs the matching window of the full output",
    "thread count": "fwd, input grad, filter grad of 3x3 convs in subprocesses with intra-op threads 1 and 2",
    "eager/function/gradients": "one conv: eager (x5), tf.function, and tf.function fetching "
                                            "the forward together with its gradients",
    "fp16 accumulation": "x = 65519 x4 (float16, i.e. 65504), filter [65519, -65519]: exact answer 0; "
                         "a float16 running sum overflows to inf",
    "NCHW layout": "the same conv (forward and gradients) in NCHW and NHWC",
    "bit-equal to reference": "forward, input, filter and bias gradients (tf.GradientTape) vs the "
                              "NumPy detconv.reference: strides, dilations, groups, padding, all dtypes",
    "small CNN trained twice": "a small CNN trained twice from one seed in two processes; final weight hashes",
}


class Row:
    def __init__(self, scenario, device, tf_text, dc_text, held):
        self.scenario, self.device, self.tf_text, self.dc_text = scenario, device, tf_text, dc_text
        self.held = held  # True, False, or None (skipped)


# ------------------------------------------------------------------ helpers
def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(_bits(a), _bits(b))


def _hash(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return h.hexdigest()[:12]


def _err(e):
    msg = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]", "", str(e)).strip()  # drop TF's node/op tags
    msg = msg.splitlines()[0].strip().split(". ")[0] if msg else ""
    return f"{type(e).__name__}: {msg[:100]}"


def _changed(n, total, unit, how):
    return f"{n} of {total} {unit} changed bits{how}"


def _verdict_tf(n, total, unit, how=""):
    return _changed(n, total, unit, how) + (" (stable on this machine)" if n == 0 else "")


def _verdict_dc(n, total, unit, how=""):
    return f"identical: all {total} {unit}" if n == 0 else _changed(n, total, unit, how)


def _place(tf, dev, t):
    """The tensor's device type matches dev's (soft placement could silently fall back to CPU)."""
    return dev.split(":")[0].lstrip("/").upper() in t.device.upper()


class _NoKernel(Exception):
    pass


def _dc_on(tf, dev, t):
    if tf.executing_eagerly() and not _place(tf, dev, t):  # graph tensors have no device yet
        raise _NoKernel(f"no detconv kernel on {dev} in this build (ran on {t.device.split('/')[-1]})")
    return t


# ------------------------------------------------------------------ scenarios
def _input_length(tf, dc, dev, quick, channels):
    Ts = list(range(5, 101 if quick else 401)) + ([1000, 5000] if quick else [1000, 5000, 20000])
    tmax = Ts[-1]
    if channels == 1:
        f = np.array(SEED_FILTER, np.float32).reshape(5, 1, 1)
        b = np.array([SEED_BIAS], np.float32)
        x = (10 * np.arange(tmax, dtype=np.float32)).reshape(1, tmax, 1)
    else:
        rng = np.random.default_rng(11)
        f = rng.standard_normal((5, channels, channels)).astype(np.float32)
        b = rng.standard_normal(channels).astype(np.float32)
        x = rng.standard_normal((1, tmax, channels)).astype(np.float32)

    def count(fn):
        outs = {T: _bits(fn(x[:, :T]))[0] for T in Ts}
        return sum(not np.array_equal(outs[T], outs[tmax][:T - 4]) for T in Ts[:-1])

    n = len(Ts) - 1
    tf_n = count(lambda v: tf.nn.bias_add(tf.nn.conv1d(v, f, 1, "VALID"), b).numpy())
    dc_n = count(lambda v: _dc_on(tf, dev, dc.conv1d(v, f, 1, "VALID", bias=b)).numpy())
    return _verdict_tf(tf_n, n, "lengths"), _verdict_dc(dc_n, n, "lengths"), dc_n == 0


def _batch_split(tf, dc, dev, quick):
    N = 64 if quick else 256
    rng = np.random.default_rng(12)
    x = rng.standard_normal((N, 16, 16, 16)).astype(np.float32)
    f = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)

    def count(conv):
        full = _bits(conv(x))
        alone = sum(not np.array_equal(_bits(conv(x[i:i + 1]))[0], full[i]) for i in range(N))
        halves = np.concatenate([_bits(conv(x[:N // 2])), _bits(conv(x[N // 2:]))])
        split = int(np.sum(np.any(halves != full, axis=(1, 2, 3))))
        return alone, split

    def text(alone, split, stock):
        if alone == 0 and split == 0:
            return f"identical: all {N} images, alone and in half batches" if not stock else \
                f"0 of {N} images changed bits (stable on this machine)"
        return f"{alone} of {N} images alone, {split} of {N} in half batches changed bits"

    tfa, tfs = count(lambda v: tf.nn.conv2d(v, f, 1, "SAME").numpy())
    dca, dcs = count(lambda v: _dc_on(tf, dev, dc.conv2d(v, f, 1, "SAME")).numpy())
    return text(tfa, tfs, True), text(dca, dcs, False), dca == 0 and dcs == 0


def _crop(tf, dc, dev, quick):
    rng = np.random.default_rng(13)
    H = 24
    x = rng.standard_normal((4, H, H, 16)).astype(np.float32)
    f = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    crops = []
    for _ in range(4 if quick else 10):
        t, l = rng.integers(0, 8, 2)
        h, w = rng.integers(5, H - 8, 2)
        crops.append((int(t), int(l), int(h), int(w)))

    def count(conv):
        full = _bits(conv(x))
        bad = 0
        for t, l, h, w in crops:
            part = _bits(conv(x[:, t:t + h, l:l + w]))
            bad += not np.array_equal(part, full[:, t:t + h - 2, l:l + w - 2])
        return bad

    tf_n = count(lambda v: tf.nn.conv2d(v, f, 1, "VALID").numpy())
    dc_n = count(lambda v: _dc_on(tf, dev, dc.conv2d(v, f, 1, "VALID")).numpy())
    return _verdict_tf(tf_n, len(crops), "crops"), _verdict_dc(dc_n, len(crops), "crops"), dc_n == 0


_THREAD_SHAPES = ((1, 4, 2048, 8), (8, 14, 64, 64), (4, 28, 32, 32), (2, 7, 512, 512))


def _thread_worker(threads, quick):
    """Runs in a fresh process: prints {name: hash} for stock and detconv results."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import detconv as dc

    rng = np.random.default_rng(14)
    out = {}
    with tf.device("/CPU:0"):
        for N, H, C, O in _THREAD_SHAPES[:3 if quick else 4]:
            x = tf.constant(rng.standard_normal((N, H, H, C)).astype(np.float32))
            f = tf.constant(rng.standard_normal((3, 3, C, O)).astype(np.float32))
            dy = tf.constant(rng.standard_normal((N, H, H, O)).astype(np.float32))
            for name, conv in (("tf", tf.nn.conv2d), ("dc", dc.conv2d)):
                with tf.GradientTape() as tape:
                    tape.watch([x, f])
                    y = conv(x, f, 1, "SAME")
                dx, df = tape.gradient(y, [x, f], output_gradients=dy)
                for p, v in (("fwd", y), ("dx", dx), ("dw", df)):
                    out[f"{name} {N}x{H}x{H}x{C}->{O} {p}"] = _hash(v.numpy())
    print(json.dumps(out))


class _ThreadRuns:
    """Starts the two thread-count worker processes at once, so their TensorFlow start-ups overlap the rows."""

    def __init__(self, quick):
        self.procs = []
        for n in (1, 2):
            code = f"from detconv.demo import _thread_worker; _thread_worker({n}, {quick})"
            self.procs.append(subprocess.Popen([sys.executable, "-c", code], **child_python_kwargs(),
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def results(self):
        runs = []
        for p in self.procs:
            stdout, stderr = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"thread worker failed: {stderr.strip().splitlines()[-1:]}")
            runs.append(json.loads(stdout.strip().splitlines()[-1]))
        return runs


def _threads(tf, dc, dev, quick, runs):
    a, b = runs.results()
    tf_keys = [k for k in a if k.startswith("tf ")]
    dc_keys = [k for k in a if k.startswith("dc ")]
    tf_n = sum(a[k] != b[k] for k in tf_keys)
    dc_n = sum(a[k] != b[k] for k in dc_keys)
    how = " between 1 and 2 threads"
    return (_verdict_tf(tf_n, len(tf_keys), "results", how), _verdict_dc(dc_n, len(dc_keys), "results", how),
            dc_n == 0)


def _modes(tf, dc, dev, quick):
    rng = np.random.default_rng(15)
    x = tf.constant(rng.standard_normal((8, 14, 14, 32)).astype(np.float32))
    f = tf.constant(rng.standard_normal((3, 3, 32, 32)).astype(np.float32))

    def variants(conv):
        eager = [conv(x, f).numpy() for _ in range(5)]
        graph = tf.function(lambda a, b: conv(a, b))(x, f).numpy()

        @tf.function
        def with_grads(a, b):
            with tf.GradientTape() as tape:
                tape.watch([a, b])
                y = conv(a, b)
                loss = tf.reduce_sum(y * y)
            return (y,) + tuple(tape.gradient(loss, [a, b]))

        together = with_grads(x, f)[0].numpy()
        return sum(not _same(v, eager[0]) for v in eager[1:] + [graph, together])

    n = 6
    tf_n = variants(lambda a, b: tf.nn.conv2d(a, b, 1, "SAME"))
    dc_n = variants(lambda a, b: _dc_on(tf, dev, dc.conv2d(a, b, 1, "SAME")))
    how = " vs the first eager run"
    return _verdict_tf(tf_n, n, "runs", how), _verdict_dc(dc_n, n, "runs", how), dc_n == 0


def _fp16(tf, dc, dev, quick):
    x = np.full((1, 4, 1), 65519, np.float16)
    f = np.array([65519, -65519], np.float16).reshape(2, 1, 1)

    def show(v):
        v = np.unique(np.asarray(v, np.float32))
        return "/".join(f"{e:g}" for e in v)

    try:
        y = tf.nn.conv1d(x, f, 1, "VALID").numpy()
        tf_text = (f"{show(y)}: accumulated wider than fp16, with no way to ask otherwise on CPU (on GPU "
                   f"the env var TF_FP16_CONV_USE_FP32_COMPUTE decides)")
    except Exception as e:  # noqa: BLE001 - report whatever stock TF does
        tf_text = _err(e)
    y16 = _dc_on(tf, dev, dc.conv1d(x, f, 1, "VALID", accumulation="float16")).numpy()
    y32 = _dc_on(tf, dev, dc.conv1d(x, f, 1, "VALID", accumulation="float32")).numpy()
    held = bool(np.all(np.isposinf(y16.astype(np.float32))) and np.all(y32 == 0))
    return tf_text, f'{show(y16)} with accumulation="float16", {show(y32)} with "float32"', held


def _nchw(tf, dc, dev, quick):
    rng = np.random.default_rng(16)
    x = tf.constant(rng.standard_normal((4, 13, 11, 12)).astype(np.float32))  # NHWC
    f = tf.constant(rng.standard_normal((3, 3, 6, 8)).astype(np.float32))  # 2 groups
    b = tf.constant(rng.standard_normal(8).astype(np.float32))
    dy = tf.constant(rng.standard_normal((4, 7, 6, 8)).astype(np.float32))
    xc = tf.transpose(x, [0, 3, 1, 2])
    dyc = tf.transpose(dy, [0, 3, 1, 2])

    def stock():
        try:
            y = tf.nn.conv2d(xc, f[:, :, :, :], 2, "SAME", data_format="NCHW")
        except Exception as e:  # noqa: BLE001 - report whatever stock TF does
            return _err(e)
        ref = tf.transpose(tf.nn.conv2d(x, f, 2, "SAME"), [0, 3, 1, 2])
        return "identical to NHWC" if _same(y.numpy(), ref.numpy()) else "bits differ from NHWC"

    def run(inp, grad, fmt):
        with tf.GradientTape() as tape:
            tape.watch([inp, f, b])
            y = _dc_on(tf, dev, dc.conv2d(inp, f, 2, "SAME", data_format=fmt, bias=b))
        g = tape.gradient(y, [inp, f, b], output_gradients=grad)
        return [y.numpy()] + [v.numpy() for v in g]

    hy, hx, hf, hb = run(x, dy, "NHWC")
    cy, cx, cf, cb = run(xc, dyc, "NCHW")
    pairs = ((hy, cy.transpose(0, 2, 3, 1)), (hx, cx.transpose(0, 2, 3, 1)), (hf, cf), (hb, cb))
    bad = sum(not _same(a, c) for a, c in pairs)
    return stock(), ("NCHW == NHWC bits (forward, dx, dw, db)" if bad == 0 else
                     f"{bad} of 4 results differ between NCHW and NHWC"), bad == 0


def _reference_cases(quick):
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    # (dtype, accumulation, x shape, f shape, strides, padding, dilations, bias)
    cases = [
        (np.float32, None, (2, 9, 10, 8), (3, 3, 4, 6), 2, "SAME", 1, True),
        (np.float16, "float16", (2, 9, 9, 4), (3, 2, 4, 5), 1, "VALID", 2, True),
        (np.float16, None, (1, 8, 7, 6), (2, 3, 3, 6), (1, 2), ((1, 0), (2, 1)), 1, True),
        (bf16, None, (2, 7, 8, 4), (3, 3, 4, 4), 1, "SAME", (2, 1), False),
        (np.float64, None, (2, 8, 8, 5), (3, 3, 1, 10), 2, "SAME", 1, True),  # depthwise, M = 2
    ]
    if not quick:
        cases.append((np.float32, None, (3, 33, 31, 16), (3, 3, 16, 16), 1, "SAME", 1, True))  # dw chunks
    return cases


def _to_tf_padding(padding):
    if isinstance(padding, str):
        return padding
    return [[0, 0], list(padding[0]), list(padding[1]), [0, 0]]


def _reference(tf, dc, dev, quick):
    from detconv import reference

    rng = np.random.default_rng(17)
    total = bad = 0
    for dtype, acc, xs, fs, st, pad, dil, use_bias in _reference_cases(quick):
        x = rng.standard_normal(xs).astype(np.float32).astype(dtype)
        f = (rng.standard_normal(fs) * 0.5).astype(np.float32).astype(dtype)
        b = rng.standard_normal(fs[3]).astype(np.float32).astype(dtype) if use_bias else None
        y_ref = reference.conv2d(x, f, st, pad, dil, bias=b, accumulation=acc)
        dy = rng.standard_normal(y_ref.shape).astype(np.float32).astype(dtype)
        tx, tf_f = tf.constant(x), tf.constant(f)
        tb = tf.constant(b) if use_bias else None
        with tf.GradientTape() as tape:
            tape.watch([tx, tf_f] + ([tb] if use_bias else []))
            y = _dc_on(tf, dev, dc.conv2d(tx, tf_f, st, _to_tf_padding(pad), dilations=dil, bias=tb,
                                          accumulation=acc))
        grads = tape.gradient(y, [tx, tf_f] + ([tb] if use_bias else []), output_gradients=tf.constant(dy))
        got = [y.numpy()] + [g.numpy() for g in grads]
        want = [y_ref,
                reference.conv2d_backprop_input(dy, f, xs, st, pad, dil, accumulation=acc),
                reference.conv2d_backprop_filter(x, dy, fs, st, pad, dil, accumulation=acc)]
        if use_bias:
            want.append(reference.bias_grad(dy, accumulation=acc))
        total += len(want)
        bad += sum(not _same(g, w) for g, w in zip(got, want))

    # Stock TF against the reference: a plain float32 conv, counted per output.
    x = rng.standard_normal((2, 16, 16, 32)).astype(np.float32)
    f = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    try:
        yt = tf.nn.conv2d(x, f, 1, "SAME").numpy()
        yr = reference.conv2d(x, f, 1, "SAME")
        diff = int(np.sum(_bits(yt) != _bits(yr)))
        tf_text = f"{diff} of {yr.size} float32 outputs differ from the reference (another summation order)"
    except Exception as e:  # noqa: BLE001
        tf_text = _err(e)
    dc_text = (f"bit-equal: {total} of {total} results (fwd, dx, dw, db; 4 dtypes)" if bad == 0 else
               f"{bad} of {total} results differ from the reference")
    return tf_text, dc_text, bad == 0


class _Training:
    """Trains the demo CNN in the background (two processes) while the other rows run."""

    def __init__(self):
        self.result = self.error = None
        try:
            from detconv import _train_demo
        except ImportError:
            self.fn = None
            return
        self.fn = getattr(_train_demo, "train_twice_hashes", None)
        if self.fn is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self):
        try:
            self.result = (self.fn(False), self.fn(True))
        except Exception as e:  # noqa: BLE001 - shown in the table
            self.error = e

    def row(self, device):
        if self.fn is None:
            return Row(SCENARIOS[9], device, "skipped (not available)", "skipped (not available)", None)
        self.thread.join()
        if self.error is not None:
            return Row(SCENARIOS[9], device, "-", f"error: {_err(self.error)}", False)
        (s1, s2), (d1, d2) = self.result
        tf_text = (f"same weights ({s1}) (stable on this machine)" if s1 == s2 else
                   f"different weights ({s1} vs {s2})")
        dc_text = f"same weights ({d1})" if d1 == d2 else f"different weights ({d1} vs {d2})"
        return Row(SCENARIOS[9], device, tf_text, dc_text, d1 == d2)


# ------------------------------------------------------------------ table
def _format(rows, widths=(max(len(s) for s in SCENARIOS), 6, 44, 44, 6)):
    head = ("scenario", "device", "tf.nn.conv2d", "detconv", "held")
    lines = []

    def emit(cells):
        wrapped = [textwrap.wrap(c, w) or [""] for c, w in zip(cells, widths)]
        for i in range(max(len(c) for c in wrapped)):
            lines.append(" | ".join((c[i] if i < len(c) else "").ljust(w) for c, w in zip(wrapped, widths))
                         .rstrip())

    emit(head)
    lines.append("-+-".join("-" * w for w in widths))
    for r in rows:
        emit((r.scenario, r.device, r.tf_text, r.dc_text,
              {True: "yes", False: "FAILED", None: "skip"}[r.held]))
    return "\n".join(lines)


def run_demo(out=sys.stdout, quick=False):
    """Runs every scenario on every device present and prints the table; True if every detconv row held."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.time()
    import tensorflow as tf

    import detconv as dc

    training = _Training()  # starts its two processes now, so they overlap the rows below
    thread_runs = _ThreadRuns(quick)
    gpus = tf.config.list_physical_devices("GPU")
    devices = ["/CPU:0"] + [f"/GPU:{i}" for i in range(len(gpus))]
    print(f"detconv {dc.__version__} (order version {dc.ORDER_VERSION}), TensorFlow {tf.__version__}, "
          f"CPU path {dc.cpu_isa()}, devices: {', '.join(d.strip('/') for d in devices)}"
          f"{' (quick)' if quick else ''}", file=out)
    print(file=out)
    scenarios = [
        (SCENARIOS[0], lambda *a: _input_length(*a, channels=1), False),
        (SCENARIOS[1], lambda *a: _input_length(*a, channels=8), False),
        (SCENARIOS[2], _batch_split, False),
        (SCENARIOS[3], _crop, False),
        (SCENARIOS[4], lambda *a: _threads(*a, runs=thread_runs), True),  # intra-op threads are a CPU matter
        (SCENARIOS[5], _modes, False),
        (SCENARIOS[6], _fp16, False),
        (SCENARIOS[7], _nchw, False),
        (SCENARIOS[8], _reference, False),
    ]
    rows = []
    for dev in devices:
        label = dev.strip("/").split(":")[0] + (dev.split(":")[1] if dev.startswith("/GPU") else "")
        for name, fn, cpu_only in scenarios:
            if cpu_only and not dev.startswith("/CPU"):
                continue
            try:
                with tf.device(dev):
                    tf_text, dc_text, held = fn(tf, dc, dev, quick)
            except _NoKernel as e:
                tf_text, dc_text, held = "-", f"skipped ({e})", None
            except Exception as e:  # noqa: BLE001 - a crash is a failed row, shown in the table
                tf_text, dc_text, held = "-", f"error: {_err(e)}", False
            rows.append(Row(name, label, tf_text, dc_text, held))
    rows.append(training.row("CPU"))

    print(_format(rows), file=out)
    print(file=out)
    for name in SCENARIOS:
        print(f"  {name}: {_NOTES[name].format(f=SEED_FILTER, b=SEED_BIAS)}", file=out)
    ok = all(r.held is not False for r in rows)
    failed = [f"{r.scenario} ({r.device})" for r in rows if r.held is False]
    print(file=out)
    print(f"detconv held in every row ({time.time() - start:.0f} s)" if ok else
          f"detconv FAILED: {', '.join(failed)}", file=out)
    return ok


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(prog="detconv demo", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (for tests)")
    args = p.parse_args(argv)
    return 0 if run_demo(quick=args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())

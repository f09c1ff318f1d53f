"""Times one Keras training step of stock models against their detconv.keras.convert() copies (CPU).

What a user feels: a whole `train_on_batch` step (forward, every gradient,
the SGD update, Keras and TensorFlow overhead), not one convolution. Both
models live in this one process with the same weights, data and intra-op
threads; their steps alternate, each pair in the other order from the last
(so a noisy neighbour, a clock change or whatever one step leaves in the
caches hits both alike), and each side's time is the median of its steps
after warm-up. ratio = stock time / detconv time (> 1: the converted model
trains faster); paired = the median of the same ratio taken within each pair
of adjacent steps, which a drifting host moves less.
Neither side is XLA-compiled (`jit_compile=False`): XLA cannot compile
detconv's custom ops, and the stock side should run the same graph machinery.

    python benchmarks/keras_fit.py                          # MobileNetV2 and ResNet50, 224x224, batch 8
    python benchmarks/keras_fit.py --models resnet50 --steps 10
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/keras_fit.py --isa avx2   # both sides on AVX2
    python benchmarks/keras_fit.py --smoke                  # a tiny model, two steps (for tests)
    python benchmarks/keras_fit.py --models mobilenetv2 --ops   # and where each step's time goes, by op type

--ops then runs a few more steps of each side under TensorFlow's profiler and
prints, per op type, the milliseconds per step its kernels took (summed over
the threads that ran them: ops of one step can overlap, so a column adds up to
more than the step), with the convolutions' total on each side. It names the
op types where a converted model gains or loses time.
"""

import argparse
import collections
import glob
import os
import re
import statistics
import sys
import tempfile
import time

MODELS = ("mobilenetv2", "resnet50")


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="benchmarks/keras_fit.py", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma list of: " + ", ".join(MODELS))
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    p.add_argument("--classes", type=int, default=1000, help="classifier width (default 1000)")
    p.add_argument("--steps", type=int, default=7, help="timed steps per side (median; default 7)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side first (default 2)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: TensorFlow's)")
    p.add_argument("--isa", default="auto", choices=("auto", "scalar", "avx2", "avx512"), help="detconv CPU path")
    p.add_argument("--ops", action="store_true",
                   help="also profile each side and print milliseconds per step by op type")
    p.add_argument("--ops-steps", type=int, default=3, help="profiled steps per side with --ops (default 3)")
    p.add_argument("--smoke", action="store_true", help="a tiny model, two steps (checks the script runs)")
    args = p.parse_args(argv)
    names = [m.strip().lower() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    for flag in ("batch", "size", "classes", "steps", "ops_steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must be at least 0")
    args.models = names
    return args


def _stock_model(keras, name, size, classes):
    shape = (size, size, 3)
    if name == "mobilenetv2":
        return keras.applications.MobileNetV2(weights=None, input_shape=shape, classes=classes)
    return keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes)


def _smoke_model(keras):
    inputs = keras.Input((16, 16, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.DepthwiseConv2D(3, padding="same")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(h))


def _compiled(keras, model):
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(), jit_compile=False)
    return model


def _time_pair(stock, converted, x, y, warmup, steps):
    """(stock, detconv) median seconds per train_on_batch step, and the median of the pairs' ratios.

    Steps alternate, each pair in the other order from the last."""
    for _ in range(warmup):
        stock.train_on_batch(x, y)
        converted.train_on_batch(x, y)
    times = ([], [])
    for i in range(steps):
        sides = ((0, stock), (1, converted))
        for side, model in sides if i % 2 == 0 else sides[::-1]:
            t0 = time.perf_counter()
            model.train_on_batch(x, y)
            times[side].append(time.perf_counter() - t0)
    paired = statistics.median(a / b for a, b in zip(*times))
    return statistics.median(times[0]), statistics.median(times[1]), paired


# A kernel's trace event is named "<node name>:<op type>" (no spaces, one colon); the executor's own
# events ("ExecutorState::Process", "EagerLocalExecute: __inference...") are not.
_OP_EVENT = re.compile(r"^[^\s:]+:([^\s:]+)$")


def _op_times(tf, model, x, y, steps):
    """Milliseconds per train_on_batch step by op type, from TensorFlow's profiler (host CPU events)."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError as e:
        raise SystemExit(f"keras_fit.py: --ops needs TensorFlow's profiler protos ({e})")
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(steps):
                model.train_on_batch(x, y)
        finally:
            tf.profiler.experimental.stop()
        files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        if not files:
            raise SystemExit("keras_fit.py: --ops: the profiler wrote no trace")
        space = xplane_pb2.XSpace()
        with open(files[0], "rb") as fh:
            space.ParseFromString(fh.read())
    per_type = collections.Counter()
    for plane in space.planes:
        if "/host:CPU" not in plane.name:
            continue
        for line in plane.lines:
            for ev in line.events:
                m = _OP_EVENT.match(plane.event_metadata[ev.metadata_id].name)
                if m:
                    per_type[m.group(1)] += ev.duration_ps / 1e9 / steps
    return per_type


def _is_convolution(op_type):
    return "conv" in op_type.lower()


def _print_ops(name, stock_ops, detconv_ops, top=16):
    print(f"\n{name}: milliseconds per step by op type (TensorFlow profiler, kernels' time summed over threads)")
    print(f"{'op type':<48}  {'stock':>8}  {'detconv':>8}")
    order = sorted(set(stock_ops) | set(detconv_ops), key=lambda k: -max(stock_ops[k], detconv_ops[k]))
    for k in order[:top]:
        print(f"{k[:48]:<48}  {stock_ops[k]:>8.2f}  {detconv_ops[k]:>8.2f}")
    for label, keep in (("all convolution ops (fused ones included)", True), ("all other ops", False)):
        s = sum(v for k, v in stock_ops.items() if _is_convolution(k) == keep)
        d = sum(v for k, v in detconv_ops.items() if _is_convolution(k) == keep)
        print(f"{label:<48}  {s:>8.2f}  {d:>8.2f}")


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    import numpy as np

    import cpu_peer

    tf = cpu_peer.tensorflow(args.threads)
    import keras

    import detconv
    import detconv.keras as dk

    if not detconv.set_cpu_isa(args.isa):
        print(f"keras_fit.py: --isa {args.isa} is not supported on this machine", file=sys.stderr)
        return 2
    if args.smoke:
        args.models, args.batch, args.size, args.steps, args.warmup, args.ops_steps = ["smoke"], 2, 16, 2, 1, 1
    rng = np.random.default_rng(0)
    print(f"{'model':<12}  {'stock s/step':>12}  {'detconv s/step':>14}  {'ratio':>5}  {'paired':>6}  "
          "convolutions swapped")
    profiles = []
    for name in args.models:
        keras.utils.set_random_seed(0)
        if name == "smoke":
            stock, classes = _smoke_model(keras), 10
        else:
            stock, classes = _stock_model(keras, name, args.size, args.classes), args.classes
        converted = dk.convert(stock)
        swapped = len(converted.detconv_report.swapped)
        stock, converted = _compiled(keras, stock), _compiled(keras, converted)
        x = rng.standard_normal((args.batch, args.size, args.size, 3)).astype(np.float32)
        y = rng.integers(0, classes, size=(args.batch,))
        ts, td, paired = _time_pair(stock, converted, x, y, args.warmup, args.steps)
        print(f"{name:<12}  {ts:>12.3f}  {td:>14.3f}  {ts / td:>5.2f}  {paired:>6.2f}  {swapped}", flush=True)
        if args.ops:
            profiles.append((name, _op_times(tf, stock, x, y, args.ops_steps),
                             _op_times(tf, converted, x, y, args.ops_steps)))
    print(f"batch {args.batch}, {args.size}x{args.size} inputs, SGD, median of {args.steps} steps after "
          f"{args.warmup} warm-up, intra-op threads {args.threads or 'TensorFlow default'}, detconv CPU path "
          f"{detconv.cpu_isa()}, TensorFlow {tf.__version__}, Keras {keras.__version__}")
    print("ratio: stock time / detconv time per train_on_batch step (> 1: the converted model is faster); "
          "paired: the median of that ratio over adjacent pairs of steps")
    for name, stock_ops, detconv_ops in profiles:
        _print_ops(name, stock_ops, detconv_ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())

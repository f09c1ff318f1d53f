"""Times one Keras training step of stock models against their detconv.keras.convert() copies (CPU).

What a user feels: a whole `train_on_batch` step (forward, every gradient,
the SGD update, Keras and TensorFlow overhead), not one convolution. Both
models live in this one process with the same weights, data and intra-op
threads; their steps alternate (so a noisy neighbour or a clock change hits
both alike) and each side's time is the median of its steps after warm-up.
ratio = stock time / detconv time (> 1: the converted model trains faster).
Neither side is XLA-compiled (`jit_compile=False`): XLA cannot compile
detconv's custom ops, and the stock side should run the same graph machinery.

    python benchmarks/keras_fit.py                          # MobileNetV2 and ResNet50, 224x224, batch 8
    python benchmarks/keras_fit.py --models resnet50 --steps 10
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/keras_fit.py --isa avx2   # both sides on AVX2
    python benchmarks/keras_fit.py --smoke                  # a tiny model, two steps (for tests)
"""

import argparse
import statistics
import sys
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
    p.add_argument("--smoke", action="store_true", help="a tiny model, two steps (checks the script runs)")
    args = p.parse_args(argv)
    names = [m.strip().lower() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    for flag in ("batch", "size", "classes", "steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be at least 1")
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
    """Median seconds per train_on_batch step: (stock, detconv), steps alternating."""
    for _ in range(warmup):
        stock.train_on_batch(x, y)
        converted.train_on_batch(x, y)
    times = ([], [])
    for _ in range(steps):
        for side, model in enumerate((stock, converted)):
            t0 = time.perf_counter()
            model.train_on_batch(x, y)
            times[side].append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


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
        args.models, args.batch, args.size, args.steps, args.warmup = ["smoke"], 2, 16, 2, 1
    rng = np.random.default_rng(0)
    print(f"{'model':<12}  {'stock s/step':>12}  {'detconv s/step':>14}  {'ratio':>5}  convolutions swapped")
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
        ts, td = _time_pair(stock, converted, x, y, args.warmup, args.steps)
        print(f"{name:<12}  {ts:>12.3f}  {td:>14.3f}  {ts / td:>5.2f}  {swapped}")
    print(f"batch {args.batch}, {args.size}x{args.size} inputs, SGD, median of {args.steps} steps after "
          f"{args.warmup} warm-up, intra-op threads {args.threads or 'TensorFlow default'}, detconv CPU path "
          f"{detconv.cpu_isa()}, TensorFlow {tf.__version__}, Keras {keras.__version__}")
    print("ratio: stock time / detconv time per train_on_batch step (> 1: the converted model is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

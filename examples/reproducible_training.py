"""Reproducible Keras training with detconv: the same weights, bit for bit, run after run.

    python examples/reproducible_training.py            # trains twice in two processes, compares
    python examples/reproducible_training.py --mirrored # the same under MirroredStrategy (2 logical CPUs)

A stock Keras CNN is converted with detconv.keras.convert(); every convolution
(forward, input and filter gradients, bias gradient) then follows detconv's
fixed summation order, so the result does not depend on the device, the
thread count or the run. The data is MNIST-like and generated here.
"""

import argparse
import hashlib
import os
import subprocess
import sys

import numpy as np

SEED = 42


def make_digits(n=512, size=28, classes=10, seed=0):
    """Each class is a fixed set of random strokes; samples are shifted, scaled and noised copies."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) * 2 - 1
    glyphs = []
    for _ in range(classes):
        g = np.zeros((size, size))
        for _ in range(4):
            (cy, cx), (sy, sx) = rng.uniform(-0.5, 0.5, 2), rng.uniform(0.05, 0.3, 2)
            g += np.exp(-((yy - cy) ** 2) / (2 * sy**2) - ((xx - cx) ** 2) / (2 * sx**2))
        glyphs.append(g / g.max())
    labels = rng.integers(0, classes, n)
    x = np.stack([np.roll(glyphs[c], tuple(rng.integers(-3, 4, 2)), (0, 1)) * rng.uniform(0.7, 1.0)
                  + rng.normal(0, 0.1, (size, size)) for c in labels])
    return x[..., None].astype(np.float32), labels.astype(np.int32)


def train(mirrored):
    import tensorflow as tf

    if mirrored:  # two logical CPU devices; must be set before TensorFlow starts
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import detconv.keras

    # detconv covers the convolutions; this makes TensorFlow's other ops deterministic too (matters on GPU).
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(SEED)
    x, y = make_digits()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if mirrored else tf.distribute.get_strategy()
    with strategy.scope():
        stock = keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.DepthwiseConv2D(3, padding="same", activation="relu"),
            keras.layers.Conv2D(16, 1, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ])
        model = detconv.keras.convert(stock)  # same config and weights, deterministic convolutions
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    hist = model.fit(x, y, batch_size=32, epochs=4, shuffle=False, verbose=0)
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    print(f"accuracy {hist.history['accuracy'][-1]:.3f}  weights sha256 {digest[:16]}")
    return digest


def main():
    p = argparse.ArgumentParser(description="Train twice in two processes and compare the weights.")
    p.add_argument("--mirrored", action="store_true", help="train under MirroredStrategy on two logical CPUs")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        train(args.mirrored)
        return 0
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, __file__, "--worker"] + (["--mirrored"] if args.mirrored else [])
    outs = []
    for run in (1, 2):  # one after the other: nothing shared between the runs
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip()
        print(f"run {run}: {out.splitlines()[-1]}")
        outs.append(out.splitlines()[-1].split()[-1])
    same = outs[0] == outs[1]
    print("bit-identical weights" if same else "weights DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

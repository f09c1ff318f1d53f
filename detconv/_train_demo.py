"""A small CNN trained twice from one seed in two processes; final weight hashes compared.

``detconv demo`` calls ``train_twice_hashes(use_detconv)`` for its training row
(detconv layers, with stock Keras beside them). Each of the two runs is its
own Python process, so nothing (graph caches, allocator state, thread pools)
is shared between them; both processes train the detconv model and the stock
model, so the whole comparison costs two TensorFlow start-ups.

Run one process by hand: ``python -m detconv._train_demo [--mirrored]`` prints
a JSON object of hashes.
"""

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys

from detconv._loader import child_python_kwargs

SEED = 1234
IMAGE = 16
CLASSES = 10


def make_data(n=256, size=IMAGE, seed=SEED):
    """MNIST-like data: one smooth random 'glyph' per class, shifted and noised (non-integer floats)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    grid = np.linspace(-1.0, 1.0, size)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    glyphs = []
    for _ in range(CLASSES):
        img = np.zeros((size, size))
        for _ in range(3):  # a few Gaussian strokes per glyph
            cy, cx = rng.uniform(-0.6, 0.6, 2)
            sy, sx = rng.uniform(0.08, 0.35, 2)
            img += np.exp(-((yy - cy) ** 2) / (2 * sy**2) - ((xx - cx) ** 2) / (2 * sx**2))
        glyphs.append(img / img.max())
    labels = rng.integers(0, CLASSES, n)
    images = np.empty((n, size, size, 1), np.float32)
    for i, c in enumerate(labels):
        dy, dx = rng.integers(-2, 3, 2)
        img = np.roll(np.roll(glyphs[c], dy, 0), dx, 1)
        images[i, :, :, 0] = img + rng.normal(0.0, 0.15, (size, size))
    return images, labels.astype(np.int32)


def build_model(use_detconv):
    import keras

    if use_detconv:
        import detconv.keras as layers
    else:
        layers = keras.layers
    return keras.Sequential([
        keras.Input((IMAGE, IMAGE, 1)),
        layers.Conv2D(8, 3, padding="same", activation="relu"),
        layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
        layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(CLASSES),
    ])


def weights_hash(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def train_hash(use_detconv, strategy=None, epochs=2, batch_size=32):
    """Trains the demo CNN once from SEED in this process; returns the hash of its final weights."""
    import keras

    keras.utils.set_random_seed(SEED)
    x, y = make_data()
    scope = strategy.scope() if strategy is not None else _nullcontext()
    with scope:
        model = build_model(use_detconv)
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    return weights_hash(model)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="detconv,stock", help="comma list of detconv, stock")
    p.add_argument("--mirrored", action="store_true",
                   help="also train under MirroredStrategy over two logical CPU devices")
    args = p.parse_args(argv)

    import tensorflow as tf

    if args.mirrored:
        # Must happen before TensorFlow initializes its devices.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    out = {}
    for name in args.models.split(","):
        out[name] = train_hash(name == "detconv")
        if args.mirrored:
            strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
            if strategy.num_replicas_in_sync != 2:
                raise RuntimeError(f"expected 2 replicas, got {strategy.num_replicas_in_sync}")
            out[name + "_mirrored"] = train_hash(name == "detconv", strategy)
    print(json.dumps(out))


def run_processes(args=(), count=2, timeout=300):
    """Runs `python -m detconv._train_demo ARGS` COUNT times concurrently; returns their JSON results."""
    cmd = [sys.executable, "-m", "detconv._train_demo", *args]
    procs = [subprocess.Popen(cmd, **child_python_kwargs(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"training process failed ({proc.returncode}):\n{stderr[-3000:]}")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


@functools.lru_cache(maxsize=None)
def _demo_results(processes):
    if processes:
        return tuple(run_processes(["--models", "detconv,stock"]))
    # Both runs in this process, one after the other, each from a fresh seed.
    return tuple({"detconv": train_hash(True), "stock": train_hash(False)} for _ in range(2))


def train_twice_hashes(use_detconv=True, processes=True):
    """(hash of run 1, hash of run 2): the demo CNN trained twice from one seed.

    processes=True runs each training in its own fresh Python process (both
    at once; about two TensorFlow start-ups of wall time); processes=False
    runs both here, one after the other (faster when TensorFlow is already
    loaded). use_detconv=False gives stock keras.layers beside it; the same
    runs train both models, once per Python session.
    """
    key = "detconv" if use_detconv else "stock"
    first, second = _demo_results(bool(processes))
    return first[key], second[key]


def demo_rows(processes=True):
    """{"detconv": (h1, h2, equal), "stock keras": (h1, h2, equal)} for a report table."""
    rows = {}
    for use in (True, False):
        h1, h2 = train_twice_hashes(use, processes)
        rows["detconv" if use else "stock keras"] = (h1, h2, h1 == h2)
    return rows


if __name__ == "__main__":
    main()

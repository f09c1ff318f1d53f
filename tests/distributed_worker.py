"""One process of tests/test_distributed.py: a small detconv CNN trained for 3 steps with
MultiWorkerMirroredStrategy (a custom loop; worker mode), or the per-worker gradients of step 1 in one
process (single mode). Writes its results to an .npz file.

    python distributed_worker.py worker INDEX PORT0 PORT1 OUT.npz
    python distributed_worker.py single OUT.npz
"""

import json
import os
import sys

import numpy as np

mode, out = sys.argv[1], sys.argv[-1]
if mode == "worker":
    index, port0, port1 = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port0}", f"127.0.0.1:{port1}"]},
                                          "task": {"type": "worker", "index": index}})

import tensorflow as tf  # noqa: E402

import detconv  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 4, 8, 8, 3)).astype(np.float32)  # worker k's batch: X[k] (4 images)
Y = rng.standard_normal((2, 4, 4, 4, 6)).astype(np.float32)
INIT = [(rng.standard_normal((3, 3, 3, 4)) * 0.3).astype(np.float32), np.zeros(4, np.float32),
        (rng.standard_normal((3, 3, 1, 8)) * 0.3).astype(np.float32),
        (rng.standard_normal((1, 1, 8, 6)) * 0.3).astype(np.float32), np.zeros(6, np.float32)]


def loss_fn(v, x, y):
    h = tf.nn.relu(detconv.conv2d(x, v[0], 1, "SAME", bias=v[1]))
    h = detconv.depthwise_conv2d(h, tf.reshape(v[2], [3, 3, 4, 2]), [1, 2, 2, 1], "SAME")
    h = detconv.conv2d(h, v[3], 1, "VALID", bias=v[4])
    return tf.reduce_sum(tf.square(h - y))


if mode == "single":
    v = [tf.constant(a) for a in INIT]
    grads = []
    for k in range(2):
        with tf.GradientTape() as tape:
            tape.watch(v)
            loss = loss_fn(v, X[k], Y[k])
        grads += [g.numpy() for g in tape.gradient(loss, v)]
    np.savez(out, *grads)
    sys.exit(0)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    v = [tf.Variable(a) for a in INIT]


@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(v, x, y)
        grads = tape.gradient(loss, v)
        total = tf.distribute.get_replica_context().all_reduce("sum", grads)
        for var, g in zip(v, total):
            var.assign_sub(0.01 * g)
        return grads
    return strategy.run(replica, args=(x, y))


first = None
for _ in range(3):
    grads = step(tf.constant(X[index]), tf.constant(Y[index]))
    if first is None:
        first = [g.numpy() for g in grads]
np.savez(out, *[a.numpy() for a in v], *first)

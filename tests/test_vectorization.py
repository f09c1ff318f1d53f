"""tf.vectorized_map (no while-loop fallback) and jacobians through detconv's ops: the same bits as a loop."""

import numpy as np
import pytest
import tensorflow as tf

import detconv

rng = np.random.default_rng(11)
XS = tf.constant(rng.standard_normal((3, 2, 6, 5, 4)).astype(np.float32))   # 3 iterations of a batch of 2
FS = tf.constant(rng.standard_normal((3, 3, 3, 4, 6)).astype(np.float32))   # 3 filters
B = tf.constant(rng.standard_normal(6).astype(np.float32))
XS3 = tf.constant(rng.standard_normal((3, 2, 4, 5, 4, 4)).astype(np.float32))  # 3 iterations of 2 volumes
FS3 = tf.constant(rng.standard_normal((2, 3, 3, 4, 6)).astype(np.float32))


def bits(t):
    return np.asarray(t).tobytes()


def vmap(fn, elems):
    return tf.vectorized_map(fn, elems, fallback_to_while_loop=False)


def loop(fn, elems):
    n = (elems[0] if isinstance(elems, tuple) else elems).shape[0]
    return tf.stack([fn(tuple(e[i] for e in elems) if isinstance(elems, tuple) else elems[i]) for i in range(n)])


CASES = {
    "conv over images": (lambda x: detconv.conv2d(x, FS[0], 2, "SAME", bias=B), XS),
    "conv with a filter per iteration": (lambda a: detconv.conv2d(a[0], a[1], 1, "VALID"), (XS, FS)),
    "input gradient": (lambda x: detconv.conv2d_backprop_input(tf.shape(x), FS[0], detconv.conv2d(x, FS[0], 1, "SAME"),
                                                               1, "SAME"), XS),
    "filter gradient": (lambda x: detconv.conv2d_backprop_filter(x, [3, 3, 4, 6], detconv.conv2d(x, FS[0], 1, "SAME"),
                                                                 1, "SAME"), XS),
    "bias gradient": (lambda x: detconv.bias_grad(x), XS),
    "conv3d over volumes": (lambda x: detconv.conv3d(x, FS3, [1, 2, 1], "SAME", bias=B), XS3),
    "conv3d input gradient": (lambda x: detconv.conv3d_backprop_input(tf.shape(x), FS3,
                                                                      detconv.conv3d(x, FS3, 1, "SAME"), 1, "SAME"),
                              XS3),
    "conv3d filter gradient": (lambda x: detconv.conv3d_backprop_filter(x, [2, 3, 3, 4, 6],
                                                                        detconv.conv3d(x, FS3, 1, "SAME"), 1, "SAME"),
                               XS3),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vectorized_map_matches_a_loop(name):
    fn, elems = CASES[name]
    assert bits(vmap(fn, elems)) == bits(loop(fn, elems))


def test_gradients_inside_vectorized_map():
    def per_example(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = detconv.conv2d(x, FS[0], 1, "SAME", bias=B)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, x)
    assert bits(vmap(per_example, XS)) == bits(loop(per_example, XS))


def test_jacobian_and_batch_jacobian():
    x = tf.constant(rng.standard_normal((2, 4, 4, 2)).astype(np.float32))
    f = tf.constant(rng.standard_normal((3, 3, 2, 3)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, f])
        y = detconv.conv2d(x, f, 1, "SAME")
    jx = tape.jacobian(y, x, experimental_use_pfor=True)
    jf = tape.jacobian(y, f, experimental_use_pfor=True)
    bj = tape.batch_jacobian(y, x, experimental_use_pfor=True)
    jx_loop = tape.jacobian(y, x, experimental_use_pfor=False)
    jf_loop = tape.jacobian(y, f, experimental_use_pfor=False)
    assert jx.shape == (2, 4, 4, 3, 2, 4, 4, 2) and jf.shape == (2, 4, 4, 3, 3, 3, 2, 3) and bj.shape == (2, 4, 4, 3, 4, 4, 2)
    assert bits(jx) == bits(jx_loop) and bits(jf) == bits(jf_loop)
    assert bits(bj) == bits(tf.stack([jx[i, ..., i, :, :, :] for i in range(2)]))

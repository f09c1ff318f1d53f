"""pfor converters for detconv's ops, so tf.vectorized_map (also with fallback_to_while_loop=False) and
GradientTape.jacobian/batch_jacobian vectorize through them.

A loop over the batch is the same convolution over a bigger batch, and batch invariance makes that exactly
right: the forward pass and the input gradient fold the loop dimension into the batch when only the
batch-shaped operand varies per iteration. The filter and bias gradients reduce over the batch, so merging
iterations would change the contract's chunks (they depend on the reduction length); those, and any op
whose filters vary per iteration, run one op per iteration in a while loop - the same bits as the loop.

Uses TensorFlow's private pfor registry (tensorflow.python.ops.parallel_for.pfor); detconv pins the
TensorFlow minor it is built for.
"""

import tensorflow as tf
from tensorflow.python.ops.parallel_for import pfor as _pfor


def _op_again(pfor_input, inputs):
    """The same op (type and attributes) on new inputs."""
    return _pfor._create_op(pfor_input.op_type, inputs, [t.dtype for t in pfor_input.outputs],
                            attrs=pfor_input.op.node_def.attr).outputs


def _per_iteration(pfor_input):
    """One op per loop iteration, in a while loop; the outputs stacked."""
    pfor_input.stack_inputs()
    n = tf.reshape(pfor_input.pfor.loop_len_vector, [])
    stacked = [pfor_input.stacked_input(k) for k in range(pfor_input.num_inputs)]
    dtypes = [t.dtype for t in pfor_input.outputs]

    def body(i, arrays):
        outs = _op_again(pfor_input, [t[i] for t in stacked])
        return i + 1, [a.write(i, o) for a, o in zip(arrays, outs)]

    arrays = [tf.TensorArray(d, size=n, infer_shape=False) for d in dtypes]
    _, arrays = tf.while_loop(lambda i, _: i < n, body, (0, arrays))
    return [_pfor.wrap(a.stack(), True) for a in arrays]


def _merge_into_batch(pfor_input, batch_index, sizes_index=None):
    """Folds the loop dimension into the batch of input `batch_index` (the only stacked input)."""
    inputs = _pfor._inputs_with_flattening(pfor_input, [batch_index])
    n = pfor_input.pfor.loop_len_vector
    if sizes_index is not None:  # input_sizes: batch times the loop length
        sizes = inputs[sizes_index]
        rest = tf.ones(tf.shape(sizes) - 1, sizes.dtype)
        inputs[sizes_index] = sizes * tf.concat([tf.cast(n, sizes.dtype), rest], 0)
    return [_pfor.wrap(_pfor._unflatten_first_dim(y, n), True) for y in _op_again(pfor_input, inputs)]


def _only_stacked(pfor_input, index):
    return all(pfor_input.input(k)[1] == (k == index) for k in range(pfor_input.num_inputs))


@_pfor.RegisterPFor("DetConv>Conv2D")
@_pfor.RegisterPFor("DetConv>Conv3D")
def _conv(pfor_input):
    if _only_stacked(pfor_input, 0):
        return _merge_into_batch(pfor_input, 0)
    return _per_iteration(pfor_input)


@_pfor.RegisterPFor("DetConv>Conv2DBackpropInput")
@_pfor.RegisterPFor("DetConv>Conv3DBackpropInput")
def _conv_backprop_input(pfor_input):
    if _only_stacked(pfor_input, 2):
        return _merge_into_batch(pfor_input, 2, sizes_index=0)
    return _per_iteration(pfor_input)


@_pfor.RegisterPFor("DetConv>Conv2DBackpropFilter")
@_pfor.RegisterPFor("DetConv>Conv3DBackpropFilter")
def _conv_backprop_filter(pfor_input):
    return _per_iteration(pfor_input)


@_pfor.RegisterPFor("DetConv>BiasGrad")
def _bias_grad(pfor_input):
    return _per_iteration(pfor_input)

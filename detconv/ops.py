"""Deterministic drop-ins for tf.nn convolutions.

Arguments take the same forms as tf.nn; every result follows docs/contract.md's
order, so its bits depend only on the input bits and the problem shape.
"""

import collections.abc
import contextlib
import ctypes
import functools

import numpy as np
import tensorflow as tf

from detconv import _args
from detconv._loader import load_ops, ops_library_path

load_ops()  # registers the DetConv> ops (and so their gradients below) with TensorFlow

try:  # vectorized_map / jacobian through detconv's ops (TensorFlow's private pfor registry)
    from detconv import _pfor  # noqa: F401
except ImportError:  # pragma: no cover - a TensorFlow without it: pfor falls back to its while loop
    pass

_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
_DTYPE_SET = frozenset(_DTYPES)
_INT32_MAX = np.iinfo(np.int32).max
_ISAS = {"auto": -1, "scalar": 0, "avx2": 1, "avx512": 2}


# ------------------------------------------------------------------ arguments
class InvalidArgumentValue(tf.errors.InvalidArgumentError, ValueError):
    """A bad argument value. tf.nn reports one as InvalidArgumentError when its kernel sees it and as ValueError
    when its Python or shape functions do (which one depends on eager vs traced and on the argument); this class
    is both, so code written for tf.nn catches it either way (as NumPy's AxisError is both ValueError and
    IndexError)."""

    def __init__(self, message):
        super().__init__(None, None, message)


class InvalidArgumentType(tf.errors.InvalidArgumentError, TypeError):
    """A bad argument type (a string stride, integer tensors); both InvalidArgumentError and TypeError."""

    def __init__(self, message):
        super().__init__(None, None, message)


def _invalid(message):
    """The exception tf.nn raises for a bad value of a known argument."""
    return InvalidArgumentValue(message)


def _tf_nn_errors(fn):
    """Argument errors of a public op leave as InvalidArgumentValue / InvalidArgumentType (see there); errors a
    running kernel raises (already InvalidArgumentError) pass unchanged."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError:
            raise
        except ValueError as e:
            raise InvalidArgumentValue(str(e)).with_traceback(e.__traceback__) from None
        except TypeError as e:
            raise InvalidArgumentType(str(e)).with_traceback(e.__traceback__) from None
    return wrapper


# Eager calls pay for every line of Python around the op. On a small tensor the op itself takes 35-80 us and
# the argument handling took 80-200 us more before the caches and shortcuts below (_scope, _CONV_ARGS,
# _tensors' first lines, _INT32_OF): depthwise input gradient of 1x4x4x8 285 -> 147 us, conv2d 118 -> 88
# (docs/performance.md, "thirty-fifth pass").


def _scope(name, default):
    """tf.name_scope where ops get names (graphs, tf.function); eagerly none, since op names do not exist there."""
    return contextlib.nullcontext() if tf.executing_eagerly() else tf.name_scope(name or default)


_CONV_ARGS = {}


def _conv_args(data_format, strides, dilations, padding, ndims=2):
    """tf.nn-style arguments -> (data_format, strides, dilations, padding mode, explicit paddings), N values each.
    Plain forms are normalized once (_CONV_ARGS); the lists returned are always fresh."""
    try:
        plain = _args.plain_key
        key = (ndims, plain(data_format), plain(strides), plain(dilations), plain(padding))
    except _args.NotPlain:
        key = None

    def normalize():
        df = _args.data_format(data_format, ndims)
        return (df, _args.spatial(strides, "strides", df, ndims), _args.spatial(dilations, "dilations", df, ndims),
                *_args.padding(padding, df, ndims))

    df, st, dl, mode, explicit = normalize() if key is None else _args.cached(_CONV_ARGS, key, normalize)
    return df, list(st), list(dl), mode, list(explicit)


def _tensors(named):
    """Converts inputs to tensors of one supported floating dtype, by tf.nn's rule: NumPy and Python values
    take the dtype of the call's tensors (or, with no tensor, of its first array); two tensors of different
    dtypes are an error."""
    def is_tensor(v):
        return isinstance(v, (tf.Tensor, tf.Variable))

    out = [v for _, v in named]
    dtype = out[0].dtype if isinstance(out[0], tf.Tensor) else None
    if dtype in _DTYPE_SET and all(isinstance(v, tf.Tensor) and v.dtype is dtype for v in out):
        return out  # tensors of one supported dtype (DTypes are interned): as they are, as the rules below say

    # the call's dtype: its first tensor's, else its first array's (a NumPy dtype; a RaggedTensor's or
    # SparseTensor's dtype is a tf.DType, and converting one below raises tf.nn's ValueError)
    typed = ([v for _, v in named if is_tensor(v)] or
             [v for _, v in named if isinstance(getattr(v, "dtype", None), np.dtype)])
    dtype = tf.as_dtype(typed[0].dtype) if typed else None
    out = []
    for name, value in named:
        if is_tensor(value) or dtype is None or not dtype.is_floating:
            t = tf.convert_to_tensor(value)
        elif hasattr(value, "dtype"):  # an array: converted exactly as tf.cast would
            t = tf.convert_to_tensor(value)
            if t.dtype.is_floating and t.dtype != dtype:
                t = tf.cast(t, dtype)
        else:  # Python lists and scalars follow the call's dtype
            t = tf.convert_to_tensor(value, dtype_hint=dtype)
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: dtype {t.dtype.name} is not supported (float16, bfloat16, float32, float64)")
        if out and t.dtype != out[0].dtype:  # two tensors of different dtypes (tf.nn: InvalidArgumentError)
            raise _invalid(f"{name}: dtype {t.dtype.name} does not match {named[0][0]}'s {out[0].dtype.name}")
        out.append(t)
    return out


def _accumulation(accumulation, dtype):
    return _args.accumulation(accumulation, dtype.name)


_HOST_CONSTANTS = {}


def _host_constant(values, dtype):
    """Sizes known on the host (a list of ints or an integer array) as a constant; eagerly one cached constant,
    since a fresh one per call costs about as much as a small convolution (three per backprop call: 140 -> 60
    us for an input gradient of 4x4x8). In a graph, a constant of the graph."""
    if not tf.executing_eagerly():
        return tf.constant(np.asarray(values, dtype))
    if type(values) is list:
        key = (dtype, 1, tuple(values))
    else:
        host = np.asarray(values)
        key = (dtype, host.ndim, tuple(host.ravel().tolist()))
    return _args.cached(_HOST_CONSTANTS, key, lambda: tf.constant(np.asarray(values, dtype)))


def _int64_sizes(sizes, name):
    if tf.executing_eagerly() and not isinstance(sizes, tf.Variable):
        if isinstance(sizes, tf.Tensor):  # eagerly a value: read once, as get_static_value below would
            host = sizes.numpy()
        else:
            host = np.asarray(sizes.as_list() if isinstance(sizes, tf.TensorShape) else sizes)
        if host.dtype.kind == "i" or (host.dtype.kind == "u" and (host <= np.iinfo(np.int64).max).all()):
            return _host_constant(host, np.int64)  # anything else: the checks below
    t = tf.convert_to_tensor(sizes)
    if not t.dtype.is_integer:
        raise TypeError(f"{name}: expected integers, got dtype {t.dtype.name}")
    if t.dtype == tf.int64:
        return t
    static = tf.get_static_value(t)  # known now (eager, constants): a constant, not a cast op per call
    return _host_constant(static, np.int64) if static is not None else tf.cast(t, tf.int64)


def _checked_int32(sizes, name):
    """int64 sizes -> the ops' int32, an InvalidArgumentError (not a wrap) past 2^31 - 1."""
    def check():
        static = tf.get_static_value(sizes)
        if static is None:
            return tf.cast(sizes, tf.int32)
        if (np.asarray(static) > _INT32_MAX).any():
            raise _invalid(f"{name}: sizes must be < 2^31, got {list(static)}")
        return _host_constant(static, np.int32)

    if not tf.executing_eagerly():
        return check()
    # Eager tensors never change: each is checked once. The entry holds the tensor, so its id stays its own.
    return _args.cached(_INT32_OF, id(sizes), lambda: (sizes, check()))[1]


_INT32_OF = {}  # eagerly: id of checked int64 sizes -> (them, their int32 constant)


_NO_BIAS = {}


def _no_bias(dtype):
    """The empty bias input of an op without bias; eagerly one cached tensor per dtype (a fresh small op per
    call costs as much as a small convolution's whole Python path)."""
    if not tf.executing_eagerly():
        return tf.zeros([0], dtype)
    if dtype not in _NO_BIAS:
        with tf.init_scope():
            _NO_BIAS[dtype] = tf.zeros([0], dtype)
    return _NO_BIAS[dtype]


def _check_rank(t, rank, name):
    if t.shape.rank is not None and t.shape.rank != rank:
        raise ValueError(f"{name}: must be rank {rank}, got shape {t.shape}")


def _check_empty_filter(x, sizes, dy, data_format):
    """What tf.nn checks of a filter gradient whose filter_sizes has a zero tap dimension (the op takes none:
    the problem needs taps; no out-channels, the op's own case, checks out_backprop's whole shape)."""
    *_, cg, co = (int(v) for v in sizes)
    if cg == 0:
        raise _invalid("filter_sizes: in-channels must be positive, got 0")
    axis = -1 if _args.channels_last(data_format) else 1
    c, dyc = x.shape[axis], dy.shape[axis]
    _check_in_channels(c, cg, "filter_sizes")
    if dyc is not None and dyc != co:
        raise _invalid(f"out_backprop: {dyc} channels, filter_sizes has {co} out-channels")
    if x.shape[0] is not None and dy.shape[0] is not None and x.shape[0] != dy.shape[0]:
        raise _invalid(f"out_backprop: batch {dy.shape[0]}, input's is {x.shape[0]}")


def _check_in_channels(c, cg, name):
    """Input channels c (None: unknown) against a filter of cg in-channels, named by the argument (name)."""
    if c is not None and cg is not None and c % cg != 0:
        raise ValueError(f"{name}: input channels ({c}) must be a multiple of the filter's in-channels ({cg})")


def _attrs(strides, dilations, mode, explicit, data_format, accumulation):
    return dict(strides=strides, dilations=dilations, padding=mode, explicit_paddings=explicit,
                data_format=data_format, accumulation=accumulation)


# ------------------------------------------------------------------ public API
@_tf_nn_errors
def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None, *, bias=None,
           accumulation=None):
    """Deterministic tf.nn.conv2d with an optional fused bias (one add before the single rounding)."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding)
    with _scope(name, "detconv_conv2d"):
        named = [("input", input), ("filters", filters)] + ([("bias", bias)] if bias is not None else [])
        ts = _tensors(named)
        x, f = ts[0], ts[1]
        if x.shape.rank is not None and x.shape.rank > 4:  # [..., H, W, C]: every leading dimension is batch
            lead = tf.shape(x)[:-3]
            y = conv2d(tf.reshape(x, tf.concat([[-1], tf.shape(x)[-3:]], 0)), f, st, _args.pad_arg(mode, explicit),
                       data_format, dl, bias=ts[2] if bias is not None else None, accumulation=accumulation)
            y = tf.reshape(y, tf.concat([lead, tf.shape(y)[1:]], 0))
            return tf.ensure_shape(y, x.shape[:-3].concatenate([None, None, None]))
        return _conv_op(2, x, f, ts[2] if bias is not None else None, st, dl, mode, explicit, data_format,
                        accumulation)


def _conv_op(ndims, x, f, b, st, dl, mode, explicit, data_format, accumulation):
    """The forward op of ndims spatial dimensions on tensors whose arguments are normalized."""
    _check_rank(x, ndims + 2, "input")
    _check_rank(f, ndims + 2, "filters")
    acc = _accumulation(accumulation, x.dtype)
    if b is not None:
        _check_rank(b, 1, "bias")
        if b.shape[0] is not None and f.shape[-1] is not None and b.shape[0] != f.shape[-1]:
            raise ValueError(f"bias: must have shape [{f.shape[-1]}] (out-channels), got {b.shape}")
    _check_static(x, f, data_format)
    op = load_ops().det_conv_conv3d if ndims == 3 else load_ops().det_conv_conv2d
    return op(x, f, _no_bias(x.dtype) if b is None else b, use_bias=b is not None,
              **_attrs(st, dl, mode, explicit, data_format, acc))


def _check_static(x, f, data_format):
    """Shape errors that can be seen before running, named by argument."""
    if x.shape.rank is None or f.shape.rank is None:
        return  # unknown rank: the kernel checks at run time
    c = x.shape[-1] if _args.channels_last(data_format) else x.shape[1]
    *spatial, cg, co = f.shape
    labels = ("depth", "height", "width")[-len(spatial):]
    for dim, label in (*zip(spatial, labels), (cg, "in-channels")):  # zero out-channels: empty output
        if dim is not None and dim == 0:
            raise _invalid(f"filters: zero-size filter ({label} is 0)")
    if c is not None and c == 0:  # tf.nn: "grouped convolution must have at least one group"
        raise _invalid("input: zero input channels (0 groups)")
    _check_in_channels(c, cg, "filters")
    if c is not None and cg is not None and co is not None and co % (c // cg) != 0:
        raise ValueError(f"filters: out-channels ({co}) must be divisible by the number of groups ({c // cg})")


@_tf_nn_errors
def conv2d_backprop_input(input_sizes, filters, out_backprop, strides, padding, data_format="NHWC", dilations=None,
                          name=None, *, accumulation=None):
    """Deterministic input gradient (the contract's dx order); input_sizes in data_format order."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding)
    with _scope(name, "detconv_conv2d_backprop_input"):
        dy, f = _tensors([("out_backprop", out_backprop), ("filters", filters)])
        sizes = _int64_sizes(input_sizes, "input_sizes")
        if sizes.shape.rank == 1 and sizes.shape[0] == 2:
            # tf.nn also takes the spatial sizes alone: batch from out_backprop, channels from filters
            n = tf.shape(dy, out_type=tf.int64)[0]
            c = tf.shape(f, out_type=tf.int64)[2]
            sizes = tf.stack([n, c, sizes[0], sizes[1]] if data_format == "NCHW" else [n, sizes[0], sizes[1], c])
        return _backprop_input_op(2, sizes, f, dy, st, dl, mode, explicit, data_format, accumulation)


def _backprop_input_op(ndims, sizes, f, dy, st, dl, mode, explicit, data_format, accumulation):
    """The input-gradient op of ndims spatial dimensions on tensors whose arguments are normalized."""
    _check_rank(f, ndims + 2, "filters")
    _check_rank(dy, ndims + 2, "out_backprop")
    acc = _accumulation(accumulation, f.dtype)
    op = load_ops().det_conv_conv3d_backprop_input if ndims == 3 else load_ops().det_conv_conv2d_backprop_input
    return op(_checked_int32(sizes, "input_sizes"), f, dy, **_attrs(st, dl, mode, explicit, data_format, acc))


@_tf_nn_errors
def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NHWC", dilations=None,
                           name=None, *, accumulation=None):
    """Deterministic filter gradient (shape-only chunks, no atomics); filter_sizes HWIO."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding)
    with _scope(name, "detconv_conv2d_backprop_filter"):
        x, dy = _tensors([("input", input), ("out_backprop", out_backprop)])
        return _backprop_filter_op(2, x, filter_sizes, dy, st, dl, mode, explicit, data_format, accumulation)


def _backprop_filter_op(ndims, x, filter_sizes, dy, st, dl, mode, explicit, data_format, accumulation):
    """The filter-gradient op of ndims spatial dimensions on tensors whose arguments are normalized."""
    _check_rank(x, ndims + 2, "input")
    _check_rank(dy, ndims + 2, "out_backprop")
    acc = _accumulation(accumulation, x.dtype)
    sizes = _checked_int32(_int64_sizes(filter_sizes, "filter_sizes"), "filter_sizes")
    static = tf.get_static_value(sizes)
    if static is not None and np.ndim(static) == 1 and len(static) == ndims + 2 and min(static[:-1]) == 0:
        _check_empty_filter(x, static, dy, data_format)
        return tf.zeros(static, x.dtype)  # a filter of no taps has an empty gradient (as tf.nn)
    op = load_ops().det_conv_conv3d_backprop_filter if ndims == 3 else load_ops().det_conv_conv2d_backprop_filter
    return op(x, sizes, dy, **_attrs(st, dl, mode, explicit, data_format, acc))


@_tf_nn_errors
def bias_grad(out_backprop, data_format="NHWC", name=None, *, accumulation=None):
    """Deterministic bias gradient: dy summed over n and its spatial axes (2-D or 3-D) in the contract's chunk
    order; data_format says where the channels are (NHWC/NDHWC last, NCHW/NCDHW first)."""
    data_format = "NHWC" if _args.channels_last_any(data_format) else "NCHW"  # the op's attribute: channels last?
    with _scope(name, "detconv_bias_grad"):
        (dy,) = _tensors([("out_backprop", out_backprop)])
        if dy.shape.rank is not None and dy.shape.rank not in (4, 5):
            raise ValueError(f"out_backprop: must be rank 4 or 5, got shape {dy.shape}")
        acc = _accumulation(accumulation, dy.dtype)
        return load_ops().det_conv_bias_grad(dy, data_format=data_format, accumulation=acc)


@_tf_nn_errors
def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None, name=None, *, bias=None,
           accumulation=None):
    """Deterministic tf.nn.conv1d: a conv2d over a height-1 image."""
    # tf.nn.conv1d still accepts the 2-D spellings of its two layouts.
    data_format = {"NHWC": "NWC", "NCHW": "NCW"}.get(data_format, data_format)
    data_format = _args.data_format(data_format, 1)
    st = _args.spatial(stride, "stride", data_format, 1)
    dl = _args.spatial(dilations, "dilations", data_format, 1)
    mode, explicit = _args.padding(padding, data_format, 1)
    with _scope(name, "detconv_conv1d"):
        x, f = _tensors([("input", input), ("filters", filters)])
        if x.shape.rank is not None and x.shape.rank > 3:  # [..., W, C]: every leading dimension is batch
            lead = tf.shape(x)[:-2]
            y = conv1d(tf.reshape(x, tf.concat([[-1], tf.shape(x)[-2:]], 0)), f, st, _args.pad_arg(mode, explicit),
                       data_format, dl, bias=bias, accumulation=accumulation)
            y = tf.reshape(y, tf.concat([lead, tf.shape(y)[1:]], 0))
            return tf.ensure_shape(y, x.shape[:-2].concatenate([None, None]))
        _check_rank(x, 3, "input")
        _check_rank(f, 3, "filters")
        df2 = "NHWC" if data_format == "NWC" else "NCHW"
        x4 = tf.expand_dims(x, 1 if df2 == "NHWC" else 2)
        pad2 = mode if mode != "EXPLICIT" else [[0, 0], explicit]
        y = conv2d(x4, tf.expand_dims(f, 0), [1, st[0]], pad2, df2, [1, dl[0]], bias=bias, accumulation=accumulation)
        return tf.squeeze(y, 1 if df2 == "NHWC" else 2)


@_tf_nn_errors
def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None, *, bias=None,
                     accumulation=None):
    """Deterministic tf.nn.depthwise_conv2d: filter [KH, KW, C, M], output channel c*M + m (groups = C)."""
    data_format = _args.data_format(data_format, 2)
    with _scope(name, "detconv_depthwise_conv2d"):
        x, f = _tensors([("input", input), ("filter", filter)])
        _check_rank(x, 4, "input")
        _check_rank(f, 4, "filter")
        c = x.shape[1] if data_format == "NCHW" else x.shape[3]
        if c is not None and f.shape[2] is not None and c != f.shape[2]:
            raise ValueError(f"filter: in-channels ({f.shape[2]}) must equal the input channels ({c})")
        return conv2d(x, _depthwise_as_hwio(f), strides, padding, data_format, dilations, bias=bias,
                      accumulation=accumulation)


@_tf_nn_errors
def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC", dilations=None,
                     name=None, *, accumulation=None):
    """Deterministic tf.nn.conv2d_transpose; its result follows the contract's input-gradient order."""
    with _scope(name, "detconv_conv2d_transpose"):
        return conv2d_backprop_input(output_shape, filters, input, strides, padding, data_format, dilations,
                                     accumulation=accumulation)


@_tf_nn_errors
def conv1d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NWC", dilations=None,
                     name=None, *, accumulation=None):
    """Deterministic tf.nn.conv1d_transpose: filters [W, out, in]; a conv2d_transpose over a height-1 image."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding, ndims=1)
    with _scope(name, "detconv_conv1d_transpose"):
        x, f = _tensors([("input", input), ("filters", filters)])
        _check_rank(x, 3, "input")
        _check_rank(f, 3, "filters")
        sizes = _int64_sizes(output_shape, "output_shape")
        if sizes.shape.rank != 1 or (sizes.shape[0] is not None and sizes.shape[0] != 3):
            raise ValueError(f"output_shape: expected 3 sizes, got shape {sizes.shape}")
        nwc = data_format == "NWC"
        one = tf.ones([1], tf.int64)
        sizes4 = tf.concat([sizes[:1], one, sizes[1:]] if nwc else [sizes[:2], one, sizes[2:]], 0)
        y = conv2d_backprop_input(sizes4, tf.expand_dims(f, 0), tf.expand_dims(x, 1 if nwc else 2), [1, st[0]],
                                  mode if mode != "EXPLICIT" else [[0, 0], explicit], "NHWC" if nwc else "NCHW",
                                  [1, dl[0]], accumulation=accumulation)
        return tf.squeeze(y, 1 if nwc else 2)


def _depthwise_as_hwio(f):
    """[KH, KW, C, M] -> HWIO [KH, KW, 1, C*M]: output channel c*M + m (groups = C)."""
    if f.shape.is_fully_defined():  # one reshape op (the shape ops below cost more than a small convolution),
        kh, kw, c, m = f.shape.as_list()  # called raw: tf.reshape's dispatch costs as much again eagerly
        return tf.raw_ops.Reshape(tensor=f, shape=_host_constant([kh, kw, 1, c * m], np.int32))
    kh, kw, c, m = tf.unstack(tf.shape(f))
    return tf.reshape(f, tf.stack([kh, kw, 1, c * m]))


@_tf_nn_errors
def depthwise_conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding, data_format="NHWC",
                                    dilations=None, name=None, *, accumulation=None):
    """Deterministic tf.nn.depthwise_conv2d_backprop_input: the gradient depthwise_conv2d's own gradient uses."""
    with _scope(name, "detconv_depthwise_conv2d_backprop_input"):
        dy, f = _tensors([("out_backprop", out_backprop), ("filter", filter)])
        _check_rank(f, 4, "filter")
        return conv2d_backprop_input(input_sizes, _depthwise_as_hwio(f), dy, strides, padding, data_format,
                                     dilations, accumulation=accumulation)


@_tf_nn_errors
def depthwise_conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NHWC",
                                     dilations=None, name=None, *, accumulation=None):
    """Deterministic tf.nn.depthwise_conv2d_backprop_filter; filter_sizes [KH, KW, C, M]."""
    with _scope(name, "detconv_depthwise_conv2d_backprop_filter"):
        sizes = _int64_sizes(filter_sizes, "filter_sizes")
        if sizes.shape.rank != 1 or (sizes.shape[0] is not None and sizes.shape[0] != 4):
            raise ValueError(f"filter_sizes: expected 4 sizes [KH, KW, C, M], got shape {sizes.shape}")
        static = tf.get_static_value(sizes)
        if static is not None:  # known sizes (eager, constants): Python ints, no small ops per call
            kh, kw, c, m = (int(v) for v in static)
            hwio, out_shape = [kh, kw, 1, c * m], [kh, kw, c, m]
        else:
            hwio = tf.stack([sizes[0], sizes[1], tf.ones([], tf.int64), sizes[2] * sizes[3]])
            out_shape = tf.cast(sizes, tf.int32)
        df = conv2d_backprop_filter(input, hwio, out_backprop, strides, padding, data_format, dilations,
                                    accumulation=accumulation)
        return tf.raw_ops.Reshape(tensor=df, shape=_host_constant(out_shape, np.int32) if static is not None
                                  else out_shape)


@_tf_nn_errors
def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, data_format=None, dilations=None,
                     name=None, *, bias=None, accumulation=None):
    """Deterministic tf.nn.separable_conv2d: depthwise_conv2d, rounded to the input dtype (as tf.nn's two ops
    do), then a 1x1 conv2d with the bias fused into its fold."""
    data_format = _args.data_format(data_format, 2)
    with _scope(name, "detconv_separable_conv2d"):
        x, dwf, pwf = _tensors([("input", input), ("depthwise_filter", depthwise_filter),
                                ("pointwise_filter", pointwise_filter)])
        _check_rank(pwf, 4, "pointwise_filter")
        if pwf.shape[0] is not None and pwf.shape[1] is not None and (pwf.shape[0], pwf.shape[1]) != (1, 1):
            raise ValueError(f"pointwise_filter: must be [1, 1, C*M, out], got shape {pwf.shape}")
        if dwf.shape.rank == 4 and None not in (dwf.shape[2], dwf.shape[3], pwf.shape[2]) and \
                pwf.shape[2] != dwf.shape[2] * dwf.shape[3]:
            raise ValueError(f"pointwise_filter: in-channels ({pwf.shape[2]}) must be the depthwise output "
                             f"channels ({dwf.shape[2] * dwf.shape[3]})")
        y = depthwise_conv2d(x, dwf, strides, padding, data_format, dilations, accumulation=accumulation)
        return conv2d(y, pwf, 1, "VALID", data_format, bias=bias, accumulation=accumulation)


@_tf_nn_errors
def convolution(input, filters, strides=None, padding="VALID", data_format=None, dilations=None, name=None, *,
                bias=None, accumulation=None):
    """Deterministic tf.nn.convolution: the spatial rank comes from filters (or input): conv1d, conv2d or conv3d."""
    def rank_of(v):
        return v.shape.rank if isinstance(v, (tf.Tensor, tf.Variable)) else np.ndim(v)

    rank = rank_of(filters)
    if rank is None:  # filters and input both have N + 2 dimensions
        rank = rank_of(input)
    if rank == 3:
        return conv1d(input, filters, 1 if strides is None else strides, padding, data_format or "NWC", dilations,
                      name, bias=bias, accumulation=accumulation)
    if rank == 4:
        return conv2d(input, filters, 1 if strides is None else strides, padding, data_format or "NHWC", dilations,
                      name, bias=bias, accumulation=accumulation)
    if rank == 5:
        return conv3d(input, filters, 1 if strides is None else strides, padding, data_format or "NDHWC", dilations,
                      name, bias=bias, accumulation=accumulation)
    raise ValueError(f"filters: expected rank 3, 4 or 5 (1-D, 2-D or 3-D), got rank {rank}")


@_tf_nn_errors
def conv_transpose(input, filters, output_shape, strides, padding="SAME", data_format=None, dilations=None, name=None,
                   *, accumulation=None):
    """Deterministic tf.nn.conv_transpose: conv1d_transpose, conv2d_transpose or conv3d_transpose, chosen by the
    length of output_shape (3, 4 or 5) as tf.nn chooses."""
    if tf.is_tensor(output_shape):
        length = output_shape.shape[0] if output_shape.shape.rank == 1 else None
        if length is None:  # (tf.nn: a TypeError from None - 2)
            raise TypeError(f"output_shape: expected a vector of known length, got shape {output_shape.shape}")
    elif isinstance(output_shape, collections.abc.Sized):
        length = len(output_shape)
    else:
        raise ValueError(f"output_shape: expected a tensor or a sized collection, got {output_shape!r}")
    if not 3 <= length <= 5:
        raise ValueError(f"output_shape: expected 3, 4 or 5 sizes (1-D, 2-D or 3-D), got {length}")
    op = (conv1d_transpose, conv2d_transpose, conv3d_transpose)[length - 3]
    return op(input, filters, output_shape, strides, padding, data_format, dilations, name,
              accumulation=accumulation)


# tf.nn's atrous (dilated) entry points: NHWC, stride 1, dilation `rate`.
@_tf_nn_errors
def atrous_conv2d(value, filters, rate, padding, name=None, *, bias=None, accumulation=None):
    """Deterministic tf.nn.atrous_conv2d: conv2d at stride 1 with dilations `rate` (one value, or one per
    spatial dimension); padding 'SAME', 'VALID' or explicit pairs, as tf.nn.convolution takes it."""
    rates = _args._int_list(rate, "rate")
    if len(rates) not in (1, 2):
        raise ValueError(f"rate: expected one value or one per spatial dimension (2), got {rates}")
    return conv2d(value, filters, 1, padding, "NHWC", rates, name or "detconv_atrous_conv2d", bias=bias,
                  accumulation=accumulation)


@_tf_nn_errors
def atrous_conv2d_transpose(value, filters, output_shape, rate, padding, name=None, *, accumulation=None):
    """Deterministic tf.nn.atrous_conv2d_transpose: conv2d_transpose at stride 1 with dilations `rate`, which
    tf.nn computes through space_to_batch; the result follows the contract's input-gradient order."""
    rate = _args._int_value(rate, "rate")
    if rate < 1:
        raise ValueError(f"rate: cannot be less than one, got {rate}")
    if rate > 1 and not (isinstance(padding, str) and padding in ("SAME", "VALID")):  # explicit: rate 1 only
        raise ValueError(f"padding: expected 'SAME' or 'VALID' where rate > 1, got {padding!r}")
    # tf.nn's own static checks, which it makes before any op runs (so ValueError, not the op's error)
    y, f = _tensors([("value", value), ("filters", filters)])
    _check_rank(f, 4, "filters")
    if not y.shape[-1:].is_compatible_with(f.shape[3:4]):
        raise ValueError(f"value: its channels ({y.shape[-1]}) must be the filters' input channels "
                         f"(filters.shape[3] = {f.shape[3]})")
    sizes = _int64_sizes(output_shape, "output_shape")
    if not sizes.shape.is_compatible_with([4]):
        raise ValueError(f"output_shape: expected 4 sizes, got shape {sizes.shape}")
    static = tf.get_static_value(sizes)
    if static is not None and not f.shape[2:3].is_compatible_with([int(static[3])]):
        raise ValueError(f"output_shape: its channels ({int(static[3])}) must be the filters' output channels "
                         f"(filters.shape[2] = {f.shape[2]})")
    return conv2d_transpose(y, f, sizes, 1, padding, "NHWC", rate,
                            name or "detconv_atrous_conv2d_transpose", accumulation=accumulation)


# ------------------------------------------------------------------ three spatial dimensions
@_tf_nn_errors
def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None, name=None, *, bias=None,
           accumulation=None):
    """Deterministic tf.nn.conv3d (filters DHWIO, groups inferred) with an optional fused bias; each output
    folds (kd, kh, kw, i)."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding, ndims=3)
    with _scope(name, "detconv_conv3d"):
        named = [("input", input), ("filters", filters)] + ([("bias", bias)] if bias is not None else [])
        ts = _tensors(named)
        return _conv_op(3, ts[0], ts[1], ts[2] if bias is not None else None, st, dl, mode, explicit, data_format,
                        accumulation)


@_tf_nn_errors
def conv3d_backprop_input(input_sizes, filters, out_backprop, strides, padding, data_format="NDHWC", dilations=None,
                          name=None, *, accumulation=None):
    """Deterministic conv3d input gradient (tf.raw_ops.Conv3DBackpropInputV2); fold (kd, kh, kw, o)."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding, ndims=3)
    with _scope(name, "detconv_conv3d_backprop_input"):
        dy, f = _tensors([("out_backprop", out_backprop), ("filters", filters)])
        return _backprop_input_op(3, _int64_sizes(input_sizes, "input_sizes"), f, dy, st, dl, mode, explicit,
                                  data_format, accumulation)


@_tf_nn_errors
def conv3d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NDHWC", dilations=None,
                           name=None, *, accumulation=None):
    """Deterministic conv3d filter gradient (tf.raw_ops.Conv3DBackpropFilterV2); filter_sizes DHWIO."""
    data_format, st, dl, mode, explicit = _conv_args(data_format, strides, dilations, padding, ndims=3)
    with _scope(name, "detconv_conv3d_backprop_filter"):
        x, dy = _tensors([("input", input), ("out_backprop", out_backprop)])
        return _backprop_filter_op(3, x, filter_sizes, dy, st, dl, mode, explicit, data_format, accumulation)


@_tf_nn_errors
def conv3d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NDHWC", dilations=None,
                     name=None, *, accumulation=None):
    """Deterministic tf.nn.conv3d_transpose; its result follows the contract's input-gradient order."""
    with _scope(name, "detconv_conv3d_transpose"):
        return conv3d_backprop_input(output_shape, filters, input, strides, padding, data_format, dilations,
                                     accumulation=accumulation)


# ------------------------------------------------------------------ gradients
def _conv_attrs(op):
    """The convolution attributes of a DetConv op, strings decoded, ready to pass to another DetConv op."""
    names = ("strides", "dilations", "padding", "explicit_paddings", "data_format", "accumulation")
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in ((k, op.get_attr(k)) for k in names)}


def _family(op):
    """The library functions of an op's rank: (conv, backprop_input, backprop_filter)."""
    lib = load_ops()
    if op.type.startswith("DetConv>Conv3D"):
        return lib.det_conv_conv3d, lib.det_conv_conv3d_backprop_input, lib.det_conv_conv3d_backprop_filter
    return lib.det_conv_conv2d, lib.det_conv_conv2d_backprop_input, lib.det_conv_conv2d_backprop_filter


@tf.RegisterGradient("DetConv>Conv2D")
@tf.RegisterGradient("DetConv>Conv3D")
def _conv_grad(op, dy):
    x, f, b = op.inputs
    a = _conv_attrs(op)
    _, backprop_input, backprop_filter = _family(op)
    dx = backprop_input(tf.shape(x, out_type=tf.int32), f, dy, **a)
    df = backprop_filter(x, tf.shape(f, out_type=tf.int32), dy, **a)
    if op.get_attr("use_bias"):
        channels_first = a["data_format"] in ("NCHW", "NCDHW")
        db = load_ops().det_conv_bias_grad(dy, data_format="NCHW" if channels_first else "NHWC",
                                           accumulation=a["accumulation"])
    else:
        db = tf.zeros_like(b)
    return dx, df, db


@tf.RegisterGradient("DetConv>Conv2DBackpropInput")
@tf.RegisterGradient("DetConv>Conv3DBackpropInput")
def _conv_backprop_input_grad(op, ddx):
    _, f, dy = op.inputs
    a = _conv_attrs(op)
    conv, _, backprop_filter = _family(op)
    d_dy = conv(ddx, f, _no_bias(ddx.dtype), use_bias=False, **a)
    d_f = backprop_filter(ddx, tf.shape(f, out_type=tf.int32), dy, **a)
    return None, d_f, d_dy


@tf.RegisterGradient("DetConv>Conv2DBackpropFilter")
@tf.RegisterGradient("DetConv>Conv3DBackpropFilter")
def _conv_backprop_filter_grad(op, ddf):
    x, _, dy = op.inputs
    a = _conv_attrs(op)
    conv, backprop_input, _ = _family(op)
    d_x = backprop_input(tf.shape(x, out_type=tf.int32), ddf, dy, **a)
    d_dy = conv(x, ddf, _no_bias(x.dtype), use_bias=False, **a)
    return d_x, None, d_dy


@tf.RegisterGradient("DetConv>BiasGrad")
def _bias_grad_grad(op, ddb):
    dy = op.inputs[0]
    nchw = op.get_attr("data_format") in (b"NCHW", "NCHW")
    ones = tf.ones([tf.rank(dy) - 2], tf.int32)  # 2 or 3 spatial axes, known or not when tracing
    shape = tf.concat([[1, -1], ones], 0) if nchw else tf.concat([[1], ones, [-1]], 0)
    return tf.broadcast_to(tf.reshape(ddb, shape), tf.shape(dy))


# ------------------------------------------------------------------ CPU ISA control
def _isa_lib():
    load_ops()  # make sure TensorFlow loaded it: ctypes then shares the same copy
    lib = ctypes.CDLL(ops_library_path())
    for fn in ("detconv_cpu_isa_force", "detconv_cpu_isa_active", "detconv_cpu_isa_supported"):
        getattr(lib, fn).restype = ctypes.c_int
    lib.detconv_cpu_fma_peak_gflops.restype = ctypes.c_double
    lib.detconv_cpu_fma_peak_gflops.argtypes = [ctypes.c_int]
    return lib


def compiled_order_version():
    """The order version the loaded op library was compiled with (equals detconv.ORDER_VERSION)."""
    lib = ctypes.CDLL(ops_library_path())
    lib.detconv_order_version.restype = ctypes.c_int
    return int(lib.detconv_order_version())


def cpu_fma_peak_gflops(threads=1):
    """Measured float32 FMA peak (GFLOP/s) of the active CPU path on `threads` threads, for benchmarks."""
    return float(_isa_lib().detconv_cpu_fma_peak_gflops(int(threads)))


def set_cpu_isa(isa="auto"):
    """Selects the CPU kernel path ('auto', 'scalar', 'avx2', 'avx512'). All paths give the same bits.

    Returns False (and changes nothing) if this machine lacks the ISA or the build does not hold
    that path (DETCONV_CPU_ISAS: a from-source build holds scalar and its machine's best path).
    """
    if isa not in _ISAS:
        raise ValueError(f"isa: expected one of {sorted(_ISAS)}, got {isa!r}")
    return bool(_isa_lib().detconv_cpu_isa_force(_ISAS[isa]))


def cpu_isa(supported=False):
    """Name of the active CPU path, or with supported=True the list of paths this machine can run."""
    lib = _isa_lib()
    names = {v: k for k, v in _ISAS.items()}
    if supported:
        return [k for k, v in _ISAS.items() if v >= 0 and lib.detconv_cpu_isa_supported(v)]
    return names[lib.detconv_cpu_isa_active()]

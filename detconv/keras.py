"""Deterministic drop-in replacements for Keras 3 convolution layers.

``Conv1D``, ``Conv2D``, ``DepthwiseConv2D`` and ``Conv2DTranspose`` subclass
the stock ``keras.layers`` classes: constructor arguments, defaults, weight
names, shapes and order are theirs, so ``set_weights(get_weights())`` works
in both directions. Only the convolution itself is replaced by the detconv op
(bias fused: one add in the accumulator before the single rounding). The one
extra keyword is ``accumulation`` (None, "float32" or "float16").

``convert(model)`` copies a Sequential or functional model (nested models
included) with every stock convolution swapped for its detconv twin.

The layers set ``supports_jit = False``: Keras' ``jit_compile="auto"`` then
resolves to False, and ``jit_compile=True`` falls back to False with Keras'
warning ("Model doesn't support `jit_compile=True`"). XLA cannot compile
custom ops; a detconv layer traced inside an XLA context (e.g. a
``tf.function(jit_compile=True)``) raises an error instead of running.
"""

import inspect
import warnings

import keras
import tensorflow as tf

from detconv import _args
from detconv import ops as _ops
from detconv._loader import load_ops as _load_ops

# Register the ops now: a SavedModel holding them can then be loaded after `import detconv.keras`.
_load_ops()

__all__ = ["Conv1D", "Conv2D", "DepthwiseConv2D", "Conv2DTranspose", "Conv1DTranspose", "DepthwiseConv1D",
           "SeparableConv1D", "SeparableConv2D", "Conv3D", "Conv3DTranspose", "convert", "report", "ConversionReport", "XLAUnsupportedError"]



class XLAUnsupportedError(RuntimeError):
    """A detconv layer was traced for XLA compilation, which cannot run custom ops."""


def _in_xla_context():
    # tf.function(jit_compile=True) traces inside an XLAControlFlowContext.
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _check_accumulation(accumulation):
    if accumulation not in _args.ACCUMULATIONS:
        raise ValueError(f"accumulation: expected None, 'float32' or 'float16', got {accumulation!r}")
    return accumulation


def _stock_signature(cls):
    """Gives a drop-in whose __init__ passes everything through the stock layer's signature plus
    ``accumulation`` (what help(), IDEs and inspect show), so the two never drift apart."""
    stock_cls = next(c for c in cls.__mro__ if c.__module__.startswith("keras"))
    stock = inspect.signature(stock_cls.__init__)
    params = [p for p in stock.parameters.values() if p.kind != p.VAR_KEYWORD]
    params += [inspect.Parameter("accumulation", inspect.Parameter.KEYWORD_ONLY, default=None),
               inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    cls.__init__.__signature__ = stock.replace(parameters=params)
    return cls


class _DetConvMixin:
    """What the four layers share: the accumulation keyword, casting, no XLA."""

    def _det_init(self, accumulation):
        self.accumulation = _check_accumulation(accumulation)
        # Keras' model_supports_jit() checks this on every layer: auto-jit off.
        self.supports_jit = False

    def _det_prepare(self, inputs):
        if _in_xla_context():
            raise XLAUnsupportedError(
                f"detconv layer '{self.name}' cannot be compiled with XLA (jit_compile=True): XLA has no "
                "kernel for detconv's custom ops. Compile the model with jit_compile=False (Keras' default "
                "'auto' already resolves to False for models with detconv layers).")
        dtype = self.compute_dtype
        # The op is called on compute-dtype copies of the variables (float16 under mixed_float16).
        kernel = self._det_kernel(dtype)
        bias = tf.cast(self.bias, dtype) if self.use_bias else None
        inputs = tf.convert_to_tensor(inputs)
        return inputs, kernel, bias

    def _det_kernel(self, dtype):
        return tf.cast(self.kernel, dtype)

    def _finish(self, outputs):
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def get_config(self):
        config = super().get_config()
        config["accumulation"] = self.accumulation
        return config


@keras.saving.register_keras_serializable(package="detconv")
class Conv1D(_DetConvMixin, keras.layers.Conv1D):
    """keras.layers.Conv1D computed by detconv.conv1d (bias fused, "causal" padding supported)."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, accumulation=None,
                 **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate, groups=groups,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        if self.padding == "causal":
            # Zero taps on the left only: the same bits as Keras' explicit pad, without the copy.
            padding = [[self.dilation_rate[0] * (self.kernel_size[0] - 1), 0]]
        else:
            padding = self.padding.upper()
        outputs = _ops.conv1d(x, kernel, list(self.strides), padding,
                              data_format="NWC" if self.data_format == "channels_last" else "NCW",
                              dilations=list(self.dilation_rate), bias=bias, accumulation=self.accumulation)
        return self._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
class Conv2D(_DetConvMixin, keras.layers.Conv2D):
    """keras.layers.Conv2D computed by detconv.conv2d (bias fused, groups supported)."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 accumulation=None, **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate, groups=groups,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def convolution_op(self, inputs, kernel):
        # Kept for callers of the public hook; call() fuses the bias instead.
        return _ops.conv2d(inputs, kernel, list(self.strides), self.padding.upper(),
                           data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                           dilations=list(self.dilation_rate), accumulation=self.accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        outputs = _ops.conv2d(x, kernel, list(self.strides), self.padding.upper(),
                              data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                              dilations=list(self.dilation_rate), bias=bias, accumulation=self.accumulation)
        return self._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
class DepthwiseConv2D(_DetConvMixin, keras.layers.DepthwiseConv2D):
    """keras.layers.DepthwiseConv2D computed by detconv.depthwise_conv2d (bias fused)."""

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, depthwise_constraint=None, bias_constraint=None, accumulation=None,
                 **kwargs):
        super().__init__(kernel_size=kernel_size, strides=strides, padding=padding,
                         depth_multiplier=depth_multiplier, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         depthwise_initializer=depthwise_initializer, bias_initializer=bias_initializer,
                         depthwise_regularizer=depthwise_regularizer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, depthwise_constraint=depthwise_constraint,
                         bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        outputs = _ops.depthwise_conv2d(x, kernel, list(self.strides), self.padding.upper(),
                                        data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                                        dilations=list(self.dilation_rate), bias=bias,
                                        accumulation=self.accumulation)
        return self._finish(outputs)


def _transpose_length(size, kernel, stride, padding, output_padding, dilation):
    """Keras' conv-transpose output length (TensorFlow backend rule); size may be a tensor."""
    k = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(k, stride) - k if output_padding is None else output_padding
        return (size - 1) * stride + k + extra
    if output_padding is None:
        return size * stride
    return (size - 1) * stride + k % 2 + output_padding


@keras.saving.register_keras_serializable(package="detconv")
class Conv2DTranspose(_DetConvMixin, keras.layers.Conv2DTranspose):
    """keras.layers.Conv2DTranspose computed by detconv.conv2d_transpose.

    The transposed convolution has no fused bias: the bias is a separate add
    after the op's rounding (two roundings, exactly as stock Keras does it).
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 accumulation=None, **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         output_padding=output_padding, data_format=data_format, dilation_rate=dilation_rate,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        return _transpose_call(self, inputs)


def _transpose_call(layer, inputs):
    """Conv1DTranspose / Conv2DTranspose: the op's output shape from Keras' rule, then the bias as its own add."""
    x, kernel, bias = layer._det_prepare(inputs)
    rank = len(layer.kernel_size)
    channels_last = layer.data_format == "channels_last"
    spatial_axes = tuple(range(1, rank + 1)) if channels_last else tuple(range(2, rank + 2))
    dyn = tf.shape(x)
    static, dynamic = [], []
    for i, axis in enumerate(spatial_axes):
        op = None if layer.output_padding is None else layer.output_padding[i]
        args = (layer.kernel_size[i], layer.strides[i], layer.padding, op, layer.dilation_rate[i])
        size = x.shape[axis]
        static.append(None if size is None else _transpose_length(size, *args))
        dynamic.append(static[-1] if size is not None else _transpose_length(dyn[axis], *args))
    n = x.shape[0] if x.shape[0] is not None else dyn[0]
    dims = [n, *dynamic, layer.filters] if channels_last else [n, layer.filters, *dynamic]
    output_shape = tf.stack([tf.cast(d, tf.int32) for d in dims])
    if rank == 3:
        outputs = _ops.conv3d_transpose(x, kernel, output_shape, list(layer.strides), layer.padding.upper(),
                                        data_format="NDHWC" if channels_last else "NCDHW",
                                        dilations=list(layer.dilation_rate), accumulation=layer.accumulation)
    elif rank == 1:
        outputs = _ops.conv1d_transpose(x, kernel, output_shape, list(layer.strides), layer.padding.upper(),
                                        data_format="NWC" if channels_last else "NCW",
                                        dilations=list(layer.dilation_rate), accumulation=layer.accumulation)
    else:
        outputs = _ops.conv2d_transpose(x, kernel, output_shape, list(layer.strides), layer.padding.upper(),
                                        data_format="NHWC" if channels_last else "NCHW",
                                        dilations=list(layer.dilation_rate), accumulation=layer.accumulation)
    outputs.set_shape([x.shape[0], *static, layer.filters] if channels_last
                      else [x.shape[0], layer.filters, *static])
    if bias is not None:
        shape = (1,) * (rank + 1) + (layer.filters,) if channels_last else (1, layer.filters) + (1,) * rank
        outputs = outputs + tf.reshape(bias, shape)
    return layer._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class Conv1DTranspose(_DetConvMixin, keras.layers.Conv1DTranspose):
    """keras.layers.Conv1DTranspose computed by detconv.conv1d_transpose (the bias is a separate add, as stock)."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        return _transpose_call(self, inputs)


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class Conv3D(_DetConvMixin, keras.layers.Conv3D):
    """keras.layers.Conv3D computed by detconv.conv3d (bias fused, groups supported)."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        outputs = _ops.conv3d(x, kernel, list(self.strides), self.padding.upper(),
                              data_format="NDHWC" if self.data_format == "channels_last" else "NCDHW",
                              dilations=list(self.dilation_rate), bias=bias, accumulation=self.accumulation)
        return self._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class Conv3DTranspose(_DetConvMixin, keras.layers.Conv3DTranspose):
    """keras.layers.Conv3DTranspose computed by detconv.conv3d_transpose (the bias is a separate add, as stock)."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        return _transpose_call(self, inputs)


def _padding_1d(layer):
    """A 1-D layer's padding for the 2-D op over a height-1 image: causal is left zeros only."""
    if layer.padding == "causal":
        return [[0, 0], [layer.dilation_rate[0] * (layer.kernel_size[0] - 1), 0]]
    return layer.padding.upper()


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class DepthwiseConv1D(_DetConvMixin, keras.layers.DepthwiseConv1D):
    """keras.layers.DepthwiseConv1D computed by detconv.depthwise_conv2d over a height-1 image (bias fused)."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        channels_last = self.data_format == "channels_last"
        axis = 1 if channels_last else 2
        outputs = _ops.depthwise_conv2d(tf.expand_dims(x, axis), kernel[None], [1, self.strides[0]],
                                        _padding_1d(self), data_format="NHWC" if channels_last else "NCHW",
                                        dilations=[1, self.dilation_rate[0]], bias=bias,
                                        accumulation=self.accumulation)
        return self._finish(tf.squeeze(outputs, axis))


class _SeparableMixin(_DetConvMixin):
    """The depthwise and pointwise kernels instead of one kernel."""

    def _det_kernel(self, dtype):
        return tf.cast(self.depthwise_kernel, dtype), tf.cast(self.pointwise_kernel, dtype)


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class SeparableConv1D(_SeparableMixin, keras.layers.SeparableConv1D):
    """keras.layers.SeparableConv1D computed by detconv.separable_conv2d over a height-1 image.

    The depthwise result is rounded to the compute dtype (as stock Keras' two
    ops do); the bias is fused into the pointwise fold."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, (dwk, pwk), bias = self._det_prepare(inputs)
        channels_last = self.data_format == "channels_last"
        axis = 1 if channels_last else 2
        outputs = _ops.separable_conv2d(tf.expand_dims(x, axis), dwk[None], pwk[None], [1, self.strides[0]],
                                        _padding_1d(self), data_format="NHWC" if channels_last else "NCHW",
                                        dilations=[1, self.dilation_rate[0]], bias=bias,
                                        accumulation=self.accumulation)
        return self._finish(tf.squeeze(outputs, axis))


@keras.saving.register_keras_serializable(package="detconv")
@_stock_signature
class SeparableConv2D(_SeparableMixin, keras.layers.SeparableConv2D):
    """keras.layers.SeparableConv2D computed by detconv.separable_conv2d (depthwise rounded to the compute
    dtype, as stock; bias fused into the pointwise fold)."""

    def __init__(self, *args, accumulation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, (dwk, pwk), bias = self._det_prepare(inputs)
        outputs = _ops.separable_conv2d(x, dwk, pwk, list(self.strides), self.padding.upper(),
                                        data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                                        dilations=list(self.dilation_rate), bias=bias,
                                        accumulation=self.accumulation)
        return self._finish(outputs)


# ------------------------------------------------------------------ conversion
_STOCK_TO_DET = {
    keras.layers.Conv1D: Conv1D,
    keras.layers.Conv2D: Conv2D,
    keras.layers.DepthwiseConv2D: DepthwiseConv2D,
    keras.layers.Conv2DTranspose: Conv2DTranspose,
    keras.layers.Conv1DTranspose: Conv1DTranspose,
    keras.layers.DepthwiseConv1D: DepthwiseConv1D,
    keras.layers.SeparableConv1D: SeparableConv1D,
    keras.layers.SeparableConv2D: SeparableConv2D,
    keras.layers.Conv3D: Conv3D,
    keras.layers.Conv3DTranspose: Conv3DTranspose,
}
_DET_CLASSES = tuple(_STOCK_TO_DET.values())


def _convert_graph(model, accumulation, pairs):
    """A built Sequential or functional model's converted copy, its weights set; appends (old, new) for
    every layer cloned, those of models nested in it (and in its TimeDistributed wrappers) included."""
    def clone_function(layer):
        new = _convert_layer(layer, accumulation, pairs)
        pairs.append((layer, new))
        return new

    with warnings.catch_warnings():
        # A model compiled where "auto" meant XLA (a GPU) is recompiled without it: expected, not news.
        warnings.filterwarnings("ignore", message="Model doesn't support `jit_compile=True`")
        new_model = keras.models.clone_model(model, clone_function=clone_function, recursive=True)
    for old, new in pairs:
        if getattr(old, "weights", None):  # graph nodes may be plain operations (e.g. x[..., None])
            new.set_weights(old.get_weights())
    return new_model


def _convert_layer(layer, accumulation, pairs=None):
    if type(layer) is keras.layers.TimeDistributed:  # e.g. a video model's per-frame Conv2D or CNN
        config = layer.get_config()
        config.pop("layer")
        inner = layer.layer
        if _is_graph_model(inner) and inner.built:
            inner_pairs = []  # its own: _convert_graph sets the weights of the pairs it is given
            inner = _convert_graph(inner, accumulation, inner_pairs)
            if pairs is not None:
                pairs.extend(inner_pairs)
        else:
            inner = _convert_layer(inner, accumulation, pairs)
        return keras.layers.TimeDistributed(inner, **config)
    target = _STOCK_TO_DET.get(type(layer))
    if target is None and isinstance(layer, _DET_CLASSES):
        target = type(layer)
    if target is None:
        if isinstance(layer, keras.layers.Lambda):
            # The config comes from this live layer, not from a file: nothing untrusted is deserialized, so
            # Keras' safe mode (which refuses a Python lambda's bytecode) does not apply. Stock clone_model
            # refuses it; convert() copies it.
            return layer.__class__.from_config(layer.get_config(), safe_mode=False)
        return layer.__class__.from_config(_live_config(layer))
    config = _live_config(layer)
    if not isinstance(layer, _DET_CLASSES):  # detconv layers keep their own setting
        config["accumulation"] = accumulation
    return target.from_config(config)


def _live_config(layer):
    """The layer's config, its activation the live callable: a function of the user's (a lambda, say) is
    serialized as bytecode, which from_config refuses (safe mode); the clone shares the function itself."""
    config = layer.get_config()
    fn = getattr(layer, "activation", None)
    if "activation" in config and callable(fn) and not isinstance(fn, keras.layers.Layer):
        config["activation"] = fn
    return config


def _unwrapped(pair):
    """(old, new) with the TimeDistributed wrappers _convert_layer rebuilt taken off."""
    old, new = pair
    while type(old) is keras.layers.TimeDistributed and type(new) is keras.layers.TimeDistributed:
        old, new = old.layer, new.layer
    return old, new


def _is_graph_model(model):
    # Sequential, or functional (Keras' Functional class is private: recognise it by its graph).
    return isinstance(model, keras.Sequential) or (
        isinstance(model, keras.Model) and hasattr(model, "_run_through_graph") and hasattr(model, "_operations"))


_SOFTMAX = "softmax sum"
# exp, log, tanh and erf are no IEEE operation: TensorFlow's CPU kernels (Eigen's approximations) and its
# GPU kernels (CUDA's math library) round them differently, so their bits follow the device.
_TRANSCENDENTAL = "exp/tanh/erf (CPU and GPU libraries round them differently)"
_LORA = "LoRA kernel update (a matrix product, BLAS/cuBLAS order)"
# Layers whose own sums (or functions) detconv does not fix: their bits may still depend on the device, the
# batch or the thread count. Looked up by name, so a Keras without one of them simply has nothing to match.
_UNCONTROLLED = {
    "matrix product (BLAS/cuBLAS order)": ("Dense", "EinsumDense", "Dot"),
    "batch statistics (mean/variance reductions)": ("BatchNormalization",),
    "normalization reductions": ("LayerNormalization", "GroupNormalization", "UnitNormalization",
                                 "RMSNormalization", "SpectralNormalization"),
    "average pooling (sum of a window or a whole map)": ("AveragePooling1D", "AveragePooling2D",
                                                         "AveragePooling3D", "GlobalAveragePooling1D",
                                                         "GlobalAveragePooling2D", "GlobalAveragePooling3D"),
    "attention (matrix products, softmax sums)": ("MultiHeadAttention", "GroupedQueryAttention", "Attention",
                                                  "AdditiveAttention"),
    _SOFTMAX: ("Softmax",),
    _TRANSCENDENTAL: ("ELU",),
    "recurrent cell (matrix products)": ("LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional", "ConvLSTM1D",
                                         "ConvLSTM2D", "ConvLSTM3D"),
}
# Layers that sum nothing (elementwise maths, data movement, exact maxima, a fixed sequence of adds): they
# leave the reach of the model's reproducibility as it is. Any other layer that is neither a convolution nor
# listed above (a custom layer, a Lambda, resizing, ...) is reported as unclassified: detconv cannot tell
# whether it sums.
_ORDER_FREE = (
    "InputLayer", "Activation", "ReLU", "LeakyReLU", "PReLU", "Add", "Subtract", "Multiply", "Maximum",
    "Minimum", "Average", "Concatenate", "Reshape", "Flatten", "Permute", "RepeatVector", "Cropping1D",
    "Cropping2D", "Cropping3D", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "UpSampling1D", "UpSampling3D",
    "MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "GlobalMaxPooling1D", "GlobalMaxPooling2D",
    "GlobalMaxPooling3D", "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianDropout",
    "GaussianNoise", "AlphaDropout", "Identity", "Masking", "Embedding", "Rescaling", "Normalization",
    "TimeDistributed",  # a reshape around its layer, which the report lists on its own
)


def _classes(names):
    """The keras.layers classes of these names that this Keras has."""
    return tuple(c for c in (getattr(keras.layers, n, None) for n in names) if isinstance(c, type))


# keras.activations' functions (by name) that sum over the channels, or that take exp/tanh/erf; the others
# (relu, relu6, leaky_relu, hard_sigmoid, hard_silu, softsign, squareplus, ...) are IEEE arithmetic, one
# rounding per operation.
_ACTIVATION_WHY = {
    **dict.fromkeys(("softmax", "log_softmax"), _SOFTMAX),
    "sparsemax": "cumulative sum (a scan's order)",
    **dict.fromkeys(("sigmoid", "tanh", "silu", "gelu", "elu", "selu", "celu", "softplus", "exponential", "mish",
                     "log_sigmoid", "glu", "tanh_shrink"), _TRANSCENDENTAL),
}


def _activation(layer):
    """(why the layer's activation argument, a convolution's too, leaves the contract's reach, or None;
    the name of a callable of the user's, which detconv cannot judge, or None)."""
    fn = getattr(layer, "activation", None)
    if fn is None or isinstance(fn, keras.layers.Layer):  # none, or a layer the report lists on its own
        return None, None
    name = getattr(fn, "__name__", "")
    if getattr(keras.activations, name, None) is not fn:
        return None, name or "?"
    return _ACTIVATION_WHY.get(name), None


class ConversionReport:
    """What ``convert`` swapped and how far the model's reproducibility reaches.

    ``swapped``: [(layer name, stock class, detconv class)]; ``detconv``: names of the layers detconv
    computes (swapped or already detconv); ``uncontrolled``: [(layer name, class, why)] for layers whose
    sums detconv does not order, which take exp/tanh/erf (an activation too) or have a LoRA update;
    ``unreplaced``: stock convolution classes that stayed stock (user subclasses, or inside a subclassed
    layer); ``unclassified``: [(layer name, class)] for layers detconv does not know (custom layers, Lambda,
    resizing, ...), which may sum in any order; ``str(report)`` is a readable summary."""

    def __init__(self, swapped, detconv, uncontrolled, unreplaced, unclassified=()):
        self.swapped, self.detconv, self.uncontrolled, self.unreplaced = swapped, detconv, uncontrolled, unreplaced
        self.unclassified = list(unclassified)

    @property
    def fully_controlled(self):
        return not self.uncontrolled and not self.unreplaced and not self.unclassified

    def __str__(self):
        lines = [f"detconv computes {len(self.detconv)} convolution layer(s); swapped {len(self.swapped)}."]
        for name, stock, det in self.swapped:
            lines.append(f"  swapped   {name}: {stock} -> detconv.keras.{det}")
        if self.unreplaced:
            lines.append("Convolutions left stock (user subclasses or inside subclassed layers):")
            lines += [f"  stock     {name}: {cls}" for name, cls in self.unreplaced]
        if self.uncontrolled:
            lines.append("Layers whose bits detconv does not fix (sums in another order, exp/tanh/erf, LoRA "
                         "updates; they may vary by device, batch, threads):")
            lines += [f"  outside   {name}: {cls} - {why}" for name, cls, why in self.uncontrolled]
        if self.unclassified:
            lines.append("Layers detconv does not know (they may sum in an order it does not control; check "
                         "them yourself):")
            lines += [f"  unknown   {name}: {cls}" for name, cls in self.unclassified]
        if not self.uncontrolled and not self.unclassified:
            lines.append("No other layer of the model sums in an order detconv does not control.")
        return "\n".join(lines)

    __repr__ = __str__


def report(model, swapped=()):
    """A ConversionReport for ``model`` as it is (``swapped`` lists what a conversion replaced)."""
    uncontrolled_classes = {c: why for why, names in _UNCONTROLLED.items() for c in _classes(names)}
    order_free, upsampling_2d = _classes(_ORDER_FREE), _classes(("UpSampling2D",))
    det, uncontrolled, unreplaced, unclassified = [], [], [], []
    layers = model._flatten_layers(include_self=False, recursive=True) if isinstance(model, keras.Model) \
        else [model]
    for layer in layers:
        if isinstance(layer, keras.Model):  # a nested model: its layers are in the list themselves
            continue
        cls, why, unknown = type(layer).__name__, [], False
        if isinstance(layer, _DET_CLASSES):
            det.append(layer.name)
        elif isinstance(layer, tuple(_STOCK_TO_DET)):
            unreplaced.append((layer.name, cls))
        else:
            known = next((w for c, w in uncontrolled_classes.items() if isinstance(layer, c)), None)
            if known is not None:
                why.append(known)
            else:  # exact classes: a subclass may compute anything
                unknown = not (type(layer) in order_free or (type(layer) in upsampling_2d and
                                                             getattr(layer, "interpolation", None) == "nearest"))
        activation, own = _activation(layer)  # any layer's activation, a convolution's included
        if activation:
            why.append(f"{activation} (its activation)")
        if unknown:
            unclassified.append((layer.name, cls))
        elif own:
            unclassified.append((layer.name, f"{cls} (its activation {own})"))
        if getattr(layer, "lora_enabled", False):  # kernel + lora_a @ lora_b, a convolution's too
            why.append(_LORA)
        if why:
            uncontrolled.append((layer.name, cls, "; ".join(why)))
    return ConversionReport(list(swapped), det, uncontrolled, unreplaced, unclassified)


def convert(model, accumulation=None, *, verbose=False):
    """Returns a copy of ``model`` with every stock convolution replaced by its detconv layer.

    ``model``: a Keras 3 Sequential or functional model (nested Sequential and
    functional models, e.g. a ``keras.applications`` backbone, are converted
    too, and so is what a ``TimeDistributed`` wraps) or a single layer. Every ``keras.layers.Conv1D``, ``Conv2D``,
    ``DepthwiseConv1D``, ``DepthwiseConv2D``, ``SeparableConv1D``,
    ``SeparableConv2D``, ``Conv3D``, ``Conv1DTranspose``, ``Conv2DTranspose``
    and ``Conv3DTranspose`` (exact class, not a user subclass) becomes the detconv layer with the same config,
    name and weights, plus ``accumulation``. Other layers are cloned with their
    weights; the original model is left untouched and shares no variables with
    the copy. detconv layers already present keep their own ``accumulation``.

    The copy's ``detconv_report`` attribute (a ConversionReport) lists what was
    swapped and which layers still sum in an order detconv does not control;
    ``verbose=True`` also prints it.
    """
    _check_accumulation(accumulation)
    if isinstance(model, keras.layers.Layer) and not isinstance(model, keras.Model):
        clone = _convert_layer(model, accumulation)
        if model.built:
            clone.build_from_config(model.get_build_config())
            clone.set_weights(model.get_weights())
        return clone
    if not _is_graph_model(model):
        raise TypeError(
            f"convert: expected a Sequential or functional keras.Model (or a layer), got "
            f"{type(model).__name__}. Subclassed models cannot be cloned layer by layer; build their "
            "convolutions from detconv.keras directly.")
    if not model.built:
        raise ValueError("convert: the model must be built (give it an Input or call it once) so its weights "
                         "can be copied.")

    pairs = []
    new_model = _convert_graph(model, accumulation, pairs)
    swapped = [(new.name, type(old).__name__, type(new).__name__) for old, new in map(_unwrapped, pairs)
               if type(old) in _STOCK_TO_DET and isinstance(new, _DET_CLASSES)]
    new_model.detconv_report = rep = report(new_model, swapped)
    if rep.unreplaced:
        warnings.warn(
            "convert: these convolution layers were not replaced (they are user subclasses of the stock "
            f"layers or live inside a subclassed layer): {[name for name, _ in rep.unreplaced]}", stacklevel=2)
    if verbose:
        print(rep)
    return new_model
